"""The corpus harness (scripts/corpus.py): its checks on a tiny tree, and the full corpus run (-m corpus)."""

import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import pytest

import corpus

REPO = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    """A package of the samples (one folder without __init__.py), translated once by the CLI."""
    base = tmp_path_factory.mktemp("tree")
    root = base / "models"
    for folder in ("a", "b"):
        (root / folder).mkdir(parents=True)
    for sample in sorted((REPO / "samples").glob("*.py")):
        shutil.copy(sample, root / "a" / sample.name)
    shutil.copy(REPO / "samples" / "llama_rmsnorm.py", root / "b" / "modeling_llama.py")
    (root / "__init__.py").write_text("")
    (root / "a" / "__init__.py").write_text("")
    run = corpus.translate_tree(root, base / "out", 2)
    assert run.returncode == 0, run.stderr
    return root, base / "out", run


@pytest.fixture
def copy(translated, tmp_path):
    """A writable copy of the translated tree's output and report, to plant problems in."""
    root, out, run = translated
    shutil.copytree(out, tmp_path / "out")
    report = json.loads(json.dumps(run.report))
    return root, tmp_path / "out", corpus.CliRun(run.returncode, run.seconds, run.stderr, report)


def test_a_clean_run_passes_every_check(translated):
    root, out, run = translated
    assert corpus.check_run(root, out, run, workers=2) == []
    assert (out / "_pypto_kernels.py").is_file()
    assert "from .._pypto_kernels import" in (out / "b" / "modeling_llama.py").read_text()


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _llama(out: Path) -> Path:
    return out / "b" / "modeling_llama.py"


def _first(report: dict, name: str) -> dict:
    return next(r for r in report["records"] if r["path"].endswith(name))


def _bump(row: dict, key: str) -> None:
    row[key] += 1


# a problem planted in the output or report -> the check that must find it
PLANTED = {
    "output does not parse": (lambda out, report: _edit(_llama(out), "import torch\n", "import torch(\n"), "parse"),
    "output not idempotent": (lambda out, report: _edit(_llama(out), "= eps", "= torch.rsqrt(eps)"), "idempotence"),
    "byte changed elsewhere": (lambda out, report: _edit(_llama(out), "is equivalent", "is  equivalent"), "untouched"),
    "report record missing": (lambda out, report: report["records"].remove(_first(report, "llama.py")), "report"),
    "report record altered": (lambda out, report: _first(report, "llama.py").update(status="ambiguous"), "report"),
    "summary count off": (lambda out, report: _bump(report["summary"], "converted"), "counts"),
    "ops row off": (lambda out, report: _bump(report["ops"][0], "count"), "counts"),
    "kernels module edited": (lambda out, report: _edit(out / "_pypto_kernels.py", "def ", "def  "), "report"),
    "output file missing": (lambda out, report: _llama(out).unlink(), "crash"),
}


@pytest.mark.parametrize("plant, check", PLANTED.values(), ids=PLANTED.keys())
def test_a_planted_problem_is_found(copy, plant, check):
    root, out, run = copy
    plant(out, run.report)
    problems = corpus.check_run(root, out, run, workers=1)
    assert check in {p.check for p in problems}, problems
    assert {p.check for p in problems} <= {check, "report", "counts", "untouched", "idempotence"}


def test_a_file_the_tool_cannot_handle_is_a_crash_with_path_and_reason(translated, tmp_path):
    root = tmp_path / "models"
    shutil.copytree(translated[0], root)
    (root / "a" / "broken.py").write_text("import torch\ndef f(:\n")
    run = corpus.translate_tree(root, tmp_path / "out", 1)
    problems = corpus.check_run(root, tmp_path / "out", run, workers=1)
    assert [(p.path, p.check) for p in problems] == [(str(root / "a" / "broken.py"), "crash")]
    assert "syntax error" in problems[0].message


def test_a_run_without_report_is_a_crash():
    run = corpus.CliRun(2, 0.1, "translate: error: bad\n", None)
    assert corpus.check_run(Path("nowhere"), Path("nowhere"), run, workers=1) == [
        corpus.Problem("", "crash", "translate exited 2 without a report: translate: error: bad")
    ]


def test_the_conversion_report_counts_each_api_by_outcome():
    def record(api, status, reason=None, category="pure-rename"):
        return {"api": api, "category": category, "status": status, "reason": reason}

    rows = corpus.conversion_report([
        record("torch.Tensor.to", "converted"),
        record("torch.zeros", "left-as-torch", "not in the mapping table", "unmapped"),
        record("torch.Tensor.to", "ambiguous", "receiver not known"),
        record("torch.Tensor.to", "left-as-torch", "dtype argument"),
        record("torch.Tensor.to", "left-as-torch", "dtype argument"),
    ])  # fmt: skip
    assert [(r.api, r.sites, r.converted, r.ambiguous, dict(r.left_as_torch)) for r in rows] == [
        ("torch.Tensor.to", 4, 1, 1, {"dtype argument": 2}),
        ("torch.zeros", 1, 0, 0, {"not in the mapping table": 1}),
    ]


def test_the_manual_names_its_rows_ops_and_their_spellings(tmp_path):
    catalogue = tmp_path / "catalogue.csv"
    catalogue.write_text(
        "torch_op,pypto_api,category,difference_to_handle,in_pypto_0_2_0\n"
        "eq/ne,eq/ne,same-name,,yes\nbitwise_and/or,same,same-name,,yes\nto(dtype),cast,pure-rename,,yes\n"
        "max (reduction),amax,difference,,yes\nlayer_norm,x,composite,,yes\nrotate_half / rope,x,composite,,yes\n"
    )
    manual = corpus.manual_ops(catalogue)
    assert manual == {"eq", "ne", "bitwiseand", "bitwiseor", "to", "max", "layernorm", "rotatehalf", "rope"}
    found = [api for api in ("torch.eq", "torch.Tensor.ne", "torch.Tensor.bitwise_or", "torch.Tensor.to",
                             "torch.nn.LayerNorm", "torch.nn.functional.layer_norm", "torch.Tensor.eq_",
                             "torch.Tensor.view", "torch.bitwise_xor", "torch.Tensor.or") if corpus.in_manual(api, manual)]  # fmt: skip
    assert found == ["torch.eq", "torch.Tensor.ne", "torch.Tensor.bitwise_or", "torch.Tensor.to",
                     "torch.nn.LayerNorm", "torch.nn.functional.layer_norm", "torch.Tensor.eq_"]  # fmt: skip


def test_the_metrics_leave_out_host_side_sites_and_ops_outside_the_manual():
    manual = frozenset({"to", "sum"})
    records = [
        {"api": "torch.Tensor.to", "category": "pure-rename", "status": "converted"},
        {"api": "torch.Tensor.to", "category": "pure-rename", "status": "host-side"},
        {"api": "torch.Tensor.sum", "category": "same-name", "status": "ambiguous"},
        {"api": "torch.Tensor.view", "category": "host-side", "status": "ambiguous"},
        {"api": "torch.Tensor.reshape", "category": "host-side", "status": "ambiguous"},  # in the manual
        {"api": "torch.einsum", "category": "unmapped", "status": "left-as-torch"},
    ]
    manual |= {"reshape"}
    assert corpus.Metrics.of(records, manual) == corpus.Metrics(sites=6, ambiguous=3, manual=2, manual_converted=1)


def _wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        for name in (
            "transformers/__init__.py",
            "transformers/models/__init__.py",
            "transformers/models/bert/__init__.py",
            "transformers/models/bert/modeling_bert.py",
            "transformers/models/bert/configuration_bert.py",
            "transformers/models/auto/__init__.py",
            "transformers/models/auto/modeling_auto.py",
            "transformers/models/deep/sub/__init__.py",
            "transformers/modeling_utils.py",
        ):
            wheel.writestr(name, f"# {name}\n")
    return path


def test_extract_takes_the_modeling_files_and_their_packages(tmp_path):
    corpus.extract(_wheel(tmp_path / "t.whl"), tmp_path / "src")
    found = sorted(p.relative_to(tmp_path / "src").as_posix() for p in (tmp_path / "src").rglob("*.py"))
    assert found == [
        "transformers/__init__.py",
        "transformers/modeling_utils.py",  # outside models/: where the models' base classes live
        "transformers/models/__init__.py",
        "transformers/models/auto/__init__.py",
        "transformers/models/auto/modeling_auto.py",
        "transformers/models/bert/__init__.py",
        "transformers/models/bert/modeling_bert.py",
    ]


def test_fetch_reuses_a_downloaded_wheel_and_extracts_once(tmp_path, monkeypatch):
    _wheel(tmp_path / "transformers-5.23.0-py3-none-any.whl")
    monkeypatch.setattr(corpus.subprocess, "run", lambda *a, **k: pytest.fail("pip ran although the wheel is there"))
    models = corpus.fetch(tmp_path)
    assert models == tmp_path / "src" / "transformers" / "models"
    assert [p.name for p in corpus.corpus_files(models)] == ["modeling_auto.py", "modeling_bert.py"]
    (models / "bert" / "modeling_bert.py").write_text("# kept\n")
    assert corpus.fetch(tmp_path) == models
    assert (models / "bert" / "modeling_bert.py").read_text() == "# kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "transformers-5.23.0-py3-none-any.whl"]


@pytest.mark.corpus
def test_the_transformers_model_zoo_translates_without_a_finding(tmp_path, monkeypatch, request):
    """The whole corpus: no crash, every output parses and is a fixed point, untouched bytes, exact report."""
    if "corpus" not in request.config.option.markexpr:  # `-m "not interpreter"` replaces the default -m
        pytest.skip("the corpus run is asked for by name: pytest -m corpus")
    cache = os.environ.get("TORCH2PYPTO_CORPUS") or os.path.join(tempfile.gettempdir(), "torch2pypto-corpus")
    monkeypatch.setenv("TORCH2PYPTO_CORPUS", cache)
    root = corpus.fetch(corpus.default_cache())
    files = corpus.corpus_files(root)
    assert (len(files), sum(corpus.count_lines(f.read_bytes()) for f in files)) == corpus.EXPECTED
    run = corpus.translate_tree(root, tmp_path / "out", os.cpu_count() or 1)
    problems = corpus.check_run(root, tmp_path / "out", run, os.cpu_count() or 1)
    failing = {corpus.CHECKS[check]: sorted(paths) for check, paths in corpus.failing_files(problems).items() if paths}
    assert failing == {}, "\n".join(f"{p.check}: {p.path}: {p.message}" for p in problems[:50])
    assert run.report["summary"]["files_seen"] == len(corpus.tree_sources(root))
