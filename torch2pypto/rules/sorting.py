"""The sorting family: ``pypto.topk`` along one dim (topk, sort, argsort).

The host moves ``dim`` last; row tiles of whole rows (PyPTO sorts within a tile) are sorted in
FP32 (topk is documented FP32-only). ``pypto = "topk"`` gives (values, indices) as torch's
return type of the entry's name; ``args.k`` names the count (a parameter, or ``"cols"``: the
whole row, sort) and ``args.largest`` the parameter choosing the largest (topk's ``largest``,
sort's ``descending``); ``output = "int64"`` gives the indices only (argsort: pypto.argsort
fails to compile on some rows, F7A001 ``idx < size_``, and wants tiles 32 wide). Indices come
back as torch's int64. Ties may be ordered unlike torch (torch leaves them unspecified but with
``stable=True``); NaN is ordered as torch orders it, above +inf, on the kernel
(:func:`nan_ordered_topk`: no host check). With autograd recording, the values carry torch's
gradient of a selection (_with_selected_grad): each value's goes to the element its index names.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Mapping

from torch2pypto.rules import templates, walks, wrappers
from torch2pypto.rules.calls import convert, fallback_checks, wrapper_params
from torch2pypto.rules.codegen import Definition, per_entry
from torch2pypto.rules.scan import SCAN_ROWS
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.steps import Apply, Step
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, register


@dataclasses.dataclass(frozen=True)
class SortingFields(Fields):
    """The table fields the sorting family reads."""

    args: Mapping[str, str] = field("k = a parameter, or \"cols\" (the whole row: sort); largest = the order's parameter", {})
    output: Literal["int64"] | None = field("int64: the indices only (argsort)")


ARGS = ("k", "largest")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if entry.pypto != "topk":
        return f"the sorting op is pypto.topk, not pypto.{entry.pypto}"
    names = {p.name for p in entry.params}
    if set(entry.fields.args) != set(ARGS):
        return f"args: pypto.topk needs {', '.join(ARGS)}"
    for keyword, param in entry.fields.args.items():
        if param not in names and not (keyword == "k" and param == "cols"):
            return f"args.{keyword} = {param!r} is no parameter"
    if "dim" not in names:
        return "a sort takes a dim parameter"
    used = {entry.params[0].name, "dim", *entry.fields.args.values(), *entry.fallback, *entry.torch_only}
    for p in wrapper_params(entry):
        if p.name not in used:
            return f"parameter {p.name!r} is no argument of pypto.{entry.pypto}, fallback, torch_only nor rejected"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    return convert(site, definitions)


FP32_MAX = "3.4028234663852886e+38"  # x > FP32_MAX: x is +inf (pypto.eq(x, math.inf) found no +inf in the interpreter)


def nan_ordered_topk(k: str, largest: str, values: bool) -> tuple[Apply, ...]:
    """``indices`` (and ``result``, the values, if ``values``): pypto.topk of ``x_tile`` (FP32)
    with NaN ordered as torch orders it, above +inf, and no NaN given to pypto.topk (whose NaN
    order is not documented).

    One topk orders the row with NaN taken as +inf; a second orders its classes (NaN 2, +inf 1,
    else 0) the same way. Where the first holds +inf, both hold the row's NaN and +inf elements,
    and the second in torch's order: its indices are taken there, and NaN (inf - inf) where it
    holds 2.
    """
    topk = Step("topk", fp32=True)
    order = (Apply("t0", Step("eq", result="bool"), ("x_tile", "x_tile")),
             Apply("t1", Step("where"), ("t0", "x_tile", "math.inf")),
             Apply("t2", Step("gt", result="bool"), ("x_tile", FP32_MAX)),
             Apply("t3", Step("where"), ("t2", "1.0", "0.0")),
             Apply("t4", Step("where"), ("t0", "t3", "2.0")),
             Apply("t5, t6", topk, ("t1", k, "-1", largest)),
             Apply("t7, t8", topk, ("t4", k, "-1", largest)),
             Apply("t9", Step("gt", result="bool"), ("t5", FP32_MAX)),
             Apply("indices", Step("where"), ("t9", "t8", "t6")))
    if not values:
        return order
    return (*order,
            Apply("t10", Step("eq", result="bool"), ("t7", "2.0")),
            Apply("t11", Step("sub"), ("t5", "t5")),
            Apply("result", Step("where"), ("t10", "t11", "t5")))


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    x = entry.params[0].name
    indices_only = entry.fields.output == "int64"
    checks = fallback_checks(entry)
    guard = ["d is not None", f"_on_kernel_path({x})", f"_fits_whole_rows({x}, d, buffers=6)", *checks]
    k = "x.shape[1]" if entry.fields.args["k"] == "cols" else entry.fields.args["k"]
    largest = entry.fields.args["largest"]
    if entry.fields.args["k"] != "cols":
        guard.insert(1, f"type({k}) is int and 0 < {k} <= {x}.shape[d]")
    program = nan_ordered_topk("k", "largest", not indices_only)
    launch = f"_launch({entry.op}_kernel(_PYPTO_DTYPES[x.dtype], x.shape[1], count, bool({largest})), x, {{}}out)\n"
    body = (f"x, moved = _scan_rows({x}, d)\n"
            f"count = {k}\n"
            "out = torch.empty(x.shape[0], count, dtype=torch.int64, device=x.device)\n")
    indices = "out.reshape(shape).movedim(-1, d).contiguous()"
    if indices_only:
        outputs = [("out", "indices", walks.INDEX, "k")]
        doc = "The indices ordering each whole row of [rows, cols] tiles (the k largest or smallest), in FP32."
        body += launch.format("") + "shape = (*moved[:-1], count)\n" + f"return {indices}\n"
        how = "the indices of pypto.topk of the whole row along dim moved last, in FP32"
    else:
        outputs = [("values", "result", "dtype", "k"), ("out", "indices", walks.INDEX, "k")]
        doc = "The k largest (or smallest) of each whole row of [rows, cols] tiles and their indices, in FP32."
        body += (f"values = torch.empty(x.shape[0], count, dtype={x}.dtype, device=x.device)\n"
                 + launch.format("values, ") + "shape = (*moved[:-1], count)\n"
                 f"return torch.return_types.{entry.op}((values.reshape(shape).movedim(-1, d).contiguous(),\n"
                 f"    {indices}))\n")
        how = "pypto.topk along dim moved last, in FP32: values and indices"
    factory = "dtype, x_cols, k, largest"
    kernel = walks.indexed_kernel(f"{entry.op}_kernel", doc, factory, "_tile_shape(x_cols, 64, 12, (dtype, pypto.DT_FP32), whole_rows=True)",
                                      [("x", "rows")], program, outputs)
    params = wrapper_params(entry)
    selected = None if indices_only else f"_with_selected_grad(kernel_path, d, {x})"  # torch's gradient: to the indices'
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), how, x, wrappers.torch_call(entry, params),
        f"({' and '.join(guard)})", body, ("_indexed_dim", "_scan_rows", "_fits_whole_rows", f"{entry.op}_kernel",
                                           *(["_with_selected_grad"] if selected else [])),
        prologue=f"d = _indexed_dim({x}, dim)\n", launched=selected,
    )
    return dataclasses.replace(kernel, imports=("math",)), walks.INDEXED_DIM, templates.WHOLE_ROWS, SCAN_ROWS, wrapper


register(Family("sorting", SortingFields, rewrite, problem))
