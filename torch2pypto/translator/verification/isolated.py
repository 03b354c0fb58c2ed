"""Check generated wrappers against their torch fallback in PyPTO's CPU interpreter, in isolation.

A kernel failure poisons the PyPTO process and some kernels crash it outright, so the cases run
in a worker subprocess (verify_worker) that is replaced whenever that happens; the other cases
are unaffected. Cases and outcomes cross the process boundary as a torch.save file and JSON lines.
"""

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from torch2pypto.translator.verification.interpreter import _KERNEL_LOG

_PACKAGE_ROOT = Path(__file__).resolve().parents[3]


NOT_EXERCISED = "not exercised: no kernel launched (the wrapper took its torch path)"
NOT_EXERCISED_AS_NAMED = "not exercised: the case's kernel did not launch (a fallback ran), these did"


@dataclass(frozen=True)
class Case:
    """Call `wrapper` (a name in the module) with `args` and `kwargs`; `label` names it in reports;
    `tolerance`: (atol, rtol) of the comparison, None for torch.testing.assert_close's defaults;
    `equal_nan`: NaN compares equal (non-finite samples); `kernels`: one of these must launch (none
    named: any kernel), where a fallback would launch others."""

    label: str
    wrapper: str
    args: tuple
    kwargs: dict
    tolerance: tuple[float, float] | None = None
    equal_nan: bool = False
    kernels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Instance:
    """An argument standing for ``self``: an instance of the translated module's class `cls` (so the
    case runs in the whole module, not its generated section), made without its ``__init__``,
    whose attribute paths `attrs` hold the case's positional arguments of those indices and
    `values` the values given (a submodule's weight, which the wrapper reads from it)."""

    cls: str
    attrs: tuple[tuple[str, int], ...]
    values: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class Built:
    """An argument standing for a module the wrapper calls (a head's norm): the translated module's
    class `cls` built as ``cls(*args)``, its parameters drawn from `seed` in `dtype`."""

    cls: str
    args: tuple
    dtype: str
    seed: int = 0


@dataclass(frozen=True)
class Function:
    """An argument standing for the translated module's function `name` (a fused region's fallback
    calls it), so the case runs in the whole module too."""

    name: str


@dataclass
class Outcome:
    """How a case went: interpreter vs torch error (None if not comparable), the reason if not ok,
    how many kernels it launched (a case that launched none proves nothing) and `used`, the
    largest difference as a share of the one its tolerance allows there (over 1: a mismatch)."""

    label: str
    ok: bool
    max_abs: float | None
    max_rel: float | None
    seconds: float
    error: str | None
    launched: int = 0
    used: float | None = None


def verify(module_source: str, cases: list[Case], timeout: float = 300, whole: str = "", path: str = "") -> list[Outcome]:
    """Run each case through the interpreter and compare with the wrapper's torch fallback.

    `module_source` defines the wrappers and ``PYPTO_LAUNCHER``; `whole`, the whole translated
    module, for cases with an :class:`Instance` of its classes, imported as a module of the
    package the original file at `path` sits in, so that its relative imports resolve.
    `timeout` is per case, in seconds (the first case of a worker also pays its start-up,
    about 2 s).
    """
    with tempfile.TemporaryDirectory(prefix="torch2pypto-verify-") as name:
        tmp = Path(name)
        (tmp / "translated.py").write_text(module_source)
        (tmp / "whole.py").write_text(whole)
        torch.save(list(cases), tmp / "cases.pt")
        package = package_of(Path(path)) if path else None
        outcomes: list[Outcome] = []
        while len(outcomes) < len(cases):
            outcomes += _run_worker(tmp, cases, len(outcomes), timeout, package)
        return outcomes


def package_of(path: Path) -> tuple[str, Path] | None:
    """The dotted package a source file sits in (folders with an ``__init__.py``) and the folder
    above its top package, or None for a file outside any package."""
    folder, parts = path.resolve().parent, []
    while (folder / "__init__.py").is_file():
        parts.append(folder.name)
        folder = folder.parent
    return (".".join(reversed(parts)), folder) if parts else None


def _run_worker(tmp: Path, cases: list[Case], start: int, timeout: float, package: tuple[str, Path] | None = None) -> list[Outcome]:
    """Outcomes of cases[start:] from one worker, until it finishes, stops or dies.

    A worker stops after a kernel failure (its process is poisoned); if it dies or hangs
    instead, the case it was on gets a failed Outcome saying so.
    """
    home = tmp / f"worker{start}"
    home.mkdir()
    outcomes: list[Outcome] = []
    with open(home / "stderr.log", "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "torch2pypto.translator.verification.worker",
             str(tmp / "translated.py"), str(tmp / "cases.pt"), str(start), str(tmp / "whole.py"), *(map(str, package or ()))],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, cwd=home, env=_worker_env(home))
    lines = _lines(proc.stdout)
    began = time.monotonic()
    reason = None
    while start + len(outcomes) < len(cases):
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            proc.kill()
            reason = f"timed out after {timeout:g} s"
            break
        if line is None:
            break
        outcomes.append(Outcome(**json.loads(line)))
        began = time.monotonic()
    code = proc.wait()
    if start + len(outcomes) < len(cases) and (reason or code != 0 or not outcomes):
        label = cases[start + len(outcomes)].label
        outcomes.append(Outcome(label, False, None, None, time.monotonic() - began, reason or _death(code, home)))
    return outcomes


def _worker_env(home: Path) -> dict[str, str]:
    """Make the package importable and keep whatever a dying worker leaves behind inside `home`."""
    env = dict(os.environ, TMPDIR=str(home))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    return env


def _lines(stream) -> "queue.Queue[str | None]":
    """The stream's lines, read by a thread so that waiting for one can time out; None at EOF."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        with stream:
            for line in stream:
                lines.put(line.decode())
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _death(code: int, home: Path) -> str:
    """Why a worker ended without reporting: its exit status and the last lines it printed."""
    cause = f"killed by {_signal_name(-code)}" if code < 0 else f"exited with status {code}"
    # run_kernel sends a kernel's output to a log in its work dir, which the worker made in `home`
    logs = [home / "stderr.log", *home.glob(f"torch2pypto-*/{_KERNEL_LOG}")]
    text = "\n".join(log.read_text(errors="replace") for log in logs)
    tail = [line for line in text.splitlines() if line.strip()][-10:]
    return "\n".join([f"verify worker {cause}", *("  " + line for line in tail)])


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
