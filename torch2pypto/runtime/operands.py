"""Whether a kernel takes a call's operands, and those operands as it reads them."""

import functools
import math
import struct

import torch

from torch2pypto.runtime.generated import index_bounds_kernel
from torch2pypto.runtime.launch import _PYPTO_ALL_DTYPES, _kernel_device, _launch, _on_kernel_path


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


def _cube_operands(a, b, transposed=False):
    """`a` ([..., m, k]) and `b` ([..., k, n], or [n, k] if `transposed`: linear's weight) as a cube
    kernel reads them: (a, b, the result's batch dims, whether b is a stack of matrices, whether
    the kernel reads b transposed). Batch dims broadcast as torch's matmul does; with one right
    matrix, a's batch dims fold into its rows ([rows, k] by [k, n]), else a is [batches * m, k]
    and b [batches * k, n]. Each is read in place where it is row-major or b is the transpose of
    a row-major tensor (k.mT: read as k, transposed); K and N of any size (the kernel's valid
    shape). Else a copy: pypto.from_torch takes contiguous tensors only (a batch that
    broadcasts, other strides); a weight's copy is kept on it (_kept_contiguous).
    """
    m, k = a.shape[-2:]
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    stacked = math.prod(b.shape[:-2]) > 1
    if stacked:
        a, b = a.expand(*batch, m, k), b.expand(*batch, *b.shape[-2:])
    a = a.reshape(-1, k).contiguous()
    if not b.is_contiguous() and b.mT.is_contiguous():
        b, transposed = b.mT, not transposed
    elif transposed:
        b = _kept_contiguous(b)
    return a, b.reshape(-1, b.shape[-1]).contiguous(), batch, stacked, transposed


def _kept_contiguous(w):
    """Weight `w`, contiguous: itself, or a copy made once and kept on `w` until `w` changes (its
    version counter), so that no forward copies it again."""
    if w.is_contiguous():
        return w
    kept = getattr(w, "_pypto_contiguous", None)
    if kept is None or kept[0] != w._version:
        kept = w._version, w.contiguous()
        w._pypto_contiguous = kept
    return kept[1]


def _indexed_dim(t, dim, rank=None):
    """`dim` of tensor `t` as a dim in [0, t.dim()), or None: no such dim (torch raises), or `t`
    is not of `rank` when one is given."""
    if not isinstance(t, torch.Tensor) or not t.dim() or rank is not None and t.dim() != rank:
        return None
    return dim % t.dim() if type(dim) is int and -t.dim() <= dim < t.dim() else None


def _kernel_indices(index, count, rank=None):
    """`index` flattened to the indices a kernel takes as they are, or None: not a non-empty
    int32 or int64 tensor (of `rank`, if given), or an index outside [0, count), where torch
    raises and PyPTO would read out of bounds."""
    if not isinstance(index, torch.Tensor) or index.dtype not in (torch.int32, torch.int64) or not index.numel():
        return None
    if rank is not None and index.dim() != rank:
        return None
    flat = index.reshape(-1).contiguous()
    low, high = _index_bounds(flat, count)
    if not (0 <= low and high < count):
        return None
    return flat


# the most indices a tile of the bounds kernel holds; its FP32 bounds decide [0, count) exactly
# while count is an FP32 integer (rounding keeps the order and 0 and count)
_BOUNDS_TILE, _BOUNDS_EXACT = 1024, 2**24


def _index_bounds(flat, count):
    """The least and the largest of 1-D indices `flat` (or bounds that decide [0, count) as
    they do): each tile's on the bounds kernel, in one host sync; torch's aminmax off the
    kernel path."""
    if count > _BOUNDS_EXACT or not _on_kernel_path(flat, dtypes=(torch.int32, torch.int64)):
        return torch.stack(torch.aminmax(flat)).tolist()  # one reduction, one host sync
    rows = min(_BOUNDS_TILE, 1 << max(3, (flat.numel() - 1).bit_length()))
    bounds = torch.empty(2 * -(-flat.numel() // rows), device=flat.device)  # least, largest of each tile
    _launch(index_bounds_kernel(_PYPTO_ALL_DTYPES[flat.dtype], rows), flat, bounds)
    values = bounds.tolist()
    return min(values[0::2]), max(values[1::2])


def _row_operands(input, shape, *rows):
    """Whether a row kernel takes these: `input` ending in the dims `shape`, each of `rows` None
    or a tensor of exactly that shape, all of input's dtype, on the kernel path."""
    given = [r for r in rows if r is not None]
    if not shape or tuple(input.shape[max(input.dim() - len(shape), 0):]) != shape:
        return False
    if any(not isinstance(r, torch.Tensor) or tuple(r.shape) != shape or r.dtype != input.dtype for r in given):
        return False
    return _on_kernel_path(input, *given)


def _gathers(input, index, d):
    """Whether torch's gather of `input` by `index` along `d` is defined: one rank, the index no
    larger than the input in the other dims."""
    return index.dim() == input.dim() and all(k == d or i <= n for k, (i, n) in enumerate(zip(index.shape, input.shape)))


def _scatters(input, index, src, d, reduce):
    """Whether a scatter kernel writes torch's scatter of `src` into `input` by `index` along
    `d` with `reduce` (None, "add" or "multiply"): the index covers the input's other dims (the
    kernel's rows); src is a tensor of the input's dtype and rank, no smaller than the index,
    or a Python number a float input's dtype holds (torch raises beyond it)."""
    if isinstance(src, torch.Tensor):
        if not (src.dtype == input.dtype and src.dim() == index.dim() and all(i <= s for i, s in zip(index.shape, src.shape))):
            return False
    elif type(src) not in (int, float) or not input.dtype.is_floating_point or torch.finfo(input.dtype).max < abs(src) < float("inf"):
        return False
    return reduce in (None, "add", "multiply") and index.dim() == input.dim() and all(
        k == d or i == n for k, (i, n) in enumerate(zip(index.shape, input.shape)))


def _adds(input, indices, source, d, alpha):
    """Whether an index_add kernel adds `alpha` * `source` into `input` at `indices` along `d` as
    torch does: source is the input's shape with `d` as long as the indices, and its dtype;
    alpha a Python number."""
    shape = [*input.shape[:d], indices.shape[0], *input.shape[d + 1:]]
    return isinstance(source, torch.Tensor) and source.dtype == input.dtype and list(source.shape) == shape and type(
        alpha) in (int, float)


# _one_hot_classes: at most 8192 classes, as an INT64 row of them in three buffers fits the 192 KB
# unified buffer

def _one_hot_classes(input, num_classes):
    """The classes of torch's one_hot(input, num_classes) if a kernel computes it: an int64
    tensor on the kernel path whose indices lie in [0, classes), at most 8192 classes."""
    if not isinstance(input, torch.Tensor) or type(num_classes) is not int or not _on_kernel_path(input, dtypes=(torch.int64,)):
        return None
    low, high = int(input.min()), int(input.max())
    classes = high + 1 if num_classes == -1 else num_classes
    return classes if 0 <= low and high < classes <= 8192 else None


# _ARANGE_TILE: an arange kernel's values per tile and its table of tile starts (pypto.arange
# takes constants only): lengths up to 4M, every value of that span in INT32
_ARANGE_TILE = (1024, 4096)
# _ARANGE_STARTS: the starts kernels were made for, per (dtype, step). A start is a kernel
# constant, so one that changes from call to call (a decode step's position) would build a kernel
# each time: past _ARANGE_KERNELS starts, torch's arange runs
_ARANGE_STARTS = {}
_ARANGE_KERNELS = 8


def _arange_plan(start, end, step, dtype, layout, device, pin_memory, requires_grad):
    """(start, step, length, dtype) of torch.arange(start, end, step) (end None: of
    arange(start)) if a kernel computes it: Python ints whose whole span of _ARANGE_TILE's values
    lies in INT32, a non-empty result of int64 or int32, strided, not pinned nor requiring grad,
    on the kernel path, of a start with a kernel or while few have (_ARANGE_STARTS); else None."""
    if end is None and step == 1:
        start, end = 0, start
    if not all(type(v) is int for v in (start, end, step)) or step == 0 or dtype not in (None, torch.int64, torch.int32):
        return None
    if layout not in (None, torch.strided) or pin_memory or requires_grad:
        return None
    rows, tiles = _ARANGE_TILE
    length = max(0, -((start - end) // step))
    last = start + (rows * tiles - 1) * step
    if not 0 < length <= rows * tiles or not -2**31 <= min(start, last) <= max(start, last) < 2**31:
        return None
    if not _kernel_device(device):
        return None
    dtype = dtype or torch.int64
    starts = _ARANGE_STARTS.setdefault((dtype, step), set())
    if start not in starts and len(starts) >= _ARANGE_KERNELS:
        return None
    starts.add(start)
    return start, step, length, dtype


def _shifted_range(start, end, step, offset, dtype):
    """(start, end) of the range torch.arange(start, end, step) + offset is (end None: of
    arange(start)), where both give the same tensor: Python ints (no bool) and an int64 result;
    else None."""
    if end is None and step == 1:
        start, end = 0, start
    if not all(type(v) is int for v in (start, end, step, offset)) or dtype not in (None, torch.int64):
        return None
    return start + offset, end + offset


def _col_minus_row(h, w, device):
    """[h, w] FP32: each entry's column minus its row (a triangle's mask compares it with the diagonal)."""
    return (torch.arange(w, device=device) - torch.arange(h, device=device)[:, None]).float()


def _histc_edges(input, bins, min, max):
    """torch.histc's outer bin edges as its FP32 kernel reads them (min and max rounded to FP32,
    as torch's edges are), if a kernel computes the call: a contiguous FP32 tensor on the kernel
    path, under 2**24 elements (exact FP32 counts), int bins in [1, 2**24), min < max finite in
    FP32 (min == max takes the data's range: torch), no gradient recorded (torch's histc has
    none); else None."""
    if not isinstance(input, torch.Tensor) or not _on_kernel_path(input, dtypes=(torch.float32,)) or not input.is_contiguous():
        return None
    if type(bins) is not int or not 0 < bins < 2**24 or input.numel() >= 2**24 or torch.is_grad_enabled() and input.requires_grad:
        return None
    if any(type(v) not in (int, float) for v in (min, max)):
        return None
    left, right = (struct.unpack("f", struct.pack("f", v))[0] if math.isfinite(v) and abs(v) < 3.4e38 else math.nan for v in (min, max))
    return (left, right) if left < right else None


@functools.cache
def _histc_bins(bins, device):
    """[bins, 1] FP32: each bin's number, which the histc kernel compares each value's bin with
    (made once per bins and device)."""
    return torch.arange(bins, dtype=torch.float32, device=device).reshape(bins, 1)
