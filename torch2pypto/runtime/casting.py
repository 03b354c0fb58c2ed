"""The cast family's wrappers: pypto_cast and the three calls that reach it (Tensor.to's forms, type_as)."""

import torch

from torch2pypto.runtime.generated import cast_kernel
from torch2pypto.runtime.grad import _with_torch_grad
from torch2pypto.runtime.launch import _PYPTO_ALL_DTYPES, _PYPTO_DTYPES, _launch, _on_kernel_path
from torch2pypto.runtime.layout import _broadcast_rows, _result_rows
from torch2pypto.runtime.tiles import _spread_rows


# the integer inputs a cast kernel takes, and the float dtypes PyPTO casts each to directly (A2/A3:
# int64 ids and positions to float32; an integer to bfloat16 would go through FP32)
_INTEGER_CASTS = {torch.int64: (torch.float32,), torch.int32: (torch.float32, torch.float16)}


def pypto_cast(input, dtype, device=None, non_blocking=False):
    """input.to(device, dtype) with the cast on a PyPTO kernel (pypto.cast; a move stays torch).

    As in torch, a cast to the input's own dtype returns the input itself. The input is of a
    float dtype, or an integer one PyPTO casts to `dtype` directly (_INTEGER_CASTS).
    """
    if device is not None:
        input = input.to(device, non_blocking=non_blocking)
    if input.dtype == dtype:
        return input

    def torch_path(input):
        return input.to(dtype)

    casts = _PYPTO_DTYPES if input.dtype in _PYPTO_DTYPES else _INTEGER_CASTS.get(input.dtype, ())
    if dtype not in casts or not _on_kernel_path(input, dtypes=_PYPTO_ALL_DTYPES):
        return torch_path(input)

    def kernel_path(input):
        (x,), shape, order = _broadcast_rows(input)  # read and written in the input's layout
        result, out = _result_rows(shape, order, dtype, x.device)
        _launch(cast_kernel(_PYPTO_ALL_DTYPES[x.dtype], _PYPTO_DTYPES[dtype], x.shape[1], _spread_rows(*x.shape)), x, out)
        return result

    return _with_torch_grad(kernel_path, torch_path, input)


def pypto_cast_like(input, other, non_blocking=False):
    """input.to(other): other's dtype by pypto_cast, other's device by torch."""
    return pypto_cast(input, other.dtype, other.device, non_blocking)


def pypto_type_as(input, other):
    """torch.Tensor.type_as on a PyPTO kernel (difference: the dtype is other.dtype, read on the host).

    To another device, torch moves the input as type_as does.
    """
    if input.device != other.device:
        return input.type_as(other)
    return pypto_cast(input, other.dtype)


def pypto_to(input, arg, non_blocking=False):
    """input.to(arg), arg known at run time only: a dtype casts by pypto_cast, a tensor gives its
    dtype and device by pypto_cast_like, anything else (a device) moves in torch."""
    if isinstance(arg, torch.dtype):
        return pypto_cast(input, arg)
    if isinstance(arg, torch.Tensor):
        return pypto_cast_like(input, arg, non_blocking)
    return input.to(arg, non_blocking=non_blocking)
