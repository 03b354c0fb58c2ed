"""The end-of-run summary: what happened to each file and call site, and which ops to port next."""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from torch2pypto.translator.engine.report import AMBIGUOUS, CONVERTED, HOST_SIDE, UNSUPPORTED, Record

UNCHANGED, CHANGED, FAILED = "unchanged", "changed", "failed"


@dataclasses.dataclass(frozen=True)
class FileOutcome:
    """One input file: ``status`` is unchanged, changed or failed (``reason`` says why, one line)."""

    path: str
    status: str
    reason: str = ""
    records: tuple[Record, ...] = ()
    regions: tuple = ()  # engine.regions.Region of each fused region


@dataclasses.dataclass(frozen=True)
class OpRow:
    """Call sites of one torch API across the run."""

    api: str
    category: str
    count: int
    converted: int
    left_as_torch: int
    ambiguous: int
    host_side: int = 0

    @property
    def status(self) -> str:
        """``converted``, ``left as torch``, ``ambiguous`` or ``host-side`` when all sites agree, else a line per status."""
        parts = [
            (self.left_as_torch, "left as torch"),
            (self.ambiguous, "ambiguous"),
            (self.converted, "converted"),
            (self.host_side, "host-side"),
        ]
        for n, word in parts:
            if n == self.count:
                return word
        return "\n".join(f"{n} {word}" for n, word in parts if n)


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """Counts over a run; ``ops`` is in porting order (see ``porting_order``)."""

    files_seen: int
    files_changed: int
    files_failed: int
    failures: tuple[tuple[str, str], ...]
    sites_seen: int
    converted: int
    left_as_torch: dict[str, int]
    ambiguous: int
    rate: float
    ops: tuple[OpRow, ...]
    host_side: int = 0
    regions: tuple = ()  # every fused region of the run, in file order

    @property
    def left_as_torch_total(self) -> int:
        return sum(self.left_as_torch.values())


def porting_order(op: OpRow) -> tuple:
    """Sort key: what a migration lead ports next comes first.

    1. Ops with sites left as torch (unsupported or unmapped), most such sites first.
    2. Then ops with ambiguous sites (``--assume-tensors`` or an annotation would settle them),
       most such sites first.
    3. Then converted ops, most sites first.
    4. Last, host-side ops (no kernel by design), most sites first.
    Ties go to the op with more sites, then to the API name, then to the category.
    """
    if op.left_as_torch:
        return (0, -op.left_as_torch, -op.count, op.api, op.category)
    if op.ambiguous:
        return (1, -op.ambiguous, -op.count, op.api, op.category)
    if op.converted:
        return (2, 0, -op.count, op.api, op.category)
    return (3, 0, -op.count, op.api, op.category)


def summarize_run(files: Sequence[FileOutcome]) -> RunSummary:
    """Count files and call sites; a row per API and category (``torch.arange(n) + k`` is an add
    site of arange_plus's category), in ``porting_order``.

    The rate is converted over the sites that could have a kernel: host-side sites are left out.
    """
    records = [r for f in files for r in f.records]
    reasons = collections.Counter(r.reason for r in records if r.status == UNSUPPORTED)
    by_op: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        by_op.setdefault((r.api, r.category), []).append(r)
    ops = (_op_row(api, sites) for (api, _), sites in by_op.items())
    converted = sum(r.status == CONVERTED for r in records)
    host_side = sum(r.status == HOST_SIDE for r in records)
    candidates = len(records) - host_side
    return RunSummary(
        files_seen=len(files),
        files_changed=sum(f.status == CHANGED for f in files),
        files_failed=sum(f.status == FAILED for f in files),
        failures=tuple((f.path, f.reason) for f in files if f.status == FAILED),
        sites_seen=len(records),
        converted=converted,
        left_as_torch=dict(sorted(reasons.items(), key=lambda item: (-item[1], item[0]))),
        ambiguous=sum(r.status == AMBIGUOUS for r in records),
        rate=converted * 100 / candidates if candidates else 100.0,  # 29 of 50 is 58.0, not 57.99...
        ops=tuple(sorted(ops, key=porting_order)),
        host_side=host_side,
        regions=tuple(r for f in files for r in f.regions),
    )


def _op_row(api: str, sites: list[Record]) -> OpRow:
    count = collections.Counter(r.status for r in sites)
    return OpRow(
        api, sites[0].category, len(sites), count[CONVERTED], count[UNSUPPORTED], count[AMBIGUOUS], count[HOST_SIDE]
    )


def format_rate(rate: float) -> str:
    """One decimal, rounded down: 99.96% reads 99.9%, never a 100% that is not."""
    return f"{math.floor(round(rate * 10, 6)) / 10:.1f}%"


_STYLES = {"left as torch": "yellow", "ambiguous": "magenta", "converted": "green", "host-side": "cyan"}


def print_run_summary(console: Console, summary: RunSummary, *, top: int | None = 20) -> None:
    """The summary lines, the first ``top`` fused regions, then the ``top`` ops in porting order
    (None: all of them)."""
    s = summary
    lines = Table.grid(padding=(0, 1))
    lines.add_column(no_wrap=True)
    lines.add_column(justify="right", no_wrap=True)
    lines.add_column(overflow="fold")
    lines.add_row("Files", str(s.files_seen), "seen")
    lines.add_row("  changed", str(s.files_changed), "")
    lines.add_row("  failed", str(s.files_failed), "")
    for path, reason in s.failures:
        lines.add_row("", "", f"[red]{escape(path)}[/]: {escape(reason)}")
    lines.add_row("Call sites", str(s.sites_seen), "seen")
    lines.add_row("  converted", str(s.converted), "")
    lines.add_row("  left as torch", str(s.left_as_torch_total), "")
    for reason, n in s.left_as_torch.items():
        lines.add_row("", "", f"[yellow]{n}[/] {escape(reason)}")
    lines.add_row("  ambiguous", str(s.ambiguous), "receiver not known to be a tensor (see --assume-tensors)" if s.ambiguous else "")
    lines.add_row("  host-side", str(s.host_side), "no kernel by design: views, creation, device moves, dropout" if s.host_side else "")
    lines.add_row("Conversion rate", format_rate(s.rate), "of the sites that are not host-side" if s.host_side else "")
    console.print(lines)
    if s.regions:
        listed = s.regions if top is None else s.regions[:top]
        regions = Table.grid(padding=(0, 1))
        regions.add_column(overflow="fold")
        regions.add_row(f"Fused regions: {len(s.regions)}, one kernel each")
        for r in listed:
            regions.add_row(escape(f"  {r.path}:{r.span[0]}-{r.span[2]} {r.function}: {r.kernel}: {', '.join(r.ops)}"))
        console.print(regions)
        if len(listed) < len(s.regions):
            console.print(f"... and {len(s.regions) - len(listed)} more regions (the JSON report lists all).", highlight=False)
    if not s.ops:
        return
    shown = s.ops if top is None else s.ops[:top]
    console.print("Torch ops in porting order: left as torch, then ambiguous, then converted, then host-side")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("sites", justify="right", no_wrap=True)
    table.add_column("torch API", overflow="fold")
    table.add_column("category", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for op in shown:
        status = op.status
        style = _STYLES.get(status) or ("yellow" if op.left_as_torch else "magenta")
        table.add_row(str(op.count), op.api, op.category, f"[{style}]{escape(status)}[/]")
    console.print(table)
    if len(shown) < len(s.ops):
        console.print(f"... and {len(s.ops) - len(shown)} more ops (the JSON report lists all).", highlight=False)
