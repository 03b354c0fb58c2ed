"""An elementwise wrapper launches its kernel only for the dtypes its entry declares, with
operands of one dtype and numbers that dtype holds; every other mix runs torch, which keeps its
type promotion (rsqrt of an int tensor is a float tensor). A recording launcher stands in for
the interpreter: no kernel runs here, only the wrapper's choice and torch's results are checked."""

import functools

import pytest
import torch

from helpers import run, translate

I32 = torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4)
MASK = I32 > 0
F16 = I32.half()


@functools.cache
def translated(call: str):
    code = f"import torch\n\n\ndef f(a: torch.Tensor, b: torch.Tensor, m: torch.Tensor):\n    return {call}\n"
    translation = translate(code)
    assert {r.status for r in translation.records} == {"converted"}, translation.records
    return run(translation.code), run(code)


def launches(call: str, a, b=None, m=MASK) -> bool:
    """Whether the translated call launches a kernel; on the torch path it must give torch's result."""
    module, original = translated(call)
    calls = []
    module["PYPTO_LAUNCHER"] = lambda kernel, *tensors: calls.append(kernel)
    try:
        got = module["f"](a, b, m)
    finally:
        module["PYPTO_LAUNCHER"] = None
    if not calls:
        expected = original["f"](a, b, m)
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got, expected, equal_nan=True, rtol=0, atol=0)
    return bool(calls)


@pytest.mark.parametrize("call, a, b, kernel", [
    ("torch.rsqrt(a)", I32, None, False),            # float-only entry: torch gives a float result
    ("torch.rsqrt(a)", F16, None, True),
    ("torch.add(a, b)", F16, F16.float(), False),    # fp16 + fp32 promotes to fp32
    ("torch.add(a, b)", I32, I32, True),             # add declares int32 and int16 besides the floats
    ("torch.add(a, b)", I32.long(), I32.long(), False),  # not int64: no int64 vector add on A2/A3
    ("torch.add(a, b)", I32, I32.short(), False),    # int32 + int16 promotes to int32
    ("torch.eq(a, b)", I32, I32.flip(0), False),     # eq declares float dtypes only
    ("torch.eq(a, 1)", F16, None, True),
    ("torch.bitwise_not(a)", I32.long(), None, False),  # bitwise_not declares int32, int16 and bool
    ("torch.clamp(a, True)", I32, None, False),      # a bool is no kernel number
    ("torch.clamp(a, 0.5)", I32, None, False),       # promotes to float
    ("torch.clamp(a, 1)", I32, None, True),
    ("torch.where(m, a, 2)", F16, None, True),
    ("torch.where(m, a, b)", F16, F16.float(), False),
    ("torch.logical_not(m)", MASK, None, True),
    ("torch.logical_not(a)", I32, None, False),      # logical_not declares bool only
    ("a.bool()", F16, None, True),                   # a != 0 in a kernel
    ("a.bool()", I32.long(), None, False),           # ids and masks run torch: PyPTO compares no ints with a number
    ("a.bool()", MASK, None, False),                 # torch returns the bool tensor itself
])
def test_kernel_only_for_declared_dtypes_and_operand_mixes(call, a, b, kernel):
    assert launches(call, a, b) == kernel


def test_a_mask_that_is_no_bool_tensor_runs_torch():
    with pytest.raises(RuntimeError):  # torch refuses a float mask; the wrapper does not launch
        launches("torch.where(m, a, 0.0)", F16, m=MASK.half())


def test_clamp_without_bounds_raises_as_torch_does():
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max'"):
        launches("a.clamp()", F16)
