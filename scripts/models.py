"""Real-code check: tiny forward passes of six transformers models, original vs translated.

    .venv/bin/python scripts/models.py [MODEL ...] [--dtype float32|bfloat16]

For each model, translates the installed transformers' ``models/<m>/modeling_<m>.py`` with
``translate_source`` (kernels inline), loads the translation as
``transformers.models.<m>._pypto_modeling_<m>`` (so its relative imports resolve), builds a tiny
random config in code (no hub access), gives the original and the translated ``...ForCausalLM``
identical weights and runs one eval forward of each on the same token ids, the translated one
under ``torch2pypto.interpreted()``. Prints per model the modeling file's call sites
(converted / total, left as torch, ambiguous), the kernels launched and wrappers called in the
forward, the share of the original forward's matmul FLOPs (torch's FlopCounterMode) that the
translated one ran in PyPTO kernels rather than in torch, the max abs difference of the logits and the forward's seconds. Exits 1 if a model's
logits differ beyond its dtype's tolerance or its forward launched no kernel.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import os
import sys
import tempfile
import time
import types
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from torch2pypto import Translation, interpreted, translate_source
from torch2pypto.translator.engine.report import CONVERTED
from torch2pypto.translator.run.json_report import STATUS_NAMES
from torch2pypto.translator.verification.interpreter import counting, setup


@dataclasses.dataclass(frozen=True)
class Spec:
    """Which classes of ``transformers.models.<name>`` to build, and the config keys of this family."""

    config: str
    model: str
    extra: dict = dataclasses.field(default_factory=dict)


# Tiny but real: two layers, grouped-query attention, aligned widths as real checkpoints have
# (a head_dim of 32 keeps rotate_half's halves 32-byte aligned in bfloat16 too); eager attention,
# so that the modeling file's own attention code runs.
COMMON = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=32, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
              eos_token_id=2, attn_implementation="eager")

MODELS = {
    "llama": Spec("LlamaConfig", "LlamaForCausalLM"),
    "qwen3": Spec("Qwen3Config", "Qwen3ForCausalLM"),
    "gemma3": Spec("Gemma3TextConfig", "Gemma3ForCausalLM",
                   dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"])),
    "mistral": Spec("MistralConfig", "MistralForCausalLM", dict(sliding_window=4)),
    "qwen3_moe": Spec("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                      dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1)),
    "phi3": Spec("Phi3Config", "Phi3ForCausalLM"),
}

# Sequences of odd length (tail row tiles); a batch of two rows of ids.
BATCH, SEQUENCE = 2, 7

# Logits tolerance per dtype: the kernels compute in FP32 like torch, but reduce in another
# order, so FP32 logits (|logit| < ~2 here) may differ by some hundred units in the last place
# after two layers; bfloat16 rounds every op's result to 8 bits of mantissa (eps 2**-7), and a
# kernel that rounds once where torch rounds twice moves a value by up to one such step, which
# two layers may carry into the logits a few times over.
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 6e-2}


@dataclasses.dataclass(frozen=True)
class Result:
    """One model's forward: its modeling file's sites, what the translated forward ran, how close it came."""

    model: str
    dtype: torch.dtype
    sites: collections.Counter  # by status name (json_report.STATUS_NAMES)
    kernels: collections.Counter  # kernel launches by kernel name
    wrappers: collections.Counter  # calls of the translation's wrappers by name
    max_abs_diff: float
    seconds: float
    matmul_flops: tuple[int, int] = (0, 0)  # the original forward's, and those the translated one left to torch

    @property
    def ok(self) -> bool:
        return sum(self.kernels.values()) > 0 and self.max_abs_diff <= TOLERANCE[self.dtype]


def modeling_path(model: str) -> Path:
    """The installed transformers' modeling file of `model`."""
    return Path(importlib.import_module(f"transformers.models.{model}").__file__).parent / f"modeling_{model}.py"


def translate(model: str, folder: Path) -> tuple[Translation, types.ModuleType]:
    """Translate `model`'s modeling file and import it as a sibling module of the original.

    The translation is written to ``folder/models/<m>/modeling_<m>.py``: transformers' docstring
    decorators read the model's name from its source file's path.
    """
    setup()  # before the translation imports pypto, so that PyPTO writes into a temp dir
    source = modeling_path(model)
    translation = translate_source(source.read_bytes(), str(source))
    path = folder / "models" / model / source.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(translation.code, encoding=translation.encoding)
    name = f"transformers.models.{model}._pypto_modeling_{model}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return translation, module


def wrapper_names(translation: Translation) -> set[str]:
    """The host wrappers the translation's converted calls use."""
    return {conversion.call.func.value for conversion in translation.conversions}


def tiny_config(model: str, layers: int = 2):
    """A small random-weights config of `model`, built in code."""
    spec = MODELS[model]
    config = getattr(importlib.import_module(f"transformers.models.{model}"), spec.config)
    return config(**{**COMMON, "num_hidden_layers": layers, **spec.extra})


def twins(model: str, module: types.ModuleType, dtype: torch.dtype = torch.float32, layers: int = 2):
    """The original model and the translated one with identical random weights, in eval mode."""
    spec = MODELS[model]
    config = tiny_config(model, layers)
    torch.manual_seed(0)
    original = getattr(importlib.import_module(f"transformers.models.{model}.modeling_{model}"), spec.model)(config)
    translated = getattr(module, spec.model)(config)
    translated.load_state_dict(original.state_dict())
    return original.to(dtype).eval(), translated.to(dtype).eval()


def token_ids(vocab_size: int) -> torch.Tensor:
    return torch.randint(0, vocab_size, (BATCH, SEQUENCE), generator=torch.Generator().manual_seed(1))


@contextlib.contextmanager
def counted_calls(module: types.ModuleType, names: set[str]):
    """Count the calls of `module`'s functions `names` (the translated code calls them as globals)."""
    calls: collections.Counter[str] = collections.Counter()

    def counted(name, function):
        @functools.wraps(function)
        def call(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return call

    saved = {name: getattr(module, name) for name in names}
    try:
        for name, function in saved.items():
            setattr(module, name, counted(name, function))
        yield calls
    finally:
        for name, function in saved.items():
            setattr(module, name, function)


def flops_counted(launch, flops: list[int]):
    """`launch`, appending each kernel's FLOPs to `flops`: the interpreter executes a kernel with
    torch's ops, which an enclosing FlopCounterMode counts too, but which are the kernel's work."""
    def counted(kernel, *args):
        with FlopCounterMode(display=False) as inside:
            launch(kernel, *args)
        flops.append(inside.get_total_flops())

    return counted


def site_counts(translation: Translation) -> collections.Counter:
    return collections.Counter(STATUS_NAMES.get(r.status, r.status) for r in translation.records)


def compare(model: str, folder: Path, dtype: torch.dtype = torch.float32) -> Result:
    """Translate `model`, run the original and (interpreted) the translated forward, compare logits."""
    translation, module = translate(model, folder)
    original, translated = twins(model, module, dtype)
    ids = token_ids(original.config.vocab_size)
    with torch.no_grad():
        with FlopCounterMode(display=False) as total:
            expected = original(ids).logits
        launched = counting()
        start = time.perf_counter()
        in_kernels = []
        with counted_calls(module, wrapper_names(translation)) as wrappers, interpreted(module), \
                FlopCounterMode(display=False) as ran:
            module.PYPTO_LAUNCHER = flops_counted(module.PYPTO_LAUNCHER, in_kernels)
            logits = translated(ids).logits
        seconds = time.perf_counter() - start
    assert logits.dtype == expected.dtype and logits.shape == expected.shape
    diff = (logits.float() - expected.float()).abs().max().item()
    flops = (total.get_total_flops(), ran.get_total_flops() - sum(in_kernels))
    return Result(model, dtype, site_counts(translation), launched(), wrappers, diff, seconds, flops)


def print_result(result: Result) -> None:
    sites = result.sites
    converted = sites[STATUS_NAMES[CONVERTED]]
    others = ", ".join(f"{status} {n}" for status, n in sorted(sites.items()) if status != STATUS_NAMES[CONVERTED])
    print(f"{result.model:10} {str(result.dtype).removeprefix('torch.'):8} sites {converted}/{sum(sites.values())}"
          f" converted ({others}); {sum(result.kernels.values())} kernel launches ({len(result.kernels)} kernels),"
          f" {sum(result.wrappers.values())} wrapper calls; {_in_pypto(result.matmul_flops)};"
          f" max |diff| {result.max_abs_diff:.3g}"
          f" (tolerance {TOLERANCE[result.dtype]:g}); {result.seconds:.1f} s{'' if result.ok else '  FAILED'}",
          flush=True)
    print("    " + ", ".join(f"{name.removesuffix('.kernel')} x{n}" for name, n in sorted(result.kernels.items())))


def _in_pypto(flops: tuple[int, int]) -> str:
    total, left = flops
    share = 100 * (total - left) / total if total else 0.0
    return f"{share:.1f}% of {total:,} matmul FLOPs in PyPTO kernels"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"default: all of {', '.join(MODELS)}")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.models) - set(MODELS)):
        parser.error(f"unknown model {unknown[0]!r} (choose from {', '.join(MODELS)})")
    # the interpreter's calculator is built once (~40 s) and kept where the tests keep it
    os.environ.setdefault("TORCH2PYPTO_CALC_CACHE", os.path.join(tempfile.gettempdir(), "torch2pypto-calc-cache"))
    start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="torch2pypto-models-") as folder:
        for model in args.models or MODELS:
            results.append(compare(model, Path(folder), getattr(torch, args.dtype)))
            print_result(results[-1])
    print(f"total {time.perf_counter() - start:.1f} s")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
