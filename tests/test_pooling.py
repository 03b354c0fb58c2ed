"""Adaptive average pooling to output size 1 as the mean entry's kernel: the module's size, an
attribute known at run time only, decides there; other sizes run torch."""

import re

import pytest
import torch

import torch2pypto
from helpers import load, sample, translate
from torch2pypto.translator.verification import interpreter

SOURCE = '''\
import torch
from torch import nn


class Head(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(size)

    def forward(self, x):
        return self.pool(x)


def pool(x, size):
    return torch.nn.functional.adaptive_avg_pool2d(x, size)
'''

SHAPES = [(2, 3, 7, 5), (3, 9, 13), (1, 4, 130, 3), (2, 5, 1, 1)]
TOLERANCE = {torch.float32: {}, torch.float16: {"atol": 2e-3, "rtol": 2e-3}, torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    result = translate(SOURCE)
    assert [r.status for r in result.records] == ["converted", "converted"]
    return load(tmp_path_factory.mktemp("pool") / "head_pypto.py", result.code)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("size", [1, (1, 1), [1, 1]], ids=str)
def test_output_size_one_is_one_mean_launch_with_torchs_result_and_gradient(translated, shape, dtype, size):
    x = sample(*shape, dtype=dtype).requires_grad_()
    ref = x.detach().clone().requires_grad_()
    head = translated.Head(size)
    launched = interpreter.counting()
    with torch2pypto.interpreted(translated):
        got = head(x)
    assert sum(launched().values()) == 1
    expected = torch.nn.functional.adaptive_avg_pool2d(ref, size)
    torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
    got.sum().backward(), expected.sum().backward()
    torch.testing.assert_close(x.grad, ref.grad, **TOLERANCE[dtype])


@pytest.mark.interpreter
@pytest.mark.parametrize("shape, size", [((2, 3, 7, 5), 2), ((2, 3, 7, 5), (1, 2)), ((2, 3, 7, 5), (None, 1)),
                                         ((2, 3, 1, 5), (1, None)), ((2, 3, 7, 5), True), ((2, 3, 7, 5), 1.0)], ids=str)
def test_other_output_sizes_run_torch(translated, shape, size):
    x = sample(*shape)
    launched = interpreter.counting()
    with torch2pypto.interpreted(translated):
        try:
            got = translated.pool(x, size)
        except (TypeError, RuntimeError) as exc:
            with pytest.raises(type(exc)):
                torch.nn.functional.adaptive_avg_pool2d(x, size)
            got = None
    assert sum(launched().values()) == 0
    if got is not None:
        torch.testing.assert_close(got, torch.nn.functional.adaptive_avg_pool2d(x, size))


@pytest.mark.interpreter
@pytest.mark.parametrize("shape", [(7, 5), (1, 2, 3, 7, 5)], ids=str)
def test_other_ranks_take_the_mean_of_the_last_two_dims_as_torch(translated, shape):
    x = sample(*shape)
    launched = interpreter.counting()
    with torch2pypto.interpreted(translated):
        got = translated.pool(x, 1)
    assert sum(launched().values()) == 1
    torch.testing.assert_close(got, torch.nn.functional.adaptive_avg_pool2d(x, 1))


@pytest.mark.interpreter
@pytest.mark.parametrize("x", [torch.empty(2, 0, 7, 5), torch.empty(3, 0, 5), torch.arange(24).reshape(2, 3, 4)], ids=["batch of 0", "empty window", "int64"])
def test_inputs_off_the_kernel_path_run_torch(translated, x):
    launched = interpreter.counting()
    with torch2pypto.interpreted(translated):
        try:
            got = translated.pool(x, 1)
        except RuntimeError as exc:
            with pytest.raises(RuntimeError, match=re.escape(str(exc))):
                torch.nn.functional.adaptive_avg_pool2d(x, 1)
            got = None
    assert sum(launched().values()) == 0
    if got is not None:
        torch.testing.assert_close(got, torch.nn.functional.adaptive_avg_pool2d(x, 1), equal_nan=True)
