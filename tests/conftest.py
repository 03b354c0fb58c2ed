"""Test-wide environment. Set at import time, i.e. before any test module imports pypto."""

import atexit
import os
import shutil
import tempfile

import pytest

# The interpreter's calculator takes ~40 s to build; keep it across test runs, outside the home dir.
os.environ.setdefault("TORCH2PYPTO_CALC_CACHE", os.path.join(tempfile.gettempdir(), "torch2pypto-calc-cache"))

# `import pypto` alone writes ~/.pypto and ~/ascend/log, and kernels write ./output.
_scratch = tempfile.mkdtemp(prefix="torch2pypto-tests-")
atexit.register(shutil.rmtree, _scratch, True)
for _var, _sub in (("TILE_FWK_OUTPUT_DIR", "output"), ("PYPTO_HOME", "pypto"), ("ASCEND_PROCESS_LOG_PATH", "log")):
    os.environ.setdefault(_var, os.path.join(_scratch, _sub))


def pytest_addoption(parser):
    parser.addoption("--shard", metavar="K/N", help="run the K-th of N interleaved shards of the selected tests (scripts/test.py)")


def pytest_configure(config):
    shard = config.getoption("--shard")
    if shard:
        k, _, n = shard.partition("/")
        if not (k.isdigit() and n.isdigit() and int(k) < int(n)):
            raise pytest.UsageError(f"--shard takes K/N with 0 <= K < N, not {shard!r}")


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(config, items):
    shard = config.getoption("--shard")
    if shard:
        k, n = map(int, shard.split("/"))
        config.hook.pytest_deselected(items=[t for i, t in enumerate(items) if i % n != k])
        items[:] = items[k::n]


@pytest.fixture
def launcher(monkeypatch):
    """A recording PYPTO_LAUNCHER on runtime/launch.py (as torch2pypto.interpreted() sets one)."""
    calls = []
    monkeypatch.setattr("torch2pypto.runtime.launch.PYPTO_LAUNCHER", lambda kernel, *tensors: calls.append((kernel, tensors)))
    return calls


@pytest.fixture
def running(monkeypatch):
    """A PYPTO_LAUNCHER that runs the (stand-in) kernel it is given, recording each launch."""
    launches = []

    def run(kernel, *tensors):
        launches.append(kernel.args)
        kernel(*tensors)

    monkeypatch.setattr("torch2pypto.runtime.launch.PYPTO_LAUNCHER", run)
    return launches
