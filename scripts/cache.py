"""Benchmark: join kernels in PyPTO's cost model (A2A3, SIM): a DynamicCache update, and their tiles.

    python scripts/cache.py [--steps CACHED:NEW ...]
    python scripts/cache.py --rows [64 256 1024 ...]

Translates the installed transformers' ``cache_utils.py`` fused (the keys' and the values' joins
as one launch, translator/engine/joins.py) and with ``--no-fuse`` (a launch per join), and times
one ``DynamicLayer.update`` of NEW tokens onto a cache of CACHED (batch 1, 32 kv heads of 128,
bf16; the new keys a transposed view, as attention hands them over), every launch in SIM mode
(costmodel.py). Prints each run's launches, µs and bytes moved, the floor of those bytes at
1.42 TB/s, and fused against per join.

``--rows``: one ``torch.cat`` of two tensors at each of ``JOINS`` (odd sizes, spans of 1 to 4096
columns, a cache's transposed key) in FP32 and BF16, with the tile rows the runtime gives
(``_join_rows``) and with each value forced: µs per cell, and the generated against the best.
Figures only, not a test.

Last run (pypto 0.2.0, transformers 5.23.0), µs, fused against per join: 0 cached + 2048 new
51.5 (1 launch) against 49.9 (2 x 24.9); 2047 + 1: 61.0 against 59.8; 4095 + 1: 115.5 against
114.3. The cost model charges no launch gap, so one launch for two joins is the same time here
(0.97x-0.99x): what it saves is the launch. A decode step's join is 1.29x its HBM floor (64 MiB at
1.42 TB/s: 47.3 µs at 2047 cached), 197.0 µs (4.2x) when join kernels took tiles of 64 rows at
most. ``--rows 8 16 64 128 256 1024 2048``: the generated rows (as many as the largest block has,
up to 1024) are within 1.04x of the sweep's best in all 16 cells; 64 rows was up to 7.2x slower (a
[2, 8, 512, 64] cat along the last dim, 22.4 against 3.1 µs), 1.2x at [7, 64] (1.3 against 1.1).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from costmodel import HBM_BYTES_PER_US, Worker, scratch, sim_time
from layer import _init

HEADS, HEAD_DIM = 32, 128
STEPS = ("0:2048", "2047:1", "4095:1")  # a prefill from the empty cache, decode steps
JOINS = (((7, 64), (7, 64), -1), ((33, 200), (33, 200), 0), ((33, 200), (33, 100), -1), ((4096, 4096), (4096, 4096), 0),
         ((4096, 4096), (4096, 4096), -1), ((1, 32, 2047, 128), (1, 32, 1, 128), -2), ((64, 4096), (64, 1), -1),
         ((2, 8, 512, 64), (2, 8, 512, 64), -1))  # (first's shape, second's, dim)
JOIN = "import torch\n\n\ndef join(a: torch.Tensor, b: torch.Tensor, dim: int):\n    return torch.cat([a, b], dim=dim)\n"


def translated(name: str, source: str, path: str, fuse: bool = True):
    """``source`` translated and imported from a file of its own (PyPTO reads a kernel's source there)."""
    from models import import_written
    from torch2pypto import Options, translate_source

    code = translate_source(source, path, Options(fuse=fuse)).code
    return import_written(name, code, Path(tempfile.mkdtemp(prefix="torch2pypto-cache-")) / f"{name.rpartition('.')[2]}.py")


def timed(module) -> list:
    """Launches of ``module`` from now on, timed in SIM mode: (kernel, µs, bytes of its tensors)."""
    launches = []

    def launch(kernel, *tensors):
        us, _ = sim_time(kernel, *tensors)
        name = getattr(getattr(kernel, "_original_func", kernel), "__qualname__", "?").split(".")[0]
        launches.append((name, us, sum(t.numel() * t.element_size() for t in tensors)))

    module.PYPTO_LAUNCHER = launch
    return launches


def update(fuse: bool, cached: int, new: int) -> list:
    """The launches of one update of ``new`` tokens onto ``cached``."""
    import torch
    import transformers.cache_utils as cache_utils

    source = Path(cache_utils.__file__).read_text(encoding="utf-8")
    module = translated(f"transformers._pypto_{'fused' if fuse else 'per_op'}_cache_utils", source, cache_utils.__file__, fuse)
    layer = module.DynamicLayer()

    def states(tokens):
        key = torch.randn(1, tokens, HEADS, HEAD_DIM, dtype=torch.bfloat16).transpose(1, 2)  # [b, heads, s, d], a view
        return key, torch.randn(1, HEADS, tokens, HEAD_DIM, dtype=torch.bfloat16)

    if cached:
        layer.update(*states(cached))  # torch: no launcher yet
    launches = timed(module)
    with torch.no_grad():
        layer.update(*states(new))
    return launches


def joins(rows: int | None) -> list[float]:
    """µs of each of ``JOINS`` in FP32 then BF16, in tiles of ``rows`` (None: the runtime's)."""
    import torch

    module = translated(f"join_rows_{rows}", JOIN, "join.py")
    if rows is not None:
        module._join_rows = lambda windows, maps: rows
    launches, times = timed(module), []
    for dtype in (torch.float32, torch.bfloat16):
        for first, second, dim in JOINS:
            launches.clear()
            module.join(torch.zeros(first, dtype=dtype), torch.zeros(second, dtype=dtype), dim)
            times.append(sum(us for _, us, _ in launches))
    return times


def run(folder: str, function, *args):
    """``function(*args)`` in a fresh worker process (a PyPTO failure may poison one)."""
    worker = Worker(function, _init, folder)
    result = worker.run(*args)
    worker.close()
    if isinstance(result, Exception):
        raise result
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", nargs="*", default=list(STEPS), help="CACHED:NEW tokens per update")
    parser.add_argument("--rows", nargs="*", type=int, help="sweep one join's tile rows instead")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="torch2pypto-cache-") as folder:
        scratch(folder)
        if args.rows is not None:
            print("torch.cat([a, b], dim), µs per (a's shape, b's, dim), FP32 then BF16; PyPTO cost model (A2A3, SIM)")
            generated = run(folder, joins, None)
            swept = {rows: run(folder, joins, rows) for rows in args.rows or (64, 256, 1024)}
            for rows, times in [("generated", generated), *swept.items()]:
                print(f"  {rows:>9} " + " ".join(f"{t:7.1f}" for t in times))
            best = [min(column) for column in zip(*swept.values())]
            print("  generated / best swept: " + " ".join(f"{g / b:.2f}x" for g, b in zip(generated, best)))
            return 0
        print(f"DynamicLayer.update, batch 1, {HEADS} kv heads of {HEAD_DIM}, bf16; PyPTO cost model (A2A3, SIM)")
        for step in args.steps:
            cached, new = map(int, step.split(":"))
            runs = {fuse: run(folder, update, fuse, cached, new) for fuse in (True, False)}
            print(f"\n{cached} cached + {new} new tokens:")
            for fuse, launches in runs.items():
                us, moved = sum(u for _, u, _ in launches), sum(b for *_, b in launches)
                kernels = ", ".join(f"{k} {u:.1f}" for k, u, _ in launches)
                print(f"  {'fused' if fuse else 'per join':9} {us:9.1f} µs  {len(launches)} launches ({kernels}); "
                      f"{moved / 2**20:.1f} MiB moved, floor {moved / HBM_BYTES_PER_US:.1f} µs ({us * HBM_BYTES_PER_US / max(moved, 1):.2f}x)")
            fused, apart = (sum(u for _, u, _ in runs[f]) for f in (True, False))
            print(f"  per join / fused: {apart / fused:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
