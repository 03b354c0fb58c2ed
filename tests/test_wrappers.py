"""Wrappers behave as torch beyond values: device, dtype, shape, strides and aliasing, under the
interpreter (each kernel case counts its launch)."""

import pytest
import torch

import torch2pypto
from helpers import translate
from table_cases import load
from torch2pypto.translator.verification import interpreter

pytestmark = pytest.mark.interpreter

SOURCE = """\
import torch


def type_as(x: torch.Tensor, y: torch.Tensor):
    return x.type_as(y)


def to_half(x: torch.Tensor, dev):
    return x.to(dev, torch.float16)


def to_float(x: torch.Tensor, dev):
    return x.to(dev, dtype=torch.float32)


def exp(x: torch.Tensor):
    return torch.exp(x)


def scale(x: torch.Tensor):
    return torch.mul(0.5, x)


def clamp(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor):
    return x.clamp(min=lo), torch.clamp(x, max=hi), torch.clamp(x, lo, hi)
"""


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wrappers")
    (folder / "original.py").write_text(SOURCE)
    translation = translate(SOURCE)
    assert {r.status for r in translation.records} == {"converted"}, translation.records
    (folder / "translated.py").write_text(translation.code)
    return load(folder / "translated.py"), load(folder / "original.py")


def same(got, expected):
    assert (got.device, got.dtype, got.shape, got.stride()) == (
        expected.device, expected.dtype, expected.shape, expected.stride())
    if expected.device.type != "meta":
        torch.testing.assert_close(got, expected)


def run(modules, name, *args, kernel=True):
    translated, original = modules
    expected = getattr(original, name)(*args)
    launched = interpreter.counting()
    with torch2pypto.interpreted(translated):
        got = getattr(translated, name)(*args)
    assert (sum(launched().values()) > 0) == kernel, launched()
    same(got, expected)
    for arg in args:
        assert (got is arg) == (expected is arg), "aliasing differs"
    return got


def test_type_as_follows_others_device_as_torch_does(modules):
    x = torch.randn(3, 37)
    assert run(modules, "type_as", x, torch.empty(2, device="meta", dtype=torch.float16), kernel=False).is_meta
    run(modules, "type_as", x, torch.empty(2, dtype=torch.float16))


def test_a_no_op_cast_returns_the_input_itself(modules):
    x = torch.randn(3, 37)
    assert run(modules, "type_as", x, torch.empty(1), kernel=False) is x
    assert run(modules, "to_float", x, x.device, kernel=False) is x
    run(modules, "to_half", x, "cpu")


@pytest.mark.parametrize("name, args", [("exp", ()), ("scale", ()), ("to_half", ("cpu",))])
def test_results_of_transposed_inputs_keep_torchs_strides(modules, name, args):
    x = torch.randn(37, 5).t()
    run(modules, name, x, *args)


def test_clamp_with_tensor_bounds_keeps_torchs_gradient_where_the_input_meets_a_bound(modules):
    """torch.clamp passes the gradient to x where x == min, torch.maximum splits it: the tensor
    forms' kernels are maximum's and minimum's, their gradient clamp's."""
    translated, original = modules
    x = torch.tensor([[-1.0, 0.0, 0.5, 1.0, 2.0]]).repeat(3, 1)
    lo, hi = torch.zeros(5), torch.ones(3, 5)
    grads = []
    for module in (translated, original):
        leaves = [t.clone().requires_grad_() for t in (x, lo, hi)]
        launched = interpreter.counting()
        with torch2pypto.interpreted(translated):
            results = module.clamp(*leaves)
        assert (sum(launched().values()) == 3) == (module is translated), launched()
        sum(r.sum() * (i + 1) for i, r in enumerate(results)).backward()
        grads.append(([r.detach() for r in results], [t.grad for t in leaves]))
    (got, got_grads), (expected, expected_grads) = grads
    for g, e in zip(got + got_grads, expected + expected_grads):
        torch.testing.assert_close(g, e)
