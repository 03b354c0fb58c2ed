"""Whether a linear-epilogue kernel takes a linear's operands and the op's other one."""

import torch

from torch2pypto.runtime.launch import _on_kernel_path


def _epilogue_takes(x, w, b, other=0):
    """Whether a linear-epilogue kernel computes `linear(x, w, b) <op> other` (or an activation of
    `linear(x, w, b)`: no other): tensors x, w (and b) of one float dtype on the kernel path, w
    [n, k] of x's k (at most 65535), b None or [n]; other a finite Python int or float, or a
    contiguous tensor of the result's shape and dtype."""
    tensors = [x, w, *([] if b is None else [b])]
    if not all(isinstance(t, torch.Tensor) and t.dtype == x.dtype for t in tensors) or not _on_kernel_path(*tensors):
        return False
    if x.dim() < 1 or w.dim() != 2 or x.shape[-1] != w.shape[1] or w.shape[1] > 65535:
        return False
    if b is not None and b.shape != w.shape[:1]:
        return False
    if isinstance(other, torch.Tensor):
        shape = (*x.shape[:-1], w.shape[0])
        return other.dtype == x.dtype and other.shape == shape and other.is_contiguous() and _on_kernel_path(other)
    return type(other) in (int, float) and abs(other) <= torch.finfo(x.dtype).max
