"""A translated file or tree passes the gates its source passed (issue 11 item 5).

After a migration the converted sites are calls of generated wrappers, no longer torch calls;
they count as converted sites of the torch API the wrapper stands for, when the wrapper is the
generated one: defined in the file's generated section or imported from a kernels module.
"""

import json
from pathlib import Path

import pytest

from helpers import statuses, translate
from torch2pypto.translator.run.cli import main
from torch2pypto.translator.oracle.invariants import violations

SAMPLES = Path(__file__).parent.parent / "samples"
C = "converted"


def gate(path: Path, report: Path, *args: str) -> tuple[int, int, float, int]:
    """Exit code of ``--check --fail-under 50`` and the report's converted count, rate and sites."""
    code = main([str(path), "--check", "--fail-under", "50", "--report", str(report), *args])
    summary = json.loads(report.read_text())["summary"]
    return code, summary["converted"], summary["rate"], summary["sites_seen"]


@pytest.mark.parametrize("sample", ["llama_rmsnorm.py", "qwen3_5_rmsnorm.py"])
def test_a_translated_file_passes_the_gate_its_source_passed(sample, tmp_path):
    source = tmp_path / sample
    source.write_bytes((SAMPLES / sample).read_bytes())
    out = tmp_path / sample.replace(".py", "_pypto.py")
    assert main([str(source), "-o", str(out)]) == 0
    code, converted, rate, seen = gate(out, tmp_path / "after.json")
    assert main([str(source), "--analyze", "--report", str(tmp_path / "before.json")]) == 0
    before = json.loads((tmp_path / "before.json").read_text())["summary"]
    assert code == 0  # --check: a second run changes nothing; --fail-under 50: the rate holds
    assert (converted, rate, seen) == (before["converted"], before["rate"], before["sites_seen"])
    assert converted > 0


def test_a_translated_tree_passes_the_gate_its_source_passed(tmp_path):
    tree = tmp_path / "pkg"
    tree.mkdir()
    (tree / "__init__.py").write_text("")
    for sample in ("llama_rmsnorm.py", "qwen3_5_rmsnorm.py"):
        (tree / sample).write_bytes((SAMPLES / sample).read_bytes())
    (tree / "left.py").write_text("import torch\n\n\ndef f(x: torch.Tensor):\n    return torch.linalg.det(x.exp())\n")
    before = tmp_path / "before.json"
    assert main([str(tree), "--analyze", "--fail-under", "50", "--report", str(before)]) == 0
    assert main([str(tree), "--in-place"]) == 0
    assert "from ._pypto_kernels import" in (tree / "llama_rmsnorm.py").read_text()
    code, converted, rate, seen = gate(tree, tmp_path / "after.json")
    summary = json.loads(before.read_text())["summary"]
    assert code == 0
    assert (converted, rate, seen) == (summary["converted"], summary["rate"], summary["sites_seen"])
    assert summary["left_as_torch"] == 1 and 0 < rate < 100


WRAPPED = "import torch\nfrom ._pypto_kernels import pypto_cast, pypto_rsqrt, pypto_type_as\n\n\n"


@pytest.mark.parametrize(
    "code, expected",
    [
        (WRAPPED + "def f(x, y):\n    return pypto_type_as(pypto_rsqrt(x), y)\n", [("torch.Tensor.type_as", C), ("torch.rsqrt", C)]),
        (WRAPPED + "def f(x):\n    return pypto_cast(x, torch.float16)\n", [("torch.Tensor.to", C)]),
        ("from .._pypto_kernels import pypto_rsqrt\ny = pypto_rsqrt(x)\n", [("torch.rsqrt", C)]),
        ("from _pypto_kernels import pypto_rsqrt as r\ny = r(x)\n", [("torch.rsqrt", C)]),
        # not the generated wrappers: the user's own function, another module's, a shadowing name
        ("def pypto_rsqrt(x):\n    return x\ny = pypto_rsqrt(x)\n", []),
        ("from mylib import pypto_rsqrt\ny = pypto_rsqrt(x)\n", []),
        (WRAPPED + "def f(x, pypto_rsqrt):\n    return pypto_rsqrt(x)\n", []),
        ("from ._pypto_kernels import pypto_launcher\ny = pypto_launcher(x)\n", []),
    ],
)
def test_calls_of_generated_wrappers_are_converted_sites_of_their_torch_api(code, expected):
    assert statuses(code) == expected
    assert translate(code).code == code  # already converted: nothing is rewritten


def test_wrappers_defined_in_the_generated_section_count_and_the_section_itself_does_not():
    first = translate((SAMPLES / "qwen3_5_rmsnorm.py").read_text())
    again = translate(first.code)
    assert again.code == first.code and violations(again) == []
    assert [r.status for r in again.records].count(C) == [r.status for r in first.records].count(C) > 0
    section = [i for i, line in enumerate(first.code.splitlines(), 1) if "torch2pypto" in line]
    assert not any(section[0] <= r.line <= section[-1] for r in again.records)


def test_select_chooses_wrapper_sites_by_their_torch_api():
    code = WRAPPED + "def f(x, y):\n    return pypto_type_as(pypto_rsqrt(x), y)\n"
    from torch2pypto import Options, translate_source

    records = translate_source(code, "t.py", Options(select=frozenset({"rsqrt"}))).records
    assert [(r.api, r.status) for r in records] == [("torch.rsqrt", C)]
