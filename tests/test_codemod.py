"""Ecosystem entry points: the libcst codemod command and the pre-commit hooks."""

import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from libcst.codemod import CodemodContext, TransformSkip, TransformSuccess, transform_module

from torch2pypto.codemod import TranslateCommand
from torch2pypto.translator.run import cli

ROOT = Path(__file__).parent.parent
SAMPLE = ROOT / "samples" / "qwen3_5_rmsnorm.py"
COMMAND = "torch2pypto.codemod.TranslateCommand"


def codemod(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "libcst.tool", "codemod", "-x", COMMAND, "--no-format", "--hide-progress", *args],
        capture_output=True, text=True, cwd=cwd,
    )  # fmt: skip


def test_codemod_rewrites_files_as_translate_does(tmp_path, capsys):
    source = SAMPLE.read_text(encoding="utf-8")
    (tmp_path / "model.py").write_text(source, encoding="utf-8")
    latin = ("# -*- coding: latin-1 -*-\n# Grüße\n" + source).encode("latin-1")
    (tmp_path / "legacy.py").write_bytes(latin)
    (tmp_path / "plain.py").write_text("x = 1\n")
    (tmp_path / "det.py").write_text("import torch\n\n\ndef f(x: torch.Tensor):\n    return torch.linalg.det(x)\n")
    expected = {}
    for name in ("model.py", "legacy.py"):
        assert cli.main([str(tmp_path / name), "-o", str(tmp_path / f"expected_{name}")]) == 0
        expected[name] = (tmp_path / f"expected_{name}").read_bytes()
        (tmp_path / f"expected_{name}").unlink()
    capsys.readouterr()

    result = codemod(tmp_path, "model.py", "legacy.py", "plain.py", "det.py")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "model.py").read_bytes() == expected["model.py"]
    assert (tmp_path / "legacy.py").read_bytes() == expected["legacy.py"]
    assert (tmp_path / "plain.py").read_text() == "x = 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["det.py", "legacy.py", "model.py", "plain.py"]
    assert "det.py:5:12: torch.linalg.det: left as torch: not in the mapping table" in result.stderr
    assert "torch.zeros" not in result.stderr  # host-side: stays torch by design, nothing to warn about
    assert "Transformed 3 files" in result.stderr and "Skipped 1 files" in result.stderr

    again = codemod(tmp_path, "model.py")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "model.py").read_bytes() == expected["model.py"]  # idempotent


def test_codemod_rejects_unknown_terms_before_touching_files(tmp_path):
    (tmp_path / "model.py").write_text(SAMPLE.read_text())
    result = codemod(tmp_path, "--select", "to,nope", "model.py")
    assert result.returncode == 2
    assert "argument --select: 'nope' is no op, torch API or category" in result.stderr
    assert (tmp_path / "model.py").read_text() == SAMPLE.read_text()


def test_select_and_assume_tensors_reach_the_translation():
    code = SAMPLE.read_text()
    result = transform_module(TranslateCommand(CodemodContext(filename="m.py"), select=["rsqrt"]), code)
    assert isinstance(result, TransformSuccess)
    assert "pypto_rsqrt(" in result.code and "pypto_type_as" not in result.code
    ambiguous = "import torch\n\ndef f(x):\n    return x.rsqrt()\n"
    for assume, converted in ((False, False), (True, True)):
        command = TranslateCommand(CodemodContext(filename="f.py"), assume_tensors=assume)
        result = transform_module(command, ambiguous)
        assert isinstance(result, TransformSuccess)
        assert ("pypto_rsqrt(x)" in result.code) is converted
        assert bool(result.warning_messages) is not converted


def test_files_without_torch_call_sites_are_skipped():
    result = transform_module(TranslateCommand(CodemodContext(filename="m.py")), "import os\nos.getcwd()\n")
    assert isinstance(result, TransformSkip) and result.skip_description == "no torch call sites"


HOOKS = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())


def test_pre_commit_hooks_run_the_installed_command_on_python_files():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert {h["id"] for h in HOOKS} == {"torch2pypto-check", "torch2pypto"}
    for hook in HOOKS:
        assert {"id", "name", "entry", "language"} <= hook.keys()
        assert hook["language"] == "python" and hook["types"] == ["python"]
        assert shlex.split(hook["entry"])[0] in scripts


@pytest.mark.parametrize("hook", HOOKS, ids=lambda h: h["id"])
def test_pre_commit_entries_are_valid_command_lines(hook):
    parser = cli._parser()
    flags = {s for a in parser._actions for s in a.option_strings}
    words = shlex.split(hook["entry"])[1:]
    if not {w for w in words if w.startswith("-")} <= flags:
        pytest.skip("the CLI does not have the hook's flags yet")
    args = parser.parse_args([*words, "a.py", "b.py"])  # pre-commit appends the file names
    assert args.paths == [Path("a.py"), Path("b.py")]
    assert args.check or args.in_place
