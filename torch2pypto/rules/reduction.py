"""The row reduction family: ``pypto.<reducer>`` over any dims, keepdim, an output dtype.

The host moves the reduced dims last and pads the rows to 32 bytes with the reducer's identity
(:data:`templates.REDUCTION_ROWS`); the kernel reduces each row. ``compute = "float32"``
accumulates in FP32 (``pypto.sum`` takes FP32 only); ``average`` divides by the count (mean).
"""

from __future__ import annotations

from typing import Mapping

from torch2pypto.mapping import Entry
from torch2pypto.rules import templates, wrappers
from torch2pypto.rules.calls import rejection, replacement, wrapper_params
from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.steps import Apply, Step

IDENTITIES = {"sum": "0.0", "amax": "-math.inf", "amin": "math.inf", "prod": "1.0"}  # pads rows to 32 bytes
PARAMS = ("input", "dim", "keepdim", "dtype")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if entry.pypto not in IDENTITIES:
        return f"no padding identity known for pypto.{entry.pypto} (reducers: {', '.join(IDENTITIES)})"
    if entry.average and entry.pypto != "sum":
        return "average divides a sum by the count; it needs pypto.sum"
    for p in wrapper_params(entry):
        if p.name not in PARAMS:
            return f"parameter {p.name!r} is none of {', '.join(PARAMS)} and not rejected"
    if "dim" not in {p.name for p in entry.params}:
        return "a reduction takes a dim parameter"
    return None


def step(entry: Entry) -> Step:
    return Step(entry.pypto, (("dim", "-1"), ("keepdim", "True")), entry.compute == "float32")


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site)
    if rejected:
        return rejected
    entry = site.entry
    return Converted(replacement(site, f"pypto_{entry.op}"), definitions(entry), _how(entry), wrapper_params(entry))


def _how(entry: Entry) -> str:
    return f"pypto.{entry.pypto}" + (" + pypto.mul" if entry.average else "")


def definitions(entry: Entry) -> tuple[Definition, ...]:
    program = [Apply("result", step(entry), ("x_tile",))]
    if entry.average:
        program.append(Apply("result", Step("mul"), ("result", "1.0 / count")))
    what = "mean" if entry.average else f"pypto.{entry.pypto}"
    fp32 = ", accumulated in FP32" if entry.compute == "float32" else ""
    kernel = templates.row_kernel(
        f"{entry.op}_kernel",
        f"The {what} of each row of [rows, cols] tiles{fp32}.",
        "dtype, out_dtype, cols" + (", count" if entry.average else ""),
        ["x"],
        program,
        out_dtype="out_dtype",
        out_cols="1",
        buffers=4,
    )
    params = wrapper_params(entry)
    names = {p.name for p in params}
    out_dtype = "input.dtype if dtype is None else dtype" if "dtype" in names else "input.dtype"
    keepdim = "keepdim" if "keepdim" in names else "False"
    count = ", input.numel() // max(out.numel(), 1)" if entry.average else ""
    body = (
        f"x, shape = _reduction_rows(input, dim, {keepdim}, {IDENTITIES[entry.pypto]})\n"
        "out = torch.empty(x.shape[0], 1, dtype=out_dtype, device=x.device)\n"
        f"_launch({entry.op}_kernel(_PYPTO_DTYPES[x.dtype], _PYPTO_DTYPES[out_dtype], x.shape[1]{count}), x, out)\n"
        "return out.reshape(shape)\n"
    )
    how = f"{_how(entry)} over the reduced dims moved last{fp32}"
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), how, "input",
        wrappers.torch_call(entry, params), "(out_dtype in _PYPTO_DTYPES and _on_kernel_path(input))", body,
        ("_reduction_rows", f"{entry.op}_kernel"), prologue=f"out_dtype = {out_dtype}\n",
    )
    return kernel, templates.REDUCTION_ROWS, wrapper
