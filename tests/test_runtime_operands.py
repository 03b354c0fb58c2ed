"""runtime/operands.py tested as the functions it holds (no code generated): whether a kernel
takes a call's operands, and as what."""

import torch

from torch2pypto.runtime import operands


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


def test_col_minus_row_is_the_offset_a_triangle_compares_with_its_diagonal():
    offsets = operands._col_minus_row(3, 4, "cpu")
    assert offsets.dtype == torch.float32 and offsets.shape == (3, 4)
    x = torch.randn(3, 4)
    assert torch.equal(torch.where(offsets <= 1, x, 0.0), torch.tril(x, 1))
    assert torch.equal(torch.where(offsets >= -1, x, 0.0), torch.triu(x, -1))


def test_a_range_moved_by_an_int_is_the_range_of_moved_bounds_where_both_are_one_tensor():
    for args in [(5, None, 1, 3), (3, 40, 3, -2), (20, -5, -2, 7)]:
        start, end = operands._shifted_range(*args, None)
        range_args = (args[0],) if args[1] is None else args[:3]
        assert torch.equal(torch.arange(start, end, args[2]), torch.arange(*range_args) + args[3])
    assert operands._shifted_range(5, None, 1, 3, torch.int64) == (3, 8)
    assert operands._shifted_range(5, None, 1, 3, torch.int32) is None  # only an int64 range is moved
    assert operands._shifted_range(5, None, 1, True, None) is None  # a bool is no int
    assert operands._shifted_range(5, None, 1, 0.5, None) is None  # a float range
    assert operands._shifted_range(5, None, 1, torch.tensor(3), None) is None  # a tensor: torch adds it
    assert operands._shifted_range(5, None, 2, 3, None) is None  # a step without an end: torch raises
    assert operands._shifted_range(2.0, 5, 1, 3, None) is None  # a float start
