"""GQA's repeated kv heads (transformers' ``repeat_kv`` before sdpa, under a mask) read in place by
the attention kernel: no repeat runs, values and gradients are torch's, counted launches and host
ops; a read of the repeated tensor elsewhere makes the repeat there, as before."""

import pytest
import torch

import torch2pypto
from helpers import load, sample
from torch2pypto.mapping import load_table
from torch2pypto.mapping.tolerance import tolerance
from torch2pypto.translator.engine.translate import translate_source
from torch2pypto.translator.verification.hostops import host_ops
from torch2pypto.translator.verification.interpreter import counting

SOURCE = '''\
import torch
import torch.nn.functional as F


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """transformers' own."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def attend(q, k, v, mask, n_rep, p=0.0):
    k = repeat_kv(k, n_rep)
    v = repeat_kv(v, n_rep)
    kv_length = k.shape[2]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
    return out.reshape(out.shape[0], -1, kv_length, v.shape[-1])


def attend_and_keep(q, k, v, mask, n_rep):
    k = repeat_kv(k, n_rep)
    v = repeat_kv(v, n_rep)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), k


def attend_in_a_loop(q, k, v, mask, n_rep):
    for _ in range(1):
        k = repeat_kv(k, n_rep)
        v = repeat_kv(v, n_rep)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
'''
KERNEL = {"scaled_dot_product_attention_kernel.kernel": 1}
ENTRY = load_table().by_api["torch.nn.functional.scaled_dot_product_attention"]
COPIES = {"clone", "copy_", "_unsafe_view", "expand", "repeat_interleave"}


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("repeats")
    return load(folder / "repeats_pypto.py", translate_source(SOURCE).code), load(folder / "repeats.py", SOURCE)


def test_the_repeats_an_sdpa_call_reads_are_deferred():
    code = translate_source(SOURCE).code
    assert code.count("pypto_repeat_kv(repeat_kv, k, n_rep)") == 2 and code.count("pypto_repeat_kv(repeat_kv, v, n_rep)") == 2
    assert "kv_length = k.shape[2]" in code and "v.shape[-1])" in code  # reads the repeat leaves alone
    assert "attn_mask=mask), pypto_repeated(k)" in code  # any other read makes the repeat
    assert "        k = repeat_kv(k, n_rep)\n        v = repeat_kv(v, n_rep)" in code  # in a loop: as written
    assert translate_source(code).code == code


def _case(b, h, h_kv, s, d, kind, dtype, grad=False):
    q, k, v = sample(b, h, s, d, dtype=dtype), sample(b, h_kv, s, d, dtype=dtype, seed=1), sample(b, h_kv, s, d, dtype=dtype, seed=2)
    if kind == "bool":  # a padding mask: row 0 of batch 1 sees its first keys only
        mask = (torch.rand(b, 1, s, s, generator=torch.Generator().manual_seed(3)) < 0.6).index_fill(-1, torch.tensor([0]), True)
    else:
        mask = sample(b, 1, s, s, dtype=dtype, seed=4) * 3
    return [t.requires_grad_() if grad else t for t in (q, k, v)], mask


CASES = [  # (batch, heads, kv heads, s, d), mask, dtype
    ((2, 4, 2, 7, 64), "bool", torch.float32),
    ((1, 8, 2, 13, 64), "additive", torch.float32),
    ((2, 8, 2, 1, 64), "bool", torch.bfloat16),  # decode
    ((1, 4, 2, 9, 32), "additive", torch.bfloat16),
    ((2, 4, 1, 1, 64), "additive", torch.float32),  # decode, MQA
]


@pytest.mark.interpreter
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, (*c[0], c[1], str(c[2])[6:]))))
def test_the_kernel_reads_the_kv_heads_in_place(modules, case):
    (b, h, h_kv, s, d), kind, dtype = case
    translated, original = modules
    (q, k, v), mask = _case(b, h, h_kv, s, d, kind, dtype)
    ran = counting()
    with torch2pypto.interpreted(translated), host_ops(translated) as ops:
        got = translated.attend(q, k, v, mask, h // h_kv)
    assert ran() == KERNEL and not COPIES & set(ops), ops
    expected = original.attend(q, k, v, mask, h // h_kv)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    atol, rtol = tolerance(ENTRY, dtype, q.shape)
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)


@pytest.mark.interpreter
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_gradients_are_the_repeats(modules, kind):
    """k's and v's gradients: the sums over each group of their repeated heads, as torch's."""
    translated, original = modules
    (q, k, v), mask = _case(2, 4, 2, 9, 64, kind, torch.float32, grad=True)
    ran = counting()
    with torch2pypto.interpreted(translated):
        translated.attend(q, k, v, mask, 2).square().sum().backward()
    assert ran() == KERNEL
    got = [t.grad for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    original.attend(q, k, v, mask, 2).square().sum().backward()
    torch.testing.assert_close(got, [t.grad for t in (q, k, v)])


@pytest.mark.interpreter
def test_a_repeat_read_elsewhere_or_refused_by_the_kernel_is_made(modules):
    """Read elsewhere: made there once, the kernel reads the kv heads still; a dropout the kernel
    does not take: made, and torch's sdpa reads it."""
    translated, original = modules
    (q, k, v), mask = _case(2, 4, 2, 7, 64, "bool", torch.float32)
    ran = counting()
    with torch2pypto.interpreted(translated), host_ops(translated) as ops:
        got, kept = translated.attend_and_keep(q, k, v, mask, 2)
    assert ran() == KERNEL and ops["clone"] == 1, ops
    expected, repeated = original.attend_and_keep(q, k, v, mask, 2)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(kept, repeated) and kept.is_contiguous()
    ran = counting()
    with torch2pypto.interpreted(translated), host_ops(translated) as ops:
        torch.manual_seed(0)
        got = translated.attend(q, k, v, mask, 2, p=0.5)
    torch.manual_seed(0)
    assert ran() == {} and ops["clone"] == 2, ops
    torch.testing.assert_close(got, original.attend(q, k, v, mask, 2, p=0.5))
