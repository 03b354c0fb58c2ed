"""``x.contiguous()`` in a kernel (movement's contiguous layout, runtime ``_copied``): a tensor that
is not contiguous is copied by the join kernel from its window of storage (a transposed
[B, S, H, D], a last-dim slice like the causal-LM loss's ``labels[..., 1:]``), in FP32, BF16 and
int64, odd sizes, with no torch op on the host; a contiguous one is returned itself with no
launch; one that no window holds (``x.mT``) and ``channels_last`` run torch; torch's gradient."""

import pytest
import torch

import torch2pypto
from helpers import load, sample, translate
from torch2pypto.translator.verification import interpreter
from torch2pypto.translator.verification.hostops import host_ops

pytestmark = pytest.mark.interpreter

SOURCE = """\
import torch


def copy(x: torch.Tensor):
    return x.contiguous()


def transposed(x: torch.Tensor):
    return x.transpose(1, 2).contiguous()


def shifted(labels: torch.Tensor):
    return labels[..., 1:].contiguous()


def default_format(x: torch.Tensor):
    return x.contiguous(memory_format=torch.contiguous_format)


def channels_last(x: torch.Tensor):
    return x.contiguous(memory_format=torch.channels_last)
"""


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    translation = translate(SOURCE)
    statuses = [r.status for r in translation.records if r.api == "torch.Tensor.contiguous"]
    assert statuses == ["converted"] * 4 + ["unsupported"], translation.records
    return load(tmp_path_factory.mktemp("contiguous") / "translated.py", translation.code)


def launched(module, name, *args, launches):
    """``module.name(*args)`` on the interpreter, which launches ``launches`` kernels and runs no
    torch op outside them where it launches one."""
    count = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(module), host_ops(module) as ops:
        got = getattr(module, name)(*args)
    assert sum(count().values()) == launches, dict(count())
    if launches:
        assert ops == {}, ops
    return got


def integers(*shape, seed=1):
    return torch.randint(-(2**40), 2**40, shape, generator=torch.Generator().manual_seed(seed))


DTYPES = [torch.float32, torch.bfloat16, torch.int64]


def make(shape, dtype):
    return integers(*shape) if dtype is torch.int64 else sample(*shape, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(2, 11, 3, 16), (1, 7, 5, 9), (3, 33, 2, 40)])
def test_transposed(translated, dtype, shape):
    x = make(shape, dtype)
    got = launched(translated, "transposed", x, launches=1)
    expected = x.transpose(1, 2).contiguous()
    assert got.is_contiguous() and got.shape == expected.shape and torch.equal(got, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(2, 11), (3, 130), (5, 2), (2, 3, 37)])
def test_last_dim_slice(translated, dtype, shape):
    labels = make(shape, dtype)
    got = launched(translated, "shifted", labels, launches=1)
    expected = labels[..., 1:].contiguous()
    assert got.is_contiguous() and got.shape == expected.shape and torch.equal(got, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_contiguous_is_itself(translated, dtype):
    x = make((3, 5, 7), dtype)
    assert launched(translated, "copy", x, launches=0) is x
    assert launched(translated, "default_format", x, launches=0) is x


def test_default_format_copies(translated):
    x = sample(2, 9, 3, 5)
    got = launched(translated, "default_format", x.transpose(1, 2), launches=1)
    assert torch.equal(got, x.transpose(1, 2).contiguous())


def test_no_window_runs_torch(translated):
    x = sample(5, 7)
    got = launched(translated, "copy", x.mT, launches=0)  # a last dim of stride 7: torch copies
    assert got.is_contiguous() and torch.equal(got, x.mT)
    images = sample(2, 3, 4, 5)
    got = launched(translated, "channels_last", images, launches=0)
    assert got.is_contiguous(memory_format=torch.channels_last) and torch.equal(got, images)


def test_gradient(translated):
    x = sample(2, 11, 3, 16)
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    count = interpreter.counting()
    with torch2pypto.interpreted(translated):
        got = translated.transposed(ours)
    assert sum(count().values()) == 1, dict(count())
    expected = theirs.transpose(1, 2).contiguous()
    torch.testing.assert_close(got, expected)
    weights = torch.randn(expected.shape, generator=torch.Generator().manual_seed(3))
    (got * weights).sum().backward()
    (expected * weights).sum().backward()
    torch.testing.assert_close(ours.grad, theirs.grad)
