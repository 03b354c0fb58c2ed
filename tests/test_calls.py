"""Per op: the four call shapes bind as torch binds them, and unsupported forms stay torch.

The translated snippet runs on CPU, where each wrapper takes its torch path with the arguments
it was given: equal results prove the call was rewritten with the right binding. The kernels
themselves are checked in the interpreter by test_kernels.py.
"""

import pytest
import torch

from helpers import run, sample, translate

# op -> (all positional, all keyword, keywords shuffled, defaults omitted)
SHAPES = {
    "sum": ("torch.sum(x, -1, True)", "torch.sum(input=x, dim=-1, keepdim=True)",
            "torch.sum(keepdim=True, input=x, dim=-1)", "torch.sum(x)"),
    "mean": ("torch.mean(x, (0, 1), False)", "torch.mean(input=x, dim=(0, 1), keepdim=False)",
             "torch.mean(dim=(0, 1), input=x, keepdim=False)", "torch.mean(x)"),
    "pow": ("torch.pow(x, 2)", "torch.pow(input=x, exponent=2)", "torch.pow(exponent=2, input=x)", "x.pow(2)"),
    "add": ("torch.add(x, y)", "torch.add(input=x, other=y)", "torch.add(other=y, input=x)", "x.add(y)"),
    "sub": ("torch.sub(x, 1.5)", "torch.sub(input=x, other=1.5)", "torch.sub(other=1.5, input=x)", "x.sub(1.5)"),
    "mul": ("torch.mul(x, y)", "torch.mul(input=x, other=y)", "torch.mul(other=y, input=x)", "x.mul(y)"),
    "div": ("torch.div(x, y)", "torch.div(input=x, other=y)", "torch.div(other=y, input=x)", "x.div(y)"),
    "maximum": ("torch.maximum(x, y)", "torch.maximum(input=x, other=y)", "torch.maximum(other=y, input=x)", "x.maximum(y)"),
    "rsqrt": ("torch.rsqrt(x)", "torch.rsqrt(input=x)", "torch.rsqrt(input=x)", "x.rsqrt()"),
    "relu": ("torch.relu(x)", "torch.nn.functional.relu(input=x)", "torch.nn.functional.relu(inplace=False, input=x)", "x.relu()"),
    "to": ("x.to(torch.float16)", "x.to(dtype=torch.float16)", "x.to(copy=False, dtype=torch.float16)", "x.to(torch.float16)"),
    "type": ("x.type(torch.bfloat16)", "x.type(dtype=torch.bfloat16)", "x.type(non_blocking=False, dtype=torch.bfloat16)", "x.type(torch.bfloat16)"),
    "half": ("x.half()", "x.half(memory_format=None)", "x.half(memory_format=None)", "x.half()"),
    "type_as": ("x.type_as(y.half())", "x.type_as(other=y.half())", "x.type_as(other=y.half())", "x.type_as(y.half())"),
}  # fmt: skip


@pytest.mark.parametrize("op", sorted(SHAPES))
@pytest.mark.parametrize("shape", range(4), ids=["positional", "keyword", "shuffled", "defaults"])
def test_call_shape_binds_like_torch(op, shape):
    expression = SHAPES[op][shape]
    code = f"import torch\n\ndef f(x: torch.Tensor, y: torch.Tensor):\n    return {expression}\n"
    translation = translate(code)
    assert [r.status for r in translation.records if r.api.endswith(op)] == ["converted"], translation.records
    assert f"pypto_{op}" in translation.code or "pypto_cast" in translation.code
    x, y = sample(2, 3, 5, positive=True), sample(2, 3, 5, positive=True, seed=1)
    expected = run(code)["f"](x, y)
    got = run(translation.code)["f"](x, y)
    torch.testing.assert_close(got, expected)
    assert got.dtype == expected.dtype


STAYS_TORCH = {
    "x.double()": "no FP64",
    "x.to(torch.float64)": "cast to float64",
    "x.to(torch.bool)": "cast to bool",
    "x.to(torch.complex64)": "cast to complex64",
    "x.to(torch.int32)": "cast to int32",
    "x.to('cuda')": "not known to be a dtype",
    "x.to(y)": "not known to be a dtype",
    "x.to(torch.float16, non_blocking=True)": "non_blocking",
    "x.to(torch.float16, copy=True)": "copy=True",
    "x.to(device='npu', dtype=torch.float16)": "device",
    "x.float(memory_format=torch.channels_last)": "memory_format",
    "x.type()": "without a dtype",
    "x.type('torch.FloatTensor')": "not known to be a dtype",
    "torch.add(x, y, alpha=2)": "alpha",
    "torch.div(x, y, rounding_mode='floor')": "rounding_mode",
    "torch.mul(x, y, out=y)": "out=",
    "torch.relu(x, inplace=True)": "in-place",
    "torch.tanh(x)": "no tanh",
    "x.argmax(-1)": "no argmax",
    "torch.exp(*xs)": "cannot be bound",
    "x.exp(3)": "too many positional",
    "x.sum(axis=1)": "unexpected keyword",
}


@pytest.mark.parametrize("expression", sorted(STAYS_TORCH))
def test_unsupported_forms_stay_torch_with_a_reason(expression):
    code = f"import torch\n\ndef f(x: torch.Tensor, y: torch.Tensor, xs):\n    return {expression}\n"
    translation = translate(code)
    assert translation.code == code
    (record,) = translation.records
    assert record.status == "unsupported"
    assert STAYS_TORCH[expression] in record.reason
