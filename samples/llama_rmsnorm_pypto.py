"""RMSNorm as LLaMA-family models write it: variance in FP32, weight applied in the input dtype."""

import torch
from torch import nn


# ---- torch2pypto: PyPTO kernels and host wrappers for the torch calls in this file ----
import functools
import math

import pypto


# Kernels launch on NPU tensors. Elsewhere each wrapper computes the original torch expression,
# unless torch2pypto.interpreted() has set PYPTO_LAUNCHER to run them on PyPTO's CPU interpreter.
PYPTO_LAUNCHER = None
_PYPTO_DTYPES = {torch.float32: pypto.DT_FP32, torch.float16: pypto.DT_FP16, torch.bfloat16: pypto.DT_BF16}
_PYPTO_ALL_DTYPES = {  # also bool and integers, for the entries that declare them
    **_PYPTO_DTYPES, torch.bool: pypto.DT_BOOL, torch.uint8: pypto.DT_UINT8, torch.int8: pypto.DT_INT8,
    torch.int16: pypto.DT_INT16, torch.int32: pypto.DT_INT32, torch.int64: pypto.DT_INT64,
}
_UB_BYTES = 192 * 1024  # unified buffer of one AI vector core
_TILE_BYTES = 32 * 1024  # target FP32 tile size; tune per kernel if profiling says so


def _on_kernel_path(*tensors, dtypes=_PYPTO_DTYPES):
    """Whether a kernel runs: non-empty tensors of `dtypes` (default: the float dtypes), on an NPU
    or under a launcher."""
    if not all(t.dtype in dtypes and t.numel() for t in tensors):
        return False
    return PYPTO_LAUNCHER is not None or all(t.device.type == "npu" for t in tensors)


def _launch(kernel, *tensors):
    """Launch `kernel` once on `tensors` (inputs, then outputs)."""
    if PYPTO_LAUNCHER is None:
        kernel(*tensors)
    else:
        PYPTO_LAUNCHER(kernel, *tensors)


def _as_rows(t):
    """`t` as a contiguous [rows, cols] matrix: leading dims fold into the dynamic row axis."""
    return t.reshape(-1, t.shape[-1] if t.dim() else 1).contiguous()


def _annotated(namespace):
    """Evaluate a kernel's annotations in `namespace`: PyPTO reads them as objects, and a module
    with `from __future__ import annotations` leaves them as strings."""
    def evaluate(kernel):
        kernel.__annotations__ = {
            name: eval(note, kernel.__globals__, namespace) if isinstance(note, str) else note
            for name, note in kernel.__annotations__.items()
        }
        return kernel
    return evaluate


def _tile_shape(cols, buffers):
    """Vector tile [rows, tile_cols] whose FP32 copies (`buffers` of them) fit the unified buffer."""
    tile_cols = min(cols, _UB_BYTES // (4 * buffers))
    rows = min(64, _TILE_BYTES // (4 * tile_cols), _UB_BYTES // (4 * buffers * tile_cols))
    return max(rows, 1), tile_cols


def _kernel_operands(dtypes, *tensors, numbers=(), bools=(), options=()):
    """Whether a kernel built for `dtypes` takes these operands: `tensors` and any tensors among
    `numbers` of one of those dtypes; the rest of `numbers` (and the `options`, kernel constants
    such as clip bounds, which may be None) Python numbers the dtype holds (ints in range for
    integer tensors, finite floats in range or infinities for float tensors, no bools); `bools`
    bool tensors; all on the kernel path. Any other mix runs torch, which keeps its type
    promotion (and raises where it does: a fill value beyond the dtype's range)."""
    if not all(isinstance(t, torch.Tensor) for t in (*tensors, *bools)):
        return False
    tensors = [*tensors, *(n for n in numbers if isinstance(n, torch.Tensor))]
    if not tensors or tensors[0].dtype not in dtypes or any(t.dtype != tensors[0].dtype for t in tensors):
        return False
    if any(b.dtype != torch.bool for b in bools) or options and all(o is None for o in options):
        return False  # no option set (clamp(x)): torch decides, and raises
    dtype = tensors[0].dtype
    for n in (o for o in (*numbers, *options) if o is not None and not isinstance(o, torch.Tensor)):
        if dtype.is_floating_point:
            if type(n) not in (int, float) or torch.finfo(dtype).max < abs(n) < float("inf"):
                return False  # torch raises or rounds to inf: its call
        elif dtype == torch.bool or type(n) is not int or not torch.iinfo(dtype).min <= n <= torch.iinfo(dtype).max:
            return False
    return _on_kernel_path(*tensors, *bools, dtypes=(*dtypes, torch.bool))


def _kernel_number(n, dtype):
    """A Python number (or None) as a kernel constant for `dtype` tensors: a float for float dtypes."""
    return float(n) if n is not None and dtype.is_floating_point else n


def _broadcast_rows(*operands):
    """The tensor operands broadcast to one shape, each as [rows, cols]; and that shape."""
    tensors = [o for o in operands if isinstance(o, torch.Tensor)]
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    return [_as_rows(t.expand(shape)) for t in tensors], shape


def _in_layout_of(result, t):
    """`result` (contiguous) in the strides torch gives a result computed from `t` of its shape."""
    if t.shape != result.shape or t.is_contiguous():
        return result
    return torch.empty_like(t, dtype=result.dtype).copy_(result)


class _TorchGradient(torch.autograd.Function):
    """The kernel's result forward; backward, torch's gradient of the original expression."""

    @staticmethod
    def forward(ctx, kernel_path, torch_path, *args):
        ctx.torch_path = torch_path
        ctx.args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
        return kernel_path(*args)

    @staticmethod
    def backward(ctx, grad):
        wants = ctx.needs_input_grad[2:]
        args = [a.requires_grad_() if w else a for a, w in zip(ctx.args, wants)]
        with torch.enable_grad():
            result = ctx.torch_path(*args)
        grads = iter(torch.autograd.grad(result, [a for a, w in zip(args, wants) if w], grad))
        return (None, None, *(next(grads) if w else None for w in wants))


def _with_torch_grad(kernel_path, torch_path, *args):
    """kernel_path(*args); when autograd records and a tensor argument requires grad, the result
    carries torch's gradient (recomputed from the original expression in backward)."""
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return _TorchGradient.apply(kernel_path, torch_path, *args)
    return kernel_path(*args)


@functools.cache
def cast_kernel(dtype, out_dtype, cols):
    """pypto.cast of [rows, cols] tiles from `dtype` to `out_dtype`."""
    rows, tile_cols = _tile_shape(cols, buffers=2)
    x_tile_via_fp32 = {dtype, out_dtype} == {pypto.DT_BF16, pypto.DT_FP16}

    @pypto.frontend.jit()
    @_annotated(locals())
    def kernel(
        x: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
        out: pypto.Tensor([pypto.DYNAMIC, cols], out_dtype),
    ):
        n = x.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
            r = i * rows
            valid = [(n - r).min(rows), cols]
            pypto.set_vec_tile_shapes(rows, tile_cols)
            x_tile = pypto.view(x, [rows, cols], [r, 0], valid_shape=valid)
            if x_tile_via_fp32:
                x_tile = pypto.cast(x_tile, pypto.DT_FP32)
            if dtype != out_dtype:
                x_tile = pypto.cast(x_tile, out_dtype)
            pypto.assemble(x_tile, [r, 0], out)

    return kernel


def pypto_cast(input, dtype, device=None, non_blocking=False):
    """input.to(device, dtype) with the cast on a PyPTO kernel (pypto.cast; a move stays torch).

    As in torch, a cast to the input's own dtype returns the input itself.
    """
    if device is not None:
        input = input.to(device, non_blocking=non_blocking)
    if input.dtype == dtype:
        return input

    def torch_path(input):
        return input.to(dtype)

    if dtype not in _PYPTO_DTYPES or not _on_kernel_path(input):
        return torch_path(input)

    def kernel_path(input):
        x = _as_rows(input)
        out = torch.empty(x.shape, dtype=dtype, device=x.device)
        _launch(cast_kernel(_PYPTO_DTYPES[x.dtype], _PYPTO_DTYPES[dtype], x.shape[1]), x, out)
        return _in_layout_of(out.reshape(input.shape), input)

    return _with_torch_grad(kernel_path, torch_path, input)


@functools.cache
def pow_kernel(dtype, cols):
    """pypto.pow on [rows, cols] tiles."""
    rows, tile_cols = _tile_shape(cols, buffers=3)

    @pypto.frontend.jit()
    @_annotated(locals())
    def kernel(
        x: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
        exponent: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
        out: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
    ):
        n = x.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
            r = i * rows
            valid = [(n - r).min(rows), cols]
            pypto.set_vec_tile_shapes(rows, tile_cols)
            x_tile = pypto.view(x, [rows, cols], [r, 0], valid_shape=valid)
            exponent_tile = pypto.view(exponent, [rows, cols], [r, 0], valid_shape=valid)
            result = pypto.pow(x_tile, exponent_tile)
            pypto.assemble(result, [r, 0], out)

    return kernel


@functools.cache
def pow_exponent_number_kernel(dtype, cols, exponent):
    """pypto.pow on [rows, cols] tiles with exponent a Python number."""
    rows, tile_cols = _tile_shape(cols, buffers=2)

    @pypto.frontend.jit()
    @_annotated(locals())
    def kernel(
        x: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
        out: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
    ):
        n = x.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
            r = i * rows
            valid = [(n - r).min(rows), cols]
            pypto.set_vec_tile_shapes(rows, tile_cols)
            x_tile = pypto.view(x, [rows, cols], [r, 0], valid_shape=valid)
            result = pypto.pow(x_tile, exponent)
            pypto.assemble(result, [r, 0], out)

    return kernel


def pypto_pow(input, exponent):
    """torch.pow on a PyPTO kernel.

    same-name: pypto.pow. Tensors broadcast on the host, Python numbers are kernel constants;
    other operand mixes run torch.
    """

    def torch_path(input, exponent):
        return torch.pow(input, exponent)

    if not _kernel_operands((torch.float32, torch.float16, torch.bfloat16), input, numbers=(exponent,)):
        return torch_path(input, exponent)

    def kernel_path(input, exponent):
        rows, shape = _broadcast_rows(input, exponent)
        x, dtype = rows[0], input.dtype
        out = torch.empty(x.shape, dtype=dtype, device=x.device)
        if isinstance(exponent, torch.Tensor):
            kernel = pow_kernel(_PYPTO_ALL_DTYPES[dtype], x.shape[1])
        else:
            kernel = pow_exponent_number_kernel(_PYPTO_ALL_DTYPES[dtype], x.shape[1], _kernel_number(exponent, dtype))
        _launch(kernel, *rows, out)
        return _in_layout_of(out.reshape(shape), input)

    return _with_torch_grad(kernel_path, torch_path, input, exponent)


@functools.cache
def mean_kernel(dtype, out_dtype, cols, count):
    """The mean of each row of [rows, cols] tiles (count real cols), accumulated in FP32."""
    rows, tile_cols = _tile_shape(cols, buffers=4)

    @pypto.frontend.jit()
    @_annotated(locals())
    def kernel(
        x: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
        out: pypto.Tensor([pypto.DYNAMIC, 1], out_dtype),
    ):
        n = x.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
            r = i * rows
            valid = [(n - r).min(rows), count]
            pypto.set_vec_tile_shapes(rows, tile_cols)
            x_tile = pypto.view(x, [rows, cols], [r, 0], valid_shape=valid)
            if dtype != pypto.DT_FP32:  # FP32-only ops: compute in FP32
                x_tile = pypto.cast(x_tile, pypto.DT_FP32)
            t0 = pypto.sum(x_tile, dim=-1, keepdim=True)
            result = pypto.mul(t0, 1.0 / count)
            if pypto.DT_FP32 != out_dtype:
                result = pypto.cast(result, out_dtype)
            pypto.assemble(result, [r, 0], out)

    return kernel


def _reduced_dims(t, dim):
    """The dims a reduction over `dim` (an int, a sequence, or None and () for all) reduces, sorted."""
    rank = max(t.dim(), 1)
    dims = range(rank) if dim is None or dim in ((), []) else [dim] if isinstance(dim, int) else dim
    if any(not -rank <= d < rank for d in dims):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    if len({d % rank for d in dims}) < len(dims):
        raise RuntimeError(f"dim {dim} lists a dim more than once")
    return sorted({d % rank for d in dims})


def _reduced_count(t, dim):
    """How many elements a reduction over `dim` reduces into each result."""
    return math.prod(t.shape[d] for d in _reduced_dims(t, dim) if d < t.dim())


def _reduction_rows(t, dim, keepdim, identity):
    """`t` as [rows, cols] with the dims `dim` last, its real cols, and the shape torch gives the result.

    The cols are padded with the reducer's `identity` to 32 bytes: PyPTO reduces only 32-byte
    aligned tile rows; kernels read the real cols only (valid_shape), the pad never counts.
    """
    dims = _reduced_dims(t, dim)
    kept = [d for d in range(t.dim()) if d not in dims]
    cols = _reduced_count(t, dim)
    rows = t.permute(*kept, *dims).reshape(-1, cols) if t.dim() else t.reshape(1, 1)
    rows = torch.nn.functional.pad(rows, (0, -cols % (32 // t.element_size())), value=identity)
    shape = [1 if d in dims else n for d, n in enumerate(t.shape)] if keepdim else [t.shape[d] for d in kept]
    return rows.contiguous(), cols, shape


def pypto_mean(input, dim=None, keepdim=False, *, dtype=None):
    """torch.mean on a PyPTO kernel.

    composite: pypto.sum + pypto.mul over the reduced dims moved last, accumulated in FP32.
    """
    out_dtype = input.dtype if dtype is None else dtype

    def torch_path(input):
        return torch.mean(input, dim=dim, keepdim=keepdim, dtype=dtype)

    if not (out_dtype in _PYPTO_DTYPES and _on_kernel_path(input)):
        return torch_path(input)

    def kernel_path(input):
        x, count, shape = _reduction_rows(input, dim, keepdim, 0.0)
        out = torch.empty(x.shape[0], 1, dtype=out_dtype, device=x.device)
        kernel = mean_kernel(_PYPTO_DTYPES[x.dtype], _PYPTO_DTYPES[out_dtype], x.shape[1], count)
        _launch(kernel, x, out)
        return out.reshape(shape)

    return _with_torch_grad(kernel_path, torch_path, input)


@functools.cache
def rsqrt_kernel(dtype, cols):
    """pypto.rsqrt on [rows, cols] tiles."""
    rows, tile_cols = _tile_shape(cols, buffers=2)

    @pypto.frontend.jit()
    @_annotated(locals())
    def kernel(
        x: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
        out: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
    ):
        n = x.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
            r = i * rows
            valid = [(n - r).min(rows), cols]
            pypto.set_vec_tile_shapes(rows, tile_cols)
            x_tile = pypto.view(x, [rows, cols], [r, 0], valid_shape=valid)
            result = pypto.rsqrt(x_tile)
            pypto.assemble(result, [r, 0], out)

    return kernel


def pypto_rsqrt(input):
    """torch.rsqrt on a PyPTO kernel.

    same-name: pypto.rsqrt.
    """

    def torch_path(input):
        return torch.rsqrt(input)

    if not _kernel_operands((torch.float32, torch.float16, torch.bfloat16), input):
        return torch_path(input)

    def kernel_path(input):
        rows, shape = _broadcast_rows(input)
        x, dtype = rows[0], input.dtype
        out = torch.empty(x.shape, dtype=dtype, device=x.device)
        kernel = rsqrt_kernel(_PYPTO_ALL_DTYPES[dtype], x.shape[1])
        _launch(kernel, *rows, out)
        return _in_layout_of(out.reshape(shape), input)

    return _with_torch_grad(kernel_path, torch_path, input)


# ---- end of torch2pypto kernels ----


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        """
        LlamaRMSNorm is equivalent to T5LayerNorm
        """
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = pypto_cast(hidden_states, torch.float32)
        variance = pypto_mean(pypto_pow(hidden_states, 2), dim=-1, keepdim=True)
        hidden_states = hidden_states * pypto_rsqrt(variance + self.variance_epsilon)
        return self.weight * pypto_cast(hidden_states, input_dtype)

    def extra_repr(self):
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"
