"""composite: ops built from several PyPTO ops, one recipe per op.

``mean``: cast to FP32, ``pypto.sum`` over the reduced dims, scale by 1/count, cast back.
"""

from __future__ import annotations

from torch2pypto.rules import reduction
from torch2pypto.rules.calls import rejection, replacement, wrapper_params
from torch2pypto.rules.site import CallSite, Converted, Unsupported


def _mean(site: CallSite) -> Converted:
    entry = site.entry
    definitions = (
        reduction.ROWS_HELPER,
        reduction.kernel(entry, scale=True),
        reduction.wrapper(entry, "FP32 pypto.sum over the reduced dims, then a 1/count scale", scale=True),
    )
    return Converted(replacement(site, f"pypto_{entry.op}"), definitions, "pypto.sum + pypto.mul", wrapper_params(entry))


RECIPES = {"mean": _mean}


def rewrite(site: CallSite) -> Converted | Unsupported:
    recipe = RECIPES.get(site.entry.op)
    if recipe is None:
        return Unsupported(f"no composite recipe for {site.entry.op} yet")
    return rejection(site) or recipe(site)
