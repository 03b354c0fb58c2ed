"""Benchmark: a llama-7B decoder layer as torch2pypto translates it, in PyPTO's cost model (A2A3, SIM).

    python scripts/layer.py [--tokens 64 2048] [--attention sdpa] [--quick] [--experts DIR]

Translates the installed transformers' ``modeling_llama.py`` (and, for ``sdpa``, the attention
function transformers runs by default, ``integrations/sdpa_attention.py``) twice: fused (one
kernel per region, today's default) and with ``--no-fuse`` (one kernel per torch call). Each runs
one ``LlamaDecoderLayer`` at llama-7B's shapes (hidden 4096, 32 heads of 128, intermediate 11008,
bf16, batch 1) with every kernel launch timed in SIM mode (costmodel.py), so the figures are
whatever the translator generates on the day: when regions grow (matmul epilogues, the gated
MLP, attention) this script measures them unchanged.

Prints, per token count:
- every launch of the fused layer: the stage it belongs to (the innermost submodule, and the
  model's helper function it runs in: rope, attention), µs, tasks, bytes moved, FLOPs, and its
  roofline floor max(bytes / 1.42 TB/s, FLOPs / cube peak) with time / floor;
- per block of the layer (a top-level submodule, or the helper it runs: rope, attention), the
  fused launches against the per-op launches of the same code, with ratios and the floor;
- the whole layer: the sum of its launches against the per-op sum and against the layer's own
  roofline floor (weights, input and output once over HBM; every FLOP at the cube peak);
- the aten ops torch still runs outside the launches (host-side ops, a wrapper's host copies)
  and the wrappers that ran their torch path instead of a kernel (shapes the kernel was not built
  for), which no kernel time includes.
The cube peak is read from PyPTO's A2A3 platform file (pypto/lib/configs/A2A3.ini): cube cores x
the cube's M x N x K MACs per cycle x 2 FLOPs, at the cost model's 1.8 GHz. FLOPs per launch are
torch's FlopCounterMode over the wrapper's own torch path run on meta tensors (matmuls and
attention; causal attention counted in full, as torch counts it). Launch gaps are excluded (they
only widen a per-op chain's time). Figures only, not a test.

Last run (pypto 0.2.0, transformers 5.23.0, sdpa; on a shared 2-core machine), µs:
  64 tokens:   fused 414.7 (5 launches) against per-op 457.7 (38): 1.10x; layer floor 285.8 (HBM:
               387 MiB of weights), fused 1.45x of it. The input RMSNorm in the q/k/v kernel's
               prologue with RoPE in its epilogue 84.7 (1 launch) against 3.1 + 73.1 = 76.2 as two
               (RMSNorm 16.7 in 8 launches per op; the projections 3 x 33.3 and RoPE 54.2 apart):
               the cost model charges no launch gap, and the cube's projections of a row tile wait
               for its norm, which reaches them through GM (1 token: 74.7 against 2.1 + 63.2);
               o_proj 33.3 (1.37x; 42.9 while the vector cores cast its FP32 product);
               residual add + RMSNorm as the gated kernel's prologue 185.4 (gate and up 61.2 each
               apart), down + add 82.9; sdpa 28.4 (18.9x its floor).
  2048 tokens: fused 4693.4 (5 launches) against per-op 7264.0: 1.55x (7591.6 before join kernels
               took tiles as large as their rows: rotate_half's cats); floor 2536.5 (898 GFLOP at
               the cube peak), fused 1.85x (4676.7, 1.84x, with the input norm its own launch;
               4773.5, 1.88x, before the two changes below). RMSNorm + q/k/v with RoPE 1031.5
               (1.77x the projections' floor: 206 GFLOP; the table's "?" is FLOPs the prologue
               kernel's wrapper has no torch path to count) against 24.6 + 990.1 = 1014.7 as two
               launches, which write and read the normed rows through HBM (32 MiB: 23.6 at 1.42
               TB/s, which the cost model does not charge); RMSNorm alone 24.6 against 186.1 per
               op (7.55x, 1.04x floor); the projections 3 x 370.7 apart, o_proj 370.7 (1.91x; 387.4
               with the FP32 product cast on the vector cores), add + RMSNorm + gated 1789.2 (1.71x
               the two projections' floor; 971.1 each apart), down + add 897.2 (1.72x); causal
               sdpa 604.9 (3.12x its floor, FLOPs counted in full; 685.0 with its kv loop unrolled
               [4, 2, 1], 873.3 not unrolled). Its cube tasks wait on their copies too: Q.K^T
               writes its [512, 512] FP32 scores in 8 L0C tiles of 2028 cycles each on MTE_OUT,
               P.V copies P again for each of its 2 n tiles; cube and vector cores are ~55% busy.
  The cube kernels are bound by their GM-to-L1 copies (each cube core's MTE_IN pipe runs them one
  after another, ~1400 cycles + bytes / 96 each; the cube pipe is busy about a third of the
  time): see runtime/tiles.py's _cube_tiles. A [128, 256] output tile of K 4096 is 12 copies of
  256 KiB (a's and b's L1 tiles fill L1): 49.7k cycles, its bytes alone 32.8k, against 32.8k at
  the cube peak used for the floor; with ~5.5k cycles between a core's tasks (the AICPU polling
  its cores) that is ~1.7x the floor before any tail, so the matmuls alone keep the layer above
  1.5x at 2048 tokens. Before a's longer L1 k tile (commit a4499fa): 64
  tokens 460.7 (q/k/v+RoPE 81.8, o_proj 47.7, prologue+gated 205.6, down+add 94.1), 2048 tokens
  5334.8 (1078.8, 419.0, 1941.0, 996.8).
  Other matmul structures (raw pypto kernels in SIM, bf16, 2048 rows; µs): none reaches 1.5x. A
  task is one L0C tile whatever the L1 m and n, and L0C's 128 KiB holds [128, 256] FP32 at most:
  its 768 bytes per k step take the core's MTE_IN (~96 B/cycle) exactly the floor's 8 cycles, so
  bytes alone are 1.0x the floor ([176, 176] would move 3% less), and its 12 copies of 256 KiB
  (a's and b's L1 tiles share 512 KiB) add 1400 cycles each: 49.7k of MTE_IN a task against
  32.8k, 1.51x before the ~5k cycles between tasks (the model's cube pipe needs 17k: twice the
  A2A3.ini peak the floor uses). linear 2048x4096x4096 (o_proj): generated 370.7 (256 tasks of
  54.5k cycles; MTE_IN 79% busy, cube 27%); 256 rows with L1 m 256: 406.6 (still [128, 256]
  tasks); L1 n 512 (k [128, 256]): 547.4; [64, 512] tasks: 529.8; [256, 128]: 477.0;
  enable_split_k: F21004; runtime triple_stream_sched, device_sched_mode 1-3,
  stitch_function_max_num 128, stitch_function_inner/outcast_memory 128: unchanged (a core's tasks
  stay 5.5k cycles apart).
  Merging a row tile's tasks (cube_l1_reuse_setting or cube_nbuffer_setting, as q/k/v + RoPE
  does) shares no operand: the merged task copies a again (L1 holds no [128, K] tile); it only
  saves the gaps and costs a tail: 2, 3, 4 tasks 368.6, 362.2, 353.8; 2048x4096x11008 971.1,
  911.8 (2), 896.6 (3), 909.0 (4); K 3072 299.6 -> 272.2 (4), 5504 478.6 -> 473.8, 8192 673.2
  -> 685.1, 12288 987.6 -> 1016.4; down's K 11008 881.3 -> 2720.2 (2: the merged task copies 90
  a tiles and 102 b tiles where its two tiles need 22 and 44; 1394.9 with k [128, 256]), 3305.9
  (3). The gated kernel (4096 -> 11008, no prologue) 1766.8: 1746.5 (nbuffer 2), 1792.2 (l1_reuse
  2), 1792.9 (nbuffer 3). Not
  adopted: in this layer it would save o_proj's ~17 µs and cannot take down's K. sdpa's timeline
  (causal, 2048 tokens, 605.1; unchanged with the global pass.enable_cv_fuse): 320 Q.K^T and 320
  P.V cube tasks (the 320 kv tiles the causal loop visits) of 24.0k and 26.0k cycles against the
  floor's 16.4k for a kv tile's two products (its FP32 scores leave through MTE_OUT, P comes back
  through MTE_IN); cube cores 61% busy over the span (25-28% where a wave of q tiles' chains ends),
  vector cores 58%.
  The fused-run "(torch path)" wrappers listed are the FLOP count's meta-tensor runs, not
  fallbacks. Experts (non-causal attention): translated sdpa 59.0 against flash_attention_mha
  87.0 at B1 H8 S512 (0.68x), 1125.8 against 3290.9 at H32 S2048 (0.34x; 794.4 with the kv loop
  unrolled), same HBM floor;
  SwiGLU 4096x512x1024 (last stop's run): the gated kernel 127.3 against fused_swiglu's 148.2 (0.86x), HBM floor
  10.3 against 10.3.

``--experts DIR`` (a checkout of hicann/pypto) adds PyPTO's own model kernels: flash_attention_mha
at B1 H8 S512 and H32 S2048 (D128) against the translated ``F.scaled_dot_product_attention`` and
fused_swiglu at 4096x512x1024 against the translated ``down``-less llama MLP. See ``expert_runs``.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import contextlib
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

from costmodel import CYCLES_PER_US, HBM_BYTES_PER_US, Worker, scratch, sim_time

LLAMA_7B = dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=32, head_dim=128,
                intermediate_size=11008, num_hidden_layers=1)
QUICK = dict(hidden_size=1024, num_attention_heads=8, num_key_value_heads=8, head_dim=128,
             intermediate_size=2752, num_hidden_layers=1)  # llama-7B / 4 in width, for --quick
# helper functions of the model's code that name a stage, whatever submodule calls them
STAGES = {"rotate_half": "rope", "apply_rotary_pos_emb": "rope", "repeat_kv": "attention",
          "eager_attention_forward": "attention", "sdpa_attention_forward": "attention"}


def cube_peak() -> tuple[float, str]:
    """FLOPs per µs of the modelled chip's cube cores, and how it was derived."""
    import pypto

    ini = configparser.ConfigParser(strict=False, interpolation=None)
    ini.read(Path(pypto.__file__).parent / "lib" / "configs" / "A2A3.ini")
    cores = ini.getint("SoCInfo", "cube_core_cnt")
    m, n, k = (ini.getint("AICoreSpec", f"cube_{axis}_size") for axis in "mnk")
    peak = cores * m * n * k * 2 * CYCLES_PER_US
    return peak, (f"{cores} cube cores x {m}x{n}x{k} MAC/cycle x 2 FLOP x {CYCLES_PER_US / 1000:g} GHz = "
                  f"{peak / 1e6:.1f} TFLOPS bf16 (A2A3.ini; its cube_freq={ini.get('AICoreSpec', 'cube_freq')} MHz "
                  f"would give {peak / CYCLES_PER_US * ini.getint('AICoreSpec', 'cube_freq') / 1e6:.1f})")


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel launch in SIM mode."""

    stage: str  # the submodule(s) and helper it runs: self_attn.q_proj, self_attn.rope
    block: str  # the decoder layer's part: its top-level submodule and helper (self_attn, self_attn.rope)
    kernel: str
    us: float
    tasks: int
    bytes: int  # the tensors handed to the kernel (inputs and outputs), once each
    flops: int | None  # None: the wrapper's torch path could not be counted

    def floor(self, peak: float) -> float:
        return max(self.bytes / HBM_BYTES_PER_US, (self.flops or 0) / peak)


# ---------------------------------------------------------------------------- translation


def translated(folder: Path, fuse: bool) -> tuple:
    """modeling_llama and sdpa_attention, translated (fused or per op) and imported beside the originals."""
    import transformers.integrations.sdpa_attention as sdpa
    import transformers.models.llama.modeling_llama as llama
    from models import import_written
    from torch2pypto import Options, translate_source

    tag = "fused" if fuse else "per_op"
    modules = []
    for original, package in ((llama, "transformers.models.llama"), (sdpa, "transformers.integrations")):
        source = Path(original.__file__).read_text(encoding="utf-8")
        # its own path: the translation reads what the files it imports declare (ACT2FN's classes)
        code = translate_source(source, original.__file__, Options(fuse=fuse)).code
        stem = original.__name__.rsplit(".", 1)[1]
        # transformers' docstring decorators read the model's name from the file's path
        modules.append(import_written(f"{package}._pypto_{tag}_{stem}", code, folder / tag / "models" / "llama" / f"{stem}.py"))
    return tuple(modules)


# ---------------------------------------------------------------------------- measuring


class Recorder:
    """Times every launch of ``modules`` in SIM mode and labels it with its stage; counts each
    wrapper call's FLOPs on meta tensors and what torch runs outside the launches."""

    def __init__(self, modules, layer, peak_source_files) -> None:
        self.modules, self.launches, self.flops = modules, [], None
        self.fallbacks = {}  # wrapper -> calls that launched nothing: their torch path ran
        self.files = peak_source_files  # translated files: their frames name the stage
        self.helpers = set()
        for module in modules:
            tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
            self.helpers |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in STAGES}
        # a launch that reads a submodule's parameter (a projection's weight) is that submodule's
        self.owners = {p.data_ptr(): name.rpartition(".")[0] for name, p in layer.named_parameters()}
        # the submodule running: the innermost frame whose ``self`` is one (no hooks: a module with
        # hooks is one whose call a fused kernel may not skip, so hooks would change what launches)
        self.paths = {id(sub): path for path, sub in layer.named_modules()}

    def stage(self, tensors) -> tuple[str, str]:
        """The submodule whose parameters the launch reads (else the innermost one running) and the
        model's helper function it runs in, if one names a stage."""
        frame, helper, running = sys._getframe(), None, None
        while frame is not None:
            if frame.f_code.co_filename in self.files and frame.f_code.co_name in self.helpers:
                helper = STAGES[frame.f_code.co_name]  # the outermost wins
            if running is None and id(frame.f_locals.get("self")) in self.paths:
                running = self.paths[id(frame.f_locals["self"])]
            frame = frame.f_back
        owners = dict.fromkeys(self.owners[t.data_ptr()] for t in tensors if t.data_ptr() in self.owners)
        path = "+".join(owners) or running or "layer"
        return ".".join(p for p in (path, helper) if p), ".".join(p for p in (path.split(".")[0], helper) if p)

    def launch(self, kernel, *tensors) -> None:
        us, tasks = sim_time(kernel, *tensors)
        name = getattr(getattr(kernel, "_original_func", kernel), "__qualname__", "?").split(".")[0]
        flops, self.flops = self.flops, None  # the FLOPs of the wrapper called last go to its first launch
        self.launches.append(Launch(*self.stage(tensors), name, us, tasks, sum(t.numel() * t.element_size() for t in tensors),
                                    flops))

    @contextlib.contextmanager
    def wrappers_counted(self, work):
        """Each module's ``pypto_*`` wrappers count their FLOPs first: their torch path on meta tensors."""
        import torch
        from torch.utils._pytree import tree_map_only
        from torch.utils.flop_counter import FlopCounterMode

        saved, depth, metering = [], [0], [False]

        def counted(wrapper):
            def call(*args, **kwargs):
                if not metering[0]:  # a wrapper another calls (a submodule's linear epilogue's) counts its own launches
                    metering[0] = True
                    meta = tree_map_only(torch.Tensor, lambda t: torch.empty_strided(
                        t.shape, t.stride(), dtype=t.dtype, device="meta"), (args, kwargs))
                    launchers = [m.PYPTO_LAUNCHER for m in self.modules]
                    work.paused += 1
                    try:
                        for m in self.modules:
                            m.PYPTO_LAUNCHER = None
                        with FlopCounterMode(display=False) as counter:
                            wrapper(*meta[0], **meta[1])
                        # a host helper called inside another wrapper (the attention wrapper's
                        # pypto_repeated) counts nothing: the caller's FLOPs stay for its launch
                        if counter.get_total_flops() or self.flops is None or not depth[0]:
                            self.flops = counter.get_total_flops()
                    except Exception:  # noqa: BLE001 - a torch path meta tensors cannot run: unknown FLOPs
                        self.flops = None
                    finally:
                        metering[0] = False
                        work.paused -= 1
                        for m, launcher in zip(self.modules, launchers):
                            m.PYPTO_LAUNCHER = launcher
                depth[0] += 1
                launched = len(self.launches)
                try:
                    return wrapper(*args, **kwargs)
                finally:
                    depth[0] -= 1
                    if depth[0] == 0 and len(self.launches) == launched:  # it ran its torch path
                        self.fallbacks[wrapper.__name__] = self.fallbacks.get(wrapper.__name__, 0) + 1

            return call

        for m in self.modules:
            for name, value in list(vars(m).items()):
                if name.startswith("pypto_") and callable(value):
                    saved.append((m, name, value))
                    setattr(m, name, counted(value))
        try:
            yield
        finally:
            for m, name, value in saved:
                setattr(m, name, value)


def measure(fuse: bool, attention: str, tokens: int, config: dict) -> tuple[list[Launch], dict]:
    """The launches of one decoder layer's forward on ``tokens`` tokens (:func:`recorded`)."""
    import torch
    import transformers.models.llama.modeling_llama as llama
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    folder = Path(os.environ["TILE_FWK_OUTPUT_DIR"]).parent
    modeling, sdpa = translated(folder, fuse)
    cfg = llama.LlamaConfig(**config, attn_implementation=attention)
    with torch.device("meta"):
        layer = modeling.LlamaDecoderLayer(cfg, 0).to(torch.bfloat16)
    layer = layer.to_empty(device="cpu").eval()  # SIM mode reads no values: weights need no init
    x = torch.randn(1, tokens, cfg.hidden_size, dtype=torch.bfloat16)
    positions = torch.arange(tokens)[None]
    cos, sin = llama.LlamaRotaryEmbedding(cfg)(x, positions)  # once per model forward, not the layer's
    mask = None  # sdpa: transformers passes none and is_causal; eager: the additive causal mask
    if attention == "eager":
        mask = torch.full((tokens, tokens), torch.finfo(torch.bfloat16).min, dtype=torch.bfloat16).triu(1)[None, None]
    saved = ALL_ATTENTION_FUNCTIONS["sdpa"]
    ALL_ATTENTION_FUNCTIONS["sdpa"] = sdpa.sdpa_attention_forward
    try:
        return recorded((modeling, sdpa), layer,
                        lambda: layer(x, attention_mask=mask, position_ids=positions, position_embeddings=(cos, sin)))
    finally:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = saved


def recorded(modules, layer, call) -> tuple[list[Launch], dict]:
    """The launches of ``call()``, which runs ``layer`` of the translated ``modules``, and the aten
    ops torch ran outside them ({op: (count, bytes written)})."""
    import torch

    from torch2pypto.translator.verification.hostops import host_work

    recorder = Recorder(modules, layer, {m.__file__ for m in modules})
    for m in modules:
        m.PYPTO_LAUNCHER = recorder.launch
    with torch.no_grad(), host_work(*modules) as work, recorder.wrappers_counted(work):
        call()
    left = {op: (n, work.written[op]) for op, n in work.ops.items()}
    left.update({f"{name} (torch path)": (n, 0) for name, n in recorder.fallbacks.items()})
    return recorder.launches, left


def _init(folder: str) -> None:
    scratch(folder)
    sys.path.insert(0, str(Path(__file__).parent))
    devnull = os.open(os.devnull, os.O_WRONLY)  # PyPTO prints a report per run
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


# ---------------------------------------------------------------------------- expert kernels

EXPERTS = Path("models/experimental/ops-transformer")  # in hicann/pypto up to 2c605ad (then moved to python/tests/st)
# (file, kernel, text edits that let pypto 0.2.0 build it). fused_swiglu runs without its bias
# epilogue: 0.2.0's cost model asserts with it at K=4096, and llama's MLP has no bias.
EXPERT_KERNELS = {
    "flash_attention_mha": ("flash_attention_mha/flash_attention_mha_impl.py", "flash_attention_varlen_forward_kernel",
                            ((", precision_type=pypto.DivAlgorithm.INTRINSIC", ""),)),  # no DivAlgorithm in 0.2.0
    "fused_swiglu": ("fused_swiglu/fused_swiglu_impl.py", "fused_swiglu_fwd_kernel",
                     ((", extend_params={'bias_tensor': b_g_fp32}", ""), (", extend_params={'bias_tensor': b_fc_fp32}", ""),
                      ("    b_g_fp32 = pypto.cast(b_g, pypto.DT_FP32)\n", ""),
                      ("    b_fc_fp32 = pypto.cast(b_fc, pypto.DT_FP32)\n", ""))),
}
ATTENTION_SHAPES = ((1, 8, 512, 128), (1, 32, 2048, 128))  # B H S D, as issue 19 measured them
SWIGLU_SHAPE = (4096, 512, 1024)  # tokens x hidden x intermediate
SDPA = """import torch
import torch.nn.functional as F


def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    return F.scaled_dot_product_attention(q, k, v)
"""
SWIGLU = """import torch
from torch import nn
from transformers.activations import ACT2FN


class SwiGLU(nn.Module):
    \"\"\"llama's MLP without its down projection: what fused_swiglu computes.\"\"\"

    def __init__(self, hidden, intermediate, hidden_act="silu"):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.act_fn = ACT2FN[{act}]

    def forward(self, x):
        return self.act_fn(self.gate_proj(x)) * self.up_proj(x)
"""


def expert_kernel(root: Path, name: str):
    """hicann/pypto's kernel ``name`` from the checkout ``root``, edited for pypto 0.2.0."""
    from models import import_written

    path, kernel, edits = EXPERT_KERNELS[name]
    text = (root / EXPERTS / path).read_text(encoding="utf-8")
    for old, new in edits:
        if old not in text:
            raise ValueError(f"{path}: {old.strip()!r} not found: another revision of hicann/pypto")
        text = text.replace(old, new)
    folder = Path(os.environ["TILE_FWK_OUTPUT_DIR"]).parent
    return getattr(import_written(f"expert_{name}", text, folder / "experts" / Path(path).name), kernel)


def expert_job(root: Path, job: str, shape: tuple) -> list[tuple[str, list[Launch], dict]]:
    """(who, launches, torch ops left) of the expert kernel and of the translated torch code at ``shape``."""
    import torch

    from fusion import translated as translated_snippet

    folder = Path(os.environ["TILE_FWK_OUTPUT_DIR"]).parent
    runs = []
    if job == "attention":
        b, h, s, d = shape
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16) for _ in range(3))
        module = translated_snippet(folder, "sdpa", SDPA, True)  # one call: --no-fuse gives the same kernel
        runs.append(("translated F.sdpa", *recorded((module,), torch.nn.Module(), lambda: module.f(q, k, v))))
        rows = [t.transpose(1, 2).reshape(b * s, h, d).contiguous() for t in (q, k, v)]
        out = torch.empty(b * s, h * d, dtype=torch.bfloat16)
        lse = [torch.empty(b * s, h, dtype=torch.float32) for _ in range(2)]
        cu = torch.arange(0, b * s + 1, s, dtype=torch.int32)
        tensors = (*rows, out, *lse, cu, cu)
        flops = 4 * b * h * s * s * d
    else:
        m, hidden, inter = shape
        x = torch.randn(m, hidden, dtype=torch.bfloat16)
        # llama's own form (the activation named by the config), per op, and with the name written out
        for act, fuse in (("hidden_act", True), ("hidden_act", False), ('"silu"', True)):
            module = translated_snippet(folder, f"swiglu_{act.strip(chr(34))}", SWIGLU.replace("{act}", act), fuse)
            block = module.SwiGLU(hidden, inter).to(torch.bfloat16)
            runs.append((f"translated MLP w/o down, ACT2FN[{act}]{'' if fuse else ' --no-fuse'}",
                         *recorded((module,), block, lambda: block(x))))
        weights = [torch.randn(hidden, inter, dtype=torch.bfloat16) for _ in range(2)]
        bias = [torch.zeros(1, inter, dtype=torch.bfloat16) for _ in range(2)]
        tensors = (x, *weights, *bias, torch.empty(m, inter, dtype=torch.bfloat16))
        flops = 2 * 2 * m * hidden * inter
    name = "flash_attention_mha" if job == "attention" else "fused_swiglu"
    us, tasks = sim_time(expert_kernel(root, name), *tensors)
    moved = sum(t.numel() * t.element_size() for t in tensors)
    runs.append((f"hicann/pypto {name}", [Launch(job, job, name, us, tasks, moved, flops)], {}))
    return runs


def expert_report(root: Path, folder: str, peak: float) -> None:
    jobs = [("attention", shape) for shape in ATTENTION_SHAPES] + [("swiglu", SWIGLU_SHAPE)]
    for job, shape in jobs:
        worker = Worker(expert_job, _init, folder)
        runs = worker.run(root, job, shape)
        worker.close()
        label = "B{} H{} S{} D{}".format(*shape) if job == "attention" else "{}x{}x{}".format(*shape)
        print(f"\n== {job} {label}, bf16{' (non-causal)' * (job == 'attention')}: translated torch against "
              "hicann/pypto's kernel (floor: max(HBM, cube); HBM: bytes over 1.42 TB/s alone)")
        if isinstance(runs, Exception):
            print(f"failed: {type(runs).__name__}: {runs}")
            continue
        expert = sum(r.us for r in runs[-1][1])
        for who, launches, left in runs:
            us, floor = sum(r.us for r in launches), sum(r.floor(peak) for r in launches)
            hbm = sum(r.bytes for r in launches) / HBM_BYTES_PER_US
            torch_ops = ", ".join(f"{op} x{n}" for op, (n, _) in left.items()) or "none"
            kernels = ", ".join(f"{r.kernel} {r.us:.1f}" for r in launches)
            print(f"{who:45} {len(launches):2} launch(es) {us:8.1f} us, vs expert {us / expert:5.2f}x; floor {floor:7.1f} us "
                  f"({us / floor:5.2f}x), HBM {hbm:6.1f} us; {kernels}; torch: {torch_ops}")


# ---------------------------------------------------------------------------- printing


def layer_floor(config: dict, tokens: int, flops: int, peak: float) -> tuple[float, str]:
    """The layer's roofline floor: its weights, input and output over HBM once, its FLOPs at the peak."""
    h, i = config["hidden_size"], config["intermediate_size"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    weights = (h * (q + 2 * kv) + q * h + 3 * h * i + 2 * h) * 2
    moved = weights + 2 * tokens * h * 2 + 2 * tokens * config["head_dim"] * 2  # + x, out; cos, sin
    floor = max(moved / HBM_BYTES_PER_US, flops / peak)
    return floor, (f"max({moved / 2**20:.0f} MiB / 1.42 TB/s = {moved / HBM_BYTES_PER_US:.1f} us, "
                   f"{flops / 1e9:.1f} GFLOP / peak = {flops / peak:.1f} us)")


def report(tokens: int, attention: str, config: dict, fused: tuple, per_op: tuple, peak: float) -> None:
    (launches, left), (per_launches, per_left) = fused, per_op
    print(f"\n== {tokens} tokens, bf16, {attention} attention: {len(launches)} fused launches, "
          f"{len(per_launches)} per-op launches")
    print(f"{'stage':24} {'kernel':44} {'us':>9} {'tasks':>6} {'MiB':>8} {'GFLOP':>7} {'floor us':>9} {'t/floor':>8}")
    for title, runs in (("fused", launches), ("per-op (--no-fuse)", per_launches)):
        print(f"-- {title}")
        for run in runs:
            flops = "?" if run.flops is None else f"{run.flops / 1e9:.2f}"
            floor = run.floor(peak)
            print(f"{run.stage:24} {run.kernel[:44]:44} {run.us:9.1f} {run.tasks:6} {run.bytes / 2**20:8.2f} {flops:>7} "
                  f"{floor:9.1f} {run.us / floor:7.2f}x")
    print(f"\n{'block':24} {'fused':>17} {'per-op':>17} {'per-op/fused':>13} {'fused floor':>12} {'t/floor':>8}")
    blocks = list(dict.fromkeys([r.block for r in launches] + [r.block for r in per_launches]))
    for block in blocks:
        f = [r for r in launches if r.block == block]
        p = [r for r in per_launches if r.block == block]
        fus, pus, floor = sum(r.us for r in f), sum(r.us for r in p), sum(r.floor(peak) for r in f)
        ratio = f"{pus / fus:12.2f}x" if f and p else f"{'-':>13}"
        versus = f"{fus / floor:7.2f}x" if f else f"{'-':>8}"
        print(f"{block:24} {len(f):3} {fus:9.1f} us {len(p):3} {pus:9.1f} us {ratio} {floor:9.1f} us {versus}")
    total, per_total = sum(r.us for r in launches), sum(r.us for r in per_launches)
    flops = sum(r.flops or 0 for r in per_launches)
    floor, how = layer_floor(config, tokens, flops, peak)
    kernels_floor = sum(r.floor(peak) for r in launches)
    print(f"\nlayer: fused {total:.1f} us in {len(launches)} launches; per-op {per_total:.1f} us in "
          f"{len(per_launches)} launches: {per_total / total:.2f}x")
    print(f"layer roofline floor {floor:.1f} us = {how}: fused {total / floor:.2f}x, per-op {per_total / floor:.2f}x "
          f"(goal 1.5x); the fused launches' own floors sum to {kernels_floor:.1f} us")
    for name, ops in (("fused", left), ("per-op", per_left)):
        written = sum(b for _, b in ops.values())
        listed = ", ".join(f"{op} x{n}" + (f" ({b / 2**20:.1f} MiB)" if b else "")
                           for op, (n, b) in sorted(ops.items(), key=lambda kv: -kv[1][1]))
        print(f"torch outside the {name} launches: {written / 2**20:.1f} MiB written "
              f"(>= {written / HBM_BYTES_PER_US:.1f} us at 1.42 TB/s, in no figure above): {listed or 'none'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", nargs="*", type=int, default=[64, 2048])
    parser.add_argument("--attention", choices=("sdpa", "eager"), default="sdpa",
                        help="transformers' attention implementation (sdpa: its default)")
    parser.add_argument("--quick", action="store_true", help="llama-7B's width / 4 at 64 tokens: a smoke run of minutes")
    parser.add_argument("--experts", type=Path, help="a checkout of hicann/pypto: also time its expert kernels")
    args = parser.parse_args(argv)
    config, tokens = (QUICK, [64]) if args.quick else (LLAMA_7B, args.tokens)
    with tempfile.TemporaryDirectory(prefix="torch2pypto-layer-") as folder:
        scratch(folder)
        peak, how = cube_peak()
        print(f"llama decoder layer {config}, batch 1; PyPTO cost model (A2A3, SIM), launch gaps excluded")
        print(f"cube peak: {how}; HBM 1.42 TB/s")
        for n in tokens:
            runs = {}
            for fuse in (True, False):  # a fresh process each: a PyPTO failure may poison one
                worker = Worker(measure, _init, folder)
                runs[fuse] = worker.run(fuse, args.attention, n, config)
                worker.close()
                if isinstance(runs[fuse], Exception):
                    raise runs[fuse]
            report(n, args.attention, config, runs[True], runs[False], peak)
        if args.experts:
            expert_report(args.experts.resolve(), folder, peak)
    return 0


if __name__ == "__main__":
    sys.exit(main())
