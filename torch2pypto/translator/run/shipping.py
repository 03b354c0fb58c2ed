"""Send each kernel definition once per worker process: later results name it by a small key.

The same kernels and wrappers recur from file to file, and pickling them again with every
result was nine tenths of what workers sent. A worker's :class:`Sender` packs a result's
definitions as keys, with those it has not sent before; once every result is in (they arrive in
any order), :func:`unpacked` puts the definitions back.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from torch2pypto.rules.codegen import Definition


@dataclasses.dataclass(frozen=True)
class Packed:
    """A result's definitions as keys of the worker that sent them (``sender``, its process id).

    ``fresh``: the definitions the worker sends here for the first time, by key.
    """

    sender: int
    keys: tuple[int, ...]
    fresh: dict[int, Definition]


class Sender:
    """Packs the definitions of one worker's results: each distinct one goes with the first result using it."""

    def __init__(self) -> None:
        self.keys: dict[Definition, int] = {}

    def pack(self, definitions: Sequence[Definition]) -> Packed:
        keys, fresh = [], {}
        for definition in definitions:
            key = self.keys.get(definition)
            if key is None:
                key = self.keys[definition] = len(self.keys)
                fresh[key] = definition
            keys.append(key)
        return Packed(os.getpid(), tuple(keys), fresh)


def unpacked(packs: Sequence[Packed]) -> list[tuple[Definition, ...] | None]:
    """The definitions of each of ``packs``, whatever order they came in; None where one never came
    (the result that carried it was lost)."""
    known = {(p.sender, key): d for p in packs for key, d in p.fresh.items()}
    out: list[tuple[Definition, ...] | None] = []
    for p in packs:
        try:
            out.append(tuple(known[p.sender, key] for key in p.keys))
        except KeyError:
            out.append(None)
    return out
