"""The loss family: F.cross_entropy of class indices, each row's term and its reduction in kernels.

The logits are [n, classes] rows read in place, the targets [n] int64 read as [n, 1] (PyPTO
casts INT64 to FP32 on chip: class indices are exact up to 2^24). A row kernel
(:func:`rows_kernel`) computes ``logsumexp(row) - row[target]`` in FP32: the logit at the target
is the row's sum where an arange of the columns equals it, so no gather needs the whole row in a
tile and a vocab of 256k splits into column tiles; rows whose target is ``ignore_index`` give 0
and a kept flag of 0. A target that is no class makes torch raise; the kernel gives NaN there.
``reduction="none"`` is that kernel's result; ``"sum"`` and ``"mean"`` sum its rows and flags in
a second kernel (:func:`total_kernel`), the mean dividing by the kept rows (0 / 0: NaN, as
torch). The wrapper decides at run time what runs torch: class weights, label smoothing, the
legacy size_average / reduce, probability targets, other ranks (class dim 1 of [n, C, d...]).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from torch2pypto.rules import templates, wrappers
from torch2pypto.rules.calls import wrapped, wrapper_params
from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.kernel_ir import Assign, Do, items, pypto, when
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.templates import FP32, factory, row_tiles, tensor, tile_dtypes
from torch2pypto.schema.entry import Entry, Fields
from torch2pypto.schema.family import Family, length_over, register


@dataclasses.dataclass(frozen=True)
class LossFields(Fields):
    """The loss family reads no fields of its own."""


PARAMS = ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if tuple(p.name for p in entry.params) != PARAMS:
        return f"a cross_entropy takes torch's ({', '.join(PARAMS)})"
    if entry.reject:
        return "a cross_entropy rejects nothing statically: its wrapper runs torch for what the kernels do not take"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    return wrapped(site, definitions)


def rows_kernel(name: str) -> Definition:
    """``name(dtype, out_dtype, cols, width, ignore_index, max_rows)``: each row's loss term of
    ``x`` [n, cols] (tiles ``width`` wide, the real cols valid) at ``target`` [n, 1] into ``out``,
    and 1.0 where the row is kept (its target is no ignore_index) into ``kept``."""
    classes = [
        Do(pypto("set_vec_tile_shapes", "tile_cols"), "for a row of one tile: the arange"),
        Assign("classes", pypto("reshape", pypto("arange", "float(width)"), items("1", "width")), "each column's class"),
        Assign("classes", pypto("view", "classes", items("1", "width"), items("0", "0"), valid_shape=items("1", "cols"))),
    ]
    rows = items("(n - r).min(rows)", "1")
    body = [
        Assign("n", "x.shape[0]"),
        row_tiles(
            "n",
            Assign("r", "i * rows"),
            Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")),
            Assign("x_tile", pypto("view", "x", items("rows", "width"), items("r", "0"), valid_shape=items("(n - r).min(rows)", "cols"))),
            Assign("t_tile", pypto("view", "target", items("rows", "1"), items("r", "0"), valid_shape=rows)),
            templates.to_fp32(["x_tile"], comment="in FP32, as torch accumulates"),
            Assign("t_tile", pypto("cast", "t_tile", FP32), "INT64 -> FP32 on chip"),
            Assign("m", pypto("amax", "x_tile", dim="-1", keepdim="True"), "log_softmax's shift: a row holding inf or NaN gives NaN, as torch"),
            Assign("total", pypto("sum", pypto("exp", pypto("sub", "x_tile", "m")), dim="-1", keepdim="True")),
            Assign("lse", pypto("add", pypto("log", "total"), "m")),
            *classes,
            Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")),
            Assign("hit", pypto("eq", "classes", "t_tile"), "the target's column"),
            Assign("picked", pypto("sum", pypto("where", "hit", "x_tile", "0.0"), dim="-1", keepdim="True")),
            Assign("found", pypto("sum", pypto("where", "hit", "1.0", "0.0"), dim="-1", keepdim="True")),
            Assign("term", pypto("where", pypto("eq", "found", "1.0"), pypto("sub", "lse", "picked"), 'float("nan")'),
                   "no class: NaN (torch raises)"),
            Assign("keep", pypto("ne", "t_tile", "float(ignore_index)")),
            Assign("result", pypto("where", "keep", "term", "0.0")),
            when(f"out_dtype != {FP32}", Assign("result", pypto("cast", "result", "out_dtype"))),
            Do(pypto("assemble", "result", items("r", "0"), "out")),
            Do(pypto("assemble", pypto("where", "keep", "1.0", "0.0"), items("r", "0"), "kept")),
        ),
    ]
    prelude = [
        Assign("rows, tile_cols", f"_tile_shape(width, max_rows, 6, {tile_dtypes('dtype', FP32)}, whole_rows=True)"),
    ]
    params = [
        tensor("x", items("pypto.DYNAMIC", "cols"), "dtype"),
        tensor("target", items("pypto.DYNAMIC", "1"), "pypto.DT_INT64"),
        tensor("out", items("pypto.DYNAMIC", "1"), "out_dtype"),
        tensor("kept", items("pypto.DYNAMIC", "1"), FP32),
    ]
    doc = "Each row's logsumexp(row) - row[target] in FP32, 0 where the target is ignore_index, and the kept rows' flags."
    text = factory(name, ["dtype, out_dtype, cols, width, ignore_index, max_rows"], doc, prelude, params, body)
    return Definition(name, text, ("_tile_shape", "_annotated"))


def total_kernel(name: str) -> Definition:
    """``name(out_dtype, count, width, mean)``: the sum of the first ``count`` row terms ``loss``
    [1, width], divided by the sum of their ``kept`` flags if ``mean``, into ``out`` [1, 1]."""
    valid = items("1", "count")
    body = [
        Do(pypto("set_vec_tile_shapes", "1", "tile_cols")),
        Assign("total", pypto("sum", pypto("view", "loss", items("1", "width"), items("0", "0"), valid_shape=valid), dim="-1", keepdim="True")),
        when("mean", Assign("total", pypto("div", "total", pypto(
            "sum", pypto("view", "kept", items("1", "width"), items("0", "0"), valid_shape=valid), dim="-1", keepdim="True"))),
             comment="0 / 0 where every row is ignored: NaN, as torch"),
        when(f"out_dtype != {FP32}", Assign("total", pypto("cast", "total", "out_dtype"))),
        Do(pypto("assemble", "total", items("0", "0"), "out")),
    ]
    prelude = [Assign("_, tile_cols", f"_tile_shape(width, 1, 3, ({FP32},), whole_rows=True)")]
    params = [
        tensor("loss", items("1", "width"), FP32),
        tensor("kept", items("1", "width"), FP32),
        tensor("out", items("1", "1"), "out_dtype"),
    ]
    doc = "The sum of a row of loss terms (count valid), over the sum of the kept flags for a mean."
    return Definition(name, factory(name, ["out_dtype, count, width, mean"], doc, prelude, params, body), ("_tile_shape", "_annotated"))


GUARD = (
    "(weight is None and size_average is None and reduce is None and label_smoothing == 0.0 and isinstance(ignore_index, int)"
    " and reduction in ('mean', 'sum', 'none') and input.dim() == 2 and target.dim() == 1 and target.dtype == torch.int64"
    " and _on_kernel_path(input) and target.device == input.device)"
)


def definitions(entry: Entry) -> tuple[Definition, ...]:
    rows, total = f"{entry.op}_kernel", f"{entry.op}_total_kernel"
    body = (
        "n, cols = input.shape\n"
        "x = input.contiguous()\n"
        "width = -(-n // 8) * 8  # the row terms, read by the second kernel as one row of 32-byte blocks\n"
        "each = input.dtype if reduction == 'none' else torch.float32\n"
        "loss = torch.empty(width, 1, dtype=each, device=x.device)\n"
        "kept = torch.empty(width, 1, dtype=torch.float32, device=x.device)\n"
        f"kernel = {rows}(_PYPTO_DTYPES[x.dtype], _PYPTO_DTYPES[each], cols, _row_width(cols, x.dtype), ignore_index, _spread_rows(n, cols))\n"
        "_launch(kernel, x, target.reshape(n, 1), loss, kept)\n"
        "if reduction == 'none':\n"
        "    return loss[:n].reshape(n)\n"
        "out = torch.empty(1, 1, dtype=input.dtype, device=x.device)\n"
        f"_launch({total}(_PYPTO_DTYPES[input.dtype], n, width, reduction == 'mean'), loss.reshape(1, width), kept.reshape(1, width), out)\n"
        "return out.reshape(())\n"
    )
    params = wrapper_params(entry)
    how = ("logsumexp(row) - row[target] of [n, classes] logits in FP32, rows whose target is ignore_index left out; "
           "the sum or the mean over the kept rows in a second kernel; class weights, label smoothing, "
           "size_average / reduce, probability targets and other ranks run torch")
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), how, "input, target",
        wrappers.torch_call(entry, params), GUARD, body, (rows, total, "_row_width"),
    )
    return rows_kernel(rows), total_kernel(total), templates.ROW_WIDTH, wrapper


register(Family("loss", LossFields, rewrite, problem, accumulates="sum",
                reduced_length=lambda entry, shape, dim: length_over(shape, None)))
