"""Norms of one value per channel: nn.BatchNorm1d/2d/3d and F.batch_norm.

Eval mode (running statistics) is a per-channel affine, one kernel reading the input in place as
each channel's rows. Training mode normalizes by the batch's statistics and updates the running
ones (a module also counts num_batches_tracked): the wrapper runs the module's own forward, so
the module's state changes exactly as torch's.
"""

import pytest
import torch

import torch2pypto
from helpers import load, run, sample, translate
from torch2pypto.translator.verification.interpreter import counting

BLOCK = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.{cls}
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.norm(x))
"""


def _pair(tmp_path, cls, dtype=torch.float32, seed=3):
    """The translated and the original Block, with the same random parameters and statistics."""
    source = BLOCK.format(cls=cls)
    translation = translate(source)
    assert [(r.api.rsplit(".", 1)[1], r.status) for r in translation.records] == [("ReLU", "converted"), (cls.split("(")[0], "converted")]
    translated = load(tmp_path / "block_pypto.py", translation.code)
    reference = run(source)["Block"]()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in reference.norm.state_dict().items():
            if t.is_floating_point():
                t.copy_(torch.rand(t.shape, generator=generator) + 0.5 if "var" in name else torch.randn(t.shape, generator=generator))
    model = translated.Block()
    model.load_state_dict(reference.state_dict())
    return model.to(dtype), reference.to(dtype), translated


@pytest.mark.interpreter
@pytest.mark.parametrize("cls, shape", [
    ("BatchNorm2d(7)", (2, 7, 5, 13)), ("BatchNorm1d(19)", (3, 19, 37)), ("BatchNorm1d(19)", (130, 19)),
    ("BatchNorm3d(3, affine=False)", (2, 3, 2, 3, 5)), ("BatchNorm2d(70, eps=1e-3)", (1, 70, 3, 3)),
    ("BatchNorm2d(8)", (1, 8, 64, 128)), ("BatchNorm1d(2048)", (4, 2048)),  # real widths: 8192 columns, 2048 channels
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eval_mode_runs_one_kernel_and_matches_the_module(tmp_path, cls, shape, dtype):
    model, reference, translated = _pair(tmp_path, cls, dtype)
    model.eval(), reference.eval()
    x = sample(*shape, dtype=dtype)
    launched = counting()
    with torch2pypto.interpreted(translated):
        got = model(x)
    assert sum(n for k, n in launched().items() if k.startswith("batch_norm")) == 1, launched()
    expected = reference(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, **({"atol": 1e-2, "rtol": 1e-2} if dtype == torch.bfloat16 else {}))


@pytest.mark.interpreter
@pytest.mark.parametrize("cls", ["BatchNorm2d(7)", "BatchNorm2d(7, momentum=None)", "BatchNorm2d(7, track_running_stats=False)"])
def test_training_mode_and_untracked_statistics_run_the_modules_forward_and_keep_its_state(tmp_path, cls):
    """No kernel: the batch's statistics, running_mean/var updated and num_batches_tracked counted
    (momentum=None averages by that count) as the module does; without running statistics, eval
    mode uses the batch's too. Gradients are the module's."""
    model, reference, translated = _pair(tmp_path, cls)
    for mode in (True, True, False) if "track_running_stats" in cls else (True, True):
        model.train(mode), reference.train(mode)
        x, y = sample(2, 7, 5, 13, seed=7).requires_grad_(), sample(2, 7, 5, 13, seed=7).requires_grad_()
        launched = counting()
        with torch2pypto.interpreted(translated):
            got = model(x)
        expected = reference(y)
        assert not any(k.startswith("batch_norm") for k in launched()), launched()
        torch.testing.assert_close(got, expected)
        got.sum().backward(), expected.sum().backward()
        torch.testing.assert_close(x.grad, y.grad)
        for (name, mine), theirs in zip(model.state_dict().items(), reference.state_dict().values()):
            torch.testing.assert_close(mine, theirs, msg=name)


def test_the_module_call_binds_its_statistics_mode_and_forward():
    code = translate(BLOCK.format(cls="BatchNorm2d(7)")).code
    assert ("pypto_batch_norm(x, self.norm.running_mean, self.norm.running_var, weight=self.norm.weight, bias=self.norm.bias, "
            "training=self.norm.training, eps=self.norm.eps, forward=self.norm.forward)") in code


def test_a_literal_training_mode_stays_torch_and_batch_norm_does_not_fuse():
    records = translate("import torch\nimport torch.nn.functional as F\n\n\ndef f(x: torch.Tensor, m: torch.Tensor, v: torch.Tensor):\n"
                        "    return F.batch_norm(x, m, v, training=True)\n").records
    assert [(r.status, r.reason) for r in records][0][1].startswith("training mode")
    translation = translate("import torch\nimport torch.nn.functional as F\n\n\ndef f(x: torch.Tensor, m: torch.Tensor, v: torch.Tensor):\n"
                            "    h = x * 2.0\n    return F.batch_norm(h, m, v) + 1.0\n")
    assert "pypto_batch_norm(" in translation.code and not any("batch_norm" in " ".join(r.ops) for r in translation.regions)


def test_group_norm_stays_torch_with_its_reason():
    """nn.GroupNorm is the table's group_norm, which no kernel computes yet: torch, said why."""
    (norm, relu) = sorted(translate(BLOCK.format(cls="GroupNorm(2, 8)")).records, key=lambda r: r.api)
    assert norm.api == "torch.nn.GroupNorm" and norm.status == "unsupported" and norm.reason.startswith("group_norm's statistics")
