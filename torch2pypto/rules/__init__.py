"""How code is made: one module per kernel family, sharing tile steps and templates.

A family takes a bound call site and returns either :class:`Converted` (the replacement call and
the definitions it needs) or :class:`Unsupported` (the reason the call stays torch), and says
when the table loads whether it can honour an entry (``problem``). The engine picks the family
by the entry's ``family`` through :data:`RULES`; the category is only the manual's word.
"""

from __future__ import annotations

from typing import Callable

from torch2pypto.rules import (
    attention,
    casting,
    composite,
    cube,
    elementwise,
    indexing,
    movement,
    onehot,
    reduction,
    scan,
    sorting,
    triangle,
)
from torch2pypto.rules.site import CallSite, Converted, Unsupported

Rule = Callable[[CallSite], "Converted | Unsupported"]

FAMILIES = {
    "elementwise": elementwise,
    "cast": casting,
    "reduction": reduction,
    "scan": scan,
    "composite": composite,
    "cube": cube,
    "movement": movement,
    "triangle": triangle,
    "one_hot": onehot,
    "indexing": indexing,
    "sorting": sorting,
    "attention": attention,
}


def wrapper_names(entry) -> tuple[str, ...]:
    """The generated wrappers whose calls are converted sites of ``entry``: ``pypto_<op>`` unless
    its family says otherwise (several casts share one wrapper)."""
    family = FAMILIES[entry.family]
    return family.wrapper_names(entry) if hasattr(family, "wrapper_names") else (f"pypto_{entry.op}",)


def _unsupported(site: CallSite) -> Unsupported:
    return Unsupported(site.entry.reason or "no PyPTO equivalent")


RULES: dict[str | None, Rule] = {name: family.rewrite for name, family in FAMILIES.items()}
RULES[None] = _unsupported  # unsupported entries have no family

__all__ = ["FAMILIES", "RULES", "CallSite", "Converted", "Unsupported", "Rule", "wrapper_names"]
