"""The runtime helpers that generated code carries, tested as the functions they are (no code
generated), and the copier that puts their source into translations."""

import ast
import math

import pypto
import pytest
import torch

from torch2pypto.rules import codegen
from torch2pypto.rules import cube as cube_rules
from torch2pypto.runtime import attention, casting, contraction, conv, cube, epilogue, gated, grad, launch, layout, operands, tiles


@pytest.fixture
def launcher(monkeypatch):
    """A recording PYPTO_LAUNCHER on the runtime module (as torch2pypto.interpreted() sets one)."""
    calls = []
    monkeypatch.setattr(launch, "PYPTO_LAUNCHER", lambda kernel, *tensors: calls.append((kernel, tensors)))
    return calls


# ---- the copier


def test_a_block_is_its_statements_with_the_comment_above():
    block = next(d for d in codegen.PRELUDE if d.name == "PYPTO_LAUNCHER")
    assert block.source.startswith("# Kernels launch on NPU tensors.")
    assert block.source.rstrip().endswith("_UB_BYTES = 192 * 1024  # unified buffer of one AI vector core")
    assert "import" not in block.source  # the module's imports stay behind


def test_requires_are_the_blocks_of_the_runtime_names_used():
    blocks = {d.name: d for d in codegen.PRELUDE}
    assert blocks["_on_kernel_path"].requires == ("PYPTO_LAUNCHER",)  # PYPTO_LAUNCHER and _PYPTO_DTYPES
    assert blocks["_launch"].requires == ("PYPTO_LAUNCHER",)
    assert blocks["_annotated"].requires == ()  # eval is a builtin


def test_a_block_copied_twice_or_before_what_it_uses_is_refused(monkeypatch):
    monkeypatch.setattr(codegen, "_COPIED", {})
    with pytest.raises(ValueError, match="uses PYPTO_LAUNCHER"):
        codegen.copied("launch", "_launch")
    codegen.copied("launch", "PYPTO_LAUNCHER", last="_UB_BYTES")
    with pytest.raises(ValueError, match="copied by both"):
        codegen.copied("launch", "_UB_BYTES")


def test_a_synthetic_module_copies_its_blocks_with_their_needs(monkeypatch, tmp_path):
    (tmp_path / "synthetic.py").write_text(
        "import functools\nimport math\n\nimport torch\n\nfrom torch2pypto.runtime.launch import _UB_BYTES\n\n\n"
        "# a note for this module alone\n\n"
        "# the first block's comment\n_LIMIT = 4\n\n\n"
        "@functools.cache\ndef _first(x):\n    return math.prod(x) * _LIMIT * _UB_BYTES\n\n\n"
        "def _second(t):\n    def inner():\n        return _first(t.shape)\n    return torch.tensor(inner())\n\n\n"
        "def _broken():\n    return _nowhere\n"
    )
    monkeypatch.setattr(codegen, "_RUNTIME_DIR", tmp_path)
    monkeypatch.setattr(codegen, "_COPIED", dict(codegen._COPIED))
    first = codegen.copied("synthetic", "_first", "_LIMIT")
    assert first.source.startswith("# the first block's comment\n_LIMIT = 4\n\n\n@functools.cache\n")
    assert first.requires == ("PYPTO_LAUNCHER",) and first.imports == ("math",)  # functools: every section's
    second = codegen.copied("synthetic", "_second")
    assert second.requires == ("_first",) and second.imports == ()
    with pytest.raises(ValueError, match="_broken uses _nowhere, which runtime module synthetic neither defines"):
        codegen.copied("synthetic", "_broken")


def test_every_runtime_statement_is_copied_by_one_definition():
    """No dead code in the runtime package: each top-level name is some definition's (the
    families copy theirs when they load, as do the engine's fusions)."""
    import torch2pypto.rules  # noqa: F401  (registers every family)
    from torch2pypto.rules import epilogue, gated  # noqa: F401  (the gated pair's and a linear epilogue's)

    for path in sorted(codegen._RUNTIME_DIR.glob("[!_]*.py")):
        if path.stem == "generated":  # stubs: their source is built per translation
            continue
        module = codegen._module(path.stem)
        assert set(module.defines) <= set(codegen._COPIED), path.name
        ast.parse(path.read_text())


# ---- launch


def test_on_kernel_path_needs_an_npu_or_a_launcher(launcher):
    x = torch.ones(2, 3)
    assert launch._on_kernel_path(x, x.half(), x.bfloat16())
    assert not launch._on_kernel_path(x, torch.ones(0))  # nothing to compute
    assert not launch._on_kernel_path(x.double())  # float dtypes only by default
    assert not launch._on_kernel_path(x.long())
    assert launch._on_kernel_path(x.long(), dtypes=(torch.int64,))


def test_off_an_npu_without_a_launcher_torch_runs():
    assert launch.PYPTO_LAUNCHER is None
    assert not launch._on_kernel_path(torch.ones(2, 3))


def test_launch_calls_the_kernel_or_the_launcher(launcher, monkeypatch):
    x, out, ran = torch.ones(2), torch.empty(2), []
    launch._launch(ran.append, x)
    assert launcher == [(ran.append, (x,))] and ran == []
    monkeypatch.setattr(launch, "PYPTO_LAUNCHER", None)
    launch._launch(lambda a, b: ran.append((a, b)), x, out)
    assert ran == [(x, out)]


def test_inlined_only_where_the_call_runs_exactly_the_class_forward():
    class Norm(torch.nn.Module):
        def forward(self, x):
            return x

    class Sub(Norm):
        pass

    norm = Norm()
    assert launch._inlined((norm, Norm))
    assert not launch._inlined((Sub(), Norm))  # a subclass may compute otherwise
    own = Norm()
    own.forward = lambda x: x + 1  # a forward of the instance
    assert not launch._inlined((norm, Norm), (own, Norm))
    handle = norm.register_forward_hook(lambda *args: None)
    assert not launch._inlined((norm, Norm))
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda *args: None)  # a global hook
    try:
        assert not launch._inlined((norm, Norm))
    finally:
        handle.remove()
    assert launch._inlined((norm, Norm))


def test_annotated_evaluates_string_annotations_in_the_namespace():
    def kernel(x: "Shape", y: int):  # noqa: F821
        return x

    evaluated = launch._annotated({"Shape": tuple})(kernel)
    assert evaluated is kernel and kernel.__annotations__ == {"x": tuple, "y": int}


# ---- layout: operands as [rows, cols] matrices


def test_as_rows_folds_leading_dims_into_rows_as_a_view_of_a_contiguous_tensor():
    x = torch.randn(2, 3, 4)
    rows = layout._as_rows(x)
    assert rows.shape == (6, 4) and rows.data_ptr() == x.data_ptr()
    assert layout._as_rows(torch.tensor(2.0)).shape == (1, 1)
    assert layout._as_rows(x.mT).is_contiguous()  # other strides: a copy


def test_padded_cols_copies_only_to_pad():
    x = torch.randn(3, 5)
    assert layout._padded_cols(x, 0) is x
    padded = layout._padded_cols(x, 3, value=-1.0)
    assert padded.shape == (3, 8) and torch.equal(padded[:, :5], x) and (padded[:, 5:] == -1).all()


def test_row_window_reads_a_column_slice_in_place_from_its_start():
    base = torch.arange(32.0).reshape(4, 8)
    matrix, start = layout._row_window(base[:, 2:5], 4)
    assert start == 2 and matrix.data_ptr() == base.data_ptr() and torch.equal(matrix[:, 2:5], base[:, 2:5])
    matrix, start = layout._row_window(base, 4)
    assert start == 0 and matrix.data_ptr() == base.data_ptr()
    matrix, start = layout._row_window(base.mT, 8)  # columns not unit-strided: a copy
    assert start == 0 and matrix.is_contiguous() and torch.equal(matrix, base.mT)


def test_row_window_of_a_slice_whose_rows_would_run_past_the_storage():
    base = torch.arange(32.0).reshape(4, 8)
    t = base[2:, 5:8]  # its last row's window would end past the storage: the window starts earlier
    matrix, start = layout._row_window(t, 2)
    assert torch.equal(matrix[:, start:start + 3], t)


def test_broadcast_rows_keep_the_first_operands_layout_and_results_follow_it():
    x = torch.randn(4, 3).mT  # [3, 4], dense, transposed
    y = torch.randn(4)
    (xr, yr), shape, order = layout._broadcast_rows(x, y, 2.0)
    assert shape == (3, 4) and order == [1, 0]
    assert xr.data_ptr() == x.data_ptr() and xr.shape == (4, 3)  # read in place
    assert torch.equal(yr, y.expand(3, 4).mT.contiguous())
    result, out = layout._result_rows(shape, order, torch.float16, x.device)
    assert result.shape == (3, 4) and result.stride() == x.stride() and out.data_ptr() == result.data_ptr()
    assert result.dtype == torch.float16


def test_broadcast_rows_of_a_broadcast_first_operand_are_row_major():
    (xr, yr), shape, order = layout._broadcast_rows(torch.randn(1, 4), torch.randn(3, 1))
    assert shape == (3, 4) and order == [0, 1] and xr.shape == yr.shape == (3, 4)


def test_in_layout_of_gives_torchs_strides():
    t = torch.randn(4, 3).mT
    result = layout._in_layout_of(t.contiguous() * 2, t)
    assert result.stride() == t.stride() and torch.equal(result, t * 2)
    same = torch.randn(3, 4)
    assert layout._in_layout_of(same, torch.randn(3, 4)) is same


def test_in_place_ok_keeps_the_shape_and_autograd_torchs():
    x = torch.randn(3, 4)
    assert layout._in_place_ok(x, torch.randn(4), 2.0)
    assert not layout._in_place_ok(torch.randn(1, 4), torch.randn(3, 4))  # the result would grow
    w = torch.randn(4, requires_grad=True)
    assert not layout._in_place_ok(x, w)
    with torch.no_grad():
        assert layout._in_place_ok(x, w)


def test_reduction_rows_move_the_reduced_dims_last_padded_to_32_bytes():
    t = torch.randn(2, 3, 5)
    rows, cols, shape = layout._reduction_rows(t, 1, False, float("-inf"))
    assert cols == 3 and shape == [2, 5] and rows.shape == (10, 8)
    assert torch.equal(rows[:, :3], t.permute(0, 2, 1).reshape(10, 3)) and (rows[:, 3:] == float("-inf")).all()
    rows, cols, shape = layout._reduction_rows(t.half(), (0, -1), True, 0.0)
    assert cols == 10 and shape == [1, 3, 1] and rows.shape == (3, 16)
    rows, cols, shape = layout._reduction_rows(t, None, False, 0.0)
    assert cols == 30 and shape == [] and rows.shape == (1, 32)
    assert layout._reduction_rows(torch.tensor(1.5), None, True, 0.0)[1:] == (1, [])


@pytest.mark.parametrize("dim, error", [(3, IndexError), (-4, IndexError), ((1, -2), RuntimeError)])
def test_reduced_dims_refuse_as_torch_does(dim, error):
    with pytest.raises(error):
        layout._reduced_dims(torch.randn(2, 3, 5), dim)


def test_row_width_and_aligned_rows_round_up_to_32_bytes():
    assert [layout._row_width(c, torch.float16) for c in (1, 16, 17)] == [16, 16, 32]
    assert layout._row_width(5, torch.float32) == 8
    rows = layout._aligned_rows(torch.ones(2, 3, 5), 5)
    assert rows.shape == (6, 8) and rows[:, 5:].abs().sum() == 0


def test_fits_whole_rows_counts_fp32_buffers_in_the_unified_buffer():
    assert layout._fits_whole_rows(torch.empty(2, 1000), -1, 2)
    assert not layout._fits_whole_rows(torch.empty(2, 30000), 1, 2)
    assert layout._fits_whole_rows(torch.tensor(1.0), 0, 2)


# ---- tiles


def test_spread_rows_spreads_a_launch_over_the_cores_in_tiles_of_at_least_min_tile():
    assert tiles._spread_rows(4096, 128) == 64  # capped at 64
    assert tiles._spread_rows(1024, 4096) == 32  # 32 tiles
    assert tiles._spread_rows(100, 1024) == 4  # at least _MIN_TILE elements (3 rows would spread 32 tiles)
    assert tiles._spread_rows(3, 128) == 4  # n's next power of two
    assert tiles._spread_rows(3, 128, whole=True) == 2  # a whole tile lies within the rows


@pytest.mark.parametrize("cols, max_rows, buffers, dtypes, options, shape", [
    (128, 64, 2, (pypto.DT_FP32,), {}, (64, 128)),
    (100_000, 64, 2, (pypto.DT_FP32,), {}, (4, 8192)),  # a wide row: column tiles of at most _WIDEST_TILE
    (20_000, 64, 2, (pypto.DT_FP32,), {"whole_rows": True}, (1, 20_000)),  # fits the UB whole
    (4096, 64, 2, (pypto.DT_BF16,), {}, (8, 4096)),  # BF16: at most _BF16_ROW_TILE elements a row tile
    (4096, 64, 2, (pypto.DT_FP16,), {}, (16, 4096)),  # FP16: half the bytes
    (4096, 64, 2, (pypto.DT_FP32,), {"split_cols": True}, (64, 512)),  # max_rows rows of _WIDE_TILE cols
    (4096, 64, 2, (pypto.DT_FP16, pypto.DT_INT64), {}, (4, 4096)),  # the widest dtype counts
])
def test_tile_shape(cols, max_rows, buffers, dtypes, options, shape):
    rows, tile_cols = tiles._tile_shape(cols, max_rows, buffers, dtypes, **options)
    assert (rows, tile_cols) == shape
    size = 8 if pypto.DT_INT64 in dtypes else 2 if dtypes == (pypto.DT_FP16,) else 4
    assert rows * tile_cols * size * buffers <= tiles._TILE_BUDGET or options.get("whole_rows")


def test_cube_rows_and_tiles_fit_the_cube_buffers():
    assert [tiles._cube_rows(m) for m in (1, 64, 100, 1000)] == [16, 64, 128, 128]
    # a's row tile, the smaller operand in L1, takes the L1 b's leaves: fewer, larger GM copies
    assert tiles._cube_tiles(4096, 4096, pypto.DT_BF16, 128) == ([128, 1024, 512], [256, 256])
    assert tiles._cube_tiles(4096, 11008, pypto.DT_BF16, 64) == ([128, 2048, 512], [256, 256])
    assert tiles._cube_tiles(4096, 11008, pypto.DT_BF16, 16) == ([128, 4096, 512], [256, 256])  # up to k
    assert tiles._cube_tiles(512, 128, pypto.DT_BF16, 512) == ([64, 384, 384], [64, 128])  # b's n tile the smaller
    assert tiles._cube_tiles(4096, 4096, pypto.DT_FP32, 128) == ([64, 320, 320], [256, 256])  # L0B, then L1
    assert tiles._cube_tiles(16, 32, pypto.DT_FP16, 16) == ([16, 16, 16], [32, 32])


# ---- operands: whether a kernel takes a call's operands, and as what

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def test_kernel_operands_take_one_dtype_and_numbers_it_holds(launcher):
    x, h = torch.randn(2, 3), torch.randn(2, 3).half()
    assert operands._kernel_operands(FLOATS, x, numbers=(2, 0.5, float("inf"), x))
    assert not operands._kernel_operands(FLOATS, x, h)  # torch would promote
    assert not operands._kernel_operands(FLOATS, x, numbers=(True,))  # a bool is no kernel number
    assert not operands._kernel_operands(FLOATS, h, numbers=(1e6,))  # beyond FP16: torch's call
    assert not operands._kernel_operands(FLOATS, x.double())
    assert not operands._kernel_operands(FLOATS, 2.0)
    assert operands._kernel_operands(FLOATS, x, bools=(x > 0,))
    assert not operands._kernel_operands(FLOATS, x, bools=(x,))
    assert not operands._kernel_operands(FLOATS, x, options=(None, None))  # clamp(x): torch raises
    assert operands._kernel_operands(FLOATS, x, options=(None, 1))


def test_kernel_operands_of_integer_tensors_take_ints_in_range(launcher):
    i = torch.arange(6, dtype=torch.int32)
    assert operands._kernel_operands((torch.int32,), i, numbers=(5,))
    assert not operands._kernel_operands((torch.int32,), i, numbers=(2**40,))
    assert not operands._kernel_operands((torch.int32,), i, numbers=(2.5,))


def test_kernel_operands_stay_torch_off_the_kernel_path():
    assert not operands._kernel_operands(FLOATS, torch.randn(2, 3))


def test_kernel_number_is_a_float_for_float_tensors():
    assert operands._kernel_number(2, torch.float16) == 2.0 and type(operands._kernel_number(2, torch.float16)) is float
    assert type(operands._kernel_number(2, torch.int32)) is int
    assert operands._kernel_number(None, torch.float32) is None


def test_cube_operands_fold_batches_into_rows_with_one_right_matrix():
    a, w = torch.randn(2, 3, 4, 5), torch.randn(6, 5)
    a2, b2, batch, stacked, transposed = operands._cube_operands(a, w, transposed=True)  # linear's weight
    assert a2.shape == (24, 5) and a2.data_ptr() == a.data_ptr()
    assert b2.data_ptr() == w.data_ptr() and batch == (2, 3) and not stacked and transposed


def test_cube_operands_read_a_transposed_stack_through_its_row_major_base():
    q, k = torch.randn(2, 3, 5), torch.randn(2, 6, 5)
    a2, b2, batch, stacked, transposed = operands._cube_operands(q, k.mT)
    assert (a2.shape, b2.shape, batch, stacked, transposed) == ((6, 5), (12, 5), (2,), True, True)
    assert b2.data_ptr() == k.data_ptr()
    a2, b2, batch, stacked, _ = operands._cube_operands(torch.randn(3, 5), torch.randn(2, 5, 4))
    assert (a2.shape, b2.shape, batch, stacked) == ((6, 5), (10, 4), (2,), True)  # a broadcast over b's stack


def test_cube_takes_one_dtype_on_the_kernel_path_of_a_matching_k(launcher):
    a, b = torch.randn(2, 3, 4), torch.randn(4, 5)
    assert cube._cube_takes(a, b) and cube._cube_takes(a, b, torch.randn(5))
    assert not cube._cube_takes(a, b.half())  # torch refuses mixed dtypes
    assert not cube._cube_takes(a, torch.randn(3, 5))  # k mismatched: torch raises
    assert not cube._cube_takes(a, b, torch.randn(2, 5))  # a bias other than one value per column
    assert not cube._cube_takes(a.double(), b.double())
    assert cube._cube_takes(a, torch.randn(5, 4), transposed=True)  # linear's weight [n, k]
    assert not cube._cube_takes(a, torch.randn(1, 5, 4), transposed=True)


def test_cube_takes_equal_batches_of_the_rank_and_rows_up_to_max_dim(launcher):
    assert cube._cube_takes(torch.randn(2, 3, 4), torch.randn(2, 4, 5), rank=3)
    assert not cube._cube_takes(torch.randn(2, 3, 4), torch.randn(1, 4, 5), rank=3)  # bmm does not broadcast
    assert cube._cube_takes(torch.randn(2, 3, 4), torch.randn(1, 4, 5))  # matmul does
    assert not cube._cube_takes(torch.randn(2, 3, 4), torch.randn(3, 4, 5))
    k = cube_rules.MAX_DIM
    assert cube._cube_takes(torch.randn(1, k), torch.randn(k, 1))
    assert not cube._cube_takes(torch.randn(1, k + 1), torch.randn(k + 1, 1))
    assert cube._cube_takes(torch.randn(1, 2), torch.randn(k + 1, 2), transposed=True)  # a vocab-wide weight's n


def test_cube_takes_nothing_off_the_kernel_path():
    assert not cube._cube_takes(torch.randn(3, 4), torch.randn(4, 5))


@pytest.mark.parametrize("equation, a_shape, b_shape", [
    ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)), ("ij,kj->ik", (3, 4), (5, 4)), ("bhqd,bhkd->bhqk", (2, 3, 4, 5), (2, 3, 6, 5)),
    ("...ij,...jk->...ik", (2, 3, 4, 5), (3, 5, 6)), ("ij,jk", (3, 4), (4, 5)), ("bij,jk->kib", (2, 3, 4), (4, 5)),
], ids=str)
def test_einsum_plan_is_permutes_and_one_matmul(equation, a_shape, b_shape):
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    a_order, b_order, ell_a, ell_b, batch, m, k, out_order = contraction._einsum_plan(equation, a.dim(), b.dim())
    left, right = a.permute(a_order), b.permute(b_order)
    lead_a, lead_b = ell_a + batch, ell_b + batch
    product = left.reshape(*left.shape[:lead_a], -1, math.prod(left.shape[lead_a + m:])) @ right.reshape(
        *right.shape[:lead_b], math.prod(right.shape[lead_b:lead_b + k]), -1)
    m_shape, n_shape = left.shape[lead_a:lead_a + m], right.shape[lead_b + k:]
    batch_shape = torch.broadcast_shapes(left.shape[:lead_a], right.shape[:lead_b])
    out = product.reshape(*batch_shape, *m_shape, *n_shape).permute(out_order)
    torch.testing.assert_close(out, torch.einsum(equation, a, b))


@pytest.mark.parametrize("equation, why", [
    ("ij->ji", "one or of more than two operands"), ("ij,jk,kl->il", "one or of more than two operands"),
    ("i...j,jk->ik", "an ellipsis that does not lead"), ("ii,ij->ij", "a diagonal"), ("ij,jk->iz", "a diagonal"),
    ("ij,kl->ik", "summed within one operand"),
])
def test_einsum_plan_says_why_an_equation_is_no_matmul(equation, why):
    assert why in contraction._einsum_plan(equation)


def test_einsum_plan_checks_the_ranks_when_given():
    assert contraction._einsum_plan("ij,jk->ik") is None  # when translating: the equation only
    assert "other ranks" in contraction._einsum_plan("ij,jk->ik", 3, 2)
    assert "other ranks" in contraction._einsum_plan("...ij,...jk->...ik", 1, 2)  # fewer dims than named


def test_conv_takes_a_stride_of_the_kernel_unpadded_undilated_ungrouped(launcher):
    x, w, bias = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 2, 2), torch.randn(4)
    assert conv._conv_takes(x, w, bias, (2, 2), 0, 1, 1, 2) and conv._conv_takes(x[0], w, None, 2, "valid", 1, 1, 2)
    assert not conv._conv_takes(x, w.half(), None, 2, 0, 1, 1, 2)  # mixed dtypes: torch raises
    assert not conv._conv_takes(x, w, None, 1, 0, 1, 1, 2)  # overlapping windows
    assert not conv._conv_takes(x, w, None, 2, 1, 1, 1, 2) and not conv._conv_takes(x, w, None, 2, "same", 1, 1, 2)
    assert not conv._conv_takes(x, w, None, 2, 0, 2, 1, 2) and not conv._conv_takes(x, w, None, 2, 0, 1, 3, 2)
    assert not conv._conv_takes(x, torch.randn(4, 5, 2, 2), None, 2, 0, 1, 1, 2)  # channels mismatched
    assert not conv._conv_takes(torch.randn(1, 3, 1, 8), w, None, 2, 0, 1, 1, 2)  # no whole window
    assert not conv._conv_takes(x, w, torch.randn(3), 2, 0, 1, 1, 2)
    assert not conv._conv_takes(x, w, bias, 2, 0, 1, 1, 1)  # a 2-D weight for conv1d


def test_conv_takes_positions_up_to_max_dim(launcher):
    n = cube_rules.MAX_DIM
    assert conv._conv_takes(torch.randn(1, 1, n), torch.randn(1, 1, 1), None, 1, 0, 1, 1, 1)
    assert not conv._conv_takes(torch.randn(1, 1, n + 1), torch.randn(1, 1, 1), None, 1, 0, 1, 1, 1)


def test_conv_takes_nothing_off_the_kernel_path():
    assert not conv._conv_takes(torch.randn(2, 3, 8), torch.randn(4, 3, 1), None, 1, 0, 1, 1, 1)


def test_activation_kind_names_the_modules_a_kernel_computes():
    from transformers.activations import ACT2FN

    nn = torch.nn
    assert [gated._activation_kind(m) for m in (nn.SiLU(), nn.GELU(), nn.GELU(approximate="tanh"))] == ["silu", "gelu", "gelu_tanh"]
    assert [gated._activation_kind(ACT2FN[n]) for n in ("silu", "gelu", "gelu_pytorch_tanh")] == ["silu", "gelu", "gelu_tanh"]
    assert gated._activation_kind(nn.SiLU(inplace=True)) is None  # changes its input
    assert gated._activation_kind(nn.ReLU()) is None and gated._activation_kind(torch.nn.functional.silu) is None
    assert gated._activation_kind(ACT2FN["gelu_new"]) is None  # tanh's formula, not torch's gelu


def test_activation_kind_refuses_a_module_whose_call_is_not_its_class_forward():
    hooked = torch.nn.SiLU()
    hooked.register_forward_hook(lambda *args: None)
    patched = torch.nn.GELU()
    patched.forward = lambda x: x
    assert gated._activation_kind(hooked) is None and gated._activation_kind(patched) is None

    class Mine(torch.nn.SiLU):  # a subclass: its forward is SiLU's, its name is not
        pass

    class Own(torch.nn.SiLU):
        def forward(self, x):
            return x

    assert gated._activation_kind(Mine()) is None and gated._activation_kind(Own()) is None


def test_gated_takes_two_weights_of_x_k_and_both_biases_or_none(launcher):
    x, wg, wu, bg, bu = torch.randn(2, 3, 4), torch.randn(5, 4), torch.randn(5, 4), torch.randn(5), torch.randn(5)
    assert gated._gated_takes(x, wg, None, wu, None) and gated._gated_takes(x, wg, bg, wu, bu)
    assert not gated._gated_takes(x, wg, bg, wu, None) and not gated._gated_takes(x, wg, None, wu, bu)  # one bias
    assert not gated._gated_takes(x, wg, None, wu.half(), None) and not gated._gated_takes(x.double(), wg.double(), None, wu.double(), None)
    assert not gated._gated_takes(x, wg, None, torch.randn(6, 4), None)  # the projections differ
    assert not gated._gated_takes(torch.randn(2, 3), wg, None, wu, None)  # k mismatched: torch raises
    assert not gated._gated_takes(x, wg, torch.randn(4), wu, torch.randn(4)) and not gated._gated_takes(x, wg[None], None, wu[None], None)
    assert not gated._gated_takes(torch.tensor(1.0), wg, None, wu, None)


def test_gated_takes_k_up_to_max_dim(launcher):
    k = cube_rules.MAX_DIM
    w = torch.randn(1, k)
    assert gated._gated_takes(torch.randn(1, k), w, None, w, None)
    w = torch.randn(1, k + 1)
    assert not gated._gated_takes(torch.randn(1, k + 1), w, None, w, None)


def test_gated_takes_nothing_off_the_kernel_path():
    assert not gated._gated_takes(torch.randn(2, 4), torch.randn(5, 4), None, torch.randn(5, 4), None)


def test_halves_are_views_of_the_gate_and_up_halves_of_a_chunked_projection():
    w = torch.randn(6, 4)
    gate, up = gated._halves(w)
    assert all(h.data_ptr() == c.data_ptr() and torch.equal(h, c) for h, c in zip((gate, up), w.chunk(2, dim=0)))
    assert [torch.equal(h, c) for h, c in zip(gated._halves(torch.arange(4.0)), (torch.arange(2.0), torch.arange(2.0, 4.0)))] == [True, True]
    assert gated._halves(None) == (None, None)
    odd, empty, scalar = torch.randn(5, 4), torch.randn(0, 4), torch.tensor(1.0)
    assert all(gated._halves(t)[0] is t and gated._halves(t)[1] is None for t in (odd, empty, scalar))  # no gated kernel takes these


def test_epilogue_takes_a_linears_operands_of_one_dtype_and_x_k(launcher):
    x, w, b = torch.randn(2, 3, 4), torch.randn(5, 4), torch.randn(5)
    assert epilogue._epilogue_takes(x, w, None) and epilogue._epilogue_takes(x, w, b, 2.5)
    assert not epilogue._epilogue_takes(x, w.half(), None) and not epilogue._epilogue_takes(x.double(), w.double(), None)
    assert not epilogue._epilogue_takes(x, torch.randn(5, 3), None)  # k mismatched: torch raises
    assert not epilogue._epilogue_takes(x, w, torch.randn(4)) and not epilogue._epilogue_takes(x, w[None], None)
    assert not epilogue._epilogue_takes(torch.tensor(1.0), torch.randn(5, 1), None)
    k = cube_rules.MAX_DIM
    assert epilogue._epilogue_takes(torch.randn(1, k), torch.randn(1, k), None)
    assert not epilogue._epilogue_takes(torch.randn(1, k + 1), torch.randn(1, k + 1), None)


def test_epilogue_takes_a_finite_number_of_xs_dtype_or_a_tensor_of_the_results_shape(launcher):
    x, w = torch.randn(2, 3, 4), torch.randn(5, 4)
    assert epilogue._epilogue_takes(x, w, None, 3) and epilogue._epilogue_takes(x, w, None, -1e30)
    assert not epilogue._epilogue_takes(x.half(), w.half(), None, 1e30)  # past float16's range
    assert not any(epilogue._epilogue_takes(x, w, None, v) for v in (math.inf, math.nan, True, 1j, "2"))
    other = torch.randn(2, 3, 5)
    assert epilogue._epilogue_takes(x, w, None, other)
    assert not epilogue._epilogue_takes(x, w, None, torch.randn(3, 5))  # broadcasts: torch's own
    assert not epilogue._epilogue_takes(x, w, None, other.half()) and not epilogue._epilogue_takes(x, w, None, other.mT.contiguous().mT)
    assert not epilogue._epilogue_takes(x, w, None, torch.tensor(2.0))


def test_epilogue_takes_nothing_off_the_kernel_path():
    assert not epilogue._epilogue_takes(torch.randn(2, 4), torch.randn(5, 4), None, 1.0)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", [1, "same", "valid"])
def test_conv_torch_pads_as_nn_conv_does(mode, padding):
    layer = torch.nn.Conv2d(3, 4, 3, padding=padding, padding_mode=mode)
    x = torch.randn(2, 3, 7, 6)
    out = conv._conv_torch(torch.nn.functional.conv2d, x, layer.weight, layer.bias, 1, padding, 1, 1, mode)
    torch.testing.assert_close(out, layer(x))


def test_conv_columns_read_a_pointwise_input_in_place_and_gather_patches():
    x = torch.randn(2, 3, 5)
    cols, positions, transposed = conv._conv_columns(x, (1,))
    assert cols.shape == (6, 5) and positions == [5] and not transposed and cols.data_ptr() == x.data_ptr()
    last = torch.randn(2, 5, 3).transpose(1, 2)  # channels-last
    cols, positions, transposed = conv._conv_columns(last, (1,))
    assert cols.shape == (10, 3) and transposed and cols.data_ptr() == last.data_ptr()
    image, w = torch.randn(2, 3, 9, 8), torch.randn(4, 3, 2, 2)
    cols, positions, transposed = conv._conv_columns(image, (2, 2))
    assert positions == [4, 4] and cols.shape == (2 * 12, 16) and not transposed
    out = torch.stack([w.reshape(4, -1) @ c for c in cols.reshape(2, 12, 16)]).reshape(2, 4, 4, 4)
    torch.testing.assert_close(out, torch.nn.functional.conv2d(image, w, stride=2))


def sdpa_inputs(hq=2, hkv=2, sq=3, skv=5, d=8, dtype=torch.float32):
    return (torch.randn(1, hq, sq, d, dtype=dtype), torch.randn(1, hkv, skv, d, dtype=dtype), torch.randn(1, hkv, skv, d, dtype=dtype))


def test_sdpa_takes_one_dtype_heads_that_group_and_head_dims_up_to_256(launcher):
    q, k, v = sdpa_inputs()
    assert attention._sdpa_takes(q, k, v, None, False, None, False)
    assert not attention._sdpa_takes(q, k.half(), v, None, False, None, False)  # mixed dtypes
    assert not attention._sdpa_takes(q, k, v[..., :4], None, False, None, False)  # value dims other than key's
    assert not attention._sdpa_takes(*sdpa_inputs(hq=4), None, False, None, False)  # torch raises without enable_gqa
    assert attention._sdpa_takes(*sdpa_inputs(hq=4), None, False, None, True)
    assert attention._sdpa_takes(*sdpa_inputs(hq=4, hkv=1), None, False, None, False)  # one kv head broadcasts
    assert not attention._sdpa_takes(*sdpa_inputs(hq=3), None, False, None, True)
    assert attention._sdpa_takes(*sdpa_inputs(d=256), None, False, None, False)  # gemma's head dim
    assert not attention._sdpa_takes(*sdpa_inputs(d=264), None, False, None, False)
    assert not attention._sdpa_takes(q, k, v, None, 1, None, False) and not attention._sdpa_takes(q, k, v, None, False, "1", False)
    assert not attention._sdpa_takes(*sdpa_inputs(dtype=torch.float64), None, False, None, False)


def test_sdpa_takes_masks_that_broadcast_to_the_scores_with_a_key_in_every_row(launcher):
    q, k, v = sdpa_inputs()
    assert attention._sdpa_takes(q, k, v, torch.randn(3, 5), False, 0.5, False)
    assert attention._sdpa_takes(q, k, v, torch.ones(1, 1, 3, 5, dtype=torch.bool), True, None, False)
    assert not attention._sdpa_takes(q, k, v, torch.randn(3, 5).half(), False, None, False)
    assert not attention._sdpa_takes(q, k, v, torch.randn(4, 5), False, None, False)
    holes = torch.ones(3, 5, dtype=torch.bool)
    holes[1] = False  # a row with no key: torch gives zeros there, and so does the kernel reading the mask in place
    assert attention._sdpa_takes(q, k, v, holes, False, None, False)
    assert not attention._sdpa_takes(q, k, v, holes, True, None, False)  # with is_causal: an FP32 bias, which cannot tell
    assert not attention._sdpa_takes(q, k, v, holes[:, None].expand(3, 3, 5).transpose(0, 1), True, None, False)


def test_sdpa_takes_nothing_off_the_kernel_path():
    assert not attention._sdpa_takes(*sdpa_inputs(), None, False, None, False)


def test_sdpa_tiles_are_powers_of_two_from_16():
    assert [attention._sdpa_tile(n, attention._SDPA_ROWS) for n in (1, 16, 17, 300, 5000)] == [16, 16, 32, 512, 512]
    assert attention._sdpa_tile(5000, attention._SDPA_KV) == 1024


def test_sdpa_bias_is_a_causal_band_or_the_mask_as_additive_fp32_rows():
    q, k, _ = sdpa_inputs(sq=4, skv=6)
    band, kind, by_batch, by_head = attention._sdpa_bias(q, k, None, True, 4)
    assert (kind, by_batch, by_head) == ("causal", False, False) and band.shape == (4, 8)
    cols, rows = torch.arange(8), torch.arange(4)[:, None]
    assert torch.equal(band, torch.where(cols - 4 <= rows, 0.0, -1e30))
    assert attention._sdpa_bias(q, k, None, False, 4)[1] is None
    mask = torch.rand(2, 4, 6) > 0.3  # per head
    bias, kind, by_batch, by_head = attention._sdpa_bias(q, k, mask, True, 4)  # with is_causal: FP32 rows
    assert (kind, by_batch, by_head) == ("mask", False, True) and bias.shape == (8, 8)  # skv padded to 32 bytes
    assert torch.equal(bias[:, :6], torch.where(mask & torch.ones(4, 6, dtype=torch.bool).tril(), 0.0, -1e30).reshape(8, 6))
    assert not bias[:, 6:].any() and attention._sdpa_bias(q, k, mask, True, 4)[0] is bias  # kept on the mask until it changes
    rows, kind, by_batch, by_head = attention._sdpa_bias(q, k, mask, False, 4)  # a bool mask alone: its rows in place
    assert (kind, by_batch, by_head) == ("keep", False, True) and rows.shape == (8, 6) and rows.data_ptr() == mask.data_ptr()
    window = (torch.rand(1, 1, 4, 6) > 0.3).expand(3, 1, 4, 6)  # one mask over the batch, as transformers expands it
    rows, kind, by_batch, by_head = attention._sdpa_bias(torch.randn(3, 2, 4, 8), k, window, False, 4)
    assert (kind, by_batch, by_head) == ("keep", False, False) and rows.shape == (4, 6) and rows.data_ptr() == window.data_ptr()
    padded = torch.rand(3, 1, 4, 6) > 0.3  # per batch row (a padding mask)
    assert attention._sdpa_bias(torch.randn(3, 2, 4, 8), k, padded, False, 4)[1:] == ("keep", True, False)
    assert attention._sdpa_bias(q, k, torch.rand(1, 6) > 0.3, False, 4)[1] == "mask"  # broadcast along sq: FP32 rows
    causal = attention._sdpa_bias(q, k, torch.zeros(4, 6), True, 4)[0]
    assert torch.equal(causal[:, :6], torch.zeros(4, 6).masked_fill(torch.ones(4, 6, dtype=torch.bool).triu(1), -1e30))


def test_sdpa_rows_read_heads_in_the_columns_in_place_else_pad_d_to_16():
    per_head = torch.randn(2, 5, 3, 16).transpose(1, 2)  # [b, s, heads, d] viewed [b, heads, s, d]
    rows, columns = attention._sdpa_rows(per_head)
    assert columns and rows.shape == (10, 48) and rows.data_ptr() == per_head.data_ptr()
    t = torch.randn(2, 3, 5, 8)
    rows, columns = attention._sdpa_rows(t)
    assert not columns and rows.shape == (30, 16) and torch.equal(rows[:, :8], t.reshape(-1, 8)) and not rows[:, 8:].any()


def test_a_weights_contiguous_copy_is_kept_until_it_changes():
    w = torch.randn(6, 10)[:, :5]
    kept = operands._kept_contiguous(w)
    assert kept.is_contiguous() and torch.equal(kept, w) and operands._kept_contiguous(w) is kept
    w.add_(1)
    again = operands._kept_contiguous(w)
    assert again is not kept and torch.equal(again, w)
    contiguous = torch.randn(3, 3)
    assert operands._kept_contiguous(contiguous) is contiguous


def test_kernel_indices_are_the_index_flattened_within_the_count():
    index = torch.tensor([[0, 2], [1, 3]])
    flat = operands._kernel_indices(index, 4)  # off the kernel path: bounded by torch
    assert flat.dtype == torch.int64 and flat.tolist() == [0, 2, 1, 3]
    assert operands._kernel_indices(index.int(), 4).dtype == torch.int32
    assert operands._kernel_indices(index, 3) is None  # 3 is out of range: torch raises
    assert operands._kernel_indices(-index, 4) is None
    assert operands._kernel_indices(index.float(), 4) is None
    assert operands._kernel_indices(index[:0], 4) is None
    assert operands._kernel_indices(index, 4, rank=1) is None


def test_indexed_dim_is_a_dim_of_the_tensor_or_none():
    t = torch.randn(2, 3)
    assert operands._indexed_dim(t, -1) == 1 and operands._indexed_dim(t, 0, rank=2) == 0
    assert operands._indexed_dim(t, 2) is None and operands._indexed_dim(t, 0, rank=3) is None
    assert operands._indexed_dim(torch.tensor(1.0), 0) is None and operands._indexed_dim(t, 1.0) is None


# ---- grad: a kernel's result carries torch's gradient


def kernel_exp(x, scale=1.0):
    """A stand-in for a kernel path: the value computed outside autograd."""
    with torch.no_grad():
        return torch.exp(x) * scale


def test_with_torch_grad_without_autograd_is_the_kernel_path():
    x = torch.randn(3)
    assert torch.equal(grad._with_torch_grad(kernel_exp, torch.exp, x), torch.exp(x))
    with torch.no_grad():
        result = grad._with_torch_grad(kernel_exp, torch.exp, x.requires_grad_())
    assert result.grad_fn is None


def test_with_torch_grad_gives_torchs_gradient_of_each_tensor_that_wants_one():
    x, w = torch.randn(3, requires_grad=True), torch.randn(3)
    result = grad._with_torch_grad(lambda x, w, s: kernel_exp(x) * w * s, lambda x, w, s: torch.exp(x) * w * s, x, w, 2.0)
    assert torch.allclose(result, torch.exp(x) * w * 2)
    result.sum().backward()
    assert torch.allclose(x.grad, torch.exp(x.detach()) * w * 2) and w.grad is None


def test_with_torch_grads_gives_torchs_gradients_of_the_results_that_reach_the_loss():
    """Several results (a grouped region's): each input's gradient from the results the loss reads;
    an input that only an unread result reads gets none, as in torch."""
    x, y = torch.randn(3, requires_grad=True), torch.randn(4, requires_grad=True)

    def kernel_path(x, y):
        return kernel_exp(x), kernel_exp(y, 2.0)

    a, b = grad._with_torch_grads(kernel_path, lambda x, y: (torch.exp(x), torch.exp(y) * 2), x, y)
    assert torch.allclose(a, torch.exp(x)) and torch.allclose(b, torch.exp(y) * 2)
    (a.sum() * 3).backward()
    assert torch.allclose(x.grad, torch.exp(x.detach()) * 3) and y.grad is None
    a, b = grad._with_torch_grads(kernel_path, lambda x, y: (torch.exp(x), torch.exp(y) * 2), x, y)
    (a.sum() + b.sum()).backward()
    assert torch.allclose(y.grad, torch.exp(y.detach()) * 2)
    with torch.no_grad():
        assert all(r.grad_fn is None for r in grad._with_torch_grads(kernel_path, None, x, y))


@pytest.mark.parametrize("tied", [False, True], ids=["two weights", "one weight held twice"])
def test_with_held_grads_gives_the_submodules_weights_torchs_gradient_once(tied):
    """A region inlining two scaling submodules: its torch path calls them (reading their weights),
    its kernel path takes the weights held; each weight and the input get torch's gradient (a
    weight held twice once, not twice), the result used twice."""
    first, second = torch.nn.Linear(3, 3, bias=False), torch.nn.Linear(3, 3, bias=False)
    if tied:
        second.weight = first.weight
    x = torch.randn(2, 3, requires_grad=True)

    def torch_path(x, first, second):
        h = first(x)
        return second(h), h

    def kernel_path(x, first, second, w1, w2):
        h = x @ w1.T
        return h @ w2.T, h

    expected = torch_path(x, first, second)
    ((expected[0] * expected[1]).sum() + expected[0].sum()).backward()
    wanted = [x.grad, *(p.grad for p in {id(p): p for p in (first.weight, second.weight)}.values())]
    x.grad = first.weight.grad = second.weight.grad = None
    got = grad._with_held_grads(kernel_path, torch_path, x, first, second, held=(first.weight, second.weight))
    for g, e in zip(got, expected):
        assert torch.allclose(g, e) and g.grad_fn is not None
    ((got[0] * got[1]).sum() + got[0].sum()).backward()
    for g, e in zip([x.grad, *(p.grad for p in {id(p): p for p in (first.weight, second.weight)}.values())], wanted):
        torch.testing.assert_close(g, e)
    with torch.no_grad():
        assert all(r.grad_fn is None for r in grad._with_held_grads(kernel_path, None, x, first, second, held=(first.weight, second.weight)))


def test_a_result_sharing_an_inputs_storage_is_a_copy():
    x = torch.randn(3, requires_grad=True)
    result = grad._TorchGradient.apply(lambda x: x.detach(), lambda x: x * 1, x)
    assert result.untyped_storage().data_ptr() != x.untyped_storage().data_ptr() and torch.equal(result, x)
    result.mul_(2)  # the Function's own tensor: changed in place as torch's result may be


# ---- the families' host helpers: moves, joins, and the operands they take


def moved_along(x, dim, size, runs, value=0.0):
    """What _moved_along's assemble kernel computes, in torch: `x` rebuilt along `dim` from runs."""
    out = torch.full((*x.shape[:dim], size, *x.shape[dim + 1:]), value, dtype=x.dtype)
    for start, count, at in runs:
        out.narrow(dim, at, count).copy_(x.narrow(dim, start, count))
    return out


def apply_moves(moved):
    x, moves, shape = moved
    for dim, size, runs in moves:
        x = moved_along(x, dim, size, runs)
    return x if shape is None else x.reshape(shape)


@pytest.mark.parametrize("shifts, dims", [(1, 0), (-2, 1), ((1, 2), (0, 1)), ((1, 1), (1, 1)), (3, None), (7, -1)])
def test_rolled_moves_are_torch_roll(shifts, dims):
    x = torch.arange(12.0).reshape(3, 4)
    assert torch.equal(apply_moves(layout._rolled(x, shifts, dims)), torch.roll(x, shifts, dims))


def test_rolled_refuses_what_torch_refuses():
    x = torch.randn(3, 4)
    assert layout._rolled(x, (1, 2), None) is None and layout._rolled(x, 1, 2) is None
    assert layout._rolled(x, (1, 2), (0,)) is None and layout._rolled(x, (1.0,), 0) is None
    with pytest.raises(TypeError):  # as torch.roll raises (its message differs)
        layout._rolled(x, 1.0, 0)


@pytest.mark.parametrize("repeats, dim", [(2, 0), (3, 1), (1, -1), (2, None), (64, 0)])
def test_repeated_moves_are_torch_repeat_interleave(repeats, dim):
    x = torch.arange(6.0).reshape(2, 3)
    assert torch.equal(apply_moves(layout._repeated(x, repeats, dim)), torch.repeat_interleave(x, repeats, dim))


def test_repeated_takes_up_to_64_copies_of_an_int():
    x = torch.randn(2, 3)
    assert layout._repeated(x, 65, 0) is None and layout._repeated(x, 0, 0) is None
    assert layout._repeated(x, torch.tensor(2), 0) is None and layout._repeated(x, 2, 2) is None


@pytest.mark.parametrize("pad", [(1, 2), (0, 0, 2, 1), (-1, 1), (1, -2, -1, 0)])
def test_padded_moves_are_f_pad(pad):
    x = torch.arange(12.0).reshape(3, 4)
    moved = layout._padded(x, pad, "constant", None)
    expected = torch.nn.functional.pad(x, pad)
    assert moved[2] is None and torch.equal(apply_moves(moved), expected)


def test_padded_leaves_other_modes_and_emptied_dims_to_torch():
    x = torch.randn(3, 4)
    assert layout._padded(x, (1, 1), "reflect", None) is None and layout._padded(x, (-2, -2), "constant", 0.0) is None
    assert layout._padded(x, (1,), "constant", None) is None and layout._padded(x, (1, 1), "constant", "a") is None


def joined_by_maps(joined):
    """What a join kernel writes for _joined's windows and maps (walks.join_kernel), in torch."""
    windows, maps, rows, width, shape = joined
    out = torch.full((rows, width), float("nan"))
    for window, (span, stack, blocks, heads, xo, xh, co, ch, c0, row, col) in zip(windows, maps):
        n = window.shape[0] // stack
        for o in range(blocks):
            outer, inner = divmod(o, heads)
            x, c = (outer * xo + inner * xh) * n, outer * co + inner * ch + c0
            at = o * (rows // blocks) + row
            out[at:at + n, col:col + span] = window[x:x + n, c:c + span]
    return out.reshape(shape)


@pytest.mark.parametrize("stacked, dim, shapes", [
    (False, 0, [(2, 4, 5), (3, 4, 5)]), (False, 1, [(2, 4, 5), (2, 1, 5)]), (False, -1, [(2, 4, 5), (2, 4, 2), (2, 4, 1)]),
    (True, 0, [(2, 4, 5)] * 2), (True, 2, [(2, 4, 5)] * 3), (True, -1, [(2, 4, 5)] * 2),
])
def test_joined_places_are_torch_cat_and_stack(launcher, stacked, dim, shapes):
    tensors = [torch.randn(shape) for shape in shapes]
    expected = torch.stack(tensors, dim) if stacked else torch.cat(tensors, dim)
    assert torch.equal(joined_by_maps(layout._joined(tensors, dim, stacked)), expected)


def test_joined_reads_a_column_slice_in_place(launcher):
    base = torch.arange(40.0).reshape(8, 5)
    windows, maps, _, width, _ = layout._joined([torch.ones(8, 2), base[:, 1:4]], -1, False)
    assert windows[1].data_ptr() == base.data_ptr() and maps[1][0] == 3 and maps[1][-1] == 2 and width == 5


@pytest.mark.parametrize("dim", [-2, -1])
def test_joined_reads_transposed_keys_in_place(launcher, dim):
    # a DynamicCache's update: the cache's keys [b, h, s, d] and a projection's key viewed per head
    # and transposed ([b, s, h, d] memory), also a column slice of it (phi3's rotate_half)
    keys, key = torch.randn(2, 3, 4 if dim == -2 else 5, 40), torch.randn(2, 5, 3, 40).transpose(1, 2)
    for tensors in [keys, key], [key[..., :16], key[..., 16:]]:
        if dim != -1 and tensors[0].shape[-1] == 16:
            continue
        joined = layout._joined(tensors, dim, False)
        assert all(w.untyped_storage().data_ptr() == t.untyped_storage().data_ptr() for w, t in zip(joined[0], tensors))
        assert torch.equal(joined_by_maps(joined), torch.cat(tensors, dim))


def test_joined_leaves_mixed_or_mismatched_tensors_to_torch(launcher):
    x = torch.randn(2, 3)
    assert layout._joined([x, x.half()], 0, False) is None
    assert layout._joined([x, torch.randn(2, 4)], 0, False) is None  # torch raises
    assert layout._joined([x, x], 2, False) is None and layout._joined([x, x], 0.0, False) is None
    assert layout._joined([x, 2.0], 0, False) is None


def test_scan_rows_move_the_scanned_dim_last():
    t = torch.randn(2, 3, 4)
    rows, moved = layout._scan_rows(t, 1)
    assert rows.shape == (8, 3) and moved == (2, 4, 3) and torch.equal(rows.reshape(moved).movedim(-1, 1), t)
    assert layout._scan_rows(torch.tensor(2.0), 0)[0].shape == (1, 1)


def test_row_operands_end_in_the_shape_and_share_the_dtype(launcher):
    x, w = torch.randn(2, 3, 4), torch.randn(4)
    assert operands._row_operands(x, (4,), w, None)
    assert not operands._row_operands(x, (4,), w.half()) and not operands._row_operands(x, (3,), None)
    assert not operands._row_operands(x, (), None) and not operands._row_operands(x, (4,), torch.randn(1, 4))


def test_gathers_scatters_and_adds_are_where_torch_defines_them():
    x, index = torch.randn(3, 4), torch.zeros(2, 4, dtype=torch.int64)
    assert operands._gathers(x, index, 0) and not operands._gathers(x, torch.zeros(2, 5, dtype=torch.int64), 0)
    assert operands._scatters(x, torch.zeros(3, 2, dtype=torch.int64), torch.randn(3, 2), 1, "add")
    assert operands._scatters(x, index, torch.randn(2, 4), 0, "multiply")
    assert not operands._scatters(x, torch.zeros(3, 2, dtype=torch.int64), torch.randn(3, 2), 0, "add")  # nor x's rows
    assert operands._scatters(x, torch.zeros(3, 2, dtype=torch.int64), 1.5, 1, None)
    assert not operands._scatters(x.half(), torch.zeros(3, 2, dtype=torch.int64), 1e6, 1, None)
    assert not operands._scatters(x, torch.zeros(3, 2, dtype=torch.int64), 1.0, 1, "mean")
    indices = torch.tensor([0, 2])
    assert operands._adds(x, indices, torch.randn(2, 4), 0, 1) and not operands._adds(x, indices, torch.randn(2, 4), 1, 1)
    assert not operands._adds(x, indices, torch.randn(2, 4), 0, torch.tensor(1.0))


def test_one_hot_classes_check_the_range_torch_raises_outside(launcher):
    i = torch.tensor([0, 3, 1])
    assert operands._one_hot_classes(i, -1) == 4 and operands._one_hot_classes(i, 6) == 6
    assert operands._one_hot_classes(i, 3) is None and operands._one_hot_classes(-i, 6) is None
    assert operands._one_hot_classes(i, 8193) is None and operands._one_hot_classes(i.int(), 6) is None


# ---- wrappers around a generated kernel factory: a stand-in factory computes in torch

TORCH_DTYPES = {v: k for k, v in launch._PYPTO_DTYPES.items()}


@pytest.fixture
def running(monkeypatch):
    """A PYPTO_LAUNCHER that runs the (stand-in) kernel it is given, recording each launch."""
    launches = []

    def run(kernel, *tensors):
        launches.append(kernel.args)
        kernel(*tensors)

    monkeypatch.setattr(launch, "PYPTO_LAUNCHER", run)
    return launches


def factory(compute):
    """A stand-in kernel factory: kernel(*tensors) calls compute(args, *tensors), args its own."""
    def make(*args):
        def kernel(*tensors):
            compute(args, *tensors)
        kernel.args = args
        return kernel
    return make


def test_a_helper_requires_the_generated_factory_it_imports():
    from torch2pypto.rules import casting as rule
    from torch2pypto.rules import movement

    assert "cast_kernel" in rule.CAST.requires and "assemble1_kernel" in movement.ALONG.requires


def test_pypto_cast_launches_once_in_the_inputs_layout(running, monkeypatch):
    monkeypatch.setattr(casting, "cast_kernel", factory(lambda args, x, out: out.copy_(x.to(TORCH_DTYPES[args[1]]))))
    x = torch.randn(5, 3).mT  # transposed: read and written in place in that layout
    y = casting.pypto_cast(x, torch.float16)
    assert y.dtype == torch.float16 and y.stride() == x.stride() and torch.equal(y, x.half())
    assert running == [(launch._PYPTO_DTYPES[torch.float32], launch._PYPTO_DTYPES[torch.float16], 3, tiles._spread_rows(5, 3))]  # its [5, 3] base
    assert casting.pypto_cast(x, torch.float32) is x and len(running) == 1  # torch returns the input itself
    assert torch.equal(casting.pypto_cast(x, torch.float64), x.double()) and len(running) == 1  # no kernel dtype


def test_pypto_cast_carries_torchs_gradient_and_its_forms_reach_it(running, monkeypatch):
    monkeypatch.setattr(casting, "cast_kernel", factory(lambda args, x, out: out.copy_(x.to(TORCH_DTYPES[args[1]]))))
    x = torch.randn(4, 3, requires_grad=True)
    y = casting.pypto_to(x, torch.bfloat16)
    y.float().sum().backward()
    assert y.dtype == torch.bfloat16 and torch.equal(x.grad, torch.ones(4, 3)) and len(running) == 1
    assert casting.pypto_type_as(x.detach(), torch.ones(1).half()).dtype == torch.float16
    assert casting.pypto_to(x.detach(), torch.ones(1).half()).dtype == torch.float16
    assert casting.pypto_to(x.detach(), "cpu").dtype == torch.float32 and len(running) == 3


def assemble(args, x, out):
    """What an assemble kernel computes: runs of x's columns into out, the other runs filled."""
    _, _, _, (places,), fills, value = args
    for src, size, dst in places:
        out[:, dst:dst + size] = x[:, src:src + size]
    for dst, size in fills:
        out[:, dst:dst + size] = value


@pytest.mark.parametrize("dim, size, runs, value", [
    (0, 5, [(0, 2, 1)], 0.0), (1, 6, [(2, 2, 0), (0, 2, 2)], -1.0), (2, 3, [(3, 1, 0), (0, 1, 2)], 2.5), (1, 2, [(1, 2, 0)], 0.0),
])
def test_moved_along_is_one_assemble_launch(running, monkeypatch, dim, size, runs, value):
    monkeypatch.setattr(layout, "assemble1_kernel", factory(assemble))
    x = torch.randn(2, 4, 4)
    assert torch.equal(layout._moved_along(x, dim, size, runs, value), moved_along(x, dim, size, runs, value))
    assert len(running) == 1


def test_moved_along_reads_a_column_slice_in_place(running, monkeypatch):
    monkeypatch.setattr(layout, "assemble1_kernel", factory(assemble))
    base = torch.randn(3, 6)
    x = base[:, 2:5]
    assert torch.equal(layout._moved_along(x, 1, 3, [(2, 1, 0), (0, 2, 1)]), torch.roll(x, 1, 1))
    (_, cols, _, (places,), _, _), = running
    assert cols == (6,) and places == ((4, 1, 0), (2, 2, 1))  # runs from the slice's start in base's rows


def test_col_minus_row_is_the_offset_a_triangle_compares_with_its_diagonal():
    offsets = operands._col_minus_row(3, 4, "cpu")
    assert offsets.dtype == torch.float32 and offsets.shape == (3, 4)
    x = torch.randn(3, 4)
    assert torch.equal(torch.where(offsets <= 1, x, 0.0), torch.tril(x, 1))
    assert torch.equal(torch.where(offsets >= -1, x, 0.0), torch.triu(x, -1))


def test_narrow_rows_operands_are_read_in_place_at_their_own_width(launcher):
    """phi3's cos, rotary_dim wide, against q's [B, H, S, head_dim]: _fused_shape takes it where its
    leading dims broadcast and its width is the one given; _row_blocks reads it from its storage,
    broadcast over the heads, in its own width, with q's blocks."""
    q = torch.randn(2, 5, 4, 64).transpose(1, 2)  # [B, H, S, D], a transposed view
    cos = torch.randn(2, 5, 32)[:, None]
    shape = layout._fused_shape((q,), narrow=((cos, 32),))
    assert shape == q.shape
    assert layout._fused_shape((q,), narrow=((cos, 48),)) is None
    assert layout._fused_shape((q,), narrow=((torch.randn(3, 1, 5, 32), 32),)) is None
    heads, blocks, n, ((q_rows, q_map), (cos_rows, cos_map)) = layout._row_blocks(shape, q, (cos, 32))
    assert cos_rows.data_ptr() == cos.data_ptr() and cos_map[0] == 32 and cos_map[1] == 32
    assert (heads, blocks, n) == layout._row_blocks(shape, q)[:3]
    for o in range(blocks):  # each block's rows of cos are the ones torch broadcasts to it
        outer, inner = divmod(o, heads)
        width, span, xo, xh, co, ch, c0, step = cos_map
        start = (outer * xo + inner * xh) * n
        got = cos_rows[start : start + n, outer * co + inner * ch + c0 :][:, :span]
        torch.testing.assert_close(got, cos.expand(2, 4, 5, 32)[outer, inner])
