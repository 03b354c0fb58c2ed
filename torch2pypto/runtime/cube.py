"""Whether a cube kernel takes a matmul's operands."""

import torch

from torch2pypto.runtime.launch import _on_kernel_path


def _cube_takes(a, b, bias=None, rank=None, transposed=False):
    """Whether a cube kernel computes torch's `a @ b` (`b` transposed: `a @ b.mT`) `+ bias`:
    tensors of one PyPTO dtype on the kernel path whose k matches and whose batch dims broadcast,
    of `rank` with equal batch dims if given (mm, bmm), a 1-D bias of n; the operands' rows (k,
    and n unless `b` is transposed: linear's vocab-wide weight) of at most 65535."""
    tensors = [a, b] + ([] if bias is None else [bias])
    if not all(isinstance(t, torch.Tensor) and t.dtype == a.dtype for t in tensors) or not _on_kernel_path(*tensors):
        return False
    if transposed and b.dim() != 2:  # linear's weight
        return False
    b = b.mT if transposed else b
    if min(a.dim(), b.dim()) < 1 or rank and not (a.dim() == b.dim() == rank and a.shape[:-2] == b.shape[:-2]):
        return False
    k, n = (b.shape[-2], b.shape[-1]) if b.dim() > 1 else (b.shape[0], 1)
    if a.shape[-1] != k or max(k, 1 if transposed else n) > 65535 or bias is not None and bias.shape != (n,):
        return False
    try:
        torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        return False
    return True
