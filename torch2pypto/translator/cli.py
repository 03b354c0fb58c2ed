"""``translate``: the command line, for one file or whole trees.

Exit codes follow black, ruff and libcst: 0 fine; 1 a gate failed (``--check``, ``--strict``,
``--fail-under``, ``--verify``) or a file of a multi-file run could not be translated; 2 bad
usage, input or config (one line on stderr, nothing written).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.text import Text

from torch2pypto.mapping import load_table
from torch2pypto.translator import emit, files, runner
from torch2pypto.translator.config import ConfigError, apply_config, load_config
from torch2pypto.translator.json_report import write_report
from torch2pypto.translator.report import AMBIGUOUS, CONVERTED, summarize
from torch2pypto.translator.runner import Job, Result, Work
from torch2pypto.translator.summary import (
    CHANGED,
    FAILED,
    UNCHANGED,
    FileOutcome,
    format_rate,
    print_run_summary,
    summarize_run,
)
from torch2pypto.translator.transform import Options
from torch2pypto.translator.translate import Translation


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

    def jobs(self) -> list[Job]:
        jobs = [Job(f, str(f)) for f in self.files]
        for tree in self.trees:
            jobs += [Job(tree.root / rel, str(tree.root / rel), tree.kernels_import(rel)) for rel in tree.sources]
        return jobs


def main(argv: list[str] | None = None) -> int:
    out, err = _console(), _console(stderr=True)
    try:
        args = _arguments(argv)
        plan = _plan(args)
        options = _options(args)
        work = Work(options, code=not (args.diff or args.check or args.analyze), diff=args.diff)
        jobs = plan.jobs()
        if plan.single_file:
            translation = _translate_one(jobs[0], options)
            results = [runner.result_of(translation, work)]
        else:
            results = runner.run(jobs, work, args.jobs or os.cpu_count() or 1, progress=err)
    except (InputError, ConfigError) as exc:
        err.print(f"translate: error: {exc}", markup=False, soft_wrap=True)
        return 2
    kernels = _kernels_modules(plan, results)
    try:
        _output(args, plan, jobs, results, kernels, out)
    except BrokenPipeError:  # `translate ... --diff | head`: stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        err.print(f"translate: error: cannot write {exc.filename}: {exc.strerror}", markup=False, soft_wrap=True)
        return 1
    status = _finish(args, plan, results, kernels, err)
    if args.verify:
        from torch2pypto.translator.verify_sites import verify_translation  # imports torch

        status = max(status, 0 if verify_translation(translation, out, emit.standalone(translation.code)) else 1)
    return status


def _console(stderr: bool = False) -> Console:
    """Colour on a terminal; no escape codes at all with NO_COLOR (rich alone would keep bold)."""
    plain = os.environ.get("NO_COLOR", "") != ""
    return Console(stderr=stderr, highlight=False, color_system=None if plain else "auto")


class _Terms(argparse._ExtendAction):
    """Comma-separated, repeatable (``--select to,type_as --select mean``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, type=lambda text: [t.strip() for t in text.split(",") if t.strip()], **kwargs)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="translate",
        description="Translate PyTorch source into PyPTO kernels and host wrappers.",
        epilog="Settings can also live in [tool.torch2pypto] of the project's pyproject.toml; flags win.",
    )
    add = parser.add_argument
    add("paths", nargs="+", type=Path, metavar="PATH", help="files and folders to translate")
    add("-o", "--output", type=Path, metavar="OUT", help="a file for one file (default: stdout), a folder for a folder")
    add("--in-place", action="store_true", help="rewrite the files in place (each one replaced atomically)")
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
    add("-j", "--jobs", type=_positive, metavar="N", help="worker processes (default: the CPU count)")
    add("--verify", action="store_true", help="one file: run each generated kernel in PyPTO's CPU interpreter vs torch")
    return parser


def _percent(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 100:
        raise ValueError(text)
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    """Parsed flags over the settings of the nearest ``[tool.torch2pypto]``, checked for sense."""
    parser = _parser()
    args = parser.parse_args(argv)
    apply_config(parser, args, load_config(parser, args.paths))
    dry = [flag for flag, on in (("--diff", args.diff), ("--check", args.check), ("--analyze", args.analyze)) if on]
    if args.in_place and args.output is not None:
        raise InputError("--in-place and -o exclude each other")
    if dry and (args.output is not None or args.in_place):
        raise InputError(f"{dry[0]} writes nothing; drop {'-o' if args.output is not None else '--in-place'}")
    if args.report is not None and not args.report.parent.resolve().is_dir():
        raise InputError(f"{args.report}: folder {args.report.parent} does not exist")
    return args


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
        raise InputError("a folder or several files need -o OUTDIR, --in-place, --diff, --check or --analyze")
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


def _check_output(output: Path, plan: Plan) -> None:
    if len(plan.files) + len(plan.trees) > 1:
        raise InputError("-o takes one input; use --in-place for several")
    if plan.trees:
        root = plan.trees[0].root
        if _inside(output, root):
            raise InputError(f"{output}: the output folder must not be inside the input folder {root}")
        if output.exists() and not output.is_dir():
            raise InputError(f"{output}: not a folder")
        return
    target = _file_output(output, plan.files[0])
    if target.resolve() == plan.files[0].resolve():
        raise InputError(f"{output}: the output would overwrite the input")
    if not target.parent.resolve().is_dir():
        raise InputError(f"{output}: folder {target.parent} does not exist")


def _file_output(output: Path, source: Path) -> Path:
    """Where one file's translation goes: ``output``, or into it if it is a folder."""
    return output / source.name if output.is_dir() else output


def _failure(result: Result) -> str:
    where = f"{result.path}:{result.location}" if result.location else result.path
    return f"{where}: {result.error}"


def _options(args: argparse.Namespace) -> Options:
    options = Options(args.assume_tensors, frozenset(args.select or ()), frozenset(args.ignore or ()))
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


def _output(
    args: argparse.Namespace, plan: Plan, jobs: list[Job], results: list[Result], kernels: list[Kernels], out: Console
) -> None:
    """Write, print or diff what the run produced."""
    if args.diff:
        _print_diffs(out, results, kernels)
    elif args.output is not None and plan.trees:
        _mirror(plan.trees[0], args.output, results, kernels[0])
    elif args.output is not None:
        _write_atomically(_file_output(args.output, plan.files[0]), results[0].code or plan.files[0].read_bytes())
    elif args.in_place:
        for module in kernels:  # first: the files written next import from them
            if module.changed:
                _write_atomically(module.path, module.after.encode("utf-8"))
        for r, job in zip(results, jobs):
            if r.code is not None:
                _write_atomically(job.source, r.code)
    elif plan.single_file and not (args.check or args.analyze):
        _write_stdout(results[0].code or plan.files[0].read_bytes())


def _mirror(tree: files.Tree, outdir: Path, results: list[Result], kernels: Kernels) -> None:
    """OUTDIR as a copy of the tree that runs as the project did: translations, other files copied."""
    translated = {Path(r.path): r.code for r in results}
    for rel in (*tree.sources, *tree.others):
        target = outdir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        code = translated.get(tree.root / rel)
        if code is not None:
            _write_atomically(target, code)
        else:
            shutil.copy2(tree.root / rel, target)
    if kernels.after is not None:
        outdir.mkdir(parents=True, exist_ok=True)
        _write_atomically(outdir / files.KERNELS_FILE, kernels.after.encode("utf-8"))


def _write_atomically(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same folder, so a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if path.exists():
            shutil.copymode(path, tmp)  # keep the mode (an executable script stays executable)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
    return FileOutcome(result.path, CHANGED if result.changed else UNCHANGED, records=result.records)


def _finish(args: argparse.Namespace, plan: Plan, results: list[Result], kernels: list[Kernels], err: Console) -> int:
    """Per-file lines, the summary, the report and the gates; the exit code."""
    outcomes = [_outcome(r) for r in results]
    would = [r.path for r in results if r.changed] + [str(k.path) for k in kernels if k.changed]
    if args.check:
        for path in would:
            err.print(f"would change {path}", markup=False, soft_wrap=True)
    if plan.single_file:
        print_summary(err, results[0])
    summary = summarize_run(outcomes)
    print_run_summary(err, summary)
    if args.report is not None:
        write_report(args.report, outcomes, summary)
    failed = []
    if summary.files_failed:
        failed.append(f"{summary.files_failed} file(s) could not be translated")
    if args.check and would:
        failed.append(f"--check: {len(would)} file(s) would change")
    left = summary.left_as_torch_total + summary.ambiguous
    if args.strict and left:
        failed.append(f"--strict: {left} call site(s) left as torch or ambiguous")
    if args.fail_under is not None and summary.rate < args.fail_under:
        failed.append(f"--fail-under: conversion rate {format_rate(summary.rate)} is below {args.fail_under:g}%")
    for message in failed:
        err.print(f"translate: {message}", markup=False, soft_wrap=True)
    return 1 if failed else 0


def print_summary(console: Console, translation: Translation | Result) -> None:
    """One file's call sites: seen, converted, left as torch (each with its reason), ambiguous."""
    s = summarize(list(translation.records))
    left = sum(s.unsupported.values())
    console.print(
        f"[bold]{translation.path}[/]: {s.seen} torch call sites, [green]{s.converted} converted[/], "
        f"[yellow]{left} left as torch[/], [magenta]{s.ambiguous} ambiguous[/]",
        soft_wrap=True,
    )
    for r in translation.records:
        if r.status != CONVERTED:
            tag = "ambiguous" if r.status == AMBIGUOUS else "stays torch"
            console.print(f"  {r.location} {r.api}: {tag}: {r.reason}", markup=False, soft_wrap=True)


if __name__ == "__main__":
    sys.exit(main())
