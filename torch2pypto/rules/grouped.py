"""The grouped family: grouped_mm, one ``pypto.matmul`` per group of rows, accumulated in FP32.

``grouped_mm(a, b, offs=offs)`` multiplies the rows of ``a`` [s, k] in runs, run j (rows
offs[j-1] to offs[j]) by the matrix ``b[j]`` ([k, n]): an MoE layer's experts, its tokens
sorted by expert. The offsets are data (a histogram's cumulative sum), so the kernel reads them
itself as its loop bounds (:func:`templates.cube_kernel`, ``grouped``): no host sync, an
expert without tokens walks no tile, and rows past the last offset stay unwritten as torch's
leave them. A stack of transposed weights (``w.transpose(-2, -1)``) is read in place. torch's
other forms (no offs, a 3-D ``a``, a 2-D ``b``), a bias and another out_dtype run torch.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from torch2pypto.rules import templates, wrappers
from torch2pypto.rules.calls import signature_problem, wrapped, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.steps import Apply, Step
from torch2pypto.schema.entry import Entry, Fields
from torch2pypto.schema.family import Family, register


@dataclasses.dataclass(frozen=True)
class GroupedFields(Fields):
    """The grouped family reads no fields of its own."""


PARAMS = ("mat_a", "mat_b", "offs", "bias", "out_dtype")
GROUPED_TAKES = copied("cube", "_grouped_takes", last="_grouped_operands")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if entry.pypto != "matmul":
        return f"a grouped matmul is pypto.matmul, not pypto.{entry.pypto}"
    return signature_problem(entry, "a grouped matmul", PARAMS)


def rewrite(site: CallSite) -> Converted | Unsupported:
    return wrapped(site, definitions)


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    """The grouped kernel and the wrapper of a grouped matmul."""
    kernel = f"{entry.op}_kernel"
    product = Apply("result", Step("matmul", (("b_trans", "transposed"),)), ("a_tile", "b_tile", templates.FP32))
    doc = ("pypto.matmul of [rows, k] row tiles by one of a stack of b [k, n] (transposed: read from its "
           "transpose [n, k]) per run of rows, the runs' ends read from offs, accumulated in FP32.")
    body = (
        "a, b, transposed = _grouped_operands(mat_a, mat_b)\n"
        "n = mat_b.shape[2]\n"
        "rows = _cube_rows(-(-a.shape[0] // mat_b.shape[0]))\n"
        "out = torch.empty(a.shape[0], n, dtype=mat_a.dtype, device=mat_a.device)\n"
        f"_launch({kernel}(_PYPTO_DTYPES[a.dtype], _PYPTO_DTYPES[out.dtype], a.shape[1], n, rows, transposed), a, b, offs, out)\n"
        "return out\n"
    )
    how = ("pypto.matmul of each run of rows by its matrix, the runs' ends read from offs inside the kernel, "
           "accumulated in FP32; a stack of transposed matrices is read in place. Other forms (no offs, 3-D mat_a, "
           "2-D mat_b), a bias and another out_dtype run torch")
    params = wrapper_params(entry)
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), how, "mat_a, mat_b, offs",
        wrappers.torch_call(entry, params), "_grouped_takes(mat_a, mat_b, offs, bias, out_dtype)", body,
        ("_grouped_takes", "_cube_tiles", kernel),
    )
    grouped = templates.cube_kernel(kernel, doc, product, [], batched=True, bias=False, grouped=True)
    return grouped, templates.CUBE_TILES, GROUPED_TAKES, wrapper


def reduced_length(entry: Entry, shape: tuple[int, ...], dim) -> int:
    """A grouped matmul's K: its input's last dim."""
    return shape[-1]


register(Family("grouped", GroupedFields, rewrite, problem, accumulates="sum", reduced_length=reduced_length))
