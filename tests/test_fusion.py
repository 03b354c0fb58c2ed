"""Fusion: which statements become one kernel, and that kernel computes what torch computes.

Each interpreter case translates a function, runs the fused kernel under ``interpreted()``
against the original function (odd shapes, every float dtype) and counts the launches: one
kernel per region. A seeded generator of random elementwise/reduction chains checks the same
on code nobody wrote by hand. RoPE's regions are in test_fusion_rope.py.
"""

import contextlib
import random

import pytest
import torch

import torch2pypto
from fusing import HEAD, ROPE, check, fused, typed
from helpers import module
from helpers import sample as tensor
from torch2pypto import Options, translate_source
from torch2pypto.mapping.tolerance import region_tolerance
from torch2pypto.translator.oracle.invariants import violations
from torch2pypto.translator.verification.interpreter import counting

DTYPES = [torch.float32, torch.float16, torch.bfloat16]

RMSNORM = """\
def f(x, w):
    dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + 1e-6)
    return w * h.to(dtype)
"""
SILU_GATE = "def f(gate, up):\n    return F.silu(gate) * up\n"
SOFTMAX = "def f(x):\n    y = x.float() * 0.125\n    p = torch.softmax(y, dim=-1)\n    return p.to(x.dtype)\n"
RESIDUAL = """\
def f(x, r):
    h = x + r
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
    return y, h
"""
NUMBER_FIRST = "def f(x):\n    s = 1.0 - torch.sigmoid(x)\n    return 2 * s + -x\n"
WHERE = "def f(x):\n    return torch.where(x > 0, x, x * 0.1) / 3\n"
MAX_SHIFT = "def f(x):\n    m = x.amax(-1, keepdim=True)\n    return (x - m).exp() / (x - m).exp().sum(-1, keepdim=True)\n"
# transformers' eager attention between its matmuls: softmax's dtype= casts its input to FP32
# first, .to() rounds the weights back to the query's dtype
EAGER = """\
def f(w, mask, q):
    w = w * 0.125 + mask
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return w
"""
SOFTMAX_FP32 = "def f(x):\n    return F.softmax(x * 2, dim=-1, dtype=torch.float32)\n"

RMSNORM, SILU_GATE, SOFTMAX, RESIDUAL, NUMBER_FIRST, WHERE, MAX_SHIFT, EAGER, SOFTMAX_FP32 = map(
    typed, (RMSNORM, SILU_GATE, SOFTMAX, RESIDUAL, NUMBER_FIRST, WHERE, MAX_SHIFT, EAGER, SOFTMAX_FP32))
CASES = {  # name: (code, inputs of a shape and dtype, default run)
    "rmsnorm": (RMSNORM, lambda s, d: (tensor(*s, dtype=d), tensor(s[-1], dtype=d, seed=1)), True),
    "silu_gate": (SILU_GATE, lambda s, d: (tensor(*s, dtype=d), tensor(*s, dtype=d, seed=1)), True),
    "softmax": (SOFTMAX, lambda s, d: (tensor(*s, dtype=d),), True),
    "residual": (RESIDUAL, lambda s, d: (tensor(*s, dtype=d), tensor(*s, dtype=d, seed=1)), False),
    "number_first": (NUMBER_FIRST, lambda s, d: (tensor(*s, dtype=d),), False),
    "where": (WHERE, lambda s, d: (tensor(*s, dtype=d),), False),
    "max_shift": (MAX_SHIFT, lambda s, d: (tensor(*s, dtype=d),), False),
    "eager_softmax": (EAGER, lambda s, d: (tensor(*s, dtype=d), tensor(*s, dtype=d, seed=1) * 4, tensor(1, dtype=d)), True),
    "softmax_fp32": (SOFTMAX_FP32, lambda s, d: (tensor(*s, dtype=d),), False),
}
SHAPES = [(3, 5, 33), (7, 200), (1, 64)]


def _cases():
    for name, (_, _, default) in CASES.items():
        for dtype in DTYPES:
            for k, shape in enumerate(SHAPES):
                slow = not default or k > 0
                marks = [pytest.mark.interpreter] + ([pytest.mark.matrix] if slow else [])
                yield pytest.param(name, dtype, shape, marks=marks, id=f"{name}-{str(dtype)[6:]}-{'x'.join(map(str, shape))}")


@pytest.mark.parametrize("name, dtype, shape", list(_cases()))
def test_fused_kernel_matches_torch(name, dtype, shape):
    code, inputs, _ = CASES[name]
    check(code, inputs(shape, dtype))


@pytest.mark.interpreter
def test_mixed_dtypes_follow_torchs_promotion():
    """bf16 rows times an FP32 weight is FP32 (torch.promote_types), a Python number promotes nothing."""
    translation = check(typed("def f(x, w):\n    return (x * w) * 0.5 + x\n"), (tensor(5, 40, dtype=torch.bfloat16), tensor(40, seed=1)))
    assert "torch.promote_types" in translation.code


BROADCASTS = {  # q's shape, cos's shape: the kernel reads cos where it broadcasts, in place
    "heads": ((2, 3, 4, 16), (2, 1, 4, 16)),  # rotary's cos over the heads
    "batch-and-heads": ((2, 3, 5, 40), (1, 1, 5, 40)),
    "rows": ((2, 3, 5, 40), (2, 3, 1, 40)),  # one row per block, spread over n on chip
    "decode": ((3, 4, 1, 32), (3, 1, 1, 32)),
    "matrix": ((7, 33), (1, 33)),
    "3d": ((3, 5, 24), (3, 1, 24)),
    "column": ((5, 40), (5, 1)),  # spread along the row on chip
    "scalar": ((2, 3, 16), ()),
    "tiles": ((2, 3, 70, 40), (2, 1, 70, 40)),  # blocks of several row tiles, the last one partial
    "wide-column": ((70, 1000), (70, 1)),  # a column beside rows of several column tiles
    "dense": ((70, 33), (70, 33)),  # one block: the plain row kernel's loop
}


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shapes", BROADCASTS.values(), ids=BROADCASTS.keys())
def test_broadcasts_across_the_rows_are_read_in_place(shapes, dtype):
    """A broadcast operand (stride 0 in a leading dim) is read by the kernel where it broadcasts:
    one launch, torch's values, no host op (before: each expanded and copied on the host)."""
    q, cos = (tensor(*s or (1,), dtype=dtype, seed=k).reshape(s) for k, s in enumerate(shapes))
    check(typed("def f(q, cos):\n    return q * cos + q * 2\n"), (q, cos), host={})


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_permuted_and_sliced_operands_are_read_in_place(dtype):
    """A transposed view (q after .transpose(1, 2)), a column slice of wider rows (phi3's qkv)
    and a permute are read from their storage in their own memory order: no host op."""
    code = typed("def f(q, cos):\n    return q * cos + q * 2\n")
    qkv = tensor(2, 7, 3 * 40, dtype=dtype)
    for q in (tensor(2, 7, 3, 40, dtype=dtype).transpose(1, 2), qkv[..., :80].view(2, 7, 2, 40).transpose(1, 2),
              tensor(3, 2, 7, 40, dtype=dtype).permute(1, 0, 2, 3)):
        check(code, (q, tensor(q.shape[0], 1, 7, 40, dtype=dtype, seed=1)), host={})
    k = qkv[..., 40:].view(2, 7, 2, 40).transpose(1, 2)  # its window starts 40 columns before it
    check(code, (k, tensor(2, 1, 7, 40, dtype=dtype, seed=1)), host={})


NORM = typed("""\
def f(x):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return h.to(x.dtype)
""")


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shape, order, host", [
    ((2, 7, 3, 32), (0, 2, 1, 3), {}),  # gemma3's q_norm of q.transpose(1, 2)
    ((3, 5, 64), (1, 0, 2), {}),
    ((2, 5, 3, 33), (0, 2, 1, 3), {"constant_pad_nd": 1}),  # unaligned rows: the pad is the one copy
], ids=["heads", "3d", "padded"])
def test_a_row_reduction_reads_permuted_rows_in_place(shape, order, host, dtype):
    """A row reduction (an RMSNorm) of a transposed or permuted view whose last dim stays
    innermost runs on the rows in their memory order: no host copy (before: a clone), and a
    result of aligned rows has the strides torch gives it (the input's layout)."""
    x = tensor(*shape, dtype=dtype).permute(order)
    check(NORM, (x,), host=host)
    translated = module(fused(NORM).code)
    with torch2pypto.interpreted(translated):
        got = translated.f(x)
    if not host:
        assert got.stride() == module(HEAD + NORM).f(x).stride()


@pytest.mark.interpreter
def test_operands_no_window_holds_are_copied():
    """A last dim of another stride, more than three leading dims of other layouts: the operand is
    copied, contiguous (docs/host-copies.md), with torch's values; a column beside it is not."""
    code = typed("def f(q, cos):\n    return q * cos + q * 2\n")
    check(code, (tensor(5, 40).t(), tensor(40, 1, seed=1)), host={"clone": 1})
    check(code, (tensor(2, 3, 2, 5, 16), tensor(2, 1, 2, 1, 16, seed=1)), host={"clone": 1})


@pytest.mark.interpreter
def test_operands_the_kernel_does_not_take_run_the_fallback():
    """float64 is no kernel dtype, a result that would not have the rows' shape neither: torch runs."""
    code = typed("def f(x, y):\n    a = x.exp() * 2\n    b = y * 3 + a\n    return a, b\n")
    translated = module(fused(code).code)
    cases = [(tensor(3, 8, dtype=torch.float64), tensor(3, 8, dtype=torch.float64)), (tensor(8), tensor(3, 8))]
    for x, y in cases:
        launched = counting()
        with torch2pypto.interpreted(translated):
            got = translated.f(x, y)
        assert sum(launched().values()) == 0
        for g, e in zip(got, module(HEAD + code).f(x, y)):
            assert g.shape == e.shape and g.dtype == e.dtype
            torch.testing.assert_close(g, e)


@pytest.mark.interpreter
def test_an_op_of_fewer_dtypes_fuses_only_in_those():
    """floor_divide takes FP32 only (its entry's dtypes): fused, the region's wrapper checks the
    op's dtype, so BF16 and FP16 operands run torch, which rounds the quotient as it does; FP32
    launches the region's kernel (torch's 9 for 1 // 0.1, not the rounded quotient's 10)."""
    code = typed("def f(x, y):\n    h = x * 2.0\n    return torch.floor_divide(h, y) + 1.0\n")
    translation = fused(code)
    assert len(translation.regions) == 1 and "x.dtype, y.dtype) in (torch.float32,)" in translation.code
    x, y = torch.tensor([[0.5, 1.5, -0.5, 0.35, 2.5, 0.5, 7.0, -3.0]]), torch.tensor([[0.1, 0.3, 0.1, 0.1, 0.5, -0.1, 2.0, 0.7]])
    check(code, (x, y))
    assert module(translation.code).f(x, y)[0, 0] == 10.0  # 9 + 1, as torch
    for dtype in (torch.bfloat16, torch.float16):
        launched = counting()
        with torch2pypto.interpreted(module(translation.code)):
            got = module(translation.code).f(x.to(dtype), y.to(dtype))
        assert sum(launched().values()) == 0
        torch.testing.assert_close(got, module(HEAD + code).f(x.to(dtype), y.to(dtype)), atol=0, rtol=0)


@pytest.mark.interpreter
def test_an_empty_dtype_carrier_of_type_as_takes_the_kernel_path():
    """Issue 20 item 3: ``y.type_as(like)`` reads only like's dtype, so an empty ``like`` (a dtype
    carrier) launches the kernel: the fused region's and, without fusion, the cast's."""
    code = typed("def f(y, like):\n    return (y * 2 + 1).type_as(like)\n")
    like = torch.empty(0, dtype=torch.float16)
    check(code, (tensor(7, 40), like))
    translated = module(fused(code, Options(fuse=False)).code)
    launched = counting()
    with torch2pypto.interpreted(translated):
        got = translated.f(tensor(7, 40), like)
    assert launched()["cast_kernel.kernel"] == 1 and got.dtype == torch.float16


def test_regions_report_ops_and_spans():
    translation = fused(RMSNORM)
    (region,) = translation.regions
    assert region.function == "f" and region.span[0] == 7 and region.span[2] == 10
    assert region.ops == ("Tensor.to", "Tensor.pow", "Tensor.mean", "x + y", "rsqrt", "x * y", "Tensor.to", "x * y")
    assert "    return pypto_fused_f_" in translation.code
    assert all(r.status == "converted" for r in translation.records)


def test_values_read_later_are_outputs():
    translation = fused(RESIDUAL)
    assert "    h, y = pypto_fused_f_" in translation.code and "    return y, h\n" in translation.code


def test_no_fuse_gives_a_kernel_per_call():
    translation = fused(RMSNORM, Options(fuse=False))
    assert not translation.regions and "pypto_fused" not in translation.code and "pypto_rsqrt(" in translation.code


def test_a_second_run_changes_nothing_and_counts_the_fused_call():
    once = fused(SILU_GATE)
    again = translate_source(once.code, "fused.py")
    assert again.code == once.code
    assert [(r.api, r.status) for r in once.records] == [("torch.nn.functional.silu", "converted"), ("torch.Tensor.__mul__", "converted")]
    assert [(r.api, r.category, r.status) for r in again.records] == [("torch2pypto.fused", "fused", "converted")] * 2


NOT_FUSED = {
    "one op": "def f(x):\n    return torch.exp(x)\n",
    "no known tensor": "def f(x):\n    return x * 2 + 1\n",
    "an op of another family": "def f(x, w):\n    return torch.matmul(x, w) + 1\n",
    "a reduction of another dim": "def f(x):\n    return x.sum(0, keepdim=True) * 2\n",
    "a reduction without keepdim": "def f(x):\n    return x.mean(-1) * 2\n",
    "a Python number over a tensor": "def f(x):\n    return 2.0 / x.exp()\n",
}


@pytest.mark.parametrize("name", sorted(NOT_FUSED))
def test_what_does_not_fuse(name):
    code = NOT_FUSED[name]
    assert fused(code if name == "no known tensor" else typed(code)).regions == ()


def test_a_statement_apart_from_the_region_starts_another():
    """``b`` reads no value of ``a``'s statement and rows of its own (q's and k's RoPE): x and y
    may differ in shape, and one kernel takes rows of one shape."""
    translation = fused(typed("def f(x, y):\n    a = x.exp() * 2\n    b = y * 3 + 1\n    return a, b\n"))
    assert [r.span[0] for r in translation.regions] == [6, 7]


def test_a_statement_that_cannot_fuse_splits_the_region():
    code = "def f(x: torch.Tensor, w: torch.Tensor):\n    a = x.exp() * 2\n    b = torch.matmul(a, w)\n    return b.exp() + 1\n"
    translation = fused(code)
    assert [r.span[0] for r in translation.regions] == [6, 8]


# --- random chains -----------------------------------------------------------------------------

UNARY = ["{a}.exp()", "torch.neg({a})", "{a}.abs()", "torch.sigmoid({a})", "{a} * {k}", "{a} + {k}", "{a} - {k}", "{k} * {a}",
         "{a} / {k}", "{a}.pow(2)", "F.silu({a})", "{a}.float()", "{a}.to(x.dtype)", "torch.tanh({a})"]
BINARY = ["{a} + {b}", "{a} * {b}", "{a} - {b}", "torch.maximum({a}, {b})"]
REDUCE = ["{a} - {a}.amax(-1, keepdim=True)", "{a} / ({a}.abs().sum(-1, keepdim=True) + 1)",
          "{a} * torch.rsqrt({a}.pow(2).mean(-1, keepdim=True) + 1e-5)", "torch.softmax({a}, dim=-1)"]


def chain(seed: int) -> str:
    """A function of x and y: a few statements of random ops over earlier values."""
    rng = random.Random(seed)
    names, lines = ["x", "y"], []
    for i in range(rng.randint(2, 4)):
        kind = rng.choice([UNARY, UNARY, BINARY, REDUCE])
        expr = rng.choice(kind).format(a=rng.choice(names), b=rng.choice(names), k=rng.choice(["0.5", "2", "1.25"]))
        lines.append(f"    v{i} = {expr}")
        names.append(f"v{i}")
    return "def f(x: torch.Tensor, y: torch.Tensor):\n" + "\n".join(lines) + f"\n    return {names[-1]} + {names[-2]}\n"


@pytest.mark.parametrize("seed", [
    *range(3),
    *(pytest.param(s, marks=pytest.mark.matrix) for s in range(3, 40)),
])
@pytest.mark.interpreter
def test_random_chains_fuse_and_match_torch(seed):
    code = chain(seed)
    dtype = DTYPES[seed % 3]
    shape = [(5, 33), (2, 3, 24), (9, 7)][seed % 3]
    translation = fused(code)
    x, y = tensor(*shape, dtype=dtype, seed=seed), tensor(*shape, dtype=dtype, seed=seed + 1)
    check(code, (x, y), kernels=len(translation.regions), calls=len(translation.conversions))


def test_a_bool_tile_in_arithmetic_is_not_fused_and_does_not_crash():
    """nllb_moe: `mask * probs` with a comparison's bool result crashed the dtype promotion."""
    source = (
        "import torch\n\n\ndef f(x: torch.Tensor, y: torch.Tensor):\n"
        "    m = x > y\n"
        "    z = m * y\n"
        "    return z + 1.0\n"
    )
    once = translate_source(source)
    compile(once.code, "f.py", "exec")
    assert violations(once) == []
    assert translate_source(once.code).code == once.code


# --- aliasing: a cast to its own dtype is its input in torch --------------------------------------

ALIASED = typed("def f(x):\n    h = x.float()\n    y = h.exp() * 2\n    return y, h\n")


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["own dtype", "another dtype"])
def test_a_value_torch_returns_as_its_input_is_no_kernel_output(dtype):
    """``x.float()`` of an FP32 x is x: read after the region, it stays torch's (the same tensor, so
    a write into it shows in x), and the kernel writes only what it computed; in bf16 it is a copy."""
    x = tensor(3, 40, dtype=dtype)
    expected = module(HEAD + ALIASED).f(x)
    translated = module(fused(ALIASED).code)
    launched = counting()
    with torch2pypto.interpreted(translated):
        y, h = translated.f(x)
    assert sum(launched().values()) == (1 if dtype == torch.float32 else 2), launched()
    assert (h is x) == (expected[1] is x) == (dtype == torch.float32)
    torch.testing.assert_close((y, h), expected)


def test_an_output_that_may_be_an_input_at_run_time_ends_the_region():
    """``y.to(x.dtype)`` is y itself when their dtypes agree, which only the run knows (random
    chain 24: PyPTO also refused the kernel that stored an input's tile unchanged)."""
    code = typed("def f(x, y):\n    a = y.to(x.dtype)\n    b = a.exp() + 1\n    return a, b\n")
    (region,) = fused(code).regions
    assert region.ops == ("Tensor.exp", "x + y") and "    a = pypto_cast(y, x.dtype)\n" in fused(code).code


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_a_reduction_task_holds_more_rows_than_its_tile(dtype):
    """301 x 4096: a task takes 8 rows (the launch's spread), the unified buffer 4 of them at a
    time (whole rows of FP32 copies); the last task is partial."""
    translation = check(RMSNORM, (tensor(301, 4096, dtype=dtype), tensor(4096, dtype=dtype, seed=1)))
    assert "pypto.loop((n + max_rows - 1) // max_rows" in translation.code


# --- regions inside statements: nested expressions, calls' arguments, opaque operands -------------


SEVERAL = {
    "add+norm": typed("def f(x, r, w):\n    h = x + r\n    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w\n    return y, h\n"),
    "blocked": typed("def f(x, r, w):\n    a = x * r + w\n    b = a.exp() - r\n    return a, b\n"),
}


@pytest.mark.interpreter
@pytest.mark.parametrize("name", SEVERAL)
def test_a_region_of_several_results_keeps_its_kernel_under_grad(name):
    """Training: a region of two results (a reduction's and a blocked one) launches its kernel
    forward, and backward gives torch's gradients of its statements to every input, also where
    only one result reaches the loss."""
    code = SEVERAL[name]
    translation = fused(code)
    original, translated = module(HEAD + code), module(translation.code)
    base = (tensor(2, 5, 64), tensor(2, 5, 64, seed=1), tensor(64, seed=2))
    for used in (2, 1):
        grads = []
        for m, run in ((original, contextlib.nullcontext()), (translated, torch2pypto.interpreted(translated))):
            inputs = [t.clone().requires_grad_() for t in base]
            launched = counting()
            with run:
                results = m.f(*inputs)
                sum((r * (i + 1)).sum() for i, r in enumerate(results[:used])).backward()
            grads.append([t.grad for t in inputs])
            if m is translated:
                assert [n for k, n in launched().items() if k.startswith("fused_")] == [1], launched()
        for got, want in zip(*grads):
            assert (got is None) == (want is None)
            if want is not None:
                torch.testing.assert_close(got, want)

SHARED = typed("def f(x, y, c):\n    a = x.exp() * c + 1\n    b = y * c - 2\n    return a, b\n")


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_neighbours_sharing_an_operand_are_groups_of_one_kernel(dtype):
    """``a`` and ``b`` read c, and neither reads the other: one kernel of two groups, x's rows and
    y's (other shapes: [3, 5, 64] and [7, 64]); where their last dims differ ([5, 1] c against
    [5, 64] x and [5, 128] y), the wrapper runs torch for both."""
    translation = check(SHARED, (tensor(3, 5, 64, dtype=dtype), tensor(7, 64, dtype=dtype, seed=1), tensor(64, dtype=dtype, seed=2)))
    assert [r.ops for r in translation.regions] == [("Tensor.exp", "x * y", "x + y", "x * y", "x - y")]
    check(SHARED, (tensor(5, 64, dtype=dtype), tensor(5, 128, dtype=dtype, seed=1), tensor(5, 1, dtype=dtype, seed=2)), kernels=0)


def test_neighbours_sharing_no_operand_or_reading_each_other_stay_apart():
    """Groups join only what shares an operand and depends on nothing of the others: x and y
    alone share nothing; ``b`` reading ``a``, or assigning its name, is no group of its own."""
    assert len(fused(typed("def f(x, y):\n    a = x.exp() * 2\n    b = y * 3 + 1\n    return a, b\n")).regions) == 2
    reads = fused(typed("def f(x, y, c):\n    a = x.exp() * c\n    b = y * c + a.sum()\n    return a, b\n"))
    assert [r.ops for r in reads.regions] == [("Tensor.exp", "x * y")]
    again = fused(typed("def f(x, y, c):\n    a = x.exp() * c\n    a = y * c + 1\n    return a\n"))
    assert len(again.regions) == 2


@pytest.mark.interpreter
def test_groups_take_numbers_and_dtypes_each_from_the_one_parameter():
    """A Python number and a dtype both groups read are the wrapper's parameters once."""
    code = ("def f(x: torch.Tensor, y: torch.Tensor, c: torch.Tensor, s: float, d: torch.dtype):\n"
            "    a = (x * c * s).to(d) + 1\n    b = (y * c * s).to(d) - 1\n    return a, b\n")
    translation = check(code, (tensor(3, 64), tensor(2, 64, seed=1), tensor(64, seed=2), 0.5, torch.bfloat16))
    assert "(x, c, s, d, y)" in translation.code


SLICED = typed("""\
def f(x, y):
    a = x[..., 16:48] * 2
    return torch.cat([a, y[..., :-32].exp()], dim=-1) + x
""")


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_last_dim_slices_and_cat_are_tile_ops(dtype):
    """Slices of literal bounds (negative ones too) and a cat back to the row's width: one kernel
    at widths it aligns (64 and 4096), torch at others (72: the second piece
    starts at 32 but spans 40)."""
    check(SLICED, (tensor(3, 5, 64, dtype=dtype), tensor(3, 5, 64, dtype=dtype, seed=1)), kernels=1)
    check(SLICED, (tensor(5, 4096, dtype=dtype), tensor(5, 4096, dtype=dtype, seed=1)), kernels=1)
    check(SLICED, (tensor(3, 5, 72, dtype=dtype), tensor(3, 5, 72, dtype=dtype, seed=1)), kernels=0)


def test_a_slice_that_is_an_output_ends_the_region():
    """A row kernel stores whole rows: a slice read later stays out of the region."""
    translation = fused(typed("def f(x):\n    a = x[..., :32] * 2\n    b = x.exp() + 1\n    return a, b\n"))
    assert all("x[..., a:b]" not in r.ops for r in translation.regions)


CALL_ARGUMENT = typed("""\
def g(t):
    return t.flatten(1)


def f(x, y):
    return g(x.exp() * 2 + y), [y - x.abs(), y]
""")


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_expressions_inside_a_statement_that_does_not_fuse_are_regions(dtype):
    """A call's argument and a list item fuse where they stand; the statement around them stays."""
    x, y = tensor(3, 5, 17, dtype=dtype), tensor(3, 5, 17, dtype=dtype, seed=1)
    translation = fused(CALL_ARGUMENT)
    assert [r.ops for r in translation.regions] == [("Tensor.exp", "x * y", "x + y"), ("Tensor.abs", "x - y")]
    assert "return g(pypto_fused_f_" in translation.code
    original, translated = module(HEAD + CALL_ARGUMENT), module(translation.code)
    launched = counting()
    with torch2pypto.interpreted(translated):
        got = translated.f(x, y)
    assert sum(launched().values()) == 2 and all(k.startswith("fused_") for k in launched()), launched()
    expected = original.f(x, y)
    atol, rtol = region_tolerance(dtype)
    for g, e in zip((got[0], *got[1]), (expected[0], *expected[1])):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g.float(), e.float(), atol=atol, rtol=rtol)


def test_no_fuse_keeps_a_kernel_per_call_inside_statements():
    for code in (ROPE, CALL_ARGUMENT):
        translation = fused(code, Options(fuse=False))
        assert not translation.regions and "pypto_fused" not in translation.code and "pypto_mul(" in translation.code


def test_an_expression_inside_a_pending_call_is_left_to_that_call():
    """``torch.matmul(x * 2 + 1, w)``: the matmul's own rewrite holds its arguments, so they stay per-call kernels."""
    translation = fused(typed("def f(x, w):\n    return torch.matmul(x * 2 + 1, w).sum()\n"))
    assert translation.regions == ()


@pytest.mark.interpreter
def test_a_static_cast_of_a_host_operand_promotes_against_another_dtype():
    """falcon's alibi: ``slopes[..., None].bfloat16() * arange`` (the subscript an operand made on
    the host) promotes bf16 with fp16 through torch.promote_types (the static dtype crashed it)."""
    code = typed("def f(s, a):\n    return s[..., None].bfloat16() * a + 1\n")
    translation = check(code, (tensor(3, 1), tensor(3, 40, dtype=torch.float16)))
    assert [r.ops for r in translation.regions] == [("Tensor.bfloat16", "x * y", "x + y")]


def test_a_call_that_may_write_a_tensor_is_no_operand():
    """``x * 2 + bump(x)`` with a bump that writes x in place: torch reads x before bump runs, so
    bump's call cannot run ahead of the kernel as its operand; a helper that writes nothing can."""
    writes = "def bump(t: torch.Tensor):\n    t.add_(1)\n    return t.exp()\n\n\n"
    reads = "def bump(t: torch.Tensor):\n    return t.exp().flip(-1)\n\n\n"
    body = "def f(x: torch.Tensor):\n    return x * 2 + bump(x) * 3\n"
    assert fused(writes + body).regions == ()
    (region,) = fused(reads + body).regions
    assert region.ops == ("x * y", "x * y", "x + y")


SPLIT = """\
def f(x: torch.Tensor, y: torch.Tensor, n: int):
    a, b = x[..., :n], x[..., n:]
    return torch.cat([a * 2 + y[..., :n], b.exp()], dim=-1)
"""


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_a_tuple_of_slices_bounded_by_a_run_time_int_is_one_kernel(dtype):
    """phi3's ``q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]``: two bindings of one
    region, both views of x's tile, bounded by an int the kernel factory takes: one kernel at a
    half and a quarter of the row (odd row counts), torch where the bound does not start a
    32-byte block (8), is out of the row (-16: Python's negative bound) or no int (a tensor)."""
    x, y = tensor(3, 5, 64, dtype=dtype), tensor(3, 5, 64, dtype=dtype, seed=1)
    translation = check(SPLIT, (x, y, 32), kernels=1)
    assert [r.ops for r in translation.regions] == [("x[..., a:b]", "x[..., a:b]", "x * y", "x[..., a:b]", "x + y", "Tensor.exp", "cat")]
    check(SPLIT, (tensor(7, 64, dtype=dtype), tensor(7, 64, dtype=dtype, seed=1), 16), kernels=1)
    check(SPLIT, (x, y, 8), kernels=0)
    check(SPLIT, (x, y, -16), kernels=0)
    check(SPLIT, (x, y, torch.tensor(32)), kernels=0)


@pytest.mark.interpreter
def test_a_tuple_assignment_binds_after_evaluating_all_its_values():
    """``x, y = y * 2, x + 1`` reads the x and y before it, as Python does."""
    check("def f(x: torch.Tensor, y: torch.Tensor):\n    x, y = y * 2, x + 1\n    return x * y\n",
          (tensor(3, 5, 32), tensor(3, 5, 32, seed=1)), kernels=1)





def agreeing(*codes) -> list[set[str]]:
    """The names each translation of ``codes`` into one shared kernels module gives its regions,
    after checking that each name it defines is one text in all of them (the module keeps the first)."""
    texts, regions = {}, []
    for code in codes:
        translation = translate_source(code, "m.py", kernels_module="._pypto_kernels")
        for d in translation.definitions:
            assert texts.setdefault(d.name, d.source) == d.source, d.name
        regions.append({r.wrapper for r in translation.regions})
    return regions


def test_regions_that_inline_other_helper_bodies_get_other_names():
    """A region's name digests its statements and the helpers it inlines: two files whose
    statements read alike but whose helpers differ (nanochat's rotate_half negates the other
    half) share no kernel in a kernels module; the same file twice shares all."""
    other = ROPE.replace("torch.cat((-x2, x1), dim=-1)", "torch.cat((x2, -x1), dim=-1)")
    assert other != ROPE
    first, second = agreeing(HEAD + ROPE, HEAD + other)
    assert first and second and not first & second, (first, second)
    assert agreeing(HEAD + ROPE, HEAD + ROPE)[0] == first
