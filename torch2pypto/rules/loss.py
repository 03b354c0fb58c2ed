"""The loss family: each row's or element's loss term and its reduction in kernels.

An entry's ``term`` says which: ``cross_entropy`` (below), or an element's term of two same-shape
tensors, ``squared_error`` (mse_loss) or ``logistic`` (binary_cross_entropy_with_logits). For
those, the tensors are rows of their last dim read in place: :func:`terms_kernel` writes each
element's term in FP32 (``reduction="none"``, rounded once to the input's dtype) or each row's
FP32 sum, and :func:`total_kernel` (one for both) the sum of the rows, or their mean over the
elements. Their wrappers run torch for weight, pos_weight, size_average / reduce, and tensors of
another shape (torch broadcasts with a warning, or raises) or dtype (torch promotes).

For cross_entropy, the logits are [n, classes] rows read in place, the targets [n] int64 read as [n, 1] (PyPTO
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
from typing import Literal, Mapping

from torch2pypto.rules import templates, wrappers
from torch2pypto.rules.calls import wrapped, wrapper_params
from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.kernel_ir import Assign, Do, Stmt, items, pypto, when
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.templates import FP32, factory, row_tiles, tensor, tile_dtypes
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, length_over, register


@dataclasses.dataclass(frozen=True)
class LossFields(Fields):
    """The table field the loss family reads."""

    term: Literal["cross_entropy", "squared_error", "logistic"] = field(
        "the loss: cross_entropy = logsumexp(row) - row[target] of class indices; squared_error = (x - y)^2 "
        "(mse_loss); logistic = (1 - y) * x + log1p(exp(-|x|)) + max(-x, 0) of logits (binary_cross_entropy_with_logits)",
        "cross_entropy")


# term -> torch's parameters
PARAMS = {
    "cross_entropy": ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"),
    "squared_error": ("input", "target", "size_average", "reduce", "reduction", "weight"),
    "logistic": ("input", "target", "weight", "size_average", "reduce", "reduction", "pos_weight"),
}


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    term = entry.fields.term
    if tuple(p.name for p in entry.params) != PARAMS[term]:
        return f"a {term} loss takes torch's ({', '.join(PARAMS[term])})"
    if entry.reject:
        return f"a {term} loss rejects nothing statically: its wrapper runs torch for what the kernels do not take"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    return wrapped(site, definitions if site.entry.fields.term == "cross_entropy" else elementwise_definitions)


# the row kernels' tiles: rows of x [n, cols] from row r, width wide, the real cols valid
ROW_TILE_SHAPE = Assign("rows, tile_cols", f"_tile_shape(width, max_rows, 6, {tile_dtypes('dtype', FP32)}, whole_rows=True)")
ROW_VALID = items("(n - r).min(rows)", "cols")
X_PARAM = tensor("x", items("pypto.DYNAMIC", "cols"), "dtype")


def over_rows(*steps: Stmt) -> list[Stmt]:
    """The loop over the row tiles of ``x``: each tile ``x_tile`` from row ``r``, then ``steps``."""
    return [
        Assign("n", "x.shape[0]"),
        row_tiles(
            "n",
            Assign("r", "i * rows"),
            Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")),
            Assign("x_tile", pypto("view", "x", items("rows", "width"), items("r", "0"), valid_shape=ROW_VALID)),
            *steps,
        ),
    ]


def rows_kernel(name: str) -> Definition:
    """``name(dtype, out_dtype, cols, width, ignore_index, max_rows)``: each row's loss term of
    ``x`` [n, cols] (tiles ``width`` wide, the real cols valid) at ``target`` [n, 1] into ``out``,
    and 1.0 where the row is kept (its target is no ignore_index) into ``kept``."""
    classes = [
        Do(pypto("set_vec_tile_shapes", "tile_cols"), "for a row of one tile: the arange"),
        Assign("classes", pypto("reshape", pypto("arange", "float(width)"), items("1", "width")), "each column's class"),
        Assign("classes", pypto("view", "classes", items("1", "width"), items("0", "0"), valid_shape=items("1", "cols"))),
    ]
    body = over_rows(
        Assign("t_tile", pypto("view", "target", items("rows", "1"), items("r", "0"), valid_shape=items("(n - r).min(rows)", "1"))),
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
    )
    params = [
        X_PARAM,
        tensor("target", items("pypto.DYNAMIC", "1"), "pypto.DT_INT64"),
        tensor("out", items("pypto.DYNAMIC", "1"), "out_dtype"),
        tensor("kept", items("pypto.DYNAMIC", "1"), FP32),
    ]
    doc = "Each row's logsumexp(row) - row[target] in FP32, 0 where the target is ignore_index, and the kept rows' flags."
    text = factory(name, ["dtype, out_dtype, cols, width, ignore_index, max_rows"], doc, [ROW_TILE_SHAPE], params, body)
    return Definition(name, text, ("_tile_shape", "_annotated"))


def total_kernel(name: str, kept: bool = True) -> Definition:
    """``name(out_dtype, count, width, mean)``: the sum of the first ``count`` row terms ``loss``
    [1, width], divided by the sum of their ``kept`` flags if ``mean``, into ``out`` [1, 1].
    Without ``kept``: ``name(out_dtype, count, width, numel)``, divided by ``numel`` unless 0."""
    valid = items("1", "count")
    if kept:
        average = when("mean", Assign("total", pypto("div", "total", pypto(
            "sum", pypto("view", "kept", items("1", "width"), items("0", "0"), valid_shape=valid), dim="-1", keepdim="True"))),
            comment="0 / 0 where every row is ignored: NaN, as torch")
    else:
        average = when("numel > 0", Assign("total", pypto("div", "total", "float(numel)")), comment="the mean over the elements")
    body = [
        Do(pypto("set_vec_tile_shapes", "1", "tile_cols")),
        Assign("total", pypto("sum", pypto("view", "loss", items("1", "width"), items("0", "0"), valid_shape=valid), dim="-1", keepdim="True")),
        average,
        when(f"out_dtype != {FP32}", Assign("total", pypto("cast", "total", "out_dtype"))),
        Do(pypto("assemble", "total", items("0", "0"), "out")),
    ]
    prelude = [Assign("_, tile_cols", f"_tile_shape(width, 1, 3, ({FP32},), whole_rows=True)")]
    params = [
        tensor("loss", items("1", "width"), FP32),
        *([tensor("kept", items("1", "width"), FP32)] if kept else []),
        tensor("out", items("1", "1"), "out_dtype"),
    ]
    if kept:
        doc = "The sum of a row of loss terms (count valid), over the sum of the kept flags for a mean."
    else:
        doc = "The sum of a row of loss terms (count valid), over the element count for a mean."
    factory_params = "out_dtype, count, width, mean" if kept else "out_dtype, count, width, numel"
    return Definition(name, factory(name, [factory_params], doc, prelude, params, body), ("_tile_shape", "_annotated"))


# term -> the FP32 statements of ``term`` from tiles ``x_tile`` and ``y_tile``, as torch computes it
TERMS = {
    "squared_error": [
        Assign("d", pypto("sub", "x_tile", "y_tile")),
        Assign("term", pypto("mul", "d", "d")),
    ],
    "logistic": [
        Assign("term", pypto("sub", "x_tile", pypto("mul", "y_tile", "x_tile")), "(1 - y) * x"),
        Assign("term", pypto("add", "term", pypto("log1p", pypto("exp", pypto("neg", pypto("abs", "x_tile"))))),
               "+ log1p(exp(-|x|)): no overflow"),
        Assign("term", pypto("add", "term", pypto("relu", pypto("neg", "x_tile"))), "+ max(-x, 0)"),
    ],
}


def terms_kernel(name: str, term: str) -> Definition:
    """``name(dtype, out_dtype, cols, width, rowsum, max_rows)``: the loss term of each element of
    ``x`` and ``y`` [n, cols] (tiles ``width`` wide, the real cols valid) into ``out`` [n, cols] of
    ``out_dtype``, or with ``rowsum`` each row's FP32 sum into ``out`` [n, 1]."""
    body = over_rows(
        Assign("y_tile", pypto("view", "y", items("rows", "width"), items("r", "0"), valid_shape=ROW_VALID)),
        templates.to_fp32(["x_tile", "y_tile"], comment="in FP32, as torch computes"),
        *TERMS[term],
        when("rowsum", Assign("term", pypto("sum", "term", dim="-1", keepdim="True")), comment="the row's sum, in FP32"),
        when(f"out_dtype != {FP32}", Assign("term", pypto("cast", "term", "out_dtype"))),
        Do(pypto("assemble", "term", items("r", "0"), "out")),
    )
    prelude = [ROW_TILE_SHAPE, Assign("out_cols", "1 if rowsum else cols")]
    params = [
        X_PARAM,
        tensor("y", items("pypto.DYNAMIC", "cols"), "dtype"),
        tensor("out", items("pypto.DYNAMIC", "out_cols"), "out_dtype"),
    ]
    doc = f"Each element's {term.replace('_', ' ')} loss term of x and y in FP32, or each row's sum of them."
    text = factory(name, ["dtype, out_dtype, cols, width, rowsum, max_rows"], doc, prelude, params, body)
    return Definition(name, text, ("_tile_shape", "_annotated"))


ELEMENTWISE_GUARD = (
    "(size_average is None and reduce is None and weight is None{extra} and reduction in ('mean', 'sum', 'none')"
    " and input.shape == target.shape and input.dtype == target.dtype"
    " and _on_kernel_path(input) and target.device == input.device)"
)
HOW = {
    "squared_error": "(input - target)^2 of same-shape tensors in FP32; broadcast shapes (torch warns), weight and "
                     "size_average / reduce run torch",
    "logistic": "(1 - target) * input + log1p(exp(-|input|)) + max(-input, 0) of same-shape tensors in FP32, as "
                "torch's FP32 (BF16 and FP16 rounded once, where torch rounds each step); weight, pos_weight and "
                "size_average / reduce run torch",
}


def elementwise_definitions(entry: Entry) -> tuple[Definition, ...]:
    term = entry.fields.term
    terms, total = f"{entry.op}_kernel", "loss_total_kernel"  # the total: one kernel for every elementwise loss
    body = (
        "cols = input.shape[-1] if input.dim() else 1\n"
        "x, y = input.contiguous().reshape(-1, cols), target.contiguous().reshape(-1, cols)\n"
        "n = x.shape[0]\n"
        "dtype = _PYPTO_DTYPES[x.dtype]\n"
        "if reduction == 'none':\n"
        "    out = torch.empty_like(x)\n"
        f"    _launch({terms}(dtype, dtype, cols, _row_width(cols, x.dtype), False, _spread_rows(n, cols)), x, y, out)\n"
        "    return out.reshape(input.shape)\n"
        "width = -(-n // 8) * 8  # the row sums, read by the second kernel as one row of 32-byte blocks\n"
        "loss = torch.empty(width, 1, dtype=torch.float32, device=x.device)\n"
        f"_launch({terms}(dtype, pypto.DT_FP32, cols, _row_width(cols, x.dtype), True, _spread_rows(n, cols)), x, y, loss)\n"
        "out = torch.empty(1, 1, dtype=input.dtype, device=x.device)\n"
        f"_launch({total}(dtype, n, width, n * cols if reduction == 'mean' else 0), loss.reshape(1, width), out)\n"
        "return out.reshape(())\n"
    )
    params = wrapper_params(entry)
    guard = ELEMENTWISE_GUARD.format(extra=" and pos_weight is None" if term == "logistic" else "")
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), HOW[term] + "; the sum or the mean in a second kernel",
        "input, target", wrappers.torch_call(entry, params, unless_none=("weight",) if term == "squared_error" else ()),
        guard, body, (terms, total, "_row_width"),
    )
    return terms_kernel(terms, term), total_kernel(total, kept=False), templates.ROW_WIDTH, wrapper


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
