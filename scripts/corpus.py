"""Corpus harness: translate the transformers model zoo with ``translate`` and check every output.

    .venv/bin/python scripts/corpus.py [--cache DIR] [-j N] [--report FILE.json]

Downloads the transformers 5.23.0 wheel with pip (once, into ``--cache``: default
``$TORCH2PYPTO_CORPUS`` or ~/.cache/torch2pypto/corpus), extracts its modeling files, runs the
``translate`` CLI over them as one tree, then checks each output file in worker processes: it
parses; translating it again changes nothing; no byte changed outside the rewritten call sites
and the added import and kernels; the JSON report holds exactly the call sites translating the
file yields; the report's counts add up. Prints the results, the conversion report per torch
op and the fused regions (how many ops each fuses); exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import ast
import collections
import concurrent.futures
import csv
import dataclasses
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
import zipfile
from pathlib import Path

from torch2pypto.rules.codegen import Definition
from torch2pypto.translator.engine.emit import kernels_module_source
from torch2pypto.translator.engine.report import Record
from torch2pypto.translator.engine.translate import Translation, translate_source
from torch2pypto.translator.oracle.invariants import violations
from torch2pypto.translator.run.files import KERNELS_FILE
from torch2pypto.translator.run.json_report import STATUS_NAMES

HOST_SIDE = "host-side"  # the status of host-side sites and the category of host-side ops
REQUIREMENT = "transformers==5.23.0"
CATALOGUE = Path(__file__).with_name("catalogue.csv")  # the manual: torch ops and their PyPTO counterparts
WHEEL_GLOB = "transformers-5.23.0-*.whl"
EXPECTED = (530, 559_300)  # modeling files and their lines in that wheel
LAYOUT = "models+package"  # what extract() takes from the wheel: a different layout extracts again

# check -> how its failures are counted in the results block
CHECKS = {
    "crash": "crashes",
    "parse": "output parse failures",
    "idempotence": "idempotence failures",
    "untouched": "files with bytes changed outside rewrites",
    "report": "files whose report or output mismatch",
    "counts": "report counts that do not add up",
}

# what violations() reports that the parse and idempotence checks already count
COUNTED_ELSEWHERE = ("output is not valid Python", "not idempotent", "translating the output again")


@dataclasses.dataclass(frozen=True)
class Problem:
    """A check that failed for a file (``path`` as the report names it; "" for the whole run)."""

    path: str
    check: str
    message: str


@dataclasses.dataclass(frozen=True)
class Job:
    """One translated file to check: input, CLI output, its kernels import and its report records."""

    path: str  # as the report names it
    source: Path
    output: Path
    kernels_module: str
    records: tuple[dict, ...]


@dataclasses.dataclass(frozen=True)
class Checked:
    """What checking one file found, and the kernel definitions its translation needs."""

    problems: tuple[Problem, ...]
    definitions: tuple[Definition, ...] = ()


# ---- fetching ------------------------------------------------------------------------------


def default_cache() -> Path:
    return Path(os.environ.get("TORCH2PYPTO_CORPUS") or Path.home() / ".cache" / "torch2pypto" / "corpus")


def fetch(cache: Path) -> Path:
    """Download the wheel with pip and extract its modeling files, each once; return the models folder."""
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob(WHEEL_GLOB))
    if not wheels:
        pip = [sys.executable, "-m", "pip", "download", REQUIREMENT, "--no-deps", "--only-binary=:all:"]
        subprocess.run([*pip, "-d", str(cache)], check=True)
        wheels = sorted(cache.glob(WHEEL_GLOB))
    src = cache / "src"
    stamp = f"{wheels[-1].name} {LAYOUT}\n"
    if not (src / ".complete").is_file() or (src / ".complete").read_text() != stamp:
        partial = Path(tempfile.mkdtemp(prefix="src.", dir=cache))
        extract(wheels[-1], partial)
        (partial / ".complete").write_text(stamp)
        shutil.rmtree(src, ignore_errors=True)
        partial.rename(src)
    return src / "transformers" / "models"


def extract(wheel: Path, dest: Path) -> None:
    """Extract ``transformers/models/**/modeling_*.py``, the ``__init__.py`` of their packages and
    the package's modules outside ``models/`` (``modeling_utils.py``...), where their base classes live."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.startswith("transformers/") and n.endswith(".py")]
        models = [n for n in names if n.startswith("transformers/models/")]
        modeling = {n for n in models if n.rsplit("/", 1)[-1].startswith("modeling_")}
        packages = {n.rsplit("/", 1)[0] for n in modeling} | {"transformers/models"}
        inits = {n for n in models if n.endswith("/__init__.py") and n.rsplit("/", 1)[0] in packages}
        outside = {n for n in names if not n.startswith("transformers/models/")}
        for name in sorted(modeling | inits | outside):
            archive.extract(name, dest)


def corpus_files(root: Path) -> list[Path]:
    return sorted(root.rglob("modeling_*.py"))


def count_lines(data: bytes) -> int:
    return len(data.splitlines())


# ---- running the CLI -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CliRun:
    """One ``translate`` run over a tree: exit code, wall time, stderr, and its JSON report (None: none)."""

    returncode: int
    seconds: float
    stderr: str
    report: dict | None


def translate_command() -> list[str]:
    """The ``translate`` command, run from the torch2pypto this interpreter imports (an installed
    script may point at a module path of an older checkout)."""
    return [sys.executable, "-m", "torch2pypto.translator.run.cli"]


def translate_tree(root: Path, out: Path, jobs: int) -> CliRun:
    """Run ``translate ROOT -o OUT -j N --report OUT.json`` in a subprocess."""
    report = out.with_name(out.name + ".json")
    command = [*translate_command(), str(root), "-o", str(out), "-j", str(jobs), "--report", str(report)]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    return CliRun(result.returncode, seconds, result.stderr, data)


# ---- per-file checks (worker processes) ----------------------------------------------------


def decode(data: bytes) -> str:
    """Source bytes decoded as Python decodes them (PEP 263 cookie, BOM)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def parse_problem(data: bytes) -> str | None:
    """Why ``data`` is not a Python module (decoding included), or None."""
    try:
        ast.parse(decode(data))
    except (SyntaxError, UnicodeDecodeError, LookupError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def idempotence_problem(output: bytes, path: str, kernels_module: str | None) -> str | None:
    """Why translating the output again does not give it back byte for byte, or None."""
    try:
        again = translate_source(output, path, kernels_module=kernels_module)
    except Exception as exc:  # noqa: BLE001 - any exception here is the finding
        return f"second translation raised {type(exc).__name__}: {exc}"
    code = again.code.encode(again.encoding)
    return None if code == output else f"second translation changes it: {first_difference(output, code)}"


def untouched_problems(translation: Translation, source: bytes, output: bytes, kernels_module: str | None) -> list[str]:
    """Bytes of the output that differ from the input outside rewritten call sites and added code.

    ``violations`` also re-checks parsing and idempotence; the parse and idempotence checks
    count those, so they are left out here.
    """
    try:
        text = decode(output)
    except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
        return [f"output does not decode: {exc}"]
    found = violations(dataclasses.replace(translation, code=text), kernels_module=kernels_module, source=source)
    return [m for m in found if not m.startswith(COUNTED_ELSEWHERE)]


RECORD_FIELDS = ("line", "column", "end_line", "end_column", "api", "category", "pypto_api", "status", "reason")


def record_key(r: Record) -> tuple:
    """A record's fields as the JSON report spells them (statuses in its words, None for ""), without the path."""
    spelled = dataclasses.asdict(r) | {"pypto_api": r.pypto_api or None, "reason": r.reason or None}
    spelled["status"] = STATUS_NAMES[r.status]
    return tuple(spelled[k] for k in RECORD_FIELDS)


def json_key(record: dict) -> tuple:
    return tuple(record[k] for k in RECORD_FIELDS)


def report_problems(translation: Translation, output: bytes, records: tuple[dict, ...]) -> list[str]:
    """Where the CLI's output file and report records differ from translating the file here."""
    problems = []
    expected = translation.code.encode(translation.encoding)
    if output != expected:
        problems.append(f"output differs from translate_source: {first_difference(expected, output)}")
    mine = collections.Counter(record_key(r) for r in translation.records)
    reported = collections.Counter(json_key(r) for r in records)
    problems += [f"call site missing from the report: {_site(k)}" for k in sorted((mine - reported).elements())]
    problems += [f"call site only in the report: {_site(k)}" for k in sorted((reported - mine).elements())]
    return problems


def check_file(job: Job) -> Checked:
    """Every per-file check of one translated file."""
    source, output = job.source.read_bytes(), job.output.read_bytes()
    found = [Problem(job.path, "parse", m) for m in [parse_problem(output)] if m]
    try:
        translation = translate_source(source, job.path, kernels_module=job.kernels_module)
    except Exception as exc:  # noqa: BLE001 - the CLI translated it; failing here is a finding
        crash = Problem(job.path, "crash", f"in-process translation raised {type(exc).__name__}: {exc}")
        return Checked((*found, crash))
    kernels = job.kernels_module
    found += [Problem(job.path, "idempotence", m) for m in [idempotence_problem(output, job.path, kernels)] if m]
    found += [Problem(job.path, "untouched", m) for m in untouched_problems(translation, source, output, kernels)]
    found += [Problem(job.path, "report", m) for m in report_problems(translation, output, job.records)]
    return Checked(tuple(found), translation.definitions)


def check_files(jobs: list[Job], workers: int) -> list[Checked]:
    """``check_file`` of every job in ``workers`` processes, in job order."""
    if workers <= 1:
        return [check_file(job) for job in jobs]
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(check_file, jobs, chunksize=4))


def first_difference(a: bytes, b: bytes) -> str:
    """Where two texts first differ, as ``line N: old -> new``."""
    left, right = a.splitlines(keepends=True), b.splitlines(keepends=True)
    for n, (x, y) in enumerate(zip(left, right), 1):
        if x != y:
            return f"line {n}: {x.decode(errors='replace')!r} -> {y.decode(errors='replace')!r}"
    return f"{len(left)} lines -> {len(right)} lines"


def _site(key: tuple) -> str:
    line, column, _, _, api, _, _, status, reason = key
    return f"{line}:{column} {api} {status}" + (f" ({reason})" if reason else "")


# ---- whole-run checks ----------------------------------------------------------------------


def tree_sources(root: Path) -> list[Path]:
    """The tree's .py files relative to ``root``, in path order (the CLI's order)."""
    return sorted(p.relative_to(root) for p in root.rglob("*.py") if p.relative_to(root) != Path(KERNELS_FILE))


def kernels_import(root: Path, rel: Path) -> str:
    """The import target of the shared kernels module for ``rel``: relative in a package, else absolute."""
    module = KERNELS_FILE.removesuffix(".py")
    return "." * len(rel.parts) + module if (root / "__init__.py").is_file() else module


def count_problems(report: dict) -> list[str]:
    """Where the report's summary and per-op counts differ from counting its files and records."""
    files, records, summary = report["files"], report["records"], report["summary"]
    status = collections.Counter(f["status"] for f in files)
    sites = collections.Counter(r["status"] for r in records)
    reasons = collections.Counter(r["reason"] for r in records if r["status"] == "left-as-torch")
    counted: dict[str, object] = {
        "files_seen": len(files),
        "files_changed": status["changed"],
        "files_failed": status["failed"],
        "sites_seen": len(records),
        "converted": sites["converted"],
        "left_as_torch": sites["left-as-torch"],
        "ambiguous": sites["ambiguous"],
        "host_side": sites["host-side"],
        "left_as_torch_by_reason": dict(reasons),
    }
    said = dict(summary, left_as_torch_by_reason={x["reason"]: x["count"] for x in summary["left_as_torch_by_reason"]})
    problems = [f"summary {k} is {said.get(k)!r}, records give {v!r}" for k, v in counted.items() if said.get(k) != v]
    candidates = len(records) - sites["host-side"]
    rate = sites["converted"] / candidates * 100 if candidates else 100.0
    if not math.isclose(summary["rate"], rate):
        problems.append(f"summary rate is {summary['rate']!r}, the records give {rate!r}")
    if set(sites) - set(STATUS_NAMES.values()):
        problems.append(f"records with unknown statuses: {sorted(set(sites) - set(STATUS_NAMES.values()))}")
    ops = {(op["api"], op["category"]): op for op in report["ops"]}
    if len(ops) != len(report["ops"]):
        problems.append("an op appears twice in ops")
    by_op = collections.defaultdict(collections.Counter)
    for r in records:
        by_op[r["api"], r["category"]][r["status"]] += 1
    for key in sorted(set(ops) | set(by_op)):
        op, count = ops.get(key, {}), by_op.get(key, collections.Counter())
        want = {"count": count.total(), "converted": count["converted"]}
        want.update(left_as_torch=count["left-as-torch"], ambiguous=count["ambiguous"], host_side=count["host-side"])
        got = {k: op.get(k, 0) for k in want}
        if got != want:
            problems.append(f"ops row {key[0]} ({key[1]}) says {got}, the records give {want}")
    paths = {f["path"] for f in files}
    problems += [f"record for a file not in files: {p}" for p in sorted({r["path"] for r in records} - paths)]
    return problems


def kernels_problems(out: Path, definitions: list[Definition]) -> list[Problem]:
    """The shared kernels module parses and is exactly what the files' definitions make, in path order."""
    path = out / KERNELS_FILE
    if not path.is_file():
        return [Problem(KERNELS_FILE, "report", "missing, yet translations need definitions")] if definitions else []
    data = path.read_bytes()
    found = [Problem(KERNELS_FILE, "parse", m) for m in [parse_problem(data)] if m]
    expected = kernels_module_source(None, definitions).encode("utf-8") if definitions else b""
    if data != expected:
        where = first_difference(expected, data)
        found.append(Problem(KERNELS_FILE, "report", f"differs from what the files' definitions make: {where}"))
    return found


def check_run(root: Path, out: Path, run: CliRun, workers: int) -> list[Problem]:
    """Every check of a ``translate ROOT -o OUT`` run: the CLI's outcome, each file, the kernels module."""
    report = run.report
    if report is None:
        return [Problem("", "crash", f"translate exited {run.returncode} without a report: {_tail(run.stderr)}")]
    failed = {f["path"]: f["reason"] for f in report["files"] if f["status"] == "failed"}
    problems = [Problem(path, "crash", reason) for path, reason in failed.items()]
    if run.returncode != (1 if failed else 0):
        problems.append(Problem("", "crash", f"translate exited {run.returncode}: {_tail(run.stderr)}"))
    problems += [Problem("", "counts", m) for m in count_problems(report)]

    records = collections.defaultdict(list)
    for r in report["records"]:
        records[r["path"]].append(r)
    reported = {f["path"] for f in report["files"]}
    sources = tree_sources(root)
    jobs = []
    for rel in sources:
        path = str(root / rel)
        if path not in reported:
            problems.append(Problem(path, "report", "a source file the report does not list"))
        elif path not in failed:
            output = out / rel
            if output.is_file():
                jobs.append(Job(path, root / rel, output, kernels_import(root, rel), tuple(records[path])))
            else:
                problems.append(Problem(path, "crash", "no output file"))
    extra = reported - {str(root / rel) for rel in sources}
    problems += [Problem(path, "report", "the report lists a file the tree does not have") for path in sorted(extra)]
    checked = check_files(jobs, workers)
    problems += [p for c in checked for p in c.problems]
    problems += kernels_problems(out, [d for c in checked for d in c.definitions])
    return problems


def _tail(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "(no output)"


# ---- the results ---------------------------------------------------------------------------


@dataclasses.dataclass
class OpCount:
    """Call sites of one torch API over the corpus, by outcome."""

    api: str
    category: str
    sites: int = 0
    converted: int = 0
    ambiguous: int = 0
    host_side: int = 0
    left_as_torch: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # reason -> sites


def conversion_report(records: list[dict]) -> list[OpCount]:
    """One row per torch API, most call sites first."""
    ops: dict[str, OpCount] = {}
    for r in records:
        op = ops.setdefault(r["api"], OpCount(r["api"], r["category"]))
        op.sites += 1
        if r["status"] == "converted":
            op.converted += 1
        elif r["status"] == "ambiguous":
            op.ambiguous += 1
        elif r["status"] == "host-side":
            op.host_side += 1
        else:
            op.left_as_torch[r["reason"]] += 1
    return sorted(ops.values(), key=lambda op: (-op.sites, op.api))


def failing_files(problems: list[Problem]) -> dict[str, set[str]]:
    """Per check, the files (or "" for the run) it failed for."""
    found = {check: set() for check in CHECKS}
    for p in problems:
        found[p.check].add(p.path)
    return found


def print_results(files: int, lines: int, run: CliRun, problems: list[Problem], show: int = 10) -> None:
    """The results block (files failing each check, then the problems themselves) and the conversion report."""
    failing = failing_files(problems)
    print(f"\n  {'files':42} {files:>9,}\n  {'lines':42} {lines:>9,}")
    for check, label in CHECKS.items():
        print(f"  {label:42} {len(failing[check]):>9,}")
    for check, label in CHECKS.items():
        found = [p for p in problems if p.check == check]
        if found:
            print(f"\n{label}:")
            for p in found if check == "crash" else found[:show]:
                print(f"  {p.path or '(run)'}: {p.message}")
            if check != "crash" and len(found) > show:
                print(f"  ... and {len(found) - show} more")
    if run.report is not None:
        print_conversion_report(run.report["records"])
        print_regions(run.report.get("regions", []))


def print_regions(regions: list[dict]) -> None:
    """The fused regions: how many, in how many files, and how many torch ops they fuse each."""
    sizes = collections.Counter(len(r["ops"]) for r in regions)
    ops = sum(k * n for k, n in sizes.items())
    print(f"\nfused regions: {len(regions):,} in {len({r['path'] for r in regions}):,} files, {ops:,} ops"
          f" ({ops / max(1, len(regions)):.1f} per region); regions by ops fused:")
    print("  " + ", ".join(f"{k}: {n:,}" for k, n in sorted(sizes.items())))


def print_conversion_report(records: list[dict], unmapped_rows: int = 25) -> None:
    """Per torch API, most call sites first: converted, ambiguous, host-side, left as torch by reason."""
    ops = conversion_report(records)
    print(f"\nconversion report: {len(records):,} torch call sites of {len(ops)} APIs, most frequent first")
    print(f"  {'sites':>6} {'conv':>6} {'ambig':>6} {'host':>6} {'torch':>6}  api (category)")
    hidden = [op for op in ops if op.category == "unmapped"][unmapped_rows:]
    hidden_apis = {op.api for op in hidden}
    for op in ops:
        if op.api in hidden_apis:
            continue
        counts = f"{op.sites:6,} {op.converted:6,} {op.ambiguous:6,} {op.host_side:6,} {op.left_as_torch.total():6,}"
        print(f"  {counts}  {op.api} ({op.category})")
        if op.category != "unmapped":
            for reason, n in op.left_as_torch.most_common():
                print(f"  {'':27} {n:6,}    left as torch: {reason}")
    if hidden:
        print(f"  ... {len(hidden)} more unmapped APIs with {sum(op.sites for op in hidden):,} sites")
    converted = sum(op.converted for op in ops)
    host_side = sum(op.host_side for op in ops)
    ambiguous = sum(op.ambiguous for op in ops)
    kernel = len(records) - host_side
    mapped = sum(op.sites - op.host_side for op in ops if op.category not in ("unmapped", "host-side"))
    print(f"\nconversion rate: {converted:,} of the {kernel:,} call sites that are not host-side ({_percent(converted, kernel)});"
          f" of the {mapped:,} such sites of ops in the mapping table: {_percent(converted, mapped)}")  # fmt: skip
    print(f"host-side: {host_side:,} of {len(records):,} call sites ({_percent(host_side, len(records))});"
          f" ambiguous: {ambiguous:,} ({_percent(ambiguous, len(records))})")  # fmt: skip
    manual = manual_ops()
    m = Metrics.of(records, manual)
    print(f"manual ops (rows of {CATALOGUE.name}), sites neither host-side nor of host-side ops: {m.manual:,}, converted {m.manual_converted:,}"
          f" ({_percent(m.manual_converted, m.manual)}); ambiguous: {_percent(m.ambiguous, m.sites)} of all sites")  # fmt: skip
    print_manual_gaps(records, manual)


def print_manual_gaps(records: list[dict], manual: frozenset[str], rows: int = 40) -> None:
    """Per API of a manual op: its sites not converted (ambiguous, left as torch by reason), most first."""
    gaps: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in records:
        if r["status"] in ("ambiguous", "left-as-torch") and r["category"] != HOST_SIDE and in_manual(r["api"], manual):
            gaps[r["api"]]["ambiguous" if r["status"] == "ambiguous" else r["reason"]] += 1
    order = sorted(gaps.items(), key=lambda item: (-item[1].total(), item[0]))
    print(f"\nmanual ops' sites not converted, by API ({len(order)} APIs, {sum(c.total() for _, c in order):,} sites):")
    for api, reasons in order[:rows]:
        print(f"  {reasons.total():6,}  {api}")
        for reason, n in reasons.most_common(4):
            print(f"  {'':6}  {n:6,}  {reason}")
    if len(order) > rows:
        print(f"  ... {len(order) - rows} more APIs with {sum(c.total() for _, c in order[rows:]):,} sites")


def manual_ops(path: Path = CATALOGUE) -> frozenset[str]:
    """The torch op names the manual's rows name, spelt without underscores and in lower case.

    A row may name several (``eq/ne/lt``; ``bitwise_and/or/xor``: later names share the first's
    prefix; ``rotate_half / rope``) and add a note in parentheses (``max (reduction)``, ``to(dtype)``).
    """
    names = set()
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            for spelling in re.sub(r"\([^)]*\)", "", row["torch_op"]).split(" / "):
                first, *rest = [p.strip() for p in spelling.split("/") if p.strip()]
                prefix = first.rpartition("_")[0] + "_" if "_" in first else ""
                names.update(_spelt(p if p.startswith(prefix) else prefix + p) for p in (first, *rest))
    return frozenset(names)


def _spelt(name: str) -> str:
    return name.replace("_", "").lower()


def in_manual(api: str, manual: frozenset[str]) -> bool:
    """Whether a torch API's op is a row of the manual: its last name (``torch.Tensor.add_``: add,
    ``torch.nn.LayerNorm``: layer_norm), in-place forms as their op."""
    name = api.rpartition(".")[2]
    return _spelt(name) in manual or name.endswith("_") and _spelt(name[:-1]) in manual


@dataclasses.dataclass(frozen=True)
class Metrics:
    """The issue's numbers: sites of manual ops that are not host-side and how many converted; ambiguity."""

    sites: int
    ambiguous: int
    manual: int  # sites whose op is in the manual, neither host-side nor of a host-side op (an ambiguous x.view())
    manual_converted: int

    @classmethod
    def of(cls, records: list[dict], manual: frozenset[str]) -> Metrics:
        kept = [r for r in records if HOST_SIDE not in (r["status"], r["category"]) and in_manual(r["api"], manual)]
        return cls(
            sites=len(records),
            ambiguous=sum(r["status"] == "ambiguous" for r in records),
            manual=len(kept),
            manual_converted=sum(r["status"] == "converted" for r in kept),
        )


def _percent(part: int, whole: int) -> str:
    return f"{part / whole * 100:.1f}%" if whole else "n/a"


def results_data(files: int, lines: int, run: CliRun, problems: list[Problem]) -> dict:
    """The results as JSON-ready data (``--report``)."""
    records = run.report["records"] if run.report is not None else []
    return {
        "corpus": {"requirement": REQUIREMENT, "files": files, "lines": lines},
        "translate": {"seconds": run.seconds, "exit": run.returncode},
        "checks": {check: len(paths) for check, paths in failing_files(problems).items()},
        "metrics": dataclasses.asdict(Metrics.of(records, manual_ops())),
        "regions": collections.Counter(len(r["ops"]) for r in (run.report or {}).get("regions", [])),
        "problems": [dataclasses.asdict(p) for p in problems],
        "ops": [
            dict(dataclasses.asdict(op), left_as_torch=dict(op.left_as_torch.most_common()))
            for op in conversion_report(records)
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=default_cache(), help="where the wheel and its sources are kept")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (CLI and checks)")
    parser.add_argument("--report", type=Path, metavar="FILE.json", help="also write the results as JSON")
    args = parser.parse_args(argv)

    root = fetch(args.cache)
    files = corpus_files(root)
    lines = sum(count_lines(f.read_bytes()) for f in files)
    note = "" if (len(files), lines) == EXPECTED else f" (expected {EXPECTED[0]} files, {EXPECTED[1]:,} lines)"
    print(f"corpus: {REQUIREMENT}, {len(files)} modeling files, {lines:,} lines{note}\n  {root}", flush=True)
    with tempfile.TemporaryDirectory(prefix="torch2pypto-corpus-") as scratch:
        out = Path(scratch) / "out"
        run = translate_tree(root, out, args.jobs)
        print(f"translate -j{args.jobs}: {run.seconds:.1f} s, exit {run.returncode}; checking...", flush=True)
        problems = check_run(root, out, run, args.jobs)
    print_results(len(files), lines, run, problems)
    if args.report:
        args.report.write_text(json.dumps(results_data(len(files), lines, run, problems), indent=2) + "\n")
    return 1 if problems or (len(files), lines) != EXPECTED else 0


if __name__ == "__main__":
    sys.exit(main())
