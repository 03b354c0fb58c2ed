"""Paired joins: two torch.cat along one dim in a row (a cache's keys and values) as one launch.

The interpreter cases run a DynamicCache-like layer's updates against the original: the first
from an empty cache, then steps of odd lengths, keys transposed as attention reads them, FP32,
FP16 and BF16, with grad; each update launches the pair's kernel once and nothing else.
"""

import pytest
import torch

import torch2pypto
from torch2pypto import Options
from torch2pypto.translator.verification.interpreter import counting
from torch2pypto.translator.verification.verify import region_cases

from helpers import module
from test_epilogues import original, translated

CACHE = """\
import torch


class Layer:
    def __init__(self):
        self.keys = None
        self.values = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor):
        if self.keys is None:
            self.keys = torch.tensor([], dtype=key_states.dtype, device=key_states.device)
            self.values = torch.tensor([], dtype=key_states.dtype, device=key_states.device)
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        return self.keys, self.values
"""


def function(body: str) -> str:
    return ("import torch\n\n\n"
            f"def f(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor):\n    {body}\n    return x, y\n")


def test_the_pair_is_one_statement_and_one_region():
    translation = translated(CACHE)
    (region,) = translation.regions
    assert region.wrapper.endswith("_2sites") and region.kernel == "join2_pair_kernel" and region.rank == 2
    assert (f"        self.keys, self.values = {region.wrapper}(self.keys, key_states, self.values, value_states)\n"
            "        return self.keys, self.values\n") in translation.code
    assert [r.status for r in translation.records if r.api == "torch.cat"] == ["converted", "converted"]
    assert translated(translation.code).code == translation.code  # translating again changes nothing


def test_verify_samples_operands_a_join_along_the_dim_takes():
    (region,) = translated(CACHE).regions
    cases = region_cases(region, "r0")
    assert cases and all(a.dim() >= 2 for case in cases for a in case.args)  # no 1-D sample: dim -2 would raise


def test_no_fuse_keeps_a_launch_per_join():
    code = translated(CACHE, Options(fuse=False)).code
    assert "pypto_fused" not in code and "join2_pair_kernel" not in code
    assert code.count("pypto_cat2([self.") == 2


@pytest.mark.parametrize("body", [
    "x = torch.cat([a, b], dim=1)\n    y = torch.cat([c, x], dim=1)",  # reads what the first assigned
    "x = torch.cat([a, b], dim=1)\n    y = torch.cat([c, d], dim=0)",  # another dim
    "x = torch.cat([a, b], dim=1)\n    y = torch.cat([c, d, a], dim=1)",  # another count
    "x = torch.cat([a, b], dim=1)\n    # the values\n    y = torch.cat([c, d], dim=1)",  # a comment between
    "x = torch.cat([a, b], dim=1)  # the keys\n    y = torch.cat([c, d], dim=1)",  # a comment after
    "x = torch.cat([a, b], dim=1)\n    y = torch.cat([c, d.float()], dim=1)",  # a call evaluated early
    "x = torch.cat([a, b], dim=1)\n    y = torch.cat([c * 2, d], dim=1)",  # another site inside
    "x = torch.cat([a, b], dim=a.dim() - 1)\n    y = torch.cat([c, d], dim=a.dim() - 1)",  # no literal dim
    "x = torch.cat([a, b], dim=1); y = torch.cat([c, d], dim=1)",  # one line
    "x = y = torch.cat([a, b], dim=1)\n    y = torch.cat([c, d], dim=1)",  # two targets
])
def test_what_is_no_pair_stays_a_join_each(body):
    translation = translated(function(body))
    assert not any(r.kernel.endswith("_pair_kernel") for r in translation.regions), body
    assert "pypto_cat" in translation.code


def test_names_the_wrapper_uses_are_renamed_apart():
    code = translated(function("joined = a\n    x = torch.cat([joined, b], dim=1)\n    y = torch.cat([c, d], dim=1)")).code
    assert "(joined_1, b, c, d)" in code


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cache_updates_are_one_launch_each_and_match_torch(dtype):
    mod, reference = module(translated(CACHE).code), original(CACHE)["Layer"]
    layer, expected = mod.Layer(), reference()
    torch.manual_seed(0)
    for step, length in enumerate((7, 1, 1, 3)):
        q = torch.randn(2, length, 3, 10).to(dtype)  # [batch, seq, heads, head_dim]
        key_states, value_states = q.transpose(1, 2), torch.randn(2, 3, length, 10).to(dtype)  # the key a transposed view
        ran = counting()
        with torch2pypto.interpreted(mod):
            got = layer.update(key_states, value_states)
        assert ran() == {"join2_pair_kernel.kernel": 1}, (step, ran())
        want = expected.update(key_states, value_states)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape and g.is_contiguous()
            assert g.untyped_storage().data_ptr() not in (key_states.untyped_storage().data_ptr(), value_states.untyped_storage().data_ptr())
            torch.testing.assert_close(g, w, atol=0, rtol=0)  # joins copy: exact


@pytest.mark.interpreter
def test_joins_keep_torch_gradients():
    mod = module(translated(function("x = torch.cat([a, b], dim=1)\n    y = torch.cat([c, d], dim=1)")).code)
    torch.manual_seed(1)
    inputs = [torch.randn(3, n, 5, requires_grad=True) for n in (2, 3, 4, 1)]
    ran = counting()
    with torch2pypto.interpreted(mod):
        x, y = mod.f(*inputs)
    (x.square().sum() + 3 * y.sum()).backward()
    assert ran() == {"join2_pair_kernel.kernel": 1}
    got = [t.grad for t in inputs]
    for t in inputs:
        t.grad = None
    (torch.cat(inputs[:2], dim=1).square().sum() + 3 * torch.cat(inputs[2:], dim=1).sum()).backward()
    torch.testing.assert_close(got, [t.grad for t in inputs])


@pytest.mark.interpreter
@pytest.mark.parametrize("other, launches", [(torch.float16, {"join2_kernel.kernel": 2}), (torch.int64, {"join2_kernel.kernel": 1})])
def test_joins_of_two_dtypes_run_a_join_each(other, launches):
    """Floats and int ids (SAM's points and labels): the float join keeps its own kernel."""
    mod = module(translated(function("x = torch.cat([a, b], dim=1)\n    y = torch.cat([c, d], dim=1)")).code)
    inputs = [torch.randn(2, 3, 4), torch.randn(2, 1, 4), *(torch.randint(0, 9, (2, n, 4)).to(other) for n in (3, 2))]
    ran = counting()
    with torch2pypto.interpreted(mod):
        x, y = mod.f(*inputs)
    assert ran() == launches
    for got, want in zip((x, y), (torch.cat(inputs[:2], dim=1), torch.cat(inputs[2:], dim=1)), strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=0, rtol=0)
