"""The reverse family: ``torch.flip``, the elements along dims in reverse order.

PyPTO 0.2.0 has no reverse: pypto.index_select by a descending pypto.arange, built in the
kernel, reverses a tile's rows or columns. The host views a contiguous input as [outer, length,
inner], the flipped dims (adjacent) in the middle (:data:`FLIPPED_RUNS`): where they are last,
the kernel reverses each row of [outer, length] (:func:`walks.reversed_cols_kernel`), else the
rows of each group of ``length`` rows of [outer * length, inner]
(:func:`walks.reversed_rows_kernel`). Both read the input and write the output in place.
Dims that are not adjacent, inputs that are not contiguous and flips of size-1 dims only run
torch.
"""

from __future__ import annotations

from typing import Mapping

from torch2pypto.rules import walks, wrappers
from torch2pypto.rules.calls import literal, rejection, replacement, signature_problem, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.schema.entry import Entry, Fields
from torch2pypto.schema.family import Family, register

PARAMS = ("input", "dims")
FLIPPED_RUNS = copied("layout", "_flipped_runs")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if entry.pypto != "index_select":
        return "a reverse is a pypto.index_select by a descending pypto.arange (PyPTO 0.2.0 has no reverse)"
    return signature_problem(entry, "a reverse", PARAMS)


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site)
    if rejected:
        return rejected
    if "dims" not in site.args:
        return Unsupported("missing argument 'dims'")
    dims = literal(site.args["dims"])
    dims = [dims] if type(dims) is int else dims
    if isinstance(dims, (list, tuple)) and all(type(d) is int and d >= 0 for d in dims) and len(dims) > 1 \
            and max(dims) - min(dims) >= len(set(dims)):
        return Unsupported(f"dims {literal(site.args['dims'])!r} are not adjacent: two reversals, a launch each")
    entry = site.entry
    return Converted(replacement(site, f"pypto_{entry.op}"), definitions(entry), "pypto.index_select", wrapper_params(entry))


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    cols = walks.reversed_cols_kernel(f"{entry.op}_cols_kernel", "The cols of each row of [rows, cols] in reverse order, pypto.index_select by a descending pypto.arange.")
    rows = walks.reversed_rows_kernel(f"{entry.op}_rows_kernel", "The rows of each group of [group, cols] rows in reverse order, pypto.index_select by a descending pypto.arange.")
    declared = wrappers.dtypes_tuple(entry)
    body = (
        "outer, length, inner = runs\n"
        "out = torch.empty(input.shape, dtype=input.dtype, device=input.device)\n"
        "dtype = _PYPTO_ALL_DTYPES[input.dtype]\n"
        "if inner == 1:  # the flipped dims are last: each row's cols reversed\n"
        f"    _launch({entry.op}_cols_kernel(dtype, length, _spread_rows(outer, length)), input.view(outer, length), out.view(outer, length))\n"
        "else:  # the rows of each group of length rows reversed\n"
        f"    _launch({entry.op}_rows_kernel(dtype, inner, length, _spread_rows(length, inner, whole=True)), input.view(-1, inner), out.view(-1, inner))\n"
        "return out\n"
    )
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(wrapper_params(entry)),
        "pypto.index_select by a descending pypto.arange along the flipped dims, adjacent, of a contiguous input",
        "input", wrappers.torch_call(entry, wrapper_params(entry)),
        f"(runs is not None and _on_kernel_path(input, dtypes={declared}))", body,
        ("_flipped_runs", f"{entry.op}_cols_kernel", f"{entry.op}_rows_kernel"),
        prologue="dims = (dims,) if type(dims) is int else dims  # Tensor.flip(-1): torch.flip takes a sequence\n"
                 "runs = None if dims is None else _flipped_runs(input, dims)\n",
    )
    return cols, rows, FLIPPED_RUNS, wrapper


register(Family("reverse", Fields, rewrite, problem))
