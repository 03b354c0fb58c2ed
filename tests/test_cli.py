"""The translate command: outputs, exit codes, one-line errors, nothing half-written."""

import subprocess
import sys
from pathlib import Path

import pytest

from torch2pypto.translator.cli import main

SAMPLE = Path(__file__).parent.parent / "samples" / "qwen3_5_rmsnorm.py"


def test_writes_the_translation(tmp_path, capsys):
    out = tmp_path / "model_pypto.py"
    assert main([str(SAMPLE), "-o", str(out)]) == 0
    assert "def pypto_type_as(" in out.read_text()
    err = capsys.readouterr().err
    assert "7 torch call sites, 6 converted, 0 left as torch, 0 ambiguous, 1 host-side" in err
    assert "torch.zeros: stays torch" not in err  # host-side: by design, not listed as a site left as torch


def test_prints_the_translation_to_stdout_without_o(capsysbinary):
    assert main([str(SAMPLE)]) == 0
    out = capsysbinary.readouterr().out
    assert out == (SAMPLE.parent / "qwen3_5_rmsnorm_pypto.py").read_bytes()


def test_output_into_a_folder_keeps_the_file_name(tmp_path):
    assert main([str(SAMPLE), "-o", str(tmp_path)]) == 0
    assert "def pypto_type_as(" in (tmp_path / SAMPLE.name).read_text()


def test_files_given_one_by_one_check_then_in_place_as_pre_commit_runs_them(tmp_path, capsys):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_bytes(SAMPLE.read_bytes())
    b.write_text("x = 1\n")
    assert main(["--check", str(a), str(b)]) == 1
    assert f"would change {a}" in capsys.readouterr().err
    assert main(["--in-place", str(a), str(b)]) == 0
    assert a.read_bytes() == (SAMPLE.parent / "qwen3_5_rmsnorm_pypto.py").read_bytes()  # kernels inline
    assert b.read_text() == "x = 1\n"
    assert main(["--check", str(a), str(b)]) == 0


def test_diff_writes_nothing_and_prints_a_plain_diff_when_piped(tmp_path):
    before = set(tmp_path.iterdir())
    result = subprocess.run(
        [sys.executable, "-m", "torch2pypto.translator.cli", str(SAMPLE), "--diff"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0
    assert result.stdout.startswith(f"--- a/{SAMPLE}\n+++ b/{SAMPLE}\n")
    assert "+        return pypto_type_as(output, x)" in result.stdout
    assert "\x1b[" not in result.stdout
    assert set(tmp_path.iterdir()) == before


def test_diff_is_coloured_on_a_terminal(monkeypatch, capsys):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert main([str(SAMPLE), "--diff"]) == 0
    assert "\x1b[32m+" in capsys.readouterr().out


@pytest.mark.parametrize(
    "make, args, message",
    [
        (lambda d: None, ["missing.py"], "missing.py: no such file"),
        (lambda d: (d / "bad.py").write_text("def f(:\n"), ["bad.py"], "bad.py:1:"),
        (lambda d: (d / "bin.py").write_bytes(b"x = '\xff\xfe'\n"), ["bin.py"], "bin.py: cannot decode"),
        (lambda d: (d / "m.py").write_text("x = 1\n"), ["m.py", "-o", "m.py"], "would overwrite the input"),
        (lambda d: (d / "m.py").write_text("x = 1\n"), ["m.py", "-o", "nope/out.py"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, monkeypatch, capsys, make, args, message):
    monkeypatch.chdir(tmp_path)
    make(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("translate: error:") and message in err and "\n" not in err
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.interpreter
def test_verify_runs_every_converted_call_site_in_the_interpreter(tmp_path, capsys):
    assert main([str(SAMPLE), "--verify", "-o", str(tmp_path / "out.py")]) == 0
    out = capsys.readouterr().out
    assert "CPU interpreter vs torch" in out
    assert out.count(" ok ") == 6 and "MISMATCH" not in out
