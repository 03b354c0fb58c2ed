"""Whether a cube kernel takes a matmul's operands (a grouped one: grouped_mm's too), and how it reads them."""

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


def _grouped_takes(a, b, offs, bias=None, out_dtype=None):
    """Whether a grouped cube kernel computes torch's grouped_mm(a, b, offs=offs): `a` [s, k]
    and a stack `b` [groups, k, n] of one PyPTO dtype on the kernel path, `offs` the groups'
    cumulative row counts (1-D int32, contiguous, one per matrix, on a's device), k and n of at most 65535;
    no bias and no other out_dtype (torch's other forms: 3-D `a`, 2-D `b`, no offs); the strides
    of both multiples of 16 bytes, as torch requires (it raises on others)."""
    if not all(isinstance(t, torch.Tensor) for t in (a, b, offs)) or bias is not None:
        return False
    if out_dtype not in (None, a.dtype) or a.dtype != b.dtype or not _on_kernel_path(a, b):
        return False
    if a.dim() != 2 or b.dim() != 3 or offs.dtype != torch.int32 or offs.shape != b.shape[:1] or offs.device != a.device:
        return False
    if not offs.is_contiguous():  # the kernel reads it as it is
        return False
    aligned = all(s == 1 or s * t.element_size() % 16 == 0 for t in (a, b) for s in t.stride())
    return aligned and a.shape[1] == b.shape[1] and max(b.shape[1:]) <= 65535


def _grouped_operands(a, b):
    """`a` and the stack `b` [groups, k, n] as a grouped kernel reads them: (a, b as rows, whether
    the kernel reads b transposed). A stack of transposed row-major matrices (``w.transpose(-2,
    -1)`` of [groups, n, k] weights) is read in place as [groups * n, k], transposed; others as
    [groups * k, n], copied unless contiguous."""
    if not b.is_contiguous() and b.mT.is_contiguous():
        return a.contiguous(), b.mT.reshape(-1, b.shape[1]), True
    return a.contiguous(), b.contiguous().reshape(-1, b.shape[2]), False
