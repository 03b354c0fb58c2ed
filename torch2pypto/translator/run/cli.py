"""``translate``: the command line, for one file or whole trees.

Exit codes follow black, ruff and libcst: 0 fine; 1 a gate failed (``--check``, ``--strict``,
``--fail-under``, ``--verify``) or a file of a multi-file run could not be translated; 2 bad
usage, input or config (one line on stderr, nothing written); 130 interrupted (no trace left, or,
once writing has begun, after every file is written).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.text import Text

from torch2pypto.mapping import load_table
from torch2pypto.translator.engine import emit
from torch2pypto.translator.engine.report import AMBIGUOUS, CONVERTED, HOST_SIDE
from torch2pypto.translator.engine.transform import Options
from torch2pypto.translator.engine.translate import Translation
from torch2pypto.translator.run import files, runner
from torch2pypto.translator.run.config import ConfigError, apply_config, load_config
from torch2pypto.translator.run.json_report import write_report
from torch2pypto.translator.run.runner import Job, Result, Work
from torch2pypto.translator.run.summary import (
    CHANGED,
    FAILED,
    UNCHANGED,
    FileOutcome,
    RunSummary,
    format_rate,
    print_run_summary,
    summarize_run,
)


class InputError(Exception):
    """Bad usage or input: reported as one line, exit 2, nothing written."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """The inputs of a run: files given one by one (inline kernels) and folders (a shared module)."""

    files: tuple[Path, ...]
    trees: tuple[files.Tree, ...]

    @property
    def single_file(self) -> bool:
        return len(self.files) == 1 and not self.trees

    @property
    def mixed(self) -> bool:
        """Several folders, or folders and files: no one folder ``-o`` could mirror."""
        return bool(self.trees) and len(self.trees) + len(self.files) > 1

    def file_output(self, output: Path, source: Path) -> Path:
        """Where ``-o`` puts a file given by name: ``output`` for one file, unless it is a folder;
        into the folder ``output`` for several."""
        return output / source.name if output.is_dir() or not self.single_file else output

    def jobs(self, output: Path | None = None, in_place: bool = False) -> list[Job]:
        """One job per source file, its translation staged for ``output`` (``-o``) or in place."""
        jobs = [Job(f, str(f), target=f if in_place else output and self.file_output(output, f)) for f in self.files]
        for tree in self.trees:
            for rel in tree.sources:
                source = tree.root / rel
                target = source if in_place else output and output / rel
                jobs.append(Job(source, str(source), tree.kernels_import(rel), target))
        return jobs


def main(argv: list[str] | None = None) -> int:
    out, err = _console(), _console(stderr=True)
    staging = runner.Staging()
    targets: list[Path] = []  # where translations are staged
    created: list[Path] = []  # the folders staging creates
    try:
        try:
            args = _arguments(argv)
            plan = _plan(args)
            options = _options(args)
            work = Work(options, code=_to_stdout(args, plan), diff=args.diff, force=args.force, staging=staging)
            jobs = plan.jobs(args.output, args.in_place)
            _check_outputs(args, plan, jobs)
            targets = [job.target for job in jobs if job.target is not None]
            created = runner.missing_folders(targets)
            if plan.single_file:
                translation = _translate_one(jobs[0], options)
                results = [runner.result_of(translation, work, jobs[0].target)]
            else:
                results = runner.run(jobs, work, args.jobs or os.cpu_count() or 1, progress=err)
            kernels = _kernels_modules(plan, results)
            if not args.force:
                _refuse_read_only(args, kernels)
        except BaseException:  # nothing written: no staged file, no folder made for one
            staging.discard(targets)
            runner.remove_empty(created)
            raise
    except (InputError, ConfigError) as exc:
        err.print(f"translate: error: {exc}", markup=False, soft_wrap=True)
        return 2
    except OSError as exc:  # an unreadable folder, a file that cannot be staged
        verb = "cannot write " if isinstance(exc, runner.CannotWrite) else ""
        err.print(f"translate: error: {verb}{exc.filename}: {exc.strerror}", markup=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err.print("translate: interrupted; nothing written", markup=False)
        return 130
    try:
        unread = _output(args, plan, jobs, results, kernels, out, staging)
    except KeyboardInterrupt:  # held while files were written (_output)
        return _interrupted(args, err)
    except BrokenPipeError:  # `translate ... --diff | head`: stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        err.print(f"translate: error: cannot write {exc.filename}: {exc.strerror}", markup=False, soft_wrap=True)
        return 1
    finally:
        staging.discard(targets)
    try:
        status = _finish(args, plan, results, kernels, unread, err)
        return max(status, _verify(translation, err)) if args.verify else status
    except KeyboardInterrupt:  # the summary, report or verification cut short: what was written stays
        return _interrupted(args, err)


def _interrupted(args: argparse.Namespace, err: Console) -> int:
    """Ctrl-C once writing may have begun: one line saying what was written; exit 130."""
    wrote = args.in_place or args.output is not None
    err.print(f"translate: interrupted; {'every file was written first' if wrote else 'nothing written'}", markup=False)
    return 130


def _verify(translation: Translation, err: Console) -> int:
    """``--verify``: the table on stderr with the summary (stdout carries only code); the exit code."""
    try:
        from torch2pypto.translator.verification import interpreter  # imports torch

        interpreter.setup()  # before pypto is imported: its run data and logs go to a temp dir, not ~/.pypto
        from torch2pypto.translator.verification.verify import verify_translation
    except ImportError as exc:
        err.print(f"translate: error: --verify needs torch and pypto: pip install 'torch2pypto[verify]' ({exc})", markup=False, soft_wrap=True)
        return 2
    return 0 if verify_translation(translation, err, emit.standalone(translation.code)) else 1


def _to_stdout(args: argparse.Namespace, plan: Plan) -> bool:
    """``translate FILE``: the translation goes to stdout."""
    return plan.single_file and not (args.output is not None or args.in_place or args.diff or args.check or args.analyze)


_PIPED_WIDTH = 1 << 16  # columns of output that is not a terminal's: in effect, lines are never wrapped


def _console(stderr: bool = False) -> Console:
    """Colour on a terminal; no escape codes at all with NO_COLOR (rich alone would keep bold).

    Output to a pipe or file is not wrapped (rich would wrap it at 80 columns, splitting API
    names), unless COLUMNS sets a width.
    """
    plain = os.environ.get("NO_COLOR", "") != ""
    console = Console(stderr=stderr, highlight=False, color_system=None if plain else "auto")
    if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        console.width = _PIPED_WIDTH
    return console


class _Terms(argparse._ExtendAction):
    """Comma-separated, repeatable (``--select to,type_as --select mean``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, type=lambda text: [t.strip() for t in text.split(",") if t.strip()], **kwargs)


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line (``translate: error: ...``, exit 2), not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        raise InputError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="translate",
        description="Translate PyTorch source into PyPTO kernels and host wrappers.",
        epilog="Settings can also live in [tool.torch2pypto] of the project's pyproject.toml; flags win.",
    )
    add = parser.add_argument
    add("paths", nargs="+", type=Path, metavar="PATH", help="files and folders to translate")
    add("-o", "--output", type=Path, metavar="OUT", help="a file for one file (default: stdout), a folder for a folder or several files")
    add("--in-place", action="store_true", help="rewrite the files in place (each one replaced atomically)")
    add("--force", action="store_true", help="with --in-place or -o, replace read-only files too")
    add("--diff", action="store_true", help="print a unified diff of every file that would change; write nothing")
    add("--check", action="store_true", help="write nothing; exit 1 if any file would change")
    add("--analyze", action="store_true", help="write the summary and report only, no code")
    add("--strict", action="store_true", help="exit 1 if any call site was left as torch or is ambiguous")
    add("--fail-under", type=_percent, metavar="RATE", help="exit 1 if the conversion rate is below RATE percent")
    add("--report", type=Path, metavar="FILE.json", help="write the call-site report as JSON")
    add("--select", action=_Terms, metavar="TERMS", help="only these torch ops, APIs or mapping categories")
    add("--ignore", action=_Terms, metavar="TERMS", help="leave these torch ops, APIs or mapping categories alone")
    add("--exclude", action=_Terms, metavar="GLOBS", help="skip these files and folders (.gitignore patterns)")
    add("--assume-tensors", action="store_true", help="treat receivers not known to be tensors as tensors")
    add("--no-fuse", action="store_true", help="one kernel per torch call: do not fuse runs of tensor statements")
    add("--module-bases", action=_Terms, metavar="CLASSES", help="take these classes (absolute dotted names) as nn.Module bases")
    add("-j", "--jobs", type=_positive, metavar="N", help="worker processes (default: the CPU count)")
    add("--verify", action="store_true", help="one file: run each generated kernel in PyPTO's CPU interpreter vs torch")
    add("--version", action="version", version=f"%(prog)s (torch2pypto) {_version()}")
    return parser


def _version() -> str:
    """The installed package's version (``unknown`` for sources run without installing them)."""
    try:
        return metadata.version("torch2pypto")
    except metadata.PackageNotFoundError:
        return "unknown"


def _percent(text: str) -> float:
    with contextlib.suppress(ValueError):
        if 0 <= (value := float(text)) <= 100:
            return value
    raise argparse.ArgumentTypeError(f"expected a percentage from 0 to 100, got {text}")


def _positive(text: str) -> int:
    with contextlib.suppress(ValueError):
        if (value := int(text)) >= 1:
            return value
    raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text}")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    """Parsed flags over the settings of the nearest ``[tool.torch2pypto]``, checked for sense."""
    parser = _parser()
    args = parser.parse_args(argv)
    configured = apply_config(parser, args, load_config(parser, args.paths))
    for mode in _overridden_modes(args, configured):
        setattr(args, mode, parser.get_default(mode))
    dry = [flag for flag, on in (("--diff", args.diff), ("--check", args.check), ("--analyze", args.analyze)) if on]
    if args.in_place and args.output is not None:
        raise InputError("--in-place and -o exclude each other")
    if dry and (args.output is not None or args.in_place):
        raise InputError(f"{dry[0]} writes nothing; drop {'-o' if args.output is not None else '--in-place'}")
    if args.report is not None and not args.report.parent.resolve().is_dir():
        raise InputError(f"{args.report}: folder {args.report.parent} does not exist")
    if args.report is not None and args.report.is_dir():
        raise InputError(f"{args.report}: --report is a folder")
    return args


_WRITING, _DRY = ("output", "in_place"), ("diff", "check", "analyze")


def _overridden_modes(args: argparse.Namespace, configured: set[str]) -> set[str]:
    """The config's modes that a mode flag excludes (flags win): -o and --in-place, writing and dry runs."""
    flagged = [m for m in (*_WRITING, *_DRY) if m not in configured and getattr(args, m) not in (None, False)]
    return {
        mode
        for mode in configured & {*_WRITING, *_DRY}
        for flag in flagged
        if (mode in _WRITING) != (flag in _WRITING) or {mode, flag} == set(_WRITING)
    }


def _plan(args: argparse.Namespace) -> Plan:
    """The inputs, each once (a file or folder inside a folder given is covered by it)."""
    for path in args.paths:
        if not path.exists():
            raise InputError(f"{path}: no such file or folder")
    folders = [p for p in _unique(args.paths) if p.is_dir()]
    folders = [f for f in folders if not any(_inside(f, g) and f.resolve() != g.resolve() for g in folders)]
    loose = tuple(p for p in _unique(args.paths) if not p.is_dir() and not any(_inside(p, g) for g in folders))
    trees = tuple(files.gather(f, args.exclude or ()) for f in folders)
    plan = Plan(loose, trees)
    if args.verify and not plan.single_file:
        raise InputError("--verify takes one file")
    writes = args.output is not None or args.in_place
    if not plan.single_file and not (writes or args.diff or args.check or args.analyze):
        if plan.mixed:
            raise InputError(f"several folders, or folders and files, need {_MODES}")
        raise InputError(f"a folder or several files need -o OUTDIR, {_MODES}")
    if args.output is not None:
        _check_output(args.output, plan)
    return plan


def _unique(paths: Sequence[Path]) -> list[Path]:
    seen: dict[Path, Path] = {}
    for p in paths:
        seen.setdefault(p.resolve(), p)
    return list(seen.values())


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


_MODES = "--in-place, --diff, --check or --analyze"  # what every run takes; -o takes one folder or files


def _check_output(output: Path, plan: Plan) -> None:
    if plan.mixed:
        raise InputError(f"-o takes one folder or files only; for several folders, or folders and files, use {_MODES}")
    if plan.single_file:
        target = plan.file_output(output, plan.files[0])
        if not target.parent.resolve().is_dir():
            raise InputError(f"{output}: folder {target.parent} does not exist")
        return
    for tree in plan.trees:  # one at most
        if _inside(output, tree.root):
            raise InputError(f"{output}: the output folder must not be inside the input folder {tree.root}")
    if output.exists() and not output.is_dir():
        raise InputError(f"{output}: not a folder")
    _check_names(plan.files)


def _check_names(sources: Sequence[Path]) -> None:
    """Files given by name that ``-o`` would put into one folder have different names."""
    seen: dict[str, Path] = {}
    for source in sources:
        if (other := seen.setdefault(source.name, source)) is not source:
            raise InputError(f"{source}: -o would write it and {other} to the same file {source.name}")


def _check_outputs(args: argparse.Namespace, plan: Plan, jobs: list[Job]) -> None:
    """No path the run writes (-o's files, a kernels module, --report) is an input or written twice."""
    inputs = {p.resolve(): "the input" for p in plan.files}
    for tree in plan.trees:
        inputs.update((tree.root.joinpath(rel).resolve(), "the input") for rel in (*tree.sources, *tree.others))
        inputs[(tree.root / files.KERNELS_FILE).resolve()] = "the kernels module"  # read, extended in place
    outputs: dict[Path, str] = {}

    def claim(path: Path, flag: str) -> None:
        key = path.resolve()
        if key in inputs:
            raise InputError(f"{path}: {flag} would overwrite {inputs[key]}")
        if key in outputs:
            raise InputError(f"{path}: both {outputs[key]} and {flag} would write it")
        outputs[key] = flag

    if args.output is not None:
        for job in jobs:
            claim(job.target, "-o")
        for tree in plan.trees:
            for rel in (*tree.others, Path(files.KERNELS_FILE)):
                claim(args.output / rel, "-o")
    if args.report is not None:
        claim(args.report, "--report")



def _failure(result: Result) -> str:
    where = f"{result.path}:{result.location}" if result.location else result.path
    return f"{where}: {result.error}"


def _options(args: argparse.Namespace) -> Options:
    options = Options(
        args.assume_tensors, frozenset(args.select or ()), frozenset(args.ignore or ()), frozenset(args.module_bases or ()),
        fuse=not args.no_fuse,
    )
    try:
        options.validate(load_table())
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return options


def _translate_one(job: Job, options: Options) -> Translation:
    """A file given alone, translated here (``--verify`` needs the whole translation); failing is bad input."""
    try:
        return runner.translate(job, options)
    except Exception as exc:
        raise InputError(_failure(runner.failure(job.path, exc))) from None


@dataclasses.dataclass(frozen=True)
class Kernels:
    """A tree's shared kernels module: its path, text before the run (None: none) and after."""

    path: Path
    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        return self.after is not None and self.after != self.before


def _kernels_modules(plan: Plan, results: list[Result]) -> list[Kernels]:
    """Each tree's ``_pypto_kernels.py``: the existing one extended by the definitions, in file order."""
    by_path = {r.path: r for r in results}
    modules = []
    for tree in plan.trees:
        path = tree.root / files.KERNELS_FILE
        before = path.read_bytes().decode("utf-8") if path.is_file() else None  # newlines as they are
        definitions = [d for rel in tree.sources for d in by_path[str(tree.root / rel)].definitions]
        after = emit.kernels_module_source(before, definitions) if definitions or before is not None else None
        modules.append(Kernels(path, before, after))
    return modules


def _refuse_read_only(args: argparse.Namespace, kernels: list[Kernels]) -> None:
    """A kernels module to be replaced that is read-only is bad input: its tree's files import from it."""
    for module in kernels:
        if args.in_place and module.changed:
            path = module.path
        elif args.output is not None and module.after is not None:
            path = args.output / files.KERNELS_FILE
        else:
            continue
        if runner.read_only(path):
            raise InputError(f"{path}: {runner.ReadOnly.REASON}")


def _output(
    args: argparse.Namespace,
    plan: Plan,
    jobs: list[Job],
    results: list[Result],
    kernels: list[Kernels],
    out: Console,
    staging: runner.Staging,
) -> list[str]:
    """Print or diff what the run produced, or write it: kernels modules, then the staged translations.

    ``-o`` makes the output a copy that runs as the input did: every file not translated is copied.
    Returns ``path: reason`` for each file not translated that could not be read to be copied.
    Ctrl-C while writing takes effect once every file is written.
    """
    if args.diff:
        _print_diffs(out, results, kernels)
    elif _to_stdout(args, plan):
        _write_stdout(results[0].code or plan.files[0].read_bytes())
    elif args.in_place:
        with runner.interrupts_deferred():
            for module in kernels:  # first: the files renamed next import from them
                if module.changed:
                    _write_atomically(staging, module.path, module.after.encode("utf-8"))
            _rename_staged(jobs, results)
    elif args.output is not None:
        with runner.interrupts_deferred():
            return _write_output(args.output, plan, jobs, results, kernels, staging)
    return []


def _write_output(
    output: Path, plan: Plan, jobs: list[Job], results: list[Result], kernels: list[Kernels], staging: runner.Staging
) -> list[str]:
    """``-o``: the kernels module, the staged translations, then a copy of every other file."""
    for module in kernels:
        if module.after is not None:
            _write_atomically(staging, output / files.KERNELS_FILE, module.after.encode("utf-8"))
    _rename_staged(jobs, results)
    copies = [(job.source, job.target, r.failed) for r, job in zip(results, jobs) if not r.staged]
    copies += [(tree.root / rel, output / rel, False) for tree in plan.trees for rel in tree.others]
    unread = []
    for source, target, reported in copies:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(source, target)
        except OSError as exc:
            if exc.filename != os.fspath(source):
                raise  # the output cannot be written
            if not reported:  # a source that failed says so in the summary already
                unread.append(f"{source}: cannot read: {exc.strerror}")
    return unread


def _rename_staged(jobs: list[Job], results: list[Result]) -> None:
    for r, job in zip(results, jobs):
        if r.staged:
            os.replace(r.staged, job.target)


def _write_atomically(staging: runner.Staging, path: Path, data: bytes) -> None:
    """Write via a temporary file in the same folder, so a reader never sees half a file."""
    os.replace(staging.stage(path, data), path)


def _write_stdout(data: bytes) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _print_diffs(out: Console, results: list[Result], kernels: list[Kernels]) -> None:
    """Every diff in path order, each kernels module among its tree's files."""
    diffs = [(Path(r.path), r.diff, r.encoding) for r in results if r.diff]
    for module in kernels:
        if module.changed:
            diffs.append((module.path, runner.unified_diff(module.before, module.after, str(module.path)), "utf-8"))
    for _, diff, encoding in sorted(diffs, key=lambda d: d[0]):
        print_diff(out, diff, encoding)


def print_diff(console: Console, diff: str, encoding: str = "utf-8") -> None:
    """A unified diff: coloured on a terminal, else byte for byte as ``git apply`` wants it."""
    if console.color_system is None:
        _write_stdout(diff.encode(encoding, errors="surrogateescape"))
        return
    for line in diff.splitlines():
        style = ""
        if line.startswith(("---", "+++")):
            style = "bold"
        elif line.startswith("@@"):
            style = "cyan"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        console.print(Text(line, style=style), soft_wrap=True)


def _outcome(result: Result) -> FileOutcome:
    if result.failed:
        reason = f"{result.location}: {result.error}" if result.location else result.error
        return FileOutcome(result.path, FAILED, reason, result.records)
    return FileOutcome(result.path, CHANGED if result.changed else UNCHANGED, records=result.records, regions=result.regions)


def _finish(
    args: argparse.Namespace, plan: Plan, results: list[Result], kernels: list[Kernels], unread: list[str], err: Console
) -> int:
    """Per-file lines, the summary, the report and the gates (``unread``: files -o could not copy); the exit code."""
    outcomes = [_outcome(r) for r in results]
    would = [r.path for r in results if r.changed] + [str(k.path) for k in kernels if k.changed]
    if args.check:
        for path in would:
            err.print(f"would change {path}", markup=False, soft_wrap=True)
    summary = summarize_run(outcomes)
    if plan.single_file:
        print_summary(err, results[0], summary)
    print_run_summary(err, summary)
    if args.report is not None:
        write_report(args.report, outcomes, summary)
    failed = []
    if summary.files_failed:
        failed.append(f"{_count(summary.files_failed, 'file')} could not be translated")
    if args.check and would:
        failed.append(f"--check: {_count(len(would), 'file')} would change")
    left = summary.left_as_torch_total + summary.ambiguous
    if args.strict and left:
        failed.append(f"--strict: {_count(left, 'call site')} left as torch or ambiguous")
    if args.fail_under is not None and summary.rate < args.fail_under:
        failed.append(f"--fail-under: conversion rate {format_rate(summary.rate)} is below {args.fail_under:g}%")
    if unread:
        failed.append(f"{_count(len(unread), 'file')} could not be copied")
    for line in unread:
        err.print(line, markup=False, soft_wrap=True)
    for message in failed:
        err.print(f"translate: {message}", markup=False, soft_wrap=True)
    return 1 if failed else 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def print_summary(console: Console, translation: Translation | Result, s: RunSummary) -> None:
    """One file's call sites (``s``: its run summary): counts, then each site left as torch and why."""
    console.print(
        f"[bold]{translation.path}[/]: {s.sites_seen} torch call sites, [green]{s.converted} converted[/], "
        f"[yellow]{s.left_as_torch_total} left as torch[/], [magenta]{s.ambiguous} ambiguous[/], "
        f"[cyan]{s.host_side} host-side[/]",
        soft_wrap=True,
    )
    for r in translation.records:
        if r.status not in (CONVERTED, HOST_SIDE):  # host-side sites stay torch by design
            tag = "ambiguous" if r.status == AMBIGUOUS else "stays torch"
            console.print(f"  {r.location} {r.api}: {tag}: {r.reason}", markup=False, soft_wrap=True)


if __name__ == "__main__":
    from torch2pypto.translator.run.entry import finished

    sys.exit(finished(main()))
