"""same-name, different params: ``sum`` exists in PyPTO, but only over one named FP32 axis.

The wrapper derives what torch leaves implicit: which dims (all when ``dim`` is omitted), the
result dtype, and the FP32 accumulation.
"""

from __future__ import annotations

from torch2pypto.rules import reduction
from torch2pypto.rules.calls import rejection, replacement, wrapper_params
from torch2pypto.rules.site import CallSite, Converted, Unsupported


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site)
    if rejected:
        return rejected
    entry = site.entry
    definitions = (
        reduction.ROWS_HELPER,
        reduction.kernel(entry, scale=False),
        reduction.wrapper(entry, "pypto.sum over the reduced dims moved last, in FP32", scale=False),
    )
    return Converted(replacement(site, f"pypto_{entry.op}"), definitions, f"pypto.{entry.pypto}", wrapper_params(entry))
