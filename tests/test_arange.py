"""torch.arange of Python ints on its kernel (issue 18: the models' position_ids): exact values of
any length on one kernel per (dtype, start, step) (a bounded number of starts), int64 or int32, no torch op left; what the
kernel does not compute runs torch's arange."""

import pytest
import torch

import torch2pypto
from helpers import load, translate
from torch2pypto.translator.verification.hostops import host_ops
from torch2pypto.translator.verification.interpreter import counting

pytestmark = pytest.mark.interpreter

CODE = """import torch


def positions(x: torch.Tensor):
    return torch.arange(x.shape[1], device=x.device)


def stepped(start, end, step, dtype):
    return torch.arange(start, end, step, dtype=dtype)


def anything(start, end, step=1, dtype=None, device=None, requires_grad=False):
    return torch.arange(start, end, step, dtype=dtype, device=device, requires_grad=requires_grad)


def no_end(end, step):
    return torch.arange(end, step=step)
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    translation = translate(CODE)
    assert {r.status for r in translation.records} == {"converted"}, translation.records
    assert translate(translation.code).code == translation.code  # a second run changes nothing
    return load(tmp_path_factory.mktemp("arange") / "arange.py", translation.code)


def test_positions_of_any_length_launch_one_kernel(made):
    """Lengths 1, odd, one tile's, a tail tile's and several tiles' (1024 a tile): one compiled
    kernel, one launch each."""
    lengths = (1, 13, 1024, 1025, 3001)
    inputs = [torch.zeros(2, n) for n in lengths]
    ran = counting()
    with torch2pypto.interpreted(made), host_ops(made) as left:
        got = [made.positions(x) for x in inputs]
    assert ran() == {"arange_kernel.kernel": len(lengths)}, ran()
    assert not left, left
    for n, values in zip(lengths, got):
        assert values.dtype == torch.int64 and values.device.type == "cpu" and torch.equal(values, torch.arange(n))
    assert made.arange_kernel.cache_info().currsize == 1


@pytest.mark.parametrize("start, end, step", [(3, 40, 3), (20, -5, -2), (-7, 1100, 1), (5, 3000, 7), (0, 10, 4)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_start_and_step_are_exact(made, start, end, step, dtype):
    ran = counting()
    with torch2pypto.interpreted(made):
        got = made.stepped(start, end, step, dtype)
    assert ran() == {"arange_kernel.kernel": 1}, ran()
    expected = torch.arange(start, end, step, dtype=dtype)
    assert got.dtype == dtype and torch.equal(got, expected)


@pytest.mark.parametrize("args, kwargs", [
    ((0, 2.5), {}),                               # a float argument: a float result
    ((0, 7), {"dtype": torch.float32}),           # a float dtype
    ((2**31 - 3, 2**31 + 2), {}),                 # values beyond INT32
    ((0, 10), {"requires_grad": True, "dtype": torch.float32}),
    ((0, torch.tensor(6)), {}),                   # a tensor argument
    ((5, 5), {}),                                 # an empty result
    ((0, 9), {"device": "meta"}),                 # a device off the kernel path
])  # fmt: skip
def test_what_the_kernel_does_not_compute_runs_torch(made, args, kwargs):
    ran = counting()
    with torch2pypto.interpreted(made):
        got = made.anything(*args, **kwargs)
    assert not ran()
    expected = torch.arange(*args, **kwargs)
    assert got.dtype == expected.dtype and got.device == expected.device and got.shape == expected.shape
    assert got.requires_grad == expected.requires_grad
    if got.device.type != "meta":
        assert torch.equal(got, expected)


def test_a_step_without_an_end_is_refused_as_torch_refuses_it(made):
    with pytest.raises(TypeError):
        made.no_end(5, 2)


def test_a_start_that_changes_every_call_builds_a_bounded_number_of_kernels(made):
    """A start is a kernel constant: a decode step's position would build a kernel per step. Past
    _ARANGE_KERNELS starts of one (dtype, step), torch's arange runs; known starts keep theirs."""
    starts = range(made._ARANGE_KERNELS + 2)
    ran = counting()
    with torch2pypto.interpreted(made):
        got = [made.stepped(s, s + 40, 11, torch.int32) for s in starts]
        again = made.stepped(0, 40, 11, torch.int32)
    assert ran() == {"arange_kernel.kernel": made._ARANGE_KERNELS + 1}, ran()
    for s, values in zip(starts, got):
        assert torch.equal(values, torch.arange(s, s + 40, 11, dtype=torch.int32))
    assert torch.equal(again, torch.arange(0, 40, 11, dtype=torch.int32))


KEYWORD_END = """import torch


def keyword_end(n, dtype=None):
    return torch.arange(end=n, dtype=dtype)
"""


@pytest.mark.parametrize("n", [1, 13, 1025])
@pytest.mark.parametrize("dtype", [None, torch.int32])
def test_a_lone_end_given_by_keyword_is_arange_of_it(tmp_path, n, dtype):
    translation = translate(KEYWORD_END)
    assert [r.status for r in translation.records] == ["converted"]
    assert "pypto_arange(end=n, dtype=dtype)" in translation.code
    made = load(tmp_path / "keyword_end.py", translation.code)
    ran = counting()
    with torch2pypto.interpreted(made):
        got = made.keyword_end(n, dtype)
    assert ran() == {"arange_kernel.kernel": 1}, ran()
    expected = torch.arange(end=n, dtype=dtype)
    assert got.dtype == expected.dtype and torch.equal(got, expected)


@pytest.mark.parametrize("call, reason", [("torch.arange(end=5, step=2)", "step= without start"), ("torch.arange(dtype=torch.int32)", "no end")])
def test_no_start_with_a_step_or_no_end_stays_torch_which_raises(call, reason):
    (record,) = translate(f"import torch\n\n\ndef f():\n    return {call}\n").records
    assert record.status != "converted" and reason in record.reason
    with pytest.raises(TypeError):
        eval(call)
