"""Every generated kernel, run in PyPTO's CPU interpreter against the torch op it replaces.

One module holds a call of every mapped op; its wrappers run under ``interpreted()`` on each
dtype the op supports and on shapes with odd row counts, folded leading dims and widths that
are no power of two. References are computed by torch directly, not by the wrappers.
"""

import importlib.util

import pytest
import torch

import torch2pypto
from helpers import sample, translate

pytestmark = pytest.mark.interpreter

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(7, 64), (3, 5, 40), (1, 48)]

# op -> (call in the source module, torch reference, positive inputs)
UNARY = {
    "rsqrt": ("torch.rsqrt(x)", torch.rsqrt, True),
    "sqrt": ("torch.sqrt(x)", torch.sqrt, True),
    "exp": ("torch.exp(x)", torch.exp, False),
    "neg": ("torch.neg(x)", torch.neg, False),
    "abs": ("torch.abs(x)", torch.abs, False),
    "reciprocal": ("torch.reciprocal(x)", torch.reciprocal, True),
    "log": ("torch.log(x)", torch.log, True),
    "relu": ("torch.relu(x)", torch.relu, False),
    "sin": ("torch.sin(x)", torch.sin, False),
    "cos": ("torch.cos(x)", torch.cos, False),
}
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum"]
SOURCE = "import torch\n\n\ndef calls(x: torch.Tensor, y: torch.Tensor):\n    return [\n" + "".join(
    f"        {call},\n" for call, _, _ in UNARY.values()
) + "".join(f"        torch.{op}(x, y),\n" for op in BINARY) + """\
        torch.mul(x, 3.0),
        torch.sum(x, -1),
        torch.mean(x, -1, keepdim=True),
        x.to(torch.float16),
        x.type_as(y),
    ]
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    translation = translate(SOURCE)
    assert all(r.status == "converted" for r in translation.records), translation.records
    path = tmp_path_factory.mktemp("generated") / "all_ops.py"
    path.write_text(translation.code)
    spec = importlib.util.spec_from_file_location("all_ops", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with torch2pypto.interpreted(module):
        yield module


def check(got, expected):
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(kernels, op, dtype, shape):
    _, reference, positive = UNARY[op]
    x = sample(*shape, dtype=dtype, positive=positive)
    check(getattr(kernels, f"pypto_{op}")(x), reference(x))


@pytest.mark.parametrize("shape", SHAPES[:2], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", BINARY)
def test_binary_tensor_and_scalar(kernels, op, dtype, shape):
    x, y = sample(*shape, dtype=dtype, positive=True), sample(*shape, dtype=dtype, positive=True, seed=1)
    wrapper, reference = getattr(kernels, f"pypto_{op}"), getattr(torch, op)
    check(wrapper(x, y), reference(x, y))
    if op not in ("maximum", "minimum"):
        check(wrapper(x, 1.5), reference(x, 1.5))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_binary_broadcasts_on_the_host(kernels, dtype):
    x, w = sample(3, 5, 40, dtype=dtype), sample(40, dtype=dtype, seed=1)
    check(kernels.pypto_mul(x, w), torch.mul(x, w))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "dim, keepdim", [(-1, True), (-1, False), (0, False), ((0, 2), True), (None, False)], ids=str
)
def test_reductions(kernels, dtype, dim, keepdim):
    x = sample(3, 5, 40, dtype=dtype)
    check(kernels.pypto_sum(x, dim, keepdim), torch.sum(x, dim, keepdim))
    check(kernels.pypto_mean(x, dim, keepdim), torch.mean(x, dim, keepdim))


def test_reduction_to_another_dtype(kernels):
    x = sample(7, 64, dtype=torch.bfloat16)
    check(kernels.pypto_mean(x, -1, dtype=torch.float32), torch.mean(x, -1, dtype=torch.float32))


@pytest.mark.parametrize("target", DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_casts_including_bf16_fp16_through_fp32(kernels, dtype, target):
    x = sample(3, 5, 40, dtype=dtype)
    check(kernels.pypto_cast(x, target), x.to(target))
    check(kernels.pypto_type_as(x, torch.empty(0, dtype=target)), x.type_as(torch.empty(0, dtype=target)))


def test_same_dtype_cast_returns_the_input_as_torch_does(kernels):
    x = sample(7, 64)
    assert kernels.pypto_cast(x, torch.float32) is x


def test_without_the_interpreter_wrappers_run_torch():
    translation = translate(SOURCE)
    namespace = {}
    exec(compile(translation.code, "all_ops.py", "exec"), namespace)
    x, y = sample(7, 64, positive=True), sample(7, 64, positive=True, seed=1)
    got = namespace["calls"](x, y)
    assert namespace["PYPTO_LAUNCHER"] is None
    expected = [reference(x) for _, reference, _ in UNARY.values()]
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
