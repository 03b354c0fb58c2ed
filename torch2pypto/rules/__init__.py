"""How code is made: one module per kernel family, sharing tile steps and templates.

Each family module ends with ``register(Family(...))`` (torch2pypto.schema.family): the fields
it reads, and its hooks. A family takes a bound call site and returns either :class:`Converted`
(the replacement call and the definitions it needs) or :class:`Unsupported` (the reason the call
stays torch), and says when the table loads whether it can honour an entry (``problem``). The
engine picks the family by the entry's ``family`` through :func:`rewrite_site`; the category is only
the manual's word. Importing this package registers the families below.
"""

from __future__ import annotations

from torch2pypto.rules import (  # noqa: F401  (each registers its family)
    activation,
    attention,
    casting,
    composite,
    contraction,
    conv,
    cube,
    elementwise,
    grouped,
    histogram,
    indexing,
    loss,
    movement,
    offset,
    onehot,
    outer,
    pooling,
    product,
    reduction,
    resample,
    reverse,
    scan,
    sequence,
    sorting,
    triangle,
)
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.schema.family import family


def rewrite_site(site: CallSite) -> Converted | Unsupported:
    """The site as its entry's family rewrites it; an entry of no family stays torch."""
    if site.entry.family is None:
        return Unsupported(site.entry.reason or "no PyPTO equivalent")
    return family(site.entry.family).rewrite(site)


__all__ = ["CallSite", "Converted", "Unsupported", "rewrite_site"]
