"""The pooling family: adaptive average pooling to one value per channel, as the ``via`` entry's mean.

Pooling the last ``dims`` dims to output size 1 (``1``, or a tuple or list of ``dims`` ones) is
the mean over those dims, kept, which is what torch's own adaptive_avg_pool2d computes for it
(``input.mean((-1, -2), keepdim=True)``, any rank): the wrapper runs the reduction entry named by
``via`` (mean) on them. The output size is often a module attribute, known at run time only, so
the wrapper decides there: other sizes (windows whose bounds vary per output pixel) and inputs off
the kernel path (quantized, integer, empty) run torch.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from torch2pypto.rules import reduction
from torch2pypto.rules.calls import signature_problem, via_parts, wrapped
from torch2pypto.rules.codegen import Definition, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.wrappers import api
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, register


@dataclasses.dataclass(frozen=True)
class PoolingFields(Fields):
    """The table fields the pooling family reads."""

    via: str | None = field("the reduction entry averaging the pooled dims (mean)")
    dims: int = field("how many trailing dims are pooled (2: adaptive_avg_pool2d)", 2)


PARAMS = ("input", "output_size")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if problem := signature_problem(entry, "an adaptive pooling", PARAMS):
        return problem
    via = entries.get(entry.fields.via or "")
    if via is None or via.family != "reduction" or via.pypto != "sum" or not via.fields.average or via.fields.args or via.fields.output:
        return "via names the reduction entry of torch.mean's semantics (an average, no args)"
    if entry.fields.dims < 1:
        return "dims counts the pooled trailing dims, one at least"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    return wrapped(site, definitions)


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    via, dims = entry.parts[entry.fields.via], entry.fields.dims
    pooled = tuple(range(-dims, 0))
    wrapper = f'''\
def pypto_{entry.op}(input, output_size):
    """{api(entry)} on a PyPTO kernel.

    {entry.category}: output size 1 is the mean over the last {dims} dims, kept (pypto_{via.op}), as torch
    computes it; other sizes and inputs off the kernel path run torch.
    """
    ones = output_size if isinstance(output_size, (tuple, list)) and len(output_size) == {dims} else (output_size,)
    if not (all(type(s) is int and s == 1 for s in ones) and isinstance(input, torch.Tensor) and _on_kernel_path(input)):
        return {api(entry)}(input, output_size)
    return pypto_{via.op}(input, {pooled}, keepdim=True)
'''
    return (*reduction.definitions(via), Definition(f"pypto_{entry.op}", wrapper, ("_on_kernel_path", f"pypto_{via.op}")))


register(Family("pooling", PoolingFields, rewrite, problem, parts=via_parts))
