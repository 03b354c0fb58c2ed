"""Real code: tiny transformers models, built from their own classes with a small random config
and identical weights, train one step under ``interpreted()`` as the original does, and their
bfloat16 forward meets the low-precision criterion (scripts/models.py prints the same figures).
One hidden layer each, each model translated once."""

import functools
import re

import pytest
import torch

import models
import torch2pypto
from helpers import load, translate
from torch2pypto.translator.verification.interpreter import counting

pytestmark = pytest.mark.interpreter

LAYERS = 1


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    """The translation of a model's modeling file and its loaded module, once per model."""
    return functools.cache(lambda model: models.translate(model, tmp_path_factory.mktemp(model)))


@pytest.mark.parametrize("model", list(models.MODELS))
def test_translated_model_trains_as_the_original(model, translated):
    _, module = translated(model)
    training = models.train(model, module, LAYERS)
    assert training.ok, training


@pytest.mark.parametrize("model", list(models.MODELS))
def test_bfloat16_forward_meets_the_low_precision_criterion(model, translated):
    translation, module = translated(model)
    low = models.low_precision(model, module, translation, LAYERS)
    assert low.ok, low


DECODERS = ["llama", "qwen3", "gemma3", "mistral", "qwen3_moe", "phi3"]
# launches per decoder layer at most: q/k/v's projections (phi3's one sliced qkv_proj), their q/k
# norms (qwen3, gemma3) and their RoPE (phi3's partial) one cube kernel, attention one kernel, the
# residual add after attention and the norm after it the gated MLP kernel's prologue, the residual
# add after the MLP down_proj's epilogue (phi3's through its dropout; gemma3's with the norm before
# it); the DynamicCache's cats of keys and values are launches too (2 a layer); qwen3_moe's experts
# (integrations/moe.py, translated) launch their two grouped matmuls and the sort's cast, the
# weighted sum and the cast back, the gate's activation (silu, chosen by the module's class at run
# time) and the gate's and the routing weights' products, the tokens per expert (histc) and their
# offsets (cumsum), the inverse permutation's arange, and three gathers of rows by index (x[i]: a
# bounds kernel, then the rows)
LAUNCHES = {"llama": 8, "qwen3": 8, "gemma3": 8, "mistral": 8, "qwen3_moe": 28, "phi3": 8}


@pytest.mark.parametrize("model", DECODERS)
def test_attention_is_one_kernel_per_decoder_layer(model, translated):
    """transformers' default attention, sdpa, runs in the translated integrations/sdpa_attention.py:
    one flash-attention launch in each decoder layer, no batched matmul of scores beside it; the
    residual add and the norm's forward after it one fused kernel."""
    translation, module = translated(model)
    low = models.low_precision(model, module, translation, LAYERS)
    assert low.ok, low
    for layer in low.per_layer:
        assert layer["scaled_dot_product_attention_kernel.kernel"] == 1, layer
        assert "matmul_stacked_kernel.kernel" not in layer, layer
        assert sum(layer.values()) <= LAUNCHES[model], layer


@pytest.mark.parametrize("model", ["llama", "phi3"])
def test_the_cache_and_the_ids_leave_no_cat_or_cast_to_torch(model, translated):
    """A decoder's DynamicCache (transformers' cache_utils, translated as a layer module) joins its
    keys and values on kernels, its first update onto an empty 1-D tensor too; the int64 positions
    cast to float and the embedding reads the int64 ids on kernels."""
    assert "cache_utils" in models.layer_modules(model)
    translation, module = translated(model)
    low = models.low_precision(model, module, translation, LAYERS)
    assert low.ok, low
    original, left = low.torch_ops
    assert original.ops["cat"] >= 2 and original.ops["_to_copy"] >= 1, original.ops
    assert not {"_to_copy"} & set(left.ops) and left.ops["cat"] <= original.ops["cat"] - 2, left.ops


def test_the_moe_experts_matmuls_run_on_grouped_kernels(translated):
    """qwen3_moe's experts run transformers' default grouped_mm forward (integrations/moe.py,
    translated): both grouped matmuls of each MoE layer on the grouped kernel, none in torch,
    in training (its gradients torch's) and in bfloat16; so are the gathers of token rows by the
    sorted permutation (x[i]) and the gate's and routing weights' products."""
    translation, module = translated("qwen3_moe")
    training = models.train("qwen3_moe", module, LAYERS)
    assert training.ok, training
    low = models.low_precision("qwen3_moe", module, translation, LAYERS)
    assert low.ok, low
    for layer in low.per_layer:
        assert layer["grouped_mm_kernel.kernel"] == 2, layer
    for original, left in (training.torch_ops, low.torch_ops):
        assert original.ops["_grouped_mm"] == 2 * LAYERS and "_grouped_mm" not in left.ops, left.ops
        assert original.ops["index"] == 3 * LAYERS and not {"index", "mul"} & set(left.ops), left.ops


def test_the_causal_lm_loss_runs_on_kernels(translated):
    """transformers' ForCausalLMLoss (loss/loss_utils.py, translated, the model's loss_function):
    the int64 labels' pad, the shifted labels' contiguous() copy (join1_kernel) and the cross entropy,
    its mean over the labels not ignored, on kernels."""
    _, module = translated("llama")
    training = models.train("llama", module, LAYERS)
    assert training.ok, training
    _, left = training.torch_ops
    assert not {"_log_softmax", "nll_loss_forward", "constant_pad_nd", "clone"} & set(left.ops), left.ops
    assert training.kernels["cross_entropy_kernel.kernel"] == 1 and training.kernels["cross_entropy_total_kernel.kernel"] == 1


def test_eager_attention_trains_and_runs_bfloat16(translated, monkeypatch):
    """The modeling file's own eager attention: scores and weights on the kernels, softmax(FP32)
    and its cast to the query's dtype one fused kernel."""
    monkeypatch.setitem(models.COMMON, "attn_implementation", "eager")
    translation, module = translated("llama")
    assert models.train("llama", module, LAYERS).ok
    low = models.low_precision("llama", module, translation, LAYERS)
    assert low.ok, low
    (layer,) = low.per_layer
    assert "scaled_dot_product_attention_kernel.kernel" not in layer and "softmax_kernel.kernel" not in layer, layer
    assert layer["matmul_stacked_kernel.kernel"] == 2 and any(k.startswith("fused_eager_attention_forward") for k in layer)


# The row of t5's softmax whose element 10 lies 4e-9 above the midpoint of two bf16 neighbours:
# torch's FP32 intermediate rounds it down, the kernel (correctly) up
# (../shared/repros/bf16_near_tie_softmax_flip.py).
NEAR_TIE = [0.9453125, 1.46875, -0.5703125, 0.96875, 1.2734375, -0.95703125, 0.671875, 0.2734375, 0.87109375,
            0.6484375, 0.0322265625]
SOFTMAX = """\
import torch


def softmax(x: torch.Tensor):
    return torch.softmax(x, dim=-1)
"""


def test_the_criterion_passes_a_near_tie_flip_that_later_layers_grow(tmp_path):
    module = load(tmp_path / "near_tie.py", translate(SOFTMAX).code)
    x = torch.tensor([NEAR_TIE], dtype=torch.bfloat16)
    launched = counting()
    with torch2pypto.interpreted(module):
        y = module.softmax(x)
    assert launched() == {"softmax_kernel.kernel": 1}
    assert (y != torch.softmax(x, -1)).sum() == 1  # the flip

    def grow(s):  # a later layer that grows the flip
        return (s - 0.0455) * 1000

    translated, original = grow(y), grow(torch.softmax(x, -1))
    with pytest.raises(AssertionError):
        torch.testing.assert_close(translated, original)
    low = models.LowPrecision.judge(translated, original, grow(torch.softmax(x.float(), -1)),
                                    kernels=launched(), wrappers={}, seconds=0.0)
    assert low.ok, low


def test_the_criterion_fails_a_kernel_that_rounds_toward_zero(translated, tmp_path):
    """Every kernel's rounding to its dtype (a result's, a projection's before its epilogue) scaled
    by 1 - 2**-8 first: rounded down by half an ulp to one, where truncation rounds down by up to one."""
    translation, _ = translated("llama")
    code, n = re.subn(r"^(\s*)(\w+) = pypto\.cast\(\2, (\w*dtype)\)$",
                      r"\1\2 = pypto.cast(pypto.mul(\2, 1 - 2**-8), \3)", translation.code, flags=re.M)
    assert n
    low = models.low_precision("llama", models.load("llama", code, tmp_path / "misrounded"), translation, LAYERS)
    assert not low.ok and sum(low.kernels.values()) > 0, low
    assert low.translated.largest > models.FACTOR * low.original.largest

