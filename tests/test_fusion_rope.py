"""Fusion of rotary position embeddings: llama's RoPE with its rotate_half inlined, q's and k's
statements one kernel of two groups, read where the projections lie; qwen2-vl's vision RoPE,
partial RoPE (phi3, glm) and what runs torch. The region machinery itself is in test_fusion.py."""

import contextlib
import re

import pytest
import torch

import torch2pypto
from fusing import HEAD, ROPE, check, fused
from helpers import module
from helpers import sample as tensor
from torch2pypto import Options, translate_source
from torch2pypto.translator.verification.interpreter import counting


def rope_inputs(shape, dtype):
    b, h, s, d = shape
    return (tensor(b, h, s, d, dtype=dtype), tensor(b, max(h // 2, 1), s, d, dtype=dtype, seed=1),
            tensor(b, s, d, dtype=dtype, seed=2), tensor(b, s, d, dtype=dtype, seed=3))


ROPE_OPS = ("x * y", "x[..., a:b]", "x[..., a:b]", "neg", "cat", "x * y", "x + y")


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 64), (1, 4, 7, 128)], ids=["odd-64", "gqa-128"])
def test_rope_with_its_helper_inlined_is_one_kernel_for_q_and_k(shape, dtype):
    """llama's RoPE: ``(q * cos) + (rotate_half(q) * sin)`` with the module's rotate_half inlined
    (two last-dim slices, a neg and a cat as tile ops), for q and for k: one kernel, a group of
    rows each (their heads differ: 3 and 1, 4 and 2), sharing cos and sin; [B, 1, S, D] cos/sin
    broadcast against [B, H, S, D]. No other launch, no host op."""
    translation = check(ROPE, rope_inputs(shape, dtype), kernels=1, calls=0, host={})
    assert [r.ops for r in translation.regions] == [ROPE_OPS * 2]
    assert "    q_embed, k_embed = pypto_fused_f_" in translation.code and "_6sites(q, cos, rotate_half, sin, k)" in translation.code
    assert "pypto.concat([" in translation.code


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(2, 4, 7, 64), (3, 4, 1, 128)], ids=["prefill-odd", "decode"])
def test_rope_reads_transposed_q_and_k_and_broadcast_cos_in_place(shape, dtype):
    """As llama's attention hands them over: q and k transposed views of the projections'
    [B, S, H, D] rows, cos/sin [B, S, D] unsqueezed over the heads. The kernel reads all four
    where they lie, each group its own windows of cos and sin: no host op."""
    b, h, s, d = shape
    q, k = (tensor(b, s, heads, d, dtype=dtype, seed=seed).transpose(1, 2) for seed, heads in ((0, h), (1, h // 2)))
    cos, sin = (tensor(b, s, d, dtype=dtype, seed=seed) for seed in (2, 3))
    check(ROPE, (q, k, cos, sin), kernels=1, calls=0, host={})


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("heads, lengths", [((8, 1), (9, 9)), ((6, 6), (3, 3)), ((4, 2), (1, 5))], ids=["mqa", "mha", "decode-q"])
def test_rope_groups_walk_rows_of_their_own_shapes(heads, lengths, dtype):
    """Each group walks its own [blocks, n, cols] with its own heads and tile shape: 8 query heads
    over one KV head (MQA), equal heads, and a query of one position against five keys (cos/sin
    of one position broadcast to both); q and k transposed as the projections give them."""
    (h, kv), (sq, sk) = heads, lengths
    q = tensor(2, sq, h, 64, dtype=dtype).transpose(1, 2)
    k = tensor(2, sk, kv, 64, dtype=dtype, seed=1).transpose(1, 2)
    cos, sin = (tensor(2, 1, 64, dtype=dtype, seed=seed) for seed in (2, 3))
    check(ROPE, (q, k, cos, sin), kernels=1, calls=0, host={})


@pytest.mark.interpreter
def test_grouped_rope_carries_torchs_gradients():
    """Training: q and k need grad; the kernel runs forward, backward gives torch's gradients of
    the two statements, also where only one result reaches the loss."""
    translation = fused(ROPE)
    original, translated = module(HEAD + ROPE), module(translation.code)
    base = rope_inputs((2, 4, 5, 64), torch.float32)
    for used in (2, 1):
        grads = []
        for m, run in ((original, contextlib.nullcontext()), (translated, torch2pypto.interpreted(translated))):
            q, k = (t.clone().requires_grad_() for t in base[:2])
            launched = counting()
            with run:
                results = m.f(q, k, *base[2:])
                sum((r * (i + 1)).sum() for i, r in enumerate(results[:used])).backward()
            grads.append((q.grad, k.grad))
            if m is translated:
                # one fused launch forward; backward recomputes the statements, rotate_half's calls as translated
                assert [n for k, n in launched().items() if k.startswith("fused_")] == [1], launched()
        (q_want, k_want), (q_got, k_got) = grads
        torch.testing.assert_close(q_got, q_want)
        assert (k_got is None) == (k_want is None) and (k_got is None or torch.allclose(k_got, k_want))


@pytest.mark.interpreter
def test_no_fuse_rope_is_a_kernel_per_call():
    """``--no-fuse``: each torch call of q's and k's RoPE its own kernel (mul, neg, cat, mul, add each)."""
    translation = fused(ROPE, Options(fuse=False))
    assert not translation.regions
    translated = module(translation.code)
    inputs = rope_inputs((2, 3, 5, 64), torch.float32)
    launched = counting()
    with torch2pypto.interpreted(translated):
        got = translated.f(*inputs)
    assert sum(launched().values()) == 10 and not any(k.startswith("fused_") for k in launched()), launched()
    for g, e in zip(got, module(HEAD + ROPE).f(*inputs)):
        torch.testing.assert_close(g, e)


def test_a_second_run_keeps_a_grouped_region_and_counts_its_sites():
    once = fused(ROPE)
    again = translate_source(once.code, "fused.py")
    assert again.code == once.code
    assert sum(1 for r in again.records if r.api == "torch2pypto.fused") == 6


@pytest.mark.interpreter
def test_rope_of_a_width_the_slices_cannot_align_runs_torch():
    """A head_dim of 18: its halves start off a 32-byte boundary, so the wrapper runs the original
    statements (rotate_half's own neg and cat kernels), with torch's values."""
    check(ROPE, rope_inputs((2, 3, 5, 18), torch.float32), kernels=0, calls=4)


def test_a_helper_shadowed_by_a_local_name_is_not_inlined():
    code = ROPE.replace("    cos = cos.unsqueeze(1)\n", "    cos = cos.unsqueeze(1)\n    rotate_half = torch.neg\n")
    assert all("cat" not in r.ops for r in fused(code).regions)


VISION_ROPE = """\
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def f(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    orig_q_dtype = q.dtype
    orig_k_dtype = k.dtype
    q, k = q.float(), k.float()
    cos, sin = cos.unsqueeze(-2).float(), sin.unsqueeze(-2).float()
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    q_embed = q_embed.to(orig_q_dtype)
    k_embed = k_embed.to(orig_k_dtype)
    return q_embed, k_embed
"""


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_vision_rope_with_tuple_casts_is_one_kernel(dtype):
    """qwen2-vl's ``apply_rotary_pos_emb_vision``: the tuple of casts and the unsqueezed cos/sin
    join q's and k's RoPE in one launch, back in the inputs' dtype ([S, heads, D], odd S); q's and
    k's own casts stay calls (none in float32)."""
    q, k = tensor(7, 3, 64, dtype=dtype), tensor(7, 3, 64, dtype=dtype, seed=1)
    cos, sin = tensor(7, 64, seed=2), tensor(7, 64, seed=3)
    check(VISION_ROPE, (q, k, cos, sin), kernels=1, calls=0 if dtype == torch.float32 else 2)


PARTIAL_ROPE = """\
def rotate_half(x):
    \"\"\"Rotates half the hidden dims of the input.\"\"\"
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def f(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)

    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]

    q_embed = torch.cat([(q_rot * cos) + (rotate_half(q_rot) * sin), q_pass], dim=-1)
    k_embed = torch.cat([(k_rot * cos) + (rotate_half(k_rot) * sin), k_pass], dim=-1)
    return q_embed, k_embed
"""


def test_partial_rope_written_interleaved_is_one_grouped_region():
    """phi3's apply_rotary_pos_emb: q's and k's slices, then q's and k's products, interleaved:
    two chains of statements, a group of rows each, one call where q's slices stood."""
    translation = fused(PARTIAL_ROPE)
    ops = ("x[..., a:b]", "x[..., a:b]", "x * y", "x[..., a:b]", "x[..., a:b]", "neg", "cat", "x * y", "x + y", "cat")
    assert [r.ops for r in translation.regions] == [ops * 2]
    assert re.search(r"q_embed, k_embed = pypto_fused_f_\w+\(q, rotary_dim, cos, rotate_half, sin, k\)\n    return q_embed, k_embed", translation.code)
    # a chain that reads another's names, or writes them, stays per statement
    crossed = PARTIAL_ROPE.replace("k_pass], dim=-1)", "q_pass], dim=-1)")
    assert not any(len(r.ops) > 10 for r in fused(crossed).regions)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("factor, head_dim", [(1.0, 64), (0.75, 128), (0.5, 64)])
def test_partial_rope_is_one_kernel_for_q_and_k(dtype, factor, head_dim):
    """phi3's partial RoPE (cos and sin rotary_dim wide against q's and k's head_dim; at a factor
    of 1 the pass-through part is 0 wide) in one launch for q and k: GQA heads, odd and decode
    (S=1) token counts; q as a transposed view of the projection, as the model hands it."""
    rot = int(head_dim * factor)
    for b, heads, kv, s in ((2, 4, 2, 5), (1, 4, 1, 1), (1, 2, 2, 33)):
        q = tensor(b, s, heads, head_dim, dtype=dtype).transpose(1, 2)
        k = tensor(b, kv, s, head_dim, dtype=dtype, seed=1)
        cos, sin = tensor(b, s, rot, dtype=dtype, seed=2), tensor(b, s, rot, dtype=dtype, seed=3)
        check(PARTIAL_ROPE, (q, k, cos, sin), kernels=1, host={})


@pytest.mark.interpreter
def test_partial_rope_falls_back_where_the_kernel_does_not_take_it():
    """A rotary_dim whose halves start no 32-byte block (24 of 64), cos of no rotary width the
    slices agree with: the statements as written (rotate_half's own kernels: a neg and a cat each)."""
    q, k = tensor(1, 2, 5, 64), tensor(1, 2, 5, 64, seed=1)
    check(PARTIAL_ROPE, (q, k, tensor(1, 5, 24, seed=2), tensor(1, 5, 24, seed=3)), kernels=0, calls=4)
    check(PARTIAL_ROPE, (q, k, tensor(1, 5, 1, seed=2), tensor(1, 5, 1, seed=3)), kernels=0, calls=4)


@pytest.mark.interpreter
def test_partial_rope_keeps_torch_gradients():
    translation = fused(PARTIAL_ROPE)
    translated, original = module(translation.code), module(HEAD + PARTIAL_ROPE)
    inputs = [tensor(1, 4, 7, 64, seed=0), tensor(1, 2, 7, 64, seed=1), tensor(1, 7, 32, seed=2), tensor(1, 7, 32, seed=3)]
    grads = []
    for m, launches in ((translated, 1), (original, 0)):
        leaves = [t.clone().requires_grad_() for t in inputs]
        launched = counting()
        with torch2pypto.interpreted(translated):
            q, k = m.f(*leaves)
        assert sum(launched().values()) == launches
        (q.square().sum() + (k * 3).sum()).backward()
        grads.append([t.grad for t in leaves])
    torch.testing.assert_close(grads[0], grads[1])


GLM_ROPE = PARTIAL_ROPE.replace('''    q_embed = torch.cat([(q_rot * cos) + (rotate_half(q_rot) * sin), q_pass], dim=-1)
    k_embed = torch.cat([(k_rot * cos) + (rotate_half(k_rot) * sin), k_pass], dim=-1)
''', '''    q_embed = (q_rot * cos) + (rotate_half(q_rot) * sin)
    k_embed = (k_rot * cos) + (rotate_half(k_rot) * sin)

    q_embed = torch.cat([q_embed, q_pass], dim=-1)
    k_embed = torch.cat([k_embed, k_pass], dim=-1)
''')


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_glm_partial_rope_with_its_cats_last_is_one_kernel(dtype):
    """glm's and bamba's form (the zoo's 17 files of it): the products, then the cats, q's and k's
    statements interleaved three times over: one launch, at a half and a whole rotary factor."""
    assert "q_embed = torch.cat([q_embed" in GLM_ROPE
    for rot in (32, 64):
        q, k = tensor(2, 4, 5, 64, dtype=dtype), tensor(2, 2, 5, 64, dtype=dtype, seed=1)
        check(GLM_ROPE, (q, k, tensor(2, 5, rot, dtype=dtype, seed=2), tensor(2, 5, rot, dtype=dtype, seed=3)), kernels=1, host={})
