"""transformers' causal masks deferred to the attention kernel, which computes them in its tiles.

``create_causal_mask`` and ``create_sliding_window_causal_mask`` (transformers' masking_utils)
build, for sdpa, a bool [batch, 1, q_length, kv_length] tensor: key j kept for query i where
``kv_offset + j <= q_offset + i`` and, with a window W, ``kv_offset + j > q_offset + i - W``.
Where the engine (:mod:`torch2pypto.translator.engine.masks`) rewrote their calls, a call that
would build exactly that (sdpa, no padding mask, no mask function of the caller's, no blocks nor
packed sequences, int offsets, on the kernel path) returns a deferred mask instead: a bool tensor
of that shape and strides, storage-less, marked ``_pypto_causal_window`` (window or 0 and the
diagonal ``q_offset - kv_offset``), that the attention wrapper reads as its window (no mask is
built). Any op on it builds the mask torch would have, once, with transformers' own sdpa_mask,
and runs on that. Every other call runs transformers' function.
"""

import inspect
import sys

import torch

from torch2pypto.runtime.launch import _on_kernel_path

# create_causal_mask's and create_sliding_window_causal_mask's parameters (transformers 5): others run them
_CAUSAL_MASK_PARAMS = ("config", "inputs_embeds", "attention_mask", "past_key_values", "position_ids", "or_mask_function",
                       "and_mask_function", "block_sequence_ids", "layer_idx", "allow_is_causal_skip")


class _PyptoCausalMask(torch.Tensor):
    """A causal (windowed) bool mask not built yet: its metadata without storage; an op on it
    builds it (``make()``, once for it and its detached aliases) and runs on that."""

    @staticmethod
    def __new__(cls, make, shape, strides, device, window, diagonal):
        mask = torch.Tensor._make_wrapper_subclass(cls, shape, strides=strides, dtype=torch.bool, device=device)
        mask._pypto_made = make if isinstance(make, list) else [make]  # the maker, then (the mask,): shared by aliases
        mask._pypto_causal_window = window, diagonal
        return mask

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.detach.default:  # an alias, deferred still (autograd's wrappers detach their inputs)
            mask = args[0]
            return cls(mask._pypto_made, mask.shape, mask.stride(), mask.device, *mask._pypto_causal_window)
        args, kwargs = torch.utils._pytree.tree_map_only(cls, cls._pypto_built, (args, kwargs or {}))  # lists too (cat's)
        return func(*args, **kwargs)

    def _pypto_built(self):
        """The mask, built the first time it is asked for."""
        if callable(self._pypto_made[0]):
            self._pypto_made[0] = (self._pypto_made[0](),)
        return self._pypto_made[0][0]

    def untyped_storage(self):
        """The built mask's storage; before, an empty one of its own (it shares none)."""
        return self._pypto_made[0][0].untyped_storage() if not callable(self._pypto_made[0]) else torch.UntypedStorage(0)


def pypto_causal_mask(create, *args, **kwargs):
    """create(*args, **kwargs), transformers' create_causal_mask or create_sliding_window_causal_mask,
    deferred (a _PyptoCausalMask) where it would build the plain causal (windowed) mask for sdpa."""
    masking = sys.modules.get("transformers.masking_utils")
    sliding = masking is not None and create is getattr(masking, "create_sliding_window_causal_mask", None)
    if not (sliding or masking is not None and create is getattr(masking, "create_causal_mask", None)):
        return create(*args, **kwargs)
    signature = inspect.signature(create)
    try:
        given = signature.bind(*args, **kwargs)
    except TypeError:
        return create(*args, **kwargs)
    given.apply_defaults()
    a = given.arguments
    config, embeds, past = a["config"], a["inputs_embeds"], a["past_key_values"]
    window = getattr(config, "sliding_window", None) if sliding else None
    plain = (tuple(signature.parameters) == _CAUSAL_MASK_PARAMS and getattr(config, "is_causal", True) is True
             and all(a[n] is None for n in ("attention_mask", "or_mask_function", "and_mask_function", "block_sequence_ids"))
             and getattr(config, "_attn_implementation", None) == "sdpa" and masking.ALL_MASK_ATTENTION_FUNCTIONS.get("sdpa") is masking.sdpa_mask
             and (not sliding or type(window) is int and window > 0) and type(a["allow_is_causal_skip"]) is bool
             and isinstance(embeds, torch.Tensor) and embeds.dim() == 3 and _on_kernel_path(embeds)
             and not torch.jit.is_tracing() and not torch.compiler.is_compiling())
    if not plain:
        return create(*args, **kwargs)
    layer = a["layer_idx"]
    if layer is None and sliding:
        layer = past.is_sliding.index(True) if True in getattr(past, "is_sliding", ()) else 0
    elif layer is None:
        layer = masking.find_first_full_attention_index(past)
    early, _, packed, q_length, kv_length, q_offset, kv_offset = masking._preprocess_mask_arguments(
        config, embeds, None, past, a["position_ids"], layer)
    if early or packed is not None or type(q_offset) is not int or type(kv_offset) is not int:
        return create(*args, **kwargs)
    skip = a["allow_is_causal_skip"] and not (getattr(past, "is_compileable", False) and q_length == 1)
    if skip and masking._ignore_causal_mask_sdpa(None, q_length, kv_length, q_offset, kv_offset, window):
        return None  # sdpa's is_causal, or no mask, as transformers' function returns
    batch, device = embeds.shape[0], embeds.device
    function = masking.sliding_window_causal_mask_function(window) if sliding else masking.causal_mask_function

    def make():
        return masking.sdpa_mask(batch_size=batch, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                                 kv_offset=kv_offset, mask_function=function, attention_mask=None, allow_is_causal_skip=skip,
                                 local_size=window, dtype=embeds.dtype, config=config, use_vmap=False, device=device)

    # sdpa_mask's: [1, 1, q, kv] rows expanded over the batch
    strides = (0 if batch != 1 else q_length * kv_length, q_length * kv_length, kv_length, 1)
    return _PyptoCausalMask(make, (batch, 1, q_length, kv_length), strides, device, window or 0, q_offset - kv_offset)


def pypto_causal_mask_maker(create):
    """create, transformers' create_causal_mask or create_sliding_window_causal_mask, as a function
    that defers its mask (pypto_causal_mask): where the name is read rather than called."""
    def deferring(*args, **kwargs):
        return pypto_causal_mask(create, *args, **kwargs)
    return deferring
