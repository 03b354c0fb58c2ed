"""pure-rename: ``x.to(dtype)``, ``x.type(dtype)``, ``x.float()``... become ``pypto.cast``.

The target dtype is the call's own argument or the one the method name implies; it must be
statically a dtype (``.to(device)`` and ``.to(other)`` are not casts) of a kind PyPTO has.
"""

from __future__ import annotations

import libcst as cst

from torch2pypto.mapping import parse_signature

from torch2pypto.rules.calls import dtype_expr, rejection
from torch2pypto.rules.casting import CAST_KERNEL, cast_wrapper
from torch2pypto.rules.site import CallSite, Converted, Unsupported

PARAMS = parse_signature("pypto_cast", "(input: Tensor, dtype: DType)")
WRAPPER = cast_wrapper(
    "pypto_cast",
    "input, dtype",
    "dtype",
    "input.to(dtype)",
    "input.to(dtype) on a PyPTO kernel (pure-rename: pypto.cast).",
)


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site)
    if rejected:
        return rejected
    entry = site.entry
    if entry.target:
        target = dtype_expr(site, entry.target)
        if target is None:
            return Unsupported("no name reaches the torch module here to spell the target dtype")
        dtype_name = entry.target
    else:
        target = site.args.get("dtype")
        if target is None:
            return Unsupported(f".{entry.op}() without a dtype is not a cast")
        dtype_name = site.static_dtype("dtype")
        if dtype_name is None:
            return Unsupported(f"the argument of .{entry.op}() is not known to be a dtype (a device or tensor is not a cast)")
    if dtype_name != "?" and dtype_name not in entry.dtypes:
        return Unsupported(f"cast to {dtype_name}: PyPTO kernels here handle {', '.join(entry.dtypes)}")
    call = cst.Call(cst.Name("pypto_cast"), [cst.Arg(site.args["input"]), cst.Arg(target)])
    return Converted(call, (CAST_KERNEL, WRAPPER), "pypto.cast", PARAMS)
