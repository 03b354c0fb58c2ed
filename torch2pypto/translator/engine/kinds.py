"""What the engine can know about a value: the kinds of :class:`Kind`, and how kinds combine.

A method call is rewritten only on a known tensor, left alone on a known non-tensor, and reported
as ambiguous otherwise. Besides those three answers, the solver works with None itself, a tensor
or None, and no value yet (a name read while its own assignments are being inferred).
"""

from __future__ import annotations

import enum
from typing import Iterable


class Kind(enum.StrEnum):
    """The kind of a value."""

    TENSOR = "tensor"
    NOT_TENSOR = "not-tensor"
    UNKNOWN = "unknown"
    NONE = "none"  # None itself
    MAYBE = "tensor-or-none"  # a tensor or None (a method call on it is a tensor's)
    CYCLE = "cycle"  # no value (yet): read while its own assignments are being inferred; None operated on


TENSOR, NOT_TENSOR, UNKNOWN = Kind.TENSOR, Kind.NOT_TENSOR, Kind.UNKNOWN
NONE, MAYBE, CYCLE = Kind.NONE, Kind.MAYBE, Kind.CYCLE
_TENSOR_OR_NONE = frozenset({TENSOR, NONE, MAYBE})
_NOT_TENSOR_OR_NONE = frozenset({NOT_TENSOR, NONE})


def combine(kinds: Iterable[Kind]) -> Kind:
    """All tensor: tensor; all not: not; tensors and None: tensor or None; else (or nothing): unknown.

    Cyclic reads (``x = x.float()``) carry no evidence and are skipped.
    """
    seen = set(kinds)
    if seen == {CYCLE}:
        return CYCLE
    seen.discard(CYCLE)
    if len(seen) == 1:
        return seen.pop()
    if seen and seen <= _TENSOR_OR_NONE:
        return MAYBE
    return NOT_TENSOR if seen and seen <= _NOT_TENSOR_OR_NONE else UNKNOWN


def through(receiver: Kind) -> Kind:
    """The kind of a tensor-preserving operation's result, given its receiver's kind.

    On None the operation raises, so a result that exists is a tensor's, and None's is no value.
    """
    if receiver in (TENSOR, MAYBE):
        return TENSOR
    return CYCLE if receiver in (CYCLE, NONE) else UNKNOWN


def public(known: Kind) -> Kind:
    """TENSOR, NOT_TENSOR or UNKNOWN of a kind (a tensor or None: unknown; None: not a tensor)."""
    return NOT_TENSOR if known == NONE else UNKNOWN if known in (MAYBE, CYCLE) else known


def of_receiver(known: Kind) -> Kind:
    """The kind of a method call's receiver: a tensor or None is a tensor there (None has no methods)."""
    return _AS_RECEIVER.get(known, known)


_AS_RECEIVER = {NONE: NOT_TENSOR, MAYBE: TENSOR, CYCLE: UNKNOWN}
