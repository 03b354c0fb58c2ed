"""Real-code check: tiny transformers models trained one step and run in bfloat16, original vs translated.

    .venv/bin/python scripts/models.py [MODEL ...] [--layers N] [--attention sdpa|eager] [--ops N]

For each model, translates the installed transformers' ``models/<m>/modeling_<m>.py`` with
``translate_source`` (kernels inline), loads the translation as
``transformers.models.<m>._pypto_modeling_<m>`` (so its relative imports resolve; the transformers
modules of layers it imports, LAYER_MODULES such as GPT-2's Conv1D and DynamicCache, translated too), builds a tiny
random config in code (no hub access) and gives the original and the translated model identical
weights. The attention runs as transformers runs it by default, ``sdpa``: a modeling file calls
``integrations/sdpa_attention.py`` through its attention interface, so that file is translated
too and the translated model's interface dispatches to it (``--attention eager``: the modeling
file's own eager code). Likewise an MoE model's experts class, decorated with transformers'
``use_experts_implementation``, runs ``integrations/moe.py``'s default ``grouped_mm`` forward:
that file is translated too and the translated model's decorator is its. Then, the translated
model under ``torch2pypto.interpreted()``:

- training: one FP32 forward and backward with grad on (eval mode: no dropout), the loss being
  the model's own on the token ids as labels; compares the logits, the loss and every
  parameter's gradient with the original's;
- bfloat16: one forward without grad, judged by :class:`LowPrecision` against the FP32 forward
  of the same (rounded) weights.

Both FP32 models run one forward without grad first, so that the forwards measured are a
process's steady state: what the translation does once per process (the sdpa wrapper's causal
band, made once per tile, and a deferred mask's window band) is printed apart, not counted as the forward's.

Prints per model its modeling file's call sites (converted / total, left as torch, ambiguous), the
kernels launched and wrappers called, the launches in each decoder layer (and those of the cache
update in it), the share of the original forward's matmul FLOPs (torch's FlopCounterMode) that the
translated bfloat16 one ran in PyPTO kernels rather than in torch, the aten compute ops (views and
allocations left out) and the bytes they write that each translated forward left to torch outside
its kernel launches against the original forward's, and which ops those are, the training
differences and the bfloat16 figures, and the seconds of each. Exits 1 if a model fails either
check or launched no kernel.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import copy
import dataclasses
import functools
import importlib
import importlib.util
import os
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers.modeling_utils import AttentionInterface

from torch2pypto import Translation, interpreted, translate_source
from torch2pypto.mapping.tolerance import MODEL_FACTOR as FACTOR
from torch2pypto.mapping.tolerance import MODEL_TOLERANCE as TOLERANCE
from torch2pypto.translator.engine.report import CONVERTED
from torch2pypto.translator.run.json_report import STATUS_NAMES
from torch2pypto.translator.verification.hostops import HostWork, host_work
from torch2pypto.translator.verification.interpreter import counting, setup


@dataclasses.dataclass(frozen=True)
class Spec:
    """Which classes of ``transformers.models.<name>`` to build, and the config keys of this family."""

    config: str
    model: str
    extra: dict = dataclasses.field(default_factory=dict)


# Tiny but real: two layers, grouped-query attention, aligned widths as real checkpoints have
# (a head_dim of 32 keeps rotate_half's halves 32-byte aligned in bfloat16 too). Attention is
# transformers' default, sdpa (``--attention eager`` runs the modeling file's own eager code).
COMMON = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=32, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
              eos_token_id=2, attn_implementation="sdpa")
ATTENTION = ("sdpa", "eager")

MODELS = {
    "llama": Spec("LlamaConfig", "LlamaForCausalLM"),
    "qwen3": Spec("Qwen3Config", "Qwen3ForCausalLM"),
    "gemma3": Spec("Gemma3TextConfig", "Gemma3ForCausalLM",
                   dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"])),
    "mistral": Spec("MistralConfig", "MistralForCausalLM", dict(sliding_window=4)),
    "qwen3_moe": Spec("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                      dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1)),
    "phi3": Spec("Phi3Config", "Phi3ForCausalLM"),
    # GPT-2 and BERT read COMMON's widths through their attribute maps (n_embd, n_head, ...)
    "gpt2": Spec("GPT2Config", "GPT2LMHeadModel"),
    "bert": Spec("BertConfig", "BertForMaskedLM"),
}

# Sequences of odd length (tail row tiles); a batch of two rows of ids.
BATCH, SEQUENCE = 2, 7



@dataclasses.dataclass(frozen=True)
class TorchOps:
    """The aten compute ops a forward ran in torch outside kernel launches (views and allocations
    left out) by op name, and the bytes they wrote."""

    ops: collections.Counter
    written: collections.Counter

    @classmethod
    def of(cls, work: HostWork) -> TorchOps:
        return cls(collections.Counter(work.ops), collections.Counter(work.written))


@dataclasses.dataclass(frozen=True)
class Training:
    """One FP32 forward and backward with grad on: the translated run against the original's."""

    kernels: collections.Counter  # kernel launches by kernel name
    logits: float  # max |diff| of the logits
    loss: float  # |diff| of the loss
    gradients: float  # max |diff| over every parameter's gradient (inf: one has a gradient, the other not)
    seconds: float
    torch_ops: tuple[TorchOps, TorchOps] | None = None  # the forward's: original, translated (outside launches)
    once: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # ops of a first call only

    @property
    def ok(self) -> bool:
        return sum(self.kernels.values()) > 0 and max(self.logits, self.loss, self.gradients) <= TOLERANCE


@dataclasses.dataclass(frozen=True)
class Distance:
    """How far low-precision logits lie from the FP32 reference's."""

    largest: float
    rms: float

    @classmethod
    def between(cls, logits: torch.Tensor, reference: torch.Tensor) -> Distance:
        diff = logits.float() - reference
        return cls(diff.abs().max().item(), diff.square().mean().sqrt().item())

    def within(self, other: Distance, factor: float) -> bool:
        return self.largest <= factor * other.largest and self.rms <= factor * other.rms


@dataclasses.dataclass(frozen=True)
class LowPrecision:
    """A low-precision forward judged against the FP32 forward of the same (rounded) weights.

    The translated logits must lie within FACTOR times the original low-precision logits'
    distance from the reference, and their argmax must be the reference's at every decided
    position (whose top logit leads the next by more than twice the largest distance allowed).
    A one-ulp near-tie flip that later layers grow stays within the original's own rounding
    noise and passes; a kernel that rounds the wrong way in every element does not.
    """

    dtype: torch.dtype
    kernels: collections.Counter  # kernel launches by kernel name
    wrappers: collections.Counter  # calls of the translation's wrappers by name
    translated: Distance
    original: Distance
    decided: int  # positions whose argmax the check holds
    agreeing: int  # of those, where the translated argmax is the reference's
    seconds: float
    per_layer: tuple[collections.Counter, ...] = ()  # the launches in each decoder (encoder) layer
    cache: tuple[collections.Counter, ...] = ()  # the launches in each cache update (one a decoder layer)
    matmul_flops: tuple[int, int] = (0, 0)  # the original forward's, and those the translated one left to torch
    torch_ops: tuple[TorchOps, TorchOps] | None = None  # the forward's: original, translated (outside launches)

    @classmethod
    def judge(cls, logits: torch.Tensor, original: torch.Tensor, reference: torch.Tensor, **run) -> LowPrecision:
        """Judge `logits` (translated) and `original` (low precision) against `reference` (FP32)."""
        translated, own = Distance.between(logits, reference), Distance.between(original, reference)
        top = reference.topk(2, dim=-1).values
        decided = top[..., 0] - top[..., 1] > 2 * FACTOR * own.largest
        agreeing = (logits.float().argmax(-1) == reference.argmax(-1)) & decided
        return cls(logits.dtype, translated=translated, original=own, decided=int(decided.sum()),
                   agreeing=int(agreeing.sum()), **run)

    @property
    def ok(self) -> bool:
        return (sum(self.kernels.values()) > 0 and self.translated.within(self.original, FACTOR)
                and self.agreeing == self.decided)


@dataclasses.dataclass(frozen=True)
class Result:
    """One model: its modeling file's sites, its training step and its low-precision forward."""

    model: str
    sites: collections.Counter  # by status name (json_report.STATUS_NAMES)
    training: Training
    low_precision: LowPrecision

    @property
    def ok(self) -> bool:
        return self.training.ok and self.low_precision.ok


def modeling_path(model: str) -> Path:
    """The installed transformers' modeling file of `model`."""
    return Path(importlib.import_module(f"transformers.models.{model}").__file__).parent / f"modeling_{model}.py"


# transformers modules outside models/ whose layers a modeling file builds (GPT-2's Conv1D, whose
# forward is torch.addmm; the DynamicCache a decoder's forward creates, whose update concatenates
# the keys and values): translated too where the modeling file imports them, and its translation
# imports the translated one in their place. masking_utils is not: its ops are index arithmetic
# on ints and bools (arange, comparisons, bitwise_and, any/all), which no kernel takes; the
# modeling file's calls of its causal masks defer the mask to the attention kernel instead
# (translator/engine/masks.py), which computes it in its tiles.
LAYER_MODULES = ("pytorch_utils", "cache_utils")
KERNEL_MODULES: dict[str, list[types.ModuleType]] = {}  # translated modeling module name -> its layer modules


def layer_modules(model: str) -> list[str]:
    """The modules of LAYER_MODULES that `model`'s modeling file imports (``from ...pytorch_utils import``)."""
    text = modeling_path(model).read_text(encoding="utf-8")
    return [name for name in LAYER_MODULES if f"from ...{name} import" in text]


def translate(model: str, folder: Path) -> tuple[Translation, types.ModuleType]:
    """Translate `model`'s modeling file (and the layer modules it imports) and import it as a
    sibling module of the original."""
    setup()  # before the translation imports pypto, so that PyPTO writes into a temp dir
    source = modeling_path(model)
    translation = translate_source(source.read_bytes(), str(source))
    layers = {name: translate_layers(name, folder) for name in layer_modules(model)}
    module = load(model, translation.code, folder, layers)
    KERNEL_MODULES[module.__name__] = list(layers.values())
    return translation, module


def translate_layers(name: str, folder: Path) -> types.ModuleType:
    """transformers' module `name` translated, imported as ``transformers._pypto_<name>``."""
    source = Path(importlib.import_module(f"transformers.{name}").__file__)
    return import_written(f"transformers._pypto_{name}", translate_source(source.read_bytes(), str(source)).code, folder / f"{name}.py")


def load(model: str, code: str, folder: Path, layers: dict[str, types.ModuleType] | None = None) -> types.ModuleType:
    """Import `code`, a translation of `model`'s modeling file, as a sibling module of the original,
    its imports of transformers' modules `layers` (name -> translated module) reading those, its
    attention interface dispatching ``sdpa`` to the translated :func:`sdpa_attention`.

    The code is written to ``folder/models/<m>/modeling_<m>.py``: transformers' docstring
    decorators read the model's name from its source file's path.
    """
    path = folder / "models" / model / modeling_path(model).name
    replaced = {f"transformers.{name}": translated for name, translated in (layers or {}).items()}
    if "use_experts_implementation" in code:
        replaced["transformers.integrations"] = experts_integrations()
    saved = {name: sys.modules[name] for name in replaced}
    try:
        sys.modules.update(replaced)
        module = import_written(f"transformers.models.{model}._pypto_modeling_{model}", code, path)
    finally:
        sys.modules.update(saved)
    # a modeling file overrides an attention function locally in an instance of its own
    # (transformers' AttentionInterface docstring)
    interface = AttentionInterface()
    interface["sdpa"] = sdpa_attention()[1].sdpa_attention_forward
    module.ALL_ATTENTION_FUNCTIONS = interface
    return module


def sdpa_attention() -> tuple[Translation, types.ModuleType]:
    """transformers' default attention, ``integrations/sdpa_attention.py`` (the modeling files
    call it through their attention interface), translated."""
    return translated_transformers("integrations.sdpa_attention")


def loss_utils() -> tuple[Translation, types.ModuleType]:
    """transformers' losses, ``loss/loss_utils.py`` (a model's ``loss_function`` resolves its loss
    in LOSS_MAPPING: ForCausalLMLoss, the cross entropy of the shifted labels), translated."""
    return translated_transformers("loss.loss_utils")


def moe() -> tuple[Translation, types.ModuleType]:
    """transformers' MoE experts implementations, ``integrations/moe.py``: an experts class
    decorated with its ``use_experts_implementation`` runs ``grouped_mm_experts_forward`` by
    default (the tokens sorted by expert, the experts' matmuls grouped_mm's), translated."""
    return translated_transformers("integrations.moe")


@functools.cache
def translated_transformers(name: str) -> tuple[Translation, types.ModuleType]:
    """transformers' module `name` (``integrations.sdpa_attention``) translated and imported in
    its package as ``_pypto_<module>`` (its relative imports resolve), once per process."""
    setup()
    source = Path(importlib.import_module(f"transformers.{name}").__file__)
    translation = translate_source(source.read_bytes(), str(source))
    folder = Path(tempfile.mkdtemp(prefix="torch2pypto-integration-"))
    atexit.register(shutil.rmtree, folder, True)
    package, _, module = f"transformers.{name}".rpartition(".")
    return translation, import_written(f"{package}._pypto_{module}", translation.code, folder / source.name)


def experts_integrations() -> types.ModuleType:
    """``transformers.integrations`` as a modeling file that decorates its experts class with
    ``use_experts_implementation`` imports it: that decorator the translated :func:`moe`'s, whose
    experts interface dispatches ``grouped_mm`` (transformers' default) to the translated forward."""
    original = importlib.import_module("transformers.integrations")
    proxy = types.ModuleType(original.__name__)
    proxy.__path__ = original.__path__
    proxy.__getattr__ = functools.partial(getattr, original)
    proxy.use_experts_implementation = moe()[1].use_experts_implementation
    return proxy


def translated_loss(model: torch.nn.Module):
    """The translation of the loss function `model` resolves (the same name in :func:`loss_utils`)."""
    return getattr(loss_utils()[1], model.loss_function.__name__)


def import_written(name: str, code: str, path: Path) -> types.ModuleType:
    """``code`` written to ``path`` and imported as module ``name`` (PyPTO reads a kernel's source
    from its file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(code, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def running(module: types.ModuleType) -> list[types.ModuleType]:
    """The translated modules a translated model runs: its modeling module, the translated
    attention its interface dispatches to, the translated losses and MoE experts, and its layer
    modules."""
    return [module, sdpa_attention()[1], loss_utils()[1], moe()[1], *KERNEL_MODULES.get(module.__name__, ())]


def wrappers_of(module: types.ModuleType, translation: Translation) -> dict[types.ModuleType, set[str]]:
    """The wrappers each translated module the model runs calls (`translation`: the modeling file's)."""
    return {module: wrapper_names(translation),
            **{m: wrapper_names(t) for t, m in (sdpa_attention(), moe())}}


def wrapper_names(translation: Translation) -> set[str]:
    """The host wrappers the translation's converted calls use."""
    return {conversion.call.func.value for conversion in translation.conversions}


def tiny_config(model: str, layers: int = 2):
    """A small random-weights config of `model`, built in code (a family's layer types repeat
    over `layers`)."""
    spec = MODELS[model]
    config = getattr(importlib.import_module(f"transformers.models.{model}"), spec.config)
    extra = dict(spec.extra)
    if "layer_types" in extra:
        extra["layer_types"] = [extra["layer_types"][i % len(extra["layer_types"])] for i in range(layers)]
    return config(**{**COMMON, "num_hidden_layers": layers, **extra})


def twins(model: str, module: types.ModuleType, dtype: torch.dtype = torch.float32, layers: int = 2):
    """The original model and the translated one with identical random weights, in eval mode."""
    spec = MODELS[model]
    config = tiny_config(model, layers)
    torch.manual_seed(0)
    original = getattr(importlib.import_module(f"transformers.models.{model}.modeling_{model}"), spec.model)(config)
    translated = getattr(module, spec.model)(config)
    translated.load_state_dict(original.state_dict())
    translated.loss_function = translated_loss(original)
    return original.to(dtype).eval(), translated.to(dtype).eval()


def token_ids(vocab_size: int) -> torch.Tensor:
    return torch.randint(0, vocab_size, (BATCH, SEQUENCE), generator=torch.Generator().manual_seed(1))


@contextlib.contextmanager
def counted_calls(modules: dict[types.ModuleType, set[str]]):
    """Count the calls of each module's functions named (the translated code calls them as globals)."""
    calls: collections.Counter[str] = collections.Counter()

    def counted(name, function):
        @functools.wraps(function)
        def call(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return call

    saved = [(module, name, getattr(module, name)) for module, names in modules.items() for name in names]
    try:
        for module, name, function in saved:
            setattr(module, name, counted(name, function))
        yield calls
    finally:
        for module, name, function in saved:
            setattr(module, name, function)


@contextlib.contextmanager
def layer_launches(model: torch.nn.Module):
    """Inside the block, the kernel launches of each call of `model`'s decoder (or encoder) layers,
    the modules of its first ModuleList of ``num_hidden_layers``: yields the list of Counters."""
    layers = next(m for m in model.modules()
                  if isinstance(m, torch.nn.ModuleList) and len(m) == model.config.num_hidden_layers)
    calls: list[collections.Counter] = []

    def start(*_):
        calls.append(counting())

    def stop(*_):
        calls[-1] = calls[-1]()

    hooks = [hook for layer in layers for hook in (layer.register_forward_pre_hook(start),
                                                   layer.register_forward_hook(stop))]
    try:
        yield calls
    finally:
        for hook in hooks:
            hook.remove()


@contextlib.contextmanager
def cache_launches(modules: list[types.ModuleType]):
    """Inside the block, the kernel launches of each call of a translated cache's ``update`` (a
    DynamicCache's: the cats of the keys and values kept): yields the list of Counters."""
    calls: list[collections.Counter] = []
    saved = [(m.Cache, m.Cache.update) for m in modules if isinstance(getattr(m, "Cache", None), type)]

    def counted(update):
        @functools.wraps(update)
        def run(*args, **kwargs):
            launched = counting()
            try:
                return update(*args, **kwargs)
            finally:
                calls.append(launched())
        return run

    try:
        for cls, update in saved:
            cls.update = counted(update)
        yield calls
    finally:
        for cls, update in saved:
            cls.update = update


class _Untracked:
    """A module tracker that tracks nothing: FlopCounterMode's own registers global module hooks,
    which every submodule call would run, so that a fused region inlining a submodule's forward
    runs its torch statements instead (_inlined) and the run measured would not be the real one."""

    parents = frozenset({"Global"})

    def __enter__(self):
        return self

    def __exit__(self, *args):
        return None


def total_flops() -> FlopCounterMode:
    """A FlopCounterMode counting the total only (no module hooks)."""
    counter = FlopCounterMode(display=False)
    counter.mod_tracker = _Untracked()
    return counter


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


def train(model: str, module: types.ModuleType, layers: int = 2) -> Training:
    """One FP32 forward and backward of the original and (interpreted) the translated `model`."""
    original, translated = twins(model, module, torch.float32, layers)
    ids = token_ids(original.config.vocab_size)
    modules = running(module)
    with torch.no_grad(), interpreted(*modules):  # what a process does once
        original(ids)
        with host_work(*modules) as first:
            translated(ids)
    with host_work() as whole:
        expected = original(ids, labels=ids)
    expected.loss.backward()
    launched = counting()
    start = time.perf_counter()
    with interpreted(*modules):
        with host_work(*modules) as left:
            got = translated(ids, labels=ids)
        got.loss.backward()
    seconds = time.perf_counter() - start
    gradients = [_max_diff(p.grad, q.grad) for p, q in zip(translated.parameters(), original.parameters())]
    return Training(launched(), _max_diff(got.logits, expected.logits), _max_diff(got.loss, expected.loss),
                    max(gradients), seconds, (TorchOps.of(whole), TorchOps.of(left)),
                    collections.Counter(first.ops) - left.ops)


def _max_diff(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    if a is None or b is None:
        return 0.0 if a is b else float("inf")
    return (a.detach().float() - b.detach().float()).abs().max().item()


def low_precision(model: str, module: types.ModuleType, translation: Translation, layers: int = 2,
                  dtype: torch.dtype = torch.bfloat16) -> LowPrecision:
    """A `dtype` forward of the original and (interpreted) the translated `model`, judged against
    the FP32 forward of the original with the same weights (rounded to `dtype`)."""
    original, translated = twins(model, module, dtype, layers)
    ids = token_ids(original.config.vocab_size)
    with torch.no_grad():
        reference = copy.deepcopy(original).float()(ids).logits
        with total_flops() as total, host_work() as whole:
            expected = original(ids).logits
        launched = counting()
        start = time.perf_counter()
        in_kernels = []
        modules = running(module)
        with counted_calls(wrappers_of(module, translation)) as wrappers, interpreted(*modules), total_flops() as ran, \
                layer_launches(translated) as per_layer, cache_launches(modules) as cache:
            for one in modules:
                one.PYPTO_LAUNCHER = flops_counted(one.PYPTO_LAUNCHER, in_kernels)
            with host_work(*modules) as left:
                logits = translated(ids).logits
        seconds = time.perf_counter() - start
    assert logits.dtype == expected.dtype and logits.shape == expected.shape
    flops = (total.get_total_flops(), ran.get_total_flops() - sum(in_kernels))
    return LowPrecision.judge(logits, expected, reference, kernels=launched(), wrappers=wrappers, seconds=seconds,
                              per_layer=tuple(per_layer), cache=tuple(cache), matmul_flops=flops, torch_ops=(TorchOps.of(whole), TorchOps.of(left)))


def compare(model: str, folder: Path, layers: int = 2) -> Result:
    """Translate `model`, then train it one step and run it in bfloat16 against the original."""
    translation, module = translate(model, folder)
    return Result(model, site_counts(translation), train(model, module, layers),
                  low_precision(model, module, translation, layers))


def print_result(result: Result, top: int = 6) -> None:
    sites, training, low = result.sites, result.training, result.low_precision
    converted = sites[STATUS_NAMES[CONVERTED]]
    others = ", ".join(f"{status} {n}" for status, n in sorted(sites.items()) if status != STATUS_NAMES[CONVERTED])
    print(f"{result.model:10} sites {converted}/{sum(sites.values())} converted ({others}){'' if result.ok else '  FAILED'}")
    print(f"    training float32: {_launches(training.kernels)}; max |diff| logits {training.logits:.3g},"
          f" loss {training.loss:.3g}, gradients {training.gradients:.3g} (tolerance {TOLERANCE:g});"
          f" {training.seconds:.1f} s{'' if training.ok else '  FAILED'}")
    print(f"    {str(low.dtype).removeprefix('torch.')}: {_launches(low.kernels)}, {sum(low.wrappers.values())} wrapper"
          f" calls; {_in_pypto(low.matmul_flops)}; from float32 max |diff| {low.translated.largest:.3g} (original"
          f" {low.original.largest:.3g}), rms {low.translated.rms:.3g} (original {low.original.rms:.3g}), allowed"
          f" x{FACTOR:g}; argmax agrees at {low.agreeing}/{low.decided} decided positions; {low.seconds:.1f} s"
          f"{'' if low.ok else '  FAILED'}", flush=True)
    print("    " + ", ".join(f"{name.removesuffix('.kernel')} x{n}" for name, n in sorted(low.kernels.items())))
    if low.per_layer:
        cache = f" ({', '.join(str(sum(n.values())) for n in low.cache)} of them the cache's update)" if low.cache else ""
        print(f"    launches per layer: {', '.join(str(sum(n.values())) for n in low.per_layer)}{cache}; in the first: "
              + ", ".join(f"{name.removesuffix('.kernel')} x{n}" for name, n in sorted(low.per_layer[0].items())))
    for dtype, torch_ops in ((torch.float32, training.torch_ops), (low.dtype, low.torch_ops)):
        if torch_ops:
            print(f"    {str(dtype).removeprefix('torch.')} forward: {_left_to_torch(*torch_ops, top)}")
    if training.once:
        print("    once per process, before the forwards measured (both models ran one first): "
              + ", ".join(f"{name} x{n}" for name, n in training.once.most_common()))


def _left_to_torch(original: TorchOps, translated: TorchOps, top: int = 6) -> str:
    """The aten ops and bytes the translated forward left to torch against the original's, the
    share that moved into kernels, and the ops left by count."""
    def share(total: int, left: int) -> str:
        return f"{100 * (total - left) / total:.1f}%" if total else "-"

    ops, written = original.ops.total(), original.written.total()
    left, left_bytes = translated.ops.total(), translated.written.total()
    shown = translated.ops.most_common(top)
    remaining = ", ".join(f"{name} x{n}" for name, n in shown)
    if rest := left - sum(n for _, n in shown):
        remaining += f", {len(translated.ops) - top} others x{rest}"
    return (f"torch ops {left}/{ops} of the original's ({share(ops, left)} in kernels), bytes written"
            f" {left_bytes:,}/{written:,} ({share(written, left_bytes)} in kernels); left: {remaining or 'none'}")


def _launches(kernels: collections.Counter) -> str:
    return f"{sum(kernels.values())} kernel launches ({len(kernels)} kernels)"


def _in_pypto(flops: tuple[int, int]) -> str:
    total, left = flops
    share = 100 * (total - left) / total if total else 0.0
    return f"{share:.1f}% of {total:,} matmul FLOPs in PyPTO kernels"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"default: all of {', '.join(MODELS)}")
    parser.add_argument("--layers", type=int, default=2, help="hidden layers of each tiny model (default: 2)")
    parser.add_argument("--ops", type=int, default=6, metavar="N",
                        help="how many of the ops left to torch to name, most run first (default: 6)")
    parser.add_argument("--attention", choices=ATTENTION, default=ATTENTION[0],
                        help="the attention implementation (default: transformers' own default, sdpa)")
    args = parser.parse_args(argv)
    COMMON["attn_implementation"] = args.attention
    if unknown := sorted(set(args.models) - set(MODELS)):
        parser.error(f"unknown model {unknown[0]!r} (choose from {', '.join(MODELS)})")
    # the interpreter's calculator is built once (~40 s) and kept where the tests keep it
    os.environ.setdefault("TORCH2PYPTO_CALC_CACHE", os.path.join(tempfile.gettempdir(), "torch2pypto-calc-cache"))
    start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="torch2pypto-models-") as folder:
        for model in args.models or MODELS:
            results.append(compare(model, Path(folder), args.layers))
            print_result(results[-1], args.ops)
    print(f"total {time.perf_counter() - start:.1f} s")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
