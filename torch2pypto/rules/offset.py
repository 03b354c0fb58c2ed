"""The offset family: ``torch.arange(n) + k`` as one range, ``torch.arange(k, n + k)``.

Decoders number their positions so (llama's ``torch.arange(seq_len, device=d) + past_seen_tokens``).
The sum of an int64 range and a Python int needs an int64 add, which A2/A3 have not, so the add
would run torch after the range's kernel; moved by the int instead, the range is the only op, on
the ``via`` entry's kernel. The engine sends the ``+`` of such a call and a value of no known
tensor kind here (``Table.plus``), with that value as ``offset=``, after the call's own arguments,
as Python evaluated them. The wrapper moves the range where both spell the same tensor (Python
ints, an int64 result: :func:`torch2pypto.runtime.operands._shifted_range`), and otherwise adds the
offset to the range in torch, as written. Ranges given a dtype or a float, offsets written as a
float, and ``k + torch.arange(n)`` stay the add they are.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Mapping

from torch2pypto.rules import sequence, wrappers
from torch2pypto.rules.calls import signature_problem, via_parts, wrapped, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.schema.entry import Entry, Fields, Param, field
from torch2pypto.schema.family import Family, register


@dataclasses.dataclass(frozen=True)
class OffsetFields(Fields):
    """The table fields the offset family reads."""

    via: str | None = field("the arange entry whose range the offset moves (arange)")


SHIFTED_RANGE = copied("operands", "_shifted_range")
PARAMS = ("start", "end", "step", "offset", "dtype", "layout", "device", "pin_memory", "requires_grad")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if problem := signature_problem(entry, "a moved range", PARAMS):
        return problem
    via = entries.get(entry.fields.via or "")
    if via is None or via.family != "arange":
        return "via names the arange entry"
    return None


def offsets(call: ast.Call, offset: ast.expr) -> bool:
    """Whether ``call + offset`` may be a moved range: no dtype= (whose result may be no int64),
    no float literal among the range's arguments or as the offset, no ``*``/``**`` arguments."""
    if any(type(a) is ast.Starred for a in call.args) or any(k.arg in (None, "dtype") for k in call.keywords):
        return False
    values = (*call.args, *(k.value for k in call.keywords), offset)
    return not any(type(v) is ast.Constant and type(v.value) is float for v in values)


def rewrite(site: CallSite) -> Converted | Unsupported:
    start, *rest = wrapper_params(site.entry)
    offset = [p for p in rest if p.name == "offset"]
    others = [p for p in rest if p.name != "offset"]
    # a start given: positional, as written (the arange family's); the offset last, evaluated last as written
    return wrapped(site, definitions, (Param(start.name, start.kinds), *others, *offset))


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    via = entry.parts[entry.fields.via]
    wrapper = f'''\
def pypto_{entry.op}({wrappers.signature(wrapper_params(entry))}):
    """torch.arange(start, end, step, ...) + offset on a PyPTO kernel.

    {entry.category}: a range of Python ints plus a Python int is the range moved by it, one
    pypto_{via.op} launch and no add; any other offset is added by torch, as written.
    """
    if start is None:  # torch.arange(end=n) is torch.arange(n)
        start, end = end, None
    options = dict(dtype=dtype, layout=layout, device=device, pin_memory=pin_memory, requires_grad=requires_grad)
    moved = _shifted_range(start, end, step, offset, dtype)
    if moved is None:
        return pypto_{via.op}(start, end, step, **options) + offset
    return pypto_{via.op}(*moved, step, **options)
'''
    return (*sequence.definitions(via), SHIFTED_RANGE, Definition(f"pypto_{entry.op}", wrapper, (f"pypto_{via.op}", "_shifted_range")))


register(Family("offset", OffsetFields, rewrite, problem, parts=via_parts, creates=True, offsets=offsets))
