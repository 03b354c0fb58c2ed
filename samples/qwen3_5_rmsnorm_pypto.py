"""RMSNorm as Qwen3.5 (and Gemma) write it: normalise in FP32, scale by (1 + weight)."""

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
    """`t` as a contiguous [rows, cols] matrix: leading dims fold into the dynamic row axis (a view
    of a contiguous `t`, a copy of any other)."""
    return t.reshape(-1, t.shape[-1] if t.dim() else 1).contiguous()


def _padded_cols(rows, pad, value=0.0):
    """Matrix `rows` with `pad` columns of `value` appended, contiguous: `rows` itself when it is
    contiguous and no column is missing (no host copy), else a copy."""
    if pad:
        return torch.nn.functional.pad(rows, (0, pad), value=value)
    return rows.contiguous()


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


# Vector tiles, from PyPTO's cost model (scripts/tiles.py sweeps them). Under _VECTOR_PASSES a row
# tile is one task however many column tiles it holds, and a launch costs about its task count
# times a fixed cost once the vector cores are busy. So a launch splits into _SPREAD_TILES row
# tiles (fewer leave cores idle) unless a tile would hold under _MIN_TILE elements (more tasks
# then cost more than they spread), and its column tiles are as wide as the unified buffer
# takes, at least _WIDE_TILE columns (narrower ones cost more per element). A BF16 input's row
# tile holds at most _BF16_ROW_TILE elements: PyPTO keeps its FP32 copy whole.
_VECTOR_PASSES = {"pg_skip_partition": True}  # PyPTO's own partition makes each column tile a task
_TILE_BUDGET = 256 * 1024  # bytes of a tile's live copies (PyPTO reuses the buffers of dead ones)
_SPREAD_TILES = 32
_MIN_TILE = 4096
_WIDE_TILE = 512
_BF16_ROW_TILE = 32 * 1024
# the widest column tile of a row wider than a tile: wider ones fail in 0.2.0 (F7A001 idx <
# size_: a softmax over 53248 cols in 16384-wide tiles, a cast in 32768-wide ones); 8192 passed
# up to 256k
_WIDEST_TILE = 8192


def _spread_rows(n, cols, tiles=_SPREAD_TILES, whole=False):
    """The most rows a tile of a launch over n x cols has: n / `tiles` but at least _MIN_TILE
    elements, a power of two up to 64 and n's next (kernels are built once per value); `whole`
    (a kernel that reads whole tiles only): at most n, so that a tile lies within the rows."""
    rows = max(1, max(n * cols // tiles, _MIN_TILE) // cols)
    return min(64, 1 << (rows.bit_length() - 1), 1 << ((n.bit_length() - 1) if whole else (n - 1).bit_length()))


def _tile_shape(cols, max_rows, buffers, dtypes, whole_rows=False, split_cols=False):
    """Vector tile [rows, tile_cols] of a kernel with `buffers` live tiles in the widest of
    `dtypes` (the input's first; BF16 counts as FP32: PyPTO computes it in FP32) within
    _TILE_BUDGET: rows a power of two up to `max_rows` (_spread_rows); tile_cols the whole row
    while it fits, a power of two up to _WIDEST_TILE if not; `whole_rows`: the whole row also
    while `buffers` FP32 copies of it fit the unified buffer (a wider row takes column tiles:
    PyPTO reduces and broadcasts across them); `split_cols` (elementwise kernels): a power of
    two that leaves max_rows rows, but at least _WIDE_TILE."""
    size = max(2 if d == pypto.DT_FP16 else 8 if d == pypto.DT_INT64 else 4 for d in dtypes)
    if dtypes[0] == pypto.DT_BF16:
        max_rows = min(max_rows, 1 << (max(1, _BF16_ROW_TILE // cols).bit_length() - 1))
    elements = _TILE_BUDGET // (size * buffers)
    widest = 1 << (elements.bit_length() - 1)
    tile_cols = cols if cols <= widest or whole_rows and (cols + 7) * 4 * buffers <= _UB_BYTES else min(widest, _WIDEST_TILE)
    if split_cols:
        tile_cols = min(tile_cols, 1 << (max(_WIDE_TILE, elements // max_rows).bit_length() - 1))
    rows = max(1, elements // tile_cols)
    return min(max_rows, 1 << (rows.bit_length() - 1)), tile_cols


def _dense_order(t):
    """The dims of `t` from outermost to innermost in memory where its elements fill their span
    (the layout torch.empty_like keeps: a transpose, a permute), else row-major."""
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    return order if t.permute(order).is_contiguous() else list(range(t.dim()))


class _TorchGradient(torch.autograd.Function):
    """The kernel's result forward; backward, torch's gradient of the original expression.

    The result is the Function's own tensor, as torch's op gives: autograd forbids changing in place
    an output that is a view (a kernel's result is one of its padded buffer, which is detached
    from it) or an input's storage (which is copied)."""

    @staticmethod
    def forward(ctx, kernel_path, torch_path, *args):
        ctx.torch_path = torch_path
        ctx.args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
        result = kernel_path(*args)
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        return result.clone() if result.untyped_storage().data_ptr() in inputs else result.detach()

    @staticmethod
    def backward(ctx, grad):
        wants = ctx.needs_input_grad[2:]
        args = [a.requires_grad_() if w else a for a, w in zip(ctx.args, wants)]
        with torch.enable_grad():
            result = ctx.torch_path(*args)
        # allow_unused: a tensor read for its dtype only (``.to(q.dtype)``) has no gradient
        grads = iter(torch.autograd.grad(result, [a for a, w in zip(args, wants) if w], grad, allow_unused=True))
        return (None, None, *(next(grads) if w else None for w in wants))


def _with_torch_grad(kernel_path, torch_path, *args):
    """kernel_path(*args); when autograd records and a tensor argument requires grad, the result
    carries torch's gradient (recomputed from the original expression in backward)."""
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return _TorchGradient.apply(kernel_path, torch_path, *args)
    return kernel_path(*args)


def _aligned_rows(t, cols):
    """`t` as [rows, cols], each row zero-padded to 32 bytes: PyPTO reduces only 32-byte aligned
    tile rows, and the kernel's valid shape leaves the padding out."""
    return _padded_cols(t.reshape(-1, cols), -cols % (32 // t.element_size()))


def _reduction_operands(shape, rows, vectors):
    """The operands of a row-reduction kernel over `shape`: each of `rows` broadcast to it and each
    of `vectors` (of its last dim) as _aligned_rows, the rows laid out in the memory order of the
    first (`order`, _dense_order: a transposed q's, read in place) where that keeps the last dim
    innermost, row-major otherwise. Returns the operands and the order (for _ordered)."""
    order = _dense_order(rows[0]) if rows[0].shape == shape else list(range(len(shape)))
    if order[-1] != len(shape) - 1:
        order = list(range(len(shape)))
    cols = shape[-1]
    laid = [_aligned_rows(t.expand(shape).permute(order), cols) for t in rows]
    return [*laid, *(_aligned_rows(v, cols) for v in vectors)], order


def _ordered(out, shape, order):
    """A kernel's [rows, width] result `out`, whose rows lie in `order` (_reduction_operands), as a
    tensor of `shape` with `out`'s last dim: torch's layout, a view."""
    laid = out.reshape(*(shape[d] for d in order[:-1]), out.shape[-1])
    return laid.permute(sorted(range(len(order)), key=order.__getitem__))


@functools.cache
def fused_norm_5d7727_kernel(x_dtype, cols, width, eps, max_rows):
    """_norm's region: pypto.pow + pypto.sum + pypto.mul + pypto.add + pypto.rsqrt on [rows, cols] tiles, one launch."""
    rows, tile_cols = _tile_shape(width, max_rows, 3, (x_dtype, pypto.DT_FP32), whole_rows=True)
    count = cols  # the real cols a row reduction counts

    @pypto.frontend.jit(pass_options=_VECTOR_PASSES)
    @_annotated(locals())
    def kernel(
        x: pypto.Tensor([pypto.DYNAMIC, width], x_dtype),
        result_out: pypto.Tensor([pypto.DYNAMIC, width], x_dtype),
    ):
        n = x.shape[0]
        for i in pypto.loop((n + max_rows - 1) // max_rows, name="row_tiles", unroll_list=[1]):  # a task: max_rows rows, a tile: rows
            r = i * max_rows
            valid = [(n - r).min(max_rows), cols]
            pypto.set_vec_tile_shapes(rows, tile_cols)
            x_tile = pypto.view(x, [max_rows, width], [r, 0], valid_shape=valid)
            t1 = pypto.pow(x_tile, 2.0)
            t1_fp32 = t1
            if x_dtype != pypto.DT_FP32:
                t1_fp32 = pypto.cast(t1_fp32, pypto.DT_FP32)
            t3 = pypto.sum(t1_fp32, dim=-1, keepdim=True)
            t4 = pypto.mul(t3, 1.0 / count)
            t4_as_x_dtype = t4
            if pypto.DT_FP32 != x_dtype:
                t4_as_x_dtype = pypto.cast(t4_as_x_dtype, x_dtype)
            t6 = pypto.add(t4_as_x_dtype, eps)
            t7 = pypto.rsqrt(t6)
            t8 = pypto.mul(x_tile, t7)
            pypto.assemble(t8, [r, 0], result_out)

    return kernel


def _torch_fused_norm_5d7727(x, eps):
    """_norm's region: the original torch statements."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _fused_shape(rows, vectors=(), numbers=(), dtypes=(), like=(), results=(), narrow=()):
    """The shape of a fused kernel's rows for these operands, or None if it does not take them.

    It takes float tensors `rows` that broadcast to one shape (dim >= 1; the operands of each of
    `results` to all of it, so that each result has it) and `vectors` of its last dim, Python
    numbers, float dtypes; all on the kernel path; tensors `like` whose dtype only it reads (a
    float dtype, on the rows' device; empty ones too: type_as's dtype carriers); `narrow`
    (tensor, width) pairs: tensors of that last dim whose leading dims broadcast to the shape's
    (phi3's cos against the rotated part of q's rows). Any other mix runs the region's torch
    statements.
    """
    tensors = (*rows, *vectors, *like, *(t for t, _ in narrow))
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    try:
        shape = torch.broadcast_shapes(*(t.shape for t in rows))
        if not shape or any(torch.broadcast_shapes(*(t.shape for t in r)) != shape for r in results):
            return None
        if any(t.dim() < 1 or t.shape[-1] != width or torch.broadcast_shapes(t.shape[:-1], shape[:-1]) != shape[:-1] for t, width in narrow):
            return None
    except RuntimeError:
        return None
    if any(tuple(v.shape) != tuple(shape[-1:]) for v in vectors):
        return None
    if any(type(n) not in (int, float) for n in numbers) or any(d not in _PYPTO_DTYPES for d in dtypes):
        return None
    if any(t.dtype not in _PYPTO_DTYPES or t.device != rows[0].device for t in like):
        return None
    return shape if _on_kernel_path(*rows, *vectors, *(t for t, _ in narrow)) else None


def pypto_fused_norm_5d7727_5sites(x, eps):
    """_norm's region as one PyPTO kernel: Tensor.pow, Tensor.mean, x + y, rsqrt, x * y.

    pypto.pow + pypto.sum + pypto.mul + pypto.add + pypto.rsqrt in torch's dtypes, rounded
    where torch rounds. Operands the kernel does not take (other shapes or dtypes, off the
    NPU) run _torch_fused_norm_5d7727.
    """
    shape = _fused_shape((x,), (), numbers=(eps,), dtypes=(), like=(), results=((x,),))
    if not (shape is not None):
        return _torch_fused_norm_5d7727(x, eps)

    def kernel_path(x, eps):
        cols = shape[-1]
        (x_rows,), order = _reduction_operands(shape, (x,), ())
        result_out = torch.empty(x_rows.shape[0], x_rows.shape[1], dtype=x.dtype, device=x.device)
        _launch(fused_norm_5d7727_kernel(_PYPTO_ALL_DTYPES[x.dtype], cols, x_rows.shape[1], float(eps), _spread_rows(*x_rows.shape)), x_rows, result_out)
        return _ordered(result_out[:, :cols], shape, order)

    return _with_torch_grad(kernel_path, _torch_fused_norm_5d7727, x, eps)


@functools.cache
def fused_forward_0c5699_kernel(x_dtype, weight_dtype, cols, width, eps, max_rows):
    """forward's region: pypto.cast + pypto.pow + pypto.sum + pypto.mul + pypto.add + pypto.rsqrt on [rows, cols] tiles, one launch."""
    rows, tile_cols = _tile_shape(width, max_rows, 3, (x_dtype, weight_dtype, pypto.DT_FP32), whole_rows=True)
    count = cols  # the real cols a row reduction counts

    @pypto.frontend.jit(pass_options=_VECTOR_PASSES)
    @_annotated(locals())
    def kernel(
        x: pypto.Tensor([pypto.DYNAMIC, width], x_dtype),
        weight: pypto.Tensor([1, width], weight_dtype),
        result_out: pypto.Tensor([pypto.DYNAMIC, width], x_dtype),
    ):
        n = x.shape[0]
        for i in pypto.loop((n + max_rows - 1) // max_rows, name="row_tiles", unroll_list=[1]):  # a task: max_rows rows, a tile: rows
            r = i * max_rows
            valid = [(n - r).min(max_rows), cols]
            pypto.set_vec_tile_shapes(rows, tile_cols)
            x_tile = pypto.view(x, [max_rows, width], [r, 0], valid_shape=valid)
            weight_tile = pypto.view(weight, [1, width], [0, 0], valid_shape=[1, cols])
            x_fp32 = x_tile
            if x_dtype != pypto.DT_FP32:
                x_fp32 = pypto.cast(x_fp32, pypto.DT_FP32)
            t2 = pypto.pow(x_fp32, 2.0)
            t3 = pypto.sum(t2, dim=-1, keepdim=True)
            t4 = pypto.mul(t3, 1.0 / count)
            t5 = pypto.add(t4, eps)
            t6 = pypto.rsqrt(t5)
            t7 = pypto.mul(x_fp32, t6)
            weight_fp32 = weight_tile
            if weight_dtype != pypto.DT_FP32:
                weight_fp32 = pypto.cast(weight_fp32, pypto.DT_FP32)
            t9 = pypto.add(weight_fp32, 1.0)
            t10 = pypto.mul(t7, t9)
            t10_as_x_dtype = t10
            if pypto.DT_FP32 != x_dtype:
                t10_as_x_dtype = pypto.cast(t10_as_x_dtype, x_dtype)
            pypto.assemble(t10_as_x_dtype, [r, 0], result_out)

    return kernel


def _torch_fused_forward_0c5699(x, eps, self, weight):
    """forward's region: the original torch statements."""
    output = self._norm(x.float())
    output = output * (1.0 + weight.float())
    return output.type_as(x)


def pypto_fused_forward_0c5699_5sites(x, eps, self, weight):
    """forward's region as one PyPTO kernel: Tensor.float, Tensor.pow, Tensor.mean, x + y, rsqrt, x
    * y, Tensor.float, x + y, x * y, Tensor.type_as.

    pypto.cast + pypto.pow + pypto.sum + pypto.mul + pypto.add + pypto.rsqrt in torch's
    dtypes, rounded where torch rounds. Operands the kernel does not take (other shapes or
    dtypes, off the NPU) run _torch_fused_forward_0c5699.
    """
    shape = _fused_shape((x,), (weight,), numbers=(eps,), dtypes=(), like=(), results=((x,),))
    if not (shape is not None):
        return _torch_fused_forward_0c5699(x, eps, self, weight)

    def kernel_path(x, eps, self, weight):
        cols = shape[-1]
        (x_rows, weight_rows), order = _reduction_operands(shape, (x,), (weight,))
        result_out = torch.empty(x_rows.shape[0], x_rows.shape[1], dtype=x.dtype, device=x.device)
        _launch(fused_forward_0c5699_kernel(_PYPTO_ALL_DTYPES[x.dtype], _PYPTO_ALL_DTYPES[weight.dtype], cols, x_rows.shape[1], float(eps), _spread_rows(*x_rows.shape)), x_rows, weight_rows, result_out)
        return _ordered(result_out[:, :cols], shape, order)

    return _with_torch_grad(kernel_path, _torch_fused_forward_0c5699, x, eps, self, weight)


# ---- end of torch2pypto kernels ----


class Qwen3_5RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return pypto_fused_norm_5d7727_5sites(x, self.eps)

    def forward(self, x):
        # Llama does x.to(float16) * w whilst Qwen3.5 is (x * w).to(float16)
        # See https://github.com/huggingface/transformers/pull/29402
        return pypto_fused_forward_0c5699_5sites(x, self.eps, self, self.weight)

    def extra_repr(self):
        return f"{tuple(self.weight.shape)}, eps={self.eps}"
