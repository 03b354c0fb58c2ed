"""Sweep and benchmark: the vector kernels' tiles on PyPTO's cost model.

    python scripts/tiles.py sweep [--kernels ...] [--dtypes ...] [-j 2]   # regenerate scripts/tiles.csv
    python scripts/tiles.py bench [--kernels ...] [--dtypes ...]          # generated tile vs the sweep's best
    python scripts/tiles.py fit [--dtypes ...]                            # every table entry's kernel compiles

One generated kernel per template (elementwise unary and binary, cast, row reduction, row
composite, scan) and the fused kernels of scripts/fusion.py's cases (``fused_*``: RMSNorm,
SiLU-gate, softmax with its casts) runs through its own host wrapper in SIM mode (costmodel.py)
at the shapes of issue 10 and each float dtype. ``sweep`` forces every tile [tile rows, tile cols] of a grid (powers
of two, pruned by the unified buffer, :func:`grid`) on the prelude's ``_tile_shape`` and appends
each run to scripts/tiles.csv (rows already there are not run again: the file is the cache).
``bench`` runs the generated tiles and prints, per kernel, shape and dtype, the generated time,
the best swept time and tile, their ratio (goal: within 1.2x) and the HBM floor (bytes in + out
over 1.42 TB/s, which the cost model does not charge). ``fit`` runs the first example of every
table entry (but the cube's) at FIT_SHAPE in SIM mode, where the generated tiles are the largest
the tile rule gives, and lists the kernels PyPTO cannot build (a tile over the unified buffer).
Figures only; not a test.

Last run (pypto 0.2.0, A2A3): the sweep is 760 runs (about 75 min at -j 2 on a shared 2-core
machine); every generated kernel is within 1.2x of the sweep's best at the five shapes and three
float dtypes (``bench --label after --cached``), against up to 12.8x before (bf16 mul 64x4096
39.6 µs, now 3.1; exp, cast and mul at 4096x4096 190-266 µs, now 19-85; fp32 cumsum at 4096
cols did not build). The cost model charges no HBM bandwidth: at 4096x4096 several kernels
come out at 0.3-0.6x of their HBM floor. The fused kernels (230 more runs, pg_skip_partition
only): all 45 cells within 1.2x (``bench --kernels fused_rmsnorm fused_softmax fused_silu_gate
--label after``); the worst fused_softmax fp32 4096x4096, 80.1 µs at 64-row tasks against 67.5
at 32 (1.19x), then fused_rmsnorm fp16/bf16 4096x4096, 44.3 against 39.2 (1.13x). fused_silu_gate
beats its sweep in 9 cells (0.46-0.83x): the grid misses the tiles it generates (32x512, and a
launch padded to 64 rows as whole-tile kernels are); at 4096x4096 it is 65.2 (fp32), 108.4
(fp16) and 141.4 µs (bf16, whose FP32 copy caps its tile at 8 rows).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

from costmodel import HBM_BYTES_PER_US, Worker, scratch, sim_time
from fusion import CASES, ROOT, translated

from torch2pypto.rules.templates import SCAN_BLOCK

GOAL = 1.2
FIT_SHAPE = (2048, 4096)  # rows enough for _spread_rows' 64: the largest tiles
DATA = Path(__file__).with_name("tiles.csv")
BENCH = "tiles_{}.csv"  # the generated kernels' runs under a label (before, after), next to this script
BENCH_FIELDS = ("label", "kernel", "dtype", "rows", "cols", "us", "tasks", "tile")
FIELDS = ("kernel", "dtype", "rows", "cols", "tile_rows", "tile_cols", "skip", "us", "tasks")
SHAPES = ((7, 64), (33, 200), (1, 4096), (64, 4096), (4096, 4096))
DTYPES = ("float32", "float16", "bfloat16")
SIZES = {"float32": 4, "float16": 2, "bfloat16": 2}
UB_BYTES = 192 * 1024
SNIPPET = """\
import torch


def f(x: torch.Tensor, y: torch.Tensor):
    return (torch.exp(x), torch.mul(x, y), x.float(), torch.mean(x, dim=-1, keepdim=True),
            torch.softmax(x, dim=-1), torch.cumsum(x, dim=-1))
"""
# kernel -> (call of its wrapper on x, y and torch; whether the kernel fixes its tile cols)
KERNELS = {
    "exp": (lambda m, x, y, torch: m.pypto_exp(x), False),
    "mul": (lambda m, x, y, torch: m.pypto_mul(x, y), False),
    "cast": (lambda m, x, y, torch: m.pypto_cast(x, torch.bfloat16 if x.dtype == torch.float32 else torch.float32), False),
    "mean": (lambda m, x, y, torch: m.pypto_mean(x, -1, True), True),
    "softmax": (lambda m, x, y, torch: m.pypto_softmax(x, -1), True),
    "cumsum": (lambda m, x, y, torch: m.pypto_cumsum(x, -1), True),  # tile cols: the scan block
    "fused_rmsnorm": (lambda m, x, y, torch: m.Qwen3_5RMSNorm(x.shape[-1]).to(x.dtype)(x), True),
    "fused_silu_gate": (lambda m, x, y, torch: m.f(x, y), False),
    "fused_softmax": (lambda m, x, y, torch: m.f(x), True),
}
_modules = {}  # kernel -> the translated module it runs in (None: SNIPPET's)
# fused kernels that reduce along the row: a task takes the launch's spread of rows (_spread_rows) in
# tiles as many as the unified buffer holds, so their swept and reported rows are a task's
TASK_ROWS = frozenset({"fused_rmsnorm", "fused_softmax"})


def _init(folder: str) -> None:
    scratch(folder)
    devnull = os.open(os.devnull, os.O_WRONLY)  # PyPTO prints a report per run
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    from torch2pypto import translate_source

    path = Path(folder) / "vector_kernels.py"
    path.write_text(translate_source(SNIPPET).code)
    spec = importlib.util.spec_from_file_location("vector_kernels", path)
    _modules[None] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(_modules[None])
    for kernel in (k for k in KERNELS if k.startswith("fused_")):
        code = CASES[kernel.removeprefix("fused_")][0]
        _modules[kernel] = translated(Path(folder), kernel, (ROOT / code).read_text() if code.endswith(".py") else code, True)


def simulate(kernel: str, dtype: str, shape: tuple[int, int], tile: tuple[int, int, int] | None):
    """Cost-model µs and tasks of one kernel's wrapper call, and the tile it ran with: ``tile``
    (rows, cols, skip) forced on ``_tile_shape`` (tile cols = whole rows if the kernel needs them;
    rows: on ``_spread_rows``, a task's, for :data:`TASK_ROWS`) and the pass option
    pg_skip_partition, or the generated ones."""
    import torch

    module, chosen = _modules.get(kernel, _modules[None]), []
    generated, spread = module._tile_shape, module._spread_rows
    task_rows = []

    def tile_shape(*args, **kwargs):
        shape_ = generated(*args, **kwargs)
        if tile is not None and kernel not in TASK_ROWS:
            shape_ = tile[0], shape_[1] if kwargs.get("whole_rows") else tile[1]
        chosen.append(shape_ if kernel not in TASK_ROWS else (task_rows[-1], shape_[1]))
        return shape_

    def spread_rows(*args):
        task_rows.append(tile[0] if tile is not None and kernel in TASK_ROWS else spread(*args))
        return task_rows[-1]

    def launch(k, *tensors):
        if tile is not None:  # set either way: PyPTO keeps pass options across kernels
            k._pass_options = {"pg_skip_partition": bool(tile[2])}
        times.append(sim_time(k, *tensors))

    times = []
    factories = [f for f in vars(module).values() if hasattr(f, "cache_clear")]
    module._tile_shape, module._spread_rows, module.PYPTO_LAUNCHER = tile_shape, spread_rows, launch
    try:
        for f in factories:
            f.cache_clear()
        x = torch.zeros(shape, dtype=getattr(torch, dtype))
        KERNELS[kernel][0](module, x, x.clone(), torch)
    finally:
        module._tile_shape, module._spread_rows, module.PYPTO_LAUNCHER = generated, spread, None
    (us, tasks), = times
    return us, tasks, chosen[-1]


def grid(kernel: str, dtype: str, shape: tuple[int, int]) -> list[tuple[int, int, int]]:
    """The swept tiles (rows, cols, skip): rows a power of two up to 64 and the rows' next power of
    two, at most 1024 row tiles; one copy of a tile in ``dtype`` fits the unified buffer.

    PyPTO's default partition (skip 0) makes each tile a task: cols are the whole row (the scan's
    block) or, for kernels free to choose, a power of two of at least half of it. With the pass
    option pg_skip_partition (skip 1) each row tile is one task however many column tiles it
    holds: then cols are, per rows, the most that fit and half that (kernels free to choose), and
    whole-row kernels are swept at the two large shapes only (one tile per task already). Fused
    kernels are built with pg_skip_partition: only that is swept; a row-reducing one's rows are a
    task's (:data:`TASK_ROWS`), any number the launch's rows allow."""
    n, cols = shape
    fixed = KERNELS[kernel][1]
    cols = min(cols, SCAN_BLOCK) if kernel == "cumsum" else cols
    tile_rows = [1 << k for k in range(7) if 1 << k < 2 * n and -(-n // (1 << k)) <= 1024]
    halves = [cols] if fixed else sorted({cols, *(1 << k for k in range(4, 14) if cols // 2 <= 1 << k < cols)})
    tiles = [(r, c, 0) for r, c in itertools.product(tile_rows, halves)]
    for r in tile_rows if not fixed or n * cols >= 64 * 4096 else ():
        most = cols if fixed or r * cols * SIZES[dtype] <= UB_BYTES else 1 << (UB_BYTES // (r * SIZES[dtype])).bit_length() - 1
        tiles += [(r, most, 1)] + ([(r, most // 2, 1)] if most < cols and most >= max(32, cols // 8) else [])
    if kernel.startswith("fused_"):  # built with pg_skip_partition, at every shape
        tiles = [(r, c, 1) for r, c, _ in tiles] if fixed else [t for t in tiles if t[2]]
    return sorted({(r, c, s) for r, c, s in tiles if (kernel in TASK_ROWS or r * c * SIZES[dtype] <= UB_BYTES) and c >= 16})


def floor_us(kernel: str, dtype: str, shape: tuple[int, int]) -> float:
    """The HBM floor: bytes in + bytes out over 1.42 TB/s."""
    n, cols = shape
    size = SIZES[dtype]
    out = {"mean": n * size, "cast": n * cols * (2 if dtype == "float32" else 4)}.get(kernel, n * cols * size)
    extra = {"mul": n * cols * size, "fused_silu_gate": n * cols * size, "fused_rmsnorm": cols * size}.get(kernel, 0)
    return (n * cols * size + extra + out) / HBM_BYTES_PER_US


def load() -> dict:
    """The sweep so far: (kernel, dtype, rows, cols, tile_rows, tile_cols, skip) -> (µs, tasks); a
    tile that failed has µs ''."""
    if not DATA.exists():
        return {}
    with DATA.open() as f:
        return {tuple(r[k] if k in ("kernel", "dtype") else int(r[k]) for k in FIELDS[:7]): (r["us"], r["tasks"]) for r in csv.DictReader(f)}


def best(data: dict, kernel: str, dtype: str, shape) -> tuple[float, tuple[int, int, int]] | None:
    runs = [(float(us), (r, c, s)) for (k, d, n, w, r, c, s), (us, _) in data.items() if (k, d, (n, w)) == (kernel, dtype, shape) and us]
    return min(runs) if runs else None


def sweep(args, worker_folder: str) -> None:
    data = load()
    todo = [(k, d, s, t) for k, d, s in itertools.product(args.kernels, args.dtypes, args.shapes)
            for t in grid(k, d, s) if (k, d, *s, *t) not in data]
    print(f"{len(todo)} runs to do ({len(data)} in {DATA.name})", flush=True)
    new = not DATA.exists()
    workers = [Worker(simulate, _init, worker_folder) for _ in range(args.jobs)]
    start = time.perf_counter()
    with DATA.open("a", newline="") as f:
        out = csv.writer(f)
        if new:
            out.writerow(FIELDS)
        for i in range(0, len(todo), len(workers)):
            batch = list(zip(workers, todo[i:i + len(workers)]))
            futures = [(w, job, w.submit(*job)) for w, job in batch]
            for w, (k, d, s, t), future in futures:
                result = w.result(future)
                us, tasks = ("", "") if isinstance(result, BaseException) else (f"{result[0]:.2f}", result[1])
                out.writerow((k, d, *s, *t, us, tasks))
                f.flush()
                print(f"[{i + 1}/{len(todo)} {time.perf_counter() - start:.0f} s] {k} {d} {s} tile {t}: {us or 'failed'} µs", flush=True)
    for w in workers:
        w.close()


def fit_case(op: str, dtype: str, folder: str) -> int:
    """Kernel launches of entry ``op``'s first example at FIT_SHAPE in SIM mode (raises if one fails)."""
    import torch

    sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
    from table_cases import TABLE, load, snippet

    from torch2pypto import translate_source
    from torch2pypto.mapping import samples

    entry = TABLE.entries[op]
    path = Path(folder) / f"fit_{op}.py"
    path.write_text(translate_source(snippet(entry.examples.convert[0]), table=TABLE).code)
    module, launches = load(path), []
    module.PYPTO_LAUNCHER = lambda k, *tensors: launches.append(sim_time(k, *tensors))
    module.f(**samples.values(entry, FIT_SHAPE, getattr(torch, dtype)))
    return len(launches)


def fit(args, worker_folder: str) -> int:
    from torch2pypto.mapping import load_table

    entries = [op for op, e in load_table().entries.items() if e.family not in (None, "cube") and e.examples.convert]
    worker, failed = Worker(fit_case, _init, worker_folder), []
    for op, dtype in itertools.product(entries, args.dtypes):
        result = worker.run(op, dtype, worker_folder)
        if isinstance(result, BaseException) or not result:
            failed.append((op, dtype, "no kernel launched" if result == 0 else str(result).splitlines()[0][:160] if str(result) else type(result).__name__))
            print(f"{op} {dtype}: failed: {failed[-1][2]}", flush=True)
    worker.close()
    print(f"{len(entries) * len(args.dtypes) - len(failed)} of {len(entries) * len(args.dtypes)} entry kernels built at {FIT_SHAPE}")
    return 1 if failed else 0


def bench(args, worker_folder: str) -> int:
    """Run the generated kernels not yet in their label's file (none with --cached) and print the ratio table."""
    runs, path = {}, DATA.with_name(BENCH.format(args.label))
    if path.exists():
        with path.open() as f:
            runs = {(r["label"], r["kernel"], r["dtype"], int(r["rows"]), int(r["cols"])): r for r in csv.DictReader(f)}
    if not args.cached:
        worker = Worker(simulate, _init, worker_folder)
        for k, d, s in itertools.product(args.kernels, args.dtypes, args.shapes):
            if (args.label, k, d, *s) in runs:
                continue  # kept from an earlier run (delete its row to run it again)
            result = worker.run(k, d, s, None)
            failed = isinstance(result, BaseException)
            runs[args.label, k, d, *s] = dict(label=args.label, kernel=k, dtype=d, rows=s[0], cols=s[1],
                                              us="" if failed else f"{result[0]:.2f}", tasks="" if failed else result[1],
                                              tile="" if failed else "x".join(map(str, result[2])))
            print(f"{k} {d} {s}: {runs[args.label, k, d, *s]['us'] or 'failed'}", flush=True)
            with path.open("w", newline="") as f:  # after each run: the file is the cache
                out = csv.DictWriter(f, BENCH_FIELDS)
                out.writeheader()
                out.writerows(sorted(runs.values(), key=lambda r: (r["label"], r["kernel"], r["dtype"], int(r["rows"]), int(r["cols"]))))
        worker.close()
    data, worse = load(), 0
    print(f"\n{args.label}: generated tiles against the sweep's best (tile rows x cols, +s: pg_skip_partition)")
    print(f"{'kernel':8} {'dtype':9} {'shape':>10} {'generated µs':>13} {'tile':>8} {'best µs':>9} {'best tile':>10} "
          f"{'ratio':>6} {'HBM floor µs':>13} {'gen/floor':>9}")
    for k, d, s in itertools.product(args.kernels, args.dtypes, args.shapes):
        run, top, floor = runs.get((args.label, k, d, *s)), best(data, k, d, s), floor_us(k, d, s)
        shape = "x".join(map(str, s))
        if not run or not run["us"] or not top:
            print(f"{k:8} {d:9} {shape:>10} {'not run' if not run else 'failed' if not run['us'] else 'no sweep'}")
            worse += 1
            continue
        us = float(run["us"])
        ratio = us / top[0]
        worse += ratio > GOAL
        best_tile = f"{top[1][0]}x{top[1][1]}" + ("+s" if top[1][2] else "")
        print(f"{k:8} {d:9} {shape:>10} {us:13.2f} {run['tile']:>8} {top[0]:9.2f} {best_tile:>10} {ratio:6.2f} "
              f"{floor:13.2f} {us / floor:9.2f}" + ("" if ratio <= GOAL else f"  (goal {GOAL}x)"))
    print(f"{worse} kernel(s) beyond {GOAL}x of the sweep's best")
    return 1 if worse else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("sweep", "bench", "fit"))
    parser.add_argument("--kernels", nargs="*", choices=list(KERNELS), default=list(KERNELS))
    parser.add_argument("--dtypes", nargs="*", choices=DTYPES, default=list(DTYPES))
    parser.add_argument("--shapes", nargs="*", choices=[f"{n}x{c}" for n, c in SHAPES], default=[f"{n}x{c}" for n, c in SHAPES])
    parser.add_argument("--label", default="generated", help="bench: the name its runs are kept under (before, after)")
    parser.add_argument("--cached", action="store_true", help="bench: print the kept runs, run nothing")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="worker processes for the sweep (default 1)")
    args = parser.parse_args(argv)
    args.shapes = [tuple(map(int, s.split("x"))) for s in args.shapes]
    with tempfile.TemporaryDirectory(prefix="torch2pypto-tiles-") as folder:
        if args.mode == "sweep":
            sweep(args, folder)
            return 0
        return (bench if args.mode == "bench" else fit)(args, folder)


if __name__ == "__main__":
    sys.exit(main())
