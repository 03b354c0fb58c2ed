"""The grouped family beyond the table's examples: an MoE layer's expert matmuls as transformers'
integrations/moe.py calls them (tokens routed top-k, sorted by expert, offs their cumulative
counts), over expert counts and top-k values with experts that no token chose, gradients, and
the forms that run torch."""

import pytest
import torch

import torch2pypto
from helpers import load, statuses, translate
from torch2pypto.translator.verification.interpreter import counting

EXPERTS = """\
import torch


def experts(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor):
    return torch.nn.functional.grouped_mm(x, w.transpose(-2, -1), offs=offs)


def stacked(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor):
    return torch._grouped_mm(x, w, offs=offs)
"""


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return load(tmp_path_factory.mktemp("grouped") / "experts_pypto.py", translate(EXPERTS).code)


def routed(tokens: int, experts: int, top_k: int, k: int, dtype: torch.dtype, seed: int = 0):
    """The rows grouped_mm_experts_forward multiplies: each token's top_k experts (expert 1 never
    chosen), the rows sorted by expert, and offs their cumulative counts (int32)."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.rand(tokens, experts, generator=generator)
    if experts > top_k:
        scores[:, 1] = -1.0
    ids = scores.topk(top_k, dim=-1).indices.reshape(-1)
    ids, perm = ids.sort()
    x = torch.randn(tokens, k, generator=generator).to(dtype)[perm // top_k]
    offs = torch.cumsum(torch.bincount(ids, minlength=experts), 0, dtype=torch.int32)
    return x, offs


def test_grouped_mm_sites_convert():
    assert statuses(EXPERTS) == [("torch.nn.functional.grouped_mm", "converted"), ("torch.Tensor.transpose", "host-side"),
                                 ("torch._grouped_mm", "converted")]  # fmt: skip


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens, experts, top_k, k, n", [(7, 4, 2, 64, 32), (37, 8, 2, 72, 40), (5, 3, 1, 200, 24), (19, 1, 1, 40, 48)])
def test_the_experts_matmuls_run_one_kernel_and_match_torch(module, dtype, tokens, experts, top_k, k, n):
    x, offs = routed(tokens, experts, top_k, k, dtype)
    if experts > top_k:
        assert (offs.diff(prepend=offs.new_zeros(1)) == 0).any()  # an expert without tokens
    w = torch.randn(experts, n, k, generator=torch.Generator().manual_seed(2)).to(dtype)
    for function, weights in ((module.experts, w), (module.stacked, w.transpose(-2, -1).contiguous())):
        launched = counting()
        with torch2pypto.interpreted(module):
            got = function(x, weights, offs)
        assert launched() == {"grouped_mm_kernel.kernel": 1}
        expected = torch._grouped_mm(x, weights if function is module.stacked else w.transpose(-2, -1), offs=offs)
        torch.testing.assert_close(got, expected)  # K tiles accumulate in another order than torch's


@pytest.mark.interpreter
def test_the_experts_matmuls_carry_torchs_gradients(module):
    x, offs = routed(13, 4, 2, 64, torch.float32)
    x.requires_grad_()
    w = torch.randn(4, 32, 64, requires_grad=True)
    launched = counting()
    with torch2pypto.interpreted(module):
        got = module.experts(x, w, offs)
    assert launched() == {"grouped_mm_kernel.kernel": 1}
    expected = torch.nn.functional.grouped_mm(x, w.transpose(-2, -1), offs=offs)
    grad = torch.randn_like(expected)
    for a, b in zip(torch.autograd.grad(got, [x, w], grad), torch.autograd.grad(expected, [x, w], grad)):
        torch.testing.assert_close(a, b)


@pytest.mark.interpreter
def test_forms_the_kernel_does_not_take_run_torch(module):
    """No offs (a batch of matrices), int64 or strided offs and strides torch refuses run torch,
    which computes or raises as it does."""
    x, offs = routed(7, 4, 2, 64, torch.float32)
    w = torch.randn(4, 32, 64)
    launched = counting()
    with torch2pypto.interpreted(module):
        batched = module.stacked(torch.randn(4, 7, 64), w.transpose(-2, -1).contiguous(), None)
        with pytest.raises(RuntimeError, match="int32"):
            module.experts(x, w, offs.long())
        strided = module.experts(x, w, torch.stack([offs, offs], 1)[:, 0])
        with pytest.raises(RuntimeError, match="16 bytes"):
            module.experts(torch.randn(x.shape[0], 65)[:, :63], torch.randn(4, 32, 63), offs)
    assert launched() == {}
    assert batched.shape == (4, 7, 32)
    torch.testing.assert_close(strided, torch._grouped_mm(x, w.transpose(-2, -1), offs=offs))
