"""Benchmark: a DynamicCache layer's update at llama-7B's shapes, in PyPTO's cost model (A2A3, SIM).

    python scripts/cache.py [--steps CACHED:NEW ...]

Translates the installed transformers' ``cache_utils.py`` fused (the keys' and the values' joins
as one launch, translator/engine/joins.py) and with ``--no-fuse`` (a launch per join), and times
one ``DynamicLayer.update`` of NEW tokens onto a cache of CACHED (batch 1, 32 kv heads of 128,
bf16; the new keys a transposed view, as attention hands them over), every launch in SIM mode
(costmodel.py). Prints each run's launches, µs and bytes moved, the floor of those bytes at
1.42 TB/s, and fused against per join. Figures only, not a test.

Last run (pypto 0.2.0, transformers 5.23.0), µs, fused against per join: 0 cached + 2048 new
51.5 (1 launch) against 49.9 (2 x 24.9); 2047 + 1: 61.0 against 59.8; 4095 + 1: 115.5 against
114.3. The cost model charges no launch gap, so one launch for two joins is the same time here
(0.97x-0.99x): what it saves is the launch. A decode step's join is 1.29x its HBM floor (64 MiB at
1.42 TB/s: 47.3 µs at 2047 cached), 197.0 µs (4.2x) when join kernels took tiles of 64 rows at
most (runtime _join_rows: as many rows as the blocks have, up to 1024).
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


def measure(fuse: bool, cached: int, new: int) -> list:
    """The launches of one update of ``new`` tokens onto ``cached``: (kernel, µs, bytes of its tensors)."""
    import torch
    import transformers.cache_utils as cache_utils
    from models import import_written
    from torch2pypto import Options, translate_source

    folder = Path(tempfile.mkdtemp(prefix="torch2pypto-cache-"))
    source = Path(cache_utils.__file__).read_text(encoding="utf-8")
    code = translate_source(source, cache_utils.__file__, Options(fuse=fuse)).code
    module = import_written(f"transformers._pypto_{'fused' if fuse else 'per_op'}_cache_utils", code, folder / "cache_utils.py")
    layer = module.DynamicLayer()

    def states(tokens):
        key = torch.randn(1, tokens, HEADS, HEAD_DIM, dtype=torch.bfloat16).transpose(1, 2)  # [b, heads, s, d], a view
        return key, torch.randn(1, HEADS, tokens, HEAD_DIM, dtype=torch.bfloat16)

    launches = []

    def launch(kernel, *tensors):
        us, _ = sim_time(kernel, *tensors)
        name = getattr(getattr(kernel, "_original_func", kernel), "__qualname__", "?").split(".")[0]
        launches.append((name, us, sum(t.numel() * t.element_size() for t in tensors)))

    if cached:
        layer.update(*states(cached))  # torch: no launcher yet
    module.PYPTO_LAUNCHER = launch
    with torch.no_grad():
        layer.update(*states(new))
    return launches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", nargs="*", default=list(STEPS), help="CACHED:NEW tokens per update")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="torch2pypto-cache-") as folder:
        scratch(folder)
        print(f"DynamicLayer.update, batch 1, {HEADS} kv heads of {HEAD_DIM}, bf16; PyPTO cost model (A2A3, SIM)")
        for step in args.steps:
            cached, new = map(int, step.split(":"))
            runs = {}
            for fuse in (True, False):  # a fresh process each: a PyPTO failure may poison one
                worker = Worker(measure, _init, folder)
                runs[fuse] = worker.run(fuse, cached, new)
                worker.close()
                if isinstance(runs[fuse], Exception):
                    raise runs[fuse]
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
