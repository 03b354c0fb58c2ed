"""torch.flip on its kernels (pypto.index_select by a descending pypto.arange) beyond the table's
examples: odd and wide shapes, each dim and adjacent runs of dims, int dtypes, a gradient, and
the calls that run torch (dims not adjacent, an input that is not contiguous)."""

import pytest
import torch

import torch2pypto
from helpers import load, sample, translate
from torch2pypto.translator.verification.interpreter import counting

pytestmark = pytest.mark.interpreter

SOURCE = """\
import torch


def flip(x: torch.Tensor, dims):
    return torch.flip(x, dims)


def flip_last(x: torch.Tensor):
    return x.flip(-1)
"""
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64]


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    translation = translate(SOURCE)
    assert {r.status for r in translation.records} == {"converted"}, translation.records
    return load(tmp_path_factory.mktemp("flip") / "flip_pypto.py", translation.code)


def values(*shape, dtype):
    x = sample(*shape) * 1000
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, dims, kernel", [
    ((1,), [0], "cols"), ((7, 37), [0], "rows"), ((7, 37), [-1], "cols"), ((7, 37), (0, 1), "cols"),
    ((3, 5, 37), [1], "rows"), ((3, 5, 37), (1, 2), "cols"), ((3, 5, 37), [0, 1], "rows"), ((3, 1, 5, 37), (0, 2), "rows"),
    ((5, 1000), [1], "cols"), ((2, 11008), [-1], "cols"), ((130, 7), [0], "rows"), ((2, 70, 1000), [1], "rows"),
])  # fmt: skip
def test_the_flip_is_torchs(module, shape, dims, kernel, dtype):
    """Row tiles of each group whole (the last overlapping), blocks of cols (the last overlapping),
    size-1 dims between flipped ones; values copied exactly."""
    x = values(*shape, dtype=dtype)
    ran = counting()
    with torch2pypto.interpreted(module):
        got = module.flip(x, dims)
    assert ran() == {f"flip_{kernel}_kernel.kernel": 1}, ran()
    expected = torch.flip(x, dims)
    assert got.dtype == expected.dtype and got.shape == expected.shape and got.is_contiguous()
    assert torch.equal(got, expected)


def test_tensor_flip_of_an_int_and_a_gradient(module):
    """x.flip(-1) takes an int; under grad mode the kernel launches and backward is torch's."""
    x = sample(7, 37)
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    ran = counting()
    with torch2pypto.interpreted(module):
        got = module.flip_last(ours)
    assert ran() == {"flip_cols_kernel.kernel": 1}
    weights = sample(7, 37, seed=1)
    (got * weights).sum().backward()
    (theirs.flip(-1) * weights).sum().backward()
    assert torch.equal(got, theirs.flip(-1)) and torch.equal(ours.grad, theirs.grad)


def test_dims_not_adjacent_and_inputs_not_contiguous_run_torch(module):
    x = sample(3, 5, 37)
    cases = [(x, (0, 2)), (x.transpose(1, 2), [1]), (x[..., 1:], [-1]), (x, [0, 0]), (x.bool(), [0])]
    for t, dims in cases:
        ran = counting()
        with torch2pypto.interpreted(module):
            try:
                got = module.flip(t, dims)
            except RuntimeError as exc:
                with pytest.raises(RuntimeError, match=str(exc)[:20]):
                    torch.flip(t, dims)
                continue
        assert ran() == {}
        assert torch.equal(got, torch.flip(t, dims))
