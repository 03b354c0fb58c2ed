"""``translate``: the command line.

Exit codes follow black, ruff and libcst: 0 fine, 1 something the user asked to be told about
(a failed ``--verify``), 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile
from pathlib import Path

import libcst as cst
from rich.console import Console
from rich.text import Text

from torch2pypto.translator import emit
from torch2pypto.translator.report import AMBIGUOUS, CONVERTED, summarize
from torch2pypto.translator.transform import Options
from torch2pypto.translator.translate import Translation, translate_source


class InputError(Exception):
    """Bad input: reported as one line, exit 2, nothing written."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out, err = Console(highlight=False), Console(stderr=True, highlight=False)
    try:
        translation = _translate(args)
        if args.output is not None:
            _write_atomically(args.output, translation)
        elif args.diff:
            print_diff(out, translation)
        else:
            sys.stdout.write(translation.code)
    except InputError as exc:
        err.print(f"translate: error: {exc}", markup=False, soft_wrap=True)
        return 2
    print_summary(err, translation)
    if args.verify:
        from torch2pypto.translator.verify_sites import verify_translation  # imports torch

        return 0 if verify_translation(translation, out, emit.standalone(translation.code)) else 1
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="translate", description="Translate PyTorch source into PyPTO kernels and host wrappers."
    )
    parser.add_argument("source", type=Path, help="the PyTorch module to translate")
    parser.add_argument("-o", "--output", type=Path, help="write the translation here (default: stdout)")
    parser.add_argument("--diff", action="store_true", help="print a unified diff and write nothing")
    parser.add_argument(
        "--verify", action="store_true", help="run every generated kernel in PyPTO's CPU interpreter against torch"
    )
    parser.add_argument(
        "--assume-tensors", action="store_true", help="treat receivers not known to be tensors as tensors"
    )
    return parser


def _translate(args: argparse.Namespace) -> Translation:
    source: Path = args.source
    if not source.is_file():
        raise InputError(f"{source}: no such file")
    if args.output is not None:
        if args.diff:
            raise InputError("--diff writes nothing; drop -o")
        if args.output.resolve() == source.resolve():
            raise InputError(f"{args.output}: the output would overwrite the input")
        if not args.output.parent.resolve().is_dir():
            raise InputError(f"{args.output}: folder {args.output.parent} does not exist")
    try:
        return translate_source(source.read_bytes(), str(source), Options(args.assume_tensors))
    except cst.ParserSyntaxError as exc:
        raise InputError(f"{source}:{exc.raw_line}:{exc.raw_column + 1}: syntax error: {_one_line(exc.message)}") from None
    except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
        raise InputError(f"{source}: cannot decode: {_one_line(str(exc))}") from None


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _write_atomically(path: Path, translation: Translation) -> None:
    """Write via a temporary file in the same folder, so a reader never sees half a file."""
    data = translation.code.encode(translation.encoding)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def print_diff(console: Console, translation: Translation) -> None:
    """A unified diff of the translation, coloured where the console supports colour."""
    path = translation.path
    lines = difflib.unified_diff(
        translation.source.splitlines(keepends=True),
        translation.code.splitlines(keepends=True),
        f"a/{path}",
        f"b/{path}",
    )
    for line in lines:
        style = ""
        if line.startswith(("---", "+++")):
            style = "bold"
        elif line.startswith("@@"):
            style = "cyan"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        console.print(Text(line.rstrip("\r\n"), style=style), soft_wrap=True)


def print_summary(console: Console, translation: Translation) -> None:
    """Call sites seen, converted, left as torch (with each reason), ambiguous."""
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
