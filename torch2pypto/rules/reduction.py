"""Reductions over any dims: the host moves the reduced dims last, the kernel sums the cols.

``pypto.sum`` reduces one axis of FP32 data, so the kernel casts to FP32 first and back to the
result dtype last; ``scale`` turns the sum into a mean.
"""

from __future__ import annotations

from torch2pypto.mapping import Entry
from torch2pypto.rules import codegen
from torch2pypto.rules.calls import call_args, signature, wrapper_params
from torch2pypto.rules.codegen import Definition

ROWS_HELPER = Definition(
    "_reduction_rows",
    '''\
def _reduction_rows(t, dim, keepdim):
    """`t` as [rows, cols] with the reduced dims last, and the shape torch gives the result.

    The cols are zero-padded to 32 bytes: PyPTO reduces only 32-byte aligned tile rows.
    """
    rank = max(t.dim(), 1)
    dims = range(rank) if dim is None or dim in ((), []) else [dim] if isinstance(dim, int) else dim
    dims = sorted({d % rank for d in dims})
    kept = [d for d in range(t.dim()) if d not in dims]
    cols = math.prod(t.shape[d] for d in dims if d < t.dim())
    rows = t.permute(*kept, *dims).reshape(-1, cols) if t.dim() else t.reshape(1, 1)
    rows = torch.nn.functional.pad(rows, (0, -cols % (32 // t.element_size())))
    shape = [1 if d in dims else n for d, n in enumerate(t.shape)] if keepdim else [t.shape[d] for d in kept]
    return rows.contiguous(), shape
''',
    imports=("math",),
)


def kernel(entry: Entry, scale: bool) -> Definition:
    """``<op>_kernel(dtype, out_dtype, cols[, count])``: FP32 row sums, for a mean times 1/count.

    ``cols`` includes the zero padding; ``count`` is how many of them are real.
    """
    body = (
        "result = x_tile\n"
        "if dtype != pypto.DT_FP32:\n"
        "    result = pypto.cast(result, pypto.DT_FP32)\n"
        "result = pypto.sum(result, dim=-1, keepdim=True)\n"
        + ("result = pypto.mul(result, 1.0 / count)\n" if scale else "")
        + "if out_dtype != pypto.DT_FP32:\n"
        "    result = pypto.cast(result, out_dtype)\n"
    )
    what = "Mean" if scale else "Sum"
    return codegen.row_kernel(
        f"{entry.op}_kernel",
        f"{what} of each row of [rows, cols] tiles, accumulated in FP32 (pypto.sum needs FP32).",
        "dtype, out_dtype, cols, count" if scale else "dtype, out_dtype, cols",
        {"x": "dtype"},
        "out_dtype",
        body,
        out_cols="1",
        buffers=4,
    )


def wrapper(entry: Entry, how: str, scale: bool) -> Definition:
    """``pypto_<op>(input, dim=None, keepdim=False, *, dtype=None)`` around the kernel."""
    params = wrapper_params(entry)
    fallback = f"{entry.torch_function}({call_args(params)})"
    count = ", input.numel() // max(out.numel(), 1)" if scale else ""
    source = f'''\
def pypto_{entry.op}({signature(params)}):
    """{entry.torch_function} on a PyPTO kernel.

    {entry.category}: {how}.
    """
    out_dtype = input.dtype if dtype is None else dtype
    if out_dtype not in _PYPTO_DTYPES or not _on_kernel_path(input):
        return {fallback}
    x, shape = _reduction_rows(input, dim, keepdim)
    out = torch.empty(x.shape[0], 1, dtype=out_dtype, device=x.device)
    kernel = {entry.op}_kernel(_PYPTO_DTYPES[x.dtype], _PYPTO_DTYPES[out_dtype], x.shape[1]{count})
    _launch(kernel, x, out)
    return out.reshape(shape)
'''
    requires = ("_on_kernel_path", "_reduction_rows", "_launch", f"{entry.op}_kernel")
    return Definition(f"pypto_{entry.op}", source, requires)
