"""The arange family: torch.arange of Python ints, int64 or int32, on a kernel of any length.

The kernel (:func:`walks.arange_kernel`) computes start + k * step in INT32 tiles and casts them
to the result's dtype; one kernel per (dtype, start, step) serves every length. What it does not
compute runs torch's arange, decided at run time (:func:`operands._arange_plan`): arguments that
are not Python ints, float dtypes, values beyond INT32, requires_grad, pinned or non-strided
results, devices off the kernel path. ``torch.arange(end=n)``, the lone bound as a keyword, is
``torch.arange(n)``: the wrapper's start defaults to None for it, and the call passes a start
positionally, as written.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from torch2pypto.rules import walks, wrappers
from torch2pypto.rules.calls import literal, signature_problem, wrapped, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.schema.entry import Entry, Fields, Param
from torch2pypto.schema.family import Family, register


@dataclasses.dataclass(frozen=True)
class SequenceFields(Fields):
    """The arange family reads no fields of its own."""


PARAMS = ("start", "end", "step", "dtype", "layout", "device", "pin_memory", "requires_grad")

PLAN = (copied("launch", "_kernel_device"), copied("operands", "_arange_plan", first="_ARANGE_TILE"))


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if entry.pypto != "arange":
        return "an arange is pypto.arange"
    if problem := signature_problem(entry, "an arange", PARAMS):
        return problem
    if set(entry.dtypes) != {"int64", "int32"}:
        return "an arange computes int64 and int32 results"
    if entry.params[0].default is not None:
        return "an arange's start defaults to None: torch.arange(end=n) gives no start"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    dtype = site.static_dtype("dtype") if "dtype" in site.args else None
    if dtype not in (None, "?") and dtype not in site.entry.dtypes:
        return Unsupported(f"a {dtype} range: tensor creation on the host (the kernel makes {' and '.join(site.entry.dtypes)} ones)", host=True)
    for name in ("start", "end", "step"):
        if name in site.args and type(literal(site.args[name])) is float:
            return Unsupported(f"a float {name}: a float range, tensor creation on the host (the kernel makes integer ones)", host=True)
    if "start" not in site.args and ("end" not in site.args or "step" in site.args):
        given = "step= without start" if "end" in site.args else "no end"
        return Unsupported(f"{given}: torch.arange takes end alone, or start and end before step (torch raises)")
    start, *rest = wrapper_params(site.entry)
    return wrapped(site, definitions, (Param(start.name, start.kinds), *rest))  # a start given: positional, as written


# torch.arange(end) binds end to start; a step without an end goes on to torch, which refuses it
TORCH = ("torch.arange(*((start,) if end is None and step == 1 else (start, end, step)), dtype=dtype, layout=layout, "
         "device=device, pin_memory=pin_memory, requires_grad=requires_grad)")


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    kernel = f"{entry.op}_kernel"
    body = (
        "first, stride, length, out_dtype = plan\n"
        "out = torch.empty(length, dtype=out_dtype, device=device)\n"
        f"_launch({kernel}(_PYPTO_ALL_DTYPES[out_dtype], first, stride), out)\n"
        "return out\n"
    )
    how = "start + k * step in INT32 tiles cast to the dtype, any length on one kernel; other arguments run torch"
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(wrapper_params(entry)), how, "", TORCH,
        "plan is not None", body, (kernel, "_arange_plan"),
        prologue="if start is None:  # torch.arange(end=n) is torch.arange(n)\n    start, end = end, None\n"
                 "plan = _arange_plan(start, end, step, dtype, layout, device, pin_memory, requires_grad)\n",
        launched="kernel_path()",
    )
    doc = "start + k * step for k < n into out ([n], dtype), computed in INT32."
    return walks.arange_kernel(kernel, doc), *PLAN, wrapper


register(Family("arange", SequenceFields, rewrite, problem, creates=True))
