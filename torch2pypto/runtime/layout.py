"""Operands as the [rows, cols] matrices kernels read, and results in torch's layout."""

import math

import torch

from torch2pypto.runtime.generated import assemble1_kernel
from torch2pypto.runtime.launch import _PYPTO_ALL_DTYPES, _PYPTO_DTYPES, _UB_BYTES, _launch, _on_kernel_path


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


def _row_window(t, rows):
    """`t` as `rows` rows for a kernel that reads a run of columns from any start: (matrix, start).
    A view of a contiguous `t` from column 0; for a column slice of wider rows (torch's
    x[..., a:b]), those wider rows, read in place from the slice's column; else a contiguous copy."""
    cols = t.numel() // rows
    try:
        matrix = t.view(rows, cols)
    except RuntimeError:
        return t.reshape(rows, cols).contiguous(), 0
    width = matrix.stride(0)
    if matrix.is_contiguous() or matrix.stride(1) != 1 or width < cols:
        return matrix.contiguous(), 0
    at, size = matrix.storage_offset(), t.untyped_storage().nbytes() // t.element_size()
    start = max(0, at + rows * width - size)  # the window's rows end within the storage
    if start > min(at, width - cols):
        return matrix.contiguous(), 0
    return t.as_strided((rows, width), (width, 1), at - start), start


def _dense_order(t):
    """The dims of `t` from outermost to innermost in memory where its elements fill their span
    (the layout torch.empty_like keeps: a transpose, a permute), else row-major."""
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    return order if t.permute(order).is_contiguous() else list(range(t.dim()))


def _broadcast_rows(*operands):
    """The tensor operands broadcast to one shape, each as [rows, cols] in the memory order of their
    result (`order`, outermost dim first: torch's, the first operand's where it is dense and of that
    shape, row-major otherwise); a view of each operand laid out in that order, a copy of any
    other (a broadcast one). Returns the rows, the shape and the order (for _result_rows)."""
    tensors = [o for o in operands if isinstance(o, torch.Tensor)]
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    order = _dense_order(tensors[0]) if tensors[0].shape == shape else list(range(len(shape)))
    return [_as_rows(t.expand(shape).permute(order)) for t in tensors], shape, order


def _result_rows(shape, order, dtype, device):
    """A result of `shape` laid out in `order` (_broadcast_rows), and the [rows, cols] view of it
    a kernel writes: the result is in torch's layout, with no copy back."""
    laid = torch.empty([shape[d] for d in order], dtype=dtype, device=device)
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return laid.permute(inverse), _as_rows(laid)


def _in_layout_of(result, t):
    """`result` (contiguous) in the strides torch gives a result computed from `t` of its shape."""
    if t.shape != result.shape or t.is_contiguous():
        return result
    return torch.empty_like(t, dtype=result.dtype).copy_(result)


def _in_place_ok(input, *others):
    """Whether an in-place kernel may write into `input`: the result keeps its shape, and autograd
    is not recording (torch's in-place autograd checks stay torch's)."""
    shapes = [o.shape for o in others if isinstance(o, torch.Tensor)]
    if torch.broadcast_shapes(input.shape, *shapes) != input.shape:
        return False
    tensors = [input, *(o for o in others if isinstance(o, torch.Tensor))]
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


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
    rows = _padded_cols(rows, -cols % (32 // t.element_size()), identity)
    shape = [1 if d in dims else n for d, n in enumerate(t.shape)] if keepdim else [t.shape[d] for d in kept]
    return rows, cols, shape


def _reduced_runs(t, dim, keepdim):
    """A reduction over one middle dim of a contiguous `t` as a kernel reads it in place: (`t` as
    [outer, runs * inner], runs, inner, the shape torch gives the result); None for other dims
    (the last, several), layouts or sizes: more than 16 runs (unrolled in the kernel), inner
    rows not 32-byte aligned (each run is a column window) or wider than 16384 (a row tile's
    column tiles stay few)."""
    dims = _reduced_dims(t, dim)
    if len(dims) != 1 or dims[0] >= t.dim() - 1 or not t.is_contiguous():
        return None
    runs, inner = t.shape[dims[0]], math.prod(t.shape[dims[0] + 1:])
    if not 1 < runs <= 16 or inner > 16384 or inner * t.element_size() % 32:
        return None
    shape = [1 if d == dims[0] else n for d, n in enumerate(t.shape)] if keepdim else [n for d, n in enumerate(t.shape) if d != dims[0]]
    return t.reshape(-1, runs * inner), runs, inner, shape


def _fits_whole_rows(t, dim, buffers):
    """Whether FP32 tiles of whole rows along `dim` (`buffers` of them) fit the unified buffer."""
    return (t.shape[dim] if t.dim() else 1) * 4 * buffers <= _UB_BYTES


def _row_width(cols, dtype):
    """`cols` rounded up to 32 bytes of `dtype`: the width of the tiles a row kernel reads its rows
    in (PyPTO reduces only 32-byte aligned tile rows); their valid shape is the real cols, so
    rows of any width are read in place."""
    align = 32 // dtype.itemsize
    return -(-cols // align) * align


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


def _cube_aligned(t, cols):
    """`t` as [rows, cols], each row zero-padded to a multiple of 16 columns: rows a prologue
    computes on the vector cores and the cube then reads as [rows, k16] tiles (its 32-byte
    aligned k); a view of a contiguous `t` whose cols are a multiple of 16 (hidden 4096)."""
    return _padded_cols(t.reshape(-1, cols), -cols % 16)


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


def _row_blocks(shape, *tensors):
    """The rows operands of a fused kernel over `shape`, read in place.

    The kernel writes the result contiguous as [blocks * n, cols]: blocks = outer x heads, the
    leading dims merged where every operand lays them out alike, n the innermost (a dense
    [rows, cols] result is one block). It reads block o (outer, inner = divmod(o, heads)) of an
    operand from a contiguous window [X * (n or 1), width] of its storage, at rows
    (outer * xo + inner * xh) * (n or 1).., column outer * co + inner * ch + c0, span columns wide (cols, or 1 for a column that broadcasts along the row): a transposed or
    permuted view (RoPE's q) in its own memory order, a column slice within its wider rows, and
    a dim it broadcasts (stride 0: cos over the heads, a mask over the heads) not at all; one
    row broadcast over n is read once per block. An operand that no such window holds (a last
    dim of another stride, more than three leading dims of other layouts) is copied,
    contiguous. Returns heads, blocks, n and per operand its window and its map (width, span,
    xo, xh, co, ch, c0, step). A (tensor, width) pair is an operand of that last dim (a narrow
    one: phi3's cos), its leading dims broadcast as the others'.
    """
    cols = shape[-1]
    pairs = [t if isinstance(t, tuple) else (t, cols) for t in tensors]
    views = [t.expand(*shape[:-1], width) for t, width in pairs]
    views = [v if v.stride(-1) in (0, 1) or v.shape[-1] == 1 else v.contiguous() for v in views]
    dims = []  # [size, stride per operand] of the leading dims, size-1 ones left out, merged where all allow
    for d, size in enumerate(shape[:-1]):
        strides = [v.stride(d) for v in views]
        if size == 1:
            continue
        if dims and all(before == stride * size for before, stride in zip(dims[-1][1], strides)):
            dims[-1] = [dims[-1][0] * size, strides]
        else:
            dims.append([size, strides])
    if len(dims) > 3:
        views = [v.contiguous() for v in views]
        dims = [[views[0].numel() // views[0].shape[-1], [v.shape[-1] for v in views]]]
    ones = [1, [0] * len(views)]
    dims = [ones, ones, ones, *dims][-3:] if len(dims) != 2 else [dims[0], ones, dims[1]]
    (outer, _), (heads, _), (n, _) = dims
    operands = []
    for k, view in enumerate(views):
        width = view.shape[-1]
        span = 1 if view.stride(-1) == 0 and width > 1 else width
        placed = _block_window(view, [(size, strides[k]) for size, strides in dims], span)
        operands.append(placed or (view.contiguous().view(-1, width), (width, width, heads, 1, 0, 0, 0, True)))
    return heads, outer * heads, n, operands


def _block_window(view, dims, span):
    """`view`'s window and map for _row_blocks (dims: the sizes and strides of its outer, heads
    and n dims; span: the columns a row holds), or None where no window of its storage holds it."""
    (outer, a), (heads, b), (n, c) = dims
    step = n > 1 and c != 0
    width = c if step else span
    block = (n if step else 1) * width
    xs, cs = [0, 0], [0, 0]
    for k, (size, stride) in enumerate(dims[:2]):
        if size > 1 and stride:
            if stride % block == 0:
                xs[k] = stride // block
            elif stride < width:
                cs[k] = stride
            else:
                return None
    if width < span or cs[0] * (outer - 1) + cs[1] * (heads - 1) + span > width:
        return None
    rows, start = xs[0] * (outer - 1) + xs[1] * (heads - 1) + 1, view.storage_offset()
    c0 = max(0, start + rows * block - view.untyped_storage().nbytes() // view.element_size())
    if c0 > start or c0 + cs[0] * (outer - 1) + cs[1] * (heads - 1) + span > width:
        return None  # the window would end past the storage even started c0 columns earlier
    window = view.as_strided((rows * (n if step else 1), width), (width, 1), start - c0)
    return window, (width, span, xs[0], xs[1], cs[0], cs[1], c0, step)


def _broadcast_blocks(*operands):
    """The tensor operands broadcast to one shape, laid out in the memory order of their result
    (`order`, as _broadcast_rows gives it) and read in place as _row_blocks reads them: a
    broadcast dim, a transposed or a column-sliced operand without a copy. Returns blocks,
    heads, n, cols, the (window, map) of each, the shape and the order (for _result_blocks)."""
    tensors = [o for o in operands if isinstance(o, torch.Tensor)]
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    order = _dense_order(tensors[0]) if tensors[0].shape == shape else list(range(len(shape)))
    laid = [t.expand(shape).permute(order) if shape else t.reshape(1) for t in tensors]
    heads, blocks, n, windows = _row_blocks(laid[0].shape, *laid)
    return blocks, heads, n, laid[0].shape[-1], windows, shape, order


def _result_blocks(shape, order, dtype, device):
    """A result of `shape` laid out in `order` (_broadcast_blocks), and the [blocks * n, cols] view
    of it a kernel writes: the result is in torch's layout, with no copy back."""
    laid = torch.empty([shape[d] for d in order], dtype=dtype, device=device)
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return laid.permute(inverse), laid.view(-1, laid.shape[-1] if shape else 1)


def _scan_rows(t, dim):
    """`t` as [rows, cols] with `dim` last (the axis a scan runs along), and that moved shape."""
    moved = t.movedim(dim, -1) if t.dim() else t.reshape(1)
    return moved.reshape(-1, moved.shape[-1]).contiguous(), moved.shape


def _product_rows(t, dim, keepdim):
    """`t` as [rows, cols] with `dim` last (None: all of `t` one row), and the shape torch gives
    the reduction along `dim`: read in place where `dim` is last and `t` contiguous."""
    if dim is None:
        return t.reshape(1, -1).contiguous(), []
    d, = _reduced_dims(t, dim)
    rows, _ = _scan_rows(t, d)
    shape = [1 if k == d else n for k, n in enumerate(t.shape)] if keepdim else [n for k, n in enumerate(t.shape) if k != d]
    return rows, shape


def _flipped_runs(t, dims):
    """(outer, length, inner): contiguous `t` as [outer, length, inner] whose middle dim is its
    `dims` (a sequence) flipped together, as they are when adjacent (size-1 dims between them
    aside; a flip of size-1 dims only is a copy, of length 1); None where they are not, where
    torch raises or where `t` is not contiguous."""
    rank = t.dim()
    if not rank or not t.is_contiguous() or any(type(d) is not int or not -rank <= d < rank for d in dims):
        return None
    if len({d % rank for d in dims}) < len(dims):
        return None
    dims = {d % rank for d in dims if t.shape[d] > 1}
    if not dims:
        return t.numel() // t.shape[-1], 1, t.shape[-1]
    if any(t.shape[d] > 1 and d not in dims for d in range(min(dims), max(dims))):
        return None
    first, last = min(dims), max(dims) + 1
    return math.prod(t.shape[:first]), math.prod(t.shape[first:last]), math.prod(t.shape[last:])


def _joined(tensors, dim, stacked):
    """Whether a join kernel joins `tensors` as torch.cat (`stacked`: torch.stack) along `dim`:
    tensors of one float dtype on the kernel path, shapes torch accepts; and if so the window
    and map of each (_joined_window), the output's [rows, width] and its shape.

    The output is written contiguous, as torch.cat's is. Along a dim with wider dims after it
    (a DynamicCache's keys along the sequence) it is [blocks * n, width], each block the rows of
    each tensor in turn; along the last dim (all dims after it of size 1) [rows, width], each
    tensor its columns. Each tensor is read in place where a window of its storage holds it
    (_block_window: a transposed key, a column slice), else copied. An empty tensor joins
    nothing: torch.cat skips empty 1-D ones whatever their shape (a DynamicCache starts from
    one), and an empty one of the others' shape but along `dim` adds no rows or columns (phi3's
    pass-through of a rotary dim that is the whole head); the kernel reads nothing of it (its
    map has no blocks) and is handed the first tensor joined in its place.
    """
    if not isinstance(dim, int) or not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    kept = [stacked or t.numel() > 0 for t in tensors]
    joined = [t for t, k in zip(tensors, kept) if k]
    if not joined or any(t.dtype != joined[0].dtype for t in tensors):
        return None
    first = joined[0]
    rank = first.dim() + stacked
    shaped = [t for t in tensors if stacked or t.shape != (0,)]  # torch checks the shapes of these
    if not -rank <= dim < rank or any(t.dim() != first.dim() for t in shaped):
        return None
    dim %= rank
    if first.dim() == 0 or not _on_kernel_path(*joined):
        return None
    same = [d for d in range(first.dim()) if stacked or d != dim]
    if any(t.shape[d] != first.shape[d] for t in shaped for d in same):
        return None
    if stacked:
        joined = [t.unsqueeze(dim) for t in joined]
    shape = [*joined[0].shape[:dim], sum(t.shape[dim] for t in joined), *joined[0].shape[dim + 1:]]
    if not math.prod(shape):
        return None
    along_rows = math.prod(shape[dim + 1:]) > 1
    width = math.prod(shape[dim + 1:]) if along_rows else shape[dim]
    windows, maps, at = [], [], 0
    for t in joined:
        window, map = _joined_window(t, dim, along_rows, at)
        windows.append(window)
        maps.append(map)
        at += t.shape[dim]
    slots, none = iter(zip(windows, maps)), (windows[0], (1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0))  # no blocks: nothing read
    windows, maps = zip(*(next(slots) if k else none for k in kept))
    return windows, maps, math.prod(shape) // width, width, shape


def _joined_window(t, dim, along_rows, at, copy=True):
    """`t`'s window of its storage and its map for a join kernel along `dim` (_joined): (span, X,
    blocks, heads, xo, xh, co, ch, c0, row, col). Its dims before `dim` merged as _row_blocks merges
    them, into blocks (outer x heads) of n rows: along_rows, n its size along `dim` and a row
    its dims after it, placed at row `at` of each output block (row); else n the innermost of
    them and a row its size along `dim`, placed at column `at` (col). Block o of it is read at rows
    (outer * xo + inner * xh) * n.. of the window (X * n rows), column outer * co + inner * ch +
    c0. A tensor that no window holds is copied, contiguous (`copy`; else None)."""
    span = math.prod(t.shape[dim + 1:]) if along_rows else t.shape[dim]
    rest = [(t.shape[d], t.stride(d)) for d in range(dim + 1 if along_rows else dim, t.dim()) if t.shape[d] > 1]
    # a row's elements lie in one run: its dims merge into one of stride 1
    fits = all(before == stride * size for (_, before), (size, stride) in zip(rest, rest[1:])) and (not rest or rest[-1][1] == 1)
    dims = []
    for d in range(dim):
        size, stride = t.shape[d], t.stride(d)
        if size == 1:
            continue
        if dims and dims[-1][1] == stride * size:
            dims[-1] = (dims[-1][0] * size, stride)
        else:
            dims.append((size, stride))
    levels = 2 if along_rows else 3
    dims = [(1, 0)] * (levels - len(dims)) + dims
    if along_rows:
        dims.append((t.shape[dim], t.stride(dim)))
    placed = fits and len(dims) == 3 and _block_window(t, dims, span)
    if placed and (placed[1][7] or dims[2][0] == 1):  # n's rows are steps of the window (not one row, broadcast)
        window, (_, _, xo, xh, co, ch, c0, _) = placed
        (outer, _), (heads, _) = dims[:2]
        place = (span, xo * (outer - 1) + xh * (heads - 1) + 1, outer * heads, heads, xo, xh, co, ch, c0)
    elif not copy:
        return None
    else:
        blocks = math.prod(t.shape[:dim]) if along_rows else 1
        window, place = t.contiguous().view(-1, span), (span, blocks, blocks, blocks, 0, 1, 0, 0, 0)
    return window, (*place, *((at, 0) if along_rows else (0, at)))


_JOIN_ROWS = 1024  # the most rows of a join kernel's tile (the tile budget caps wider rows' sooner)


def _join_rows(windows, maps):
    """The most rows a join kernel's tile takes for `windows` and `maps` (_joined's): the power of
    two at or above the rows of the largest block (kernels are built once per value), at most
    _JOIN_ROWS. A copy's tile is best as large as the tile budget lets it be (scripts/cache.py: a
    decode step's cache join 3.2x faster than in 64-row tiles), but no larger than the rows."""
    n = max(w.shape[0] // m[1] for w, m in zip(windows, maps))
    return min(_JOIN_ROWS, 1 << (max(n, 1) - 1).bit_length())


def _launch_joins(kernel, joined):
    """Launch `kernel`, a join kernel of one output per join (torch.cat's of a cache's keys and
    values), on `joined` (each _joined's of one dtype); the outputs, contiguous, in their shapes."""
    windows = [w for windows, *_ in joined for w in windows]
    outs = [torch.empty(rows, width, dtype=windows[0].dtype, device=windows[0].device) for *_, rows, width, _ in joined]
    maps = tuple(m for _, maps, *_ in joined for m in maps)
    factory = _PYPTO_DTYPES[outs[0].dtype], tuple(w.shape[1] for w in windows), tuple(o.shape[1] for o in outs), maps
    _launch(kernel(*factory, _join_rows(windows, maps)), *windows, *outs)
    return tuple(out.view(shape) for out, (*_, shape) in zip(outs, joined))


def _copied(t):
    """Whether a join kernel makes `t` contiguous (Tensor.contiguous) and if so as _joined says: a
    torch.cat of `t` alone along its last dim, read in place from its window of storage (a
    transposed [b, s, h, d], a column slice x[..., 1:]), of a float dtype or int64 on the kernel
    path. None where torch returns `t` itself (contiguous) or no window holds it (x.mT: torch copies)."""
    if not isinstance(t, torch.Tensor) or not t.dim() or t.is_contiguous() or not _on_kernel_path(t, dtypes=(*_PYPTO_DTYPES, torch.int64)):
        return None
    placed = _joined_window(t, t.dim() - 1, False, 0, copy=False)
    if placed is None:
        return None
    window, map = placed
    return (window,), (map,), t.numel() // t.shape[-1], t.shape[-1], t.shape


def _rolled(input, shifts, dims):
    """torch.roll(input, shifts, dims) as `input` (flattened for dims None), the moves along its
    dims ((dim, size, runs), ...: a dim rolled by s puts its last s entries first) and the shape
    to restore (None: the input's); or None."""
    shifts = (shifts,) if type(shifts) is int else tuple(shifts)
    shape = None
    if dims is None:
        if len(shifts) != 1:
            return None
        shape, input, dims = input.shape, input.reshape(-1), 0
    dims = (dims,) if type(dims) is int else tuple(dims)
    if len(dims) != len(shifts) or not dims or not all(type(v) is int for v in (*dims, *shifts)):
        return None
    if input.dim() == 0 or any(not -input.dim() <= d < input.dim() for d in dims):
        return None
    by_dim = {}
    for d, s in zip(dims, shifts):
        by_dim[d % input.dim()] = by_dim.get(d % input.dim(), 0) + s
    moves = []
    for d, s in sorted(by_dim.items()):
        n, s = input.shape[d], s % input.shape[d]
        moves.append((d, n, [(n - s, s, 0), (0, n - s, s)]))
    return input, moves, shape


def _repeated(input, repeats, dim):
    """torch.repeat_interleave(input, repeats, dim) for an int `repeats` as `input` with a new
    dim of 1 after `dim` (the flattened input's, for dim None) that `repeats` copies fill, and
    the result's shape; or None."""
    if type(repeats) is not int or not 0 < repeats <= 64 or dim is not None and type(dim) is not int:
        return None
    if dim is None:
        return input.reshape(-1, 1), [(1, repeats, [(0, 1, j) for j in range(repeats)])], (input.numel() * repeats,)
    if input.dim() == 0 or not -input.dim() <= dim < input.dim():
        return None
    dim %= input.dim()
    result = (*input.shape[:dim], input.shape[dim] * repeats, *input.shape[dim + 1:])
    spread = input.reshape(*input.shape[:dim + 1], 1, *input.shape[dim + 1:])
    return spread, [(dim + 1, repeats, [(0, 1, j) for j in range(repeats)])], result


def _padded(input, pad, mode, value):
    """F.pad(input, pad, "constant", value) as the moves along its last len(pad) // 2 dims: pad's
    pairs, last dim first, add (negative: remove) entries before and after a dim; or None."""
    if mode != "constant" or not isinstance(pad, (list, tuple)) or not pad or len(pad) % 2:
        return None
    if not all(type(p) is int for p in pad) or len(pad) // 2 > input.dim() or value is not None and type(value) not in (int, float):
        return None
    if not input.is_floating_point() and not (value is None or type(value) is int and abs(value) <= 2**24):
        return None  # an integer fill passes through FP32 (pypto.full), exact up to 2^24
    moves = []
    for i in range(len(pad) // 2):
        d, before, after = input.dim() - 1 - i, pad[2 * i], pad[2 * i + 1]
        n = input.shape[d]
        if n + before + after <= 0:
            return None
        moves.append((d, n + before + after, [(max(0, -before), n - max(0, -before) - max(0, -after), max(0, before))]))
    return input, moves, None


def _moved_along(x, dim, size, runs, value=0.0):
    """`x` with dim `dim` rebuilt to `size` entries from `runs` of its own ((source start, count,
    output start), ...), the entries no run reaches set to `value`: one assemble kernel on `x`
    folded to [rows, cols] at `dim`."""
    rows, inner = math.prod(x.shape[:dim]), math.prod(x.shape[dim + 1:])
    places = tuple((start * inner, count * inner, at * inner) for start, count, at in runs if count > 0)
    fills, done = [], 0
    for _, count, at in sorted(places, key=lambda run: run[2]):
        fills += [(done, at - done)] if at > done else []
        done = at + count
    fills += [(done, size * inner - done)] if done < size * inner else []
    matrix, start = _row_window(x, rows)
    places = tuple((source + start, count, at) for source, count, at in places)
    out = torch.empty(rows, size * inner, dtype=x.dtype, device=x.device)
    kernel = assemble1_kernel(_PYPTO_ALL_DTYPES[x.dtype], (matrix.shape[1],), size * inner, (places,), tuple(fills), value)
    _launch(kernel, matrix, out)
    return out.reshape(*x.shape[:dim], size, *x.shape[dim + 1:])
