"""Whole-tree runs interrupted: Ctrl-C while files are staged or written leaves no half-written
output, no staged file and no folder the run created."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torch2pypto.translator.run import runner
from torch2pypto.translator.run.cli import main
from trees import EXCLUDE, everything, mirrored, pkg, snapshot  # noqa: F401  (pkg, mirrored: fixtures)


def test_an_interrupted_run_leaves_no_staged_file(pkg, tmp_path, monkeypatch):
    copy = tmp_path / "copy"
    shutil.copytree(pkg, copy)
    before = snapshot(copy)
    translate_job = runner.translate_job
    done = []

    def interrupted(job, work, progress=None):
        if any(r.staged for r in done):
            raise KeyboardInterrupt
        done.append(translate_job(job, work, progress))
        return done[-1]

    monkeypatch.setattr(runner, "translate_job", interrupted)
    assert main([str(copy), "--in-place", "-j1"]) == 130
    assert done[-1].staged and snapshot(copy) == before


# Runs `translate ARGS...` with a hold: once norm.py's translation is staged (in whichever process
# translates it), or once the staged files are about to be renamed in, it writes READY and waits
# until READY is gone. So a test can send its SIGINT at a known point, without guessing with sleeps.
HOLD = """
import sys, time
from pathlib import Path
from torch2pypto.translator.run import cli, runner

ready, at = Path(sys.argv[1]), sys.argv[2]

def hold():
    ready.write_text(at)
    while ready.exists():
        time.sleep(0.01)

if at == "staged":
    translate_job = runner.translate_job
    def held_job(job, work, progress=None):
        result = translate_job(job, work, progress)
        if job.source.name == "norm.py":
            assert result.staged
            hold()
        return result
    runner.translate_job = held_job
else:
    rename_staged = cli._rename_staged
    def held_rename(*args):
        hold()
        rename_staged(*args)
    cli._rename_staged = held_rename
sys.exit(cli.main(sys.argv[3:]))
"""


def interrupt(at: str, args: list[str], ready: Path, release: bool = False) -> subprocess.CompletedProcess:
    """Run ``translate args`` held ``at`` a point, then Ctrl-C it: SIGINT to its process group, as a terminal sends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(ready), at, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never reached the hold"
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGINT)
        if release:
            ready.unlink()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("mode", ["-o", "--in-place"])
@pytest.mark.parametrize("jobs", ["-j1", "-j2"])
def test_ctrl_c_once_files_are_staged_leaves_no_trace(pkg, tmp_path, mode, jobs):
    """Issue 11 item 3: no staged file and no folder the run created is left; folders that were there stay."""
    work = tmp_path / "work"
    repo = work / "repo"
    shutil.copytree(pkg, repo / "models" / "pkg")
    (repo / ".git").mkdir()  # --in-place in a git work tree
    (work / "out").mkdir()  # there before the run: kept
    output = ["-o", str(work / "out" / "a" / "b" / "pkg")] if mode == "-o" else [mode]
    before = everything(work)
    ready = tmp_path / "ready"
    result = interrupt("staged", [str(repo / "models" / "pkg"), *output, jobs, *EXCLUDE], ready)
    assert (result.returncode, result.stderr) == (130, "translate: interrupted; nothing written\n")
    assert everything(work) == before


def test_ctrl_c_while_writing_takes_effect_once_every_file_is_written(pkg, tmp_path, mirrored):
    """Issue 11 item 3: writes are not interrupted halfway; the run then stops with 130 and says so."""
    out = tmp_path / "held" / "pkg"
    result = interrupt("rename", [str(pkg), "-o", str(out), "-j1", *EXCLUDE], tmp_path / "ready", release=True)
    assert (result.returncode, result.stderr) == (130, "translate: interrupted; every file was written first\n")
    assert everything(out) == everything(mirrored)
