"""phi3's ``hidden_states = residual + self.resid_mlp_dropout(hidden_states)``: the submodule
epilogue and the prologue see through an nn.Dropout held in an attribute between the MLP's call
and the residual add where it is the identity at run time (eval, or p == 0), checked by the
wrapper as ``_inlined`` checks the MLP; in training with p > 0 the statements run as written,
torch's dropout drawing the same random numbers (same seed, torch's result). phi3's MLP (one
projection chunked in two halves, engine/halves.py) is taken too: its gated kernel reads the
halves of the one weight, views of it, with or without the dropout.

Each interpreter case runs the translated layer under ``interpreted()`` against the original
(fp32 and bf16, odd token counts) and counts the launches.
"""

import pytest
import torch

import torch2pypto
from helpers import layer_inputs
from test_prologue import FUSED, LAYER, _launched, _matches
from test_submodule_epilogue import MLP
from test_submodules import translated, twins
from torch2pypto import translate_source
from torch2pypto.translator.verification.interpreter import counting


def _dropped(code: str) -> str:
    held = "        self.mlp = MLP(hidden_size, 48, bias)\n"
    code = code.replace(held, held + "        self.resid_mlp_dropout = nn.Dropout(0.25)\n")
    added = "        hidden_states = residual + hidden_states\n        return hidden_states\n"
    assert code.count(added) == 1
    return code.replace(added, "        hidden_states = residual + self.resid_mlp_dropout(hidden_states)\n        return hidden_states\n")


def _chunked(code: str) -> str:
    """phi3's MLP: one projection chunked in two halves (engine/halves.py)."""
    pair = ("        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)\n"
            "        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)\n")
    forward = "        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))\n        return down_proj\n"
    assert pair in code and forward in code
    return code.replace(pair, "        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)\n").replace(forward, (
        "        up_states = self.gate_up_proj(x)\n        gate, up_states = up_states.chunk(2, dim=-1)\n"
        "        up_states = up_states * self.act_fn(gate)\n        return self.down_proj(up_states)\n"))


PROLOGUE, EPILOGUE = _dropped(LAYER), _dropped(MLP)
# emu3's: one dropout before the region's add too, the region's argument "dropout" as the wrapper's
SHARED = _chunked(PROLOGUE).replace("self.resid_mlp_dropout", "self.dropout").replace(
    "        hidden_states = residual + hidden_states\n        residual = hidden_states\n",
    "        hidden_states = residual + self.dropout(hidden_states)\n        residual = hidden_states\n")
EPILOGUE_LAUNCHES = {"gated_silu_kernel": 1, "linear_add_tensor_kernel": 1}
CASES = {"prologue": (PROLOGUE, FUSED), "epilogue": (EPILOGUE, EPILOGUE_LAUNCHES),
         "prologue, chunked": (_chunked(PROLOGUE), FUSED), "epilogue, chunked": (_chunked(EPILOGUE), EPILOGUE_LAUNCHES),
         "shared": (SHARED, FUSED)}
PLAIN = {"prologue, chunked, no dropout": (_chunked(LAYER), FUSED), "epilogue, chunked, no dropout": (_chunked(MLP), EPILOGUE_LAUNCHES)}
SHAPES = [(2, 7, 40), (7, 64), (1, 3, 96)]  # odd token counts; 40 is no multiple of 16
DTYPES = [torch.float32, torch.bfloat16]


def _layers(case, width, dtype, training, p):
    code, fused = {**CASES, **PLAIN}[case]
    _, original, module = translated(code, _layers.tmp)
    layers = twins(original, module, width, dtype)
    for layer in layers:
        layer.train(training)
        for m in layer.modules():
            if type(m) is torch.nn.Dropout:
                m.p = p
    return (*layers, module, fused)


@pytest.fixture(autouse=True)
def _tmp(tmp_path):
    _layers.tmp = tmp_path


def _forward(layer, module, x, seed):
    launched = counting()
    torch.manual_seed(seed)
    with torch2pypto.interpreted(*([module] if module else [])):
        out = layer(*x)
    return out, _launched(launched())


@pytest.mark.parametrize("chunk", [False, True], ids=["two projections", "chunked"])
def test_the_call_passes_the_dropout_to_one_wrapper(chunk):
    change = _chunked if chunk else (lambda code: code)
    epilogue = translate_source(change(EPILOGUE), "layer.py").code.split("class Layer")[1]
    assert "hidden_states = pypto_fused_forward_" in epilogue and "(hidden_states, residual, self.mlp, MLP, self.resid_mlp_dropout)" in epilogue
    prologue = translate_source(change(PROLOGUE), "layer.py").code
    layer = prologue.split("class Layer")[1]
    assert "(residual, hidden_states, self.post_attention_layernorm, RMSNorm, self.mlp, MLP, self.resid_mlp_dropout)" in layer
    assert layer.count("pypto_") == 1 and "resid_mlp_dropout(" not in layer
    assert "or resid_mlp_dropout.training and resid_mlp_dropout.p != 0:" in prologue
    assert ("gate_weight, up_weight = _halves(gate_up_proj_weight)" in prologue) is chunk
    shared = translate_source(SHARED, "layer.py").code
    assert "(residual, self.dropout(hidden_states), self.post_attention_layernorm, RMSNorm, self.mlp, MLP, self.dropout)" in shared
    assert "or dropout_1.training and dropout_1.p != 0:" in shared


@pytest.mark.interpreter
@pytest.mark.parametrize("case", [*CASES, *PLAIN])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_in_eval_the_dropout_is_seen_through(case, shape, dtype):
    a, b, module, fused = _layers(case, shape[-1], dtype, False, 0.25)
    x = layer_inputs(shape, dtype)
    with torch.no_grad():
        expected, _ = _forward(a, None, x, 0)
        got, launched = _forward(b, module, x, 0)
    _matches(got, expected)
    assert launched == fused, launched


@pytest.mark.interpreter
@pytest.mark.parametrize("case", [*CASES, *PLAIN])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_in_training_with_p_0_the_kernels_run_and_every_gradient_is_torchs(case, dtype):
    a, b, module, fused = _layers(case, 40, dtype, True, 0.0)
    results = []
    for layer, interpreted in ((a, None), (b, module)):
        x = layer_inputs((2, 7, 40), dtype, grad=True)
        out, launched = _forward(layer, interpreted, x, 0)
        (out.float().square().sum() + out.float().sum()).backward()
        results.append(((out, *(t.grad for t in x), *(p.grad for p in layer.parameters())), launched))
    (expected, _), (got, launched) = results
    assert launched == fused, launched
    assert all(g is not None for g in expected) and len(got) == len(expected)
    for g, e in zip(got, expected):
        _matches(g, e)


@pytest.mark.interpreter
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_in_training_with_p_above_0_the_statements_run_as_written(case, dtype):
    """The same seed gives torch's mask: the result is torch's, not the identity's."""
    a, b, module, _ = _layers(case, 40, dtype, True, 0.25)
    x = layer_inputs((3, 40), dtype)
    with torch.no_grad():
        expected, _ = _forward(a, None, x, 7)
        got, launched = _forward(b, module, x, 7)
        a.eval()
        identity, _ = _forward(a, None, x, 7)
    _matches(got, expected)
    assert "linear_add_tensor_kernel" not in launched and "gated_kernel" not in launched, launched  # the add: torch's, as written
    assert (expected != identity).any()
