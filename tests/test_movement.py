"""The movement, triangle and one_hot families beyond their generated cases (test_kernels.py):
entries they refuse, one kernel per tensor count, gradients."""

import importlib.util
import re

import pytest
import torch

import torch2pypto
from torch2pypto import translate_source
from torch2pypto.mapping import TableError, build_table
from torch2pypto.translator.verification import interpreter

CAT = {"category": "same-name-different-params", "family": "movement", "apis": ["torch.cat"], "pypto": "assemble",
       "signature": "(tensors: Tensors, dim: int = 0)", "args": {"layout": "cat"}, "dtypes": ["float32"],
       "examples": {"convert": ["torch.cat([x, y])"]}}  # fmt: skip
TRIL = {"category": "composite", "family": "triangle", "apis": ["torch.tril"], "pypto": "le+where",
        "signature": "(input: Tensor, diagonal: int = 0)", "args": {"keep": "le"}, "dtypes": ["float32"],
        "examples": {"convert": ["torch.tril(x)"]}}  # fmt: skip


@pytest.mark.parametrize(
    "op, body, message",
    [
        ("cat", {**CAT, "args": {"layout": "zip"}}, "args.layout is one of cat, stack"),
        ("cat", {**CAT, "pypto": "concat"}, "not pypto.concat"),
        ("cat", {**CAT, "signature": "(tensors: Tensors, dim: int = 0, scale: Number = 1.0)"}, "a cat takes (tensors, dim)"),
        ("cat", {**CAT, "dtypes": ["int32"]}, "movement kernels take float dtypes"),
        ("tril", {**TRIL, "args": {"keep": "lt"}}, 'keep = "le"'),
        ("tril", {**TRIL, "pypto": "tril"}, '"le+where"'),
        ("one_hot", {**TRIL, "family": "one_hot", "pypto": "one_hot", "args": {}}, "(input, num_classes)"),
    ],
)
def test_an_entry_these_families_cannot_honour_is_refused(op, body, message):
    with pytest.raises(TableError, match=re.escape(message)):
        build_table({op: body})


def test_each_tensor_count_has_its_wrapper_and_kernel():
    code = "import torch\n\n\ndef f(a, b, c):\n    return torch.cat([a, b], -1), torch.cat((a, b, c)), torch.stack([a, b])\n"
    out = translate_source(code).code
    assert "pypto_cat2([a, b], dim=-1), pypto_cat3((a, b, c)), pypto_stack2([a, b])" in out
    assert out.count("def assemble2_kernel(") == 1 and "def assemble3_kernel(" in out
    assert "x2: pypto.Tensor([pypto.DYNAMIC, cols[2]], dtype)" in out and "torch.cat(" in out  # the fallback


def _load(tmp_path, source):
    path = tmp_path / "moved.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("moved", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.interpreter
def test_gradients_flow_through_every_tensor_of_a_join_and_a_move(tmp_path):
    code = ("import torch\nimport torch.nn.functional as F\n\n\ndef f(x: torch.Tensor, y: torch.Tensor):\n"
            "    return torch.cat([x, y], -1) * 2 + torch.stack((y, x), -1).flatten(-2), F.pad(x, (1, 2), value=3.0), x.tril(1)\n")
    module = _load(tmp_path, translate_source(code).code)
    x, y = torch.randn(5, 19, requires_grad=True), torch.randn(5, 19, requires_grad=True)
    upstream = [torch.randn(5, 38), torch.randn(5, 22), torch.randn(5, 19)]
    launched = interpreter.counting()
    with torch2pypto.interpreted(module):
        got = module.f(x, y)
    assert sum(launched().values()) == 4, launched()
    sum((g * u).sum() for g, u in zip(got, upstream)).backward()
    grads = x.grad, y.grad
    x.grad = y.grad = None
    namespace = {}
    exec(code, namespace)
    expected = namespace["f"](x, y)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    sum((e * u).sum() for e, u in zip(expected, upstream)).backward()
    torch.testing.assert_close(grads, (x.grad, y.grad))
