"""The product family: ``torch.prod`` along one dim, or of a whole tensor, rows of any width.

The host moves ``dim`` last (:data:`PRODUCT_ROWS`; no dim: the tensor is one row); the kernel
multiplies the cols of each row with pypto.mul in FP32 (:func:`templates.product_kernel`), as
pypto.prod fails to compile in PyPTO 0.2.0. Float inputs into a float dtype launch; integers
(torch multiplies them into int64) run torch.
"""

from __future__ import annotations

from typing import Mapping

from torch2pypto.rules import templates, wrappers
from torch2pypto.rules.calls import rejection, replacement, signature_problem, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.scan import SCAN_ROWS
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.schema.entry import Entry, Fields
from torch2pypto.schema.family import Family, is_float_dtype, length_over, register

PARAMS = ("input", "dim", "keepdim", "dtype")
PRODUCT_ROWS = copied("layout", "_product_rows")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if entry.pypto != "mul":
        return "a product multiplies with pypto.mul (pypto.prod fails to compile in 0.2.0)"
    if not all(map(is_float_dtype, entry.dtypes)):
        return "a product computes float results (torch multiplies integers into int64)"
    return signature_problem(entry, "a product", PARAMS)


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site)
    if rejected:
        return rejected
    entry = site.entry
    whole = "dim" not in site.args  # torch.prod(x): torch's overload (input, *, dtype)
    if whole and "keepdim" in site.args:
        return Unsupported("keepdim without dim: torch.prod takes no such call")
    params = _params(entry, whole)
    return Converted(replacement(site, _name(entry, whole), params), definitions(entry, whole), "pypto.mul", params)


def _params(entry: Entry, whole: bool):
    """The wrapper's parameters: the call without dim takes input and dtype only."""
    return tuple(p for p in wrapper_params(entry) if not whole or p.name in ("input", "dtype"))


def _name(entry: Entry, whole: bool) -> str:
    return f"pypto_{entry.op}_all" if whole else f"pypto_{entry.op}"


@per_entry
def definitions(entry: Entry, whole: bool = False) -> tuple[Definition, ...]:
    """The kernel and the wrapper; ``whole``: the call without dim, the product of every element."""
    kernel = templates.product_kernel(
        f"{entry.op}_kernel", "The product of the cols of each row of [rows, cols] tiles, pypto.mul in FP32.")
    params = _params(entry, whole)
    dim, keepdim = ("None", "False") if whole else ("dim", "keepdim")
    body = (
        f"x, shape = _product_rows(input, {dim}, {keepdim})\n"
        "out = torch.empty(x.shape[0], 1, dtype=out_dtype, device=x.device)\n"
        f"_launch({entry.op}_kernel(_PYPTO_DTYPES[x.dtype], _PYPTO_DTYPES[out_dtype], x.shape[1], {templates.SPREAD_ROWS}), x, out)\n"
        "return out.reshape(shape)\n"
    )
    count = "input.numel()" if whole else "(input.shape[dim] if input.dim() else 1)"
    guard = (f"(out_dtype in _PYPTO_DTYPES and _on_kernel_path(input)"
             f" and {count} <= {templates.PRODUCT_BLOCK * templates.PRODUCT_BLOCKS})")
    wrapper = wrappers.wrapper(
        entry, _name(entry, whole), wrappers.signature(params),
        "pypto.mul of the cols, " + ("the tensor one row" if whole else "dim moved last") + ", in FP32",
        "input", wrappers.torch_call(entry, params), guard, body,
        ("_product_rows", f"{entry.op}_kernel"), prologue="out_dtype = input.dtype if dtype is None else dtype\n",
    )
    return kernel, templates.REDUCTION_ROWS, SCAN_ROWS, PRODUCT_ROWS, wrapper


register(Family("product", Fields, rewrite, problem, accumulates="product",
                reduced_length=lambda entry, shape, dim: length_over(shape, dim)))
