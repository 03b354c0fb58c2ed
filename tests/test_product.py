"""torch.prod on its kernel (pypto.mul: column blocks, then halvings) beyond the table's examples:
odd and intermediate widths, dims, keepdim, the whole tensor, dtype=, overflow, a gradient, and
the calls that run torch (integers, rows too wide)."""

import pytest
import torch

import torch2pypto
from helpers import load, sample, translate
from torch2pypto.translator.verification.interpreter import counting

pytestmark = pytest.mark.interpreter

SOURCE = """\
import torch


def along(x: torch.Tensor, dim: int, keepdim: bool):
    return torch.prod(x, dim, keepdim=keepdim)


def whole(x: torch.Tensor):
    return x.prod()


def into_fp32(x: torch.Tensor, dim: int):
    return x.prod(dim, dtype=torch.float32)
"""
# FP32: torch's FP32 product, its rounding and the kernel's. FP16 / BF16: the kernel's FP32 product
# rounded once lies within a unit of the FP64 product rounded once, where torch's CPU product
# rounds each step (its error grows with the width: 30% over 11008 FP16 values)
RTOL = {torch.float32: 1e-4, torch.float16: 1e-3, torch.bfloat16: 8e-3}


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    translation = translate(SOURCE)
    assert {r.status for r in translation.records} == {"converted"}, translation.records
    return load(tmp_path_factory.mktemp("prod") / "prod_pypto.py", translation.code)


def near_one(*shape, dtype=torch.float32, seed=0):
    """Values whose product over a wide row neither overflows nor underflows."""
    return (1 + sample(*shape, seed=seed) / (10 * shape[-1] ** 0.5)).to(dtype)


def launched(module, name, *args):
    ran = counting()
    with torch2pypto.interpreted(module):
        got = getattr(module, name)(*args)
    assert ran() == {"prod_kernel.kernel": 1}, ran()
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape, dim, keepdim", [
    ((1,), -1, False), ((7, 37), -1, False), ((7, 37), 0, True), ((3, 5, 37), 1, False), ((3, 5, 37), -1, True),
    ((5, 1000), -1, False), ((2, 11008), -1, False), ((130, 7), 1, False), ((3, 20000), 1, False),
])  # fmt: skip
def test_the_product_along_a_dim_is_torchs(module, shape, dim, keepdim, dtype):
    """Rows of one block, of blocks and a rest of several pieces (37 = 32 + 4 + 1, 11008 = 8192 +
    2048 + 512 + 256), of several blocks (20000); dims moved last; relative error only."""
    x = near_one(*shape, dtype=dtype)
    got = launched(module, "along", x, dim, keepdim)
    expected = torch.prod(x, dim, keepdim=keepdim)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if dtype != torch.float32:
        expected = torch.prod(x.double(), dim, keepdim=keepdim).to(dtype)
    torch.testing.assert_close(got, expected, rtol=RTOL[dtype], atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_the_whole_tensor_and_a_float32_dtype(module, dtype):
    x = near_one(3, 5, 37, dtype=dtype)
    got = launched(module, "whole", x)
    assert got.shape == () and got.dtype == dtype
    torch.testing.assert_close(got, x.double().prod().to(dtype), rtol=RTOL[dtype], atol=0)
    got = launched(module, "into_fp32", x, 0)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, x.prod(0, dtype=torch.float32), rtol=RTOL[torch.float32], atol=0)


def test_products_overflow_and_underflow_as_torchs(module):
    """inf, 0, signs, and NaN from inf * 0, where torch's sequential product gives them too."""
    x = torch.full((6, 100), 10.0)
    x[1] = 0.1
    x[2, 7] = -1.0
    x[3, :2] = torch.tensor([float("inf"), 0.0])
    x[4, 50] = float("nan")
    x[5] = sample(100)
    got = launched(module, "along", x, -1, False)
    torch.testing.assert_close(got, x.prod(-1), rtol=RTOL[torch.float32], atol=0, equal_nan=True)


def test_a_gradient_is_torchs(module):
    """Under grad mode the kernel launches and backward is torch's (zeros included)."""
    x = near_one(7, 37)
    x[2, 3] = 0.0
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = launched(module, "along", ours, -1, False)
    expected = torch.prod(theirs, -1)
    weights = sample(7, seed=1)
    (got * weights).sum().backward()
    (expected * weights).sum().backward()
    torch.testing.assert_close(got, expected, rtol=RTOL[torch.float32], atol=0)
    torch.testing.assert_close(ours.grad, theirs.grad)


def test_integers_and_rows_too_wide_run_torch(module):
    cases = [("along", torch.arange(1, 13, dtype=torch.int32).reshape(3, 4), -1, False),
             ("along", torch.arange(1, 13).reshape(3, 4), 0, False),
             ("into_fp32", torch.arange(1, 13, dtype=torch.int32).reshape(3, 4), 1),
             ("along", torch.ones(1, 16 * 8192 + 1), -1, False)]
    for name, *args in cases:
        ran = counting()
        with torch2pypto.interpreted(module):
            got = getattr(module, name)(*args)
        assert ran() == {}
        original = {"along": lambda x, d, k: torch.prod(x, d, keepdim=k), "into_fp32": lambda x, d: x.prod(d, dtype=torch.float32)}[name]
        expected = original(*args)
        assert got.dtype == expected.dtype and torch.equal(got, expected)
