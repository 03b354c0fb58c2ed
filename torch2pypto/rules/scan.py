"""The scan family: ``pypto.<op>`` along one dim (cumsum), rows of any width.

The host moves ``dim`` last; the kernel scans each row in column blocks of one tile, each block
adding the running total of the blocks before it (:func:`templates.scan_kernel`).
``compute = "float32"`` scans float tiles in FP32 and int32 ones in INT32
(:func:`templates.scan_kernel`); an integer scan into a float dtype, or back, runs torch.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Mapping

from torch2pypto.rules import templates, wrappers
from torch2pypto.rules.calls import wrapped, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.steps import Apply, Step
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, is_float_dtype, keeps_integers, length_over, register


@dataclasses.dataclass(frozen=True)
class ScanFields(Fields):
    """The table fields the scan family reads."""

    compute: Literal["float32"] | None = field("float32 accumulates in FP32")


PARAMS = ("input", "dim", "dtype")

SCAN_ROWS = copied("layout", "_scan_rows")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    for p in wrapper_params(entry):
        if p.name not in PARAMS:
            return f"parameter {p.name!r} is none of {', '.join(PARAMS)} and not rejected"
    if "dim" not in {p.name for p in entry.params}:
        return "a scan takes a dim parameter"
    return None


def launches(entry: Entry, dtype: str, arguments: Mapping[str, str]) -> bool:
    """A scan launches into a dtype the entry declares, an integer one only into its own, named:
    torch sums integers into int64."""
    named = arguments.get("dtype", "None")
    own = named in (f"torch.{dtype}", f"{arguments.get('input')}.dtype")
    declared = not named.startswith("torch.") or named.removeprefix("torch.") in entry.dtypes
    floats = is_float_dtype(dtype)
    return keeps_integers(entry, dtype, arguments) and declared and (floats or own)


def step(entry: Entry) -> Step:
    return Step(entry.pypto, (("dim", "-1"),), entry.fields.compute == "float32")


def rewrite(site: CallSite) -> Converted | Unsupported:
    return wrapped(site, definitions)


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    fp32 = ", in FP32" + (" (int32 in INT32)" if "int32" in entry.dtypes else "") if entry.fields.compute == "float32" else ""
    kernel = templates.scan_kernel(
        f"{entry.op}_kernel",
        f"pypto.{entry.pypto} along each row of [rows, cols] tiles, in column blocks{fp32}.",
        [Apply("result", step(entry), ("x_tile",))],
    )
    params = wrapper_params(entry)
    names = {p.name for p in params}
    summed = "(input.dtype if input.is_floating_point() else torch.int64)"  # torch sums integers into int64
    out_dtype = f"{summed} if dtype is None else dtype" if "dtype" in names else summed
    body = (
        "x, moved = _scan_rows(input, dim)\n"
        "out = torch.empty(x.shape, dtype=out_dtype, device=x.device)\n"
        f"_launch({entry.op}_kernel(_PYPTO_ALL_DTYPES[x.dtype], _PYPTO_ALL_DTYPES[out_dtype], x.shape[1], _spread_rows(*x.shape, tiles=8)), x, out)\n"  # scan tiles run one after another
        "return out.reshape(moved).movedim(-1, dim).contiguous().reshape(input.shape)\n"
    )
    declared = wrappers.dtypes_tuple(entry)
    guard = (f"(out_dtype in {declared} and (input.is_floating_point() or not out_dtype.is_floating_point)"
             f" and _on_kernel_path(input, dtypes={declared}))")
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), f"pypto.{entry.pypto} along dim moved last{fp32}",
        "input", wrappers.torch_call(entry, params), guard, body,
        ("_scan_rows", f"{entry.op}_kernel"), prologue=f"out_dtype = {out_dtype}\n",
    )
    return kernel, SCAN_ROWS, wrapper


register(Family("scan", ScanFields, rewrite, problem, accumulates="sum",
                reduced_length=lambda entry, shape, dim: length_over(shape, dim), launches=launches))
