"""Norms of channels: nn.BatchNorm1d/2d/3d and F.batch_norm, nn.GroupNorm and F.group_norm.

Eval mode (running statistics) is a per-channel affine, one kernel reading the input in place as
each channel's rows. Training mode normalizes by the batch's statistics and updates the running
ones (a module also counts num_batches_tracked): the wrapper runs the module's own forward, so
the module's state changes exactly as torch's.

Group norm normalizes each group's channels and positions as one row (a row kernel; wav2vec2's
groups are whole sequences), then applies weight and bias per channel (a channel kernel over the
normalized rows in FP32): two launches, one without affine parameters.
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


@pytest.mark.interpreter
@pytest.mark.parametrize("cls, shape, launches", [
    ("GroupNorm(2, 6)", (2, 6, 7), 2), ("GroupNorm(1, 4)", (1, 4, 3, 5), 2), ("GroupNorm(4, 4, affine=False)", (1, 4, 3, 5), 1),
    ("GroupNorm(3, 3, eps=1e-3)", (130, 3), 2),
    # wav2vec2's GroupNorm(num_groups=C, num_channels=C) over a long sequence; one group of 16 x 3000
    # positions: rows wider than the unified buffer take column tiles, they do not fall back
    ("GroupNorm(num_groups=8, num_channels=8, affine=True)", (2, 8, 3000), 2), ("GroupNorm(1, 16)", (1, 16, 3000), 2),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_group_norm_launches_its_kernels_and_matches_the_module(tmp_path, cls, shape, launches, dtype):
    model, reference, translated = _pair(tmp_path, cls, dtype)
    x = sample(*shape, dtype=dtype)
    launched = counting()
    with torch.no_grad(), torch2pypto.interpreted(translated):
        got = model(x)
    assert sum(n for k, n in launched().items() if k.startswith("group_norm")) == launches, launched()
    expected = reference(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, **({"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {}))


@pytest.mark.interpreter
def test_group_norm_gradients_are_torchs_and_a_non_contiguous_input_runs_torch(tmp_path):
    """With grad mode on, input, weight and bias get torch's gradients. A transposed or channels
    last input would be read from a copy, and torch keeps channels last: torch runs."""
    model, reference, translated = _pair(tmp_path, "GroupNorm(2, 6)")
    for x in (sample(2, 7, 6).transpose(1, 2), sample(2, 5, 4, 6).permute(0, 3, 1, 2)):
        launched = counting()
        with torch.no_grad(), torch2pypto.interpreted(translated):
            got = model(x)
        assert not any(k.startswith("group_norm") for k in launched()) and got.stride() == reference(x).stride(), launched()
        torch.testing.assert_close(got, reference(x))
    x, y = sample(2, 6, 7).requires_grad_(), sample(2, 6, 7).requires_grad_()
    launched = counting()
    with torch2pypto.interpreted(translated):
        got = model(x)
    assert sum(n for k, n in launched().items() if k.startswith("group_norm")) == 2, launched()
    expected = reference(y)
    torch.testing.assert_close(got, expected)
    got.square().sum().backward(), expected.square().sum().backward()
    torch.testing.assert_close(x.grad, y.grad)
    for (name, mine), theirs in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(mine.grad, theirs.grad, msg=name)


def test_group_norm_runs_torch_where_torch_raises_or_the_kernel_cannot(tmp_path):
    """Groups that do not divide the channels and a 1-D input raise as torch; a weight of another
    dtype than the input's runs torch."""
    source = "import torch\nimport torch.nn.functional as F\n\n\ndef f(x, g, w=None):\n    return F.group_norm(x, g, w)\n"
    module = load(tmp_path / "snippet_pypto.py", translate(source).code)
    launched = counting()
    with torch2pypto.interpreted(module):
        for x, g in ((sample(2, 6, 7), 4), (sample(6), 1)):
            with pytest.raises(RuntimeError) as ours:
                module.f(x, g)
            with pytest.raises(RuntimeError) as theirs:
                torch.nn.functional.group_norm(x, g)
            assert str(ours.value) == str(theirs.value)
        x, w = sample(2, 6, 7, dtype=torch.bfloat16), sample(6)
        torch.testing.assert_close(module.f(x, 2, w), torch.nn.functional.group_norm(x, 2, w))
    assert not launched(), launched()
