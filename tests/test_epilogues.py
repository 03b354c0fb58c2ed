"""Matmul epilogues: the gated MLP pair ``act(gate(x)) * up(x)`` as one cube kernel.

The interpreter cases run the translated module against the original (odd rows, K and N of no
tile multiple, FP32 and BF16, with and without biases, with grad) and count the launches: the
gated kernel once, the down projection's linear once, nothing else.
"""

import collections
import math

import pytest
import torch

import torch2pypto
from helpers import module
from torch2pypto import Options, translate_source
from torch2pypto.rules import cube as cube_rules
from torch2pypto.runtime import epilogue, gated
from torch2pypto.translator.oracle.invariants import violations
from torch2pypto.translator.verification.hostops import host_ops
from torch2pypto.translator.verification.interpreter import counting

LLAMA_MLP = """\
import torch
from torch import nn
from transformers.activations import ACT2FN


class MLP(nn.Module):
    def __init__(self, hidden, intermediate, bias=False, act="silu"):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.act_fn = ACT2FN[act]

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj
"""

PHI3_MLP = """\
import torch
from torch import nn
import torch.nn.functional as F
from transformers.activations import ACT2FN


class MLP(nn.Module):
    def __init__(self, hidden, intermediate, bias=False, act="silu", rows=None):
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden, rows or 2 * intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.activation_fn = ACT2FN[act]

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        up_states = self.gate_up_proj(hidden_states)

        gate, up_states = up_states.chunk(2, dim=-1)
        up_states = up_states * self.activation_fn(gate)

        return self.down_proj(up_states)


def f(x: torch.Tensor, w: torch.Tensor):
    y = F.linear(x, w)
    g, u = torch.chunk(y, 2, dim=-1)
    h = F.silu(g) * u
    return h
"""

FUNCTIONAL = """\
import torch
import torch.nn.functional as F


def f(x: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, bg: torch.Tensor, bu: torch.Tensor):
    h = F.linear(x, wu, bu) * F.silu(F.linear(x, wg, bg))
    return h
"""

def translated(code: str, options: Options = Options()):
    translation = translate_source(code, "mlp.py", options)
    assert violations(translation, options=options) == []
    return translation


def original(code: str):
    namespace = {}
    exec(compile(code, "mlp.py", "exec"), namespace)
    return namespace


def test_gated_pair_is_one_call_inside_the_down_projection():
    translation = translated(LLAMA_MLP)
    call = ("down_proj = pypto_linear(pypto_fused_forward_{}_4sites(self.act_fn, x, self.gate_proj.weight, self.gate_proj.bias, "
            "self.up_proj.weight, self.up_proj.bias), self.down_proj.weight, bias=self.down_proj.bias)")
    digest = translation.regions[0].wrapper.split("_")[3]
    assert call.format(digest) in translation.code
    assert {r.status for r in translation.records} == {"converted"}  # ACT2FN's site too: the wrapper checks its kind
    assert [r.ops for r in translation.regions] == [("linear", "self.act_fn", "linear", "x * y")]
    assert translated(translation.code).code == translation.code  # translating again changes nothing


def test_no_fuse_keeps_a_kernel_per_call():
    code = translated(LLAMA_MLP, Options(fuse=False)).code
    assert "pypto_fused" not in code and "gated_silu_kernel" not in code
    assert "pypto_mul(pypto_activation(pypto_linear(x, self.gate_proj.weight" in code  # the ACT2FN module by its class at run time


def test_what_is_no_gated_pair_stays_per_call():
    """Two inputs, a call as the input (it would run twice), an activation of no gated kernel."""
    for expression in ("F.silu(F.linear(x, wg)) * F.linear(y, wu)", "F.silu(F.linear(x + y, wg)) * F.linear(x + y, wu)",
                       "torch.exp(F.linear(x, wg)) * F.linear(x, wu)"):
        code = f"import torch\nimport torch.nn.functional as F\n\n\ndef f(x: torch.Tensor, y: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor):\n    return {expression}\n"
        assert not any("gated" in r.kernel for r in translated(code).regions), expression


MLPS = {"llama": (LLAMA_MLP, 70), "phi3 chunked": (PHI3_MLP, 35)}  # the source, an odd intermediate size


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("mlp", MLPS)
def test_gated_mlp_is_two_launches_and_matches_torch(mlp, dtype, bias):
    """Odd rows, hidden and intermediate sizes: the gated kernel (phi3's on the two halves of the
    one weight: views, no copy) and the down projection, no torch op on the host."""
    source = MLPS[mlp][0]
    mod, reference = module(translated(source).code), original(source)["MLP"]
    for rows, hidden, intermediate in ((1, 37, MLPS[mlp][1]), (2 * 7, 64, 48), (130, 200, 33)):
        torch.manual_seed(rows)
        model = mod.MLP(hidden, intermediate, bias).to(dtype)
        expected = reference(hidden, intermediate, bias).to(dtype)
        expected.load_state_dict(model.state_dict())
        x = (torch.randn(rows, hidden) * 3).to(dtype).reshape(-1, 7, hidden) if rows % 7 == 0 else (torch.randn(rows, hidden) * 3).to(dtype)
        ran = counting()
        with torch2pypto.interpreted(mod), torch.no_grad(), host_ops(mod) as ops:
            got = model(x)
        linear = "linear_bias_kernel.kernel" if bias else "linear_kernel.kernel"
        assert ran() == {f"gated_silu{'_bias' if bias else ''}_kernel.kernel": 1, linear: 1}, (rows, ran())
        assert dict(ops) == {}
        with torch.no_grad():
            want = expected(x)
        assert got.dtype == want.dtype and got.shape == want.shape
        tol = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1.6e-2)}[dtype]  # bf16: one rounding apart at most
        torch.testing.assert_close(got, want, atol=tol[0], rtol=tol[1])


@pytest.mark.interpreter
@pytest.mark.parametrize("mlp", MLPS)
def test_gated_kernel_keeps_torch_gradients(mlp):
    source, intermediate = MLPS[mlp]
    mod, reference = module(translated(source).code), original(source)["MLP"]
    torch.manual_seed(0)
    model = mod.MLP(37, intermediate, True)
    expected = reference(37, intermediate, True)
    expected.load_state_dict(model.state_dict())
    x = torch.randn(2, 5, 37, requires_grad=True)
    ran = counting()
    with torch2pypto.interpreted(mod):
        model(x).square().sum().backward()
    assert ran()["gated_silu_bias_kernel.kernel"] == 1
    got = [x.grad, *(p.grad for p in model.parameters())]
    x.grad = None
    expected(x).square().sum().backward()
    torch.testing.assert_close(got, [x.grad, *(p.grad for p in expected.parameters())], atol=1e-4, rtol=1e-4)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("act", ["gelu", "gelu_pytorch_tanh", "relu"])
def test_activation_chosen_at_run_time(act, dtype):
    """ACT2FN's gelu (gemma's gelu_pytorch_tanh) has a gated kernel; relu has none: each projection
    is one linear kernel, relu and the product run as written."""
    mod, reference = module(translated(LLAMA_MLP).code), original(LLAMA_MLP)["MLP"]
    torch.manual_seed(1)
    model = mod.MLP(37, 70, act=act).to(dtype)
    expected = reference(37, 70, act=act).to(dtype)
    expected.load_state_dict(model.state_dict())
    x = (torch.randn(2, 7, 37) * 2).to(dtype)
    ran = counting()
    with torch2pypto.interpreted(mod), torch.no_grad():
        got = model(x)
    kernels = {"linear_kernel.kernel": 3} if act == "relu" else {f"gated_{'gelu_tanh' if 'tanh' in act else act}_kernel.kernel": 1, "linear_kernel.kernel": 1}
    assert ran() == kernels, ran()
    with torch.no_grad():
        want = expected(x)
    tol = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1.6e-2)}[dtype]
    torch.testing.assert_close(got, want, atol=tol[0], rtol=tol[1])


@pytest.mark.interpreter
def test_functional_gated_pair_of_large_values_matches_torch():
    """F.linear and F.silu written out, the product in the other order, biases; projections far
    below zero (silu's exp overflows: the quotient is -0, as torch's) and above."""
    mod, f = module(translated(FUNCTIONAL).code), original(FUNCTIONAL)["f"]
    x = torch.randn(9, 45) * 40
    wg, wu, bg, bu = torch.randn(21, 45), torch.randn(21, 45), torch.randn(21), torch.randn(21)
    ran = counting()
    with torch2pypto.interpreted(mod):
        got = mod.f(x, wg, wu, bg, bu)
    assert ran() == {"gated_silu_bias_kernel.kernel": 1}
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, f(x, wg, wu, bg, bu), atol=1e-3, rtol=1e-5)


EPILOGUES = """\
import torch
from torch import nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, hidden, out, bias):
        super().__init__()
        self.q_proj = nn.Linear(hidden, out, bias=bias)
        self.o_proj = nn.Linear(out, hidden, bias=bias)
        self.scaling = 0.125

    def forward(self, h, residual):
        q = self.q_proj(h) * self.scaling
        return residual + self.o_proj(q)


def f(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor):
    return F.linear(x, w) - r, F.linear(x, w) / 3
"""


def test_linear_epilogues_are_one_call_each():
    code = translated(EPILOGUES).code
    assert "q = pypto_fused_forward_" in code and "(h, self.q_proj.weight, self.q_proj.bias, self.scaling)" in code
    assert "(q, self.o_proj.weight, self.o_proj.bias, residual)" in code
    assert "return pypto_fused_f_" in code and "(x, w, 3)" in code
    assert "pypto_fused" not in translated(EPILOGUES, Options(fuse=False)).code


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_epilogues_launch_once_and_match_torch(dtype, bias):
    """A number (scale) and a tensor of the result's shape (residual), odd rows, k and n."""
    mod, namespace = module(translated(EPILOGUES).code), original(EPILOGUES)
    for rows, hidden, out in ((1, 37, 70), (130, 64, 33)):
        torch.manual_seed(rows)
        model = mod.Attention(hidden, out, bias).to(dtype)
        expected = namespace["Attention"](hidden, out, bias).to(dtype)
        expected.load_state_dict(model.state_dict())
        h, residual = torch.randn(rows, hidden).to(dtype), torch.randn(rows, hidden).to(dtype)
        ran = counting()
        with torch2pypto.interpreted(mod), torch.no_grad():
            got = model(h, residual)
        suffix = "_bias" if bias else ""
        assert ran() == {f"linear_mul_number{suffix}_kernel.kernel": 1, f"linear_add_tensor{suffix}_kernel.kernel": 1}, ran()
        with torch.no_grad():
            torch.testing.assert_close(got, expected(h, residual), atol=1e-5, rtol=1e-5)  # rounded where torch rounds
    x, w, r = torch.randn(9, 45).to(dtype), torch.randn(21, 45).to(dtype), torch.randn(9, 21).to(dtype)
    ran = counting()
    with torch2pypto.interpreted(mod):
        got = mod.f(x, w, r)
    assert ran() == {"linear_sub_tensor_kernel.kernel": 1, "linear_div_number_kernel.kernel": 1}
    torch.testing.assert_close(got, namespace["f"](x, w, r), atol=1e-5, rtol=1e-5)


@pytest.mark.interpreter
def test_linear_epilogue_keeps_torch_gradients_and_runs_torch_for_a_broadcast():
    mod, namespace = module(translated(EPILOGUES).code), original(EPILOGUES)
    x, w = torch.randn(9, 45, requires_grad=True), torch.randn(21, 45, requires_grad=True)
    r = torch.randn(9, 21, requires_grad=True)
    ran = counting()
    with torch2pypto.interpreted(mod):
        got = mod.f(x, w, r)
        (got[0] * got[1]).sum().backward()
    assert ran() == {"linear_sub_tensor_kernel.kernel": 1, "linear_div_number_kernel.kernel": 1}
    grads = [t.grad for t in (x, w, r)]
    x.grad = w.grad = r.grad = None
    want = namespace["f"](x, w, r)
    (want[0] * want[1]).sum().backward()
    torch.testing.assert_close(grads, [t.grad for t in (x, w, r)], atol=1e-4, rtol=1e-4)
    ran = counting()
    with torch2pypto.interpreted(mod), torch.no_grad():
        got = mod.f(x, w, r[:1])  # broadcasts: the expression as written
    assert "linear_sub_tensor_kernel.kernel" not in ran()
    with torch.no_grad():
        torch.testing.assert_close(got[0], torch.nn.functional.linear(x, w) - r[:1])


@pytest.mark.interpreter
def test_gated_pair_and_epilogue_run_no_torch_op_on_the_host():
    """Contiguous operands are read in place: no copy, no torch op outside the launches."""
    functional = module(translated(FUNCTIONAL).code)
    epilogues = module(translated(EPILOGUES).code)
    x, wg, wu, bg, bu = torch.randn(2, 5, 45), torch.randn(21, 45), torch.randn(21, 45), torch.randn(21), torch.randn(21)
    r = torch.randn(2, 5, 21)
    with torch.no_grad(), torch2pypto.interpreted(functional, epilogues), host_ops(functional, epilogues) as ops:
        functional.f(x, wg, wu, bg, bu)
        epilogues.f(x, wg, r)
    assert dict(ops) == {}
    with torch.no_grad(), torch2pypto.interpreted(epilogues), host_ops(epilogues) as ops:
        epilogues.f(x, wg, r[:1])  # a broadcast runs the expression as written: counted
    assert ops["sub"] == 1


FFN = """\
import torch
from torch import nn
import torch.nn.functional as F
from transformers.activations import ACT2FN


class FFN(nn.Module):
    def __init__(self, d, f, act="gelu", bias=True):
        super().__init__()
        self.fc1 = nn.Linear(d, f, bias=bias)
        self.fc2 = nn.Linear(f, d, bias=bias)
        self.activation_fn = ACT2FN[act]

    def forward(self, hidden_states):
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        return F.silu(self.fc2(hidden_states))
"""


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("act", ["gelu", "silu", "gelu_pytorch_tanh", "relu"])
def test_linear_activation_is_one_launch(act, dtype):
    """bart's ``self.activation_fn(self.fc1(h))``: the activation in the linear's epilogue (read at
    run time: relu has no such kernel, the linear's own kernel runs and then relu as written);
    ``F.silu(self.fc2(h))`` known statically."""
    code = translated(FFN).code
    assert "pypto_linear" not in code.split("def forward", 1)[1].split("\n\n")[0]
    mod, reference = module(code), original(FFN)["FFN"]
    for rows, bias in ((1, True), (130, False)):
        torch.manual_seed(rows)
        model = mod.FFN(37, 70, act, bias).to(dtype)
        expected = reference(37, 70, act, bias).to(dtype)
        expected.load_state_dict(model.state_dict())
        x = (torch.randn(rows, 37) * 2).to(dtype)
        ran = counting()
        with torch2pypto.interpreted(mod), torch.no_grad():
            got = model(x)
        suffix = "_bias" if bias else ""
        first = f"linear{suffix}_kernel.kernel" if act == "relu" else f"linear_{'gelu_tanh' if 'tanh' in act else act}{suffix}_kernel.kernel"
        launched = collections.Counter({first: 1})
        launched[f"linear_silu{suffix}_kernel.kernel"] += 1
        assert ran() == launched, ran()
        with torch.no_grad():
            want = expected(x)
        tol = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1.6e-2)}[dtype]
        torch.testing.assert_close(got, want, atol=tol[0], rtol=tol[1])


def test_chunked_gated_pair_is_one_call():
    """phi3's MLP: the projection, its chunk and the gated product are one call of a gated wrapper
    that takes the one weight; what reads a half elsewhere, or chunks along another dim, stays."""
    translation = translated(PHI3_MLP)
    assert "up_states = pypto_fused_forward_" in translation.code and ".chunk(" not in translation.code.split("class MLP")[1]
    assert sorted(r.ops for r in translation.regions) == [("linear", "chunk", "self.activation_fn", "x * y"), ("linear", "chunk", "silu", "x * y")]
    assert {r.status for r in translation.records} == {"converted", "host-side"}
    assert translated(translation.code).code == translation.code
    for changed in ("h = F.silu(g) * u\n    print(g)", "h = F.silu(g) * u + 1", "h = F.silu(u) * g\n    h = h * u"):
        code = PHI3_MLP.replace("h = F.silu(g) * u", changed)
        assert not any("gated" in r.kernel for r in translated(code).regions if r.function == "f"), changed
    code = PHI3_MLP.replace("chunk(y, 2, dim=-1)", "chunk(y, 2, dim=0)")
    assert not any("gated" in r.kernel for r in translated(code).regions if r.function == "f")


@pytest.mark.interpreter
def test_chunked_gated_pair_of_an_odd_projection_runs_torch():
    """A projection of 3 features chunks into 2 and 1, which broadcast in the product: no gated
    kernel takes it, the statements run as written; relu has no gated kernel: both halves are one
    linear kernel each."""
    mod, reference = module(translated(PHI3_MLP).code), original(PHI3_MLP)["MLP"]
    for act, rows, kernels in (("silu", 3, {"linear_kernel.kernel": 1}), ("relu", None, {"linear_kernel.kernel": 3})):
        torch.manual_seed(2)
        model = mod.MLP(37, 2, act=act, rows=rows)
        expected = reference(37, 2, act=act, rows=rows)
        expected.load_state_dict(model.state_dict())
        x = torch.randn(3, 37)
        ran = counting()
        with torch2pypto.interpreted(mod), torch.no_grad():
            got = model(x)
        assert ran() == kernels, (act, ran())
        with torch.no_grad():
            torch.testing.assert_close(got, expected(x), atol=1e-5, rtol=1e-5)


# ---- the gated pair's helpers (runtime/gated.py)


def test_activation_kind_names_the_modules_a_kernel_computes():
    from transformers.activations import ACT2FN

    nn = torch.nn
    assert [gated._activation_kind(m) for m in (nn.SiLU(), nn.GELU(), nn.GELU(approximate="tanh"))] == ["silu", "gelu", "gelu_tanh"]
    assert [gated._activation_kind(ACT2FN[n]) for n in ("silu", "gelu", "gelu_pytorch_tanh")] == ["silu", "gelu", "gelu_tanh"]
    assert gated._activation_kind(nn.SiLU(inplace=True)) is None  # changes its input
    assert gated._activation_kind(nn.ReLU()) is None and gated._activation_kind(torch.nn.functional.silu) is None
    assert gated._activation_kind(ACT2FN["gelu_new"]) is None  # tanh's formula, not torch's gelu


def test_activation_kind_refuses_a_module_whose_call_is_not_its_class_forward():
    hooked = torch.nn.SiLU()
    hooked.register_forward_hook(lambda *args: None)
    patched = torch.nn.GELU()
    patched.forward = lambda x: x
    assert gated._activation_kind(hooked) is None and gated._activation_kind(patched) is None

    class Mine(torch.nn.SiLU):  # a subclass: its forward is SiLU's, its name is not
        pass

    class Own(torch.nn.SiLU):
        def forward(self, x):
            return x

    assert gated._activation_kind(Mine()) is None and gated._activation_kind(Own()) is None


def test_gated_takes_two_weights_of_x_k_and_both_biases_or_none(launcher):
    x, wg, wu, bg, bu = torch.randn(2, 3, 4), torch.randn(5, 4), torch.randn(5, 4), torch.randn(5), torch.randn(5)
    assert gated._gated_takes(x, wg, None, wu, None) and gated._gated_takes(x, wg, bg, wu, bu)
    assert not gated._gated_takes(x, wg, bg, wu, None) and not gated._gated_takes(x, wg, None, wu, bu)  # one bias
    assert not gated._gated_takes(x, wg, None, wu.half(), None) and not gated._gated_takes(x.double(), wg.double(), None, wu.double(), None)
    assert not gated._gated_takes(x, wg, None, torch.randn(6, 4), None)  # the projections differ
    assert not gated._gated_takes(torch.randn(2, 3), wg, None, wu, None)  # k mismatched: torch raises
    assert not gated._gated_takes(x, wg, torch.randn(4), wu, torch.randn(4)) and not gated._gated_takes(x, wg[None], None, wu[None], None)
    assert not gated._gated_takes(torch.tensor(1.0), wg, None, wu, None)


def test_gated_takes_k_up_to_max_dim(launcher):
    k = cube_rules.MAX_DIM
    w = torch.randn(1, k)
    assert gated._gated_takes(torch.randn(1, k), w, None, w, None)
    w = torch.randn(1, k + 1)
    assert not gated._gated_takes(torch.randn(1, k + 1), w, None, w, None)


def test_gated_takes_nothing_off_the_kernel_path():
    assert not gated._gated_takes(torch.randn(2, 4), torch.randn(5, 4), None, torch.randn(5, 4), None)


def test_halves_are_views_of_the_gate_and_up_halves_of_a_chunked_projection():
    w = torch.randn(6, 4)
    gate, up = gated._halves(w)
    assert all(h.data_ptr() == c.data_ptr() and torch.equal(h, c) for h, c in zip((gate, up), w.chunk(2, dim=0)))
    assert [torch.equal(h, c) for h, c in zip(gated._halves(torch.arange(4.0)), (torch.arange(2.0), torch.arange(2.0, 4.0)))] == [True, True]
    assert gated._halves(None) == (None, None)
    odd, empty, scalar = torch.randn(5, 4), torch.randn(0, 4), torch.tensor(1.0)
    assert all(gated._halves(t)[0] is t and gated._halves(t)[1] is None for t in (odd, empty, scalar))  # no gated kernel takes these



# ---- _epilogue_takes (runtime/epilogue.py)


def test_epilogue_takes_a_linears_operands_of_one_dtype_and_x_k(launcher):
    x, w, b = torch.randn(2, 3, 4), torch.randn(5, 4), torch.randn(5)
    assert epilogue._epilogue_takes(x, w, None) and epilogue._epilogue_takes(x, w, b, 2.5)
    assert not epilogue._epilogue_takes(x, w.half(), None) and not epilogue._epilogue_takes(x.double(), w.double(), None)
    assert not epilogue._epilogue_takes(x, torch.randn(5, 3), None)  # k mismatched: torch raises
    assert not epilogue._epilogue_takes(x, w, torch.randn(4)) and not epilogue._epilogue_takes(x, w[None], None)
    assert not epilogue._epilogue_takes(torch.tensor(1.0), torch.randn(5, 1), None)
    k = cube_rules.MAX_DIM
    assert epilogue._epilogue_takes(torch.randn(1, k), torch.randn(1, k), None)
    assert not epilogue._epilogue_takes(torch.randn(1, k + 1), torch.randn(1, k + 1), None)


def test_epilogue_takes_a_finite_number_of_xs_dtype_or_a_tensor_of_the_results_shape(launcher):
    x, w = torch.randn(2, 3, 4), torch.randn(5, 4)
    assert epilogue._epilogue_takes(x, w, None, 3) and epilogue._epilogue_takes(x, w, None, -1e30)
    assert not epilogue._epilogue_takes(x.half(), w.half(), None, 1e30)  # past float16's range
    assert not any(epilogue._epilogue_takes(x, w, None, v) for v in (math.inf, math.nan, True, 1j, "2"))
    other = torch.randn(2, 3, 5)
    assert epilogue._epilogue_takes(x, w, None, other)
    assert not epilogue._epilogue_takes(x, w, None, torch.randn(3, 5))  # broadcasts: torch's own
    assert not epilogue._epilogue_takes(x, w, None, other.half()) and not epilogue._epilogue_takes(x, w, None, other.mT.contiguous().mT)
    assert not epilogue._epilogue_takes(x, w, None, torch.tensor(2.0))


def test_epilogue_takes_nothing_off_the_kernel_path():
    assert not epilogue._epilogue_takes(torch.randn(2, 4), torch.randn(5, 4), None, 1.0)
