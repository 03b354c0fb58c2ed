"""Whole-tree runs: mirrored output, shared kernels module, parallel determinism, diffs, gates
(interrupted runs: test_tree_interrupts.py; the tree they run on: trees.py)."""

import difflib
import json
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from torch2pypto.translator.run.cli import main
from torch2pypto.translator.run.files import gather
from trees import EXCLUDE, NORM, everything, make_tree, mirrored, pkg, snapshot, translate, unprivileged  # noqa: F401  (pkg, mirrored: fixtures)


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
