"""The translate command: outputs, exit codes, one-line errors, nothing half-written."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch2pypto.translator.run.cli import main

SAMPLE = Path(__file__).parent.parent / "samples" / "qwen3_5_rmsnorm.py"


def test_writes_the_translation(tmp_path, capsys):
    out = tmp_path / "model_pypto.py"
    assert main([str(SAMPLE), "-o", str(out)]) == 0
    assert "def pypto_fused_forward_" in out.read_text()
    err = capsys.readouterr().err
    assert "11 torch call sites, 10 converted, 0 left as torch, 0 ambiguous, 1 host-side" in err
    assert "torch.zeros: stays torch" not in err  # host-side: by design, not listed as a site left as torch


def test_prints_the_translation_to_stdout_without_o(capsysbinary):
    assert main([str(SAMPLE)]) == 0
    out = capsysbinary.readouterr().out
    assert out == (SAMPLE.parent / "qwen3_5_rmsnorm_pypto.py").read_bytes()


def test_output_into_a_folder_keeps_the_file_name(tmp_path):
    assert main([str(SAMPLE), "-o", str(tmp_path)]) == 0
    assert "def pypto_fused_forward_" in (tmp_path / SAMPLE.name).read_text()


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
        [sys.executable, "-m", "torch2pypto.translator.run.cli", str(SAMPLE), "--diff"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0
    assert result.stdout.startswith(f"--- a/{SAMPLE}\n+++ b/{SAMPLE}\n")
    assert "+        return pypto_fused_forward_" in result.stdout
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
        (lambda d: (d / "nul.py").write_bytes(b"x = 1\0\n"), ["nul.py"], "nul.py: binary file (NUL bytes)"),
        (lambda d: (d / "u16.py").write_text("x = 1\n", "utf-16"), ["u16.py"], "u16.py: UTF-16 text: "),
        (lambda d: (d / "u32.py").write_text("x = 1\n", "utf-32"), ["u32.py"], "u32.py: UTF-32 text: "),
        (lambda d: (d / "m.py").write_text("x = 1\n"), ["m.py", "-o", "m.py"], "would overwrite the input"),
        (lambda d: (d / "m.py").write_text("x = 1\n"), ["m.py", "-o", "nope/out.py"], "does not exist"),
        (lambda d: (d / "m.py").write_text("x = 1\n"), ["m.py", "--report", "m.py"], "m.py: --report would overwrite the input"),
        (lambda d: (d / "m.py").write_text("x = 1\n"), ["m.py", "-o", "o.py", "--report", "o.py"], "o.py: both -o and --report would write it"),
        (lambda d: (d / "m.py").write_text("x = 1\n"), ["m.py", "-o", "o.py", "--report", "./m.py"], "m.py: --report would overwrite the input"),
        (lambda d: (d / "m.py").write_text("x = 1\n"), ["m.py", "--analyze", "--report", "."], ".: --report is a folder"),
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
    assert main([str(SAMPLE), "--verify", "--no-fuse", "-o", str(tmp_path / "out.py")]) == 0
    err = capsys.readouterr().err
    assert "CPU interpreter vs torch" in err
    assert err.count(" ok ") == 10 and "MISMATCH" not in err  # 6 calls and 4 operators


@pytest.mark.interpreter
def test_verify_samples_a_tensor_form_by_its_own_entry(tmp_path, capsys):
    """clamp(x, t, u) runs clamp_tensors' kernel, whose dtypes (not clamp's int ones) are sampled."""
    source = tmp_path / "m.py"
    source.write_text("import torch\n\n\ndef f(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor):\n"
                      "    return torch.clamp(x, lo, hi), x.clamp(max=hi), torch.max(x, lo)\n")
    assert main([str(source), "--verify", "--no-fuse", "-o", str(tmp_path / "out.py")]) == 0
    err = capsys.readouterr().err
    assert err.count(" ok ") == 3 and "not exercised" not in err, err


@pytest.mark.interpreter
def test_verify_title_is_one_line_from_a_long_checkout_path(tmp_path, capsys):
    """Issue 11 item 12: the table's title is the file's path; rich must not wrap it at 80 columns."""
    deep = tmp_path / ("a-checkout-under-a-long-temporary-folder-name-" * 3) / "samples"
    deep.mkdir(parents=True)
    source = deep / SAMPLE.name
    source.write_bytes(SAMPLE.read_bytes())
    assert main([str(source), "--verify", "--no-fuse", "-o", str(tmp_path / "out.py")]) == 0
    err = capsys.readouterr().err
    assert f"{source}: CPU interpreter vs torch\n" in err
    assert err.count(" ok ") == 10 and "MISMATCH" not in err  # 6 calls and 4 operators


@pytest.mark.interpreter
def test_verify_runs_each_fused_region_against_its_torch_statements(tmp_path, capsys):
    """The sample fuses into two regions (forward's inlines self._norm, whose fallback runs on an
    instance of the class): each kernel runs and matches the region's original statements."""
    assert main([str(SAMPLE), "--verify", "-o", str(tmp_path / "out.py")]) == 0
    err = capsys.readouterr().err
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in err.splitlines() if "fused region" in line]
    assert rows == [["14:9", "fused region, 5 ops", "6", *rows[0][3:6], "ok"],
                    ["17:9", "fused region, 10 ops", "6", *rows[1][3:6], "ok"]], rows
    assert "MISMATCH" not in err and "not exercised" not in err


@pytest.mark.interpreter
def test_verify_reports_a_fused_region_that_disagrees_or_cannot_run(tmp_path, capsys, monkeypatch):
    """No tolerance: the fp16 cases of the RMSNorm region differ from torch in a last bit (a
    mismatch, exit 1); a class inside a function cannot be made for a fallback's self (not
    exercised, exit 1)."""
    from torch2pypto.translator.verification import verify

    monkeypatch.setattr(verify, "region_tolerance", lambda dtype: (0.0, 0.0))
    source = tmp_path / "norm.py"
    source.write_text("import torch\n\n\ndef f(x: torch.Tensor):\n    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)\n")
    assert main([str(source), "--verify", "-o", str(tmp_path / "out.py")]) == 1
    assert "MISMATCH" in capsys.readouterr().err
    monkeypatch.undo()
    source.write_text(
        "import torch\n\n\ndef make():\n"
        "    class Norm(torch.nn.Module):\n"
        "        def _norm(self, x):\n"
        "            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)\n\n"
        "        def forward(self, x: torch.Tensor):\n"
        "            return self._norm(x.float()).type_as(x)\n\n"
        "    return Norm\n"
    )
    assert main([str(source), "--verify", "-o", str(tmp_path / "out.py")]) == 1
    err = capsys.readouterr().err
    assert "not exercised" in err and "instance" in err and err.count(" ok ") == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["m.py", "--fail-under", "150"], "argument --fail-under: expected a percentage from 0 to 100, got 150"),
        (["m.py", "--fail-under", "most"], "argument --fail-under: expected a percentage from 0 to 100, got most"),
        (["m.py", "-j", "0"], "argument -j/--jobs: expected a whole number of at least 1, got 0"),
        (["m.py", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        ([], "the following arguments are required: PATH"),
    ],
)
def test_usage_errors_are_one_line_exit_2(tmp_path, monkeypatch, capsys, args, message):
    """Issue 11 item 9: argparse's usage block and its type functions' names are not the error."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text("x = 1\n")
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"translate: error: {message}\n"


def test_in_place_refuses_a_read_only_file_unless_forced(tmp_path, capsys):
    """Issue 11 item 11: as an editor would; root ignores the mode bits, so they are read, not tried."""
    a = tmp_path / "a.py"
    a.write_bytes(SAMPLE.read_bytes())
    a.chmod(0o444)
    assert main([str(a), "--in-place"]) == 2
    assert capsys.readouterr().err == f"translate: error: {a}: read-only file (--force replaces it)\n"
    assert a.read_bytes() == SAMPLE.read_bytes() and sorted(tmp_path.iterdir()) == [a]
    assert main([str(a), "--in-place", "--force"]) == 0
    assert a.read_bytes() == (SAMPLE.parent / "qwen3_5_rmsnorm_pypto.py").read_bytes()
    assert a.stat().st_mode & 0o777 == 0o444 and sorted(tmp_path.iterdir()) == [a]
    assert main([str(a), "--in-place"]) == 0  # nothing to change: nothing to refuse


def test_view_ops_of_an_unknown_receiver_are_host_side_and_state_queries_no_sites(tmp_path, capsys):
    """Issue 20 item 10: a view is host-side whatever its receiver is, so it does not lower the rate;
    torch.is_autocast_enabled() asks for the process's state: no tensor op, no call site."""
    source = tmp_path / "m.py"
    source.write_text(
        "import torch\n\n\ndef f(x, y: torch.Tensor):\n"
        "    if torch.is_autocast_enabled():\n"
        "        y = y.float()\n"
        "    return x.view(2, -1).transpose(0, 1).t(), torch.exp(y)\n"
    )
    assert main([str(source), "--analyze", "--strict"]) == 0
    err = capsys.readouterr().err
    assert "5 torch call sites, 2 converted, 0 left as torch, 0 ambiguous, 3 host-side" in err
    assert "is_autocast_enabled" not in err


@pytest.mark.interpreter
def test_verify_leaves_nothing_in_the_home_dir_but_its_cache(tmp_path):
    """`import pypto` alone writes run data to ~/.pypto: --verify sets PyPTO's dirs up first."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TILE_FWK_OUTPUT_DIR", "PYPTO_HOME", "ASCEND_PROCESS_LOG_PATH")}
    env.update(HOME=str(home))  # the calculator cache stays where conftest puts it
    result = subprocess.run([sys.executable, "-m", "torch2pypto.translator.run.cli", str(SAMPLE), "--verify", "-o", str(tmp_path / "out.py")],
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert [p for p in home.rglob("*") if p.is_file()] == []


def test_verify_writes_nothing_but_code_to_stdout(tmp_path, capsysbinary):
    """Issue 20 item 8: `translate m.py --verify > out.py` gives out.py the code alone; the
    verification goes to stderr with the summary."""
    source = tmp_path / "m.py"
    source.write_text("x = 1\n")
    assert main([str(source), "--verify"]) == 0
    captured = capsysbinary.readouterr()
    assert captured.out == b"x = 1\n"
    assert b"nothing to verify" in captured.err


def test_several_files_with_o_go_into_the_folder(tmp_path, capsys):
    """Issue 20 item 11: as --in-place would write them (kernels inline), into OUTDIR, made if missing."""
    a, b = tmp_path / "a.py", tmp_path / "sub" / "b.py"
    b.parent.mkdir()
    a.write_bytes(SAMPLE.read_bytes())
    b.write_text("x = 1\n")
    out = tmp_path / "out"
    assert main([str(a), str(b), "-o", str(out)]) == 0
    assert (out / "a.py").read_bytes() == (SAMPLE.parent / "qwen3_5_rmsnorm_pypto.py").read_bytes()
    assert (out / "b.py").read_text() == "x = 1\n" and sorted(p.name for p in out.iterdir()) == ["a.py", "b.py"]
    (tmp_path / "b.py").write_text("y = 2\n")
    assert main([str(b), str(tmp_path / "b.py"), "-o", str(out)]) == 2
    assert capsys.readouterr().err.endswith(f"{tmp_path / 'b.py'}: -o would write it and {b} to the same file b.py\n")
    assert main([str(a), str(b)]) == 2
    assert "several files need -o OUTDIR, --in-place, --diff, --check or --analyze" in capsys.readouterr().err


def test_piped_output_is_not_wrapped(tmp_path):
    """Issue 20 item 12: rich wrapped a pipe at 80 columns, breaking API names mid-word."""
    source = tmp_path / "m.py"
    source.write_text("import torch\n\n\ndef f(q, k, v: torch.Tensor):\n"
                      "    return torch.nn.functional.multilabel_soft_margin_loss(q, k, v)\n")
    result = subprocess.run(
        [sys.executable, "-m", "torch2pypto.translator.run.cli", str(source), "--analyze"],
        capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "COLUMNS"},
    )  # fmt: skip
    rows = [line.split() for line in result.stderr.splitlines()]
    assert ["1", "torch.nn.functional.multilabel_soft_margin_loss", "unmapped", "left", "as", "torch"] in rows, result.stderr


def test_an_unwritable_output_is_named_as_given(tmp_path, capsys):
    """Issue 20 item 14: the error named the staging file next to it (/proc/.x.py.1a2b3c4d.tmp)."""
    assert main([str(SAMPLE), "-o", "/proc/x.py"]) == 2
    assert capsys.readouterr().err == "translate: error: cannot write /proc/x.py: No such file or directory\n"


def test_version_is_the_installed_package_s():
    """Issue 20 item 15: as black and ruff print theirs."""
    from importlib import metadata

    result = subprocess.run([sys.executable, "-m", "torch2pypto.translator.run.cli", "--version"], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (0, f"translate (torch2pypto) {metadata.version('torch2pypto')}\n")


def test_translating_imports_neither_torch_nor_pypto(tmp_path):
    """Issue 21: importing torch took 3 of the CLI's seconds over the transformers zoo; only --verify needs it."""
    source = tmp_path / "m.py"
    source.write_text("import torch\n\n\ndef f(x: torch.Tensor):\n    return torch.relu(x)\n")
    check = ("import sys; from torch2pypto.translator.run import cli; code = cli.main(sys.argv[1:]);"
             " print(code, sorted({'torch', 'pypto', 'numpy'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", check, str(source), "-o", str(tmp_path / "out.py")], capture_output=True, text=True)
    assert result.stdout == "0 []\n", result.stderr


CTRL_C_AT_START_UP = """
import builtins, os, signal, sys
real = builtins.__import__
def hook(name, *args, **kwargs):
    if name == "libcst":
        os.kill(os.getpid(), signal.SIGINT)
    return real(name, *args, **kwargs)
builtins.__import__ = hook
from torch2pypto.translator.run.entry import main
sys.exit(main())
"""


def test_ctrl_c_while_starting_up_is_one_line_exit_130():
    """Issue 20 item 13: the console script imported the command before any Ctrl-C handling."""
    result = subprocess.run([sys.executable, "-c", CTRL_C_AT_START_UP, str(SAMPLE)], capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (130, "translate: interrupted; nothing written\n")
