"""PyPTO's cost model (SIM run mode, A2/A3), shared by the benchmark scripts (kernels.py, tiles.py).

``sim_time(kernel, *tensors)`` runs one jit kernel in SIM mode and reads its timeline
(reference/cost-model.md); ``Worker`` runs such calls in one worker process, restarted when a
PyPTO failure poisons it. Figures only: SIM mode computes no values.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
from pathlib import Path

CYCLES_PER_US = 1800  # the modelled chip's 1.8 GHz
HBM_BYTES_PER_US = 1.42e6  # 1.42 TB/s: the floor the model does not charge


def scratch(folder: str | Path) -> None:
    """Point PyPTO's ./output, ~/.pypto and ~/ascend/log into ``folder`` (before it is imported)."""
    for variable, sub in (("TILE_FWK_OUTPUT_DIR", "out"), ("PYPTO_HOME", "home"), ("ASCEND_PROCESS_LOG_PATH", "log")):
        os.environ.setdefault(variable, str(Path(folder) / sub))


def sim_time(kernel, *tensors) -> tuple[float, int]:
    """Cost-model end-to-end µs of one call of a ``@pypto.frontend.jit`` kernel, and its task count."""
    import pypto

    saved = kernel._runtime_options
    kernel._runtime_options = dict(saved or {}, run_mode=pypto.RunMode.SIM.value)
    try:
        kernel(*tensors)
    finally:
        kernel._runtime_options = saved
    swim = Path(pypto.pypto_impl.LogTopFolder()) / "CostModelSimulationOutput" / "_simulate.swim.json"
    tasks = [t for core in json.loads(swim.read_text()) for t in core["tasks"]]
    span = max(t["execEnd"] for t in tasks) - min(t["execStart"] for t in tasks)
    return span / CYCLES_PER_US, len(tasks)


class Worker:
    """One worker process running ``function`` calls, restarted after a failed call.

    ``run`` returns the call's result, or the exception a failed call raised (a tile PyPTO
    refuses is reported and the sweep goes on).
    """

    def __init__(self, function, initializer, *initargs) -> None:
        self.function, self.initializer, self.initargs = function, initializer, initargs
        self.pool = self._start()

    def _start(self):
        return concurrent.futures.ProcessPoolExecutor(1, initializer=self.initializer, initargs=self.initargs)

    def submit(self, *args) -> concurrent.futures.Future:
        return self.pool.submit(self.function, *args)

    def result(self, future: concurrent.futures.Future):
        try:
            return future.result()
        except Exception as exc:  # noqa: BLE001 - a PyPTO failure may poison the process: a fresh one
            self.pool.shutdown(cancel_futures=True)
            self.pool = self._start()
            return exc

    def run(self, *args):
        return self.result(self.submit(*args))

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)
