"""Whole-tree runs: mirrored output, shared kernels module, parallel determinism, diffs, gates."""

import difflib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from torch2pypto.translator.run import runner
from torch2pypto.translator.run.cli import main
from torch2pypto.translator.run.files import gather

MODEL = '''\
"""RMSNorm as LLaMA writes it."""

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return self.weight * hidden_states.to(input_dtype)
'''

# No newline at the end: the diff must say so for `git apply`.
LAYERS = '''\
import torch


def scale(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * torch.rsqrt(y.abs() + 1)).type_as(y)'''

NORM = '''\
import torch


def normalise(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x = x.to(torch.float32)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def determinant(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.det(x)
'''

TREE = {
    ".gitignore": "scratch_*.py\n*.log\n",
    "README.md": "# pkg\n",
    "__init__.py": "from .model import RMSNorm\n",
    "model.py": MODEL,
    "layers.py": LAYERS,
    "weights.json": '{"eps": 1e-6}\n',
    "run.log": "ignored\n",
    "scratch_notes.py": "import torch\nx = torch.rsqrt(torch.ones(1))\n",
    "experiments/try_it.py": "import torch\ny = torch.rsqrt(torch.ones(2))\n",
    "sub/__init__.py": "",
    "sub/norm.py": NORM,
    "sub/tables/.keep": "",
    ".venv/lib/site.py": "import torch\n",
}
EXCLUDE = ["--exclude", "experiments/"]


def make_tree(root: Path, tree: dict[str, str] = TREE) -> Path:
    for name, text in tree.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and ".git/" not in p.as_posix() + "/"}


def translate(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "torch2pypto.translator.run.cli", *args],
        capture_output=True, text=True, cwd=cwd, env={**os.environ, **(env or {})},
    )  # fmt: skip


def unprivileged(unreadable: Path) -> list[str]:
    """A command prefix under which ``unreadable`` (mode 000) cannot be read, even when the tests run as root.

    Root reads anything through two capabilities; setpriv (util-linux) runs a command without them.
    """
    prefix = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("as root, mode 000 does not stop reads, and setpriv is not installed to drop that power")
        caps = "-dac_override,-dac_read_search"
        prefix = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]
    if subprocess.run([*prefix, "cat", str(unreadable)], capture_output=True).returncode == 0:
        pytest.skip("cannot make a file unreadable here (setpriv could not drop root's capabilities)")
    return prefix


@pytest.fixture
def pkg(tmp_path):
    return make_tree(tmp_path / "src" / "pkg")


@pytest.fixture
def mirrored(pkg, tmp_path):
    out = tmp_path / "out" / "pkg"
    assert main([str(pkg), "-o", str(out), "-j1", *EXCLUDE]) == 0
    return out


def test_gathering_skips_ignored_excluded_hidden_and_generated(pkg):
    (pkg / "_pypto_kernels.py").write_text("# generated\n")
    (pkg / "venv").mkdir()
    (pkg / "venv" / "pyvenv.cfg").write_text("")
    (pkg / "env2").mkdir()
    (pkg / "env2" / "pyvenv.cfg").write_text("")
    (pkg / "sub" / ".gitignore").write_text("tables/\n")
    tree = gather(pkg, ["experiments/", "*.json"])
    assert [p.as_posix() for p in tree.sources] == ["__init__.py", "layers.py", "model.py", "sub/__init__.py", "sub/norm.py"]
    assert [p.as_posix() for p in tree.others] == [".gitignore", "README.md", "sub/.gitignore"]


def test_gitignore_files_above_the_folder_count_inside_a_git_work_tree(tmp_path):
    make_tree(tmp_path, {".git/HEAD": "", ".gitignore": "generated/\n!keep.log\n", "src/pkg/a.py": "", "src/pkg/generated/b.py": ""})
    assert [p.as_posix() for p in gather(tmp_path / "src" / "pkg").sources] == ["a.py"]


def test_kernels_import_is_relative_in_a_package_and_absolute_in_a_plain_folder(mirrored, tmp_path):
    assert "from ._pypto_kernels import " in (mirrored / "model.py").read_text()
    assert "from .._pypto_kernels import " in (mirrored / "sub" / "norm.py").read_text()
    assert "_pypto_kernels" not in (mirrored / "__init__.py").read_text()  # nothing to convert, no import
    scripts = make_tree(tmp_path / "scripts", {"norm.py": NORM})
    assert main([str(scripts), "--in-place"]) == 0
    assert "\nfrom _pypto_kernels import " in (scripts / "norm.py").read_text()


def test_mirror_copies_every_other_file_and_skips_ignored_ones(pkg, mirrored):
    written = snapshot(mirrored)
    assert written["README.md"] == (pkg / "README.md").read_bytes()
    assert written["weights.json"] == (pkg / "weights.json").read_bytes()
    assert written[".gitignore"] == (pkg / ".gitignore").read_bytes()
    assert "sub/tables/.keep" in written
    assert not {"run.log", "scratch_notes.py", "experiments/try_it.py", ".venv/lib/site.py"} & set(written)
    assert set(written) == {p.as_posix() for p in gather(pkg, ["experiments/"]).others} | {
        p.as_posix() for p in gather(pkg).sources if not p.as_posix().startswith("experiments")
    } | {"_pypto_kernels.py"}


def test_kernels_module_defines_each_name_once(mirrored):
    kernels = (mirrored / "_pypto_kernels.py").read_text()
    names = re.findall(r"^(?:def (\w+)|(\w+) = )", kernels, re.M)
    names = [a or b for a, b in names]
    assert len(names) == len(set(names))
    for path in (mirrored / "model.py", mirrored / "layers.py", mirrored / "sub" / "norm.py"):
        imported = re.search(r"^from \.+_pypto_kernels import (.+)$", path.read_text(), re.M).group(1)
        assert {n.strip() for n in imported.strip("()").split(",")} <= set(names)
        assert "def pypto_" not in path.read_text()


def test_output_is_byte_identical_whatever_the_number_of_workers(pkg, mirrored, tmp_path):
    out2 = tmp_path / "out2" / "pkg"
    assert main([str(pkg), "-o", str(out2), "-j2", *EXCLUDE]) == 0
    assert snapshot(out2) == snapshot(mirrored)


def test_translated_package_imports_and_computes_what_the_original_did(pkg, mirrored):
    script = textwrap.dedent(
        """
        import importlib, sys, torch

        def run(root):
            for name in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
                del sys.modules[name]
            sys.path.insert(0, root)
            try:
                pkg = importlib.import_module("pkg")
                layers = importlib.import_module("pkg.layers")
                norm = importlib.import_module("pkg.sub.norm")
            finally:
                sys.path.remove(root)
            x = torch.randn(3, 8, generator=torch.Generator().manual_seed(0)).to(torch.float16)
            y = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
            return pkg.RMSNorm(8)(x), layers.scale(x, y), norm.normalise(x), pkg.__file__

        before, after = run(sys.argv[1]), run(sys.argv[2])
        assert before[-1] != after[-1], "imported the same package twice"
        for a, b in zip(before[:-1], after[:-1]):
            assert a.dtype == b.dtype and torch.equal(a, b), (a, b)
        print("same")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(pkg.parent), str(mirrored.parent)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "same"


def test_a_second_run_over_the_output_changes_nothing(mirrored, tmp_path, capsys):
    again = tmp_path / "again"
    assert main([str(mirrored), "-o", str(again), "-j2"]) == 0
    assert snapshot(again) == snapshot(mirrored)
    before = snapshot(mirrored)
    assert main([str(mirrored), "--in-place"]) == 0
    assert snapshot(mirrored) == before
    assert main([str(mirrored), "--check"]) == 0


def test_new_definitions_extend_the_existing_kernels_module(mirrored):
    kernels = mirrored / "_pypto_kernels.py"
    before = kernels.read_text()
    (mirrored / "extra.py").write_text("import torch\n\n\ndef f(x: torch.Tensor):\n    return x.exp()\n")
    assert main([str(mirrored), "--in-place"]) == 0
    after = kernels.read_text()
    assert "def pypto_exp(" in after and "def pypto_exp(" not in before
    edits = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines()).get_opcodes()
    assert {tag for tag, *_ in edits} == {"equal", "insert"}  # extended, nothing replaced
    assert "from ._pypto_kernels import " in (mirrored / "extra.py").read_text()


def test_in_place_writes_what_the_mirror_writes(pkg, mirrored, tmp_path):
    copy = tmp_path / "copy" / "pkg"
    shutil.copytree(pkg, copy)
    assert main([str(copy), "--in-place", "-j2", *EXCLUDE]) == 0
    written = snapshot(copy)
    for name, data in snapshot(mirrored).items():
        assert written[name] == data, name
    assert written["scratch_notes.py"] == (pkg / "scratch_notes.py").read_bytes()  # ignored: untouched
    assert not [name for name in written if name.endswith(".tmp")]  # every staged file renamed


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


def everything(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``: a file's bytes, None for a folder."""
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


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


def test_files_given_one_by_one_keep_their_kernels_inline(pkg, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(pkg, copy)
    assert main([str(copy / "model.py"), str(copy / "sub" / "norm.py"), "--in-place"]) == 0
    assert "def pypto_fused_forward_" in (copy / "model.py").read_text()
    assert "_pypto_kernels" not in (copy / "model.py").read_text()
    assert not (copy / "_pypto_kernels.py").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_piped_diff_applies_with_git_apply_and_reproduces_the_written_output(pkg, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(pkg, repo / "pkg")
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    git("add", "-A")
    expected = tmp_path / "expected"
    shutil.copytree(repo, expected)
    assert main([str(expected / "pkg"), "--in-place", *EXCLUDE]) == 0
    written = snapshot(expected)

    result = translate("pkg", "--diff", *EXCLUDE, cwd=repo)
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout
    assert "+++ b/pkg/_pypto_kernels.py" in result.stdout and "--- /dev/null" in result.stdout
    assert "\\ No newline at end of file" in result.stdout
    before = snapshot(repo)
    patch = tmp_path / "translate.patch"
    patch.write_text(result.stdout)
    assert snapshot(repo) == before  # --diff wrote nothing
    git("apply", str(patch))
    assert snapshot(repo) == written


def test_diff_is_coloured_on_a_terminal_and_plain_with_no_color(pkg, monkeypatch, capsys):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert main([str(pkg), "--diff", "-j1"]) == 0
    coloured = capsys.readouterr()
    assert "\x1b[32m+" in coloured.out
    monkeypatch.setenv("NO_COLOR", "1")
    assert main([str(pkg), "--diff", "-j1"]) == 0
    plain = capsys.readouterr()
    assert "\x1b[" not in plain.out + plain.err
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured.out) == plain.out


def test_summary_fits_an_80_column_terminal(pkg, tmp_path):
    make_tree(pkg, {"broken.py": "import torch\ndef f(:\n"})
    result = translate(str(pkg), "--check", "-j2", *EXCLUDE, env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert any(line.startswith("Conversion rate") for line in lines) and "torch.linalg.det" in result.stderr
    summary = [line for line in lines if not line.startswith("would change ")]  # one path per line
    assert max(map(len, summary)) <= 80, "\n".join(summary)


@pytest.mark.parametrize(
    "setup, args, code, message",
    [
        (None, ["--check"], 1, "--check: 4 files would change"),  # 3 sources + the kernels module
        ("translated", ["--check"], 0, None),
        (None, ["--strict", "--analyze"], 1, "--strict: 1 call site left as torch or ambiguous"),
        (None, ["--strict", "--analyze", "--ignore", "unmapped"], 0, None),
        (None, ["--fail-under", "100", "--analyze"], 1, "--fail-under: conversion rate"),
        (None, ["--fail-under", "80", "--analyze"], 0, None),
        ("broken", ["--analyze"], 1, "1 file could not be translated"),
    ],
)
def test_gates_and_failures_set_the_exit_code(pkg, tmp_path, capsys, setup, args, code, message):
    if setup == "translated":
        assert main([str(pkg), "--in-place", *EXCLUDE]) == 0
    if setup == "broken":
        make_tree(pkg, {"broken.py": "import torch\ndef f(:\n"})
    capsys.readouterr()
    before = snapshot(pkg)
    assert main([str(pkg), *args, *EXCLUDE]) == code
    err = capsys.readouterr().err
    if message:
        assert f"translate: {message}" in err
    assert snapshot(pkg) == before


def test_a_broken_file_is_reported_and_the_others_still_written(pkg, tmp_path, capsys):
    make_tree(pkg, {"broken.py": "import torch\ndef f(:\n", "latin.py": "# -*- coding: ascii -*-\nx = 'é'\n"})
    out = tmp_path / "out"
    assert main([str(pkg), "-o", str(out), "-j2", *EXCLUDE]) == 1
    err = capsys.readouterr().err
    assert re.search(r"broken\.py: 2:\d+: syntax error", err)
    assert "latin.py: cannot decode" in err
    assert "translate: 2 files could not be translated" in err
    assert "pypto_fused_forward_" in (out / "model.py").read_text()
    assert (out / "broken.py").read_bytes() == (pkg / "broken.py").read_bytes()  # copied as it was


def test_an_unreadable_input_is_reported_as_an_input_and_the_others_still_written(pkg, tmp_path):
    """Issue 11 item 7: not "cannot write <input>", no missing summary, no half-written output folder."""
    secret, weights = pkg / "secret.py", pkg / "weights.json"
    secret.write_text("import torch\nx = torch.rsqrt(torch.ones(2))\n")
    secret.chmod(0)
    weights.chmod(0)  # a file -o only copies
    prefix = unprivileged(secret)
    out = tmp_path / "out"
    env = {"COLUMNS": "1000", "NO_COLOR": "1"}
    result = translate(str(pkg), "-o", str(out), "-j2", *EXCLUDE, env=env, prefix=prefix)
    assert result.returncode == 1, result.stderr
    err = result.stderr
    assert f"{secret}: cannot read: Permission denied" in err and f"{weights}: cannot read: Permission denied" in err
    assert "cannot write" not in err and "Conversion rate" in err
    assert "translate: 1 file could not be translated" in err and "translate: 1 file could not be copied" in err
    assert main([str(pkg), "-o", str(tmp_path / "expected"), *EXCLUDE]) == 0  # as root: every file read
    assert set(snapshot(out)) == set(snapshot(tmp_path / "expected")) - {"secret.py", "weights.json"}
    assert not list(out.rglob("*.tmp"))
    diff = translate(str(pkg), "--diff", "-j2", *EXCLUDE, env=env, prefix=prefix)
    assert diff.returncode == 1 and f"{secret}: cannot read: Permission denied" in diff.stderr


def test_select_and_ignore_choose_the_call_sites(pkg, tmp_path):
    report = tmp_path / "report.json"
    assert main([str(pkg), "--analyze", "--select", "type_as,torch.Tensor.to", "--report", str(report), *EXCLUDE]) == 0
    apis = {r["api"] for r in json.loads(report.read_text())["records"]}
    assert apis == {"torch.Tensor.type_as", "torch.Tensor.to"}
    assert main([str(pkg), "--analyze", "--ignore", "to", "--ignore", "composite", "--report", str(report), *EXCLUDE]) == 0
    apis = {r["api"] for r in json.loads(report.read_text())["records"]}
    assert "torch.Tensor.to" not in apis and "torch.rsqrt" in apis


def test_analyze_writes_the_report_and_no_code(pkg, tmp_path, capsys):
    report = tmp_path / "report.json"
    before = snapshot(pkg)
    assert main([str(pkg), "--analyze", "--report", str(report), *EXCLUDE]) == 0
    assert snapshot(pkg) == before and capsys.readouterr().out == ""
    data = json.loads(report.read_text())
    assert data["summary"]["files_seen"] == 5 and data["summary"]["sites_seen"] == len(data["records"])


def test_settings_come_from_pyproject_and_flags_win(pkg, tmp_path, capsys):
    (tmp_path / "src" / "pyproject.toml").write_text('[tool.torch2pypto]\nexclude = ["experiments/", "sub/"]\nstrict = true\n')
    report = tmp_path / "r.json"
    assert main([str(pkg), "--analyze", "--report", str(report)]) == 0  # strict, but torch.ones is host-side
    assert not any(f["path"].endswith("norm.py") for f in json.loads(report.read_text())["files"])
    assert main([str(pkg), "--analyze", "--exclude", "experiments/", "--report", str(report)]) == 1
    assert any(f["path"].endswith("norm.py") for f in json.loads(report.read_text())["files"])  # the flag replaced


@pytest.mark.parametrize(
    "args, message",
    [
        (["{pkg}", "-o", "{pkg}/out"], "must not be inside the input folder"),
        (["{pkg}", "-o", "{pkg}"], "must not be inside the input folder"),
        (["{pkg}", "{pkg}/model.py", "-o", "{tmp}/out"], None),  # the file is part of the folder: one input
        (["{pkg}/model.py", "{pkg}/layers.py", "-o", "{tmp}/out"], None),  # each file into the folder
        (["{pkg}", "{tmp}/src/pyproject.toml", "-o", "{tmp}/out"], "-o takes one folder or files only"),
        (["{pkg}", "{tmp}/src/pyproject.toml"], "several folders, or folders and files, need --in-place"),
        (["{pkg}"], "need -o OUTDIR, --in-place, --diff, --check or --analyze"),
        (["{pkg}", "--in-place", "-o", "{tmp}/out"], "exclude each other"),
        (["{pkg}", "--check", "--in-place"], "--check writes nothing"),
        (["{pkg}", "--select", "type_as,no_such_op", "-o", "{tmp}/out"], "no_such_op"),
        (["{pkg}", "--report", "{tmp}/nope/r.json", "--analyze"], "does not exist"),
        (["{pkg}", "--in-place", "--report", "{pkg}/layers.py"], "layers.py: --report would overwrite the input"),
        (["{pkg}", "--analyze", "--report", "{pkg}/README.md"], "README.md: --report would overwrite the input"),
        (["{pkg}", "--in-place", "--report", "{pkg}/_pypto_kernels.py"], "--report would overwrite the kernels module"),
        (["{pkg}", "-o", "{tmp}/src", "--report", "{tmp}/src/model.py"], "model.py: both -o and --report would write"),
        (["{pkg}", "-o", "{tmp}/src", "--report", "{tmp}/src/weights.json"], "both -o and --report would write"),
        (["{pkg}", "-o", "{tmp}/src", "--report", "{tmp}/src/_pypto_kernels.py"], "both -o and --report would write"),
        (["{pkg}/model.py", "{pkg}/layers.py", "--verify"], "--verify takes one file"),
    ],
)
def test_bad_usage_is_one_line_exit_2_and_writes_nothing(pkg, tmp_path, capsys, args, message):
    (tmp_path / "src" / "pyproject.toml").write_text("[tool.torch2pypto]\nassume-tensors = false\n")
    args = [a.format(pkg=pkg, tmp=tmp_path) for a in args]
    before = snapshot(tmp_path)
    status = main(args)
    if message is None:
        assert status == 0
        return
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("translate: error:") and message in err and "\n" not in err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "config, args",
    [
        ("diff = true", ["-o", "{tmp}/out"]),
        ("check = true\nanalyze = true", ["--in-place"]),
        ("in-place = true", ["--diff"]),
        ("in-place = true", ["-o", "{tmp}/out"]),
    ],
)
def test_a_mode_flag_overrides_the_configs_conflicting_mode(pkg, tmp_path, capsys, config, args):
    """Issue 11 item 9: flags win, so a mode given on the command line replaces the config's."""
    (tmp_path / "src" / "pyproject.toml").write_text(f"[tool.torch2pypto]\n{config}\n")
    before = snapshot(pkg)
    assert main([str(pkg), *EXCLUDE, *(a.format(tmp=tmp_path) for a in args)]) == 0
    captured = capsys.readouterr()
    written = tmp_path / "out" if "-o" in args else pkg
    if "--diff" in args:
        assert "+++ b/" in captured.out and snapshot(pkg) == before
    else:
        assert "pypto_fused_forward_" in (written / "model.py").read_text()
        assert (tmp_path / "out").exists() == ("-o" in args) and ("-o" not in args or snapshot(pkg) == before)


def test_o_around_the_input_folder_must_not_overwrite_its_files(tmp_path, capsys):
    """Issue 11 item 4: every output path is checked against every input, not only -o's folder."""
    make_tree(tmp_path / "t", {"a/m.py": "x = 1\n", "a/a/m.py": "import torch\ny = torch.rsqrt(torch.ones(1))\n"})
    before = snapshot(tmp_path)
    assert main([str(tmp_path / "t" / "a"), "-o", str(tmp_path / "t")]) == 2  # t/a/m.py: the copy of a/m.py
    assert capsys.readouterr().err == f"translate: error: {tmp_path / 't' / 'a' / 'm.py'}: -o would overwrite the input\n"
    assert snapshot(tmp_path) == before


def test_in_place_leaves_read_only_files_and_writes_the_others(pkg, tmp_path, capsys, monkeypatch):
    """Issue 11 item 11: a read-only file that would change is reported as path: reason; --force replaces it."""
    monkeypatch.setenv("COLUMNS", "1000")  # the summary's failure lines unfolded
    (pkg / "layers.py").chmod(0o444)
    (pkg / "__init__.py").chmod(0o444)  # needs no change: not refused
    layers = (pkg / "layers.py").read_bytes()
    assert main([str(pkg), "--in-place", *EXCLUDE]) == 1
    err = capsys.readouterr().err
    assert f"{pkg / 'layers.py'}: read-only file (--force replaces it)" in err and "__init__.py" not in err
    assert (pkg / "layers.py").read_bytes() == layers and "pypto_fused_forward_" in (pkg / "model.py").read_text()
    assert main([str(pkg), "--in-place", "--force", *EXCLUDE]) == 0
    assert "pypto_" in (pkg / "layers.py").read_text() and (pkg / "layers.py").stat().st_mode & 0o777 == 0o444
    assert not [p for p in pkg.rglob("*.tmp")]


def test_a_read_only_kernels_module_that_would_change_stops_the_run_unless_forced(mirrored, capsys):
    """Issue 11 item 11: the tree's files import from it, so none is written without it."""
    kernels = mirrored / "_pypto_kernels.py"
    (mirrored / "extra.py").write_text("import torch\n\n\ndef f(x: torch.Tensor):\n    return x.exp()\n")
    kernels.chmod(0o444)
    before = everything(mirrored)
    assert main([str(mirrored), "--in-place"]) == 2
    assert capsys.readouterr().err == f"translate: error: {kernels}: read-only file (--force replaces it)\n"
    assert everything(mirrored) == before
    assert main([str(mirrored), "--in-place", "--force"]) == 0
    assert "def pypto_exp(" in kernels.read_text() and kernels.stat().st_mode & 0o777 == 0o444


def test_unknown_config_key_is_exit_2(pkg, tmp_path, capsys):
    (tmp_path / "src" / "pyproject.toml").write_text("[tool.torch2pypto]\nexlude = []\n")
    assert main([str(pkg), "--check"]) == 2
    assert "exlude" in capsys.readouterr().err
