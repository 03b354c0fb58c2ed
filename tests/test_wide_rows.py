"""Converted sites launch at the widths of real models (hidden 2048 to 16384, intermediate up to
53248, vocab 256k), not only at test sizes: a row too wide for the unified buffer splits into
column tiles, it does not fall back to torch. One or two rows each, to keep the interpreter fast."""

import pytest
import torch

import torch2pypto
from helpers import sample, translate
from table_cases import load
from torch2pypto.translator.verification import interpreter

pytestmark = pytest.mark.interpreter

SOURCE = """\
import torch
import torch.nn.functional as F


def silu(x: torch.Tensor):
    return F.silu(x)


def to_float(x: torch.Tensor):
    return x.float()


def row_sum(x: torch.Tensor):
    return x.sum(-1)


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def softmax(x: torch.Tensor):
    return torch.softmax(x, dim=-1)


def cumsum(x: torch.Tensor):
    return torch.cumsum(x, dim=-1)


def cat(x: torch.Tensor, y: torch.Tensor):
    return torch.cat((x, y), dim=-1)


def linear(x: torch.Tensor, w: torch.Tensor):
    return F.linear(x, w)


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states
"""


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wide_rows")
    (folder / "original.py").write_text(SOURCE)
    translation = translate(SOURCE)
    assert {r.status for r in translation.records} == {"converted", "host-side"}, translation.records  # torch.ones
    (folder / "translated.py").write_text(translation.code)
    return load(folder / "translated.py"), load(folder / "original.py")


def launched(modules, name, *args, tolerance=1e-5):
    """Run translated `name` on `args`: it launches one kernel and computes what torch does."""
    translated, original = modules
    expected = getattr(original, name)(*args)
    count = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(translated):
        got = getattr(translated, name)(*args)
    assert sum(count().values()) == 1, f"{name} launched {dict(count())}"
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=tolerance)


def test_elementwise_at_intermediate_width(modules):
    launched(modules, "silu", sample(1, 53248))


def test_casting_at_intermediate_width(modules):
    launched(modules, "to_float", sample(1, 53248, dtype=torch.bfloat16))


def test_row_reduction_at_intermediate_width(modules):
    launched(modules, "row_sum", sample(2, 53248), tolerance=1e-3)


@pytest.mark.parametrize("cols", [4096, 16384])
def test_layer_norm_at_hidden_widths(modules, cols):
    launched(modules, "layer_norm", sample(2, cols), sample(cols, seed=1), sample(cols, seed=2), tolerance=1e-4)


@pytest.mark.parametrize("cols, dtype", [(53248, torch.float32), (53248, torch.bfloat16), (262144, torch.float32)], ids=str)
def test_softmax_at_intermediate_and_vocab_widths(modules, cols, dtype):
    launched(modules, "softmax", sample(1, cols, dtype=dtype), tolerance=1e-2 if dtype == torch.bfloat16 else 1e-5)


def test_scan_at_intermediate_width(modules):
    launched(modules, "cumsum", sample(1, 53248), tolerance=1e-2)


def test_cat_at_hidden_width(modules):
    launched(modules, "cat", sample(1, 16384), sample(1, 16384, seed=1))


def test_fused_rms_norm_at_hidden_width(modules):
    translated, original = modules
    ours, theirs = translated.RMSNorm(16384), original.RMSNorm(16384)
    ours.load_state_dict(theirs.state_dict())
    x = sample(2, 16384)
    count = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(translated):
        got = ours(x)
    assert sum(count().values()) == 1, dict(count())
    torch.testing.assert_close(got, theirs(x), atol=1e-5, rtol=1e-5)


def test_linear_at_vocab_width(modules):
    # the weight's rows are no matmul input's last dim: PyPTO's 65535 limit is k's
    launched(modules, "linear", sample(2, 64), sample(262144, 64, seed=1), tolerance=1e-4)
