"""The attention family beyond the table's examples: F.scaled_dot_product_attention as one
flash-attention kernel against torch's sdpa, with counted launches: masks, causal, GQA/MQA,
S_q != S_kv and decode, odd lengths, head_dim 64/80/128, fp32/fp16/bf16; what runs torch."""

import pytest
import torch

import torch2pypto
from helpers import assert_sdpa_gradients, load, qkv, sample, statuses
from torch2pypto.mapping import load_table
from torch2pypto.mapping.tolerance import tolerance
from torch2pypto.runtime import attention
from torch2pypto.translator.engine.translate import translate_source
from torch2pypto.translator.verification.interpreter import counting

SDPA = """\
import torch
import torch.nn.functional as F


def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask=None, p=0.0, causal=False, scale=None, gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal, scale=scale, enable_gqa=gqa)
"""
KERNEL = {"scaled_dot_product_attention_kernel.kernel": 1}
ENTRY = load_table().by_api["torch.nn.functional.scaled_dot_product_attention"]


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return load(tmp_path_factory.mktemp("attention") / "sdpa_pypto.py", translate_source(SDPA).code)


def check(module, q, k, v, launches=KERNEL, **kwargs):
    """The translated call launches `launches` and matches torch's sdpa."""
    names = {"mask": "attn_mask", "p": "dropout_p", "causal": "is_causal", "gqa": "enable_gqa"}
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, **{names.get(n, n): a for n, a in kwargs.items()})
    ran = counting()
    with torch2pypto.interpreted(module):
        got = module.f(q, k, v, **kwargs)
    assert ran() == launches
    atol, rtol = tolerance(ENTRY, q.dtype, q.shape)
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
    if launches == KERNEL and q.shape[-1] % 16 == 0:  # written [..., s, h, d] (a padded d: as the query's rows)
        assert got.transpose(-3, -2).is_contiguous()


def test_sdpa_converts_and_a_literal_dropout_stays_torch():
    assert statuses(SDPA) == [("torch.nn.functional.scaled_dot_product_attention", "converted")]
    records = translate_source(SDPA.replace("dropout_p=p", "dropout_p=0.1")).records
    assert records[0].status != "converted" and "dropout" in records[0].reason


# (b, h, h_kv, s_q, s_kv, d, dtype, keyword arguments): a handful by default, the sweep under -m matrix
CASES = [
    pytest.param((1, 2, 2, 33, 33, 80, torch.float32, {}), id="d80-odd"),
    pytest.param((1, 2, 2, 9, 9, 72, torch.float32, {"causal": True}), id="d72-padded-causal"),
    pytest.param((1, 2, 2, 130, 130, 64, torch.float32, {"causal": True}), id="causal-two-tiles"),
    pytest.param((1, 2, 1, 7, 7, 64, torch.float32, {}), id="one-kv-head-broadcast"),
    pytest.param((2, 4, 1, 7, 13, 64, torch.bfloat16, {"gqa": True, "mask": "bool"}), id="mqa-bool-mask-bf16"),
    pytest.param((1, 4, 2, 1, 33, 128, torch.float16, {"gqa": True, "mask": "float", "scale": 0.3}), id="gqa-decode-float-mask-fp16"),
    pytest.param((1, 2, 2, 13, 13, 64, torch.float32, {"mask": "float", "causal": True}), id="causal-and-mask"),
    pytest.param((2, 8, 4, 20, 20, 64, torch.bfloat16, {"gqa": True, "causal": True}), id="gqa2-causal-merged-tasks-bf16"),
]
MATRIX = [
    pytest.param((b, h, h_kv, s_q, s_kv, d, dtype, kwargs), id=f"{b}x{h}/{h_kv}x{s_q}x{s_kv}x{d}-{str(dtype)[6:]}-{'-'.join(kwargs)}")
    for b, h, h_kv, s_q, s_kv, kwargs in [
        (1, 2, 2, 7, 7, {}), (2, 2, 2, 13, 13, {"causal": True}), (1, 2, 2, 200, 200, {}),
        (1, 2, 2, 200, 200, {"causal": True}), (1, 8, 2, 33, 33, {"gqa": True, "causal": True}),
        (2, 2, 2, 13, 7, {"causal": True}), (1, 2, 2, 1, 1100, {}), (2, 4, 1, 1, 13, {"gqa": True}),
        (2, 2, 2, 33, 150, {"mask": "float"}), (2, 4, 2, 7, 33, {"gqa": True, "mask": "bool"}),
    ]
    for d in (64, 80, 128) for dtype in (torch.float32, torch.bfloat16)
] + [pytest.param((1, 2, 1, 33, 600, 256, torch.bfloat16, {"gqa": True}), id="d256-gqa-bf16"),
     pytest.param((1, 2, 2, 600, 600, 64, torch.float32, {"causal": True}), id="causal-two-512-tiles")]


def _mask(kind, b, h, s_q, s_kv, dtype):
    """A bool mask [b, 1, s_q, s_kv] keeping each row's first key, or a float mask [s_q, s_kv]."""
    if kind == "bool":
        keep = torch.rand(b, 1, s_q, s_kv, generator=torch.Generator().manual_seed(3)) < 0.6
        return keep.index_fill(-1, torch.tensor([0]), True)
    return sample(s_q, s_kv, dtype=dtype, seed=4) * 3


def _run(module, case):
    b, h, h_kv, s_q, s_kv, d, dtype, kwargs = case
    kwargs = dict(kwargs)
    if "mask" in kwargs:
        kwargs["mask"] = _mask(kwargs["mask"], b, h, s_q, s_kv, dtype)
    check(module, *qkv(b, h, h_kv, s_q, s_kv, d, dtype), **kwargs)


@pytest.mark.interpreter
@pytest.mark.parametrize("case", CASES)
def test_attention_kernel_matches_torch(module, case):
    _run(module, case)


@pytest.mark.interpreter
@pytest.mark.matrix
@pytest.mark.parametrize("case", MATRIX)
def test_attention_kernel_matrix(module, case):
    _run(module, case)


# Models' layout: q, k, v viewed per head from a projection's [b, s, h * d] output, so laid out
# [b, s, h, d] ("q", "k", "v": which ones; the others contiguous [b, h, s, d]), as transformers'
# sdpa_attention_forward passes them. (b, h, h_kv, s_q, s_kv, d, dtype, transposed, keyword arguments)
LAYOUTS = [
    pytest.param((2, 4, 2, 7, 7, 64, torch.float32, "qkv", {"gqa": True, "causal": True}), id="qkv-gqa-causal"),
    pytest.param((2, 4, 4, 7, 7, 128, torch.bfloat16, "v", {"mask": "window"}), id="v-sliding-window-bf16"),
    pytest.param((1, 4, 4, 33, 33, 80, torch.float16, "qkv", {"mask": "float"}), id="qkv-d80-float-mask-fp16"),
    pytest.param((2, 8, 2, 1, 13, 64, torch.bfloat16, "kv", {"gqa": True}), id="kv-gqa4-decode-bf16"),
    pytest.param((1, 2, 2, 5, 19, 128, torch.float32, "q", {"mask": "bool"}), id="q-sq-ne-skv-bool-mask"),
    pytest.param((1, 4, 1, 130, 130, 64, torch.bfloat16, "qkv", {"causal": True}), id="qkv-mqa-causal-two-tiles-bf16"),
    pytest.param((1, 8, 2, 1, 1100, 128, torch.bfloat16, "qkv", {"gqa": True}), id="qkv-gqa4-decode-two-kv-tiles-bf16",
                 marks=pytest.mark.matrix),
    pytest.param((2, 4, 2, 600, 600, 64, torch.float32, "qkv", {"gqa": True, "causal": True}), id="qkv-gqa-causal-two-512-tiles",
                 marks=pytest.mark.matrix),
    pytest.param((1, 4, 4, 77, 300, 80, torch.float16, "kv", {"mask": "float"}), id="kv-d80-sq-ne-skv-fp16",
                 marks=pytest.mark.matrix),
]


@pytest.mark.interpreter
@pytest.mark.parametrize("case", LAYOUTS)
def test_attention_reads_q_k_v_as_they_lie(module, case):
    """One launch, torch's values, the output written [b, s, h, d] whatever the query's layout, so
    that the models' ``.transpose(1, 2).contiguous()`` copies nothing, and no copy of q, k, v or
    the output on the host (a mask's conversion to the kernel's bias aside)."""
    from torch2pypto.translator.verification.hostops import host_work

    b, h, h_kv, s_q, s_kv, d, dtype, transposed, kwargs = case
    tensors = [sample(b, s, n, d, dtype=dtype, seed=seed).transpose(1, 2) if name in transposed
               else sample(b, n, s, d, dtype=dtype, seed=seed)
               for seed, (name, n, s) in enumerate((("q", h, s_q), ("k", h_kv, s_kv), ("v", h_kv, s_kv)))]
    kwargs = dict(kwargs)
    if kwargs.get("mask") == "window":  # a bool sliding window of 4 keys, as mistral's
        rows, cols = torch.arange(s_q)[:, None], torch.arange(s_kv)[None, :]
        kwargs["mask"] = ((cols <= rows) & (rows - cols < 4)).expand(b, 1, s_q, s_kv)
    elif "mask" in kwargs:
        kwargs["mask"] = _mask(kwargs["mask"], b, h, s_q, s_kv, dtype)
    ran = counting()
    with torch2pypto.interpreted(module), host_work(module) as work:
        got = module.f(*tensors, **kwargs)
    assert ran() == KERNEL
    # the copies made are the mask's, into the kernel's FP32 bias of [mask rows, s_kv padded to 8]
    mask = kwargs.get("mask")
    bias = 0 if mask is None else mask.numel() // s_kv * (s_kv + -s_kv % 8) * 4
    copies = {op: n for op, n in work.written.items() if op in {"clone", "copy_", "constant_pad_nd", "_to_copy"}}
    assert all(n <= bias for n in copies.values()) and len(copies) <= 2, copies
    if mask is not None and mask.dtype == torch.bool:  # a bool mask is read in place: nothing at all on the host
        assert not work.ops, work.ops
    names = {"mask": "attn_mask", "causal": "is_causal", "gqa": "enable_gqa"}
    expected = torch.nn.functional.scaled_dot_product_attention(*tensors, **{names[n]: a for n, a in kwargs.items()})
    atol, rtol = tolerance(ENTRY, dtype, tensors[0].shape)
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
    # torch's shape; the models' .transpose(1, 2).contiguous() gives a contiguous tensor without a copy
    assert got.shape == expected.shape and got.transpose(1, 2).is_contiguous()
    assert got.transpose(1, 2).contiguous().data_ptr() == got.data_ptr()


@pytest.mark.interpreter
@pytest.mark.parametrize("causal", [False, True], ids=["float-mask", "bool-mask-and-causal"])
def test_a_mask_is_converted_once_until_it_changes(module, causal):
    """The layers of a forward share one mask: the second call checks and converts nothing on the
    host; a mask changed in place (its version counter moves) is converted again. (A float mask,
    and a bool mask with is_causal: the kernel adds an FP32 bias. A bool mask alone is read in place.)"""
    from torch2pypto.translator.verification.hostops import host_ops

    q, k, v = qkv(2, 2, 2, 7, 7, 64)
    mask = _mask("bool", 2, 2, 7, 7, torch.float32) if causal else _mask("float", 2, 2, 7, 7, torch.float32)
    check(module, q, k, v, mask=mask, causal=causal)
    with torch2pypto.interpreted(module), host_ops(module) as ops:
        module.f(q, k, v, mask=mask, causal=causal)
    assert not ops, ops
    if causal:
        mask[:, :, :, 1:] = ~mask[:, :, :, 1:]  # every row keeps its first key
    else:
        mask.mul_(2)
    with torch2pypto.interpreted(module), host_ops(module) as ops:
        module.f(q, k, v, mask=mask, causal=causal)
    assert {"any", "masked_fill"} <= set(ops) if causal else "clamp" in ops, ops
    check(module, q, k, v, mask=mask, causal=causal)


def _window(b, s_q, s_kv, window, padding=0):
    """transformers' sliding-window causal mask (masking_utils: kv_idx <= q_idx and kv_idx > q_idx
    - window, queries at the last s_q positions of s_kv), [1, 1, s_q, s_kv] expanded over the
    batch as sdpa_mask expands it; with `padding`, batch row 1's first `padding` keys masked
    too (a left-padded prompt), so the mask is [b, 1, s_q, s_kv] of its own."""
    rows, cols = torch.arange(s_q)[:, None] + s_kv - s_q, torch.arange(s_kv)[None, :]
    mask = ((cols <= rows) & (cols > rows - window))[None, None]
    if not padding:
        return mask.expand(b, 1, s_q, s_kv)
    keys = torch.ones(b, s_kv, dtype=torch.bool)
    keys[1, :padding] = False
    return mask & keys[:, None, None, :]


# (b, h, h_kv, s_q, s_kv, d, dtype, window, padding): windows smaller and larger than S, decode
# (s_q 1 after a cache), odd lengths, padding (a row of batch 1 may be wholly masked: zeros, as torch)
WINDOWS = [
    pytest.param((2, 4, 2, 7, 7, 64, torch.float32, 4, 0), id="window4-s7-gqa"),
    pytest.param((2, 4, 2, 7, 7, 64, torch.bfloat16, 4, 0), id="window4-s7-gqa-bf16"),
    pytest.param((1, 2, 2, 33, 33, 80, torch.float32, 40, 0), id="window40-s33-d80"),
    pytest.param((2, 4, 2, 1, 13, 64, torch.bfloat16, 5, 0), id="decode-window5-bf16"),
    pytest.param((2, 2, 2, 1, 13, 64, torch.float32, 20, 0), id="decode-window20"),
    pytest.param((2, 4, 4, 9, 9, 64, torch.float32, 3, 4), id="window3-padding-wholly-masked-rows"),
    pytest.param((2, 2, 1, 5, 19, 128, torch.bfloat16, 8, 2), id="window8-padding-sq-ne-skv-bf16"),
    # the window across two kv tiles of 1024 (a query row's first tile wholly masked or not)
    pytest.param((1, 4, 2, 40, 1100, 64, torch.float32, 50, 0), id="window50-across-two-kv-tiles"),
    pytest.param((1, 4, 2, 1, 1100, 64, torch.bfloat16, 50, 0), id="decode-window50-second-kv-tile-bf16", marks=pytest.mark.matrix),
]


@pytest.mark.interpreter
@pytest.mark.parametrize("case", WINDOWS)
def test_a_bool_mask_is_read_in_place(module, case):
    """A sliding-window (and padding) bool mask as transformers makes it: one launch, torch's values
    (a row the mask wholly masks gives zeros), and no torch op on the host: no bias, no check."""
    from torch2pypto.translator.verification.hostops import host_ops

    b, h, h_kv, s_q, s_kv, d, dtype, window, padding = case
    q, k, v = qkv(b, h, h_kv, s_q, s_kv, d, dtype)
    mask = _window(b, s_q, s_kv, window, padding)
    ran = counting()
    with torch2pypto.interpreted(module), host_ops(module) as ops:
        got = module.f(q, k, v, mask=mask, gqa=h != h_kv)
    assert ran() == KERNEL and not ops, ops
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=h != h_kv)
    torch.testing.assert_close(got, expected, atol=(tol := tolerance(ENTRY, dtype, q.shape))[0], rtol=tol[1])
    dead = ~mask[-1, 0].any(-1)  # queries that see no key (window3-padding: batch row 1's first four): zeros
    assert dead.any() == (window < padding + 1) and not got[-1][:, dead].any()


@pytest.mark.interpreter
def test_gradients_through_a_window_mask_are_torchs(module):
    q, k, v = (t.requires_grad_() for t in qkv(2, 4, 2, 9, 9, 64))
    mask = _window(2, 9, 9, 3, padding=4)
    assert_sdpa_gradients(module, lambda: module.f(q, k, v, mask=mask, gqa=True), (q, k, v), mask, KERNEL)


@pytest.mark.interpreter
def test_what_the_kernel_does_not_take_runs_torch(module):
    """A dropout known at run time, a bool mask with a wholly masked row and is_causal (torch gives
    zeros; the kernel's FP32 bias cannot tell); and heads that differ without enable_gqa raise torch's error."""
    q, k, v = qkv(1, 4, 4, 7, 7, 64)
    ran = counting()
    torch.manual_seed(0)
    with torch2pypto.interpreted(module):
        got = module.f(q, k, v, p=0.5)
    torch.manual_seed(0)
    torch.testing.assert_close(got, torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5))
    check(module, q, k, v, launches={}, mask=torch.ones(7, 7, dtype=torch.bool).index_fill(0, torch.tensor([3]), False), causal=True)
    assert ran() == {}
    with pytest.raises(RuntimeError) as expected:
        torch.nn.functional.scaled_dot_product_attention(q, k[:, :2], v[:, :2])
    with torch2pypto.interpreted(module), pytest.raises(RuntimeError) as got:
        module.f(q, k[:, :2], v[:, :2])
    assert str(got.value) == str(expected.value)
    assert ran() == {}


@pytest.mark.interpreter
def test_gradients_are_torchs(module):
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 2, 7, 13, 64))
    ran = counting()
    with torch2pypto.interpreted(module):
        module.f(q, k, v, causal=True).sum().backward()
    assert ran() == KERNEL
    got = [t.grad for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    torch.testing.assert_close(got, [t.grad for t in (q, k, v)])


def test_verify_samples_the_kernel_path():
    """--verify gives a dropout_p known at run time its default (0.5 took the torch path: 'not
    exercised'), the mask a shape of the scores, and half dtypes attention's tolerance."""
    from torch2pypto.translator.verification import verify

    cases = verify.cases(translate_source(SDPA).conversions[0], "0")
    assert len(cases) == 3 * len(ENTRY.sample.shapes)
    for case in cases:
        q, k, v = case.args
        assert case.kwargs["dropout_p"] == 0.0
        torch.broadcast_shapes(case.kwargs["attn_mask"].shape, (*q.shape[:-1], k.shape[-2]))
        assert case.tolerance == ((1e-5, 1.3e-6) if q.dtype == torch.float32 else (2 * torch.finfo(q.dtype).eps, 1.6e-2))


# ---- the sdpa helpers (runtime/attention.py)


def sdpa_inputs(hq=2, hkv=2, sq=3, skv=5, d=8, dtype=torch.float32):
    return (torch.randn(1, hq, sq, d, dtype=dtype), torch.randn(1, hkv, skv, d, dtype=dtype), torch.randn(1, hkv, skv, d, dtype=dtype))


def test_sdpa_takes_one_dtype_heads_that_group_and_head_dims_up_to_256(launcher):
    q, k, v = sdpa_inputs()
    assert attention._sdpa_takes(q, k, v, None, False, None, False)
    assert not attention._sdpa_takes(q, k.half(), v, None, False, None, False)  # mixed dtypes
    assert not attention._sdpa_takes(q, k, v[..., :4], None, False, None, False)  # value dims other than key's
    assert not attention._sdpa_takes(*sdpa_inputs(hq=4), None, False, None, False)  # torch raises without enable_gqa
    assert attention._sdpa_takes(*sdpa_inputs(hq=4), None, False, None, True)
    assert attention._sdpa_takes(*sdpa_inputs(hq=4, hkv=1), None, False, None, False)  # one kv head broadcasts
    assert not attention._sdpa_takes(*sdpa_inputs(hq=3), None, False, None, True)
    assert attention._sdpa_takes(*sdpa_inputs(d=256), None, False, None, False)  # gemma's head dim
    assert not attention._sdpa_takes(*sdpa_inputs(d=264), None, False, None, False)
    assert not attention._sdpa_takes(q, k, v, None, 1, None, False) and not attention._sdpa_takes(q, k, v, None, False, "1", False)
    assert not attention._sdpa_takes(*sdpa_inputs(dtype=torch.float64), None, False, None, False)


def test_sdpa_takes_masks_that_broadcast_to_the_scores_with_a_key_in_every_row(launcher):
    q, k, v = sdpa_inputs()
    assert attention._sdpa_takes(q, k, v, torch.randn(3, 5), False, 0.5, False)
    assert attention._sdpa_takes(q, k, v, torch.ones(1, 1, 3, 5, dtype=torch.bool), True, None, False)
    assert not attention._sdpa_takes(q, k, v, torch.randn(3, 5).half(), False, None, False)
    assert not attention._sdpa_takes(q, k, v, torch.randn(4, 5), False, None, False)
    holes = torch.ones(3, 5, dtype=torch.bool)
    holes[1] = False  # a row with no key: torch gives zeros there, and so does the kernel reading the mask in place
    assert attention._sdpa_takes(q, k, v, holes, False, None, False)
    assert not attention._sdpa_takes(q, k, v, holes, True, None, False)  # with is_causal: an FP32 bias, which cannot tell
    assert not attention._sdpa_takes(q, k, v, holes[:, None].expand(3, 3, 5).transpose(0, 1), True, None, False)


def test_sdpa_takes_nothing_off_the_kernel_path():
    assert not attention._sdpa_takes(*sdpa_inputs(), None, False, None, False)


def test_sdpa_tiles_are_powers_of_two_from_16():
    assert [attention._sdpa_tile(n, attention._SDPA_ROWS) for n in (1, 16, 17, 300, 5000)] == [16, 16, 32, 512, 512]
    assert attention._sdpa_tile(5000, attention._SDPA_KV) == 1024


def test_sdpa_bias_is_a_causal_band_or_the_mask_as_additive_fp32_rows():
    q, k, _ = sdpa_inputs(sq=4, skv=6)
    band, kind, by_batch, by_head = attention._sdpa_bias(q, k, None, True, 4)
    assert (kind, by_batch, by_head) == ("causal", False, False) and band.shape == (4, 8)
    cols, rows = torch.arange(8), torch.arange(4)[:, None]
    assert torch.equal(band, torch.where(cols - 4 <= rows, 0.0, -1e30))
    assert attention._sdpa_bias(q, k, None, False, 4)[1] is None
    mask = torch.rand(2, 4, 6) > 0.3  # per head
    bias, kind, by_batch, by_head = attention._sdpa_bias(q, k, mask, True, 4)  # with is_causal: FP32 rows
    assert (kind, by_batch, by_head) == ("mask", False, True) and bias.shape == (8, 8)  # skv padded to 32 bytes
    assert torch.equal(bias[:, :6], torch.where(mask & torch.ones(4, 6, dtype=torch.bool).tril(), 0.0, -1e30).reshape(8, 6))
    assert not bias[:, 6:].any() and attention._sdpa_bias(q, k, mask, True, 4)[0] is bias  # kept on the mask until it changes
    rows, kind, by_batch, by_head = attention._sdpa_bias(q, k, mask, False, 4)  # a bool mask alone: its rows in place
    assert (kind, by_batch, by_head) == ("keep", False, True) and rows.shape == (8, 6) and rows.data_ptr() == mask.data_ptr()
    window = (torch.rand(1, 1, 4, 6) > 0.3).expand(3, 1, 4, 6)  # one mask over the batch, as transformers expands it
    rows, kind, by_batch, by_head = attention._sdpa_bias(torch.randn(3, 2, 4, 8), k, window, False, 4)
    assert (kind, by_batch, by_head) == ("keep", False, False) and rows.shape == (4, 6) and rows.data_ptr() == window.data_ptr()
    padded = torch.rand(3, 1, 4, 6) > 0.3  # per batch row (a padding mask)
    assert attention._sdpa_bias(torch.randn(3, 2, 4, 8), k, padded, False, 4)[1:] == ("keep", True, False)
    assert attention._sdpa_bias(q, k, torch.rand(1, 6) > 0.3, False, 4)[1] == "mask"  # broadcast along sq: FP32 rows
    causal = attention._sdpa_bias(q, k, torch.zeros(4, 6), True, 4)[0]
    assert torch.equal(causal[:, :6], torch.zeros(4, 6).masked_fill(torch.ones(4, 6, dtype=torch.bool).triu(1), -1e30))


def test_sdpa_rows_read_heads_in_the_columns_in_place_else_pad_d_to_16():
    per_head = torch.randn(2, 5, 3, 16).transpose(1, 2)  # [b, s, heads, d] viewed [b, heads, s, d]
    rows, columns = attention._sdpa_rows(per_head)
    assert columns and rows.shape == (10, 48) and rows.data_ptr() == per_head.data_ptr()
    t = torch.randn(2, 3, 5, 8)
    rows, columns = attention._sdpa_rows(t)
    assert not columns and rows.shape == (30, 16) and torch.equal(rows[:, :8], t.reshape(-1, 8)) and not rows[:, 8:].any()
