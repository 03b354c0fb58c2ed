"""difference: ``x.type_as(other)`` reads ``other.dtype`` on the host, then runs ``pypto.cast``."""

from __future__ import annotations

from torch2pypto.rules.calls import replacement
from torch2pypto.rules.casting import CAST_KERNEL, cast_wrapper
from torch2pypto.rules.site import CallSite, Converted, Unsupported

WRAPPER = cast_wrapper(
    "pypto_type_as",
    "input, other",
    "other.dtype",
    "input.type_as(other)",
    "torch.Tensor.type_as on a PyPTO kernel.\n\n    difference: the target dtype is other.dtype, read on the host; then pypto.cast.\n    ",
)


def rewrite(site: CallSite) -> Converted | Unsupported:
    return Converted(replacement(site, "pypto_type_as"), (CAST_KERNEL, WRAPPER), "pypto.cast", site.entry.params)
