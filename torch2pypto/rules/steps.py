"""Tile steps: each op's tile computation, written once.

A step is one PyPTO tile op. It renders the kernel statement that computes a named tile from
other named tiles and factory constants; kernel templates (:mod:`templates`) compose steps
between loading the input tiles and storing the result. Composite recipes reuse the steps of
their parts, and fused kernels are meant to be built from the same steps.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence


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

    def render(self, target: str, operands: Sequence[str]) -> str:
        """The statement assigning this step's tile to ``target``."""
        args = [*operands, *(f"{keyword}={value}" for keyword, value in self.keywords)]
        return f"{target} = pypto.{self.op}({', '.join(args)})\n"


def row_reduction(op: str) -> Step:
    """``pypto.<op>`` along each tile row, in FP32: a [rows, 1] tile that broadcasts over the row."""
    return Step(op, (("dim", "-1"), ("keepdim", "True")), fp32=True, reduces=True)


@dataclasses.dataclass(frozen=True)
class Apply:
    """One step applied in a kernel: ``target = step(operands)``."""

    target: str
    step: Step
    operands: tuple[str, ...]


def render(program: Sequence[Apply]) -> str:
    """The statements of a sequence of applied steps."""
    return "".join(a.step.render(a.target, a.operands) for a in program)
