"""A row region before a gated MLP is the prologue of the pair's cube kernel: llama's
``h = residual + h; residual = h; h = self.post_attention_layernorm(h)`` then
``h = self.mlp(h); h = residual + h`` runs two launches (the add and the RMSNorm on the vector
cores of the gated kernel, both projections of the normed rows on the cube; then down_proj with
the residual add in its epilogue), one fewer than the region's kernel, the gated kernel and
down_proj's.

Each interpreter case runs the translated layer under ``interpreted()`` against the original
(fp32 and bf16, odd token counts, a hidden size not a multiple of 16) and counts the launches;
under autograd the kernels run and the gradients of the input, the residual, the norm's gamma
and every weight are torch's. A norm or an MLP whose call would run more than its class's
forward, biases, and an activation of no gated kernel run the region's and the pair's own
wrappers (or the statements as written), still torch's values. gemma3's order (a norm between
the MLP and the add) runs the prologue kernel and then the MLP's down projection with the norm
and the add in its epilogue (tests/test_region_epilogue.py): two launches for four.
"""

import pytest
import torch

from helpers import GATED_MLP, layer_inputs, layers_with_grad, region_close, run_layers
from test_submodules import translated, twins
from torch2pypto import Options, translate_source

LAYER = """\
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


""" + GATED_MLP + """

class Layer(nn.Module):
    def __init__(self, hidden_size, bias=False):
        super().__init__()
        self.mlp = MLP(hidden_size, 48, bias)
        self.post_attention_layernorm = RMSNorm(hidden_size)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor):
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states
"""

BIASED = LAYER.replace("def __init__(self, hidden_size, bias=False)", "def __init__(self, hidden_size, bias=True)")
SHAPES = [(2, 7, 40), (7, 64), (1, 3, 96), (1, 3, 4096)]  # odd token counts; 40 is no multiple of 16; llama-7B's hidden size
DTYPES = [torch.float32, torch.bfloat16]
FUSED = {"gated_kernel": 1, "linear_add_tensor_kernel": 1}


def _launched(counter) -> dict[str, int]:
    """Kernels by name, the prologue's (named by its region's digest) as ``gated_kernel``."""
    names = {}
    for k, n in counter.items():
        name = k.removesuffix(".kernel")
        name = "gated_kernel" if name.startswith("fused_") and name.endswith("_gated_kernel") else name
        names[name] = names.get(name, 0) + n
    return names


def _matches(got, expected):
    """fp32: within a few units of the largest value's last place (the cube and the row sums add
    thousands of terms in another order than torch's); bf16: the region tolerance."""
    if expected.dtype == torch.float32:
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got, expected, atol=2e-6 * expected.abs().max().item(), rtol=1e-5)
    else:
        region_close(got, expected)


def _run(a, b, module, x):
    got, expected, launched = run_layers(a, b, module, x)
    _matches(got, expected)
    return _launched(launched)


def test_the_five_statements_are_one_call_of_the_region_and_the_mlp():
    code = translate_source(LAYER, "layer.py").code
    layer = code.split("class Layer")[1]
    assert "hidden_states = pypto_fused_forward_" in layer and "(residual, hidden_states, self.post_attention_layernorm, RMSNorm, self.mlp, MLP)" in layer
    assert layer.count("pypto_") == 1 and "residual = " not in layer.split("def forward")[1]


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_the_norm_is_the_gated_kernels_prologue(tmp_path, shape, dtype):
    translation, original, module = translated(LAYER, tmp_path)
    launched = _run(*twins(original, module, shape[-1], dtype), module, layer_inputs(shape, dtype))
    assert launched == FUSED, launched  # the region's own kernel, the gated one and down_proj's before: 3


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_under_grad_the_kernels_run_and_every_gradient_is_torchs(tmp_path, dtype):
    _, original, module = translated(LAYER, tmp_path)
    a, b = twins(original, module, 40, dtype)
    (expected, _), (got, forward) = layers_with_grad(((a, None), (b, module)), (2, 7, 40), dtype, _launched)
    assert forward == FUSED, forward
    assert all(g is not None for g in expected) and len(got) == len(expected) == 7  # x, residual, 3 weights, gamma
    for g, e in zip(got, expected):
        _matches(g, e)


@pytest.mark.interpreter
@pytest.mark.parametrize("change", ["mlp hook", "mlp subclass", "norm hook", "norm of another class"])
def test_a_call_that_runs_more_than_the_forward_runs_as_written(tmp_path, change):
    _, original, module = translated(LAYER, tmp_path)
    a, b = twins(original, module, 32, torch.float32)
    handles = []
    for layer, mod in ((a, original), (b, module)):
        if change == "mlp hook":
            handles.append(layer.mlp.register_forward_hook(lambda m, args, out: out * 2))
        elif change == "mlp subclass":
            cls = mod.MLP
            state = layer.mlp.state_dict()
            layer.mlp = type("Sub", (cls,), {"forward": lambda self, h: cls.forward(self, h) * 2})(32, 48, False)
            layer.mlp.load_state_dict(state)
        elif change == "norm hook":
            handles.append(layer.post_attention_layernorm.register_forward_pre_hook(lambda m, args: (args[0] * 3,)))
        else:  # an nn.RMSNorm where the class's was
            norm = torch.nn.RMSNorm(32, eps=1e-6)
            norm.weight.data.copy_(layer.post_attention_layernorm.weight.data)
            layer.post_attention_layernorm = norm
    try:
        launched = _run(a, b, module, layer_inputs((3, 32), torch.float32))
    finally:
        for handle in handles:
            handle.remove()
    assert "gated_kernel" not in launched, launched
    if change.startswith("norm"):  # the MLP still runs its gated kernel and down_proj's with the add
        assert launched.get("gated_silu_kernel") == 1 and launched.get("linear_add_tensor_kernel") == 1, launched


@pytest.mark.interpreter
def test_biases_run_the_regions_and_the_pairs_own_kernels(tmp_path):
    """The prologue kernel takes no biases: the region's kernel, the biased gated kernel and
    down_proj's, as before."""
    _, original, module = translated(BIASED, tmp_path)
    launched = _run(*twins(original, module, 32, torch.float32), module, layer_inputs((2, 5, 32), torch.float32))
    assert launched.get("gated_silu_bias_kernel") == 1 and launched.get("linear_add_tensor_bias_kernel") == 1, launched
    assert sum(launched.values()) == 3 and "gated_kernel" not in launched, launched


@pytest.mark.interpreter
def test_an_activation_of_no_gated_kernel_runs_the_pairs_own_wrapper(tmp_path):
    _, original, module = translated(LAYER, tmp_path)
    a, b = twins(original, module, 32, torch.float32)
    a.mlp.act_fn, b.mlp.act_fn = torch.nn.Tanh(), torch.nn.Tanh()
    launched = _run(a, b, module, layer_inputs((3, 32), torch.float32))
    assert "gated_kernel" not in launched and "linear_add_tensor_kernel" in launched, launched


def test_a_value_read_after_the_add_or_no_fuse_keeps_the_calls_apart():
    read = LAYER.replace("        return hidden_states\n", "        return hidden_states, residual\n")
    code = translate_source(read, "layer.py").code.split("class Layer")[1]
    assert "self.mlp, MLP" in code and "RMSNorm, self.mlp" not in code
    apart = translate_source(LAYER, "layer.py", Options(fuse=False)).code
    assert "_gated_kernel" not in apart
    once = translate_source(LAYER, "layer.py")
    assert translate_source(once.code, "layer.py").code == once.code


@pytest.mark.interpreter
@pytest.mark.parametrize("code", ["LAYER", "NORMED"])
def test_verify_runs_the_prologue_kernel_on_instances_of_both_classes(code):
    from test_verify import verified_translation

    translation = translate_source(globals()[code], "layer.py")
    (region,) = [r for r in translation.regions if r.function == "forward" and len(r.modules) >= 2]
    after = (("post_feedforward_layernorm", "RMSNorm"),) if code == "NORMED" else ()  # the region after down_proj: its epilogue
    assert region.modules == (("post_attention_layernorm", "RMSNorm"), ("mlp", "MLP"), *after) and region.kernel.endswith("_gated_kernel")
    ok, out = verified_translation(translation)
    assert ok and "not exercised" not in out, out


# gemma3's: a norm after the MLP, before the add; the MLP's result is the norm's input
NORMED = LAYER.replace(
    "        self.post_attention_layernorm = RMSNorm(hidden_size)\n",
    "        self.post_attention_layernorm = RMSNorm(hidden_size)\n        self.post_feedforward_layernorm = RMSNorm(hidden_size)\n",
).replace(
    "        hidden_states = self.mlp(hidden_states)\n",
    "        hidden_states = self.mlp(hidden_states)\n        hidden_states = self.post_feedforward_layernorm(hidden_states)\n",
)
NO_ADD = {"gated_kernel": 1, "norm": 1}  # down_proj with the norm and the add after the MLP in its epilogue


def _no_add(launched: dict[str, int]) -> dict[str, int]:
    return {("norm" if k.startswith("fused_") else k): n for k, n in launched.items()}


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_without_the_add_the_prologue_kernel_then_the_linear_with_the_region_after(tmp_path, dtype):
    translation, original, module = translated(NORMED, tmp_path)
    assert "        hidden_states = pypto_fused_forward_" in translation.code.split("class Layer")[1]
    a, b = twins(original, module, 40, dtype)
    assert _no_add(_run(a, b, module, layer_inputs((2, 7, 40), dtype))) == NO_ADD  # 4 launches before, 3 with the prologue
    (expected, _), (got, _) = layers_with_grad(((a, None), (b, module)), (2, 7, 40), dtype, _launched)
    assert all(g is not None for g in expected) and len(got) == len(expected) == 8  # x, residual, 3 weights, 2 gammas
    for g, e in zip(got, expected):
        _matches(g, e)


@pytest.mark.interpreter
def test_without_the_add_an_mlp_hook_runs_the_region_then_the_call(tmp_path):
    _, original, module = translated(NORMED, tmp_path)
    a, b = twins(original, module, 32, torch.float32)
    handles = [layer.mlp.register_forward_hook(lambda m, args, out: out * 2) for layer in (a, b)]
    try:
        launched = _run(a, b, module, layer_inputs((3, 32), torch.float32))
    finally:
        for handle in handles:
            handle.remove()
    assert "gated_kernel" not in launched and launched.get("gated_silu_kernel") == 1, launched
