"""Benchmark: PyPTO cost-model time of the generated cube kernels against a sweep of cube tiles.

    python scripts/kernels.py [--quick] [--shapes NAME ...]

For transformer shapes ([2048, 4096] x [4096, 4096] and [1, 4096] x [4096, 11008], bf16), it
translates ``torch.matmul(a, b)`` and ``F.linear(a, w)``, runs each generated kernel in PyPTO's
SIM mode (cost model of an A2/A3 chip, reference/cost-model.md) with its own tiles, then with
every tile of a bounded sweep (rows per tile x k [L0, L1] x n [L0, L1] within the L0/L1 buffers),
and prints the generated time, the best swept time and tile, and their ratio (goal: within
1.2x). One worker process runs the cost model (a PyPTO failure poisons its process: the worker
is restarted). Figures only; a run takes minutes. Not a test.

Last run (the full sweep, 10 tiles at 2048x4096x4096 and 8 at 1x4096x11008, pypto 0.2.0, after
the vector tiles' change set the cube kernels' pass option and epilogue tile): matmul
2048x4096x4096 422.6 µs, best 422.6 (ratio 1.00); 1x4096x11008 72.4, best 72.4 (1.00); linear
419.0, best 419.0 (1.00); 72.4, best 72.4 (1.00); 11 min. The generated tiles are the sweep's
best: 128 rows (16 at M = 1), k [128, 512], n [256, 256]. Before that change (--quick): 427.5,
72.4, 429.6 and 72.4 µs. The first guess (128 rows, k [64, 256], n [128, 256]) took 805.4 and
226.2 µs.

Since then ``_cube_tiles`` gives the operand with fewer rows in L1 its own, longer L1 k tile
(k [L0, a's L1, b's L1]; this sweep's k tiles set L0 and b's L1). The kernels are bound by the
GM-to-L1 copies (each core's MTE_IN pipe runs them one after another, ~1400 cycles + bytes / 96
each in the cost model; the cube pipe is busy a third of the time): PyPTO 0.2.0 copies L1 tiles
of the L0 tile's m and n whatever the L1 m and n, so only k grows a copy. linear 2048x4096x11008
by tiles forced on set_cube_tile_shapes (rows, m, k, n): 128, [128, 128], [128, 1024, 512],
[256, 256] 932.2 µs (generated); [128, 512] 1006.8 (before); k [64, 256] 1290.2; 256 rows, n
[128, 128] or [128, 256], k [64, 256] 1328.4; 256 rows, m [128, 256], k [64, 256], n [256, 256]
1288.4; cube_l1_reuse_setting 4 1011.4. 2048x4096x4096 387.4 (before 419.0), 2048x11008x4096
900.5 (996.1), 64x4096x11008 (64 rows, k [128, 2048, 512]) 75.0 (82.0).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import sys
import tempfile
import time
from pathlib import Path

from costmodel import Worker, scratch, sim_time

GOAL = 1.2
SHAPES = {"prefill": (2048, 4096, 4096), "decode": (1, 4096, 11008)}  # M, K, N
KERNELS = {  # snippet call, kernel factory, right operand's shape from (k, n)
    "matmul": ("torch.matmul(a, b)", "matmul_kernel", lambda k, n: (k, n)),
    "linear": ("torch.nn.functional.linear(a, b)", "linear_kernel", lambda k, n: (n, k)),
}
# the sweep: every combination that fits the buffers (a cost-model run takes 40-65 s here)
ROWS = {"prefill": (64, 128, 256), "decode": (16, 128)}
K_TILES = ((64, 256), (128, 512))
N_TILES = ((128, 256), (256, 256))
QUICK = {"rows": {"prefill": (128, 256), "decode": (16,)}, "k": K_TILES, "n": N_TILES}
_module = None


def generated(folder: Path):
    """The translated module holding both kernels (written to ``folder``)."""
    from torch2pypto import translate_source

    calls = ", ".join(call for call, _, _ in KERNELS.values())
    code = f"import torch\n\n\ndef f(a: torch.Tensor, b: torch.Tensor):\n    return {calls}\n"
    path = folder / "cube_kernels.py"
    path.write_text(translate_source(code).code)
    spec = importlib.util.spec_from_file_location("cube_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fits(rows: int, k: tuple[int, int], n: tuple[int, int], size: int = 2) -> bool:
    """Whether a bf16 tile fits L0A/L0B/L0C/L1 as the generated _cube_tiles checks."""
    m = _module
    return (rows * k[0] * size <= m._L0A_BYTES and k[0] * n[0] * size <= m._L0B_BYTES
            and rows * n[0] * 4 <= m._L0C_BYTES and (rows + n[1]) * k[1] * size <= m._L1_BYTES)


def _init(folder: str) -> None:
    global _module
    scratch(folder)  # PyPTO's output, home and log dirs: all into the run's folder
    _module = generated(Path(folder))


def simulate(kernel: str, shape: str, tiles: tuple | None) -> tuple[float, tuple, int]:
    """Cost-model µs of one kernel at one shape, the tiles it ran with, and its task count.
    ``tiles`` (rows, k, n) replace the generated defaults; None keeps them."""
    import pypto
    import torch

    m_, k_, n_ = SHAPES[shape]
    _, factory_name, right = KERNELS[kernel]
    module = _module
    defaults = module._CUBE_K, module._CUBE_N
    factory = getattr(module, factory_name)
    rows = module._cube_rows(m_) if tiles is None else tiles[0]
    if tiles is not None:
        module._CUBE_K, module._CUBE_N = tiles[1:]
    try:
        factory.cache_clear()
        jit = factory(pypto.DT_BF16, pypto.DT_BF16, k_, n_, rows)
        used = rows, *module._cube_tiles(k_, n_, pypto.DT_BF16, rows)
        a = torch.zeros(m_, k_, dtype=torch.bfloat16)
        b = torch.zeros(*right(k_, n_), dtype=torch.bfloat16)
        out = torch.empty(m_, n_, dtype=torch.bfloat16)
        us, tasks = sim_time(jit, a, b, out)
    finally:
        module._CUBE_K, module._CUBE_N = defaults
        factory.cache_clear()
    return us, (used[0], tuple(used[1]), tuple(used[2])), tasks


def sweep(shape: str, quick: bool):
    space = QUICK if quick else {"rows": ROWS, "k": K_TILES, "n": N_TILES}
    return [t for t in itertools.product(space["rows"][shape], space["k"], space["n"]) if fits(*t)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer row tiles: 128 and 256 (prefill), 16 (decode)")
    parser.add_argument("--shapes", nargs="*", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--kernels", nargs="*", choices=list(KERNELS), default=list(KERNELS))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="torch2pypto-kernels-") as folder:
        _init(folder)  # the sweep's candidates use this process's copy of the buffer sizes
        worker = Worker(simulate, _init, folder)
        rows = []
        for kernel, shape in itertools.product(args.kernels, args.shapes):
            start = time.perf_counter()
            generated_run = worker.run(kernel, shape, None)
            results = [(t, worker.run(kernel, shape, t)) for t in sweep(shape, args.quick)]
            ok = [(r[0], r[1], r[2]) for _, r in results if not isinstance(r, BaseException)]
            failed = [(t, r) for t, r in results if isinstance(r, BaseException)]
            best = min(ok) if ok else None
            rows.append((kernel, shape, generated_run, best, len(ok), failed, time.perf_counter() - start))
            print(f"{kernel} {shape}: {len(ok)} tiles ran, {len(failed)} failed, {rows[-1][-1]:.0f} s", flush=True)
            for t, r in failed[:3]:
                print(f"  tile {t} failed: {str(r).splitlines()[0][:200] if str(r) else type(r).__name__}")
        print(f"\n{'kernel':8} {'shape (M x K x N)':22} {'generated µs':>13} {'tile':>26} {'best µs':>10} {'best tile':>26} {'ratio':>6}")
        for kernel, shape, gen, best, _, _, _ in rows:
            size = " x ".join(map(str, SHAPES[shape]))
            if isinstance(gen, BaseException) or best is None:
                print(f"{kernel:8} {size:22} failed: {gen if isinstance(gen, BaseException) else 'no tile ran'}")
                continue
            ratio = gen[0] / best[0]
            print(f"{kernel:8} {size:22} {gen[0]:13.1f} {str(gen[1]):>26} {best[0]:10.1f} {str(best[1]):>26} "
                  f"{ratio:6.2f}" + ("" if ratio <= GOAL else f"  (goal {GOAL}x)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
