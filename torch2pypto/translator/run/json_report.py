"""``--report FILE.json``: the run summary as data, one record per call site (docs/report.md)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from importlib import metadata, resources
from pathlib import Path

from torch2pypto.translator.engine.report import AMBIGUOUS, CONVERTED, HOST_SIDE, UNSUPPORTED, Record
from torch2pypto.translator.run.summary import FileOutcome, RunSummary

SCHEMA_VERSION = 1

# Record statuses in the report's words, the same as the summary's.
STATUS_NAMES = {CONVERTED: "converted", UNSUPPORTED: "left-as-torch", AMBIGUOUS: "ambiguous", HOST_SIDE: "host-side"}


def schema() -> dict:
    """The JSON Schema (draft 2020-12) that reports of this ``SCHEMA_VERSION`` follow."""
    text = resources.files(__package__).joinpath("report.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def report_data(files: Sequence[FileOutcome], summary: RunSummary) -> dict:
    """The report as JSON-ready data; the counts are ``summary``'s, so they match the terminal."""
    s = summary
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "torch2pypto", "version": metadata.version("torch2pypto")},
        "summary": {
            "files_seen": s.files_seen,
            "files_changed": s.files_changed,
            "files_failed": s.files_failed,
            "sites_seen": s.sites_seen,
            "converted": s.converted,
            "left_as_torch": s.left_as_torch_total,
            "left_as_torch_by_reason": [{"reason": r, "count": n} for r, n in s.left_as_torch.items()],
            "ambiguous": s.ambiguous,
            "host_side": s.host_side,
            "rate": s.rate,
        },
        "ops": [
            {
                "api": op.api,
                "category": op.category,
                "count": op.count,
                "converted": op.converted,
                "left_as_torch": op.left_as_torch,
                "ambiguous": op.ambiguous,
                "host_side": op.host_side,
            }
            for op in s.ops
        ],
        "files": [{"path": f.path, "status": f.status, "reason": f.reason or None} for f in files],
        "records": [_record(r) for f in files for r in f.records],
        "regions": [
            {"path": r.path, "line": r.span[0], "end_line": r.span[2], "function": r.function, "ops": list(r.ops),
             "wrapper": r.wrapper, "kernel": r.kernel}
            for r in summary.regions
        ],
    }


def _record(r: Record) -> dict:
    return {
        "path": r.path,
        "line": r.line,
        "column": r.column,
        "end_line": r.end_line,
        "end_column": r.end_column,
        "api": r.api,
        "category": r.category,
        "pypto_api": r.pypto_api or None,
        "status": STATUS_NAMES[r.status],
        "reason": r.reason or None,
    }


def write_report(path: Path, files: Sequence[FileOutcome], summary: RunSummary) -> None:
    """Write the report to ``path`` atomically (a temporary file in the same folder, then rename)."""
    text = json.dumps(report_data(files, summary), indent=2, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; give it a normal file's mode
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
