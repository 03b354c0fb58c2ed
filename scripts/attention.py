"""Benchmark: the attention kernel against today's eager path in PyPTO's cost model (SIM, A2/A3).

    python scripts/attention.py [--shape B H S D] [--causal]

Translates ``F.scaled_dot_product_attention(q, k, v, scale=...)`` (one flash-attention kernel)
and the eager pattern ``softmax(q @ k.mT * scale, dim=-1, dtype=float32).to(q.dtype) @ v`` (as
llama's eager_attention_forward writes it; --causal: is_causal=True against the eager path
adding a causal float mask), runs each with a launcher that times every kernel it
launches in SIM mode, and prints each kernel's time, the sums, and the HBM floors (bytes moved
over 1.42 TB/s, which the model does not charge). Launch gaps are excluded. Figures only (SIM
mode computes no values); bf16; a run takes minutes. Not a test.

Last run (pypto 0.2.0; the eager path is 4 launches: matmul, softmax, cast, matmul):
  B1 H8 S512 D128            eager 130.1 us, fused 59.0 us: 2.21x (causal: 65.7 us, 1.98x)
  B1 H32 S2048 D128          eager 3841.8 us, fused 1125.8 us: 3.41x (causal: 867.9 us, 4.43x);
                             with the kv loop unrolled, fused 794.4 (4.84x), causal 675.2
  B1 H32 S64 D128 causal     eager 70.9 us (6 launches: the scale and the mask add now kernels of
                             their own), fused 28.4 us: 2.50x
HBM floors: eager 26.6 / 1559.6 us (the scores cross HBM four times), fused 3.0 / 47.3 us.
The fused figures are today's (S2048: the kernel with its tasks merged, rules/attention.py); the
eager S512 and S2048 figures are the earlier run's: today the eager S2048 path's scale, a mul
kernel over [1, 65536, 2048], stops PyPTO's cost model (Errcode FFFFFF in ParseInput).
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from pathlib import Path

from costmodel import HBM_BYTES_PER_US, scratch, sim_time

FUSED = "torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)"
EAGER = "torch.matmul(torch.nn.functional.softmax(torch.matmul(q, k.mT) * scale, dim=-1, dtype=torch.float32).to(q.dtype), v)"
SNIPPET = "import torch\n\n\ndef f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale, mask: torch.Tensor):\n    return {}\n"


def timed(call: str, folder: Path, q, k, v, mask) -> list[tuple[str, float, int]]:
    """(kernel, µs, tasks) of each kernel the translated call launches."""
    from torch2pypto import translate_source

    path = folder / f"bench_{len(list(folder.glob('bench_*.py')))}.py"
    path.write_text(translate_source(SNIPPET.format(call)).code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    runs = []
    module.PYPTO_LAUNCHER = lambda kernel, *tensors: runs.append((kernel._original_func.__qualname__.split(".")[0], *sim_time(kernel, *tensors)))
    module.f(q, k, v, q.shape[-1] ** -0.5, mask)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", nargs=4, type=int, default=[1, 8, 512, 128], metavar=("B", "H", "S", "D"))
    parser.add_argument("--causal", action="store_true")
    arguments = parser.parse_args()
    b, h, s, d = arguments.shape
    with tempfile.TemporaryDirectory() as folder:
        scratch(folder)
        import torch

        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16) for _ in range(3))
        mask = torch.full((s, s), float("-inf"), dtype=torch.bfloat16).triu(1)
        qkv, scores = 3 * q.numel() * 2 + q.numel() * 2, b * h * s * s
        floors = {"fused": qkv, "eager": qkv + scores * (2 + 4 + 4 + 2 + 2 + 2)}  # bf16 scores, fp32 scaled / softmax, bf16 weights
        print(f"B{b} H{h} S{s} D{d} bf16{' causal' if arguments.causal else ''}, cost model (A2A3, SIM); launch gaps excluded")
        totals = {}
        calls = {"eager": EAGER.replace("* scale", "* scale + mask") if arguments.causal else EAGER,
                 "fused": FUSED.replace("scale=scale", "scale=scale, is_causal=True") if arguments.causal else FUSED}
        for name, call in calls.items():
            runs = timed(call, Path(folder), q, k, v, mask)
            for kernel, us, tasks in runs:
                print(f"  {name:5} {kernel:40} {us:9.1f} us  {tasks:6} tasks")
            totals[name] = sum(us for _, us, _ in runs)
            print(f"  {name:5} {len(runs)} launch(es): {totals[name]:.1f} us; HBM floor {floors[name] / HBM_BYTES_PER_US:.1f} us")
        print(f"speed-up {totals['eager'] / totals['fused']:.2f}x")


if __name__ == "__main__":
    main()
