"""phi3's attention: one projection sliced into q, k and v, each viewed as heads, then a partial
rotary embedding (``apply_rotary_pos_emb`` rotating each head's first ``cos.shape[-1]`` columns,
the rest passed through) runs as llama's projections-and-RoPE kernel, its weights the slices of
the one weight's rows: one launch for the linear's and the RoPE region's two.

The interpreter cases run the translated module against the original (FP32 and BF16, GQA, decode
S=1, odd S, batch 2, a partial and a whole-head rotary, with and without a bias, with grad: the
weight's gradient too) and count the launches. Where the pattern does not hold, the translation
stays as it was; operands the kernel does not take run the statements as they translate without it.
Layouts: torch's q and k come out of its cat contiguous and its v is a view of the one projection;
the kernel's are the [B, heads, S, D] views of [B, S, heads * D] rows, as llama's (same values,
dtypes and shapes).
"""

import pytest
import torch

import torch2pypto
from torch2pypto.translator.verification.interpreter import counting

from helpers import module
from test_epilogues import original, translated
from test_rope_epilogue import angles

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

    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]

    q_embed = torch.cat([(q_rot * cos) + (rotate_half(q_rot) * sin), q_pass], dim=-1)
    k_embed = torch.cat([(k_rot * cos) + (rotate_half(k_rot) * sin), k_pass], dim=-1)
    return q_embed, k_embed


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, bias=False):
        super().__init__()
        self.head_dim = head_dim
        self.heads, self.kv_heads = heads, kv_heads
        self.qkv_proj = nn.Linear(hidden, (heads + 2 * kv_heads) * head_dim, bias=bias)

    def forward(self, hidden_states, position_embeddings):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        qkv = self.qkv_proj(hidden_states)
        query_pos = self.heads * self.head_dim
        query_states = qkv[..., :query_pos]
        key_states = qkv[..., query_pos : query_pos + self.kv_heads * self.head_dim]
        value_states = qkv[..., query_pos + self.kv_heads * self.head_dim :]

        query_states = query_states.view(hidden_shape).transpose(1, 2)
        key_states = key_states.view(hidden_shape).transpose(1, 2)
        value_states = value_states.view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        return query_states, key_states, value_states
"""


def _kernel(translation) -> str:
    [region] = [r for r in translation.regions if r.function == "forward"]
    return region.kernel


def test_the_linear_slices_views_and_rope_are_one_call():
    translation = translated(ATTENTION)
    [region] = [r for r in translation.regions if r.function == "forward"]
    assert region.kernel.startswith("fused_forward_")
    assert ("        hidden_shape = (*input_shape, -1, self.head_dim)\n\n        query_pos = self.heads * self.head_dim\n\n"
            "        cos, sin = position_embeddings\n"
            f"        query_states, key_states, value_states = {region.wrapper}(hidden_states, self.qkv_proj.weight, self.qkv_proj.bias, "
            "query_pos, query_pos + self.kv_heads * self.head_dim, hidden_shape, cos, sin, apply_rotary_pos_emb)\n"
            "        return query_states") in translation.code
    assert translated(translation.code).code == translation.code  # translating again changes nothing


@pytest.mark.parametrize("change", [
    ("return query_states, key_states, value_states", "return query_states, key_states, value_states, qkv"),  # qkv read after
    ("        key_states = qkv[..., query_pos : query_pos", "        key_states = qkv[..., query_pos + 1 : query_pos"),  # not adjacent
    ("cos, sin = position_embeddings\n", "cos, sin = position_embeddings\n        query_pos = 0\n"),  # a bound assigned between
    ("value_states.view(hidden_shape)", "value_states.view(input_shape)"),  # another view
    ("apply_rotary_pos_emb(query_states, key_states, cos, sin)", "apply_rotary_pos_emb(key_states, query_states, cos, sin)"),
    ("rotary_dim = cos.shape[-1]", "rotary_dim = cos.shape[-1] // 2"),  # the angles' width is not cos's
])
def test_what_is_no_qkv_epilogue_stays_as_today(change):
    kernels = [r.kernel for r in translated(ATTENTION.replace(*change)).regions if r.function == "forward"]
    assert not any(k.startswith("fused_forward_") for k in kernels), kernels


# (batch, seq, hidden, heads, kv_heads, head_dim, rotary_dim, angles' batch): decode, odd S, GQA, partial and whole-head rotary
CASES = ((1, 1, 64, 4, 2, 64, 32, 1), (2, 7, 48, 4, 2, 64, 32, 2), (2, 5, 64, 2, 2, 32, 32, 1), (3, 1, 64, 4, 1, 96, 64, 1))


def _twins(translation, case, dtype, bias):
    batch, seq, hidden, heads, kv_heads, head_dim, rotary, angled = case
    mod, reference = module(translation.code), original(ATTENTION)["Attention"]
    torch.manual_seed(seq)
    model = mod.Attention(hidden, heads, kv_heads, head_dim, bias).to(dtype)
    expected = reference(hidden, heads, kv_heads, head_dim, bias).to(dtype)
    expected.load_state_dict(model.state_dict())
    x = (torch.randn(batch, seq, hidden) * 3).to(dtype)
    return mod, model, expected, x, angles(angled, seq, rotary, dtype)


def _match(got, want, dtype):
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        tolerance = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3.2e-2, rtol=1.6e-2)
        torch.testing.assert_close(g, w, **tolerance)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_one_launch_matches_torch(dtype, bias):
    translation = translated(ATTENTION)
    kernel = _kernel(translation)
    for case in CASES:
        mod, model, expected, x, rotary = _twins(translation, case, dtype, bias)
        ran = counting()
        with torch2pypto.interpreted(mod), torch.no_grad():
            got = model(x, rotary)
        assert ran() == {f"{kernel.replace('_kernel', '_bias_kernel') if bias else kernel}.kernel": 1}, (case, ran())
        with torch.no_grad():
            _match(got, expected(x, rotary), dtype)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_keeps_torch_gradients(dtype):
    translation = translated(ATTENTION)
    mod, model, expected, x, rotary = _twins(translation, CASES[1], dtype, True)
    x.requires_grad_(True)
    ran = counting()
    with torch2pypto.interpreted(mod):
        results = model(x, rotary)
        assert ran() == {_kernel(translation).replace("_kernel", "_bias_kernel.kernel"): 1}  # backward recomputes the statements as written
        sum((t.float() * (i + 1)).square().sum() for i, t in enumerate(results)).backward()
    got = [x.grad, *(p.grad for p in model.parameters())]
    x.grad = None
    sum((t.float() * (i + 1)).square().sum() for i, t in enumerate(expected(x, rotary))).backward()
    tolerance = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=3.2e-2, rtol=1.6e-2)
    torch.testing.assert_close(got, [x.grad, *(p.grad for p in expected.parameters())], **tolerance)


@pytest.mark.interpreter
def test_operands_it_does_not_take_run_as_today():
    """Angles 16 wide: rotate_half's halves are not 32-byte blocks. The linear's kernel, then the
    RoPE helper's statements (its region's kernel does not take them either), as without it."""
    translation = translated(ATTENTION)
    mod, model, expected, x, rotary = _twins(translation, (2, 7, 48, 4, 2, 32, 16, 1), torch.float32, True)
    ran = counting()
    with torch2pypto.interpreted(mod), torch.no_grad():
        got = model(x, rotary)
    assert "linear_bias_kernel.kernel" in ran() and not any(k.startswith("fused_forward_") for k in ran()), ran()
    with torch.no_grad():
        _match(got, expected(x, rotary), torch.float32)


@pytest.mark.interpreter
def test_verify_runs_the_kernel_on_one_weight_sliced_at_its_bounds():
    from test_verify import verified_translation

    translation = translated(ATTENTION)
    ok, out = verified_translation(translation)
    assert ok and "not exercised" not in out, out


# llama's three projections with phi3's partial rotary helper (bamba's, glmasr's): the same kernel
THREE = ATTENTION.replace(
    "        self.qkv_proj = nn.Linear(hidden, (heads + 2 * kv_heads) * head_dim, bias=bias)\n",
    "        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)\n        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)\n"
    "        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)\n",
).replace(ATTENTION[ATTENTION.index("        qkv = "):ATTENTION.index("        cos, sin")],
          "        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)\n"
          "        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)\n"
          "        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)\n\n")


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_three_projections_with_a_partial_rotary_are_one_launch(dtype):
    translation = translated(THREE)
    kernel = _kernel(translation)
    assert kernel.startswith("fused_forward_")
    mod, reference = module(translation.code), original(THREE)["Attention"]
    for batch, seq, hidden, heads, kv_heads, head_dim, rotary, angled in CASES:
        torch.manual_seed(seq)
        model = mod.Attention(hidden, heads, kv_heads, head_dim, True).to(dtype)
        expected = reference(hidden, heads, kv_heads, head_dim, True).to(dtype)
        expected.load_state_dict(model.state_dict())
        x = (torch.randn(batch, seq, hidden) * 3).to(dtype)
        ran = counting()
        with torch2pypto.interpreted(mod), torch.no_grad():
            got = model(x, angles(angled, seq, rotary, dtype))
        assert ran() == {kernel.replace("_kernel", "_bias_kernel.kernel"): 1}, ran()
        with torch.no_grad():
            _match(got, expected(x, angles(angled, seq, rotary, dtype)), dtype)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_heads_normed_then_partly_rotated_are_one_launch(dtype):
    """minimax_m3_vl's: qwen3's norms of q's and k's heads (over the whole head), then the partial rotary."""
    from test_qk_norm_epilogue import NORM, QWEN3, _models

    code = QWEN3.replace(QWEN3[QWEN3.index("def apply_rotary_pos_emb"):QWEN3.index("class Attention")],
                         ATTENTION[ATTENTION.index("def apply_rotary_pos_emb"):ATTENTION.index("class Attention")])
    assert NORM in code and "rotary_dim = cos.shape[-1]" in code
    translation = translated(code)
    [kernel] = [r.kernel for r in translation.regions if r.function == "forward" and r.kernel.startswith("fused_forward_") and "linear" in r.ops]
    for batch, seq, hidden, heads, kv_heads, head_dim, rotary, angled in CASES:
        torch.manual_seed(seq)
        mod, model, expected = _models(code, translation, dtype, False, hidden, heads, kv_heads, head_dim)
        x = (torch.randn(batch, seq, hidden) * 3).to(dtype)
        ran = counting()
        with torch2pypto.interpreted(mod), torch.no_grad():
            got = model(x, angles(angled, seq, rotary, dtype))
        assert ran() == {f"{kernel}.kernel": 1}, ran()
        with torch.no_grad():
            _match(got, expected(x, angles(angled, seq, rotary, dtype)), dtype)
