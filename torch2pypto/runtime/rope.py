"""Whether a projections-and-RoPE kernel takes the rotary embedding's operands."""

import torch

from torch2pypto.runtime.launch import _on_kernel_path

# The cube cores of A2/A3, and at most how many of a row tile's cube tasks (one per projection's
# n tile) PyPTO merges into one that reads the a tile once. In the cost model at llama-7B's q/k/v
# (bf16, 48 tasks a row tile), µs merging 1 / 2 / 4 / 8 / PyPTO's default: 64 tokens 82.7 / 81.8 /
# - / - / 105.1; 2048 tokens 1207.1 / 1098.4 / 1078.8 / 1095.8 / 1183.2.
_CUBE_CORES, _ROPE_REUSE = 24, 4


def _rope_takes(x, cos, sin, view, *widths):
    """Whether the projections of x ([B, S, k]) that are `widths` wide, each viewed as
    `.view(view).transpose(1, 2)`, are [B, heads, S, D] views of their rows, D the last dim of
    cos and sin: contiguous [B, S, D] tensors (or [1, S, D]: one sequence's, which the batch
    shares) of a float dtype on the kernel path, a token's angles beside its projection's row."""
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
    return all(n % d == 0 and v.shape == (b, n // d, s, d) for n, v in zip(widths, views))


def _norms_take(cols, vectors, numbers):
    """Whether per-head norms' tensors are [cols] ones (a head's gamma, every head's) of a float
    dtype on the kernel path, and their numbers ints or floats."""
    return all(isinstance(v, torch.Tensor) and v.shape == (cols,) and _on_kernel_path(v) for v in vectors) and all(
        type(n) in (int, float) for n in numbers)
