"""The indexing and sorting families beyond the table's examples: nn.Embedding modules, indices
torch refuses, gradients, in-place writes, NaN rows and --verify's index samples (the generated
kernel cases are in test_kernels.py)."""

import pytest
import torch

import torch2pypto
from helpers import sample, translate
from table_cases import load
from torch2pypto.mapping import load_table
from torch2pypto.translator.engine.translate import translate_source
from torch2pypto.translator.verification import verify
from torch2pypto.translator.verification.interpreter import counting

EMBEDDING = """\
import torch
from torch import nn


class Embed(nn.Module):
    def __init__(self, **options):
        super().__init__()
        self.embed_tokens = nn.Embedding(11, 37, **options)

    def forward(self, input_ids):
        return self.embed_tokens(input_ids)
"""


BOUNDS = "index_bounds_kernel.kernel"  # bounds the indices before the op's kernel reads by them


def _load(tmp_path, code, name):
    (tmp_path / f"{name}.py").write_text(code)
    return load(tmp_path / f"{name}.py")


def test_held_embedding_reads_its_weight_and_options_at_run_time():
    code = translate(EMBEDDING).code
    assert ("return pypto_embedding(input_ids, self.embed_tokens.weight, padding_idx=self.embed_tokens.padding_idx, "
            "max_norm=self.embed_tokens.max_norm") in code


@pytest.mark.interpreter
@pytest.mark.parametrize("options, kernels", [({}, 1), ({"padding_idx": 0}, 1), ({"max_norm": 1.0}, 0)])
def test_held_embedding_matches_the_module_and_max_norm_runs_torch(tmp_path, options, kernels):
    translated = _load(tmp_path, translate(EMBEDDING).code, "embed_pypto")
    original = {}
    exec(compile(EMBEDDING, "embed.py", "exec"), original)
    torch.manual_seed(0)
    model = translated.Embed(**options).to(torch.bfloat16)
    reference = original["Embed"](**options).to(torch.bfloat16)
    reference.load_state_dict(model.state_dict())
    ids = torch.tensor([[0, 3, 10, 3], [7, 0, 1, 2]])
    ran = counting()
    with torch2pypto.interpreted(translated), torch.no_grad():
        got = model(ids)
    assert ran() == ({BOUNDS: 1, "embedding_kernel.kernel": 1} if kernels else {})
    with torch.no_grad():
        torch.testing.assert_close(got, reference(ids))
    torch.testing.assert_close(model.embed_tokens.weight, reference.embed_tokens.weight)  # max_norm renormalised both


SNIPPET = "import torch\n\n\ndef f(x: torch.Tensor, i: torch.Tensor, y: torch.Tensor):\n    return {}\n"


@pytest.mark.interpreter
@pytest.mark.parametrize("call, index", [
    ("torch.gather(x, 1, i)", [[0, 37]]), ("torch.index_select(x, 0, i)", [-1]),
    ("torch.nn.functional.embedding(i, x)", [[7]]), ("x.index_add(0, i, y)", [7]),
])  # fmt: skip
def test_indices_out_of_range_run_torch_and_raise_its_error(tmp_path, call, index):
    module = _load(tmp_path, translate_source(SNIPPET.format(call)).code, "refused")
    x, i = sample(7, 37), torch.tensor(index)
    y = sample(i.numel(), 37)
    ran = counting()
    with torch2pypto.interpreted(module), pytest.raises((RuntimeError, IndexError)) as got:
        module.f(x, i, y)
    with pytest.raises((RuntimeError, IndexError)) as expected:
        eval(call, {"torch": torch, "x": x, "i": i, "y": y})
    assert type(got.value) is type(expected.value) and ran() == {BOUNDS: 1}  # the bounds kernel finds it


@pytest.mark.interpreter
def test_gradients_flow_through_gather_embedding_and_index_add(tmp_path):
    call = "(torch.nn.functional.embedding(i, x, padding_idx=1) * x.gather(1, i.repeat(7, 1)[:, :3])[0, 0]).sum() + x.index_add(0, i[0], y).sum()"
    module = _load(tmp_path, translate_source(SNIPPET.format(call)).code, "grads")
    x, y = sample(7, 37).requires_grad_(), sample(4, 37, seed=1).requires_grad_()
    i = torch.tensor([[1, 3, 3, 6]])
    ran = counting()
    with torch2pypto.interpreted(module):
        module.f(x, i, y).backward()
    assert {"embedding_kernel.kernel", "gather_kernel.kernel", "index_add_kernel.kernel"} <= set(ran())
    got = x.grad, y.grad
    x.grad = y.grad = None
    eval(call, {"torch": torch, "x": x, "i": i, "y": y}).backward()
    torch.testing.assert_close(got, (x.grad, y.grad))


@pytest.mark.interpreter
def test_in_place_scatter_writes_through_a_view_of_its_receiver(tmp_path):
    module = _load(tmp_path, translate_source(SNIPPET.format("x.t().scatter_(1, i, y)")).code, "inplace")
    x, i, y = sample(37, 7), torch.tensor([[3, 1], [0, 36]] * 3 + [[5, 2]]), sample(7, 2)
    expected = x.clone()
    expected.t().scatter_(1, i, y)
    ran = counting()
    with torch2pypto.interpreted(module):
        got = module.f(x, i, y)
    assert ran() == {BOUNDS: 1, "scatter__kernel.kernel": 1}
    assert got.data_ptr() == x.data_ptr() and torch.equal(x, expected)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("call, kernel", [
    ("torch.sort(x, descending=True)", "sort"), ("torch.sort(x, dim=0)", "sort"), ("torch.topk(x, 5)", "topk"),
    ("torch.topk(x, 4, largest=False)", "topk"), ("torch.argsort(x)", "argsort"),
])  # fmt: skip
def test_rows_holding_nan_and_inf_sort_on_the_kernel_as_torch(tmp_path, call, kernel, dtype):
    """NaN orders above +inf, as torch's: rows of NaN and infinities mixed, all NaN, all
    infinite, sorted on the kernel. Ties (NaN with NaN, inf with inf) may take other indices, so
    the indices are checked by the values they pick."""
    module = _load(tmp_path, translate_source(SNIPPET.format(call)).code, "nan")
    x = sample(6, 37, dtype=dtype)
    nan, inf = float("nan"), float("inf")
    x[0, [2, 30]], x[0, [5, 0]], x[1, 3] = nan, inf, -inf
    x[2, [1, 7, 36]], x[2, 4], x[2, 9] = nan, inf, -inf
    x[3], x[4, :4], x[4, 6], x[4, 8], x[5, ::2] = nan, inf, -inf, nan, -inf
    ran = counting()
    with torch2pypto.interpreted(module):
        got = module.f(x, None, None)
    assert ran() == {f"{kernel}_kernel.kernel": 1}
    expected = eval(call, {"torch": torch, "x": x})
    d = 0 if "dim=0" in call else -1
    if kernel == "argsort":
        got, expected = (x.gather(d, got),), (x.gather(d, expected),)
    else:
        torch.testing.assert_close(x.gather(d, got.indices), expected.values, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(got[0], expected[0], equal_nan=True, rtol=0, atol=0)


ROUTER = """\
import torch


def f(logits: torch.Tensor, k: int, d: int):
    values, indices = torch.topk(torch.nn.functional.softmax(logits, dim=d), k, dim=d, largest=k != 2)
    ordered, order = torch.sort(logits, dim=d, descending=True)
    return values / values.sum(dim=d, keepdim=True), indices, ordered * 2, order
"""


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_topk_and_sort_launch_with_autograd_recording_and_give_torchs_gradient(tmp_path, dtype):
    """A router's softmax, topk and renormalisation, and a sort, with grad on: the selections run
    their kernels and their values carry torch's gradient (each value's to the element its index
    names), the indices none."""
    module = _load(tmp_path, translate(ROUTER, fuse=False).code, "router")
    for shape, k, d in (((13, 37), 3, -1), ((5, 3, 8), 2, 1), ((7, 64), 1, -1)):
        # distinct along d in bfloat16 too, as their softmax: torch and PyPTO may order ties unlike
        logits = (torch.rand(shape, generator=torch.Generator().manual_seed(0)).argsort(dim=d) / 8).to(dtype).requires_grad_()
        expected = run_router(lambda *a: f_torch(*a), logits, k, d)
        ran = counting()
        with torch2pypto.interpreted(module):
            got = run_router(module.f, logits, k, d)
        assert ran()["topk_kernel.kernel"] == 1 and ran()["sort_kernel.kernel"] == 1, ran()
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape
            torch.testing.assert_close(g, e)


def f_torch(logits, k, d):
    namespace = {}
    exec(ROUTER, namespace)
    return namespace["f"](logits, k, d)


def run_router(f, logits, k, d):
    """f's results, then the gradient of a weighted sum of its float results with respect to logits."""
    results = f(logits, k, d)
    assert not results[1].requires_grad and not results[3].requires_grad
    weights = [sample(*r.shape, dtype=r.dtype, seed=i + 1) for i, r in enumerate(results)]
    (gradient,) = torch.autograd.grad(sum((r * w).sum() for r, w in zip(results, weights) if r.is_floating_point()), logits)
    return (*(r.detach() for r in results), gradient)


def test_verify_samples_indices_in_range_along_the_calls_dim():
    table = load_table()
    for call in ["torch.gather(x, 0, i)", "x.index_select(-1, i)", "torch.nn.functional.embedding(i, x)",
                 "x.scatter(0, i, y)", "x.index_add(1, i, y)"]:  # fmt: skip
        translation = translate_source(SNIPPET.format(call))
        entry = table.by_api[translation.conversions[0].record.api]
        cases = verify.cases(translation.conversions[0], "0")
        shapes = {tuple(c.label.split(" ", 2)[2:]) for c in cases}
        assert len(cases) == len(entry.dtypes) * len(shapes) and shapes, (call, shapes)
        for case in cases:  # every sample has the call's dim: torch takes each case
            eval(entry.apis[0], {"torch": torch})(*case.args, *case.kwargs.values())


REDUCE = "import torch\n\n\ndef f(x: torch.Tensor, dim, i, src, reduce):\n    return torch.scatter(x, dim, i, src, reduce=reduce), x.clone().scatter_(dim, i, src, reduce=reduce)\n"


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    return _load(tmp_path_factory.mktemp("reduce"), translate_source(REDUCE).code, "reduce")


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dim, reduce, number", [(1, "add", False), (0, "multiply", False), (-1, "add", True), (0, None, True)])
def test_scatter_reduces_repeated_indices_and_takes_a_number_as_torch(reduced, dtype, dim, reduce, number):
    x = sample(7, 37, dtype=dtype)
    i = torch.randint(0, x.shape[dim], (7, 5) if dim else (3, 37), generator=torch.Generator().manual_seed(1))  # repeats
    src = -1.5 if number else sample(*i.shape, dtype=dtype, positive=reduce == "multiply", seed=2)
    ran = counting()
    with torch2pypto.interpreted(reduced):
        got = reduced.f(x, dim, i, src, reduce)
    assert ran() == {BOUNDS: 2, "scatter_kernel.kernel": 1, "scatter__kernel.kernel": 1}
    expected = torch.scatter(x, dim, i, src, **({"reduce": reduce} if reduce else {}))
    torch.testing.assert_close(got, (expected, expected))


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype, src, reduce", [
    (torch.float16, 1e6, None), (torch.float32, True, None),  # beyond float16; a bool
    (torch.float32, 2.0, "mean"),  # not a scatter reduce (torch raises)
    (torch.int64, 3, "add"),  # not a kernel dtype
])  # fmt: skip
def test_scatter_runs_torch_on_what_its_kernel_does_not_take(reduced, dtype, src, reduce):
    x, i = sample(3, 8).to(dtype), torch.tensor([[0, 2], [7, 7], [1, 1]])
    ran = counting()
    try:
        expected = torch.scatter(x, 1, i, src, **({"reduce": reduce} if reduce else {}))
    except RuntimeError as exc:
        with torch2pypto.interpreted(reduced), pytest.raises(RuntimeError, match=str(exc)[:30]):
            reduced.f(x, 1, i, src, reduce)
    else:
        with torch2pypto.interpreted(reduced):
            got = reduced.f(x, 1, i, src, reduce)
        torch.testing.assert_close(got, (expected, expected))
    assert ran() == {}


@pytest.mark.interpreter
def test_a_scatter_reduce_under_autograd_runs_torch_which_has_no_gradient(reduced):
    x, i = sample(3, 8).requires_grad_(), torch.tensor([[0, 2], [7, 7], [1, 1]])
    ran = counting()
    with torch2pypto.interpreted(reduced):
        got = reduced.f(x, 1, i, 2.0, "add")[0]  # torch: no kernel
        number = reduced.f(x, 1, i, 2.0, None)[0]  # no reduce: the kernel, torch's gradient
    assert ran() == {BOUNDS: 1, "scatter_kernel.kernel": 1}
    with pytest.raises(RuntimeError, match="derivative for aten::scatter is not implemented"):
        got.sum().backward()
    (number * torch.arange(24.0).reshape(3, 8)).sum().backward()
    expected = torch.arange(24.0).reshape(3, 8).scatter(1, i, 0.0)
    torch.testing.assert_close(x.grad, expected)


@pytest.mark.interpreter
@pytest.mark.parametrize("call", ["torch.gather(x, 1, i)", "torch.index_select(x, 1, i[0])", "torch.nn.functional.embedding(i, x)"])
def test_integer_data_is_indexed_by_a_kernel_but_gather_of_int64_runs_torch(tmp_path, call):
    module = _load(tmp_path, translate_source(SNIPPET.format(call)).code, "integers")
    i = torch.randint(0, 7, (7, 4), generator=torch.Generator().manual_seed(3))
    for dtype in (torch.int32, torch.int64):
        x = torch.randint(-2**31, 2**31 - 1, (7, 37), dtype=dtype)
        ran = counting()
        with torch2pypto.interpreted(module):
            got = module.f(x, i, None)
        gathered_int64 = call.startswith("torch.gather") and dtype == torch.int64  # pypto 0.2.0: FC0001, dtype not supported
        assert sum(ran().values()) == (0 if gathered_int64 else 2), (dtype, ran())  # the bounds kernel and the op's
        expected = eval(call, {"torch": torch, "x": x, "i": i})
        assert got.dtype == dtype and torch.equal(got, expected)
