"""The histogram family: torch.histc of FP32 values, counted per tile of bins.

A value's bin is torch's own formula in FP32, ``floor((x - min) * bins / (max - min))`` with
``max`` in the last bin; values outside [min, max] and NaN fall in none. The kernel holds the
values as one row and walks tiles of bin numbers ([bins, 1], made once per device): each tile
compares every value's bin with its numbers and sums the matches along the row. FP32 only
(torch computes a half input's bins in its own dtype); min == max (the data's own range), and the
other calls torch refuses or would give a gradient to, run torch (runtime ``_histc_edges``).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from torch2pypto.rules import wrappers
from torch2pypto.rules.calls import signature_problem, wrapped, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.kernel_ir import Assign, Do, call, items, loop, pypto
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.steps import Apply, Step, row_reduction, statements
from torch2pypto.rules.templates import FP32, factory, tensor
from torch2pypto.schema.entry import Entry, Fields
from torch2pypto.schema.family import Family, register

PARAMS = ("input", "bins", "min", "max")
EDGES = copied("operands", "_histc_edges")
BINS = copied("operands", "_histc_bins")


@dataclasses.dataclass(frozen=True)
class HistogramFields(Fields):
    """The histogram family reads no fields of its own."""


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if entry.pypto != "floor+eq+sum":
        return "a histogram counts with pypto.floor, pypto.eq and pypto.sum (floor+eq+sum)"
    if problem := signature_problem(entry, "a histogram", PARAMS):
        return problem
    if tuple(entry.dtypes) != ("float32",):
        return "a histogram takes float32 values (torch bins a half input in its own dtype)"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    return wrapped(site, definitions)


# each value's bin (-1: none) as torch's histc computes it in FP32, compared with a tile of bin numbers
PROGRAM = (
    Apply("t0", Step("ge", result="bool"), ("x_tile", "left")),
    Apply("t1", Step("le", result="bool"), ("x_tile", "right")),
    Apply("t2", Step("logical_and", result="bool"), ("t0", "t1")),
    Apply("t3", Step("mul"), ("x_tile", "0.0")),
    Apply("t4", Step("sub"), ("t3", "left")),
    Apply("width", Step("add"), ("t4", "right")),  # max - min in FP32, as torch's edges subtract
    Apply("t5", Step("sub"), ("x_tile", "left")),
    Apply("t6", Step("mul"), ("t5", "bins * 1.0")),
    Apply("t7", Step("div"), ("t6", "width")),
    Apply("t8", Step("floor"), ("t7",)),
    Apply("t9", Step("minimum"), ("t8", "bins - 1.0")),  # max is in the last bin
    Apply("t10", Step("where"), ("t2", "t9", "-1.0")),
    Apply("t11", Step("eq", result="bool"), ("t10", "bins_tile")),
    Apply("t12", Step("where"), ("t11", "1.0", "0.0")),
    Apply("result", row_reduction("sum"), ("t12",)),
)


def histc_kernel(name: str) -> Definition:
    """The factory ``name(cols, bins, left, right)`` of a kernel counting the values of ``x`` ([1,
    cols], FP32) in each of ``bins`` equal bins of [left, right], a tile of ``rows`` bins at a time."""
    body = [
        Assign("n", "bins_in.shape[0]"),
        loop("i", pypto("loop", "(n + rows - 1) // rows", name='"bin_tiles"', unroll_list=items("1")),
             Assign("r", "i * rows"),
             Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")),
             Assign("x_tile", pypto("view", "x", items("1", "cols"), items("0", "0"))),
             Assign("bins_tile", pypto("view", "bins_in", items("rows", "1"), items("r", "0"), valid_shape=items("(n - r).min(rows)", "1"))),
             *statements(PROGRAM),
             Do(pypto("assemble", "result", items("r", "0"), "out"))),
    ]
    prelude = [
        Assign("rows, tile_cols", call("_tile_shape", "cols", "64", "12", f"({FP32},)", whole_rows="True")),
        Assign("tile_cols", "-(-tile_cols // 8) * 8", "a reduced tile row spans 32-byte blocks"),
    ]
    params = [tensor("x", items("pypto.DYNAMIC", "cols"), FP32), tensor("bins_in", items("pypto.DYNAMIC", "1"), FP32),
              tensor("out", items("pypto.DYNAMIC", "1"), FP32)]
    doc = "The count of [1, cols] FP32 values in each of bins equal bins of [left, right], a tile of bins at a time."
    return Definition(name, factory(name, ["cols, bins, left, right"], doc, prelude, params, body), ("_tile_shape", "_annotated"))


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    kernel = f"{entry.op}_kernel"
    body = (
        "x = input.reshape(1, -1)\n"
        "out = torch.empty(bins, 1, dtype=input.dtype, device=input.device)\n"
        f"_launch({kernel}(x.shape[1], bins, *edges), x, _histc_bins(bins, input.device), out)\n"
        "return out.reshape(bins)\n"
    )
    params = wrapper_params(entry)
    how = ("each value's bin by torch's FP32 formula, compared with a tile of bin numbers and counted along the values "
           "(pypto.floor, pypto.eq, pypto.sum); min == max (the data's range) runs torch")
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), how, "input", wrappers.torch_call(entry, params),
        "edges is not None", body, (kernel, "_histc_edges", "_histc_bins"),
        prologue="edges = _histc_edges(input, bins, min, max)\n",
    )
    return histc_kernel(kernel), EDGES, BINS, wrapper


register(Family("histogram", HistogramFields, rewrite, problem))
