"""Run the test suite in shards, each its own pytest process, as many at once as there are cores.

    python scripts/test.py [PYTEST ARGS...]        # the default run (README)
    python scripts/test.py -m matrix               # the full kernel matrix
    python scripts/test.py --matrix                # both, in one sharded run (.ci/run)

PyPTO's interpreter keeps about 23 MB per compiled kernel until its process exits (measured:
clearing pypto's compile cache, pypto_impl.Reset() and malloc_trim free none of it, and a forked
child deadlocks), so one process over every kernel of the table would outgrow the machine.
Shards bound each process's kernels; running them side by side uses both cores. Each shard is
`pytest --shard K/N` (tests/conftest.py): every N-th selected test from the K-th. Prints each
shard's result as it ends (the whole output of a failing one), then one total line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COUNTS = ("passed", "failed", "skipped")


def run_shard(k: int, n: int, pytest_args: list[str], scratch: Path) -> tuple[int, dict[str, int], str, float]:
    """(exit code, counts, output, seconds) of shard k of n."""
    junit = scratch / f"shard{k}.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--shard={k}/{n}",
               f"--junitxml={junit}", *pytest_args]
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    counts = dict.fromkeys(COUNTS, 0)
    if junit.exists():
        suite = ET.parse(junit).getroot().find("testsuite")
        tests, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
        failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        counts.update(passed=tests - skipped - failed, failed=failed, skipped=skipped)
    return done.returncode, counts, done.stdout, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, help="pytest processes in all (default 8, 32 with --matrix)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="shards at once (default: the CPU count)")
    parser.add_argument("--matrix", action="store_true", help="the default run and the full kernel matrix (all but the corpus)")
    args, pytest_args = parser.parse_known_args(argv)
    if args.matrix:
        pytest_args = ["-m", "not corpus", *pytest_args]
    args.shards = args.shards or (32 if args.matrix else 8)
    totals = dict.fromkeys(COUNTS, 0)
    status = 0
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="torch2pypto-shards-") as scratch:
        with ThreadPoolExecutor(args.jobs) as pool:
            futures = [pool.submit(run_shard, k, args.shards, pytest_args, Path(scratch)) for k in range(args.shards)]
            for k, future in enumerate(futures):
                code, counts, output, seconds = future.result()
                for name in COUNTS:
                    totals[name] += counts[name]
                if code not in (0, 5):  # 5: this shard selected no test
                    status = 1
                    print(output, end="")
                line = ", ".join(f"{counts[name]} {name}" for name in COUNTS)
                print(f"shard {k}/{args.shards}: {line} in {seconds:.0f} s (exit {code})", flush=True)
    if sum(totals.values()) == 0:
        print("no test selected")
        return 5
    print(f"in {time.monotonic() - start:.0f} s over {args.shards} shards, {args.jobs} at once")
    print(f"total: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return status


if __name__ == "__main__":
    sys.exit(main())
