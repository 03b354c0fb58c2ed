"""A norm right before an attention's call runs in the prologue of its projections' kernel:
llama's ``hidden_states = self.input_layernorm(hidden_states)`` then ``self.self_attn(hidden_states,
...)``, whose forward projects it with RoPE in one kernel (tests/test_rope_epilogue.py), is one
launch, not two.

The interpreter cases run the translated layer against the original (FP32 and BF16, GQA, decode
S=1, odd S, a hidden size no multiple of 16, with and without biases) and count the launches: the
one kernel, nothing else. With grad mode on, a hook on the attention, or a norm of another class,
the norm runs its own kernel first (two launches), still torch's values. Where the norm's result
could be read by anything but the projections, the translation keeps the norm's statement.
"""

import dataclasses

import pytest
import torch

import torch2pypto
from torch2pypto import Options
from torch2pypto.translator.verification import verify
from torch2pypto.translator.verification.interpreter import counting

from helpers import GEMMA_RMSNORM, LLAMA_RMSNORM, assert_heads_match, module
from test_epilogues import original, translated
from test_rope_epilogue import ATTENTION, angles
from test_verify import verified_translation

LAYER = ATTENTION + "\n\n" + LLAMA_RMSNORM + """

class Layer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, bias=False):
        super().__init__()
        self.self_attn = Attention(hidden, heads, kv_heads, head_dim, bias)
        self.input_layernorm = RMSNorm(hidden)

    def forward(self, hidden_states, position_embeddings):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        query, key, value = self.self_attn(hidden_states=hidden_states, position_embeddings=position_embeddings)
        return query, key, value, residual
"""

GEMMA = LAYER.replace(LLAMA_RMSNORM, GEMMA_RMSNORM)  # x * (1 + w), in FP32

# (batch, seq, hidden, heads, kv_heads, head_dim, angles' batch): decode, odd S, GQA, hidden 40
CASES = ((1, 1, 64, 4, 2, 32, 1), (2, 7, 48, 4, 2, 32, 2), (1, 3, 40, 2, 1, 32, 1))


def _layers(code: str, case, dtype, bias=False):
    translation = translated(code)
    mod, reference = module(translation.code), original(code)["Layer"]
    batch, seq, hidden, heads, kv_heads, head_dim, angled = case
    torch.manual_seed(seq)
    model = mod.Layer(hidden, heads, kv_heads, head_dim, bias)
    for p in model.parameters():
        torch.nn.init.normal_(p, 0.5, 0.3)
    expected = reference(hidden, heads, kv_heads, head_dim, bias)
    expected.load_state_dict(model.state_dict())
    x = (torch.randn(batch, seq, hidden) * 3).to(dtype)
    return mod, model.to(dtype), expected.to(dtype), (x, angles(angled, seq, head_dim, dtype))


def _run(mod, model, expected, inputs, grad=False):
    ran = counting()
    with torch2pypto.interpreted(mod), torch.set_grad_enabled(grad):
        got = model(*inputs)
    with torch.no_grad():
        want = expected(*inputs)
    assert_heads_match(got[:3], want[:3], inputs[0].dtype)
    assert got[3] is inputs[0]
    return {k.removesuffix(".kernel"): n for k, n in ran().items()}


def test_the_norms_statement_defers_it_into_the_projections():
    translation = translated(LAYER)
    layer = translation.code.split("class Layer")[1]
    assert "        hidden_states = pypto_fused_forward_" in layer and "(self.input_layernorm, RMSNorm, hidden_states, self.self_attn, Attention)\n" in layer
    assert "_deferred(shape, " in translation.code and "_deferred_prologue(hidden_states)" in translation.code
    assert translated(translation.code).code == translation.code  # translating again changes nothing
    assert "_prologue(" not in translated(LAYER, Options(fuse=False)).code


@pytest.mark.parametrize("change", [
    ("return query, key, value, residual", "return query, key, value, hidden_states"),  # the norm's result read after the call
    ("query, key, value = self.self_attn(", "hidden_states = hidden_states * 2\n        query, key, value = self.self_attn("),  # not right before
    ("        return query_states, key_states, value_states\n", "        return query_states, key_states, value_states, hidden_states.sum()\n"),  # the forward reads its values
    ("self.self_attn(hidden_states=hidden_states, ", "self.self_attn(hidden_states=hidden_states + 0, "),  # not the name passed
    ("        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)\n"
     "        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)\n"
     "        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)\n\n"
     "        cos, sin = position_embeddings\n"
     "        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)\n",
     "        for _ in range(2):  # the projections twice: a second call would find the norm taken\n"
     "            query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)\n"
     "            key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)\n"
     "            value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)\n\n"
     "            cos, sin = position_embeddings\n"
     "            query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)\n"),
])
def test_a_result_anything_else_may_read_keeps_the_norms_statement(change):
    code = LAYER.replace(*change)
    assert code != LAYER
    translation = translated(code)
    assert "_deferred(" not in translation.code
    assert any(r.wrapper.endswith("_3sites") for r in translation.regions) or "hidden_states.sum()" in code  # the projections' kernel all the same


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("bias", [False, True], ids=["", "bias"])
@pytest.mark.parametrize("code", ["LAYER", "GEMMA"])
def test_one_launch_computes_the_norm_and_the_projections(dtype, bias, code):
    for case in CASES:
        launched = _run(*_layers(globals()[code], case, dtype, bias))
        assert len(launched) == 1 and sum(launched.values()) == 1, (case, launched)
        [name] = launched
        assert name.startswith("fused_forward_") and name.endswith("_bias_kernel" if bias else "_kernel"), name


@pytest.mark.interpreter
@pytest.mark.parametrize("change", ["grad mode", "attention hook", "norm of another class"])
def test_otherwise_the_norm_runs_its_own_kernel_first(change):
    mod, model, expected, inputs = _layers(LAYER, CASES[1], torch.float32)
    handles = []
    if change == "attention hook":
        handles = [m.self_attn.register_forward_pre_hook(lambda m, args, kwargs: (args, kwargs), with_kwargs=True) for m in (model, expected)]
    elif change == "norm of another class":
        for m in (model, expected):
            norm = torch.nn.RMSNorm(48, eps=1e-6)
            norm.weight.data.copy_(m.input_layernorm.weight.data)
            m.input_layernorm = norm
    try:
        launched = _run(mod, model, expected, inputs, grad=change == "grad mode")
    finally:
        for handle in handles:
            handle.remove()
    assert sum(launched.values()) == (1 if change == "norm of another class" else 2), launched  # nn.RMSNorm: torch's own
    assert not any(n.endswith("_prologue") for n in launched), launched


@pytest.mark.interpreter
def test_verify_runs_the_projections_kernel_with_the_norm_in_its_prologue():
    """--verify calls the function the projections' wrapper hands a deferred norm to, x a tensor
    of NaNs (a value read would show), the norm's operands its keywords: that kernel itself must
    launch, in FP32, FP16 and BF16, decode and an odd S."""
    translation = translated(LAYER)
    ((region, rotation),) = verify._deferred(translation.regions).values()
    cases = verify.deferred_cases(region, rotation, "d")
    assert {c.wrapper for c in cases} == {region.deferred.function} and rotation.wrapper == region.deferred.projections
    assert {c.kernels for c in cases} == {region.deferred.kernels} and all(k.endswith("_kernel") for k in region.deferred.kernels)
    assert [c.label.split(" ", 1)[1] for c in cases][:2] == ["float32 [1, 1, 37]", "float32 [2, 7, 37]"] and len(cases) == 6
    assert all(c.args[0].isnan().all() for c in cases)
    ok, out = verified_translation(translation)
    row = next(line for line in out.splitlines() if "in its projections' prologue" in line)
    assert ok and row.split("│")[-2].strip() == "ok" and row.split("│")[3].strip() == "6", out


@pytest.mark.interpreter
def test_a_prologue_case_whose_kernel_did_not_launch_is_not_exercised(monkeypatch):
    """Only the named kernel counts: a case that launched other kernels only (here the case names
    one no kernel has; in use, a fallback launches the norm's and the projections') is not
    exercised, and --verify fails."""
    made = verify.deferred_cases
    monkeypatch.setattr(verify, "deferred_cases", lambda *args: [dataclasses.replace(c, kernels=("another_kernel",)) for c in made(*args)[:1]])
    ok, out = verified_translation(translated(LAYER))
    assert not ok
    assert "63:9 fused region, in its projections' prologue float32 [1, 1, 37]: not exercised: the case's kernel did not " \
           "launch (a fallback ran), these did: fused_forward_" in out, out
