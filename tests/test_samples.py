"""The bundled samples: their checked-in translations are current and compute what torch does."""

import importlib.util
from pathlib import Path

import pytest
import torch

import torch2pypto
from torch2pypto import translate_source
from torch2pypto.translator.verification import interpreter

SAMPLES = Path(__file__).parent.parent / "samples"
MODELS = {"qwen3_5_rmsnorm": "Qwen3_5RMSNorm", "llama_rmsnorm": "LlamaRMSNorm"}


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(MODELS))
def test_checked_in_translation_is_current(name):
    source = SAMPLES / f"{name}.py"
    expected = translate_source(source.read_bytes(), f"samples/{name}.py").code
    assert (SAMPLES / f"{name}_pypto.py").read_text() == expected, "run: translate samples/X.py -o samples/X_pypto.py"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_translation_converts_every_norm_op(name):
    t = translate_source((SAMPLES / f"{name}.py").read_bytes())
    left = [r.api for r in t.records if r.status != "converted"]
    assert left == ["torch.zeros" if "qwen" in name else "torch.ones"]


@pytest.mark.interpreter
@pytest.mark.parametrize("shape", [(7, 64), (3, 5, 64), (2, 3, 4, 40)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_translated_module_matches_the_original_in_the_interpreter(name, dtype, shape):
    original, translated = load(SAMPLES / f"{name}.py"), load(SAMPLES / f"{name}_pypto.py")
    cls = MODELS[name]
    reference, model = getattr(original, cls)(shape[-1]), getattr(translated, cls)(shape[-1])
    with torch.no_grad():
        reference.weight.normal_(generator=torch.Generator().manual_seed(1))
        model.weight.copy_(reference.weight)
    reference, model = reference.to(dtype), model.to(dtype)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    with torch2pypto.interpreted(translated):
        got = model(x)
    expected = reference(x)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected)


@pytest.mark.interpreter
@pytest.mark.parametrize("name", sorted(MODELS))
def test_gradients_through_the_translated_module_are_torchs(name):
    """Kernels compute the forward pass; backward gives the original module's gradients."""
    original, translated = load(SAMPLES / f"{name}.py"), load(SAMPLES / f"{name}_pypto.py")
    cls = MODELS[name]
    reference, model = getattr(original, cls)(40), getattr(translated, cls)(40)
    with torch.no_grad():
        reference.weight.normal_(generator=torch.Generator().manual_seed(1))
        model.weight.copy_(reference.weight)
    x = torch.randn(2, 3, 40, generator=torch.Generator().manual_seed(0), requires_grad=True)
    x_copy = x.detach().clone().requires_grad_()
    upstream = torch.randn(2, 3, 40, generator=torch.Generator().manual_seed(2))
    launched = interpreter.counting()
    with torch2pypto.interpreted(translated):
        got = model(x_copy)
        assert sum(launched().values()) == 1, launched()  # the fused kernel, forward
        (got * upstream).sum().backward()
    expected = reference(x)
    (expected * upstream).sum().backward()
    torch.testing.assert_close(got, expected)
    assert got.requires_grad and x_copy.grad is not None and model.weight.grad is not None
    torch.testing.assert_close(x_copy.grad, x.grad)
    torch.testing.assert_close(model.weight.grad, reference.weight.grad)
