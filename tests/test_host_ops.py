"""Wrappers hand their operands to the kernel as they are: the aten ops a wrapper runs on the host
around its launch are counted (host_ops), and any beyond those docs/host-copies.md names fail."""

import collections

import pytest
import torch

import torch2pypto
from helpers import sample, translate
from table_cases import load
from torch2pypto.mapping import load_table
from torch2pypto.mapping.tolerance import tolerance as entry_tolerance
from torch2pypto.translator.verification import interpreter
from torch2pypto.translator.verification.hostops import host_ops

pytestmark = pytest.mark.interpreter

SOURCE = """\
import torch
import torch.nn.functional as F


def add(x: torch.Tensor, y: torch.Tensor):
    return torch.add(x, y)


def sigmoid(x: torch.Tensor):
    return torch.sigmoid(x)


def row_sum(x: torch.Tensor):
    return x.sum(-1)


def middle_sum(x: torch.Tensor):
    return x.sum(dim=1)


def softmax(x: torch.Tensor):
    return F.softmax(x, dim=-1)


def softmax_float(x: torch.Tensor):
    return F.softmax(x, dim=-1, dtype=torch.float)


def log_softmax_to(x: torch.Tensor, dtype: torch.dtype):
    return F.log_softmax(x, dim=-1, dtype=dtype)


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor):
    return F.linear(x, w, b)


def matmul(a: torch.Tensor, b: torch.Tensor):
    return torch.matmul(a, b)


def to_float(x: torch.Tensor):
    return x.float()


def rope(q: torch.Tensor, cos: torch.Tensor):
    return q * cos


def add_(x: torch.Tensor, y: torch.Tensor):
    return x.add_(y)


def halves(x: torch.Tensor):
    return torch.cat((x[..., 16:], x[..., :16]), dim=-1)


def embed(ids: torch.Tensor, weight: torch.Tensor):
    return F.embedding(ids, weight)


def cache_update(keys: torch.Tensor, states: torch.Tensor):
    return torch.cat([keys, states], dim=-2)


def split_attention(qkv: torch.Tensor, heads: int):
    b, s, _ = qkv.shape
    q, k, v = qkv.split(qkv.shape[-1] // 3, dim=2)
    q = q.view(b, s, heads, -1).transpose(1, 2)
    k = k.view(b, s, heads, -1).transpose(1, 2)
    v = v.view(b, s, heads, -1).transpose(1, 2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=s > 1)


def rotate_half(x: torch.Tensor):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((x2, x1), dim=-1)
"""


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("host_ops")
    (folder / "original.py").write_text(SOURCE)
    translation = translate(SOURCE)
    left = [r for r in translation.records if r.status != "converted" and r.category != "host-side"]  # views stay torch's
    assert not left, left
    (folder / "translated.py").write_text(translation.code)
    return load(folder / "translated.py"), load(folder / "original.py")


def host(modules, name, *args, calls=1, tolerance=None):
    """The aten ops the last of `calls` calls of translated `name` ran outside its launches (it
    launched a kernel and computed what torch does, within `tolerance`'s (atol, rtol) if given)."""
    translated, original = modules
    expected = getattr(original, name)(*args)
    for _ in range(calls):
        launched = interpreter.counting()
        with torch.no_grad(), torch2pypto.interpreted(translated), host_ops(translated) as ops:
            got = getattr(translated, name)(*args)
        assert sum(launched().values()) > 0, f"{name} launched no kernel"
    atol, rtol = tolerance or (None, None)
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
    return dict(ops)


def test_an_elementwise_op_of_equal_shapes_copies_nothing(modules):
    assert host(modules, "add", sample(6, 64), sample(6, 64, seed=1)) == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_broadcast_operand_of_an_elementwise_op_is_read_in_place(modules, dtype):
    # before: each expanded and copied on the host
    cases = [((6, 64), (64,)), ((2, 4, 7, 7), (2, 1, 7, 7)), ((2, 4, 7, 40), (1, 1, 7, 40)), ((3, 5, 24), (3, 1, 24)),
             ((2, 3, 1, 32), (2, 1, 1, 32))]  # a row, an attention mask over the heads, cos over batch and heads
    for x, y in cases:
        assert host(modules, "add", sample(*x, dtype=dtype), sample(*y, dtype=dtype, seed=1)) == {}, (x, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_columns_and_scalars_are_spread_on_chip(modules, dtype):
    # an outer product (rotary's positions x inverse frequencies), a [rows, 1] column, a 0-dim scalar
    for x, y in (((1, 7, 1), (16,)), ((5, 40), (5, 1)), ((3, 33), ())):
        assert host(modules, "add", sample(*x, dtype=dtype), sample(*y or (1,), dtype=dtype, seed=1).reshape(y)) == {}, (x, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_elementwise_kernels_walk_every_row_tile_of_every_block(modules, dtype):
    # one loop over the row tiles of all blocks: several tiles per block (the last one partial),
    # a dense matrix (one block), a column beside rows wider than a tile, odd sizes
    q = sample(2, 70, 3, 40, dtype=dtype).transpose(1, 2)
    for x, y in ((q, sample(2, 1, 70, 40, dtype=dtype, seed=1)), (q, sample(2, 3, 70, 40, dtype=dtype, seed=1)),
                 (sample(130, 33, dtype=dtype), sample(130, 33, dtype=dtype, seed=1)),
                 (sample(70, 1000, dtype=dtype), sample(70, 1, dtype=dtype, seed=1))):
        assert host(modules, "add", x, y) == {}, (x.shape, y.shape)


def same_layout(got, expected):
    assert got.stride() == expected.stride(), (got.stride(), expected.stride())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_transposed_input_is_read_and_its_result_written_in_torchs_layout(modules, dtype):
    # before: a clone of each transposed operand and a copy_ of the result into torch's strides
    x, y = (sample(2, 7, 3, 40, dtype=dtype, seed=s).transpose(1, 2) for s in (0, 1))
    assert host(modules, "add", x, y) == {}
    assert host(modules, "sigmoid", sample(37, 5, dtype=dtype).t()) == {}
    same_layout(modules[0].add(x, y), modules[1].add(x, y))


def test_a_cast_of_a_transposed_input_copies_nothing(modules):
    x = sample(2, 7, 3, 40, dtype=torch.bfloat16).transpose(1, 2)
    assert host(modules, "to_float", x) == {}


def test_an_operand_in_another_layout_than_the_first_is_read_in_place(modules):
    # torch lays the result out as the first operand: q's heads transposed (RoPE's q * cos); the
    # others are read in that order from their own storage (before: a copy of each)
    q = sample(2, 7, 3, 40).transpose(1, 2)
    assert host(modules, "rope", q, sample(2, 1, 7, 40, seed=1)) == {}  # cos broadcast over the heads
    assert host(modules, "add", q, sample(2, 3, 7, 40, seed=1)) == {}  # y in row-major order
    same_layout(modules[0].add(q, sample(2, 3, 7, 40)), modules[1].add(q, sample(2, 3, 7, 40)))


def test_a_whole_tile_kernel_reads_fewer_rows_than_a_tile_without_padding(modules):
    assert host(modules, "sigmoid", sample(5, 64)) == {}


def test_a_row_reduction_of_aligned_rows_copies_nothing(modules):
    assert host(modules, "row_sum", sample(3, 5, 64)) == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7, 2, 64), (3, 5, 2, 16), (5, 16, 32)])
def test_a_sum_over_a_middle_dim_adds_its_runs_in_place(modules, dtype, shape):
    """integrations/moe.py's weighted experts' outputs [tokens, top_k, hidden] summed over top_k:
    no permuted copy of the input, no padding."""
    launched = interpreter.counting()
    assert host(modules, "middle_sum", sample(*shape, dtype=dtype)) == {}
    assert launched() == {"sum_runs_kernel.kernel": 1}


def test_a_sum_over_a_middle_dim_of_unaligned_runs_moves_it_last(modules):
    launched = interpreter.counting()
    assert host(modules, "middle_sum", sample(3, 5, 7)) == {"clone": 1, "constant_pad_nd": 1}
    assert launched() == {"sum_kernel.kernel": 1}


def test_a_row_reduction_pads_only_rows_that_are_not_32_byte_aligned(modules):
    assert host(modules, "row_sum", sample(3, 37)) == {"constant_pad_nd": 1}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_composite_reads_and_writes_rows_of_any_width_in_place(modules, dtype):
    # before: each row padded to 32 bytes (constant_pad_nd) and the result sliced back (clone)
    assert host(modules, "softmax", sample(2, 4, 7, 7, dtype=dtype)) == {}  # attention's scores over 7 positions
    x, w, b = sample(3, 5, 37, dtype=dtype), sample(37, seed=1, dtype=dtype), sample(37, seed=2, dtype=dtype)
    assert host(modules, "layer_norm", x, w, b) == {}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_row_composite_casts_to_its_dtype_on_chip(modules, dtype):
    # qwen3_moe's router: F.softmax(logits, dim=-1, dtype=torch.float) of BF16 logits; before: a
    # _to_copy of the input to FP32 on the host
    for shape in ((5, 37), (3, 7, 64), (11, 200)):
        x = sample(*shape, dtype=dtype)
        assert host(modules, "softmax_float", x) == {}, shape
        assert modules[0].softmax_float(x).dtype == torch.float32


def test_a_row_composite_casts_on_the_host_only_where_the_cast_rounds(modules):
    # to FP32 or the input's dtype: on chip (an FP32 input needs no cast); to BF16 from FP32 the
    # input is rounded first, as torch does
    assert host(modules, "log_softmax_to", sample(37, 5, dtype=torch.float16), torch.float32) == {}
    assert host(modules, "log_softmax_to", sample(37, 5, dtype=torch.bfloat16), torch.bfloat16) == {}
    assert host(modules, "log_softmax_to", sample(37, 5), torch.float32) == {}
    assert host(modules, "log_softmax_to", sample(37, 5), torch.bfloat16) == {"_to_copy": 1}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_composite_of_a_transposed_input_is_contiguous_as_torch_s(modules, dtype):
    # torch's softmax and norms write a contiguous result whatever the input's strides; before: a
    # copy_ of the result back into the input's strides, a host op and a layout torch never gives
    x, w, b = sample(2, 37, 5, dtype=dtype).transpose(1, 2), sample(37, seed=1, dtype=dtype), sample(37, seed=2, dtype=dtype)
    assert host(modules, "softmax", x) == host(modules, "layer_norm", x, w, b) == {"clone": 1}  # the rows, gathered
    same_layout(modules[0].softmax(x), modules[1].softmax(x))
    same_layout(modules[0].layer_norm(x, w, b), modules[1].layer_norm(x, w, b))


def test_a_row_composite_of_aligned_rows_copies_nothing(modules):
    assert host(modules, "softmax", sample(2, 3, 64)) == {}
    assert host(modules, "layer_norm", sample(2, 3, 64), sample(64, seed=1), sample(64, seed=2)) == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_reads_q_k_and_v_in_place_from_the_wider_rows_of_one_projection(modules, dtype):
    # GPT-2: q, k, v column slices of c_attn's [b, s, 3 * h * d] output, viewed per head and
    # transposed; before: a clone of each that is not at the end of the rows
    # attention's own tolerance: torch's BF16 attention rounds differently by CPU (AVX-512 or not)
    sdpa = load_table().by_api["torch.nn.functional.scaled_dot_product_attention"]
    for b, s, heads, d in ((2, 7, 2, 64), (1, 13, 3, 32), (3, 1, 4, 16)):
        qkv = sample(b, s, 3 * heads * d, dtype=dtype)
        close = entry_tolerance(sdpa, dtype, (b, heads, s, d))
        assert host(modules, "split_attention", qkv, heads, calls=2, tolerance=close) == {}, (b, s, heads, d)
        same_layout(modules[0].split_attention(qkv, heads), modules[1].split_attention(qkv, heads))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_linear_reads_its_weight_of_any_k_and_n_in_place(modules, dtype):
    # before: n 40 padded to 48 (weight and bias) on the first call, k 37 padded to 48 in every call
    for k in (64, 37):
        x, w, b = sample(2, 5, k, dtype=dtype), sample(40, k, seed=1, dtype=dtype), sample(40, seed=2, dtype=dtype)
        assert host(modules, "linear", x, w, b) == {}
    w_t = sample(37, 40, seed=1, dtype=dtype).t()  # a transposed weight [40, 37]: read through its base
    assert host(modules, "linear", x, w_t, b) == {}


def test_a_weight_of_other_strides_is_copied_once_not_in_every_forward(modules):
    x, w, b = sample(2, 5, 37), sample(40, 74, seed=1)[:, ::2], sample(40, seed=2)
    assert host(modules, "linear", x, w, b) == {"clone": 1}  # pypto.from_torch takes contiguous tensors only
    assert host(modules, "linear", x, w, b) == {}
    with torch.no_grad():
        w.mul_(2)  # a weight changed in place (its version counter moves) is copied again
    assert host(modules, "linear", x, w, b) == {"clone": 1}


def test_a_matmul_folds_a_broadcast_batch_into_rows_without_a_copy(modules):
    assert host(modules, "matmul", sample(2, 3, 8, 32), sample(32, 16, seed=1)) == {}
    assert host(modules, "matmul", sample(2, 8, 32), sample(2, 32, 16, seed=1)) == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_matmul_reads_odd_k_and_n_and_a_transposed_operand_in_place(modules, dtype):
    # attention's q @ k.mT (n = 7) and scores @ v (k = 7); before: padded to 16 and copied
    q, k, v = (sample(2, 4, 7, 32, seed=s, dtype=dtype) for s in range(3))
    assert host(modules, "matmul", q, k.mT) == {}
    assert host(modules, "matmul", sample(2, 4, 7, 7, dtype=dtype), v) == {}
    assert host(modules, "matmul", sample(3, 7, 37, dtype=dtype), sample(37, 33, seed=1, dtype=dtype)) == {}
    assert host(modules, "matmul", sample(5, 37, dtype=dtype), sample(33, 37, seed=1, dtype=dtype).t()) == {}


def test_a_broadcast_batch_of_stacked_matrices_is_the_one_copy_of_a_matmul(modules):
    # named in docs/host-copies.md: a stack of right matrices needs a's rows per matrix
    assert host(modules, "matmul", sample(7, 32), sample(2, 32, 16, seed=1)) == {"clone": 1}


def test_a_cat_reads_column_slices_in_place(modules):
    assert host(modules, "halves", sample(2, 5, 32)) == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cache_update_reads_transposed_keys_and_values_in_place(modules, dtype):
    # DynamicCache.update's torch.cat([self.keys, key_states], dim=-2): the states a projection's
    # output viewed per head and transposed ([b, s, h, d] memory); before: a clone of each. The
    # first update joins the empty 1-D tensor the cache starts from; the result is a new tensor
    translated, _ = modules
    for b, h, s, d in ((2, 3, 7, 40), (1, 5, 1, 24), (2, 4, 33, 32)):  # odd, a decoding step, several tiles
        states = sample(b, s, h, d, dtype=dtype).transpose(1, 2)
        empty = torch.tensor([], dtype=dtype)
        assert host(modules, "cache_update", empty, states) == {}, (b, h, s, d)
        with torch.no_grad(), torch2pypto.interpreted(translated):
            keys = translated.cache_update(empty, states)
        assert keys.is_contiguous() and keys.data_ptr() != states.data_ptr()
        assert host(modules, "cache_update", keys, sample(b, 1, h, d, dtype=dtype, seed=1).transpose(1, 2)) == {}
        assert host(modules, "cache_update", keys, states) == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cat_of_halves_of_a_transposed_tensor_reads_them_in_place(modules, dtype):
    # rotate_half of attention's q after .transpose(1, 2) (phi3's rotary slice); before: a clone of each half
    for shape in ((2, 7, 3, 64), (1, 9, 5, 48)):
        assert host(modules, "rotate_half", sample(*shape, dtype=dtype).transpose(1, 2)) == {}, shape


def test_a_cat_copies_a_tensor_whose_rows_are_no_run_of_its_storage(modules):
    # named in docs/host-copies.md: a last dim not of stride 1 (k.mT) is no row of a window
    keys = sample(2, 3, 40, 7).mT
    assert host(modules, "cache_update", keys, sample(2, 3, 5, 40, seed=1)) == {"clone": 1}


def test_an_embedding_checks_its_indices_on_a_kernel_with_one_sync(modules):
    # before: min, max, two .item() (two host syncs) and the int32 cast; then aminmax, a stack of
    # its two results, one .tolist() and the int32 cast; now the bounds kernel, one .tolist() of
    # its tiles' bounds (no aten op, the one sync), and the kernel reads int64 and int32 ids as they are
    ids, weight = torch.tensor([[0, 3, 10, 3], [7, 0, 1, 2]]), sample(11, 37, seed=1)
    assert host(modules, "embed", ids, weight) == {}
    assert host(modules, "embed", ids.to(torch.int32), weight) == {}


def test_host_ops_leave_out_the_kernels_own_work(modules):
    translated, _ = modules
    x = sample(6, 64)
    with torch.no_grad(), torch2pypto.interpreted(translated), host_ops(translated) as ops:
        torch.exp(x)  # torch's own op, outside any launch: counted
        translated.add(x, x)
    assert ops == collections.Counter({"exp": 1})


def test_an_in_place_op_copies_its_result_into_the_receiver(modules):
    translated, original = modules
    x, y = sample(6, 40), sample(6, 40, seed=1)
    expected = original.add_(x.clone(), y)
    launched = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(translated), host_ops(translated) as ops:
        got = translated.add_(x, y)
    assert sum(launched().values()) == 1 and got is x
    torch.testing.assert_close(got, expected)
    assert ops == {"copy_": 1}  # named in docs/host-copies.md: the kernel writes a new buffer


SCALED_EMBEDDING = """\
import torch
from torch import nn


class Scaled(nn.Embedding):
    def __init__(self, n, d, padding_idx, scale=1.0):
        super().__init__(n, d, padding_idx)
        self.register_buffer("scale", torch.tensor(scale), persistent=False)

    def forward(self, ids: torch.Tensor):
        return super().forward(ids) * self.scale.to(self.weight.dtype)
"""


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_subclass_of_an_nn_layer_calling_its_forward_is_that_layers_site(tmp_path, dtype):
    # gemma3's Gemma3TextScaledWordEmbedding: super().forward(input_ids) * embed_scale; before: no
    # site, torch's embedding in the forward
    translation = translate(SCALED_EMBEDDING)
    assert ("torch.nn.Embedding", "converted") in [(r.api, r.status) for r in translation.records]
    assert "pypto_embedding(ids, self.weight, padding_idx=self.padding_idx," in translation.code
    (tmp_path / "scaled.py").write_text(translation.code)
    namespace = {}
    exec(SCALED_EMBEDDING, namespace)
    torch.manual_seed(0)
    original = namespace["Scaled"](37, 24, 0, 8.0).to(dtype)
    module = load(tmp_path / "scaled.py")
    translated = module.Scaled(37, 24, 0, 8.0).to(dtype)
    translated.load_state_dict(original.state_dict())
    ids = torch.tensor([[0, 3, 36, 5, 7], [1, 2, 0, 4, 9]])
    launched = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(module), host_ops(module) as ops:
        got = translated(ids)
    assert launched()["embedding_kernel.kernel"] == 1 and dict(ops) == {}
    assert torch.equal(got, original(ids))
