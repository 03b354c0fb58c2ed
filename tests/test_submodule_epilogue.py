"""A residual add after a submodule whose forward returns a linear is that linear's epilogue:
llama's ``hidden_states = self.mlp(hidden_states)`` then ``hidden_states = residual + hidden_states``
runs the MLP's gated kernel and then down_proj's linear with the add in its epilogue: two launches,
no add kernel.

Each interpreter case runs the translated layer under ``interpreted()`` against the original
(fp32 and bf16, odd token counts, with and without biases) and counts the launches; under autograd
the kernels run and the gradients of the input, the residual and every weight are torch's. A call
that would run more than the class's forward (hooks, a subclass, an instance forward) runs the
statements as written.
"""

import pytest
import torch

from helpers import GATED_MLP, layer_inputs, layers_with_grad, region_close, run_layers
from test_submodules import translated, twins
from torch2pypto import Options, translate_source

MLP = """\
import torch
from torch import nn


""" + GATED_MLP + """

class Layer(nn.Module):
    def __init__(self, hidden_size, bias=False):
        super().__init__()
        self.mlp = MLP(hidden_size, 48, bias)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor):
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states
"""

BIASED = MLP.replace("def __init__(self, hidden_size, bias=False)", "def __init__(self, hidden_size, bias=True)")
SHAPES = [(2, 5, 64), (7, 32), (1, 3, 96)]  # odd token counts
DTYPES = [torch.float32, torch.bfloat16]


def _names(launched) -> dict[str, int]:
    return {k.removesuffix(".kernel"): n for k, n in launched.items()}


def _run(a, b, module, x):
    got, expected, launched = run_layers(a, b, module, x)
    region_close(got, expected)
    return _names(launched)


@pytest.mark.interpreter
@pytest.mark.parametrize("code", [MLP, BIASED], ids=["no bias", "bias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_the_residual_add_is_the_down_projections_epilogue(tmp_path, code, shape, dtype):
    translation, original, module = translated(code, tmp_path)
    assert "hidden_states = pypto_fused_forward_" in translation.code and "(hidden_states, residual, self.mlp, MLP)" in translation.code
    assert "pypto_add" not in translation.code.split("class Layer")[1]
    launched = _run(*twins(original, module, shape[-1], dtype), module, layer_inputs(shape, dtype))
    bias = "_bias" if code is BIASED else ""
    assert launched == {f"gated_silu{bias}_kernel": 1, f"linear_add_tensor{bias}_kernel": 1}, launched


@pytest.mark.interpreter
@pytest.mark.parametrize("code", [MLP, BIASED], ids=["no bias", "bias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_under_grad_the_kernels_run_and_every_gradient_is_torchs(tmp_path, code, dtype):
    _, original, module = translated(code, tmp_path)
    a, b = twins(original, module, 32, dtype)
    (expected, _), (got, forward) = layers_with_grad(((a, None), (b, module)), (2, 5, 32), dtype, _names)
    bias = "_bias" if code is BIASED else ""
    assert forward == {f"gated_silu{bias}_kernel": 1, f"linear_add_tensor{bias}_kernel": 1}, forward
    assert all(g is not None for g in expected) and len(got) == len(expected) == (9 if code is BIASED else 6)
    for g, e in zip(got, expected):
        region_close(g, e)


class _Sub(torch.nn.Module):
    pass


@pytest.mark.interpreter
@pytest.mark.parametrize("change", ["forward hook", "global hook", "subclass", "instance forward"])
def test_a_call_that_runs_more_than_the_forward_runs_the_statements_as_written(tmp_path, change):
    _, original, module = translated(MLP, tmp_path)
    a, b = twins(original, module, 32, torch.float32)
    seen, handles = [], []
    for layer, cls in ((a, original.MLP), (b, module.MLP)):
        mlp = layer.mlp
        if change == "forward hook":
            handles.append(mlp.register_forward_hook(lambda m, args, out: out * 2))
        elif change == "subclass":
            layer.mlp = type("Sub", (cls,), {"forward": lambda self, h: cls.forward(self, h) * 2})(32, 48, False)
            layer.mlp.load_state_dict(mlp.state_dict())
        elif change == "instance forward":
            mlp.forward = lambda h, mlp=mlp: type(mlp).forward(mlp, h) - 1
    if change == "global hook":
        handles.append(torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: seen.append(type(m).__name__)))
    try:
        launched = _run(a, b, module, layer_inputs((3, 32), torch.float32))
    finally:
        for handle in handles:
            handle.remove()
    assert "linear_add_tensor_kernel" not in launched and launched.get("add_kernel", 0) == 0, launched
    if change == "global hook":
        assert seen.count("MLP") == 2


def test_the_submodules_result_read_again_or_no_linear_returned_keeps_the_statements():
    read = MLP.replace("        hidden_states = residual + hidden_states\n        return hidden_states\n",
                       "        out = residual + hidden_states\n        return out, hidden_states\n")
    assert "self.mlp, MLP" not in translate_source(read, "layer.py").code
    scaled = MLP.replace("        return down_proj\n", "        return down_proj * 2\n")
    assert "self.mlp, MLP" not in translate_source(scaled, "layer.py").code
    shadowed = MLP.replace("        hidden_states = self.mlp(hidden_states)\n", "        MLP = None\n        hidden_states = self.mlp(hidden_states)\n")
    assert "self.mlp, MLP" not in translate_source(shadowed, "layer.py").code


def test_a_plain_linear_forward_and_the_add_written_after_it():
    plain = MLP.replace("        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))\n        return down_proj\n",
                        "        return self.up_proj(x)\n").replace("residual + hidden_states", "hidden_states + residual")
    code = translate_source(plain, "layer.py").code
    assert "(hidden_states, residual, self.mlp, MLP)" in code
    assert "return pypto_fused_forward_" in code and "(hidden_states, mlp.up_proj.weight, mlp.up_proj.bias, residual)" in code


def test_no_fuse_keeps_one_kernel_per_call_and_a_second_run_changes_nothing():
    translation = translate_source(MLP, "layer.py", Options(fuse=False))
    assert "hidden_states = pypto_add(residual, hidden_states)" in translation.code
    once = translate_source(MLP, "layer.py")
    assert translate_source(once.code, "layer.py").code == once.code


@pytest.mark.interpreter
def test_verify_makes_the_submodule_an_instance_holding_its_linears():
    """--verify runs the region: the MLP an instance of its class holding sample weights (gate and
    up [33, k], down [k, 33]) and its activation, which the wrapper reads from it."""
    from test_verify import verified_translation

    translation = translate_source(MLP, "layer.py")
    (region,) = [r for r in translation.regions if r.modules]
    assert region.modules == (("mlp", "MLP"),) and [read for _, read in region.derived] == [
        "mlp.act_fn", "mlp.gate_proj.weight", "mlp.gate_proj.bias", "mlp.up_proj.weight", "mlp.up_proj.bias",
        "mlp.down_proj.weight", "mlp.down_proj.bias"]
    ok, out = verified_translation(translation)
    assert ok and "not exercised" not in out, out


def test_an_add_that_starts_a_row_region_stays_in_it():
    """deimv2's ``residual + self.mlp(h)`` then a norm: the add and the norm are one kernel already
    (as many launches either way), so the add stays there."""
    normed = MLP.replace("        self.mlp = MLP(hidden_size, 48, bias)\n",
                         "        self.mlp = MLP(hidden_size, 48, bias)\n        self.w = nn.Parameter(torch.ones(hidden_size))\n")
    normed = normed.replace("        hidden_states = residual + hidden_states\n",
                            "        hidden_states = residual + hidden_states\n        hidden_states = hidden_states * torch.rsqrt(hidden_states.pow(2).mean(-1, keepdim=True)) * self.w\n")
    code = translate_source(normed, "layer.py").code
    assert "self.mlp, MLP" not in code and "hidden_states = self.mlp(hidden_states)\n" in code
