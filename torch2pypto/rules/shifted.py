"""conv1d kernels of shifted reads: stride 1, zero padding, depthwise (vector) or ungrouped (cube).

Output column t of an output row is the sum over taps k of the weights times the input's column
``t + k - left``, reads outside [0, length) zero padding. The columns whose every tap reads
inside the row (the middle) take column tiles: tap k reads the input's tile shifted k columns.
The few columns at either edge (at most kernel - 1 each) read their in-row taps only, one column
at a time, so no padding is ever read or copied. A depthwise conv multiplies each channel's row
by its tap weight (one filter per channel, FP32 on the vector cores); an ungrouped one adds a
``pypto.matmul`` per tap, the tap's weight [out, channels] times the shifted [channels, cols].
"""

from __future__ import annotations

from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.kernel_ir import Assign, Do, Stmt, call, items, loop, pypto, when
from torch2pypto.rules.templates import CUBE, FP32, casting, factory, tensor, to_fp32


def _taps(shape: tuple[str, str], col: str, width: str, taps: str) -> list[Stmt]:
    """``acc``: the sum over ``taps`` k of the input's [rows, shape] tile at column ``col`` + k
    (``width`` valid) times the weight's column k, in FP32."""
    valid = items("valid", width)
    return [
        Assign("acc", pypto("full", items(*shape), "0.0", FP32, valid_shape=valid)),
        loop("k", taps,
             Assign("piece", pypto("view", "x", items(*shape), items("r", f"{col} + k"), valid_shape=valid)),
             Assign("tap", pypto("view", "w", items("rows", "1"), items("i * rows", "k"), valid_shape=items("valid", "1"))),
             to_fp32(["piece", "tap"]),
             Assign("acc", pypto("add", "acc", pypto("mul", "piece", "tap"))),
             comment="unrolled: one shifted read per tap"),
    ]


def _store(col: str, bias: bool, store: tuple[Stmt, ...]) -> list[Stmt]:
    """``acc`` plus the channels' bias, cast and assembled into the output at column ``col``."""
    added: list[Stmt] = []
    if bias:
        added = [Assign("bias_tile", pypto("view", "b", items("rows", "1"), items("i * rows", "0"), valid_shape=items("valid", "1"))),
                 to_fp32(["bias_tile"]),
                 Assign("acc", pypto("add", "acc", "bias_tile"), "one value per channel, along the row")]
    return [*added, *store, Do(pypto("assemble", "acc", items("r", col), "out"))]


def _columns() -> list[Stmt]:
    """The factory's split of the output columns: the middle [lo, hi) of whole windows, the edges."""
    return [
        Assign("lo, hi", "left, min(width, length - taps + 1 + left)", "the output columns whose taps all read inside the row"),
        Assign("middle", "max(0, hi - lo)"),
        Assign("edges", "tuple((t, max(0, left - t), min(taps, length + left - t)) for t in range(width) if not lo <= t < hi)"),
    ]


def depthwise_kernel(op: str, bias: bool) -> Definition:
    """A factory ``name(dtype, channels, length, taps, left, width)``: each image's [channels,
    length] rows (stacked: [images * channels, length]) convolved with the weight [channels, taps],
    ``left`` zero columns before each row, into [images * channels, width]."""
    name = f"{op}_depthwise{'_bias' if bias else ''}_kernel"
    setup, store = casting("acc", FP32, "dtype")
    params = [tensor("x", items("pypto.DYNAMIC", "length"), "dtype"), tensor("w", items("channels", "taps"), "dtype")]
    if bias:
        params.append(tensor("b", items("channels", "1"), "dtype"))
    params.append(tensor("out", items("pypto.DYNAMIC", "width"), "dtype"))
    middle = [
        Assign("cols_valid", "(middle - c * cols).min(cols)"),
        *_taps(("rows", "cols"), "c * cols", "cols_valid", "range(taps)"),
        *_store("lo + c * cols", bias, store),
    ]
    edge = [
        Assign("t, k0, k1", "edges[e]", "an output column and the taps that read inside the row"),
        *_taps(("rows", "1"), "t - left", "1", "range(k0, k1)"),
        *_store("t", bias, store),
    ]
    body = [
        Assign("tiles", "(channels + rows - 1) // rows"),
        loop("s", pypto("loop", "x.shape[0] // channels * tiles", name='"channel_tiles"', unroll_list=items("1")),
             Assign("n, i", "s // tiles, s % tiles", "image n, its channel tile i"),
             Assign("r", "n * channels + i * rows"),
             Assign("valid", "(channels - i * rows).min(rows)"),
             Do(pypto("set_vec_tile_shapes", "rows", "cols")),
             when("middle > 0", loop("c", pypto("loop", "(middle + cols - 1) // cols", name='"col_tiles"', unroll_list=items("1")), *middle)),
             when("len(edges) > 0", loop("e", "range(len(edges))", *edge, comment="unrolled"),
                  comment="the parser refuses a loop over nothing")),
    ]
    prelude = [
        *_columns(),
        Assign("rows, cols", call("_tile_shape", "-(-max(middle, 1) // 16) * 16", "64", "5", "(dtype, pypto.DT_FP32)", split_cols="True")),
        *setup,
    ]
    doc = (f"Per channel tile, the sum over taps of the input shifted by the tap times the tap's weight column, in FP32"
           f"{', plus the bias of each channel' if bias else ''}; the edge columns read their in-row taps only.")
    text = factory(name, ["dtype, channels, length, taps, left, width"], doc, prelude, params, body)
    return Definition(name, text, ("_tile_shape", "_annotated"))


def dense_kernel(op: str, bias: bool) -> Definition:
    """A factory ``name(dtype, channels, length, taps, left, width, rows)``: per image, the sum
    over taps of the weight's tap matrix ([taps * out, channels], row tiles of a dynamic out)
    times the image's [channels, length] rows shifted by the tap, ``left`` zero columns before
    each row, into [images * out, width]; the bias added per output channel."""
    name = f"{op}_taps{'_bias' if bias else ''}_kernel"
    setup, store = casting("acc", FP32, "dtype")
    params = [tensor("w", items("pypto.DYNAMIC", "channels"), "dtype"), tensor("x", items("pypto.DYNAMIC", "length"), "dtype")]
    if bias:
        params.append(tensor("b", items("pypto.DYNAMIC", "1"), "dtype"))
    params.append(tensor("out", items("pypto.DYNAMIC", "width"), "dtype"))

    def taps(tiles: str, cols: str, col: str, valid_cols: str, k_range: str) -> list[Stmt]:
        """``acc``: the sum over ``k_range`` of the tap's weight times the input shifted by it."""
        return [
            Do(pypto("set_cube_tile_shapes", items("rows", "rows"), f"{tiles}_k", f"{tiles}_n")),
            Do(pypto("set_vec_tile_shapes", f"{tiles}_rows", f"{tiles}_cols")),
            Assign("acc", pypto("full", items("rows", cols), "0.0", FP32, valid_shape=items("valid", valid_cols))),
            loop("k", k_range,
                 Assign("tap", pypto("view", "w", items("rows", "c16"), items("k * m + i * rows", "0"), valid_shape=items("valid", "channels"))),
                 Assign("shifted", pypto("view", "x", items("c16", cols), items("j * channels", f"{col} + k"),
                                         valid_shape=items("channels", valid_cols))),
                 Assign("acc", pypto("add", "acc", pypto("matmul", "tap", "shifted", FP32))),
                 comment="unrolled: one matmul per tap, its input shifted by the tap"),
        ]

    def stored(col: str) -> list[Stmt]:
        added: list[Stmt] = []
        if bias:
            added = [Assign("bias_tile", pypto("view", "b", items("rows", "1"), items("i * rows", "0"), valid_shape=items("valid", "1"))),
                     to_fp32(["bias_tile"]),
                     Assign("acc", pypto("add", "acc", "bias_tile"), "one value per output channel, along the row")]
        return [*added, *store, Do(pypto("assemble", "acc", items("j * m + i * rows", col), "out"))]

    middle = [Assign("cols_valid", "(middle - c * cols).min(cols)"),
              *taps("middle", "cols", "c * cols", "cols_valid", "range(taps)"), *stored("lo + c * cols")]
    edge = [Assign("t, k0, k1", "edges[e]", "an output column and the taps that read inside the row"),
            *taps("edge", "16", "t - left", "1", "range(k0, k1)"), *stored("t")]
    body = [
        Assign("m", "w.shape[0] // taps", "output channels"),
        loop("j", pypto("loop", "x.shape[0] // channels", name='"images"'),
             loop("i", pypto("loop", "(m + rows - 1) // rows", name='"row_tiles"', unroll_list=items("1")),
                  Assign("valid", "(m - i * rows).min(rows)"),
                  when("middle > 0", loop("c", pypto("loop", "(middle + cols - 1) // cols", name='"col_tiles"', unroll_list=items("1")), *middle)),
                  when("len(edges) > 0", loop("e", "range(len(edges))", *edge, comment="unrolled"),
                       comment="the parser refuses a loop over nothing"))),
    ]
    prelude = [
        *_columns(),
        Assign("c16, cols", "-(-channels // 16) * 16, min(-(-max(middle, 1) // 16) * 16, 256)", "the cube's 32-byte aligned tiles"),
        Assign("middle_k, middle_n", call("_cube_tiles", "c16", "cols", "dtype", "rows")),
        Assign("edge_k, edge_n", call("_cube_tiles", "c16", "16", "dtype", "rows")),
        Assign("middle_rows, middle_cols", call("_tile_shape", "cols", "rows", "3", "(pypto.DT_FP32,)")),
        Assign("edge_rows, edge_cols", call("_tile_shape", "16", "rows", "3", "(pypto.DT_FP32,)")),
        *setup,
    ]
    doc = (f"Per image, the sum over taps of pypto.matmul of the tap's weight [rows, channels] by the input shifted by the "
           f"tap, in FP32{', plus the bias of each output channel' if bias else ''}; the edge columns read their in-row taps only.")
    text = factory(name, ["dtype, channels, length, taps, left, width, rows"], doc, prelude, params, body, CUBE)
    return Definition(name, text, ("_cube_tiles", "_tile_shape", "_annotated"))
