"""torch.outer as the mul entry's kernel on the views input[:, None] and vec2: one launch, torch's
values, dtype (promotion included) and gradients; operands of another rank run torch, which raises."""

import pytest
import torch

import torch2pypto
from helpers import load, sample, translate
from torch2pypto.translator.verification import interpreter

SOURCE = '''\
import torch


def outer(a, b):
    return torch.outer(a, b)


def method(a: torch.Tensor, b: torch.Tensor):
    return a.outer(b)


def ger(a, b):
    return torch.ger(a, b)
'''

TOLERANCE = {torch.float32: {}, torch.float16: {"atol": 1e-3, "rtol": 1e-3}, torch.bfloat16: {"atol": 1e-2, "rtol": 1e-2}}


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    result = translate(SOURCE)
    assert [r.status for r in result.records] == ["converted"] * 3
    return load(tmp_path_factory.mktemp("outer") / "outer_pypto.py", result.code)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n, m", [(37, 5), (1, 7), (130, 300), (6, 1)], ids=str)
@pytest.mark.parametrize("form", ["outer", "method", "ger"])
def test_an_outer_product_is_one_mul_launch_with_torchs_result_and_gradient(translated, form, n, m, dtype):
    a, b = sample(n, dtype=dtype).requires_grad_(), sample(m, dtype=dtype, seed=1).requires_grad_()
    a_ref, b_ref = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    launched = interpreter.counting()
    with torch2pypto.interpreted(translated):
        got = getattr(translated, form)(a, b)
    assert sum(launched().values()) == 1
    expected = torch.outer(a_ref, b_ref)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
    got.sum().backward(), expected.sum().backward()
    torch.testing.assert_close(a.grad, a_ref.grad, **TOLERANCE[dtype])
    torch.testing.assert_close(b.grad, b_ref.grad, **TOLERANCE[dtype])


@pytest.mark.interpreter
@pytest.mark.parametrize("dtypes, launches", [((torch.int32, torch.int32), 1), ((torch.int16, torch.int16), 1),
                                              ((torch.float16, torch.float32), 0), ((torch.bfloat16, torch.float16), 0),
                                              ((torch.int64, torch.int64), 0)], ids=str)
def test_integer_and_mixed_operands_give_torchs_dtype_as_mul_does(translated, dtypes, launches):
    """Integer vectors launch mul's integer kernel; mixed dtypes and int64 take mul's torch path."""
    a = sample(9, dtype=dtypes[0]) if dtypes[0].is_floating_point else torch.arange(-4, 5, dtype=dtypes[0])
    b = sample(11, dtype=dtypes[1], seed=1) if dtypes[1].is_floating_point else torch.arange(11, dtype=dtypes[1])
    launched = interpreter.counting()
    with torch2pypto.interpreted(translated):
        got = translated.outer(a, b)
    assert sum(launched().values()) == launches
    expected = torch.outer(a, b)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)


@pytest.mark.interpreter
@pytest.mark.parametrize("a_shape, b_shape", [((3, 4), (5,)), ((5,), (2, 3)), ((), (5,))], ids=str)
def test_operands_of_another_rank_run_torch_which_raises(translated, a_shape, b_shape):
    a, b = torch.ones(a_shape), torch.ones(b_shape)
    launched = interpreter.counting()
    with torch2pypto.interpreted(translated), pytest.raises(RuntimeError) as raised:
        translated.outer(a, b)
    with pytest.raises(RuntimeError, match=str(raised.value).split("\n")[0][:30]):
        torch.outer(a, b)
    assert sum(launched().values()) == 0
