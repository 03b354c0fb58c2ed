"""Calls with ``*args``/``**kwargs``: a family that takes the rest (Family.takes_rest, today
attention) converts them, binding what it can statically and passing the call's arguments
through, and its wrapper checks the rest at run time; transformers' own sdpa_attention_forward,
translated, launches the kernel with its ``**sdpa_kwargs``. Other families keep such calls torch."""

import importlib.util
import sys
import types

import pytest
import torch

import torch2pypto
from helpers import load, qkv, sample, translate
from torch2pypto.mapping import TableError, build_table, load_table
from torch2pypto.mapping.tolerance import tolerance
from torch2pypto.translator.engine.binding import BindError, ast_args, bind
from torch2pypto.translator.verification.interpreter import counting

SDPA_API = "torch.nn.functional.scaled_dot_product_attention"
ENTRY = load_table().by_api[SDPA_API]
KERNEL = {"scaled_dot_product_attention_kernel.kernel": 1}
REST = """\
import torch
import torch.nn.functional as F


def f(q: torch.Tensor, k, v, mask=None, **kwargs):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)


def packed(qkv, *args, **kwargs):
    return F.scaled_dot_product_attention(*qkv, *args, **kwargs)
"""


def _bound(call: str, rest=True):
    import ast

    node = ast.parse(call, mode="eval").body
    return {name: ast.unparse(value) for name, value in bind(ENTRY.params, ast_args(node), rest=rest).items()}


def test_bind_takes_what_binds_statically_before_the_first_star_and_the_keywords():
    assert _bound("f(q, k, v, m, **kw)") == {"query": "q", "key": "k", "value": "v", "attn_mask": "m"}
    assert _bound("f(q, *kv, scale=s, **kw)") == {"query": "q", "scale": "s"}  # key, value: from *kv at run time
    assert _bound("f(*qkv, m, dropout_p=0.1)") == {"dropout_p": "0.1"}  # m's position is unknown
    with pytest.raises(BindError, match="cannot be bound statically"):
        _bound("f(q, k, v, **kw)", rest=False)
    with pytest.raises(BindError, match="unexpected keyword argument 'window'"):
        _bound("f(q, k, v, window=3, **kw)")  # torch refuses it whatever **kw holds
    with pytest.raises(BindError, match="given twice"):
        _bound("f(q, k, v, m, attn_mask=m, **kw)")


def test_calls_with_stars_convert_and_pass_their_arguments_through():
    translation = translate(REST)
    assert [(r.api, r.status) for r in translation.records] == [(SDPA_API, "converted")] * 2
    assert "return pypto_scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)" in translation.code
    assert "return pypto_scaled_dot_product_attention(*qkv, *args, **kwargs)" in translation.code
    assert "enable_gqa=False, **kwargs):" in translation.code  # the wrapper hands unknown keywords to torch


def test_a_translated_call_with_stars_is_converted_on_a_second_run_which_changes_nothing():
    once = translate(REST).code
    again = translate(once)
    assert again.code == once
    assert [(r.api, r.status) for r in again.records] == [(SDPA_API, "converted")] * 2


def test_what_binds_statically_is_still_checked_and_other_families_keep_stars_torch():
    dropout = translate(REST.replace("attn_mask=mask, **kwargs", "attn_mask=mask, dropout_p=0.1, **kwargs")).records[0]
    assert dropout.status == "unsupported" and "dropout" in dropout.reason
    softmax = translate("import torch\n\n\ndef f(x: torch.Tensor, **kw):\n    return torch.softmax(x, **kw)\n").records
    assert [(r.status, r.reason) for r in softmax] == [("unsupported", "*args/**kwargs cannot be bound statically")]


def test_a_family_that_takes_the_rest_rejects_nothing():
    import tomllib
    from importlib import resources

    raw = tomllib.loads(resources.files("torch2pypto.mapping").joinpath("ops.toml").read_text())
    body = raw["scaled_dot_product_attention"]
    with pytest.raises(TableError, match="whole signature: no reject"):
        build_table({**raw, "scaled_dot_product_attention": {**body, "reject": {"enable_gqa": "no"}}})


def test_verify_samples_a_starred_call_s_operands_as_written_ones():
    """--verify gives the parameters a starred argument passes at run time (packed's q, k, v)
    sample operands, as it does written ones."""
    from torch2pypto.translator.verification import verify

    for conversion in translate(REST).conversions:
        cases = verify.cases(conversion, "0")
        assert len(cases) == 3 * len(ENTRY.sample.shapes)
        for case in cases:
            q, k, v = case.args
            assert q.dtype == k.dtype == v.dtype and q.shape[-1] == k.shape[-1] and k.shape == v.shape


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return load(tmp_path_factory.mktemp("rest") / "rest_pypto.py", translate(REST).code)


def _close(got, expected):
    atol, rtol = tolerance(ENTRY, expected.dtype, expected.shape)
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "shape, kwargs",
    [
        ((1, 2, 2, 13, 13, 64, torch.float32), {}),
        ((2, 4, 2, 13, 13, 64, torch.float32), {"enable_gqa": True}),
        ((1, 4, 1, 7, 33, 80, torch.bfloat16), {"enable_gqa": True, "scale": 0.3, "is_causal": False}),
        ((1, 2, 2, 33, 33, 64, torch.float32), {"is_causal": True, "dropout_p": 0.0}),
    ],
    ids=["none", "gqa", "mqa-scale-bf16", "causal"],
)
def test_the_wrapper_launches_with_the_keywords_it_honours(module, shape, kwargs):
    q, k, v = qkv(*shape)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
    for call in (lambda: module.f(q, k, v, **kwargs), lambda: module.packed((q, k), v, **kwargs)):
        ran = counting()
        with torch2pypto.interpreted(module):
            got = call()
        assert ran() == KERNEL
        _close(got, expected)


@pytest.mark.interpreter
def test_keywords_the_kernel_cannot_honour_run_torch(module, monkeypatch):
    """A dropout or a GQA without enable_gqa from **kwargs, an unknown keyword (torch's own
    error), and one that a torch taking it computes (a later torch's keyword: torch's result)."""
    q, k, v = qkv(1, 4, 2, 7, 7, 64)
    ran = counting()
    with torch2pypto.interpreted(module):
        torch.manual_seed(0)
        got = module.f(q, k, v, dropout_p=0.5, enable_gqa=True)
        torch.manual_seed(0)
        torch.testing.assert_close(got, torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5, enable_gqa=True))
        with pytest.raises(RuntimeError) as expected:
            torch.nn.functional.scaled_dot_product_attention(q, k, v)
        with pytest.raises(RuntimeError) as refused:
            module.f(q, k, v, **{})
        assert str(refused.value) == str(expected.value)
        with pytest.raises(TypeError) as expected:
            torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True, window=3)
        with pytest.raises(TypeError) as refused:
            module.f(q, k, v, enable_gqa=True, window=3)
        assert str(refused.value) == str(expected.value)
        original = torch.nn.functional.scaled_dot_product_attention

        def later_torch(*args, window=None, **kwargs):
            return original(*args, **kwargs) * 2

        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", later_torch)
        torch.testing.assert_close(module.f(q, k, v, enable_gqa=True, window=3), later_torch(q, k, v, enable_gqa=True))
    assert ran() == {}


TRANSFORMERS_SDPA = "transformers.integrations.sdpa_attention"


@pytest.fixture(scope="module")
def sdpa_attention(tmp_path_factory):
    """transformers' integrations/sdpa_attention.py, translated, loaded in its package."""
    original = importlib.import_module(TRANSFORMERS_SDPA)
    translation = translate(open(original.__file__).read())
    assert (SDPA_API, "converted") in [(r.api, r.status) for r in translation.records]
    assert "pypto_scaled_dot_product_attention(" in translation.code and "**sdpa_kwargs," in translation.code
    name = f"{TRANSFORMERS_SDPA}_pypto"
    path = tmp_path_factory.mktemp("sdpa_attention") / "sdpa_attention_pypto.py"
    path.write_text(translation.code)
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    spec.loader.exec_module(loaded)
    yield original, loaded
    del sys.modules[name]


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "s_q, s_kv, mask",
    [(13, 13, False), (7, 7, True), (1, 13, True)],
    ids=["gqa-by-sdpa-kwargs-causal", "repeat-kv-with-mask", "decode-pack-gqa"],
)
def test_transformers_sdpa_attention_forward_translated_launches_the_kernel(sdpa_attention, s_q, s_kv, mask):
    """Its three GQA paths: enable_gqa through **sdpa_kwargs (no mask), repeat_kv (a mask), and
    pack_gqa (decode); one launch each, as the original computes."""
    original, translated = sdpa_attention
    layer = types.SimpleNamespace(num_key_value_groups=2, is_causal=True, layer_idx=0)
    q, k, v = qkv(2, 4, 2, s_q, s_kv, 64)
    attention_mask = sample(2, 1, s_q, s_kv, seed=3) * 3 if mask else None
    expected, _ = original.sdpa_attention_forward(layer, q, k, v, attention_mask, scaling=0.125)
    ran = counting()
    with torch2pypto.interpreted(translated):
        got, _ = translated.sdpa_attention_forward(layer, q, k, v, attention_mask, scaling=0.125)
    assert ran() == KERNEL
    _close(got, expected)


@pytest.mark.interpreter
def test_a_llama_whose_attention_is_the_translated_sdpa_attention_forward_matches_the_original(sdpa_attention):
    """transformers' default attention path end to end: a tiny GQA LlamaForCausalLM with its
    attention interface set to the translated sdpa_attention_forward launches one kernel per
    layer and gives the original's logits, without a mask (is_causal) and with a padding mask."""
    from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM

    _, translated = sdpa_attention
    AttentionInterface.register("pypto_sdpa", translated.sdpa_attention_forward)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    torch.manual_seed(0)
    original = LlamaForCausalLM._from_config(config, attn_implementation="sdpa").eval()
    model = LlamaForCausalLM._from_config(config, attn_implementation="pypto_sdpa").eval()
    model.load_state_dict(original.state_dict())
    ids = torch.randint(0, 128, (2, 11), generator=torch.Generator().manual_seed(1))
    for mask in (None, torch.ones(2, 11, dtype=torch.long).index_fill(1, torch.tensor([0]), 0)):
        ran = counting()
        with torch.no_grad(), torch2pypto.interpreted(translated):
            got = model(ids, attention_mask=mask).logits
        assert ran() == {"scaled_dot_product_attention_kernel.kernel": 2}
        with torch.no_grad():
            torch.testing.assert_close(got, original(ids, attention_mask=mask).logits)
