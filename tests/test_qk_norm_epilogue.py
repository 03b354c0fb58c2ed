"""Per-head norms in the RoPE epilogue: qwen3's attention, ``self.q_norm(self.q_proj(h).view(s))``
and k's likewise, each head normed (its norm class's forward, the region recorded from it) before
its rotary embedding, in the one kernel of the projections (:mod:`torch2pypto.rules.rope`).

The interpreter cases run the translated module against the original (FP32 and BF16, GQA, decode
S=1, odd S, batch 2, head_dim 64 and 128, with grad: x's, the weights', the biases' and both
gammas' gradients) and count the launches: the one kernel, nothing else. Where the pattern does
not hold (a norm of another forward, no norm of k's heads), or a norm module's call would run
more than its class's forward, the statements run as they did.
"""

import pytest
import torch

import torch2pypto
from torch2pypto.translator.verification.interpreter import counting

from helpers import GEMMA_RMSNORM, LLAMA_RMSNORM, assert_heads_match, module
from test_epilogues import original, translated
from test_rope_epilogue import ATTENTION, angles

NORM = "\n\n" + LLAMA_RMSNORM

QWEN3 = (ATTENTION.replace("\n\ndef rotate_half", NORM + "\n\ndef rotate_half")
         .replace("        self.head_dim = head_dim\n", "        self.head_dim = head_dim\n        self.q_norm = RMSNorm(head_dim)\n"
                  "        self.k_norm = RMSNorm(head_dim, 1e-5)\n")
         .replace("self.q_proj(hidden_states).view(hidden_shape).transpose", "self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose")
         .replace("self.k_proj(hidden_states).view(hidden_shape).transpose", "self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose"))


GEMMA3_NORM = "\n\n" + GEMMA_RMSNORM

# gemma3's: the norms as statements of their own after the heads' views, x * (1 + w) in FP32
GEMMA3 = (QWEN3.replace(NORM, GEMMA3_NORM)
          .replace("self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose", "self.q_proj(hidden_states).view(hidden_shape).transpose")
          .replace("self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose", "self.k_proj(hidden_states).view(hidden_shape).transpose")
          .replace("\n\n        cos, sin", "\n\n        query_states = self.q_norm(query_states)\n        key_states = self.k_norm(key_states)\n\n        cos, sin"))


def kernel_of(translation):
    [region] = [r for r in translation.regions if r.function == "forward" and r.kernel.startswith("fused_forward_")
                and "linear" in r.ops]
    return region


# qwen3_moe's norm class stands after its attention: its forward's region is found ahead of its turn
AFTER = QWEN3.replace(NORM, "") + NORM


@pytest.mark.parametrize("code", [QWEN3, AFTER, GEMMA3])
def test_norms_projections_and_rope_are_one_call(code):
    translation = translated(code)
    region = kernel_of(translation)
    assert (f"        cos, sin = position_embeddings\n        query_states, key_states, value_states = {region.wrapper}(hidden_states, "
            "self.q_proj.weight, self.q_proj.bias, self.k_proj.weight, self.k_proj.bias, self.v_proj.weight, self.v_proj.bias, hidden_shape, "
            "cos, sin, apply_rotary_pos_emb, self.q_norm, RMSNorm, self.k_norm)\n        return query_states") in translation.code
    assert "_inlined((q_norm, RMSNorm), (k_norm, RMSNorm))" in translation.code  # each norm runs its class's forward, or today's kernels
    assert translated(translation.code).code == translation.code  # translating again changes nothing


def test_a_comment_above_the_projections_heads_what_replaces_them():
    """t5gemma2's layout: a comment, then gemma3's projections and norms with blank lines between
    and after: the blank line after them goes, so the comment stays above the statements that
    replace them (the invariants oracle in ``translated`` checks every other byte)."""
    code = GEMMA3.replace("        query_states = self.q_proj", "        # self-attention.\n        query_states = self.q_proj")
    assert code != GEMMA3
    translation = translated(code)
    assert "        # self-attention.\n        cos, sin = position_embeddings\n        query_states, key_states, value_states = " in translation.code


@pytest.mark.parametrize("change", [
    ("self.k_norm(self.k_proj(hidden_states).view(hidden_shape))", "self.k_proj(hidden_states).view(hidden_shape)"),  # no norm of k's heads
    ("        input_dtype = hidden_states.dtype\n", "        input_dtype = hidden_states.dtype\n        print(input_dtype)\n"),  # another forward
    ("        return self.weight * hidden_states.to(input_dtype)", "        return self.weight * hidden_states.to(input_dtype), variance"),
    ("self.v_proj(hidden_states).view(hidden_shape)", "self.q_norm(self.v_proj(hidden_states).view(hidden_shape))"),  # v's heads normed
    ("        key_states = self.k_norm(key_states)\n", "", GEMMA3),  # gemma3's, no norm of k's heads
    ("self.k_norm(key_states)", "self.k_norm(query_states)", GEMMA3),
])
def test_what_is_no_norm_epilogue_stays_as_today(change):
    base = change[2] if len(change) > 2 else QWEN3
    code = base.replace(*change[:2])
    assert code != base
    kernels = [r.kernel for r in translated(code).regions if r.function == "forward" and "linear" in r.ops]
    assert kernels == ["linears_3_kernel"], kernels


# (batch, seq, hidden, heads, kv_heads, head_dim, angles' batch): decode, odd S, GQA, [1, S, D] angles shared by a batch
CASES = ((1, 1, 64, 4, 2, 64, 1), (2, 7, 48, 4, 2, 64, 2), (2, 5, 64, 2, 1, 128, 1))


def _models(code, translation, dtype, bias, hidden, heads, kv_heads, head_dim):
    mod, reference = module(translation.code), original(code)
    model = mod.Attention(hidden, heads, kv_heads, head_dim, bias)
    expected = reference["Attention"](hidden, heads, kv_heads, head_dim, bias)
    with torch.no_grad():  # gammas apart from 1, as trained ones are
        model.q_norm.weight.uniform_(0.5, 1.5)
        model.k_norm.weight.uniform_(0.5, 1.5)
    model, expected = model.to(dtype), expected.to(dtype)
    expected.load_state_dict(model.state_dict())
    return mod, model, expected


@pytest.mark.interpreter
@pytest.mark.parametrize("code", [QWEN3, GEMMA3], ids=["qwen3", "gemma3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_launch_matches_torch(dtype, code):
    translation = translated(code)
    kernel = kernel_of(translation).kernel
    for bias, (batch, seq, hidden, heads, kv_heads, head_dim, angled) in zip((False, True, False), CASES):
        torch.manual_seed(seq)
        mod, model, expected = _models(code, translation, dtype, bias, hidden, heads, kv_heads, head_dim)
        x = (torch.randn(batch, seq, hidden) * 3).to(dtype)
        rotary = angles(angled, seq, head_dim, dtype)
        ran = counting()
        with torch2pypto.interpreted(mod), torch.no_grad():
            got = model(x, rotary)
        assert ran() == {f"{kernel.replace('_kernel', '_bias_kernel') if bias else kernel}.kernel": 1}, (seq, ran())
        with torch.no_grad():
            want = expected(x, rotary)
        assert_heads_match(got, want, dtype)


@pytest.mark.interpreter
@pytest.mark.parametrize("code", [QWEN3, GEMMA3], ids=["qwen3", "gemma3"])
def test_keeps_torch_gradients(code):
    translation = translated(code)
    torch.manual_seed(0)
    mod, model, expected = _models(code, translation, torch.float32, True, 64, 4, 2, 64)
    x = torch.randn(2, 5, 64, requires_grad=True)
    rotary = angles(2, 5, 64, torch.float32)
    ran = counting()
    with torch2pypto.interpreted(mod):
        results = model(x, rotary)
        assert ran() == {kernel_of(translation).kernel.replace("_kernel", "_bias_kernel.kernel"): 1}  # backward recomputes the statements as written
        sum((t * (i + 1)).square().sum() for i, t in enumerate(results)).backward()
    got = [x.grad, *(p.grad for p in model.parameters())]
    assert model.q_norm.weight.grad is not None and model.k_norm.weight.grad is not None
    x.grad = None
    sum((t * (i + 1)).square().sum() for i, t in enumerate(expected(x, rotary))).backward()
    torch.testing.assert_close(got, [x.grad, *(p.grad for p in expected.parameters())], atol=1e-4, rtol=1e-4)


@pytest.mark.interpreter
def test_a_norm_call_of_more_than_its_forward_runs_as_today():
    """A forward hook on k_norm: the projections' kernel, q's and k's norms (their own kernels,
    the hook run), then RoPE's, as without the epilogue."""
    translation = translated(QWEN3)
    torch.manual_seed(0)
    mod, model, expected = _models(QWEN3, translation, torch.float32, False, 64, 4, 2, 64)
    for m in (model, expected):
        m.k_norm.register_forward_hook(lambda _, __, out: out * 2)
    x = torch.randn(2, 7, 64)
    rotary = angles(1, 7, 64, torch.float32)
    ran = counting()
    with torch2pypto.interpreted(mod), torch.no_grad():
        got = model(x, rotary)
    runs = ran()
    assert runs["linears_3_kernel.kernel"] == 1 and not any(k.startswith(kernel_of(translation).kernel) for k in runs), runs
    with torch.no_grad():
        torch.testing.assert_close(got, expected(x, rotary), atol=1e-5, rtol=1e-5)
