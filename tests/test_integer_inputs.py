"""Integer tensors the kernels read as they are (PyPTO 0.2.0 casts INT64 and INT32 and indexes by
either): a model's int64 positions cast to float (rotary embeddings' ``position_ids.float()``)
and its int64 or int32 ids indexing a table, with no conversion left to torch around the launch."""

import pytest
import torch

import torch2pypto
from helpers import load, sample, translate
from torch2pypto.translator.verification.hostops import host_ops
from torch2pypto.translator.verification.interpreter import counting

pytestmark = pytest.mark.interpreter

CAST = "import torch\n\n\ndef f(x: torch.Tensor, dtype: torch.dtype):\n    return x.to(dtype), x[:, None, :].float()\n"


@pytest.fixture(scope="module")
def cast(tmp_path_factory):
    return load(tmp_path_factory.mktemp("cast") / "cast.py", translate(CAST).code)


@pytest.mark.parametrize("source, target", [
    (torch.int64, torch.float32), (torch.int32, torch.float32), (torch.int32, torch.float16),
])  # fmt: skip
@pytest.mark.parametrize("shape", [(1, 7), (3, 130), (2, 1)])  # odd sizes, a tail row tile
def test_integers_cast_to_float_on_the_kernel(cast, source, target, shape):
    x = torch.randint(-2**20, 2**20, shape, generator=torch.Generator().manual_seed(1)).to(source)
    x[0, 0] = 2**24 + 1  # rounds as torch rounds it
    ran = counting()
    with torch2pypto.interpreted(cast), host_ops(cast) as left:
        got, positions = cast.f(x, target)
    assert ran() == {"cast_kernel.kernel": 2}, ran()
    assert not left, left
    assert got.dtype == target and torch.equal(got, x.to(target))
    assert positions.dtype == torch.float32 and torch.equal(positions, x[:, None, :].float())


@pytest.mark.parametrize("source, target", [(torch.int64, torch.bfloat16), (torch.int64, torch.float16), (torch.int32, torch.bfloat16)])
def test_integer_casts_pypto_makes_through_fp32_only_run_torch(cast, source, target):
    """A2/A3 cast INT64 to FP32 and INT32 only, INT32 to FP32 and FP16: the cast kernel makes no
    two-step integer cast; the float() beside it still launches."""
    x = torch.randint(0, 97, (2, 7)).to(source)
    ran = counting()
    with torch2pypto.interpreted(cast):
        got, _ = cast.f(x, target)
    assert ran() == {"cast_kernel.kernel": 1} and torch.equal(got, x.to(target))


INDEXED = "import torch\n\n\ndef f(x: torch.Tensor, i: torch.Tensor, y: torch.Tensor):\n    return {}\n"


@pytest.mark.parametrize("call, source", [
    ("torch.nn.functional.embedding(i, x)", None), ("torch.index_select(x, 0, i[0])", None),
    ("torch.gather(x, 1, i)", None), ("torch.scatter(x, 1, i, y)", (7, 37)), ("x.index_add(0, i[0], y)", (5, 37)),
])  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int64_and_int32_indices_are_read_as_they_are(tmp_path, call, source, dtype):
    """One kernel per index dtype, after the kernel that bounds the index; no cast of the index
    to int32 nor its bounds check left to torch."""
    module = load(tmp_path / "indexed.py", translate(INDEXED.format(call)).code)
    x = sample(7, 37, dtype=dtype)  # odd widths
    y = sample(*source, dtype=dtype, seed=1) if source else None
    i = torch.randint(0, 7, (7, 5), generator=torch.Generator().manual_seed(3))
    for index in (i, i.int()):
        ran = counting()
        with torch2pypto.interpreted(module), host_ops(module) as left:
            got = module.f(x, index, y)
        launched = ran()
        assert launched.pop("index_bounds_kernel.kernel") == 1 and sum(launched.values()) == 1, (index.dtype, launched)
        assert not {"_to_copy", "aminmax", "stack"} & set(left), left
        expected = eval(call, {"torch": torch, "x": x, "i": index, "y": y})
        assert got.dtype == expected.dtype
        if "index_add" in call:  # adds in FP32 as torch, in another order
            torch.testing.assert_close(got, expected)
        else:
            assert torch.equal(got, expected)


BOUNDS = "index_bounds_kernel.kernel"


@pytest.fixture(scope="module")
def embedding(tmp_path_factory):
    return load(tmp_path_factory.mktemp("bounds") / "bounds.py", translate(INDEXED.format("torch.nn.functional.embedding(i, x)")).code)


@pytest.mark.parametrize("n", [1, 13, 1024, 2500])  # one tile of 8 rows, a tail, whole tiles, a tail of 1024s
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_the_bounds_kernel_finds_an_index_out_of_range_in_any_tile(embedding, n, dtype):
    """The indices are bounded on a kernel, tile by tile (in FP32: exact for tables of up to 2**24
    rows), and torch runs, raising its error, where one lies outside the table."""
    x = sample(97, 8)
    ids = torch.randint(0, 97, (n,), generator=torch.Generator().manual_seed(n)).to(dtype)
    for bad in (None, -1, 97, 2**31 - 1):
        index = ids.clone()
        if bad is not None:
            index[-1] = bad  # in the last (tail) tile
        ran = counting()
        with torch2pypto.interpreted(embedding), host_ops(embedding) as left:
            if bad is None:
                assert torch.equal(embedding.f(x, index, None), x[index])
            else:
                with pytest.raises(IndexError, match="index out of range"):
                    embedding.f(x, index, None)
        assert ran() == ({BOUNDS: 1, "embedding_kernel.kernel": 1} if bad is None else {BOUNDS: 1}), ran()
        assert "aminmax" not in left, left


def test_tables_beyond_fp32_integers_are_bounded_by_torch(embedding):
    index = torch.tensor([0, 2**24 + 1, 5])
    ran = counting()
    with torch2pypto.interpreted(embedding), host_ops(embedding) as left:
        assert embedding._index_bounds(index, 2**24 + 2) == [0, 2**24 + 1]
        assert embedding._index_bounds(index, 2**24) == (0.0, 2**24)  # on the kernel: rounded, still >= the count
    assert ran() == {BOUNDS: 1} and left["aminmax"] == 1, (ran(), left)


@pytest.mark.parametrize("call", ["torch.topk(x, 3)", "torch.topk(x, 5, largest=False).indices", "torch.argsort(x, dim=-1)"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sorting_writes_int64_indices_on_the_kernel(tmp_path, call, dtype):
    """pypto.topk's INT32 indices are cast to torch's int64 in the kernel: no cast left to torch."""
    module = load(tmp_path / "sorted.py", translate(INDEXED.format(call)).code)
    x = torch.randperm(7 * 31, generator=torch.Generator().manual_seed(2)).reshape(7, 31).to(dtype)  # distinct in bfloat16 too
    ran = counting()
    with torch2pypto.interpreted(module), host_ops(module) as left:
        got = module.f(x, None, None)
    assert sum(ran().values()) == 1 and "_to_copy" not in left, (ran(), left)
    expected = eval(call, {"torch": torch, "x": x})
    for g, e in zip(*((t,) if isinstance(t, torch.Tensor) else tuple(t) for t in (got, expected))):
        assert g.dtype == e.dtype and torch.equal(g, e)


ARITHMETIC = """import torch


def f(x: torch.Tensor, y: torch.Tensor, row: torch.Tensor, n: int):
    return x + y, x - row, x * y, x + n, n - x, x * n, y.add(x, alpha=1)
"""


@pytest.fixture(scope="module")
def arithmetic(tmp_path_factory):
    return load(tmp_path_factory.mktemp("arithmetic") / "arithmetic.py", translate(ARITHMETIC).code)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16])
@pytest.mark.parametrize("shape", [(3, 37), (2, 5, 9), (130,)])  # odd widths, a tail row tile, rank 1 to 3
def test_int32_and_int16_add_sub_mul_on_integer_kernels(arithmetic, dtype, shape):
    """pypto.add/sub/mul on INT32 and INT16 tiles (A2/A3's TADD, TSUB, TMUL and their scalar forms
    take both), with a Python int as a kernel constant and a broadcast row; values at the dtype's
    limits wrap as torch wraps them in the interpreter (``n - x``: rsub's -x + n, which wraps alike)."""
    info = torch.iinfo(dtype)
    g = torch.Generator().manual_seed(sum(shape))
    x, y = (torch.randint(info.min, info.max, shape, generator=g, dtype=dtype) for _ in range(2))
    x.view(-1)[:4] = torch.tensor([info.max, info.min, -1, 0], dtype=dtype)
    y.view(-1)[:4] = torch.tensor([1, -1, info.min, info.max], dtype=dtype)
    row = torch.randint(info.min, info.max, shape[-1:], generator=g, dtype=dtype)
    for n in (info.max, -7):
        ran = counting()
        with torch2pypto.interpreted(arithmetic), host_ops(arithmetic) as left:
            got = arithmetic.f(x, y, row, n)
        assert ran() == {"add_kernel.kernel": 2, "sub_kernel.kernel": 1, "mul_kernel.kernel": 1,
                         "add_other_number_kernel.kernel": 1, "rsub_other_number_kernel.kernel": 1,
                         "mul_other_number_kernel.kernel": 1}, ran()
        assert not left, left
        expected = (x + y, x - row, x * y, x + n, n - x, x * n, y + x)
        for a, b in zip(got, expected):
            assert a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("x, n", [
    (torch.arange(7) + 2**40, 5),  # int64: no int64 vector add on A2/A3, and INT32 holds it only within its range
    (torch.arange(7, dtype=torch.int32), 2.5),  # torch promotes to float
    (torch.arange(7, dtype=torch.int32), 2**31),  # beyond int32: torch wraps it
    (torch.arange(7, dtype=torch.int16), 2**15),
])  # fmt: skip
def test_integer_arithmetic_a_kernel_cannot_do_exactly_runs_torch(arithmetic, x, n):
    """Torch's call, with its promotion (int32 + 2.5 is float) and its wrap of a number beyond the dtype."""
    ran = counting()
    with torch2pypto.interpreted(arithmetic):
        got = arithmetic.f(x, x, x, n)
    launched = ran()
    assert not {"add_other_number_kernel.kernel", "mul_other_number_kernel.kernel"} & set(launched), launched
    if x.dtype == torch.int64:
        assert not launched, launched
    for a, b in zip(got[3:7:2], (x + n, x * n)):
        assert torch.equal(a, b) and a.dtype == b.dtype


SCANS = """import torch


def f(x: torch.Tensor, dim: int):
    return torch.cumsum(x, dim, dtype=torch.int32), x.cumsum(dim)
"""


@pytest.fixture(scope="module")
def scans(tmp_path_factory):
    return load(tmp_path_factory.mktemp("scans") / "scans.py", translate(SCANS).code)


@pytest.mark.parametrize("shape, dim", [((5, 37), -1), ((2, 2500), 1), ((13, 3), 0), ((9,), 0)])  # odd widths, 3 blocks (the last overlapping), along dim 0, 1-D
def test_int32_cumsum_into_int32_sums_on_the_kernel(scans, shape, dim):
    """One row per tile (pypto.cumsum's INT32 path needs whole tiles), blocks of a row of any width;
    sums beyond int32's range wrap as torch's. torch's own int64 sums of int32 (no dtype) run torch."""
    x = torch.randint(-2**31, 2**31 - 1, shape, generator=torch.Generator().manual_seed(shape[-1]), dtype=torch.int32)
    x.view(-1)[:2] = 2**31 - 1  # the first sums overflow
    ran = counting()
    with torch2pypto.interpreted(scans), host_ops(scans) as left:
        got, wide = scans.f(x, dim)
    assert ran() == {"cumsum_kernel.kernel": 1}, ran()
    assert left["cumsum"] == 1 and "_to_copy" not in left, left  # x.cumsum(dim): int64 sums, torch's; no cast left to torch
    expected = torch.cumsum(x, dim, dtype=torch.int32)
    assert got.dtype == torch.int32 and torch.equal(got, expected)
    assert wide.dtype == torch.int64 and torch.equal(wide, x.cumsum(dim))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(37,), (3, 130)])  # odd widths, a row tile of several rows
def test_floats_cumsum_into_int32_truncated_first_on_the_kernel(scans, dtype, shape):
    """torch casts a float to int32 (toward zero) before it sums: histc's float counts into
    transformers' MoE offsets on a CPU. The kernel truncates each tile the same way."""
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(shape[-1])) * 50).to(dtype)
    x.view(-1)[:4] = torch.tensor([2.5, -2.5, 0.99, -0.99])
    ran = counting()
    with torch2pypto.interpreted(scans):
        got, _ = scans.f(x, -1)
    assert ran() == {"cumsum_kernel.kernel": 2}, ran()  # and x.cumsum(-1) of floats
    assert got.dtype == torch.int32 and torch.equal(got, torch.cumsum(x, -1, dtype=torch.int32))


@pytest.mark.parametrize("x", [torch.arange(8), torch.arange(8, dtype=torch.int16)])
def test_cumsums_a_kernel_does_not_make_into_int32_run_torch(scans, x):
    """int64 data and int16 (PyPTO's INT16 cumsum: not checked here) run torch."""
    ran = counting()
    with torch2pypto.interpreted(scans):
        got, _ = scans.f(x, 0)
    assert ran() == {}, ran()
    assert got.dtype == torch.int32 and torch.equal(got, torch.cumsum(x, 0, dtype=torch.int32))
