"""Training under ``interpreted()``: with autograd recording, kernels compute the forward and the
gradients are torch's, whatever the caller does with a kernel's result or its inputs."""

import pytest
import torch

import torch2pypto
from helpers import load, sample, translate
from torch2pypto.translator.verification.interpreter import counting

pytestmark = pytest.mark.interpreter

BLOCK = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.q = nn.Linear(64, 32)
        self.k = nn.Linear(64, 32)

    def forward(self, x):
        h = self.norm(x)
        return self.q(h) + self.k(h)


class Scaled(Block):
    def forward(self, x):
        h = self.norm(x)
        h.mul_(2)
        return self.q(h)


def exp(x: torch.Tensor):
    return torch.exp(x)
"""


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    """The translated and the original module (from files: PyPTO reads a kernel's source)."""
    folder = tmp_path_factory.mktemp("training")
    return tuple(load(folder / f"{name}.py", code) for name, code in
                 (("training_block", translate(BLOCK).code), ("original_block", BLOCK)))


def _loss_and_grads(model, x):
    x = x.clone().requires_grad_()
    loss = model(x).square().sum()
    loss.backward()
    return loss.detach(), x.grad, {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("name, kernels", [
    ("Block", {"layer_norm_weight_bias_kernel.kernel": 1, "linear_bias_kernel.kernel": 2, "add_kernel.kernel": 1}),  # one output read twice
    ("Scaled", {"layer_norm_weight_bias_kernel.kernel": 1, "linear_bias_kernel.kernel": 1}),  # changed in place
])
def test_a_kernels_result_trains_as_torchs_does(translated, name, kernels):
    module, original = translated
    torch.manual_seed(0)
    expected = getattr(original, name)()
    model = getattr(module, name)()
    model.load_state_dict(expected.state_dict())
    x = sample(3, 5, 64)
    launched = counting()
    with torch2pypto.interpreted(module):
        got = _loss_and_grads(model, x)
    assert launched() == kernels
    torch.testing.assert_close(got, _loss_and_grads(expected, x), rtol=1e-4, atol=1e-4)


def test_a_kernel_leaves_a_tensor_torch_saved_for_backward_unchanged(translated):
    module, _ = translated
    x = sample(4, 64).requires_grad_()
    launched = counting()
    with torch2pypto.interpreted(module):
        (x.sin() * module.exp(x)).sum().backward()  # sin saved x; the kernel reads it
    assert sum(launched().values()) == 1
    got, x.grad = x.grad, None
    (x.sin() * torch.exp(x)).sum().backward()
    torch.testing.assert_close(got, x.grad)
