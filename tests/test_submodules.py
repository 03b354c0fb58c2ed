"""Regions inline the forward of the module's own submodules: ``self.norm(h)``, ``self.norm`` an
instance of a class of the same file.

Each interpreter case runs the translated layer under ``interpreted()`` against the original
(fp32 and bf16, odd sizes) and counts the launches: llama's residual add and post-attention
RMSNorm are one kernel with two outputs, gemma3's norm + add + norm another. A call that would
run more than the class's forward (hooks, a subclass, a replaced submodule) runs the statements as
written, so values and hooks are torch's; under autograd the kernel runs and the gradients, the
submodules' weights' too, are torch's (recomputed from the statements in backward).
"""

import itertools

import pytest
import torch

import torch2pypto
from helpers import GEMMA_RMSNORM, LLAMA_RMSNORM, load
from torch2pypto import Options, translate_source
from torch2pypto.mapping.tolerance import region_tolerance
from torch2pypto.translator.oracle.invariants import violations
from torch2pypto.translator.verification.interpreter import counting
from torch2pypto.translator.verification.isolated import Function, Instance
from torch2pypto.translator.verification.verify import region_cases

LLAMA = """\
import torch
from torch import nn


""" + LLAMA_RMSNORM + """

class Layer(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden_size, eps=1e-5)
        self.post_attention_layernorm = RMSNorm(hidden_size, eps=1e-5)
        self.mix = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, hidden_states: torch.Tensor, attended: torch.Tensor):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.mix(hidden_states)
        hidden_states = residual + hidden_states * attended
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        return hidden_states, residual
"""

GEMMA = """\
import torch
from torch import nn


""" + GEMMA_RMSNORM + """

class Layer(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.post_attention_layernorm = RMSNorm(hidden_size, eps=1e-6)
        self.pre_feedforward_layernorm = RMSNorm(hidden_size, eps=1e-6)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor):
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        return hidden_states, residual
"""

SHAPES = [(2, 5, 33), (7, 64), (1, 3, 200)]
DTYPES = [torch.float32, torch.bfloat16]
_NAMES = itertools.count()


def translated(code: str, tmp_path, options: Options = Options()):
    translation = translate_source(code, "layer.py", options)
    assert violations(translation, options=options) == []
    name = next(_NAMES)
    return translation, load(tmp_path / f"layer_original_{name}.py", code), load(tmp_path / f"layer_pypto_{name}.py", translation.code)


def twins(original, module, width: int, dtype):
    torch.manual_seed(0)
    a = original.Layer(width)
    for p in a.parameters():
        torch.nn.init.normal_(p, 0.5, 0.3)
    b = module.Layer(width)
    b.load_state_dict(a.state_dict())
    return a.to(dtype), b.to(dtype)


def inputs(shape, dtype):
    g = torch.Generator().manual_seed(1)
    return tuple(torch.randn(*shape, generator=g).to(dtype) for _ in range(2))


def assert_same(got, expected):
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        atol, rtol = region_tolerance(e.dtype)
        torch.testing.assert_close(g.float(), e.float(), atol=atol, rtol=rtol)


def region_kernel(translation, first_line: int) -> str:
    (region,) = [r for r in translation.regions if r.span[0] == first_line]
    return region.kernel


def run(a, b, module, x):
    """The original's and the (interpreted) translated layer's results, and the kernels launched."""
    with torch.no_grad():
        expected = a(*x)
        launched = counting()
        with torch2pypto.interpreted(module):
            got = b(*x)
    assert_same(got, expected)
    return {k.removesuffix(".kernel"): n for k, n in launched().items()}


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_residual_add_and_rmsnorm_submodule_are_one_kernel_with_two_outputs(tmp_path, shape, dtype):
    translation, original, module = translated(LLAMA, tmp_path)
    assert "hidden_states, residual = pypto_fused_forward_" in translation.code
    assert "= pypto_fused_forward_" in translation.code and "(residual, hidden_states, attended, self.post_attention_layernorm, RMSNorm)" in translation.code
    launched = run(*twins(original, module, shape[-1], dtype), module, inputs(shape, dtype))
    add_norm = region_kernel(translation, 30)  # the product and sum, the alias, the norm's forward
    # the bare input_layernorm call stays the norm's own region (one launch either way), then the linear
    assert launched == {region_kernel(translation, 13): 1, "linear_kernel": 1, add_norm: 1}, launched


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES[:2], ids=["x".join(map(str, s)) for s in SHAPES[:2]])
def test_gemma_norm_add_norm_with_its_method_and_one_plus_weight_is_one_kernel(tmp_path, shape, dtype):
    translation, original, module = translated(GEMMA, tmp_path)
    (region,) = [r for r in translation.regions if r.function == "forward" and r.span[0] == 27]
    assert region.span[2] == 30 and region.modules == (("post_attention_layernorm", "RMSNorm"), ("pre_feedforward_layernorm", "RMSNorm"))
    assert dict(region.derived) == {"eps": "post_attention_layernorm.eps", "weight": "post_attention_layernorm.weight",
                                    "eps_1": "pre_feedforward_layernorm.eps", "weight_1": "pre_feedforward_layernorm.weight"}
    launched = run(*twins(original, module, shape[-1], dtype), module, inputs(shape, dtype))
    assert launched == {region.kernel: 1}


def _hooked(layer):
    calls = []
    layer.post_attention_layernorm.register_forward_hook(lambda m, args, out: calls.append(out.shape))
    return calls


class _Scaled(torch.nn.Module):
    """A replacement of another class: no weight, no variance_epsilon."""

    def forward(self, x):
        return x * 3


@pytest.mark.interpreter
@pytest.mark.parametrize("change", ["forward hook", "global hook", "subclass", "replaced", "instance forward"])
def test_a_call_that_runs_more_than_the_forward_runs_the_statements_as_written(tmp_path, change):
    translation, original, module = translated(LLAMA, tmp_path)
    add_norm = region_kernel(translation, 30)
    a, b = twins(original, module, 64, torch.float32)
    x = inputs((3, 64), torch.float32)
    seen = []
    handles = []
    for layer, cls in ((a, original.RMSNorm), (b, module.RMSNorm)):
        norm = layer.post_attention_layernorm
        if change == "forward hook":
            seen.append(_hooked(layer))
        elif change == "subclass":
            layer.post_attention_layernorm = type("Sub", (cls,), {"forward": lambda self, h: cls.forward(self, h) * 2})(64)
            layer.post_attention_layernorm.load_state_dict(norm.state_dict())
        elif change == "replaced":
            layer.post_attention_layernorm = _Scaled()
        elif change == "instance forward":
            norm.forward = lambda h, norm=norm: type(norm).forward(norm, h) - 1
    if change == "global hook":
        handles.append(torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: seen.append(type(m).__name__)))
    try:
        launched = run(a, b, module, x)
    finally:
        for handle in handles:
            handle.remove()
    assert add_norm not in launched, launched
    if change == "forward hook":
        assert len(seen[0]) == len(seen[1]) == 1
    if change == "global hook":
        assert seen.count("RMSNorm") == 4  # each layer's two norms, the hook seeing every call


def _trained(layer, xs, interpreted=None):
    """layer's results on xs (made to require grad) and, after a backward of a loss that uses each
    result twice, the gradients of xs and of every parameter; with the launches of the forward."""
    xs = tuple(x.clone().requires_grad_() for x in xs)
    launched = counting()
    with torch2pypto.interpreted(*([interpreted] if interpreted else [])):
        h, r = layer(*xs)
        forward = {k.removesuffix(".kernel"): n for k, n in launched().items()}
        (h.float().square().sum() + (r * h).float().sum()).backward()
    return (h, r, *(x.grad for x in xs), *(p.grad for p in layer.parameters())), forward


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_under_grad_the_kernel_runs_and_gradients_reach_inputs_and_the_norms_weight(tmp_path, dtype):
    translation, original, module = translated(LLAMA, tmp_path)
    a, b = twins(original, module, 33, dtype)
    x = inputs((2, 5, 33), dtype)
    expected, _ = _trained(a, x)
    got, forward = _trained(b, x, module)
    assert forward == {region_kernel(translation, 13): 1, "linear_kernel": 1, region_kernel(translation, 30): 1}, forward
    assert all(g is not None for g in expected) and len(got) == len(expected) == 7  # h, r, x, y, two norm weights, mix
    tolerance = {} if dtype == torch.float32 else dict(zip(("atol", "rtol"), region_tolerance(dtype)))
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g.float(), e.float(), **tolerance)


@pytest.mark.interpreter
@pytest.mark.parametrize("tied", [False, True], ids=["own weights", "one weight in both norms"])
def test_gemma_under_grad_one_kernel_and_each_weight_gets_its_gradient_once(tmp_path, tied):
    translation, original, module = translated(GEMMA, tmp_path)
    (region,) = [r for r in translation.regions if r.modules]
    a, b = twins(original, module, 64, torch.float32)
    if tied:
        for layer in (a, b):
            layer.pre_feedforward_layernorm.weight = layer.post_attention_layernorm.weight
    expected, _ = _trained(a, inputs((3, 64), torch.float32))
    got, forward = _trained(b, inputs((3, 64), torch.float32), module)
    assert forward == {region.kernel: 1}
    assert len(got) == len(expected) == (5 if tied else 6)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


@pytest.mark.interpreter
def test_under_grad_a_hooked_submodule_still_runs_the_statements_as_written(tmp_path):
    translation, original, module = translated(LLAMA, tmp_path)
    a, b = twins(original, module, 64, torch.float32)
    seen = [_hooked(a), _hooked(b)]
    expected, _ = _trained(a, inputs((3, 64), torch.float32))
    got, forward = _trained(b, inputs((3, 64), torch.float32), module)
    assert region_kernel(translation, 30) not in forward and len(seen[0]) == len(seen[1]) == 1
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_a_bare_submodule_call_is_no_region_of_the_caller():
    translation = translate_source(LLAMA, "layer.py")
    assert "        hidden_states = self.input_layernorm(hidden_states)\n" in translation.code
    assert [r.span[0] for r in translation.regions if r.function == "forward"] == [13, 30]


def test_no_fuse_keeps_one_kernel_per_call():
    translation = translate_source(LLAMA, "layer.py", Options(fuse=False))
    assert not translation.regions and "pypto_fused" not in translation.code
    assert "hidden_states = pypto_add(residual, pypto_mul(hidden_states, attended))" in translation.code
    assert "hidden_states = self.post_attention_layernorm(hidden_states)" in translation.code


def test_a_second_run_changes_nothing():
    once = translate_source(GEMMA, "layer.py")
    assert translate_source(once.code, "layer.py").code == once.code


def test_a_class_shadowed_where_it_is_called_or_a_submodule_of_two_classes_is_not_inlined():
    shadowed = LLAMA.replace("        residual = hidden_states\n        hidden_states = self.input", "        RMSNorm = None\n        residual = hidden_states\n        hidden_states = self.input")
    assert "self.post_attention_layernorm, RMSNorm" not in translate_source(shadowed, "layer.py").code
    two = LLAMA.replace("        self.post_attention_layernorm = RMSNorm(hidden_size, eps=1e-5)\n",
                        "        self.post_attention_layernorm = RMSNorm(hidden_size, eps=1e-5) if hidden_size else nn.LayerNorm(hidden_size)\n")
    assert "self.post_attention_layernorm, RMSNorm" not in translate_source(two, "layer.py").code


def test_verify_makes_the_submodule_an_instance_holding_what_the_wrapper_reads():
    translation = translate_source(GEMMA, "layer.py")
    (region,) = [r for r in translation.regions if r.modules]
    case = region_cases(region, "r0")[0]
    norms = [a for a in case.args if isinstance(a, Instance)]
    assert [a.cls for a in norms] == ["RMSNorm", "RMSNorm"] and Function("RMSNorm") in case.args
    assert [[name for name, _ in a.values] for a in norms] == [["eps", "weight"], ["eps", "weight"]]
    assert len(case.args) == 5  # two norms, their class, hidden_states, residual: no weights or eps passed
