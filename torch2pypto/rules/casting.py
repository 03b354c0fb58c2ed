"""The cast kernel and the host code around it, shared by pure renames and ``type_as``."""

from __future__ import annotations

from torch2pypto.rules import codegen
from torch2pypto.rules.codegen import Definition

CAST_KERNEL = codegen.row_kernel(
    "cast_kernel",
    "pypto.cast of [rows, cols] tiles from `dtype` to `out_dtype`.",
    "dtype, out_dtype, cols",
    {"x": "dtype"},
    "out_dtype",
    "result = x_tile\n" + codegen.cast("result", "dtype", "out_dtype")[1],
    setup=codegen.cast("result", "dtype", "out_dtype")[0],
)


def cast_wrapper(name: str, params: str, target: str, fallback: str, doc: str) -> Definition:
    """A wrapper that casts ``input`` to the dtype expression ``target`` with the cast kernel.

    As in torch, a cast to the input's own dtype returns the input itself.
    """
    assign = "" if target == "dtype" else f"    dtype = {target}\n"
    source = f'''\
def {name}({params}):
    """{doc}"""
{assign}    if input.dtype == dtype:
        return input
    if dtype not in _PYPTO_DTYPES or not _on_kernel_path(input):
        return {fallback}
    x = _as_rows(input)
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    _launch(cast_kernel(_PYPTO_DTYPES[x.dtype], _PYPTO_DTYPES[dtype], x.shape[1]), x, out)
    return out.reshape(input.shape)
'''
    return Definition(name, source, ("_on_kernel_path", "_as_rows", "_launch", "cast_kernel"))
