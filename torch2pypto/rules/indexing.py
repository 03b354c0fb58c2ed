"""The indexing family: pick, gather, scatter and add by an index (``pypto.index_select``,
``gather``, ``scatter``, ``index_add``).

The entry's ``pypto`` names the op; its operands are PyPTO's parameters, ``input``, ``dim``,
``index`` and the ``src`` / ``source`` a scatter or an add writes, each the torch parameter of
that name unless ``args`` maps it (embedding: ``{ input = "weight", index = "input", dim = "0" }``).

- ``index_select``: the rows of a table (``input`` with ``dim`` moved first) that a 1-D index
  picks, walked in row tiles of the index. A ``dim`` the entry fixes (embedding's, which must be
  0) takes an index of any shape, which the result takes in the dim's place; ``rank`` is the
  table's. ``item``: the entry is ``x[i]`` (``x.__getitem__(i)``), whose 0-dim ``i`` runs torch.
- ``gather``, ``scatter``, ``index_add``: along ``dim`` moved last, row tiles of whole rows (PyPTO
  cannot tile the indexed dim). gather's and scatter's index has the input's rank (scatter's
  covers every other dim); index_add's is 1-D.

Indices are int64 or int32, read by the kernel as they are. A kernel bounds them first, the
wrapper's last check (index_bounds_kernel, only where the op's kernel would run); torch runs
(and raises) when one is out of range. scatter's ``reduce`` ('add', 'multiply') is a
kernel constant (other values, and a reduce autograd would record, run torch, which raises); a
Python number as its ``src`` (torch's ``value``) is filled on the host where the index writes.
The tensors' dtypes are the entry's (ints too: gather, index_select, embedding copy values). ``inplace`` entries (``x.scatter_``) write the
result back into the receiver and return it; ``fallback`` arguments other than their default
run torch, and ``torch_only`` ones (embedding's padding_idx) only shape torch's gradient.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from torch2pypto.rules import templates, walks, wrappers
from torch2pypto.rules.calls import convert, fallback_checks, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.scan import SCAN_ROWS
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.steps import Apply, Step
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, register


@dataclasses.dataclass(frozen=True)
class IndexingFields(Fields):
    """The table fields the indexing family reads."""

    args: Mapping[str, str] = field("PyPTO operand (input, dim, index, src / source) -> the torch parameter or literal giving it, where not the parameter of that name", {})
    rank: int | None = field("the index_select table's rank")
    inplace: bool = field("write the result into the receiver", False)
    item: bool = field("a tensor's item by a tensor, x[i] (index_select on dim 0): a 0-dim i is an int, whose item is a view (torch's)", False)


OPERANDS = {"index_select": ("input", "dim", "index"), "gather": ("input", "dim", "index"),
            "scatter": ("input", "dim", "index", "src"), "index_add": ("input", "dim", "index", "source")}
KEYWORDS = {"index_add": ("alpha",), "scatter": ("reduce",)}  # PyPTO keywords: kernel constants


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if entry.pypto not in OPERANDS:
        return f"pypto.{entry.pypto} is none of {', '.join('pypto.' + o for o in OPERANDS)}"
    names = {p.name for p in entry.params}
    known = {*OPERANDS[entry.pypto], *KEYWORDS.get(entry.pypto, ())}
    if set(entry.fields.args) - known:
        return f"args: pypto.{entry.pypto} takes {', '.join(sorted(known))}"
    bound = _bound(entry)
    for operand, param in bound.items():
        if param not in names and not (operand == "dim" and param.lstrip("-").isdigit()):
            return f"pypto.{entry.pypto}'s {operand} is {param!r}: no parameter (dim may be an int literal)"
    for operand in OPERANDS[entry.pypto]:
        if operand != "dim" and not entry.param(bound[operand]).is_tensor:
            return f"pypto.{entry.pypto}'s {operand} {bound[operand]!r} is no Tensor parameter"
    used = {*bound.values(), *entry.fallback, *entry.torch_only}
    for p in wrapper_params(entry):
        if p.name not in used:
            return f"parameter {p.name!r} is no operand of pypto.{entry.pypto}, fallback, torch_only nor rejected"
    if entry.fields.inplace and (entry.pypto == "index_select" or any(not a.startswith("torch.Tensor.") for a in entry.apis)):
        return "an in-place op is a tensor method writing what it scatters or adds"
    if entry.pypto == "index_select" and bound["dim"] not in names and bound["dim"] != "0":
        return "an index_select the entry fixes the dim of picks rows: dim = \"0\""
    if entry.fields.rank is not None and entry.pypto != "index_select":
        return "rank is the table's rank of index_select"
    if entry.fields.item and (entry.pypto != "index_select" or bound["dim"] != "0"):
        return "an item x[i] picks rows: index_select with dim = \"0\""
    return None


def _bound(entry: Entry) -> dict[str, str]:
    """PyPTO operand -> the torch parameter (or dim literal) it takes."""
    return {o: entry.fields.args.get(o, o) for o in (*OPERANDS[entry.pypto], *KEYWORDS.get(entry.pypto, ()))}


def rewrite(site: CallSite) -> Converted | Unsupported:
    return convert(site, definitions)


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    b = _bound(entry)
    op = entry.pypto
    table, index, dim = b["input"], b["index"], b["dim"]
    checks = fallback_checks(entry)
    declared = f"dtypes=({', '.join(f'torch.{d}' for d in entry.dtypes)}{',' if len(entry.dtypes) == 1 else ''})"  # others run torch
    if op == "index_select":
        fixed = dim not in {p.name for p in entry.params}
        prologue = f"d = _indexed_dim({table}, {dim}{f', rank={entry.fields.rank}' if entry.fields.rank else ''})\n"
        indexed = f"_kernel_indices({index}, {table}.shape[d]{'' if fixed else ', rank=1'})"
        if fixed:  # dim 0: the index's shape takes its place
            body = f"rows = {table}.reshape({table}.shape[0], -1).contiguous()\n"
            result = f"out.reshape(*{index}.shape, *{table}.shape[1:])"
        else:
            body = (f"table = {table}.movedim(d, 0)\n"
                    "rows = table.reshape(table.shape[0], -1).contiguous()\n")
            result = f"out.reshape(*{index}.shape, *table.shape[1:]).movedim(0, d).contiguous()"
        body += (f"out = torch.empty(indices.shape[0], rows.shape[1], dtype={table}.dtype, device={table}.device)\n"
                 f"_launch({entry.op}_kernel(_PYPTO_ALL_DTYPES[rows.dtype], _PYPTO_ALL_DTYPES[indices.dtype], rows.shape[1]), rows, indices, out)\n"
                 f"return {result}\n")
        kernel = walks.indexed_kernel(
            f"{entry.op}_kernel", "The rows of a [n, cols] table a 1-D index picks, in row tiles of the index.",
            "dtype, index_dtype, cols", "_tile_shape(cols, 64, 8, (dtype, pypto.DT_FP32))", [("table", "table"), ("index", "index")],
            [Apply("result", Step("index_select"), ("table", "0", "index_tile"))], [("out", "result", "dtype", "cols")])
        how = f"pypto.index_select of the rows of {table} with dim moved first that {index} picks"
        guard = [f"_on_kernel_path({table}, {declared})"]
        grads = [f"{table}.requires_grad"]
    else:
        source = b.get("src") or b.get("source")
        prologue = f"d = _indexed_dim({table}, {dim})\n"
        indexed = f"_kernel_indices({index}, {table}.shape[d]{', rank=1' if op == 'index_add' else ''})"
        kernel, body, how, shapes = _along_rows(entry, table, index, source)
        number = op == "scatter"  # scatter's src may be a Python number (_scatters checks it)
        guard = [*([] if op == "index_add" else [shapes]), f"_on_kernel_path({', '.join(filter(None, (table, None if number else source)))}, {declared})",
                 f"_fits_whole_rows({table}, d, buffers=4)"]
        grads = [f"{table}.requires_grad", *([f"isinstance({source}, torch.Tensor) and {source}.requires_grad"] if number
                 else [f"{source}.requires_grad"] if source else [])]
    guard = ["d is not None", *guard, *checks]
    recording = f"torch.is_grad_enabled() and ({' or '.join(grads)})"
    if entry.fields.inplace:  # autograd's in-place checks stay torch's
        body = body.replace("return ", f"return {table}.copy_(", 1).rstrip("\n") + ")\n"
        guard.append(f"not ({recording})")
    elif op == "scatter":  # torch has no gradient of a reduce, and raises when asked for one
        guard.append(f"not ({b['reduce']} is not None and {recording})")
    # the indices last: the kernel bounding them runs only where the op's kernel would
    if entry.fields.item:  # x[tensor(1)] is x[1]
        guard.append(f"isinstance({index}, torch.Tensor) and {index}.dim() > 0")
    guard.append(f"(indices := {indexed}) is not None")
    if op == "index_add":  # its shapes are the indices'
        guard.append(shapes)
    requires = ["_indexed_dim", "_kernel_indices", f"{entry.op}_kernel"]
    if op != "index_select":
        requires += ["_scan_rows", "_gathers", "_fits_whole_rows", *(["_kernel_number"] if op == "index_add" else [])]
    params = wrapper_params(entry)
    operands = ", ".join(p.name for p in params if p.is_tensor)
    unless_none = tuple(KEYWORDS["scatter"]) if op == "scatter" else ()  # torch refuses reduce=None
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), how, operands, wrappers.torch_call(entry, params, unless_none),
        f"({' and '.join(guard)})", body, tuple(requires), prologue=prologue,
    )
    extra = (templates.WHOLE_ROWS, SCAN_ROWS, SHAPES) if op != "index_select" else ()
    return kernel, walks.INDEXED_DIM, walks.INDEX_BOUNDS, walks.INDICES, *extra, wrapper


def _along_rows(entry: Entry, x: str, index: str, source: str | None):
    """The kernel, wrapper body, description and shape check of gather, scatter and index_add."""
    op = entry.pypto
    inputs = [("x", "rows"), ("index", "indices" if op == "index_add" else "index_rows")]
    operands = ["x_tile", "1", "index" if op == "index_add" else "index_tile"]
    if source:
        inputs.append(("source", "rows"))
        operands.append("source_tile")
    keywords = tuple((k, k) for k in KEYWORDS.get(op, ()))
    widths = {"gather": "index_cols", "scatter": "x_cols", "index_add": "x_cols"}
    factory = ["dtype", "index_dtype", "x_cols", "index_count" if op == "index_add" else "index_cols"]
    factory += ["source_cols"] if source else []
    factory += [k for k, _ in keywords]
    what = {"gather": "Gather along the rows of [rows, cols] tiles by an index of the same rows",
            "scatter": "Scatter source rows into [rows, cols] tiles along the row at an index's columns",
            "index_add": "Add the columns of source rows into [rows, cols] tiles at the columns a 1-D index names, in FP32 as torch"}
    kernel = walks.indexed_kernel(
        f"{entry.op}_kernel", f"{what[op]} (whole rows: PyPTO cannot tile the indexed dim).",
        ", ".join(factory), f"_tile_shape(max({', '.join(f for f in factory if f.endswith('_cols'))}), 64, 8, (dtype, pypto.DT_FP32), whole_rows=True)",
        inputs, [Apply("result", Step(op, keywords, fp32=op == "index_add"), tuple(operands))], [("out", "result", "dtype", widths[op])])
    index_rows = f"indices.reshape({index}.shape)"
    body = f"x, moved = _scan_rows({x}, d)\n"
    if op == "gather":  # the input's other dims cut to the index's
        body = (f"x, _ = _scan_rows({x}[tuple(slice(None) if k == d else slice(0, s) for k, s in enumerate({index}.shape))], d)\n"
                f"idx, moved = _scan_rows({index_rows}, d)\n")
        launch, args, out = "x.shape[1], idx.shape[1]", "x, idx", "idx.shape"
        shapes = f"_gathers({x}, {index}, d)"
    elif op == "scatter":  # a number as src: a tensor of it where the index writes
        reduce = entry.fields.args.get("reduce", "reduce")
        filled = f"torch.full({index}.shape, {source}, dtype={x}.dtype, device={x}.device)"
        body += (f"idx, _ = _scan_rows({index_rows}, d)\n"
                 f"src = {source}[tuple(slice(0, s) for s in {index}.shape)] if isinstance({source}, torch.Tensor) else {filled}\n"
                 "src, _ = _scan_rows(src, d)\n")
        launch, args, out = f"x.shape[1], idx.shape[1], src.shape[1], {reduce}", "x, idx, src", "x.shape"
        shapes = f"_scatters({x}, {index}, {source}, d, {reduce})"
    else:
        body += f"src, _ = _scan_rows({source}, d)\n"
        alpha = entry.fields.args.get("alpha", "alpha")
        launch, args, out = f"x.shape[1], indices.shape[0], src.shape[1], _kernel_number({alpha}, {x}.dtype)", "x, indices, src", "x.shape"
        shapes = f"_adds({x}, indices, {source}, d, {alpha})"
    body += (f"out = torch.empty({out}, dtype={x}.dtype, device={x}.device)\n"
             f"_launch({entry.op}_kernel(_PYPTO_ALL_DTYPES[x.dtype], _PYPTO_ALL_DTYPES[indices.dtype], {launch}), {args}, out)\n"
             "return out.reshape(moved).movedim(-1, d).contiguous()\n")
    how = f"pypto.{op} along dim moved last, in row tiles of whole rows"
    return kernel, body, how, shapes


SHAPES = copied("operands", "_gathers", last="_adds")


register(Family("indexing", IndexingFields, rewrite, problem))
