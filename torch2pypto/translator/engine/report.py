"""One record per call site: where it is, what it was, what became of it."""

from __future__ import annotations

import dataclasses
import operator

from torch2pypto.mapping import HOST_SIDE  # the category's word is also the status of its sites

CONVERTED, UNSUPPORTED, AMBIGUOUS = "converted", "unsupported", "left-alone"

__all__ = ["AMBIGUOUS", "CONVERTED", "HOST_SIDE", "UNSUPPORTED", "Record"]  # the statuses a site can have


@dataclasses.dataclass(frozen=True)
class Record:
    """A torch call site and what became of it.

    Lines and columns are 1-based; ``end_line``/``end_column`` point just past the call.
    """

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    api: str
    category: str
    pypto_api: str
    status: str
    reason: str = ""

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"

    def __reduce__(self):  # pickled as its fields: 7x faster both ways than a dataclass's state dict
        return Record, _fields(self)


_fields = operator.attrgetter(*(f.name for f in dataclasses.fields(Record)))
