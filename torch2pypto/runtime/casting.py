"""The cast family's wrappers: pypto_cast and the three calls that reach it (Tensor.to's forms, type_as)."""

import pypto
import torch

from torch2pypto.runtime.casts import _CASTS
from torch2pypto.runtime.generated import cast_kernel
from torch2pypto.runtime.grad import _with_torch_grad
from torch2pypto.runtime.launch import _PYPTO_ALL_DTYPES, _launch, _on_kernel_path
from torch2pypto.runtime.layout import _broadcast_rows, _result_rows
from torch2pypto.runtime.tiles import _spread_rows


def _cast_route(dtype, out_dtype):
    """How a cast kernel's tile goes from `dtype` to `out_dtype` (PyPTO dtypes; a bool input is read
    as its UINT8 bytes): whether through FP16, then through FP32, and the mode of the last cast.

    A2/A3 cast (U)INT8 to FP16 only, BF16 and FP16 to each other and to INT64 through FP32; a bool
    is x != 0, compared in FP32 for an integer (a nonzero integer stays nonzero in FP32). A float
    cast to an integer truncates toward zero, as torch's.
    """
    floats = (pypto.DT_FP16, pypto.DT_BF16)
    via_fp16 = dtype == pypto.DT_UINT8 and out_dtype != pypto.DT_FP16
    via_fp32 = ({dtype, out_dtype} == set(floats) or out_dtype == pypto.DT_INT64 and dtype in (*floats, pypto.DT_UINT8)
                or dtype == pypto.DT_UINT8 and out_dtype == pypto.DT_BF16
                or out_dtype == pypto.DT_BOOL and dtype in (pypto.DT_INT32, pypto.DT_INT64))
    integers = (pypto.DT_INT32, pypto.DT_INT64)
    truncates = out_dtype in integers and dtype not in integers
    return via_fp16, via_fp32, pypto.CastMode.CAST_TRUNC if truncates else pypto.CastMode.CAST_NONE


def pypto_cast(input, dtype, device=None, non_blocking=False):
    """input.to(device, dtype) with the cast on a PyPTO kernel (pypto.cast; a move stays torch).

    As in torch, a cast to the input's own dtype returns the input itself. The kernel makes the
    casts of _CASTS; a bool input is read as its bytes (PyPTO casts no BOOL). An integer or bool
    result carries no gradient, as torch's.
    """
    if device is not None:
        input = input.to(device, non_blocking=non_blocking)
    if input.dtype == dtype:
        return input

    def torch_path(input):
        return input.to(dtype)

    if dtype not in _CASTS.get(input.dtype, ()) or not _on_kernel_path(input, dtypes=_PYPTO_ALL_DTYPES):
        return torch_path(input)

    def kernel_path(input):
        (x,), shape, order = _broadcast_rows(input)  # read and written in the input's layout
        result, out = _result_rows(shape, order, dtype, x.device)
        x = x.view(torch.uint8) if x.dtype == torch.bool else x
        _launch(cast_kernel(_PYPTO_ALL_DTYPES[x.dtype], _PYPTO_ALL_DTYPES[dtype], x.shape[1], _spread_rows(*x.shape)), x, out)
        return result

    return _with_torch_grad(kernel_path, torch_path, input) if dtype.is_floating_point else kernel_path(input)


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
