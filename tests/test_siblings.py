"""Sibling projections: consecutive linears of one input (an attention's q, k and v) as one cube kernel.

The interpreter cases run the translated module against the original (odd rows, K and N of no
tile multiple, GQA's narrower k and v, FP32 and BF16, with and without biases, with grad) and
count the launches: the projections' kernel once, nothing else.
"""

import pytest
import torch

import torch2pypto
from torch2pypto import Options
from torch2pypto.translator.verification.interpreter import counting

from helpers import module
from test_epilogues import original, translated

ATTENTION = """\
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, bias=False):
        super().__init__()
        self.head_dim = head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)

    def forward(self, hidden_states):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        return query_states, key_states, value_states
"""

FUNCTIONAL = """\
import torch
import torch.nn.functional as F


def f(x: torch.Tensor, wa: torch.Tensor, ba: torch.Tensor, wb: torch.Tensor):
    a = F.linear(x, wa, ba)
    b = F.linear(x, wb)
    return a, b
"""


def test_projections_are_one_call_before_the_statements():
    translation = translated(ATTENTION)
    wrapper = translation.regions[0].wrapper
    assert wrapper.endswith("_3sites") and translation.regions[0].kernel == "linears_3_kernel"
    assert (f"        q_proj, k_proj, v_proj = {wrapper}(hidden_states, self.q_proj.weight, self.q_proj.bias, "
            "self.k_proj.weight, self.k_proj.bias, self.v_proj.weight, self.v_proj.bias)\n"
            "        query_states = q_proj.view(hidden_shape).transpose(1, 2)\n"
            "        key_states = k_proj.view(hidden_shape).transpose(1, 2)\n"
            "        value_states = v_proj.view(hidden_shape).transpose(1, 2)\n") in translation.code
    assert {r.status for r in translation.records} == {"converted", "host-side"}  # the views stay on the host
    assert translated(translation.code).code == translation.code  # translating again changes nothing


def test_no_fuse_keeps_a_kernel_per_call():
    code = translated(ATTENTION, Options(fuse=False)).code
    assert "pypto_fused" not in code and "linears_3_kernel" not in code
    assert code.count("pypto_linear(hidden_states, self.") == 3


def test_what_is_no_sibling_group_stays_per_call():
    """Two inputs, an input assigned between the projections, something evaluated before the linear."""
    for body in ("a = F.linear(x, wa)\n    b = F.linear(y, wb)", "x = F.linear(x, wa)\n    b = F.linear(x, wb)",
                 "a = F.linear(x, wa)\n    b = torch.cat([y, F.linear(x, wb)])"):
        code = ("import torch\nimport torch.nn.functional as F\n\n\n"
                f"def f(x: torch.Tensor, y: torch.Tensor, wa: torch.Tensor, wb: torch.Tensor):\n    {body}\n    return x, a, b\n")
        assert not any(r.kernel.startswith("linears") for r in translated(code).regions), body


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_attention_projections_are_one_launch_and_match_torch(dtype, bias):
    mod, reference = module(translated(ATTENTION).code), original(ATTENTION)["Attention"]
    for batch, seq, hidden, heads, kv_heads, head_dim in ((1, 1, 37, 4, 2, 6), (2, 7, 64, 4, 1, 16), (1, 130, 200, 3, 3, 11)):
        torch.manual_seed(seq)
        model = mod.Attention(hidden, heads, kv_heads, head_dim, bias).to(dtype)
        expected = reference(hidden, heads, kv_heads, head_dim, bias).to(dtype)
        expected.load_state_dict(model.state_dict())
        x = (torch.randn(batch, seq, hidden) * 3).to(dtype)
        ran = counting()
        with torch2pypto.interpreted(mod), torch.no_grad():
            got = model(x)
        assert ran() == {f"linears_3{'_bias' if bias else ''}_kernel.kernel": 1}, (seq, ran())
        with torch.no_grad():
            want = expected(x)
        tol = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1.6e-2)}[dtype]  # bf16: one rounding apart at most
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            torch.testing.assert_close(g, w, atol=tol[0], rtol=tol[1])


@pytest.mark.interpreter
def test_projections_keep_torch_gradients():
    mod, reference = module(translated(ATTENTION).code), original(ATTENTION)["Attention"]
    torch.manual_seed(0)
    model = mod.Attention(37, 4, 2, 6, True)
    expected = reference(37, 4, 2, 6, True)
    expected.load_state_dict(model.state_dict())
    x = torch.randn(2, 5, 37, requires_grad=True)
    ran = counting()
    with torch2pypto.interpreted(mod):
        sum((t * (i + 1)).square().sum() for i, t in enumerate(model(x))).backward()
    assert ran() == {"linears_3_bias_kernel.kernel": 1}
    got = [x.grad, *(p.grad for p in model.parameters())]
    x.grad = None
    sum((t * (i + 1)).square().sum() for i, t in enumerate(expected(x))).backward()
    torch.testing.assert_close(got, [x.grad, *(p.grad for p in expected.parameters())], atol=1e-4, rtol=1e-4)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_functional_pair_is_one_launch(dtype):
    translation = translated(FUNCTIONAL)
    assert [r.kernel for r in translation.regions] == ["linears_2_kernel"]
    wrapper = translation.regions[0].wrapper
    assert f"    a, b = {wrapper}(x, wa, ba, wb)\n    return a, b\n" in translation.code  # the bare statements go
    assert translated(translation.code).code == translation.code
    mod, want_f = module(translation.code), original(FUNCTIONAL)["f"]
    torch.manual_seed(1)
    x, wa, ba, wb = (torch.randn(*s).to(dtype) for s in ((3, 5, 33), (19, 33), (19,), (50, 33)))
    ran = counting()
    with torch2pypto.interpreted(mod):
        got = mod.f(x, wa, ba, wb)
    assert ran() == {"linears_2_bias_kernel.kernel": 1}  # b's zero bias added
    tol = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1.6e-2)}[dtype]
    for g, w in zip(got, want_f(x, wa, ba, wb), strict=True):
        torch.testing.assert_close(g, w, atol=tol[0], rtol=tol[1])


def test_a_projection_inside_a_call_of_an_attribute_is_a_sibling():
    """qwen3's self.q_norm(self.q_proj(h).view(s)): the linear is the first thing the statement evaluates."""
    code = ATTENTION.replace("self.head_dim = head_dim\n", "self.head_dim = head_dim\n        self.q_norm = nn.LayerNorm(head_dim)\n")
    code = code.replace("query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)",
                        "query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)")
    translation = translated(code)
    assert [r.kernel for r in translation.regions] == ["linears_3_kernel"]
    assert "query_states = pypto_layer_norm(q_proj.view(hidden_shape), " in translation.code
    assert translated(translation.code).code == translation.code


def test_an_activation_of_a_projection_keeps_its_epilogue():
    """bart's self.activation_fn(self.fc1(h)) is a linear with its activation in the epilogue, not a sibling."""
    code = ("import torch\nimport torch.nn.functional as F\n\n\n"
            "def f(x: torch.Tensor, wa: torch.Tensor, wb: torch.Tensor):\n    a = F.silu(F.linear(x, wa))\n    b = F.linear(x, wb)\n    return a, b\n")
    assert [r.kernel for r in translated(code).regions] == ["linear_silu_kernel"]
