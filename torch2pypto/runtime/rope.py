"""Whether a projections-and-RoPE kernel takes the rotary embedding's operands."""

import torch

from torch2pypto.runtime.launch import _on_kernel_path

# The cube cores of A2/A3, and at most how many of a row tile's cube tasks (one per projection's
# n tile) PyPTO merges into one that reads the a tile once. In the cost model at llama-7B's q/k/v
# (bf16, 48 tasks a row tile), µs merging 1 / 2 / 4 / 8 / PyPTO's default: 64 tokens 82.7 / 81.8 /
# - / - / 105.1; 2048 tokens 1207.1 / 1098.4 / 1078.8 / 1095.8 / 1183.2.
_CUBE_CORES, _ROPE_REUSE = 24, 4


def _rope_takes(x, cos, sin, view, *widths, partial=False):
    """Whether the projections of x ([B, S, k]) that are `widths` wide, each viewed as
    `.view(view).transpose(1, 2)`, are [B, heads, S, D] views of their rows, D the last dim of
    cos and sin: contiguous [B, S, D] tensors (or [1, S, D]: one sequence's, which the batch
    shares) of a float dtype on the kernel path, a token's angles beside its projection's row.
    `partial`: cos and sin rotate each head's first columns only (phi3's), D the views' own."""
    if not (isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor) and _on_kernel_path(cos, sin)):
        return False
    if x.dim() != 3 or cos.dim() != 3 or cos.shape != sin.shape or cos.shape[0] not in (1, x.shape[0]) or cos.shape[1] != x.shape[1]:
        return False
    if not (cos.is_contiguous() and sin.is_contiguous()):
        return False
    d = cos.shape[-1]
    b, s = x.shape[:2]
    try:
        views = [torch.empty(b, s, n, device="meta").view(view).transpose(1, 2) for n in widths]
    except (RuntimeError, TypeError):
        return False
    if partial:
        d, rotated = views[0].shape[-1] if views and views[0].dim() == 4 else 0, d
        if not 0 < rotated <= d:
            return False
    return all(n % d == 0 and v.shape == (b, n // d, s, d) for n, v in zip(widths, views))


def _norms_take(cols, vectors, numbers):
    """Whether per-head norms' tensors are [cols] ones (a head's gamma, every head's) of a float
    dtype on the kernel path, and their numbers ints or floats."""
    return all(isinstance(v, torch.Tensor) and v.shape == (cols,) and _on_kernel_path(v) for v in vectors) and all(
        type(n) in (int, float) for n in numbers)


def _head_dim(x, view, projections):
    """A head's width: the last dim of x's first projection ([B, S, n], n its weight's rows) viewed
    as `view`; 0 where that view fails."""
    try:
        return torch.empty(*x.shape[:2], projections[0][0].shape[0], device="meta").view(view).shape[-1]
    except (AttributeError, IndexError, RuntimeError, TypeError):
        return 0


def _qkv_slices(weight, bias, start, stop):
    """The (weight, bias) of q's, k's and v's columns of one projection (phi3's qkv_proj: its result
    sliced at `start` and `stop` along the last dim): views of the weight's rows and the bias, no
    copy; [] unless 0 < start < stop < the weight's rows (ints)."""
    if not (isinstance(weight, torch.Tensor) and weight.dim() == 2 and type(start) is int and type(stop) is int
            and 0 < start < stop < weight.shape[0]):
        return []
    spans = (slice(0, start), slice(start, stop), slice(stop, weight.shape[0]))
    return [(weight[s], None if bias is None else bias[s]) for s in spans]


def _deferred(shape, dtype, device, prologue):
    """A tensor of `shape` and `dtype` on `device` that holds no values: the result of a region
    deferred into the projections kernel of its one reader, which computes it in its prologue.
    It carries that kernel's call (`prologue`: the region's operands bound) for the projections'
    wrapper to take (:func:`_deferred_prologue`). One element, expanded: no memory."""
    t = torch.empty((), dtype=dtype, device=device).expand(shape)
    t._pypto_prologue = prologue
    return t


def _deferred_prologue(x):
    """The call that a deferred region's result `x` carries (:func:`_deferred`), taken off it; None for any other value."""
    prologue = getattr(x, "_pypto_prologue", None)
    if prologue is not None:
        del x._pypto_prologue
    return prologue
