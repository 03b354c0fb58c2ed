"""torch.histc on its kernel beyond the table's examples: torch's bin edges, values outside the
range and NaN, many bins, and the calls that run torch (the data's range, half values, a gradient)."""

import pytest
import torch

import torch2pypto
from helpers import load, sample, translate
from torch2pypto.translator.verification.interpreter import counting

HISTC = "import torch\n\n\ndef f(x: torch.Tensor, bins: int, low, high):\n    return torch.histc(x, bins=bins, min=low, max=high)\n"


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return load(tmp_path_factory.mktemp("histc") / "histc_pypto.py", translate(HISTC).code)


@pytest.mark.interpreter
@pytest.mark.parametrize("shape, bins, low, high", [
    ((37,), 4, 0, 3), ((7, 13), 7, -1.5, 2.25), ((5000,), 130, -2, 2), ((3, 11), 1, -0.1, 0.1), ((16,), 4, 0.0, 1e-30),
])  # fmt: skip
def test_each_value_falls_in_torchs_bin(module, shape, bins, low, high):
    """Edges as torch's (max in the last bin, min and max rounded to FP32), values outside the range
    and NaN in none, counts exact."""
    x = sample(*shape, seed=len(shape)) * 2
    flat = x.view(-1)
    flat[:4] = torch.tensor([low, high, float("nan"), high + 1])
    flat[4:8] = torch.linspace(low, high, 4)
    ran = counting()
    with torch2pypto.interpreted(module):
        got = module.f(x, bins, low, high)
    assert ran() == {"histc_kernel.kernel": 1}
    expected = torch.histc(x, bins=bins, min=low, max=high)
    assert got.dtype == expected.dtype and got.shape == expected.shape and torch.equal(got, expected)


@pytest.mark.interpreter
def test_the_datas_range_half_values_and_a_gradient_run_torch(module):
    x = sample(5, 9)
    cases = [(x, 4, 0, 0), (x.bfloat16(), 4, 0, 3), (x.clone().requires_grad_(), 4, 0, 3), (x.t(), 4, 0, 3)]
    for t, bins, low, high in cases:
        ran = counting()
        with torch2pypto.interpreted(module):
            got = module.f(t, bins, low, high)
        assert ran() == {}
        torch.testing.assert_close(got, torch.histc(t, bins=bins, min=low, max=high))
    with torch2pypto.interpreted(module), pytest.raises(RuntimeError, match="max must be larger than min"):
        module.f(x, 4, 3, 0)
