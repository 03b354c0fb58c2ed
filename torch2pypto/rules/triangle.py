"""The triangle family: torch.tril / torch.triu as a mask, one kernel per matrix width.

pypto.tril and pypto.triu fail to compile in pypto 0.2.0 (``F7A001 idx < size_``), so the kernel
(:func:`walks.triangle_kernel`) compares each entry's col - row, an FP32 [h, w] grid the
host makes, with ``diagonal`` (``args.keep``: pypto.le keeps the lower triangle, pypto.ge the
upper) and zeroes the rest with pypto.where. Leading dims fold into a stack of matrices.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from torch2pypto.rules import walks, wrappers
from torch2pypto.rules.calls import signature_problem, wrapped, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.steps import Step
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, register


@dataclasses.dataclass(frozen=True)
class TriangleFields(Fields):
    """The table fields the triangle family reads."""

    args: Mapping[str, str] = field("keep = \"le\" (lower: tril) or \"ge\" (upper: triu)", {})


KEEPS = {"le": "lower", "ge": "upper"}

OFFSETS = copied("operands", "_col_minus_row")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if entry.fields.args.get("keep") not in KEEPS or set(entry.fields.args) != {"keep"}:
        return 'args: keep = "le" (lower triangle) or "ge" (upper)'
    if entry.pypto != f"{entry.fields.args['keep']}+where":
        return f'pypto names the ops: "{entry.fields.args["keep"]}+where"'
    if problem := signature_problem(entry, "a triangle", ("input", "diagonal")):
        return problem
    if set(entry.dtypes) - {"float32", "float16", "bfloat16"}:
        return "triangle kernels take float dtypes"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    return wrapped(site, definitions)


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    keep = entry.fields.args["keep"]
    kernel = f"{entry.op}_kernel"
    side = KEEPS[keep]
    doc = f"The {side} triangle of each [h, w] matrix: pypto.{keep}(col - row, diagonal), pypto.where."
    body = (
        "h, w = input.shape[-2:]\n"
        "x = input.reshape(-1, w).contiguous()\n"
        "out = torch.empty_like(x)\n"
        f"_launch({kernel}(_PYPTO_DTYPES[x.dtype], h, w, float(diagonal)), x, _col_minus_row(h, w, x.device), out)\n"
        "return out.reshape(input.shape)\n"
    )
    guard = "(isinstance(input, torch.Tensor) and input.dim() >= 2 and type(diagonal) is int and _on_kernel_path(input))"
    params = wrapper_params(entry)
    how = (f"the {side} triangle by a mask, pypto.{keep} of each entry's col - row with the diagonal and "
           "pypto.where (pypto.tril/triu fail to compile in pypto 0.2.0)")
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), how, "input", wrappers.torch_call(entry, params),
        guard, body, (kernel, "_col_minus_row"),
    )
    return walks.triangle_kernel(kernel, doc, Step(keep)), OFFSETS, wrapper


register(Family("triangle", TriangleFields, rewrite, problem))
