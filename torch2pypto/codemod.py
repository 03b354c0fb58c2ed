"""The translation as a libcst codemod, for teams that run codemod pipelines::

    python -m libcst.tool codemod -x torch2pypto.codemod.TranslateCommand --no-format PATH...

Each file is translated on its own, with its kernels inline (as ``translate FILE``); call sites
left as torch are reported as warnings, files without torch call sites are skipped.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable

import libcst as cst
from libcst.codemod import CodemodCommand, CodemodContext, SkipFile

from torch2pypto.mapping import load_table
from torch2pypto.translator.engine.report import AMBIGUOUS, UNSUPPORTED
from torch2pypto.translator.engine.transform import Options
from torch2pypto.translator.engine.translate import translate_source

_OUTCOMES = {UNSUPPORTED: "left as torch", AMBIGUOUS: "ambiguous"}


class TranslateCommand(CodemodCommand):
    DESCRIPTION = "Translate PyTorch calls into PyPTO kernels with host wrappers (kernels inline in each file)."

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument(
            "--assume-tensors", action="store_true", help="treat receivers not known to be tensors as tensors"
        )
        for option in ("select", "ignore"):
            arg_parser.add_argument(
                f"--{option}",
                action="extend",
                type=_terms(option),
                default=[],
                metavar="TERMS",
                help=f"{option} ops, torch APIs or mapping categories (comma-separated, repeatable)",
            )

    def __init__(
        self, context: CodemodContext, assume_tensors: bool = False, select: Iterable[str] = (), ignore: Iterable[str] = ()
    ) -> None:
        super().__init__(context)
        self.options = Options(assume_tensors, frozenset(select), frozenset(ignore))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        translation = translate_source(tree.code, self.context.filename or "<stdin>", self.options)
        if not translation.records:
            raise SkipFile("no torch call sites")
        for r in translation.records:
            if r.status in _OUTCOMES:
                self.warn(f"{r.location}: {r.api}: {_OUTCOMES[r.status]}: {r.reason}")
        return cst.parse_module(translation.code, config=tree.config_for_parsing)


def _terms(option: str) -> Callable[[str], list[str]]:
    """argparse type for ``--select``/``--ignore``: comma-separated terms, checked against the table."""

    def parse(value: str) -> list[str]:
        terms = [t.strip() for t in value.split(",") if t.strip()]
        try:
            Options(**{option: frozenset(terms)}).validate(load_table())
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--{option}: ")) from None
        return terms

    return parse
