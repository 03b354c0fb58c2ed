"""runtime/layout.py tested as the functions it holds (no code generated): operands as
[rows, cols] matrices, and the moves and joins the movement family's wrappers compute."""

import pytest
import torch

from helpers import factory
from torch2pypto.runtime import layout


# ---- operands as [rows, cols] matrices


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


# ---- the families' host helpers: moves and joins


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


def joins(args, *tensors):
    """What a join kernel of one output per join writes (walks.join_kernel of outputs > 1), in torch."""
    _, widths, width, maps, _ = args
    outs, windows = tensors[len(tensors) - len(width):], tensors[: len(tensors) - len(width)]
    per = len(windows) // len(outs)
    for k, out in enumerate(outs):
        placed = windows[k * per : (k + 1) * per], maps[k * per : (k + 1) * per], out.shape[0], out.shape[1], out.shape
        out.copy_(joined_by_maps(placed))


def test_launch_joins_makes_each_join_in_one_launch(running):
    keys, values = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8)
    key, value = torch.randn(2, 5, 3, 8).transpose(1, 2), torch.randn(2, 3, 5, 8)  # the key a transposed view
    joined = [layout._joined(pair, -2, False) for pair in ([keys, key], [values, value])]
    got = layout._launch_joins(factory(joins), joined)
    assert len(running) == 1 and running[0][2] == (8, 8) and running[0][4] == 8  # one launch, each output 8 wide, 5-row blocks
    for g, pair in zip(got, ([keys, key], [values, value]), strict=True):
        assert g.is_contiguous() and torch.equal(g, torch.cat(pair, -2))


@pytest.mark.parametrize("rows, expected", [(1, 1), (7, 8), (33, 64), (2047, 1024), (10**6, 1024)])
def test_join_rows_cover_the_largest_block_up_to_the_cap(launcher, rows, expected):
    joined = layout._joined([torch.randn(2, rows, 3), torch.randn(2, 1, 3)], 1, False)  # blocks of rows and of 1 row
    assert layout._join_rows(joined[0], joined[1]) == expected


def test_scan_rows_move_the_scanned_dim_last():
    t = torch.randn(2, 3, 4)
    rows, moved = layout._scan_rows(t, 1)
    assert rows.shape == (8, 3) and moved == (2, 4, 3) and torch.equal(rows.reshape(moved).movedim(-1, 1), t)
    assert layout._scan_rows(torch.tensor(2.0), 0)[0].shape == (1, 1)


# ---- _moved_along around a stand-in assemble kernel factory (conftest's `running`)


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


# ---- row blocks of operands of other widths


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
