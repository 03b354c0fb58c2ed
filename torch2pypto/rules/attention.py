"""The attention family: ``F.scaled_dot_product_attention`` as one flash-attention kernel.

Per (batch, head) and tile of query rows, the kernel walks the keys and values in tiles with an
online softmax (running row max ``m``, sum ``l`` and output ``o``, rescaled as each tile comes),
so the [S_q, S_kv] scores exist a [rows, kv] tile at a time, never whole in HBM. Q.K^T and P.V
run on the cube, accumulated in FP32; softmax runs in FP32; fp16/bf16 P is rounded to the input
dtype for the P.V product (as flash kernels do) and the output once.

The kernel reads q/k/v as 2-D rows, each as it lies: a tensor laid out [..., S, heads, D] (a
projection's output viewed per head, as models make q, k and v) as [... * S, width] rows, its
heads side by side in the columns from a first column (the window: GPT-2's q, k and v are column
slices of c_attn's [... * S, 3 * heads * D] rows, read there); any other as [... * heads * S, D] (a copy unless contiguous,
D zero-padded to 16). The output is written [..., S, heads, D] and returned as its [..., heads, S, D]
view (as torch's CPU flash kernel returns it for a query laid out so), so the usual
``.transpose(1, 2).contiguous()`` after it copies nothing; with D not a multiple of 16, as the
query's rows. A GQA/MQA query head ``h``
reads kv head ``h // group`` in the kernel, so K/V are never repeated; nor are a
``repeat_kv``'s that the engine deferred (:mod:`torch2pypto.translator.engine.repeats`): the wrapper
reads key and value marked by ``pypto_repeat_kv`` as their kv heads with enable_gqa, and makes the
repeats (``pypto_repeated``) where torch runs. A causal mask is a
[T, 2T] band of one tile (q and kv tiles equal: tiles above the diagonal are skipped, the
diagonal tile adds the band's right half); a bool mask of [mask heads * S_q, S_kv] rows (a dim
it broadcasts read once: transformers' sliding-window mask, expanded over the batch) is read as
it lies, its False scores -1e30, a row it wholly masks zeros as torch gives; any other attention
mask is an FP32 additive tensor of those rows (a bool mask with is_causal 0 / -1e30 plus the
causal triangle), read per tile. A causal (sliding-window) mask of transformers' that
``pypto_causal_mask`` deferred (:mod:`torch2pypto.translator.engine.masks`) is computed in the
tiles: a query tile walks only the kv tiles of its rows' windows (from the first row's first key
to the last row's own, the queries being the last keys), each adding the [T, K] view of one window
band at the row given by how many keys its first query sees past its first key (a window wider
than T + K - 1 keys keeps the band's and moves its end back). Dropout, masks of other shapes, value dims other than key's,
and rows a bool mask with is_causal masks wholly run torch.

The family takes the rest (Family.takes_rest): a call with ``**kwargs`` (transformers'
``**sdpa_kwargs``, which carries ``enable_gqa``) or ``*args`` passes them to the wrapper as
written; the wrapper checks every argument at run time, and hands a keyword it does not know to
torch's own call.
"""

from __future__ import annotations

from typing import Mapping

from torch2pypto.rules import templates, wrappers
from torch2pypto.rules.calls import convert, fallback_checks, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.kernel_ir import Assign, Call, Comment, Do, If, Stmt, call, items, loop, pypto, when
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.schema.entry import Entry, Fields
from torch2pypto.schema.family import Family, register

PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
# PyPTO stitches up to this many loop iterations' tasks into one dispatch. In the cost model at
# B1 H32 S2048 D128 bf16: 3681 us with its default, 2218 with 128; 256, 512 and 1024 crash it.
JIT = (pypto("frontend.jit", runtime_options='{"stitch_function_max_num": 128}', pass_options="passes"), "")
# PyPTO's partition makes each [rows, 64] L0C tile of Q.K^T a cube task that loads the query tile
# again, and each row tile of the softmax a vector task. With `merge` (the wrapper's choice: at
# least _SDPA_MERGE kv tiles in all), cube_l1_reuse_setting merges up to 8 cube tasks that read
# the same GM data, vec_nbuffer_setting up to 8 alike vector tasks (PyPTO's flash_attention_mha
# sets both). In the cost model, bf16 D128, causal, µs without / with: B1 H32 S2048 1459.8 / 867.9
# (the cube merge alone 1549.0, vec 4 alone 1410.7, both at 4 953.7, vec 16 912.4); H16 S1024
# 222.3 / 138.9; H32 S512 146.4 / 122.9; H32 S256 59.1 / 47.3; H8 S512 (8 tiles) 65.7 / 79.0.
MERGED = '{"cube_l1_reuse_setting": {-1: 8}, "vec_nbuffer_setting": {-1: 8}}'
# Each iteration of the kv loop is a function PyPTO stitches (at most 128 a dispatch, JIT), and
# the cube and vector cores idle between stitches; unrolled, one function runs up to 4 kv tiles,
# so a dispatch holds more of them, and with 3 among the factors a causal query tile of 3 kv tiles
# is one function, not 2 + 1 (at S2048: 2 dispatches, not 3). Cost model, bf16 D128, B1 H32 S2048
# causal, µs: not unrolled 867.9; [2, 1] 701.9; [4, 2, 1] 675.2; [8, 4, 2, 1] 676.0 (the query
# loop unrolled too: 681.3); [4, 3, 2, 1] 605.1.
KV_UNROLL = ("4", "3", "2", "1")
FP32 = templates.FP32


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if tuple(p.name for p in entry.params) != PARAMS:
        return f"the attention family takes torch's sdpa parameters {PARAMS}"
    if set(entry.fallback) != {"dropout_p"} or entry.reject:
        return "attention: fallback = { dropout_p } only, no reject"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    return convert(site, definitions)


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    """The flash-attention kernel, its host helpers, and the wrapper."""
    return _kernel(f"{entry.op}_kernel"), templates.CUBE_TILES, TAKES, OPERANDS, ROWS, REPEATS, _wrapper(entry)


def _kernel(name: str) -> Definition:
    doc = ("Flash attention of [bh * sq, d] query rows over [bh / group * skv, d] key and value rows "
           "([batch * s, width] where q_/k_/v_/out_window (width, first column) say the heads lie in the columns), "
           "online softmax over kv tiles in FP32; bias: None, \"causal\" (a [tile, 2 * tile] band) or "
           "\"mask\" ([mask heads * sq, skv], FP32, per batch and / or head as mask_batch / mask_heads say), "
           "\"keep\" (a bool mask of those rows, read as it lies: False scores -1e30) or \"window\" (a causal mask "
           "of `window` keys, 0 none, the queries the last skv - sq keys: a window band, _sdpa_window_band).")
    prelude = [
        Assign("batch, kv_heads", "bh // heads, heads // group"),
        Assign("(q_cols, q_start), (k_cols, k_start), (v_cols, v_start), (out_cols, out_start)",
               "(window or (d, 0) for window in (q_window, k_window, v_window, out_window))"),
        Assign("qk_k, qk_n", call("_cube_tiles", "d", "kv_tile", "dtype", "tile")),
        Assign("pv_k, pv_n", call("_cube_tiles", "kv_tile", "d", "dtype", "tile")),
        Assign("score_rows, _", call("_tile_shape", "kv_tile", "tile", "4", "(pypto.DT_FP32,)", whole_rows="True")),
        Assign("out_rows, _", call("_tile_shape", "d", "tile", "4", "(pypto.DT_FP32,)", whole_rows="True")),
        Assign("passes", f'{{"pg_skip_partition": False, **({MERGED} if merge else {{}})}}'),
        Assign("bias_dtype", f'{templates.BOOL} if bias_kind == "keep" else {FP32}'),
        Assign("_, beyond", call("_sdpa_band_window", "tile", "kv_tile", "window")),
    ]
    params = [*(templates.tensor(t, items("pypto.DYNAMIC", f"{t}_cols"), "dtype") for t in ("q", "k", "v")),
              templates.tensor("bias", items("pypto.DYNAMIC", "pypto.DYNAMIC"), "bias_dtype"),
              templates.tensor("out", items("pypto.DYNAMIC", "out_cols"), "dtype")]
    body = [
        Assign("sq", "q.shape[0] // (batch if q_window else bh)"),
        Assign("skv", "k.shape[0] // (batch if k_window else bh // group)"),
        loop("h", pypto("loop", "bh", name='"heads"'),
             Comment("where head h starts: row and column in q, k, v and out"),
             *_head_starts(),
             loop("i", pypto("loop", "(sq + tile - 1) // tile", name='"q_tiles"'), *_query_tile())),
    ]
    factory = ("dtype, d, bh, heads, group, scale, tile, kv_tile, bias_kind, mask_batch, mask_heads, "
               "q_window, k_window, v_window, out_window, merge, window")
    source = templates.factory(name, [factory], doc, prelude, params, body, JIT)
    return Definition(name, source, ("_cube_tiles", "_tile_shape", "_annotated", "_sdpa_takes"))


def _head_starts() -> list[Stmt]:
    """Where head ``h`` starts: its row and column in q, k, v and out (heads in the columns or in the rows)."""
    return [
        Assign("q_row", "(h // heads) * sq if q_window else h * sq"),
        Assign("q_col", "q_start + (h % heads) * d if q_window else 0"),
        Assign("k_row", "(h // heads) * skv if k_window else (h // group) * skv"),
        Assign("k_col", "k_start + (h % heads // group) * d if k_window else 0"),
        Assign("v_row", "(h // heads) * skv if v_window else (h // group) * skv"),
        Assign("v_col", "v_start + (h % heads // group) * d if v_window else 0"),
        Assign("out_row", "(h // heads) * sq if out_window else h * sq"),
        Assign("out_col", "(h % heads) * d if out_window else 0"),
    ]


def _accumulated(acc: str, cols: str) -> Call:
    """The valid part of the running ``acc`` ([tile, cols], FP32) for this query tile."""
    return pypto("view", acc, items("tile", cols), items("0", "0"), valid_shape=items("q_len", cols))


def _query_tile() -> list[Stmt]:
    """One tile of query rows: its online softmax over the kv tiles, then its output rows."""
    to_dtype = when(f"dtype != {FP32}", Assign("p", pypto("cast", "p", "dtype")))
    kv = [
        Assign("kv_start", "(kv_first + j) * kv_tile"),
        Assign("kv_len", "(skv - kv_start).min(kv_tile)"),
        Assign("q_tile", pypto("view", "q", items("tile", "d"), items("q_row + i * tile", "q_col"), valid_shape=items("q_len", "d"))),
        Assign("k_tile", pypto("view", "k", items("kv_tile", "d"), items("k_row + kv_start", "k_col"), valid_shape=items("kv_len", "d"))),
        Assign("v_tile", pypto("view", "v", items("kv_tile", "d"), items("v_row + kv_start", "v_col"), valid_shape=items("kv_len", "d"))),
        Do(pypto("set_cube_tile_shapes", items("tile", "tile"), "qk_k", "qk_n")),
        Assign("s", pypto("matmul", "q_tile", "k_tile", FP32, b_trans="True")),
        Do(pypto("set_vec_tile_shapes", "score_rows", "kv_tile")),
        Assign("s", pypto("mul", "s", "scale")),
        when('bias_kind == "causal"',
             when("pypto.is_loop_end(j)",
                  Assign("band", pypto("view", "bias", items("tile", "kv_tile"), items("0", "(j - i + 1).max(0) * tile"),
                                       valid_shape=items("q_len", "kv_len"))),
                  Assign("s", pypto("add", "s", "band"))),
             comment="the last tile: the band's right half on the diagonal, zeros left of it"),
        when('bias_kind == "window"',
             Assign("past", "i * tile + skv - sq - kv_start"),
             If("beyond is None", (Assign("past", "past.min(kv_tile - 1)"),),
                (Assign("past", "past - (past - kv_tile + 1).max(0).min(beyond)"),),
                comment="from kv_tile - 1 keys past, the band's rows alike (all keys kept) but at the window's end",
                else_comment="the window's end moved back by the keys beyond the band's window"),
             Assign("band", pypto("view", "bias", items("tile", "kv_tile"), items("past + tile - 1", "0"),
                                  valid_shape=items("q_len", "kv_len"))),
             Assign("s", pypto("add", "s", "band")),
             comment="the keys the tile's first query sees past its first key pick the window band's rows"),
        when('bias_kind in ("mask", "keep")',
             Assign("mask_row", "((h // heads if mask_batch else 0) * (heads if mask_heads else 1)\n"
                                "            + (h % heads if mask_heads else 0)) * sq + i * tile"),
             Assign("mask_tile", pypto("view", "bias", items("tile", "kv_tile"), items("mask_row", "kv_start"),
                                       valid_shape=items("q_len", "kv_len"))),
             If('bias_kind == "mask"', (Assign("s", pypto("add", "s", "mask_tile")),),
                (Assign("s", pypto("where", "mask_tile", "s", "-1e30")),), else_comment="a bool mask: False scores -1e30")),
        Assign("m_new", pypto("amax", "s", dim="-1", keepdim="True")),
        Assign("p", pypto("exp", pypto("sub", "s", "m_new"))),
        Assign("l_new", pypto("sum", "p", dim="-1", keepdim="True")),
        to_dtype,
        Assign("p", pypto("view", "p", items("tile", "kv_tile"), items("0", "0"), valid_shape=items("q_len", "kv_len"))),
        Do(pypto("set_cube_tile_shapes", items("tile", "tile"), "pv_k", "pv_n")),
        Assign("o_new", pypto("matmul", "p", "v_tile", FP32)),
        Do(pypto("set_vec_tile_shapes", "out_rows", "d")),
        If("pypto.is_loop_begin(j)",
           (Assign("o_acc[:]", "o_new"), Assign("l_acc[:]", "l_new"), Assign("m_acc[:]", "m_new")),
           (Assign("o_old", _accumulated("o_acc", "d")),
            Assign("l_old", _accumulated("l_acc", "1")),
            Assign("m_old", _accumulated("m_acc", "1")),
            Assign("m_max", pypto("maximum", "m_old", "m_new")),
            Assign("old", pypto("exp", pypto("sub", "m_old", "m_max"))),
            Assign("new", pypto("exp", pypto("sub", "m_new", "m_max"))),
            Assign("l_acc[:]", pypto("add", pypto("mul", "l_old", "old"), pypto("mul", "l_new", "new"))),
            Assign("o_acc[:]", pypto("add", pypto("mul", "o_old", "old"), pypto("mul", "o_new", "new"))),
            Assign("m_acc[:]", "m_max")),
           else_comment="rescale what came before and this tile to the new row max"),
    ]
    return [
        Assign("q_len", "(sq - i * tile).min(tile)"),
        Do(pypto("set_vec_tile_shapes", "out_rows", "d")),
        *(Assign(f"{a}_acc", pypto("tensor", items("tile", cols), FP32, f'"{a}_acc"')) for a, cols in (("o", "d"), ("l", "1"), ("m", "1"))),
        Assign("kv_tiles", "(skv + kv_tile - 1) // kv_tile"),
        Assign("kv_first", "0"),
        when('bias_kind == "causal"', Assign("kv_tiles", "kv_tiles.min(i + 1)"), comment="tiles above the diagonal see no key"),
        when('bias_kind == "window"',
             Assign("kv_first", "(i * tile + skv - sq - window + 1).max(0) // kv_tile if window else 0"),
             Assign("kv_tiles", "(i * tile + q_len - 1 + skv - sq) // kv_tile + 1 - kv_first"),
             comment="from the tile of the first query's first key to that of the last query's own"),
        loop("j", pypto("loop", "kv_tiles", name='"kv_tiles"', unroll_list=items(*KV_UNROLL)), *kv),
        Do(pypto("set_vec_tile_shapes", "out_rows", "d")),
        Assign("result", Call("pypto.div", (_accumulated("o_acc", "d"), _accumulated("l_acc", "1")), lines=True)),
        when('bias_kind == "keep"',
             Assign("result", pypto("where", pypto("gt", _accumulated("m_acc", "1"), "-5e29"), "result", "0.0")),
             comment="rows the mask wholly masks (their max stayed -1e30): zeros, as torch gives"),
        when(f"dtype != {FP32}", Assign("result", pypto("cast", "result", "dtype"))),
        Do(pypto("assemble", "result", items("out_row + i * tile", "out_col"), "out")),
    ]


TAKES = copied("attention", "_sdpa_takes", "_SDPA_ROWS", "_sdpa_kept")
OPERANDS = copied("attention", "_sdpa_bias", "_sdpa_window_band", "_sdpa_mask_bias")
ROWS = copied("attention", "_sdpa_rows")
REPEATS = copied("attention", "pypto_repeat_kv", last="_sdpa_unrepeated")  # repeat_kv deferred (engine.repeats)
CAUSAL_MASKS = copied("masks", "pypto_causal_mask", "_CAUSAL_MASK_PARAMS", "pypto_causal_mask_maker")  # engine.masks


def _wrapper(entry: Entry) -> Definition:
    params = wrapper_params(entry)
    q, k, v, mask, dropout, causal, scale, gqa = (p.name for p in params)
    guard = " and ".join(["not kwargs", f"_sdpa_takes({q}, {k}, {v}, {mask}, {causal}, {scale}, {gqa})", *fallback_checks(entry)])
    body = f'''\
d, sq, skv = {q}.shape[-1], {q}.shape[-2], {k}.shape[-2]
heads, group = {q}.shape[-3], {q}.shape[-3] // {k}.shape[-3]
bh = {q}.numel() // (sq * d)
tile = _sdpa_tile(sq, _SDPA_ROWS)
kv_tile = tile if {causal} else _sdpa_tile(skv, _SDPA_KV)
window = _sdpa_window({q}, {k}, {mask}, {causal})  # a causal mask deferred: computed in the kernel's tiles
bias, kind, by_batch, by_head = _sdpa_bias({q}, {k}, {mask}, {causal}, tile, window, kv_tile)
(q_rows, q_window), (k_rows, k_window), (v_rows, v_window) = (_sdpa_rows(t) for t in ({q}, {k}, {v}))
out_window = (heads * d, 0) if d % 16 == 0 else None  # out [..., sq, heads, d]: the model's .transpose(1, 2).contiguous() copies nothing
out = q_rows.new_empty((bh // heads * sq, heads * d)) if out_window else torch.empty_like(q_rows)
factor = float(d ** -0.5 if {scale} is None else {scale})
merge = bh * -(-sq // tile) * -(-skv // kv_tile) >= _SDPA_MERGE  # kv tiles enough to merge the kernel's tasks
kernel = {entry.op}_kernel(_PYPTO_DTYPES[{q}.dtype], d + -d % 16, bh, heads, group, factor, tile, kv_tile, kind, by_batch, by_head, q_window, k_window, v_window, out_window, merge, window)
_launch(kernel, q_rows, k_rows, v_rows, bias, out)
if out_window:
    return out.reshape(*{q}.shape[:-3], sq, heads, d).transpose(-3, -2)
return out[:, :d].reshape({q}.shape)
'''
    how = ("flash attention in one pypto kernel: Q.K^T and P.V on the cube in FP32, an online softmax over "
           "kv tiles, so the scores are never whole in HBM; GQA reads each kv head for its query heads. "
           "Dropout, masks or shapes the kernel does not take, and keywords it does not know run torch")
    operands = ", ".join(p.name for p in params)
    torch_call = wrappers.torch_call(entry, params, rest=True)
    prologue = (f"{k}, {v}, deferred = _sdpa_unrepeated({q}, {k}, {v}, {gqa})  # kv heads of a repeat_kv deferred: read by index\n"
                f"{gqa} = True if deferred else {gqa}\n")
    fallback = f"torch_path({q}, pypto_repeated({k}), pypto_repeated({v}), {mask}, {dropout}, {causal}, {scale}, False if deferred else {gqa})"
    return wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params, rest=True), how, operands, torch_call,
        f"({guard})", body, ("_sdpa_takes", "_sdpa_bias", "_sdpa_rows", "_cube_tiles", "pypto_repeat_kv", f"{entry.op}_kernel"),
        prologue, fallback,
    )


register(Family("attention", Fields, rewrite, problem, takes_rest=True))
