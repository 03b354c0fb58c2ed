"""transformers' causal and sliding-window masks deferred to the attention kernel: the calls the
engine rewrites, the deferred mask against transformers' own (values, shape, strides, None where it
skips), every case it cannot prove built as transformers builds it, any other use of a deferred
mask building it, and the kernel computing it in its tiles against torch's sdpa of the built mask
(counted launches, no mask built, gradients)."""

import pytest
import torch
from transformers import MistralConfig, masking_utils
from transformers.cache_utils import DynamicCache

import torch2pypto
from helpers import assert_sdpa_gradients, load, sample
from torch2pypto.mapping import load_table
from torch2pypto.mapping.tolerance import tolerance
from torch2pypto.translator.engine.translate import translate_source
from torch2pypto.translator.verification.hostops import host_ops
from torch2pypto.translator.verification.interpreter import counting

SOURCE = '''\
import torch
import torch.nn.functional as F
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask


def sliding(*args, **kwargs):
    return create_sliding_window_causal_mask(*args, **kwargs)


def causal(config, embeds, past):
    return create_causal_mask(
        config, embeds, None, past
    )


def chosen(config):
    return create_causal_mask if config.sliding_window is None else create_sliding_window_causal_mask


def attend(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
'''
REBOUND = '''\
import torch
from transformers.masking_utils import create_causal_mask


def make(config, embeds, create_causal_mask=None):
    return create_causal_mask(config, embeds, None, None)
'''
NESTED = '''\
import torch
from transformers.masking_utils import create_causal_mask


class Model(torch.nn.Module):
    def other(self, embeds):
        return embeds

    def forward(self, config, embeds):
        if embeds is not None:
            return create_causal_mask(config, embeds, None, None)
'''
KERNEL = {"scaled_dot_product_attention_kernel.kernel": 1}
ENTRY = load_table().by_api["torch.nn.functional.scaled_dot_product_attention"]
MASK_OPS = {"le", "gt", "bitwise_and", "new_ones", "add"}  # building the mask (the kernel's band, made once, is none of them)


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    return load(tmp_path_factory.mktemp("masks") / "masks_pypto.py", translate_source(SOURCE).code)


def test_the_calls_and_reads_of_the_masks_are_rewritten():
    code = translate_source(SOURCE).code
    assert "return pypto_causal_mask(create_sliding_window_causal_mask, *args, **kwargs)" in code
    assert "return pypto_causal_mask(create_causal_mask,\n        config, embeds, None, past\n    )" in code
    assert ("return pypto_causal_mask_maker(create_causal_mask) if config.sliding_window is None "
            "else pypto_causal_mask_maker(create_sliding_window_causal_mask)") in code
    assert translate_source(code).code == code
    assert "pypto_causal_mask" not in translate_source(REBOUND).code  # the name is not transformers' function there


@pytest.mark.parametrize("comment", ["", "# caf\u00e9\n"])
def test_a_mask_in_a_nested_block_is_found_and_a_nested_rebinding_too(comment):
    rewritten = "return pypto_causal_mask(create_causal_mask, config, embeds, None, None)"
    assert rewritten in translate_source(comment + NESTED).code
    spelt = NESTED.replace("return create_causal_mask", "return \uff43reate_causal_mask")  # a fullwidth c: the same name to Python
    assert rewritten in translate_source(comment + spelt).code
    rebound = NESTED.replace("def other(self, embeds):", "@staticmethod\n    def other(create_causal_mask):")
    assert "pypto_causal_mask" not in translate_source(comment + rebound).code


def config(window=5, implementation="sdpa", **more):
    made = MistralConfig(sliding_window=window, num_hidden_layers=1, hidden_size=16, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=32, vocab_size=64, **more)
    made._attn_implementation = implementation
    return made


def cache(made, batch, past, sliding=True):
    """A DynamicCache of `past` tokens (a sliding layer keeps its window's)."""
    if not past:
        return DynamicCache(config=made) if sliding else None
    kept = DynamicCache(config=made)
    kept.update(torch.zeros(batch, 2, past, 4), torch.zeros(batch, 2, past, 4), 0)
    return kept


SHAPES = [  # batch, past tokens, new tokens, window (None: create_causal_mask)
    (1, 0, 7, 3), (2, 0, 9, 5), (1, 0, 4, 9), (2, 3, 4, 5), (1, 9, 7, 5), (2, 9, 1, 5), (1, 4, 1, 3),
    (1, 3, 5, None), (2, 6, 3, None), (1, 0, 6, None),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_a_deferred_mask_is_transformers_mask(translated, shape):
    batch, past, new, window = shape
    create = masking_utils.create_causal_mask if window is None else masking_utils.create_sliding_window_causal_mask
    made = config(window or 4)
    embeds = torch.zeros(batch, new, 16)
    expected = create(made, embeds, None, cache(made, batch, past), torch.arange(past, past + new)[None])
    given = made, embeds, None, cache(made, batch, past), torch.arange(past, past + new)[None]
    with torch2pypto.interpreted(translated), host_ops(translated) as ops:
        got = translated.chosen(config(window))(*given)
    if expected is None:
        assert got is None
        return
    assert hasattr(got, "_pypto_causal_window") and not MASK_OPS & set(ops), ops
    assert got.shape == expected.shape and got.stride() == expected.stride() and got.dtype == expected.dtype
    assert torch.equal(got.clone(), expected)  # any op builds it


def test_any_other_use_builds_the_mask_once(translated):
    made = config(3)
    embeds = torch.zeros(2, 6, 16)
    expected = masking_utils.create_sliding_window_causal_mask(made, embeds, None, None)
    with torch2pypto.interpreted(translated):
        got = translated.sliding(made, embeds, None, None)
    built = []
    maker = got._pypto_made[0]
    got._pypto_made[0] = lambda: built.append(1) or maker()
    alias = got.detach()
    assert hasattr(alias, "_pypto_causal_window") and not built  # autograd's detach: an alias, deferred still
    assert got.untyped_storage().nbytes() == 0
    assert torch.equal(got[:, :, :, :4], expected[:, :, :, :4]) and type(got[:, :, 1]) is torch.Tensor
    assert torch.equal(torch.zeros(6, 6).masked_fill(~got, -1.0), torch.zeros(6, 6).masked_fill(~expected, -1.0))
    assert torch.equal(alias & True, expected) and torch.equal(got.float(), expected.float()) and built == [1]
    assert torch.equal(torch.cat([got, alias]), torch.cat([expected, expected]))  # in a list
    assert got.untyped_storage().data_ptr() == got._pypto_built().untyped_storage().data_ptr()


def _padding(batch, length):
    return torch.ones(batch, length, dtype=torch.long).index_fill(1, torch.tensor([0]), 0)


FALLBACKS = {  # what transformers' function builds, the wrapper cannot prove a plain causal window
    "padding mask": lambda made: dict(attention_mask=_padding(2, 6)),
    "or_mask_function": lambda made: dict(or_mask_function=lambda b, h, q, kv: q >= 0),
    "and_mask_function": lambda made: dict(and_mask_function=lambda b, h, q, kv: kv >= 1),
    "blocks": lambda made: dict(block_sequence_ids=torch.tensor([[0, 0, 1, 1, 1, -1]] * 2)),
    "packed sequences": lambda made: dict(position_ids=torch.tensor([[0, 1, 2, 0, 1, 2]] * 2)),
    "eager attention": lambda made: setattr(made, "_attn_implementation", "eager") or {},
    "not causal": lambda made: setattr(made, "is_causal", False) or {},
}


@pytest.mark.parametrize("case", FALLBACKS)
@pytest.mark.parametrize("window", [3, None])
def test_what_it_cannot_prove_transformers_builds(translated, case, window):
    create = masking_utils.create_causal_mask if window is None else masking_utils.create_sliding_window_causal_mask
    made = config(window or 3)
    given = FALLBACKS[case](made)
    embeds = torch.zeros(2, 6, 16)
    expected = create(made, embeds, past_key_values=None, **{"attention_mask": None, **given})
    with torch2pypto.interpreted(translated):
        got = translated.chosen(config(window))(made, embeds, past_key_values=None, **{"attention_mask": None, **given})
    assert type(got) is type(expected) and not hasattr(got, "_pypto_causal_window")
    assert got is None and expected is None or torch.equal(got, expected) and got.stride() == expected.stride()


def test_off_the_kernel_path_transformers_builds(translated):
    made = config(3)
    got = translated.sliding(made, torch.zeros(1, 6, 16), None, None)  # no launcher, a CPU tensor
    assert type(got) is torch.Tensor and torch.equal(got, masking_utils.create_sliding_window_causal_mask(made, torch.zeros(1, 6, 16), None, None))


ATTENTION = [  # batch, heads, kv heads, past, new, head dim, window (None: create_causal_mask), dtype
    (1, 4, 2, 0, 7, 32, 3, torch.float32),  # window smaller than S, GQA
    (2, 2, 2, 6, 13, 16, 40, torch.float32),  # window larger than S_kv (with S_q == S_kv and no cache, sdpa's is_causal)
    (1, 4, 2, 9, 1, 32, 5, torch.bfloat16),  # decode: S_q 1 against the window's cached keys
    (2, 2, 1, 6, 5, 32, 4, torch.float32),  # a chunk after a cache: S_q != S_kv
    (1, 2, 2, 11, 9, 64, 3, torch.bfloat16),
    (1, 2, 1, 1100, 5, 16, 1050, torch.float32),  # a window wider than the band's (16 + 1024 - 1 keys), two kv tiles
    (1, 2, 2, 5, 6, 32, None, torch.float32),  # create_causal_mask after a cache
    (1, 2, 1, 0, 600, 16, 100, torch.float32),  # two query tiles
]


def _attention_case(shape, grad=False):
    batch, heads, kv_heads, past, new, d, window, dtype = shape
    made = config(window or 4)
    create = masking_utils.create_causal_mask if window is None else masking_utils.create_sliding_window_causal_mask
    embeds = torch.zeros(batch, new, 16, dtype=dtype)
    expected = create(made, embeds, None, cache(made, batch, past))
    keys = expected.shape[-1]
    q = sample(batch, heads, new, d, dtype=dtype)
    k, v = sample(batch, kv_heads, keys, d, dtype=dtype, seed=1), sample(batch, kv_heads, keys, d, dtype=dtype, seed=2)
    return made, create, embeds, expected, [t.requires_grad_() if grad else t for t in (q, k, v)]


@pytest.mark.interpreter
@pytest.mark.parametrize("shape", ATTENTION, ids=lambda s: "-".join(map(str, (*s[:-1], str(s[-1])[6:]))))
def test_the_kernel_computes_the_deferred_mask(translated, shape):
    made, create, embeds, expected, (q, k, v) = _attention_case(shape)
    batch, past = shape[0], shape[3]
    given = made, embeds, None, cache(made, batch, past)
    ran = counting()
    with torch2pypto.interpreted(translated), host_ops(translated) as ops:
        mask = translated.chosen(config(shape[6]))(*given)
        got = translated.attend(q, k, v, mask)
    assert ran() == KERNEL and callable(mask._pypto_made[0]) and not MASK_OPS & set(ops), ops  # never built
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=expected, enable_gqa=True)
    assert got.dtype == reference.dtype and got.shape == reference.shape
    atol, rtol = tolerance(ENTRY, q.dtype, q.shape)
    torch.testing.assert_close(got, reference, atol=atol, rtol=rtol)


@pytest.mark.interpreter
@pytest.mark.parametrize("shape", [ATTENTION[0], ATTENTION[3]], ids=["prefill", "chunk"])
def test_the_gradients_are_torchs(translated, shape):
    made, create, embeds, expected, (q, k, v) = _attention_case(shape, grad=True)

    def attend():
        return translated.attend(q, k, v, translated.chosen(config(shape[6]))(made, embeds, None, cache(made, shape[0], shape[3])))

    assert_sdpa_gradients(translated, attend, (q, k, v), expected, KERNEL)


@pytest.mark.interpreter
def test_a_deferred_mask_the_tiles_do_not_compute_is_built_for_the_kernel(translated):
    """transformers' GQA decode (pack_gqa) puts a kv head's query heads in the query rows: one
    mask row broadcast over them, no causal window of those rows; the kernel reads the mask built."""
    made, create, embeds, expected, (q, k, v) = _attention_case((1, 4, 2, 9, 1, 32, 5, torch.float32))
    packed = q.reshape(1, 2, 2, 32)  # [batch, kv heads, query heads per kv head, d]
    ran = counting()
    with torch2pypto.interpreted(translated):
        mask = translated.chosen(config(5))(made, embeds, None, cache(made, 1, 9))
        got = translated.attend(packed, k, v, mask)
    assert ran() == KERNEL and not callable(mask._pypto_made[0])
    reference = torch.nn.functional.scaled_dot_product_attention(packed, k, v, attn_mask=expected)
    torch.testing.assert_close(got, reference, atol=1e-5, rtol=1e-5)
