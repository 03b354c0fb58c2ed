"""ACT2FN[config.hidden_act]: a module chosen at run time, computed by the kernels of the op its class computes."""

import pytest
import torch

import torch2pypto
from helpers import load, sample, statuses, translate
from torch2pypto.translator.verification.interpreter import counting

MLP = """\
import torch
from torch import nn
from transformers.activations import ACT2FN


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.up = nn.Linear(8, 8)
        self.act_fn = ACT2FN[config.hidden_act]
        if isinstance(config.hidden_act, str):
            self.given = ACT2FN[config.hidden_act]
        else:
            self.given = config.hidden_act
        self.other = ACT2FN[config.hidden_act] if isinstance(config.hidden_act, str) else config.other_act

    def forward(self, x):
        return self.act_fn(x), self.given(x), self.other(x)
"""


def test_a_run_time_name_is_a_site_of_the_registry_converted_by_its_wrapper():
    """BERT's idiom (the lookup if the config names one, else the config's own callable) is the
    registry's module too; a callable of another expression is not known: no site."""
    assert statuses(MLP) == [("transformers.activations.ACT2FN", "converted")] * 2
    code = translate(MLP).code
    assert "return pypto_activation(x, self.act_fn), pypto_activation(x, self.given), self.other(x)" in code


ACT = """\
import torch
from torch import nn
from transformers.activations import ACT2FN


class Act(nn.Module):
    def __init__(self, name):
        super().__init__()
        self.act = ACT2FN[name] if isinstance(name, str) else name

    def forward(self, x):
        return self.act(x)
"""

# name (or a callable) -> kernel launches: each op of its class's call is one
CASES = {
    "silu": 1, "swish": 1, "gelu": 1, "gelu_python": 1, "gelu_new": 1, "gelu_fast": 1, "gelu_pytorch_tanh": 1,
    "gelu_accurate": 1, "quick_gelu": 3, "gelu_10": 2, "relu": 1, "sigmoid": 1, "tanh": 1, "leaky_relu": 1,
    "mish": 1, "relu6": 1, "prelu": 1, "linear": 0, "relu2": 0, "laplace": 0,
}  # fmt: skip
# the original computes in the input's dtype, op by op; a kernel computes in FP32 and rounds once
TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    return load(tmp_path_factory.mktemp("act") / "act_pypto.py", translate(ACT).code)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", CASES)
def test_the_wrapper_runs_the_kernels_of_the_modules_class_with_its_gradient(translated, name, dtype):
    from transformers.activations import ACT2FN

    model = translated.Act(name).to(dtype)
    reference = ACT2FN[name].to(dtype)
    for shape in ((5, 3, 40), (7, 33)):
        x = sample(*shape, dtype=dtype, seed=len(shape)).requires_grad_()
        y = x.detach().clone().requires_grad_()
        launches = counting()
        with torch2pypto.interpreted(translated):
            got = model(x)
        assert sum(launches().values()) == CASES[name], launches()
        expected = reference(y)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
        got.float().square().sum().backward(), expected.float().square().sum().backward()
        torch.testing.assert_close(x.grad, y.grad, **TOLERANCE[dtype])
        for mine, theirs in zip(model.parameters(), reference.parameters()):  # PReLU's weight
            torch.testing.assert_close(mine.grad, theirs.grad, **TOLERANCE[dtype])
            mine.grad = theirs.grad = None


@pytest.mark.interpreter
def test_a_callable_of_another_class_or_an_in_place_module_runs_as_it_is(translated):
    """A config's own function, and nn.ReLU(inplace=True) (which writes its input): torch, no launch."""
    x = sample(5, 40)
    for given, expected in ((torch.nn.functional.softsign, torch.nn.functional.softsign(x)),
                            (torch.nn.ReLU(inplace=True), x.relu())):
        launches = counting()
        with torch2pypto.interpreted(translated):
            got = translated.Act(given)(x.clone())
        assert sum(launches().values()) == 0
        torch.testing.assert_close(got, expected)


def test_linear_returns_its_input_itself(translated):
    x = sample(3, 8)
    with torch2pypto.interpreted(translated):
        assert translated.Act("linear")(x) is x


def test_verify_tries_the_wrapper_on_a_module_of_each_op():
    """--verify has no module to sample from the call: one module per distinct op of the classes
    (the first built without arguments), in each case's dtype, on the first sample shape."""
    from torch2pypto.translator.verification.verify import cases

    (conversion,) = translate(ACT).conversions
    made = cases(conversion, "0")
    names = {c.label.split(" ")[-1] for c in made}
    assert {"SiLUActivation", "GELUActivation", "NewGELUActivation", "QuickGELUActivation", "ReLU", "PReLU"} <= names
    assert "ClippedGELUActivation" not in names and "SiLU" not in names  # bounds needed; SiLUActivation's op
    for case in made:
        x, module = case.args
        assert isinstance(module, torch.nn.Module) and all(p.dtype == x.dtype for p in module.parameters())


GATE = """\
import torch


def apply_gate(self, gate_up_out: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up_out.chunk(2, dim=-1)
    return self.act_fn(gate) * up


def activate(self: torch.nn.Module, x: torch.Tensor, n: int):
    return self.act_fn(x), self.act_fn(n), self.act_fn(x, n), self.norm(x)
"""  # integrations/moe.py's _default_apply_gate: self is any experts class


def test_act_fn_of_a_module_of_no_known_class_is_a_site_of_the_registry():
    """``self.act_fn``, which transformers' classes hold their activation in, called on one
    argument that may be a tensor; not on a number, not with two arguments, nor another attribute."""
    assert statuses(GATE) == [("torch.Tensor.chunk", "host-side"), ("transformers.activations.ACT2FN", "converted"),
                              ("torch.Tensor.__mul__", "converted"), ("transformers.activations.ACT2FN", "converted")]
    code = translate(GATE).code
    assert "return pypto_mul(pypto_activation(gate, self.act_fn), up)" in code
    assert "return pypto_activation(x, self.act_fn), self.act_fn(n), self.act_fn(x, n), self.norm(x)" in code


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_act_fn_of_no_known_class_runs_the_kernel_of_the_modules_class_at_run_time(tmp_path, dtype):
    """The module's class, known at run time only, picks the kernel (SiLUActivation, nn.SiLU: silu;
    GELUTanh: gelu); any other callable runs as it is. Values and gradients as torch's."""
    from transformers.activations import ACT2FN

    module = load(tmp_path / "gate_pypto.py", translate(GATE, fuse=False).code)
    holder = type("Experts", (), {})()  # any class
    for act, silu in ((ACT2FN["silu"], 1), (torch.nn.SiLU(), 1), (ACT2FN["gelu_pytorch_tanh"], 0), (torch.nn.functional.softsign, 0)):
        holder.act_fn = act
        x = sample(7, 2 * 37, dtype=dtype).requires_grad_()
        y = x.detach().clone().requires_grad_()
        launches = counting()
        with torch2pypto.interpreted(module):
            got = module.apply_gate(holder, x)
        assert launches()["silu_kernel.kernel"] == silu and launches()["mul_kernel.kernel"] == 1, launches()
        gate, up = y.chunk(2, dim=-1)
        expected = act(gate) * up
        torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
        got.float().square().sum().backward(), expected.float().square().sum().backward()
        torch.testing.assert_close(x.grad, y.grad, **TOLERANCE[dtype])
