"""Operators on tensors are sites: ``a + b``, ``2 - x``, ``-x``, ``x < y``, ``x += y`` are the tensor
methods Python runs for them, converted to their entries' wrappers (issue 18, points 1 and 2).
The table's examples (``x + y``, ``2 - x``...) are run by test_calls.py and test_kernels.py."""

import pytest
import torch

import torch2pypto
from helpers import run, sample, statuses, translate
from table_cases import load
from torch2pypto.translator.verification.interpreter import counting

DEF = "def f(x: torch.Tensor, y: torch.Tensor, n: int, u):\n"
HEAD = "import torch\n\n\n" + DEF


def body(code: str) -> str:
    return HEAD + "".join(f"    {line}\n" for line in code.splitlines())


def sites(code: str, **kwargs) -> list[tuple[str, str]]:
    return statuses(body(code), fuse=False, **kwargs)


def rewritten(code: str, **kwargs) -> str:
    """The translated function body, dedented."""
    out = translate(body(code), fuse=False, **kwargs).code
    return "\n".join(line[4:] for line in out[out.index(DEF) + len(DEF):].splitlines())


@pytest.mark.parametrize(
    "expression, api",
    [
        ("x + y", "torch.Tensor.__add__"),
        ("x + 1", "torch.Tensor.__add__"),
        ("1.5 + x", "torch.Tensor.__radd__"),
        ("x - n", "torch.Tensor.__sub__"),
        ("2 - x", "torch.Tensor.__rsub__"),
        ("x * y", "torch.Tensor.__mul__"),
        ("0.5 * x", "torch.Tensor.__rmul__"),
        ("x / 2", "torch.Tensor.__truediv__"),
        ("1 / x", "torch.Tensor.__rtruediv__"),
        ("x ** 2", "torch.Tensor.__pow__"),
        ("x @ y", "torch.Tensor.__matmul__"),
        ("-x", "torch.Tensor.__neg__"),
        ("~(x > 0)", "torch.Tensor.__invert__"),
        ("x < y", "torch.Tensor.__lt__"),
        ("2 < x", "torch.Tensor.__gt__"),
        ("x == 0", "torch.Tensor.__eq__"),
        ("0 != x", "torch.Tensor.__ne__"),
        ("x // 2", "torch.Tensor.__floordiv__"),
        ("x % 2", "torch.Tensor.__mod__"),
        ("(x > 0) & (y > 0)", "torch.Tensor.__and__"),
        ("x ** u", "torch.Tensor.__pow__"),
    ],
)
def test_an_operator_on_a_tensor_is_the_method_python_runs(expression, api):
    found = sites(f"return {expression}")
    assert found[0][0] == api and found[0][1] in ("converted", "unsupported")


def test_operators_of_no_known_tensor_are_no_sites():
    assert sites("a = n + 1\nb = x.shape[0] * 2\nc = -n\nd = n < 3\ne = u + n\nf = u - u\nreturn not x, +x") == []


def test_equality_of_a_tensor_or_none_is_no_site_as_none_compares_in_python():
    # None == n is Python's bool, where pypto_eq(None, n) would raise; None < n raises either way.
    # moshi: the second translation took pypto_ne(m, n) for a tensor and made m's x[mask] a site
    code = body("m = None\nif n:\n    m = x * 2\nmask = m != u\nreturn y[mask], m < u")
    assert sites(code) == [("torch.Tensor.__mul__", "converted"), ("torch.Tensor.__lt__", "converted")]
    once = translate(code, fuse=False)
    assert translate(once.code, fuse=False).code == once.code


def test_an_unknown_operand_whose_method_runs_first_is_ambiguous():
    assert sites("return u @ x") == [("torch.Tensor.__matmul__", "left-alone")]
    assert sites("return u @ x", assume_tensors=True) == [("torch.Tensor.__matmul__", "converted")]
    assert sites("a = u + u\nb = n + u\nreturn n + 1", assume_tensors=True) == [  # n: an int
        ("torch.Tensor.__add__", "converted"), ("torch.Tensor.__radd__", "converted")]
    assert sites("return x + u") == [("torch.Tensor.__add__", "converted")]  # x's method runs first


def test_an_operator_no_table_entry_computes_stays_torch_with_its_reason():
    code = "a = 2 // x\nb = x % y\nreturn a, b"
    reasons = {r.api: r.reason for r in translate(body(code), fuse=False).records}
    assert reasons["torch.Tensor.__rfloordiv__"] == "not in the mapping table"
    assert "fails to compile" in reasons["torch.Tensor.__mod__"]
    assert rewritten(code) == code


@pytest.mark.parametrize(
    "code, expected",
    [
        ("return x + y * 2", "return pypto_add(x, pypto_mul(y, 2))"),
        ("return (x + y) * 2", "return pypto_mul(pypto_add(x, y), 2)"),
        ("return -(x - 1) ** 2", "return pypto_neg(pypto_pow(pypto_sub(x, 1), 2))"),
        ("return 2 - x", "return pypto_rsub(x, 2)"),
        ("return 1.5 + x", "return pypto_add(x, 1.5)"),
        ("return 2 < x", "return pypto_gt(x, 2)"),
        ("return x @ y @ y", "return pypto_matmul(pypto_matmul(x, y), y)"),
        ("return torch.exp(x) + (1, 2)[0]", "return pypto_add(pypto_exp(x), (1, 2)[0])"),
        ("return x ** u", "return pypto_pow(x, u)"),
        ("z = [x + 1 for _ in range(2)]  # kept\nreturn z", "z = [pypto_add(x, 1) for _ in range(2)]  # kept\nreturn z"),
        ("return (x  # a comment\n        + y)", "return (pypto_add(x  # a comment\n        , y))"),
        ("return f'{x + 1}'", "return f'{x + 1}'"),
    ],
)
def test_operators_rewrite_in_place_with_their_parentheses_and_comments(code, expected):
    assert rewritten(code) == expected


@pytest.mark.parametrize(
    "code, expected",
    [
        ("x += y\nreturn x", "x = pypto_add_(x, y)\nreturn x"),
        ("x -= 1  # step\nreturn x", "x = pypto_sub_(x, 1)  # step\nreturn x"),
        ("x *= y + 1\nreturn x", "x = pypto_mul_(x, pypto_add(y, 1))\nreturn x"),
        ("x /= 2\nreturn x", "x = pypto_div_(x, 2)\nreturn x"),
        ("x **= 2\nreturn x", "x **= 2\nreturn x"),
        ("x[0] += 1\nreturn x", "x[0] = pypto_add_(x[0], 1)\nreturn x"),
        ("x[:, n : n + 2] *= y  # cols\nreturn x", "x[:, n : n + 2] = pypto_mul_(x[:, n : n + 2], y)  # cols\nreturn x"),
        ("x[y > 0] += 1\nreturn x", "x[pypto_gt(y, 0)] += 1\nreturn x"),
        ("x[g()] -= 1\nreturn x", "x[g()] -= 1\nreturn x"),
        ("t = 0.0\nt += x\nreturn t", "t = 0.0\nt += x\nreturn t"),
    ],
)
def test_augmented_assignments_write_into_the_receiver(code, expected):
    assert rewritten(code) == expected


def test_augmented_assignment_reasons():
    records = {r.api: r for r in translate(body("x[y > 0] += 1\nx **= 2\nt = 0\nt += x\nreturn x"), fuse=False).records}
    assert "indexes by a tensor" in records["torch.Tensor.__iadd__"].reason  # x[t] = ... would gather x[t] as a site
    assert "no in-place form" in records["torch.Tensor.__radd__"].reason  # t is rebound to a new tensor
    assert records["torch.Tensor.__ipow__"].reason == "not in the mapping table"


def test_a_second_translation_changes_nothing_and_counts_the_same_sites():
    code = body("a = x + y * 2\nb = 2 - a\nx += b\nc = -(a @ y) < 0\nreturn a, b, ~c, x ** 2")
    once = translate(code, fuse=False)
    twice = translate(once.code, fuse=False)
    assert twice.code == once.code
    assert [r.status for r in twice.records] == [r.status for r in once.records] == ["converted"] * 9


def test_translated_operators_compute_what_torch_does_on_cpu():
    code = body("a = x + y * 2\nb = 2 - a\nx += b\nc = 1 / (a.abs() + 1) < 0.5\nreturn a, b, ~c, x ** 2, 3 * x")
    args = dict(x=sample(3, 8), y=sample(8, seed=1), n=2, u=None)
    expected = run(code)["f"](**{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()})
    got = run(translate(code).code)["f"](**args)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e)


def test_operators_in_a_fused_region_are_the_region_s_sites():
    code = body("h = x * torch.sigmoid(x)\ng = h + y\nreturn g - 1")
    translation = translate(code)
    assert len(translation.regions) == 1 and "pypto_add(" not in translation.code
    assert [(r.api, r.pypto_api.endswith("(fused)")) for r in translation.records] == [
        ("torch.Tensor.__mul__", True), ("torch.sigmoid", True), ("torch.Tensor.__add__", True), ("torch.Tensor.__sub__", True),
    ]  # fmt: skip
    again = translate(translation.code)
    assert again.code == translation.code and len(again.records) == 4


@pytest.mark.interpreter
def test_operators_launch_kernels_and_match_torch(tmp_path):
    """Broadcast, a number on the left, a bool comparison and its inversion, in-place aliasing."""
    code = body("v = x\nx += y\na = 2 - x * y\nm = ~(a < 0.5)\nreturn v, x, a, m, 0.5 * a")
    (tmp_path / "operators_pypto.py").write_text(translate(code, fuse=False).code)
    module = load(tmp_path / "operators_pypto.py")
    x, y = sample(5, 40, dtype=torch.bfloat16), sample(40, seed=1, dtype=torch.bfloat16)
    expected = run(code)["f"](x.clone(), y, 0, None)
    launched = counting()
    with torch2pypto.interpreted(module):
        got = module.f(x, y, 0, None)
    assert sum(launched().values()) == 6  # add_, mul, rsub, lt, bitwise_not, mul
    assert got[0] is got[1] is x  # x += y wrote into x: v still aliases it
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e)


@pytest.mark.interpreter
def test_an_item_s_augmented_assignment_writes_through_its_view_and_its_copy(tmp_path):
    """x[i] op= y is x[i] = f(x[i], y): a basic index's view takes the in-place result, which
    aliases x as torch's does; an advanced index's copy is written back by __setitem__."""
    code = body("v = x[0]\nx[0] += y\nx[:, 1:3] *= 2\nx[[1, 2]] -= 1\nreturn v, x")
    (tmp_path / "items_pypto.py").write_text(translate(code, fuse=False).code)
    module = load(tmp_path / "items_pypto.py")
    x, y = sample(4, 37), sample(37, seed=1)
    expected = run(code)["f"](x.clone(), y, 0, None)
    launched = counting()
    with torch2pypto.interpreted(module):
        got = module.f(x, y, 0, None)
    assert sum(launched().values()) == 3
    assert got[1] is x and got[0]._base is x  # written into x, and v still views it
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize(
    "code",
    [
        "a = torch.stack([x, y])\na *= u.unsqueeze(0)\na *= u.unsqueeze(1)\nreturn a",  # esm: a value of no known kind
        "s = x @ y\ns /= 2.0\nreturn torch.softmax(s + u, -1)",  # falcon: a number
        "e = torch.clone(x)\nif n:\n    e += u.exp()\nif n > 1:\n    e += u.exp()\ne /= n\nreturn e",  # roc_bert
        "b = u.f()\nb += x * y\nb.clip_(min=0.0, max=1.0)\nreturn b",  # rt_detr: b may be a number
        "e = torch.clone(x)\nif n:\n    e += x\nif n > 1:\n    e += y\nreturn e\ne = u.f()",  # roc_bert: e unknown elsewhere
    ],
)
def test_augmented_assignments_decide_alike_in_a_second_translation(code):
    """x op= v is x = x op v for what x holds after it (it was v's kind alone, so that a converted
    one, a call that binds nothing, made a later use of x decide otherwise a second time)."""
    once = translate(body(code))
    assert translate(once.code).code == once.code


def test_a_fused_region_takes_no_operator_site_as_a_number():
    """efficientloftr: ``x == u`` (u of no known kind) was a leaf of the region, read as a number
    at run time, while its site was rewritten too: two edits over one text, invalid Python."""
    code = body("m = x * (x == u) * (x == n)\nm = m * x\nreturn m.exp()")
    once = translate(code)
    compile(once.code, "snippet.py", "exec")
    assert translate(once.code).code == once.code


def test_under_assume_tensors_operands_of_no_known_kind_are_tensors():
    """As receivers are: so that a converted v.pow(2) (pypto_pow(v, 2), a tensor) decides alike in
    a second translation."""
    for code in ("def f(v, t):\n    return t.exp(v) + v.pow(2)\n", "def g(v):\n    y += x\n    y = x.float()\n"):
        once = translate("import torch\n\n\n" + code, assume_tensors=True)
        assert translate(once.code, assume_tensors=True).code == once.code


@pytest.mark.interpreter
@pytest.mark.parametrize("shape", [(5, 40), (3, 7, 9)])
def test_mask_operators_launch_on_bool_tensors_and_integers_run_torch(tmp_path, shape):
    """``& | ^`` of bool masks are logical_and, its De Morgan or and ne (PyPTO's bitwise ops fail
    to compile); on integer tensors the wrappers run torch's bitwise ops, a number stays torch."""
    code = body("a = x > 0\nb = y < 0.5\nc = (a & b) | (a ^ ~b)\na &= b\nreturn c, a, n & y.int(), a ^ True")
    translation = translate(code, fuse=False)
    assert [r.api for r in translation.records if r.status != "converted"] == ["torch.Tensor.__xor__"]
    (tmp_path / "masks_pypto.py").write_text(translation.code)
    module = load(tmp_path / "masks_pypto.py")
    x, y = sample(*shape), sample(*shape, seed=1)
    expected = run(code)["f"](x, y, torch.arange(shape[-1], dtype=torch.int32), None)
    launched = counting()
    with torch2pypto.interpreted(module):
        got = module.f(x, y, torch.arange(shape[-1], dtype=torch.int32), None)
    assert sum(launched().values()) == 8  # gt, lt, bitwise_not, bitwise_and, bitwise_xor, bitwise_or, bitwise_and_, y.int()
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e)


def test_a_power_of_a_base_of_no_known_kind_is_decided():
    """``u ** x`` runs ``u.__pow__(x)`` or ``x.__rpow__(u)``: torch.pow(u, x) either way, which
    pow's wrapper computes as rpow when u is a number at run time; so does ``u - x`` (rsub)."""
    assert sites("a = u ** x\nb = 2.0 ** x\nc = u - x\nreturn a, b, c") == [
        ("torch.Tensor.__pow__", "converted"), ("torch.Tensor.__rpow__", "converted"), ("torch.Tensor.__sub__", "converted")]
    assert rewritten("return u ** x") == "return pypto_pow(u, x)"


def test_a_commutative_op_of_a_left_operand_of_no_known_kind_is_decided():
    """``u * x`` runs ``u.__mul__(x)`` or ``x.__rmul__(u)``: torch.mul(u, x) either way, which mul's
    wrapper runs when u is no tensor at run time (MoE's ``self.act_fn(gate) * up``); so does add.
    A remainder has no swapped op: it stays ambiguous."""
    assert sites("a = u * x\nb = u + x\nc = u % x\nreturn a, b, c") == [
        ("torch.Tensor.__mul__", "converted"), ("torch.Tensor.__add__", "converted"), ("torch.Tensor.__mod__", "left-alone")]
    assert rewritten("return u * x") == "return pypto_mul(u, x)"
    assert rewritten("return u + x") == "return pypto_add(u, x)"


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_commutative_op_of_a_number_or_a_tensor_launches_or_runs_torch(tmp_path, dtype):
    """``u * x + u`` of a ``u`` known only at run time: a tensor launches the kernels, a number runs
    torch's function, as Python's operators would (its dtype, its values); the add takes it as a constant."""
    code = body("return u * x + u")
    (tmp_path / "commutative_pypto.py").write_text(translate(code, fuse=False).code)
    module = load(tmp_path / "commutative_pypto.py")
    for rows, cols in ((3, 37), (1, 64)):
        x = sample(rows, cols, dtype=dtype)
        for u, launches in ((x.flip(0) + 0.5, 2), (sample(cols, dtype=dtype, seed=2), 2), (3, 1), (0.25, 1)):  # a number: torch.mul, then the add kernel
            expected = run(code)["f"](x, x, 0, u)
            launched = counting()
            with torch2pypto.interpreted(module):
                got = module.f(x, x, 0, u)
            assert sum(launched().values()) == launches, u
            assert got.dtype == expected.dtype and got.shape == expected.shape
            torch.testing.assert_close(got, expected)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_powers_of_a_number_launch_rpow_and_match_torch(tmp_path, dtype):
    """RoPE's ``base ** (arange / dim)`` of a base known only at run time, a number or a tensor;
    ``2 ** x``; a base of zero or below, or not finite, runs torch."""
    code = body("e = x / 7\na = u ** e\nb = 2 ** x\nc = u - e\nreturn a, b, c")
    (tmp_path / "powers_pypto.py").write_text(translate(code, fuse=False).code)
    module = load(tmp_path / "powers_pypto.py")
    x = sample(3, 37, dtype=dtype)
    for base, launches in ((10000.0, 4), (500, 4), (x.abs() + 0.5, 4), (-2.0, 3), (0.0, 3), (float("inf"), 3)):
        expected = run(code)["f"](x, x, 0, base)
        launched = counting()
        with torch2pypto.interpreted(module):
            got = module.f(x, x, 0, base)
        assert sum(launched().values()) == launches, base  # div, pow or rpow, rpow, sub or rsub; torch's rpow
        # not c = inf - e: a kernel constant of inf saturates to FP32's max in PyPTO 0.2.0's interpreter (x + inf too)
        for g, e in zip(got, expected) if not isinstance(base, float) or base < float("inf") else zip(got[:2], expected[:2]):
            assert g.dtype == e.dtype and g.shape == e.shape
            torch.testing.assert_close(g, e, equal_nan=True, rtol=2e-5 if dtype == torch.float32 else None,
                                       atol=1e-5 if dtype == torch.float32 else None)


def test_an_item_by_a_tensor_index_is_a_site():
    """``x[y]`` of tensors runs ``x.__getitem__(y)``, a gather (MoE's ``hidden_states[perm // k]``);
    an item by a number, slices, a tuple, a write and a value of no known kind are no sites."""
    code = "a = x[y // n]\nb = x[0]\nc = x[:, y]\nd = x[n]\ne = u[y]\nx[y] = a\nreturn a, b, c, d, e"
    assert sites(code) == [("torch.Tensor.__getitem__", "converted"), ("torch.Tensor.__floordiv__", "converted")]
    assert rewritten("return x[y] * 2") == "return pypto_mul(pypto_getitem(x, y), 2)"
    once = translate(body("z = x[y]\nreturn z.view(-1), z.dim()"), fuse=False)
    twice = translate(once.code, fuse=False)  # the wrapper's result is a tensor: its view stays a site
    assert twice.code == once.code and [(r.api, r.status) for r in twice.records if r.api.endswith("view")] == [
        (r.api, r.status) for r in once.records if r.api.endswith("view")] != []


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_item_by_an_integer_tensor_launches_and_others_run_torch(tmp_path, dtype):
    """Integer indices of any shape launch index_select on dim 0 (int32 too); a bool mask, a 0-dim
    index (torch's item is a view of x), a negative index run torch. The gradient is torch's."""
    code = body("return x[y]")
    (tmp_path / "items_pypto.py").write_text(translate(code, fuse=False).code)
    module = load(tmp_path / "items_pypto.py")
    for shape in ((13, 37), (5, 3, 64), (9,)):
        x = sample(*shape, dtype=dtype)
        rows = shape[0]
        # launches: the bounds kernel, then the gather; a negative index fails the bounds
        indices = ((torch.arange(rows * 2) * 7 % rows, 2), (torch.tensor([[2, 0], [1, 2]]).int(), 2),
                   (torch.arange(rows) % 2 == 0, 0), (torch.tensor(1), 0), (torch.tensor([-1, 0]), 1))
        for y, launches in indices:
            expected = x[y]
            launched = counting()
            with torch2pypto.interpreted(module):
                got = module.f(x, y, 0, None)
            assert sum(launched().values()) == launches, (shape, y)
            assert got.dtype == expected.dtype and got.shape == expected.shape
            assert (got.data_ptr() == x.data_ptr()) == (expected.data_ptr() == x.data_ptr())  # x[tensor(1)] is a view
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    x = sample(11, 40, dtype=dtype).requires_grad_()
    y = torch.tensor([3, 3, 0, 10, 5])
    weight = sample(5, 40, dtype=dtype, seed=1)
    (x[y] * weight).sum().backward()
    expected, x.grad = x.grad, None
    launched = counting()
    with torch2pypto.interpreted(module):
        (module.f(x, y, 0, None) * weight).sum().backward()
    assert sum(launched().values()) == 2
    torch.testing.assert_close(x.grad, expected)
