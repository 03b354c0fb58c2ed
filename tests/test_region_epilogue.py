"""A row region after the MLP's down projection is that linear's epilogue: gemma3's
``h = self.mlp(h); h = self.post_feedforward_layernorm(h); h = residual + h`` after the region
that is the gated kernel's prologue runs two launches (the prologue's gated kernel; then
down_proj's product of whole rows on the cube, the norm and the add on the vector cores), one
fewer than the gated kernel, down_proj's and the region's.

Each interpreter case runs the translated layer under ``interpreted()`` against the original
(fp32 and bf16, odd token counts, one token, a batch of two, a hidden size not a multiple of 16)
and counts the launches; under autograd the kernels run and every gradient is torch's. Each
break of the pattern runs what ran before: a norm whose call runs more than its class's forward,
an MLP hook, biases, the residual read after the add.
"""

import pytest
import torch

from helpers import GEMMA_RMSNORM, layer_inputs, layers_with_grad, run_layers
from test_prologue import LAYER, NORMED, _launched, _matches
from test_submodules import translated, twins
from torch2pypto import Options, translate_source

GEMMA = NORMED.replace(LAYER.split("\n\n\nclass MLP")[0].split("from torch import nn\n\n\n")[1], GEMMA_RMSNORM.rstrip("\n"))
BIASED_NORMED = NORMED.replace("def __init__(self, hidden_size, bias=False)", "def __init__(self, hidden_size, bias=True)")
SHAPES = [(2, 7, 40), (7, 64), (1, 1, 32), (2, 1, 48), (1, 3, 96)]  # odd token counts, one token, a batch of two; 40: no multiple of 16
DTYPES = [torch.float32, torch.bfloat16]
FUSED = {"gated_kernel": 1, "epilogue": 1}
APART = {"gated_kernel": 1, "linear_kernel": 1, "region": 1}  # what ran before: the linear's own kernel, then the region's


def _names(counter) -> dict[str, int]:
    """Kernels by name: the prologue's as ``gated_kernel``, the linear's with the region as
    ``epilogue``, a region's own as ``region``."""
    names = {}
    for k, n in _launched(counter).items():
        name = "epilogue" if k.endswith("_linear_kernel") and k.startswith("fused_") else "region" if k.startswith("fused_") and k != "gated_kernel" else k
        names[name] = names.get(name, 0) + n
    return names


def _run(a, b, module, x):
    got, expected, launched = run_layers(a, b, module, x)
    _matches(got, expected)
    return _names(launched)


@pytest.mark.parametrize("code", ["NORMED", "GEMMA"])
def test_the_six_statements_are_one_call(code):
    once = translate_source(globals()[code], "layer.py")
    layer = once.code.split("class Layer")[1].split("def forward")[1]
    assert layer.count("pypto_") == 1 and "hidden_states = pypto_fused_forward_" in layer, layer
    assert "(residual, hidden_states, self.post_attention_layernorm, RMSNorm, self.mlp, MLP, self.post_feedforward_layernorm)" in layer
    assert translate_source(once.code, "layer.py").code == once.code


def test_the_residual_read_after_or_no_fuse_keeps_the_region_apart():
    read = NORMED.replace("        return hidden_states\n", "        return hidden_states, residual\n")
    code = translate_source(read, "layer.py").code.split("class Layer")[1]
    assert "hidden_states, residual = pypto_fused_forward_" in code and code.count("pypto_fused_forward_") == 2
    assert "_linear_kernel" not in translate_source(NORMED, "layer.py", Options(fuse=False)).code


@pytest.mark.interpreter
@pytest.mark.parametrize("code", ["NORMED", "GEMMA"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_the_norm_and_the_add_are_down_projs_epilogue(tmp_path, shape, dtype, code):
    _, original, module = translated(globals()[code], tmp_path)
    launched = _run(*twins(original, module, shape[-1], dtype), module, layer_inputs(shape, dtype))
    assert launched == FUSED, launched


@pytest.mark.interpreter
@pytest.mark.parametrize("code", ["NORMED", "GEMMA"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_under_grad_the_kernels_run_and_every_gradient_is_torchs(tmp_path, dtype, code):
    _, original, module = translated(globals()[code], tmp_path)
    a, b = twins(original, module, 40, dtype)
    (expected, _), (got, forward) = layers_with_grad(((a, None), (b, module)), (2, 7, 40), dtype, _names)
    assert forward == FUSED, forward
    assert all(g is not None for g in expected) and len(got) == len(expected) == 8  # x, residual, 3 weights, 2 gammas
    for g, e in zip(got, expected):
        _matches(g, e)


@pytest.mark.interpreter
@pytest.mark.parametrize("change", ["norm hook", "norm of another class", "mlp hook"])
def test_a_call_that_runs_more_than_the_forward_runs_what_ran_before(tmp_path, change):
    _, original, module = translated(NORMED, tmp_path)
    a, b = twins(original, module, 32, torch.float32)
    handles = []
    for layer in (a, b):
        if change == "norm hook":
            handles.append(layer.post_feedforward_layernorm.register_forward_pre_hook(lambda m, args: (args[0] * 3,)))
        elif change == "mlp hook":
            handles.append(layer.mlp.register_forward_hook(lambda m, args, out: out * 2))
        else:  # an nn.RMSNorm where the class's was
            norm = torch.nn.RMSNorm(32, eps=1e-6)
            norm.weight.data.copy_(layer.post_feedforward_layernorm.weight.data)
            layer.post_feedforward_layernorm = norm
    try:
        launched = _run(a, b, module, layer_inputs((2, 3, 32), torch.float32))
    finally:
        for handle in handles:
            handle.remove()
    if change == "mlp hook":  # the prologue's region, the MLP's call (its gated kernel, down_proj's), the region after
        assert launched == {"region": 2, "gated_silu_kernel": 1, "linear_kernel": 1}, launched
    else:  # the prologue, down_proj's own kernel, then the region's wrapper, which runs the norm's call as written
        assert launched == (APART if change == "norm hook" else {"gated_kernel": 1, "linear_kernel": 1}), launched  # its class's region


@pytest.mark.interpreter
def test_biases_run_the_linears_and_the_regions_own_kernels(tmp_path):
    _, original, module = translated(BIASED_NORMED, tmp_path)
    launched = _run(*twins(original, module, 32, torch.float32), module, layer_inputs((2, 5, 32), torch.float32))
    assert launched == {"region": 2, "gated_silu_bias_kernel": 1, "linear_bias_kernel": 1}, launched
