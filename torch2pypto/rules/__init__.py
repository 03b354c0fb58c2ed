"""How each mapping category becomes a kernel, a host wrapper and a rewritten call.

A rule takes a bound call site and returns either :class:`Converted` (the replacement call and
the definitions it needs) or :class:`Unsupported` (the reason the call stays torch). The engine
picks the rule by the entry's category through :data:`RULES`.
"""

from __future__ import annotations

from typing import Callable

from torch2pypto.rules import composite, difference, different_params, rename, same_name
from torch2pypto.rules.site import CallSite, Converted, Unsupported

Rule = Callable[[CallSite], "Converted | Unsupported"]


def _unsupported(site: CallSite) -> Unsupported:
    return Unsupported(site.entry.reason or "no PyPTO equivalent")


RULES: dict[str, Rule] = {
    "same-name": same_name.rewrite,
    "same-name-different-params": different_params.rewrite,
    "pure-rename": rename.rewrite,
    "difference": difference.rewrite,
    "composite": composite.rewrite,
    "unsupported": _unsupported,
}

__all__ = ["RULES", "CallSite", "Converted", "Unsupported", "Rule"]
