"""Resampling (F.interpolate) as what a kernel reads: each spatial dim a fixed linear map, its
source taps and weights, made once per shape by torch's own op on an identity."""

import functools
import math

import torch

from torch2pypto.runtime.tiles import _TILE_BUDGET

# the modes each input rank resamples on a kernel (5-D inputs and trilinear run torch)
_RESAMPLED_MODES = {3: ("nearest", "nearest-exact", "linear", "area"), 4: ("nearest", "nearest-exact", "bilinear", "bicubic", "area")}
_SMOOTHED_MODES = ("linear", "bilinear", "bicubic")  # those that take align_corners
# one image's tiles a kernel keeps live (input, rows resampled, a term, the result), FP32
_RESAMPLED_TILES = 4


def _resampled(t, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias):
    """The taps of F.interpolate's call on `t` (:func:`_resampling_taps`) for the height, then
    the width of its images (a 3-D input's height is 1, its map the identity): None where torch
    raises, `t` is not contiguous, its mode runs torch or one image's tiles exceed _TILE_BUDGET.
    The checks are torch's own where it refuses a call; any other doubt runs torch too."""
    rank = t.dim()
    if not t.is_contiguous() or mode not in _RESAMPLED_MODES.get(rank, ()) or (size is None) == (scale_factor is None):
        return None
    if recompute_scale_factor and size is not None:
        return None
    if align_corners not in (None, False, True) or align_corners is not None and mode not in _SMOOTHED_MODES:
        return None
    if antialias not in (False, True) or antialias and (mode not in ("bilinear", "bicubic") or t.dtype != torch.float32):
        return None  # torch antialiases FP32 only (its CPU kernels refuse FP16 and BF16)
    spatial = rank - 2
    given = size if size is not None else scale_factor
    given = tuple(given) if isinstance(given, (list, tuple)) else (given,) * spatial
    if len(given) != spatial or any(type(g) not in ((int,) if size is not None else (int, float)) or g <= 0 for g in given):
        return None
    if size is not None or recompute_scale_factor:  # torch's sizes; the scales from them
        sizes = given if size is not None else tuple(math.floor(float(n) * s) for n, s in zip(t.shape[2:], given))
        axes = [(n, out, None) for n, out in zip(t.shape[2:], sizes)]
    else:  # torch's kernels take the scales given, which their sizes floor
        axes = [(n, math.floor(float(n) * s), float(s)) for n, s in zip(t.shape[2:], given)]
    if any(out <= 0 for _, out, _ in axes):
        return None
    axes = [(1, 1, None)] * (4 - rank) + axes
    (h, out_h, scale_h), (w, out_w, scale_w) = axes
    height, width = _resampled_tile(h, w, out_h, out_w)
    if height * width * 4 * _RESAMPLED_TILES > _TILE_BUDGET:
        return None
    how = (mode, align_corners, antialias, t.device)
    return _resampling_taps(h, out_h, scale_h, *how, by_rows=True), _resampling_taps(w, out_w, scale_w, *how, by_rows=False)


def _resampled_tile(h, w, out_h, out_w):
    """The vector tile (height, width) holding an image before and after resampling: powers of
    two, at least 16 columns (32 bytes of FP16)."""
    return 1 << (max(h, out_h) - 1).bit_length(), 1 << (max(w, out_w, 16) - 1).bit_length()


@functools.cache
def _resampling_taps(size, out, scale, mode, align_corners, antialias, device, by_rows):
    """(index, weights, taps) of one dim resampled from `size` to `out` points as F.interpolate
    does it: output point j is the sum over t < taps of weights[t, j] * input[index[t * out + j]]
    (int32; FP32 weights, [out, taps] where `by_rows`: a column per tap). The map is torch's, interpolating the identity (its weights exactly, a
    border's clamped taps summed into one), made once per shape; a point with fewer taps reads a
    weight of 0."""
    if size == out == 1 and scale is None:
        return torch.zeros(1, dtype=torch.int32, device=device), torch.ones(1, 1, device=device), 1  # a 3-D input's height
    eye = torch.eye(size).view(size, 1, size) if mode == "linear" else torch.eye(size).view(size, 1, 1, size)
    spatial = eye.dim() - 2
    matrix = torch.nn.functional.interpolate(
        eye, size=None if scale else (1,) * (spatial - 1) + (out,), scale_factor=scale and (1.0,) * (spatial - 1) + (scale,),
        mode=mode, align_corners=align_corners, antialias=antialias,
    ).view(size, out)
    read = (matrix != 0).to(torch.int8)
    taps = int(read.sum(0).max())
    index = torch.sort(read, dim=0, descending=True, stable=True).indices[:taps]  # each point's taps first, in order
    weights = matrix.gather(0, index)
    weights = weights.t().contiguous() if by_rows else weights
    return index.to(torch.int32).reshape(-1).to(device), weights.to(device), taps
