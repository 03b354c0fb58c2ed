"""Every tensor op is a site (issue 18 point 1): the repros of ../shared/repros/gap_*.py, each a
call the report once did not count, now a site, converted where its entry converts it."""

import importlib.util

import pytest
import torch

import torch2pypto
from helpers import statuses, translate
from torch2pypto.translator.run.cli import main
from torch2pypto.translator.verification.interpreter import counting

HEAD = "import torch\nfrom torch import nn\n"

SETTER = HEAD + """
class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lm_head = nn.Linear(8, 4, bias=False)

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def forward(self, x):
        return self.lm_head(x)
"""

CONDITIONAL = HEAD + """
class Attn(nn.Module):
    def __init__(self, rank=None):
        super().__init__()
        self.q_a = nn.Linear(64, 32) if rank is not None else None
        self.q_b = nn.Linear(32, 64) if rank is not None else None
        self.o = nn.Linear(64, 64)

    def forward(self, x):
        return self.o(self.q_b(self.q_a(x)))
"""

INHERITED = HEAD + """
class Lin(nn.Linear):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        y = self.weight @ input.T
        return y.T + self.bias.float()
"""

BADDBMM = HEAD + """
class M(nn.Module):
    def forward(self, alibi, q, k):
        a = alibi.baddbmm(batch1=q, batch2=k, beta=1.0, alpha=0.5)
        b = torch.baddbmm(alibi, q, k)
        return a + b
"""

MODULES = HEAD + """
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, stride=2, groups=2)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.act = nn.ReLU()
        self.skip = nn.Identity()

    def forward(self, x):
        return self.skip(self.pool(self.act(self.bn(self.conv(x)))))
"""


def test_a_setter_of_the_attribute_leaves_the_held_linear_a_site_that_converts():
    assert statuses(SETTER) == [("torch.nn.Linear", "converted")]
    assert "return pypto_linear(x, self.lm_head.weight, bias=self.lm_head.bias)" in translate(SETTER).code


def test_a_setter_storing_another_module_constructed_there_still_hides_the_class():
    swapped = SETTER.replace("self.lm_head = new_embeddings", "self.lm_head = nn.Identity()")
    assert statuses(swapped) == []


def test_a_linear_or_none_attribute_is_the_linear():
    assert statuses(CONDITIONAL) == [("torch.nn.Linear", "converted")] * 3
    code = translate(CONDITIONAL).code
    assert "pypto_linear(pypto_linear(pypto_linear(x, self.q_a.weight" in code


@pytest.mark.interpreter
def test_a_linear_or_none_runs_its_kernels_and_matches_the_module(tmp_path):
    path = tmp_path / "attn_pypto.py"
    path.write_text(translate(CONDITIONAL).code)
    spec = importlib.util.spec_from_file_location("attn_pypto", path)
    translated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(translated)
    torch.manual_seed(0)
    model = translated.Attn(rank=4)
    x = torch.randn(5, 64)
    expected = model.o(model.q_b(model.q_a(x)))
    launches = counting()
    with torch.no_grad(), torch2pypto.interpreted(translated):
        got = model(x)
    assert sum(launches().values()) == 3
    torch.testing.assert_close(got, expected.detach(), rtol=1e-3, atol=1e-3)


def test_the_inherited_weight_and_bias_of_a_linear_subclass_are_tensors():
    """FalconLinear: `input @ self.weight.T`; the weight as a receiver once was ambiguous."""
    assert sorted(statuses(INHERITED)) == [
        ("torch.Tensor.__add__", "converted"), ("torch.Tensor.__matmul__", "converted"),
        ("torch.Tensor.float", "converted"),
    ]  # fmt: skip
    plain = INHERITED.replace("class Lin(nn.Linear)", "class Lin(nn.Module)")
    assert ("torch.Tensor.float", "left-alone") in statuses(plain)


def test_bloom_s_method_baddbmm_is_a_site():
    """bloom's `alibi.baddbmm(...)`: the method form is a site as the function is (the table's
    baddbmm; alpha=0.5 keeps it torch with the reason)."""
    records = translate(BADDBMM).records
    assert [(r.api, r.status, r.reason) for r in records if "baddbmm" in r.api] == [
        ("torch.Tensor.baddbmm", "unsupported", "alpha= other than 1 scales the product, which the kernel stores as it is"),
        ("torch.baddbmm", "converted", ""),
    ]
    assert "alibi.baddbmm(batch1=q" in translate(BADDBMM).code


def test_a_tensor_method_outside_the_table_is_a_site_left_as_torch():
    code = HEAD + "class M(nn.Module):\n    def forward(self, x):\n        return x.lerp(x, 0.5)\n"
    assert [(r.api, r.status, r.reason) for r in translate(code).records] == [
        ("torch.Tensor.lerp", "unsupported", "not in the mapping table"),
    ]


def test_a_method_outside_the_table_on_a_value_not_known_a_tensor_is_no_site():
    code = HEAD + "def f(x):\n    return x.lerp(x, 0.5)\n"
    assert statuses(code) == []
    assert statuses(code, assume_tensors=True) == [("torch.Tensor.lerp", "unsupported")]


def test_every_held_torch_nn_module_is_a_site_under_its_class_name():
    records = translate(MODULES).records
    assert sorted((r.api, r.status) for r in records) == [
        ("torch.nn.AdaptiveAvgPool2d", "converted"), ("torch.nn.BatchNorm2d", "converted"),
        ("torch.nn.Conv2d", "unsupported"), ("torch.nn.ReLU", "converted"),
    ]  # fmt: skip; nn.Identity computes nothing: no site
    reasons = {r.api: r.reason for r in records if r.status == "unsupported"}
    # the conv family maps Conv2d; a conv of two groups of two channels is neither a contraction nor shifted reads
    assert reasons["torch.nn.Conv2d"].startswith("groups=2 of in_channels=4: a conv2d other than a contraction")


@pytest.mark.parametrize("fail_under, code", [(70, 0), (80, 1)])
def test_fail_under_counts_the_modules_left_as_torch(tmp_path, capsys, fail_under, code):
    source = tmp_path / "block.py"
    source.write_text(MODULES)
    assert main([str(source), "--analyze", "--fail-under", str(fail_under)]) == code
    assert "Conversion rate 75.0%" in capsys.readouterr().err  # ReLU, BatchNorm2d and AdaptiveAvgPool2d of 4 sites


ACTIVATIONS = """\
import torch
from torch import nn
from transformers.activations import ACT2FN, get_activation


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.act_fn = ACT2FN[config.hidden_act]
        self.silu = ACT2FN["silu"]
        self.gelu = get_activation("gelu")
        self.quick = ACT2FN["quick_gelu"]

    def forward(self, x):
        return self.act_fn(x), self.silu(x), self.gelu(x), self.quick(x)
"""


def test_transformers_activations_are_the_ops_they_compute():
    """ACT2FN["silu"] is nn.SiLU's op (torch.toml's module.activations); a name chosen at run time
    or one no torch.nn class computes is a site under the registry's name, whose wrapper picks
    the op by the module's class (test_activation.py)."""
    assert sorted(statuses(ACTIVATIONS)) == [
        ("torch.nn.GELU", "converted"), ("torch.nn.SiLU", "converted"),
        ("transformers.activations.ACT2FN", "converted"), ("transformers.activations.ACT2FN", "converted"),
    ]  # fmt: skip
    code = translate(ACTIVATIONS).code
    assert "return pypto_activation(x, self.act_fn), pypto_silu(x), pypto_gelu(x), pypto_activation(x, self.quick)" in code


@pytest.mark.interpreter
def test_a_literal_activation_runs_its_kernels_and_matches_transformers(tmp_path):
    path = tmp_path / "act_pypto.py"
    path.write_text(translate(ACTIVATIONS).code)
    spec = importlib.util.spec_from_file_location("act_pypto", path)
    translated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(translated)
    model = translated.MLP(type("Config", (), {"hidden_act": "relu"})())
    x = torch.randn(3, 37)
    expected = [model.act_fn(x), model.silu(x), model.gelu(x), model.quick(x)]
    launches = counting()
    with torch2pypto.interpreted(translated):
        got = model(x)
    assert sum(launches().values()) == 6  # relu (the run-time name), silu, gelu, and quick_gelu's mul, sigmoid, mul
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("call", ["x.detach()", "x.narrow(0, 0, 1)", "x.unflatten(0, (1, -1))", "x.repeat(2, 1)", "x.copy_(x)", "x.requires_grad_()"])
def test_views_copies_and_flags_newly_counted_are_host_side(call):
    """Tensor methods that became sites and compute nothing a kernel would: outside the rate."""
    assert statuses(HEAD + f"def f(x: torch.Tensor):\n    return {call}\n") == [(f"torch.Tensor.{call[2:call.index('(')]}", "host-side")]


IDEMPOTENT = HEAD + """
class Decoder(nn.Module):
    def __init__(self, project):
        super().__init__()
        self.embed_tokens = nn.Embedding(10, 8)
        if project:
            self.project_in = nn.Linear(8, 8, bias=False)
        else:
            self.project_in = None

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(self, ids, pos):
        h = self.embed_tokens(ids)
        if self.project_in is not None:
            h = self.project_in(h)
        return h + pos
"""


def test_what_a_held_module_returns_is_a_tensor_as_its_site_is_one():
    """OPT: a module call that converts is a tensor to the inference too, so the operator on its
    result converts in the first translation, and a second changes nothing."""
    once = translate(IDEMPOTENT).code
    assert "return pypto_add(h, pos)" in once
    assert translate(once).code == once
