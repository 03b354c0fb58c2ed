"""One record per call site, and the summary counts the CLI prints."""

from __future__ import annotations

import collections
import dataclasses

CONVERTED, UNSUPPORTED, AMBIGUOUS = "converted", "unsupported", "left-alone"


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


@dataclasses.dataclass(frozen=True)
class Summary:
    """Counts over records: call sites seen, converted, left as torch by reason, ambiguous."""

    seen: int
    converted: int
    unsupported: dict[str, int]
    ambiguous: int


def summarize(records: list[Record]) -> Summary:
    reasons = collections.Counter(r.reason for r in records if r.status == UNSUPPORTED)
    return Summary(
        seen=len(records),
        converted=sum(r.status == CONVERTED for r in records),
        unsupported=dict(reasons.most_common()),
        ambiguous=sum(r.status == AMBIGUOUS for r in records),
    )
