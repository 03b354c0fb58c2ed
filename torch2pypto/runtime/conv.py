"""Convolutions: torch's own call, whether the conv kernel takes one, and its input as columns."""

import functools
import math

import torch

from torch2pypto.runtime.launch import _on_kernel_path


def _conv_torch(conv, input, weight, bias, stride, padding, dilation, groups, padding_mode):
    """torch's `conv` as nn.ConvNd calls it: a `padding_mode` other than zeros pads the input first."""
    if padding_mode == "zeros":
        return conv(input, weight, bias, stride, padding, dilation, groups)
    taps, dims = weight.shape[2:], weight.dim() - 2
    spread = (dilation,) * dims if isinstance(dilation, int) else tuple(dilation)
    if padding == "same":
        totals = [d * (k - 1) for d, k in zip(spread, taps)]
        pads = [p for total in reversed(totals) for p in (total // 2, total - total // 2)]
    else:
        pads = [0] * 2 * dims if padding == "valid" else [p for p in reversed((padding,) * dims if isinstance(padding, int) else tuple(padding)) for _ in range(2)]
    return conv(torch.nn.functional.pad(input, pads, mode=padding_mode), weight, bias, stride, 0, dilation, groups)


def _conv_tensors(input, weight, bias):
    """Whether a conv's tensors are of one PyPTO dtype, on the kernel path."""
    tensors = [input, weight] + ([] if bias is None else [bias])
    return all(isinstance(t, torch.Tensor) and t.dtype == input.dtype for t in tensors) and _on_kernel_path(*tensors)


def _conv_takes(input, weight, bias, stride, padding, dilation, groups, dims):
    """Whether the conv kernel computes torch's conv of `dims` spatial dims: tensors of one PyPTO
    dtype on the kernel path, a batched or unbatched input of the weight's channels, a stride equal to
    the kernel size that fits at least once, no padding, dilation or groups; k = channels * taps
    and the positions n at most 65535."""
    if not _conv_tensors(input, weight, bias):
        return False
    taps = tuple(weight.shape[2:])
    tupled = lambda v: (v,) * dims if isinstance(v, int) else tuple(v)
    if weight.dim() != dims + 2 or input.dim() not in (dims + 1, dims + 2) or input.shape[-dims - 1] != weight.shape[1]:
        return False
    if groups != 1 or tupled(dilation) != (1,) * dims or tupled(stride) != taps:
        return False
    if not (padding == "valid" or not isinstance(padding, str) and tupled(padding) == (0,) * dims):
        return False
    positions = [size // tap for size, tap in zip(input.shape[-dims:], taps)]
    if min(positions) < 1 or bias is not None and bias.shape != weight.shape[:1]:
        return False
    return max(math.prod(weight.shape[1:]), math.prod(positions)) <= 65535


def _conv_columns(input, taps):
    """A batched input [b, c, *sizes] as the kernel reads it: (columns, positions, transposed).
    Each image's columns are [c * taps, positions], stacked ([b * c * taps, positions]), or,
    where the input is channels-last with one tap, their transposes ([b * positions, c]): both
    read in place. Patches of several taps (a stride equal to the kernel) are gathered into
    columns: a copy of the input's size, as pypto.from_torch reads row-major tensors only."""
    b, c, dims = input.shape[0], input.shape[1], len(taps)
    positions = [size // tap for size, tap in zip(input.shape[2:], taps)]
    if math.prod(taps) == 1:
        images = input.reshape(b, c, -1)
        if not images.is_contiguous() and images.mT.is_contiguous():
            return images.mT.reshape(-1, c), positions, True
        return images.contiguous().reshape(-1, images.shape[-1]), positions, False
    kept = input[(..., *(slice(0, n * t) for n, t in zip(positions, taps)))]
    split = kept.reshape(b, c, *(d for n, t in zip(positions, taps) for d in (n, t)))
    order = [0, 1, *range(3, 2 + 2 * dims, 2), *range(2, 2 + 2 * dims, 2)]  # b, c, taps..., positions...
    return split.permute(order).reshape(b * c * math.prod(taps), math.prod(positions)), positions, False


def _conv_shifted(input, weight, bias, stride, padding, dilation, groups, dims):
    """Where a kernel of shifted reads computes torch's conv of `dims` spatial dims: where
    _conv_strided takes it at stride and dilation 1 (zero padding of at most taps - 1 a side, 'same'
    padding the odd one after, as torch), per dim the zeros before the input and the output's size:
    (left, width) for conv1d, (top, height, left, width) for conv2d. None where it does not."""
    if _conv_ints(stride, dims) != (1,) * dims or _conv_ints(dilation, dims) != (1,) * dims:
        return None
    strided = _conv_strided(input, weight, bias, stride, padding, dilation, groups, dims)
    return None if strided is None else tuple(v for i, v in enumerate(strided) if i % 4 < 2)


def _conv_taps(weight):
    """An ungrouped conv's weight [out, channels, *taps] as the dense kernel reads it: [taps * out,
    channels], tap k's matrix (taps in row-major order) at rows k * out. A copy made once and kept
    on the weight until it changes (its version counter), so that no forward copies it again."""
    kept = getattr(weight, "_pypto_taps", None)
    if kept is None or kept[0] != weight._version:
        kept = weight._version, weight.detach().permute(*range(2, weight.dim()), 0, 1).reshape(-1, weight.shape[1])
        weight._pypto_taps = kept
    return kept[1]


def _conv_ints(value, dims):
    """A conv's stride, padding or dilation as a `dims`-tuple of ints (one int or a 1-tuple stands
    for every dim, as torch reads it); None if it is not one."""
    value = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    value = value * dims if len(value) == 1 else value
    return value if len(value) == dims and all(type(v) is int for v in value) else None


def _conv_strided(input, weight, bias, stride, padding, dilation, groups, dims):
    """Where a kernel of strided shifted reads computes torch's conv of `dims` spatial dims. It takes
    tensors of one PyPTO dtype on the kernel path, a batched or unbatched input, ungrouped (weight
    [out, channels, *taps], at most 65535 channels: the cube's k) or depthwise (groups = channels,
    weight [channels, 1, *taps]), any stride and dilation ('same' at stride 1 only, as torch), zero
    padding of at most dilation * (taps - 1) a side and each dim at least its dilation long, so
    that every output point reads a tap inside the input. Per dim (zeros before, output size,
    stride, dilation), flattened: (left, width, stride, dilation) for conv1d, (top, height,
    stride_y, dilation_y, left, width, stride_x, dilation_x) for conv2d. None where it does not."""
    if not _conv_tensors(input, weight, bias) or weight.dim() != dims + 2 or input.dim() not in (dims + 1, dims + 2):
        return None
    channels, taps, sizes = input.shape[-dims - 1], tuple(weight.shape[2:]), tuple(input.shape[-dims:])
    dense = groups == 1 and weight.shape[1] == channels <= 65535
    if not (dense or type(groups) is int and groups == channels == weight.shape[0] and weight.shape[1] == 1):
        return None
    steps, spreads = _conv_ints(stride, dims), _conv_ints(dilation, dims)
    if steps is None or spreads is None or min(steps + spreads) < 1 or padding == "same" and steps != (1,) * dims:
        return None  # torch pads 'same' at stride 1 only
    reaches = tuple(spread * (tap - 1) for spread, tap in zip(spreads, taps))
    if padding in ("same", "valid"):
        befores = tuple(reach // 2 if padding == "same" else 0 for reach in reaches)
        afters = tuple(reach - before if padding == "same" else 0 for reach, before in zip(reaches, befores))
    else:
        befores = afters = _conv_ints(padding, dims) or (-1,) * dims
    strided = ()
    for before, after, reach, size, step, spread in zip(befores, afters, reaches, sizes, steps, spreads):
        if not 0 <= before <= reach or not 0 <= after <= reach or size < spread or size + before + after <= reach:
            return None
        strided += (before, (size + before + after - reach - 1) // step + 1, step, spread)
    return None if bias is not None and bias.shape != weight.shape[:1] else strided


@functools.cache
def _conv_picks(width, stride, device):
    """The columns a strided row's tile picks from its read of `stride` times its width: 0, stride,
    2 * stride, ... for the tiles of an output row of `width` columns (int32, made once per shape)."""
    return torch.arange(0, -(-width // 16) * 16 * stride, stride, dtype=torch.int32, device=device)
