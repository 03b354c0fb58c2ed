"""Attention's host side: its tiles, whether the kernel takes a call, its bias and its rows.

A head dim up to 256 (gemma's, the largest tried) takes the kernel; wider heads run torch. Masked
scores are -1e30, "minus infinity" but finite, so that a wholly masked tile gives no NaN.
"""

import functools

import torch

from torch2pypto.runtime.launch import _on_kernel_path
from torch2pypto.runtime.layout import _row_window


# Query and kv tiles: a power of two from 16 up to 512 query rows and 1024 keys. In the cost
# model (scripts/attention.py, bf16, D128) fewer, larger tiles win. B1 H8 S512: 128 x 128 took
# 635.8 us, 128 x 512 99.5, 256 x 512 67.4, 512 x 512 59.0. B1 H32 S2048 (tasks merged, the kv
# loop unrolled): 512 x 512 888.4, 512 x 1024 794.4, 256 x 1024 915.3, 512 x 2048 928.5; causal
# (q tile = kv tile) 512 675.2, 256 1020.0, 1024 777.3. Keys stop at 1024 so that a score tile's
# workspace (512 x 1024 FP32, 2 MiB) stays bounded whatever S_kv: memory linear in S.
_SDPA_ROWS, _SDPA_KV = 512, 1024
_SDPA_MERGE = 16  # kv tiles over all heads and query tiles from which the kernel merges tasks (see its factory)


def _sdpa_tile(n, most):
    """The rows of a query or kv tile for a sequence of n: a power of two from 16 to `most`."""
    return min(most, max(16, 1 << (n - 1).bit_length()))


def _sdpa_mask_rows(q, k, mask):
    """A bool mask as the kernel reads it in place ("keep"): its [mask batches * mask heads * sq, skv]
    rows, a dim it broadcasts (size 1 or stride 0: transformers expands one mask over the batch)
    read once; None where they are no such view (a mask broadcast along sq or skv, some batch
    dims broadcast and others not, other strides)."""
    mask = mask.reshape((1,) * (q.dim() - mask.dim()) + tuple(mask.shape))
    if tuple(mask.shape[-2:]) != (q.shape[-2], k.shape[-2]):
        return None
    spread = [n != 1 and step != 0 for n, step in zip(mask.shape[:-2], mask.stride()[:-2])]
    mask = mask[tuple(slice(None) if own else slice(0, 1) for own in spread)]
    if len(set(spread[:-1])) > 1 or not mask.is_contiguous():  # the kernel reads all batch dims or none
        return None
    return mask.view(-1, mask.shape[-1]), "keep", any(spread[:-1]), spread[-1]


def _sdpa_window(q, k, mask, is_causal):
    """The window of a causal mask pypto_causal_mask deferred (0: none) that the kernel computes
    in its tiles: no is_causal, a mask of the scores' dims (batch and heads broadcast), its
    diagonal (query offset minus key offset) the keys before the queries (the queries are the
    last keys: every query sees its own); else None."""
    window, diagonal = getattr(mask, "_pypto_causal_window", (None, None))
    if window is None or is_causal or mask.dim() != q.dim() or not 0 <= diagonal == k.shape[-2] - q.shape[-2]:
        return None
    if tuple(mask.shape[-2:]) != tuple(q.shape[-2:-1]) + (k.shape[-2],) or any(m not in (1, n) for m, n in zip(mask.shape, q.shape[:-2])):
        return None
    return window


def _sdpa_band_window(tile, kv_tile, window):
    """A window band's window (at most tile + kv_tile - 1 keys: any more see the same tiles) and
    the keys of the window beyond it (None: no window)."""
    kept = min(window, tile + kv_tile - 1) if window else tile + kv_tile - 1
    return kept, window - kept if window else None


def _sdpa_takes(q, k, v, mask, is_causal, scale, enable_gqa):
    """Whether the attention kernel computes torch's sdpa of these: q [..., hq, sq, d], k and v
    [..., hkv, skv, d] of one PyPTO dtype on the kernel path, hq == hkv (or a multiple with
    enable_gqa; hkv 1 broadcasts either way), d up to 256; a causal mask deferred that the kernel
    computes (_sdpa_window) or a mask of the query's dtype or bool, broadcastable to the
    scores, no row of a bool mask wholly False (torch gives zeros there) unless the kernel reads the
    mask in place (_sdpa_mask_rows, no is_causal), and zeroes such rows itself; a Python number or
    None as scale."""
    if not all(isinstance(t, torch.Tensor) and t.dtype == q.dtype for t in (k, v)) or not _on_kernel_path(q, k, v):
        return False
    if q.dim() < 3 or k.shape != v.shape or k.dim() != q.dim() or q.shape[:-3] != k.shape[:-3] or q.shape[-1] != k.shape[-1]:
        return False
    hq, hkv = q.shape[-3], k.shape[-3]
    if hq != hkv and not (hkv == 1 or enable_gqa is True and hq % hkv == 0) or q.shape[-1] > 256:
        return False
    if type(is_causal) is not bool or scale is not None and type(scale) not in (int, float):
        return False
    if mask is None or _sdpa_window(q, k, mask, is_causal) is not None:
        return True
    if not isinstance(mask, torch.Tensor) or mask.dtype not in (q.dtype, torch.bool) or mask.dim() > q.dim():
        return False
    try:
        scores = (*q.shape[:-1], k.shape[-2])
        if torch.broadcast_shapes(mask.shape, scores) != scores:
            return False
    except RuntimeError:
        return False
    if mask.dtype != torch.bool or not is_causal and _sdpa_mask_rows(q, k, mask):
        return True
    return _sdpa_kept(mask, "_pypto_sdpa_rows", (), lambda: bool(mask.any(-1).all()))


def _sdpa_kept(mask, name, key, make):
    """make(), kept on `mask` as attribute `name` with `key` until the mask changes (its version
    counter): a model's layers share one mask, which is checked and converted once a forward."""
    kept = getattr(mask, name, None)
    if kept is None or kept[0] != (mask._version, key):
        kept = (mask._version, key), make()
        setattr(mask, name, kept)
    return kept[1]


@functools.cache
def _sdpa_window_band(tile, kv_tile, window, device):
    """The [kept + kv_tile + 2 * tile - 3, kv_tile] band of a window (kept: _sdpa_band_window's) whose
    [tile, kv_tile] view from row d + tile - 1 is a tile's bias where its first query sees d keys
    past its first key: 0 where 0 <= d + row - column < kept, else -1e30 (made once per tiles,
    window and device)."""
    kept = _sdpa_band_window(tile, kv_tile, window)[0]
    rows = kept + kv_tile + 2 * tile - 3
    past = torch.arange(rows, device=device)[:, None] - (tile - 1) - torch.arange(kv_tile, device=device)
    return torch.zeros(past.shape, device=device).masked_fill((past < 0) | (past >= kept), -1e30)


def _sdpa_bias(q, k, mask, is_causal, tile, window=None, kv_tile=None):
    """The kernel's bias, its kind and whether a mask varies by batch and by head: a causal
    [tile, 2 * tile] band (0 where a key's column minus tile is at most the row, else -1e30), the
    band of a deferred causal mask's window (_sdpa_window_band), a
    bool mask's rows read in place without is_causal (_sdpa_mask_rows), or the mask as FP32
    additive [mask batches * mask heads * sq, skv] rows (leading dims all 1 or all the query's; a bool mask's False is -1e30; with is_causal, -1e30 above the diagonal
    too, as torch adds them), skv padded to 32 bytes, kept on the mask; else a dummy."""
    if mask is None:
        return _sdpa_band(tile if is_causal else 0, q.device), "causal" if is_causal else None, False, False
    if window is not None:
        return _sdpa_window_band(tile, kv_tile, window, q.device), "window", False, False
    if mask.dtype == torch.bool and not is_causal and (kept := _sdpa_mask_rows(q, k, mask)):
        return kept
    key = (tuple(q.shape[:-1]), k.shape[-2], is_causal)
    return _sdpa_kept(mask, "_pypto_sdpa_bias", key, lambda: _sdpa_mask_bias(q, k, mask, is_causal))


@functools.cache
def _sdpa_band(tile, device):
    """The causal band of a tile (made once per tile and device), or for tile 0 a dummy bias."""
    if not tile:
        return torch.zeros(1, 8, device=device)
    band = torch.ones(tile, 2 * tile, dtype=torch.bool, device=device).triu(tile + 1)
    return torch.zeros(tile, 2 * tile, device=device).masked_fill(band, -1e30)


def _sdpa_mask_bias(q, k, mask, is_causal):
    """_sdpa_bias of a mask, made anew."""
    mask = mask.reshape((1,) * (q.dim() - mask.dim()) + tuple(mask.shape))
    by_batch, by_head = any(n != 1 for n in mask.shape[:-3]), mask.shape[-3] != 1
    shape = (*(q.shape[:-3] if by_batch else mask.shape[:-3]), q.shape[-3] if by_head else 1, q.shape[-2], k.shape[-2])
    mask = mask.expand(shape).reshape(-1, shape[-1])
    if mask.dtype == torch.bool:
        bias = torch.zeros(mask.shape, device=q.device).masked_fill(~mask, -1e30)
    else:
        bias = mask.float().clamp(min=-1e30)
    if is_causal:
        above = torch.ones(shape[-2:], dtype=torch.bool, device=q.device).triu(1)
        bias = bias.reshape(-1, *shape[-2:]).masked_fill(above, -1e30).reshape(-1, shape[-1])
    if shape[-1] % 8:
        bias = torch.nn.functional.pad(bias, (0, -shape[-1] % 8))
    return bias.contiguous(), "mask", by_batch, by_head


def _sdpa_rows(t):
    """t [..., heads, s, d] as the kernel's rows and their window. Laid out [..., s, heads, d]
    (a projection's output viewed per head): rows [... * s, width] read in place, the heads side
    by side from the window's first column, window (width, first column); in wider rows
    (GPT-2's q, k and v, column slices of c_attn's output), those rows (_row_window). Else
    [... * heads * s, d], a copy unless contiguous, d zero-padded to 16, window None."""
    d = t.shape[-1]
    laid = t.transpose(-3, -2)
    if d % 16 == 0 and laid.stride(-1) == 1 and laid.stride(-2) == d:
        try:
            rows, start = _row_window(laid, laid.view(-1, laid.shape[-2] * d).shape[0])
            return rows, (rows.shape[1], start)
        except RuntimeError:  # leading dims that fold into no rows
            pass
    rows = t.reshape(-1, d)
    return (torch.nn.functional.pad(rows, (0, -d % 16)) if d % 16 else rows).contiguous(), None


def pypto_repeat_kv(repeat, hidden_states, n_rep):
    """repeat(hidden_states, n_rep), transformers' repeat_kv (each kv head n_rep times, a copy),
    deferred on the kernel path: a view of the kv heads, marked, that the attention wrapper reads
    by index (_sdpa_unrepeated) and pypto_repeated makes the repeat of where anything else reads it."""
    if type(n_rep) is not int or n_rep <= 1 or not isinstance(hidden_states, torch.Tensor):
        return repeat(hidden_states, n_rep)
    if hidden_states.dim() != 4 or not _on_kernel_path(hidden_states):
        return repeat(hidden_states, n_rep)
    deferred = hidden_states.view(hidden_states.shape)  # its own tensor, so that the mark is on it alone
    deferred._pypto_repeat = repeat, hidden_states, n_rep
    return deferred


def pypto_repeated(t):
    """t, or the repeat pypto_repeat_kv deferred on it, made once (then every read shares it, as
    they shared repeat_kv's result)."""
    deferred = getattr(t, "_pypto_repeat", None)
    if deferred is None:
        return t
    if callable(deferred[0]):
        t._pypto_repeat = deferred = (deferred[0](*deferred[1:]),)
    return deferred[0]


def _sdpa_unrepeated(q, k, v, enable_gqa):
    """k, v and whether they are kv heads of a repeat pypto_repeat_kv deferred: both, by the group
    q's heads make (and no enable_gqa), so that sdpa of them with enable_gqa is sdpa of the repeats;
    else each as the model made it (a deferred repeat made now)."""
    marks = [getattr(t, "_pypto_repeat", None) for t in (k, v)]
    if all(m and callable(m[0]) for m in marks) and enable_gqa is False and marks[0][2] == marks[1][2]:
        if q.dim() == 4 and k.shape[1] == v.shape[1] and q.shape[1] == k.shape[1] * marks[0][2]:
            return k, v, True
    return pypto_repeated(k), pypto_repeated(v), False
