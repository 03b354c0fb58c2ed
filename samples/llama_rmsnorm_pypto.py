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
_UB_BYTES = 192 * 1024  # unified buffer of one AI vector core
_TILE_BYTES = 32 * 1024  # target FP32 tile size; tune per kernel if profiling says so


def _on_kernel_path(*tensors):
    """Whether a kernel runs: non-empty tensors of PyPTO dtypes, on an NPU or under a launcher."""
    if not all(t.dtype in _PYPTO_DTYPES and t.numel() for t in tensors):
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


@functools.cache
def cast_kernel(dtype, out_dtype, cols):
    """pypto.cast of [rows, cols] tiles from `dtype` to `out_dtype`."""
    rows, tile_cols = _tile_shape(cols, buffers=2)
    result_via_fp32 = {dtype, out_dtype} == {pypto.DT_BF16, pypto.DT_FP16}

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
            result = x_tile
            if result_via_fp32:
                result = pypto.cast(result, pypto.DT_FP32)
            if dtype != out_dtype:
                result = pypto.cast(result, out_dtype)
            pypto.assemble(result, [r, 0], out)

    return kernel


def pypto_cast(input, dtype):
    """input.to(dtype) on a PyPTO kernel (pure-rename: pypto.cast)."""
    if input.dtype == dtype:
        return input
    if dtype not in _PYPTO_DTYPES or not _on_kernel_path(input):
        return input.to(dtype)
    x = _as_rows(input)
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    _launch(cast_kernel(_PYPTO_DTYPES[x.dtype], _PYPTO_DTYPES[dtype], x.shape[1]), x, out)
    return out.reshape(input.shape)


@functools.cache
def pow_kernel(dtype, cols):
    """pypto.pow on [rows, cols] tiles."""
    rows, tile_cols = _tile_shape(cols, buffers=3)

    @pypto.frontend.jit()
    @_annotated(locals())
    def kernel(
        x: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
        other: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
        out: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
    ):
        n = x.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
            r = i * rows
            valid = [(n - r).min(rows), cols]
            pypto.set_vec_tile_shapes(rows, tile_cols)
            x_tile = pypto.view(x, [rows, cols], [r, 0], valid_shape=valid)
            other_tile = pypto.view(other, [rows, cols], [r, 0], valid_shape=valid)
            result = pypto.pow(x_tile, other_tile)
            pypto.assemble(result, [r, 0], out)

    return kernel


@functools.cache
def pow_scalar_kernel(dtype, cols, other):
    """pypto.pow on [rows, cols] tiles with a Python number as `other`."""
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
            result = pypto.pow(x_tile, other)
            pypto.assemble(result, [r, 0], out)

    return kernel


def pypto_pow(input, exponent):
    """torch.pow on a PyPTO kernel.

    same-name: pypto.pow. Operands broadcast on the host; mixed
    dtypes stay torch, which keeps torch's type promotion.
    """
    if not isinstance(exponent, torch.Tensor):
        if isinstance(exponent, bool) or not _on_kernel_path(input):
            return torch.pow(input, exponent)
        x = _as_rows(input)
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        _launch(pow_scalar_kernel(_PYPTO_DTYPES[x.dtype], x.shape[1], exponent), x, out)
        return out.reshape(input.shape)
    if input.dtype != exponent.dtype or not _on_kernel_path(input, exponent):
        return torch.pow(input, exponent)
    shape = torch.broadcast_shapes(input.shape, exponent.shape)
    x, y = _as_rows(input.expand(shape)), _as_rows(exponent.expand(shape))
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch(pow_kernel(_PYPTO_DTYPES[x.dtype], x.shape[1]), x, y, out)
    return out.reshape(shape)


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


@functools.cache
def mean_kernel(dtype, out_dtype, cols, count):
    """Mean of each row of [rows, cols] tiles, accumulated in FP32 (pypto.sum needs FP32)."""
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
            valid = [(n - r).min(rows), cols]
            pypto.set_vec_tile_shapes(rows, tile_cols)
            x_tile = pypto.view(x, [rows, cols], [r, 0], valid_shape=valid)
            result = x_tile
            if dtype != pypto.DT_FP32:
                result = pypto.cast(result, pypto.DT_FP32)
            result = pypto.sum(result, dim=-1, keepdim=True)
            result = pypto.mul(result, 1.0 / count)
            if out_dtype != pypto.DT_FP32:
                result = pypto.cast(result, out_dtype)
            pypto.assemble(result, [r, 0], out)

    return kernel


def pypto_mean(input, dim=None, keepdim=False, *, dtype=None):
    """torch.mean on a PyPTO kernel.

    composite: FP32 pypto.sum over the reduced dims, then a 1/count scale.
    """
    out_dtype = input.dtype if dtype is None else dtype
    if out_dtype not in _PYPTO_DTYPES or not _on_kernel_path(input):
        return torch.mean(input, dim=dim, keepdim=keepdim, dtype=dtype)
    x, shape = _reduction_rows(input, dim, keepdim)
    out = torch.empty(x.shape[0], 1, dtype=out_dtype, device=x.device)
    kernel = mean_kernel(_PYPTO_DTYPES[x.dtype], _PYPTO_DTYPES[out_dtype], x.shape[1], input.numel() // max(out.numel(), 1))
    _launch(kernel, x, out)
    return out.reshape(shape)


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
    if not _on_kernel_path(input):
        return torch.rsqrt(input)
    x = _as_rows(input)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch(rsqrt_kernel(_PYPTO_DTYPES[x.dtype], x.shape[1]), x, out)
    return out.reshape(input.shape)


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
