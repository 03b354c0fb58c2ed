"""Launching kernels: the launcher hook, the dtypes kernels take, whether a kernel runs."""

import pypto
import torch

# Kernels launch on NPU tensors. Elsewhere each wrapper computes the original torch expression,
# unless torch2pypto.interpreted() has set PYPTO_LAUNCHER to run them on PyPTO's CPU interpreter.
PYPTO_LAUNCHER = None
_PYPTO_DTYPES = {torch.float32: pypto.DT_FP32, torch.float16: pypto.DT_FP16, torch.bfloat16: pypto.DT_BF16}
_PYPTO_ALL_DTYPES = {  # also bool and integers, for the entries that declare them
    **_PYPTO_DTYPES, torch.bool: pypto.DT_BOOL, torch.uint8: pypto.DT_UINT8, torch.int8: pypto.DT_INT8,
    torch.int16: pypto.DT_INT16, torch.int32: pypto.DT_INT32, torch.int64: pypto.DT_INT64,
}
_UB_BYTES = 192 * 1024  # unified buffer of one AI vector core


def _on_kernel_path(*tensors, dtypes=_PYPTO_DTYPES):
    """Whether a kernel runs: non-empty tensors of `dtypes` (default: the float dtypes), on an NPU
    or under a launcher."""
    if not all(t.dtype in dtypes and t.numel() for t in tensors):
        return False
    return PYPTO_LAUNCHER is not None or all(t.device.type == "npu" for t in tensors)


def _kernel_device(device):
    """Whether a kernel runs on `device` (a creation's; None: torch's default): an NPU, or the
    CPU under a launcher."""
    device = torch.device(device) if device is not None else torch.get_default_device()
    return device.type == "npu" or PYPTO_LAUNCHER is not None and device.type == "cpu"


def _inlined(*modules):
    """Whether calling each module of the (module, cls) pairs runs cls.forward alone, as the fused
    kernel that inlines it computes: an instance of cls itself (no subclass), no forward of its
    own, no hooks of its own nor global ones."""
    hooks = torch.nn.modules.module
    if hooks._global_forward_hooks or hooks._global_forward_pre_hooks or hooks._global_backward_hooks or hooks._global_backward_pre_hooks:
        return False
    return all(
        type(m) is cls and cls.__call__ is torch.nn.Module.__call__ and "forward" not in vars(m)
        and not (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks)
        for m, cls in modules
    )


def _launch(kernel, *tensors):
    """Launch `kernel` once on `tensors` (inputs, then outputs)."""
    if PYPTO_LAUNCHER is None:
        kernel(*tensors)
    else:
        PYPTO_LAUNCHER(kernel, *tensors)


def _annotated(namespace):
    """Evaluate a kernel's annotations in `namespace`: PyPTO reads them as objects, and a module
    with `from __future__ import annotations` leaves them as strings."""
    def evaluate(kernel):
        kernel.__annotations__ = {
            name: eval(note, kernel.__globals__, namespace) if isinstance(note, str) else note
            for name, note in kernel.__annotations__.items()
        }
        return kernel
    return evaluate
