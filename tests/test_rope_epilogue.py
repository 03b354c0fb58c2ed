"""RoPE in the projections' epilogue: q, k and v of one read of x, q's and k's heads rotated on the
vector cores (llama's attention: the projections, their head views and ``apply_rotary_pos_emb``).

The interpreter cases run the translated module against the original (FP32 and BF16, GQA, decode
S=1, odd S, batch 2, with and without biases, with grad: the weights' gradients too) and count the
launches: the one kernel, nothing else. Where the pattern does not hold exactly, the translation
stays as it was (the sibling projections' kernel, then the RoPE region's).
"""

import pytest
import torch

import torch2pypto
from torch2pypto.translator.verification.interpreter import counting

from helpers import assert_heads_match, module
from test_epilogues import original, translated

ATTENTION = """\
import torch
from torch import nn


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    \"\"\"Applies Rotary Position Embedding to the query and key tensors.\"\"\"
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, bias=False):
        super().__init__()
        self.head_dim = head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)

    def forward(self, hidden_states, position_embeddings):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        return query_states, key_states, value_states
"""


def angles(batch, seq, head_dim, dtype):
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = (torch.arange(seq).float()[:, None] + torch.arange(batch).float()[:, None, None] * 3) * inv
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def test_projections_and_rope_are_one_call():
    translation = translated(ATTENTION)
    [region] = [r for r in translation.regions if r.function == "forward"]
    assert region.wrapper.endswith("_3sites") and region.kernel.startswith("fused_forward_")
    assert (f"        hidden_shape = (*input_shape, -1, self.head_dim)\n\n        cos, sin = position_embeddings\n"
            f"        query_states, key_states, value_states = {region.wrapper}(hidden_states, self.q_proj.weight, self.q_proj.bias, "
            "self.k_proj.weight, self.k_proj.bias, self.v_proj.weight, self.v_proj.bias, hidden_shape, cos, sin, apply_rotary_pos_emb)\n"
            "        return query_states") in translation.code
    assert translated(translation.code).code == translation.code  # translating again changes nothing


@pytest.mark.parametrize("change", [
    ("cos, sin = position_embeddings\n", "cos, sin = position_embeddings\n        hidden_states = hidden_states * 2\n"),  # x assigned between
    ("apply_rotary_pos_emb(query_states, key_states, cos, sin)", "apply_rotary_pos_emb(query_states, key_states, cos, sin, 2)"),
    ("return q_embed, k_embed", "return k_embed, q_embed"),  # the helper's results swapped
    ("self.q_proj(hidden_states).view(hidden_shape)", "self.q_norm(self.q_proj(hidden_states).view(hidden_shape))"),  # qwen3's norm
    ("(q, k, cos, sin, unsqueeze_dim=1)", "(a, k, cos, sin, unsqueeze_dim=1)", "(q * cos) + (rotate_half(q)", "(a * cos) + (rotate_half(a)"),  # a kernel name
])
def test_what_is_no_rope_epilogue_stays_as_today(change):
    code = ATTENTION
    for old, new in zip(change[::2], change[1::2]):
        code = code.replace(old, new)
    code = code.replace("self.head_dim = head_dim\n", "self.head_dim = head_dim\n        self.q_norm = nn.Identity()\n")
    kernels = [r.kernel for r in translated(code).regions]
    assert not any(k.startswith("fused_forward_") for k in kernels), kernels
    assert any(k.startswith("linears_3") for k in kernels) or "q_norm(" in code, kernels


# (batch, seq, hidden, heads, kv_heads, head_dim, angles' batch): decode, odd S, GQA, [1, S, D] angles shared by a batch
CASES = ((1, 1, 64, 4, 2, 32, 1), (2, 7, 48, 4, 2, 32, 2), (2, 5, 64, 2, 2, 64, 1), (3, 1, 64, 4, 1, 32, 1))


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_one_launch_matches_torch(dtype, bias):
    translation = translated(ATTENTION)
    [kernel] = [r.kernel for r in translation.regions if r.function == "forward"]
    mod, reference = module(translation.code), original(ATTENTION)["Attention"]
    for batch, seq, hidden, heads, kv_heads, head_dim, angled in CASES:
        torch.manual_seed(seq)
        model = mod.Attention(hidden, heads, kv_heads, head_dim, bias).to(dtype)
        expected = reference(hidden, heads, kv_heads, head_dim, bias).to(dtype)
        expected.load_state_dict(model.state_dict())
        x = (torch.randn(batch, seq, hidden) * 3).to(dtype)
        rotary = angles(angled, seq, head_dim, dtype)
        ran = counting()
        with torch2pypto.interpreted(mod), torch.no_grad():
            got = model(x, rotary)
        name = kernel.replace("_kernel", "_bias_kernel") if bias else kernel
        assert ran() == {f"{name}.kernel": 1}, (seq, ran())
        with torch.no_grad():
            want = expected(x, rotary)
        assert_heads_match(got, want, dtype)


@pytest.mark.interpreter
def test_keeps_torch_gradients():
    translation = translated(ATTENTION)
    mod, reference = module(translation.code), original(ATTENTION)["Attention"]
    torch.manual_seed(0)
    model = mod.Attention(64, 4, 2, 32, True)
    expected = reference(64, 4, 2, 32, True)
    expected.load_state_dict(model.state_dict())
    x = torch.randn(2, 5, 64, requires_grad=True)
    rotary = angles(2, 5, 32, torch.float32)
    ran = counting()
    with torch2pypto.interpreted(mod):
        results = model(x, rotary)
        [kernel] = [r.kernel for r in translation.regions if r.function == "forward"]
        assert ran() == {kernel.replace("_kernel", "_bias_kernel.kernel"): 1}  # backward recomputes the statements as written
        sum((t * (i + 1)).square().sum() for i, t in enumerate(results)).backward()
    got = [x.grad, *(p.grad for p in model.parameters())]
    x.grad = None
    sum((t * (i + 1)).square().sum() for i, t in enumerate(expected(x, rotary))).backward()
    torch.testing.assert_close(got, [x.grad, *(p.grad for p in expected.parameters())], atol=1e-4, rtol=1e-4)


@pytest.mark.interpreter
def test_operands_it_does_not_take_run_as_today():
    """A head_dim of 16: the halves are not 32-byte blocks. The projections' kernel, then the
    RoPE helper (whose region's kernel does not take them either: its statements, rotate_half's
    neg and cat each a kernel), as without the epilogue."""
    translation = translated(ATTENTION)
    mod, reference = module(translation.code), original(ATTENTION)["Attention"]
    torch.manual_seed(0)
    model = mod.Attention(48, 4, 2, 16, True)
    expected = reference(48, 4, 2, 16, True)
    expected.load_state_dict(model.state_dict())
    x = torch.randn(2, 7, 48)
    rotary = angles(1, 7, 16, torch.float32)
    ran = counting()
    with torch2pypto.interpreted(mod), torch.no_grad():
        got = model(x, rotary)
    assert ran() == {"linears_3_bias_kernel.kernel": 1, "neg_kernel.kernel": 2, "join2_kernel.kernel": 2}, ran()  # rotate_half's ops
    with torch.no_grad():
        torch.testing.assert_close(got, expected(x, rotary), atol=1e-5, rtol=1e-5)


def test_projections_whose_rope_helpers_differ_get_other_names():
    """nanochat's rotate_half negates the other half: its projections' kernel is another, and a
    kernels module shared with llama's holds both."""
    from test_fusion import agreeing

    other = ATTENTION.replace("return torch.cat((-x2, x1), dim=-1)", "return torch.cat((x2, -x1), dim=-1)")
    assert other != ATTENTION
    first, second = agreeing(ATTENTION, other)
    assert first and second and not first & second, (first, second)
