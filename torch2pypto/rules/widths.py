"""Width expressions of ``cols``: a last-dim slice's width, and the checks the wrapper makes of
them at run time (slices start and span 32-byte blocks, widths that must agree do), simplified
and pruned by evaluating them over typical widths and slice bounds."""

from __future__ import annotations

import functools
import itertools
from typing import Sequence

_ALIGN = 16  # elements: a tile's last dim starts and spans 32 bytes (16 FP16/BF16 values, 2 blocks of FP32)


def aligned(*widths: str) -> list[str]:
    return [f"{grouped(w)} % {_ALIGN} == 0" for w in widths if w not in ("0", "cols")]


def grouped(expression: str) -> str:
    return expression if expression.isidentifier() or expression.isdigit() else f"({expression})"


def simplified(expression: str, sources=()) -> str:
    """A width expression of cols, short: ``cols`` where it is cols whatever cols is (checked on
    every width up to 1024: a concatenation of a row's slices), else one of ``sources`` (the
    widths sliced: rotate_half's halves of a slice ``rotary_dim`` wide add up to it), ``w`` for
    ``w - 0``."""
    if same_widths([expression, "cols"], range(1, 1025)):
        return "cols"
    for source in sources:
        if source != expression and source != "cols" and same_widths([expression, source], range(1, 1025)):
            return source
    return expression.removesuffix(" - 0")


def same_widths(widths: Sequence[str], values=(32, 64, 96, 128, 256)) -> bool:
    """Whether width expressions of cols agree at typical head and row widths."""
    return _agree(tuple(widths), tuple(values))


_INDEX_VALUES = (0, 1, 7, 16, 48)  # values tried for a run-time int in a width (a slice bound: rotary_dim), unaligned ones too


@functools.lru_cache(maxsize=4096)
def _agree(widths: tuple[str, ...], values: tuple[int, ...]) -> bool:
    """Whether the widths agree at every cols of ``values``; the run-time ints they read (slice
    bounds) at each combination of :data:`_INDEX_VALUES` too: ``n + (cols - n)`` is cols."""
    try:
        codes = [compile(w, "<width>", "eval") for w in dict.fromkeys(widths)]
        free = sorted({name for code in codes for name in code.co_names} - {"cols"})
        for ints in itertools.product(_INDEX_VALUES, repeat=len(free)):
            scope = dict(zip(free, ints))
            if not all(len({eval(code, {"__builtins__": {}}, {**scope, "cols": c}) for code in codes}) == 1 for c in values):
                return False
        return True
    except (ArithmeticError, NameError, SyntaxError, TypeError):
        return False


def needed(checks: Sequence[str]) -> list[str]:
    """The width checks that do not hold for every cols (those that do say nothing; one that
    reads a run-time int, a slice bound, is needed)."""
    return [c for c in dict.fromkeys(checks) if not _always(c)]


@functools.lru_cache(maxsize=None)
def _always(check: str) -> bool:
    """Whether a check holds at every cols, and at every run-time int of :data:`_INDEX_VALUES` and
    their negatives (``rotary_dim <= rotary_dim``)."""
    code = compile(check, "<width check>", "eval")
    free = sorted(set(code.co_names) - {"cols"})
    widths = range(1, 257 if free else 4097)
    try:
        for ints in itertools.product((*_INDEX_VALUES, *(-v for v in _INDEX_VALUES if v)), repeat=len(free)):
            if not all(eval(code, {"__builtins__": {}}, {**dict(zip(free, ints)), "cols": n}) for n in widths):
                return False
        return True
    except (NameError, TypeError, AttributeError):
        return False
