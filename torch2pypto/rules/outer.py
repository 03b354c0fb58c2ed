"""The outer family: the outer product of two vectors as the ``via`` entry's product of views.

``torch.outer(input, vec2)`` is ``input[:, None] * vec2`` of 1-D tensors, which is what torch's
own outer computes (its reshape to a column times the row): the wrapper runs the elementwise entry
named by ``via`` (mul) on those views, which cost nothing, so dtypes, promotion and gradients are
mul's. Operands of another rank and non-tensors run torch, which raises.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from torch2pypto.rules import elementwise
from torch2pypto.rules.calls import signature_problem, via_parts, wrapped
from torch2pypto.rules.codegen import Definition, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.wrappers import api
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, register


@dataclasses.dataclass(frozen=True)
class OuterFields(Fields):
    """The table fields the outer family reads."""

    via: str | None = field("the elementwise entry multiplying the column by the row (mul)")


PARAMS = ("input", "vec2")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if problem := signature_problem(entry, "an outer product", PARAMS):
        return problem
    via = entries.get(entry.fields.via or "")
    if via is None or via.family != "elementwise" or via.pypto != "mul":
        return "via names the elementwise entry of torch.mul's semantics"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    return wrapped(site, definitions)


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    via = entry.parts[entry.fields.via]
    wrapper = f'''\
def pypto_{entry.op}(input, vec2):
    """{api(entry)} on a PyPTO kernel.

    {entry.category}: input[:, None] * vec2 of 1-D tensors (pypto_{via.op}), as torch computes it;
    other operands run torch, which raises.
    """
    if not (isinstance(input, torch.Tensor) and isinstance(vec2, torch.Tensor) and input.dim() == vec2.dim() == 1):
        return {api(entry)}(input, vec2)
    return pypto_{via.op}(input[:, None], vec2)
'''
    return (*elementwise.definitions(via), Definition(f"pypto_{entry.op}", wrapper, (f"pypto_{via.op}",)))


register(Family("outer", OuterFields, rewrite, problem, parts=via_parts))
