"""Casts into int64, int32 and bool on the cast kernel (runtime/casts.py's _CASTS): the zoo's bool
masks and int32 ids into int64 (``attention_mask.long()``), masks into int32
(``input_ids.ne(pad).int()``), floats truncated toward zero, anything into bool; the casts no
exact chain of A2/A3 casts makes run torch."""

import pytest
import torch

import torch2pypto
from helpers import load, module, translate
from torch2pypto.translator.verification.hostops import host_ops
from torch2pypto.translator.verification.interpreter import counting

pytestmark = pytest.mark.interpreter

CASTS = "import torch\n\n\ndef f(x: torch.Tensor, dtype: torch.dtype):\n    return x.to(dtype), x.long(), x.int()\n"
SHAPES = [(1,), (7, 37), (3, 5, 37), (5, 1000), (2, 20000)]  # a tail row tile, unaligned widths, a wide row


@pytest.fixture(scope="module")
def casts(tmp_path_factory):
    return load(tmp_path_factory.mktemp("casts") / "casts.py", translate(CASTS).code)


def values(dtype, shape, seed=0):
    """Samples of ``dtype``: coin flips, ids beyond 2**31 for int64, floats with halves of both signs."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    if dtype == torch.int64:
        return torch.randint(-3, 3, shape, generator=g) * 2**31 + torch.randint(-5, 5, shape, generator=g)  # 2**32: low word 0
    if dtype == torch.int32:
        return torch.randint(-2**31, 2**31 - 1, shape, generator=g, dtype=torch.int32) * torch.randint(0, 2, shape, generator=g, dtype=torch.int32)
    x = torch.randn(shape, generator=g) * 1000
    x.view(-1)[:6] = torch.tensor([2.5, -2.5, 0.5, -0.7, 0.0, 65504.0])[: x.numel()]
    return x.to(dtype)


def translated(body: str):
    return module(translate("import torch\n\n\n" + body).code)


@pytest.mark.parametrize("source, target", [
    (torch.bool, torch.int64), (torch.bool, torch.int32), (torch.bool, torch.float32), (torch.bool, torch.bfloat16),
    (torch.int32, torch.int64), (torch.int32, torch.bool), (torch.int64, torch.bool),
    (torch.float32, torch.int64), (torch.float16, torch.int64), (torch.bfloat16, torch.int64),
    (torch.float16, torch.int32), (torch.bfloat16, torch.bool),
])  # fmt: skip
@pytest.mark.parametrize("shape", SHAPES)
def test_casts_into_integers_and_bool_launch_and_match_torch(casts, source, target, shape):
    """x.to(target) on one kernel, as torch casts (no conversion left to torch); .long() and .int()
    beside it launch where their chain is exact, return the input to its own dtype, and run
    torch from int64 into int32."""
    x = values(source, shape)
    ran = counting()
    with torch2pypto.interpreted(casts), host_ops(casts) as left:
        got = casts.f(x, target)
    expected = (x.to(target), x.long(), x.int())
    launches = 1 + (source != torch.int64) + (source not in (torch.int32, torch.int64))
    assert ran() == {"cast_kernel.kernel": launches}, ran()
    assert set(left) <= {"_to_copy"}, left  # int64 into int32: torch's
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape and g.device == e.device and torch.equal(g, e)
    assert (got[1] is x) == (source == torch.int64) and (got[2] is x) == (source == torch.int32)


def test_int64_into_int32_runs_torch_which_wraps():
    """torch wraps an int64 out of int32's range; the cast kernel makes no INT64 -> INT32 (the chip's
    may saturate), so the wrapper runs torch's."""
    casts = translated("def f(x: torch.Tensor):\n    return x.int(), x.to(torch.int32)\n")
    x = torch.tensor([[2**31, -2**31 - 1, 2**40 + 7, 5]])
    ran = counting()
    with torch2pypto.interpreted(casts):
        got = casts.f(x)
    assert not ran() and all(torch.equal(g, x.int()) for g in got)
    assert got[0].tolist() == [[-2**31, 2**31 - 1, 7, 5]]


@pytest.mark.parametrize("grad", [True, False])
def test_an_integer_or_bool_cast_of_a_float_requiring_grad_has_no_gradient_as_in_torch(grad):
    """torch gives an integer or bool result no grad_fn; a float result of the same input keeps
    torch's gradient."""
    casts = translated("def f(x: torch.Tensor):\n    return x.long(), x.to(torch.bool), x.int(), x.half()\n")
    x = values(torch.float32, (3, 37)).div(100).requires_grad_()
    ran = counting()
    with torch.set_grad_enabled(grad):
        expected = (x.long(), x.to(torch.bool), x.int(), x.half())
        with torch2pypto.interpreted(casts):
            got = casts.f(x)
    assert ran() == {"cast_kernel.kernel": 4}
    for g, e in zip(got, expected):
        assert g.requires_grad == e.requires_grad and (g.grad_fn is None) == (e.grad_fn is None)
        assert g.dtype == e.dtype and torch.equal(g, e)
    if grad:
        got[3].float().sum().backward()
        assert torch.equal(x.grad, torch.ones_like(x))


def test_a_transposed_mask_is_read_in_its_layout():
    """A bool mask's transpose is cast in place, as its bytes; the result has torch's strides."""
    casts = translated("def f(m: torch.Tensor):\n    return m.long(), m.to(torch.float16)\n")
    m = values(torch.bool, (37, 7)).t()
    ran = counting()
    with torch2pypto.interpreted(casts):
        got = casts.f(m)
    assert ran() == {"cast_kernel.kernel": 2}
    for g, e in zip(got, (m.long(), m.half())):
        assert g.stride() == e.stride() and torch.equal(g, e)
