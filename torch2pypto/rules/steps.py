"""Tile steps: each op's tile computation, written once.

A step is one PyPTO tile op. It gives the kernel statement (:mod:`kernel_ir`) that computes a
named tile from other named tiles and factory constants; kernel templates (:mod:`templates`) compose steps
between loading the input tiles and storing the result. Composite recipes reuse the steps of
their parts, and fused kernels are meant to be built from the same steps.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

from torch2pypto.rules.kernel_ir import Assign, Call, source


@dataclasses.dataclass(frozen=True)
class Step:
    """``pypto.<op>(<operands>, <keywords>)`` on tiles.

    ``keywords`` are ``(pypto keyword, expression)`` pairs: a factory constant's name or a
    literal. ``fp32``: the op takes FP32 tiles only (the template computes in FP32).
    ``result``: the result's fixed dtype ("bool" for comparisons), else the operands' dtype.
    ``reduces``: the op reduces each tile row to a [rows, 1] tile (templates give it whole,
    32-byte aligned rows).
    """

    op: str
    keywords: tuple[tuple[str, str], ...] = ()
    fp32: bool = False
    result: str | None = None
    reduces: bool = False

    def call(self, operands: Sequence[str]) -> Call:
        """This step's ``pypto.<op>`` call on ``operands``."""
        return Call(f"pypto.{self.op}", tuple(operands), self.keywords)

    def statement(self, target: str, operands: Sequence[str]) -> Assign:
        """The statement assigning this step's tile to ``target``."""
        return Assign(target, self.call(operands))

    def render(self, target: str, operands: Sequence[str]) -> str:
        """:meth:`statement` as text."""
        return _rendered(self, target, tuple(operands))


@functools.lru_cache(maxsize=4096)
def _rendered(step: Step, target: str, operands: tuple[str, ...]) -> str:
    """A step's statement as text, once per process: regions alike apply the same steps to the
    same names. The key is all the text depends on (the frozen step, the target, the operands)."""
    return source(step.statement(target, operands))


def row_reduction(op: str) -> Step:
    """``pypto.<op>`` along each tile row, in FP32: a [rows, 1] tile that broadcasts over the row."""
    return Step(op, (("dim", "-1"), ("keepdim", "True")), fp32=True, reduces=True)


@dataclasses.dataclass(frozen=True)
class Apply:
    """One step applied in a kernel: ``target = step(operands)``."""

    target: str
    step: Step
    operands: tuple[str, ...]


def statements(program: Sequence[Apply]) -> tuple[Assign, ...]:
    """The statements of a sequence of applied steps."""
    return tuple(a.step.statement(a.target, a.operands) for a in program)


def render(program: Sequence[Apply]) -> str:
    """:func:`statements` as text."""
    return source(statements(program))
