"""The movement, triangle and one_hot families beyond their generated cases (test_kernels.py):
entries they refuse, one kernel per tensor count, gradients."""

import importlib.util
import re

import pytest
import torch

import torch2pypto
from torch2pypto import translate_source
from torch2pypto.mapping import TableError, build_table, samples
from torch2pypto.translator.verification import interpreter, verify

CAT = {"category": "same-name-different-params", "family": "movement", "apis": ["torch.cat"], "pypto": "assemble",
       "signature": "(tensors: Tensors, dim: int = 0)", "args": {"layout": "cat"}, "dtypes": ["float32"],
       "examples": {"convert": ["torch.cat([x, y])"]}}  # fmt: skip
TRIL = {"category": "composite", "family": "triangle", "apis": ["torch.tril"], "pypto": "le+where",
        "signature": "(input: Tensor, diagonal: int = 0)", "args": {"keep": "le"}, "dtypes": ["float32"],
        "examples": {"convert": ["torch.tril(x)"]}}  # fmt: skip


@pytest.mark.parametrize(
    "op, body, message",
    [
        ("cat", {**CAT, "args": {"layout": "zip"}}, "args.layout is one of cat, stack"),
        ("cat", {**CAT, "pypto": "concat"}, "not pypto.concat"),
        ("cat", {**CAT, "signature": "(tensors: Tensors, dim: int = 0, scale: Number = 1.0)"}, "a cat takes (tensors, dim)"),
        ("cat", {**CAT, "dtypes": ["int32"]}, "movement kernels take float dtypes"),
        ("tril", {**TRIL, "args": {"keep": "lt"}}, 'keep = "le"'),
        ("tril", {**TRIL, "pypto": "tril"}, '"le+where"'),
        ("one_hot", {**{k: v for k, v in TRIL.items() if k != "args"}, "family": "one_hot", "pypto": "one_hot"}, "(input, num_classes)"),
    ],
)
def test_an_entry_these_families_cannot_honour_is_refused(op, body, message):
    with pytest.raises(TableError, match=re.escape(message)):
        build_table({op: body})


def test_each_tensor_count_has_its_wrapper_and_kernel():
    code = "import torch\n\n\ndef f(a, b, c):\n    return torch.cat([a, b], -1), torch.cat((a, b, c)), torch.stack([a, b])\n"
    out = translate_source(code).code
    assert "pypto_cat2([a, b], dim=-1), pypto_cat3((a, b, c)), pypto_stack2([a, b])" in out
    assert out.count("def join2_kernel(") == 1 and "def join3_kernel(" in out
    assert "x2: pypto.Tensor([pypto.DYNAMIC, widths[2]], dtype)" in out and "torch.cat(" in out  # the fallback


def _load(tmp_path, source):
    path = tmp_path / "moved.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("moved", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.interpreter
def test_gradients_flow_through_every_tensor_of_a_join_and_a_move(tmp_path):
    code = ("import torch\nimport torch.nn.functional as F\n\n\ndef f(x: torch.Tensor, y: torch.Tensor):\n"
            "    return torch.cat([x, y], -1) * 2 + torch.stack((y, x), -1).flatten(-2), F.pad(x, (1, 2), value=3.0), x.tril(1)\n")
    module = _load(tmp_path, translate_source(code).code)
    x, y = torch.randn(5, 19, requires_grad=True), torch.randn(5, 19, requires_grad=True)
    upstream = [torch.randn(5, 38), torch.randn(5, 22), torch.randn(5, 19)]
    launched = interpreter.counting()
    with torch2pypto.interpreted(module):
        got = module.f(x, y)
    assert sum(launched().values()) == 6, launched()  # cat, stack, pad, tril and the operators * and +
    sum((g * u).sum() for g, u in zip(got, upstream)).backward()
    grads = x.grad, y.grad
    x.grad = y.grad = None
    namespace = {}
    exec(code, namespace)
    expected = namespace["f"](x, y)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    sum((e * u).sum() for e, u in zip(expected, upstream)).backward()
    torch.testing.assert_close(grads, (x.grad, y.grad))


def test_a_join_of_a_run_time_count_has_one_wrapper_for_any_length():
    code = ("import torch\n\n\ndef f(a, b, xs):\n    return (torch.cat(xs, -1), torch.stack([*xs, a]), torch.cat([a] * 33),\n"
            "            torch.concat(tuple(x for x in xs), dim=1), torch.cat([a, b]))\n")
    out = translate_source(code).code
    assert ("pypto_cat(xs, dim=-1), pypto_stack([*xs, a]), pypto_cat([a] * 33),\n"
            "            pypto_cat(tuple(x for x in xs), dim=1), pypto_cat2([a, b])") in out
    assert all(f"def join{n}_kernel(" in out for n in (1, 2, 4, 8)) and "def join3_kernel(" not in out
    assert translate_source(out).code == out  # a wrapper's call is a converted site, left as it is
    refused = translate_source("import torch\n\n\ndef f():\n    return torch.cat([]), torch.stack(())\n").records
    assert [r.reason for r in refused] == ["no tensors: torch.cat raises", "no tensors: torch.stack raises"]


JOINS = "import torch\n\n\ndef cat(xs, dim):\n    return torch.cat(xs, dim)\n\n\ndef stack(xs, dim):\n    return torch.stack(xs, dim)\n"


@pytest.fixture(scope="module")
def joins(tmp_path_factory):
    return _load(tmp_path_factory.mktemp("joins"), translate_source(JOINS).code)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("count, launches", [(1, {1: 1}), (3, {2: 1, 1: 1}), (15, {8: 1, 4: 1, 2: 1, 1: 1})])
def test_a_list_joins_in_launches_of_8_4_2_and_1_tensors(joins, count, launches, dtype):
    g = torch.Generator().manual_seed(count)
    widths = [1 + (5 * k) % 23 for k in range(count)]  # unaligned, mixed
    cats = [torch.randn(3, w, 5, generator=g).to(dtype) for w in widths]
    stacks = [torch.randn(7, 19, generator=g).to(dtype) for _ in range(count)]
    ran = interpreter.counting()
    with torch2pypto.interpreted(joins):
        got = joins.cat(cats, -2), joins.stack(tuple(stacks), 1)
    assert ran() == {f"join{n}_kernel.kernel": 2 * k for n, k in launches.items()}, ran()
    assert torch.equal(got[0], torch.cat(cats, -2)) and torch.equal(got[1], torch.stack(stacks, 1))


@pytest.mark.interpreter
@pytest.mark.parametrize("make, raises", [
    (lambda x: [x, x.double()], False),  # torch promotes: its call
    (lambda x: [x, x.half(), x.bfloat16()], False),
    (lambda x: [x, x[:, :3]], True),  # sizes torch refuses
    (lambda x: (t for t in [x, x]), True),  # no list or tuple: torch raises, not the wrapper
    (lambda x: [], True),
    (lambda x: [x, x.numpy()], True),
    (lambda x: [x[:0], x[:0]], False),  # empty tensors
])  # fmt: skip
def test_a_list_the_kernels_cannot_join_runs_torch(joins, make, raises):
    x = torch.randn(4, 9)
    ran = interpreter.counting()
    for fn, torch_fn in ((joins.cat, torch.cat), (joins.stack, torch.stack)):
        if raises:
            with pytest.raises(Exception) as got, torch2pypto.interpreted(joins):
                fn(make(x), 0)
            with pytest.raises(Exception) as expected:
                torch_fn(make(x), 0)
            assert type(got.value) is type(expected.value) and str(got.value) == str(expected.value)
            continue
        with torch2pypto.interpreted(joins):
            got = fn(make(x), 0)
        expected = torch_fn(make(x), 0)
        assert got.dtype == expected.dtype and torch.equal(got, expected)
    assert ran() == {}


def test_a_list_joins_on_torch_off_the_kernel_path(joins):
    xs = [torch.randn(2, 3) for _ in range(5)]
    ran = interpreter.counting()
    assert torch.equal(joins.cat(xs, 1), torch.cat(xs, 1)) and ran() == {}


@pytest.mark.interpreter
def test_gradients_flow_through_every_tensor_of_a_list(joins):
    xs = [torch.randn(3, 5 + k, requires_grad=True) for k in range(3)]
    upstream = torch.randn(3, 18)
    ran = interpreter.counting()
    with torch2pypto.interpreted(joins):
        got = joins.cat(xs, -1)
    assert ran() == {"join2_kernel.kernel": 1, "join1_kernel.kernel": 1}
    (got * upstream).sum().backward()
    grads = [x.grad for x in xs]
    for x in xs:
        x.grad = None
    (torch.cat(xs, -1) * upstream).sum().backward()
    assert got.requires_grad and all(torch.equal(g, x.grad) for g, x in zip(grads, xs))


CACHE = "import torch\n\n\ndef update(keys, states):\n    return torch.cat([keys, states], dim=-2)\n"


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cat_skips_an_empty_1d_tensor_as_torch_on_the_kernel(tmp_path, joins, dtype):
    """torch.cat skips empty 1-D tensors whatever their dim (a DynamicCache's keys start as
    torch.tensor([])), and an empty tensor of the others' shape adds nothing: the kernel reads
    nothing of them (the first tensor joined is handed in their place), in the literal and the
    run-time count forms; where none is joined, or torch refuses the sizes, torch runs."""
    g = torch.Generator().manual_seed(0)
    empty = torch.tensor([], dtype=dtype)
    keys, values = (torch.randn(2, 3, n, 5, generator=g).to(dtype) for n in (7, 1))  # odd, unaligned
    cache = _load(tmp_path, translate_source(CACHE).code)
    ran = interpreter.counting()
    with torch2pypto.interpreted(cache):
        got = cache.update(empty, keys), cache.update(keys, empty)
    assert ran() == {"join2_kernel.kernel": 2}, ran()
    assert all(torch.equal(t, keys) and t.data_ptr() != keys.data_ptr() for t in got)
    for tensors, launches in [([keys, empty, values], {2: 1, 1: 1}), ([empty, empty, values], {2: 1, 1: 1}),
                              ([keys] * 4 + [empty] * 2, {4: 1, 2: 1}), ([empty, empty, keys[:, :, :1, :1]], {2: 1, 1: 1}),
                              ([empty, empty], {}), ([keys, keys[:, :, :0], values], {2: 1, 1: 1}),  # phi3's empty pass
                              ([keys, keys[:, :1, :0]], {})]:  # sizes torch refuses
        ran = interpreter.counting()
        try:
            expected = torch.cat(tensors, -2)
        except RuntimeError as exc:
            with torch2pypto.interpreted(joins), pytest.raises(RuntimeError, match=re.escape(str(exc))):
                joins.cat(tensors, -2)
        else:
            with torch2pypto.interpreted(joins):
                got = joins.cat(tensors, -2)
            assert got.dtype == expected.dtype and torch.equal(got, expected)
        assert ran() == {f"join{n}_kernel.kernel": k for n, k in launches.items()}, (len(tensors), ran())


def test_verify_samples_a_list_of_a_run_time_length():
    translation = translate_source("import torch\n\n\ndef f(xs, a):\n    return torch.cat(xs, -1), torch.stack([a, a])\n")
    listed, literal = (verify.cases(c, str(k)) for k, c in enumerate(translation.conversions))
    assert {len(case.args[0]) for case in listed} == {samples.LIST_LENGTH} and {len(case.args[0]) for case in literal} == {2}
