"""The gated pair's host helpers: the activation a module computes, whether a gated kernel takes a
call's operands, and a chunked pair's halves."""

import functools

import torch

from torch2pypto.runtime.launch import _on_kernel_path


def _activation_kind(act):
    """The activation a gated or linear-epilogue kernel computes for module `act` (torch's SiLU and GELU, transformers'
    SiLUActivation, GELUActivation and GELUTanh), or None: another module, an in-place one, one whose
    call would run hooks or a forward of its own."""
    if not isinstance(act, torch.nn.Module) or act._forward_hooks or act._forward_pre_hooks or "forward" in vars(act):
        return None
    kind = type(act)
    if kind.forward.__qualname__ != kind.__qualname__ + ".forward":
        return None
    name, held = kind.__module__ + "." + kind.__qualname__, getattr(act, "act", None)
    if name == "torch.nn.modules.activation.SiLU":
        return None if act.inplace else "silu"
    if name == "torch.nn.modules.activation.GELU":
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(act.approximate)
    if name == "transformers.activations.SiLUActivation":
        return "silu"
    if name == "transformers.activations.GELUActivation" and held is torch.nn.functional.gelu:
        return "gelu"
    if name == "transformers.activations.GELUTanh" and isinstance(held, functools.partial):
        tanh = held.func is torch.nn.functional.gelu and not held.args and held.keywords == {"approximate": "tanh"}
        return "gelu_tanh" if tanh else None
    return None


def _gated_takes(x, wg, bg, wu, bu):
    """Whether a gated kernel computes `act(linear(x, wg, bg)) * linear(x, wu, bu)`: tensors of one
    float dtype on the kernel path, weights [n, k] of x's k (at most 65535), biases both None or
    both [n]."""
    biases = [b for b in (bg, bu) if b is not None]
    tensors = [x, wg, wu, *biases]
    if len(biases) == 1 or not all(isinstance(t, torch.Tensor) and t.dtype == x.dtype for t in tensors):
        return False
    if not _on_kernel_path(*tensors) or x.dim() < 1 or wg.dim() != 2 or wu.shape != wg.shape:
        return False
    n, k = wg.shape
    return x.shape[-1] == k <= 65535 and all(b.shape == (n,) for b in biases)


def _gated_weights(dtype, k, wg, wu):
    """Whether a gated kernel whose prologue computes its rows (`dtype`, `k` wide) takes the
    weights `wg` and `wu`: tensors [n, k] of that dtype on the kernel path (k at most 65535)."""
    weights = [wg, wu]
    if not all(isinstance(w, torch.Tensor) and w.dtype == dtype and w.dim() == 2 for w in weights) or wu.shape != wg.shape:
        return False
    return wg.shape[1] == k <= 65535 and _on_kernel_path(*weights)


def _halves(t):
    """The gate and up halves of a chunked gated pair's weight or bias `t` (its first dim split in
    two, as `chunk(2, dim=-1)` splits the projection): views, no copy. (None, None) for no bias;
    (t, None) for what does not split in two equal halves, which no gated kernel takes."""
    if t is None:
        return None, None
    if not isinstance(t, torch.Tensor) or t.dim() < 1 or t.shape[0] % 2 or t.shape[0] == 0:
        return t, None
    half = t.shape[0] // 2
    return t[:half], t[half:]
