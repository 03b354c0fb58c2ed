"""conv1d and conv2d kernels of shifted reads: stride 1, zero padding, depthwise (vector) or
ungrouped (cube).

Output column t of an output row is the sum over taps k of the weights times the input's column
``t + k - left``, reads outside [0, length) zero padding. The columns whose every tap reads
inside the row (the middle) take column tiles: tap k reads the input's tile shifted k columns.
The few columns at either edge (at most kernel - 1 each) read their in-row taps only, one column
at a time, so no padding is ever read or copied. A depthwise conv multiplies each channel's row
by its tap weight (one filter per channel, FP32 on the vector cores); an ungrouped one adds a
``pypto.matmul`` per tap, the tap's weight [out, channels] times the shifted [channels, cols].
A conv2d splits its output rows alike: each row of the middle sums every tap row h over the
input row it reads, a row at either edge the tap rows that read inside the image; within a row,
its columns are a conv1d's. Its images are [channels, lines * length] planes, read in place.
"""

from __future__ import annotations

from typing import Callable

from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.kernel_ir import Assign, Do, Stmt, call, items, loop, pypto, when
from torch2pypto.rules.templates import CUBE, FP32, casting, factory, tensor, to_fp32


def _tap_rows(dims: int, h_range: str, taps: Stmt) -> Stmt:
    """A conv2d's loop of ``taps`` over its tap rows ``h_range``; a conv1d's ``taps`` alone."""
    return loop("h", h_range, taps, comment="unrolled: the tap rows that read inside the image") if dims == 2 else taps


def _reads(dims: int) -> tuple[str, str, str]:
    """(tap, line, at): the index of tap (h, k) of the weight's taps, the input column where tap
    row h's row starts (+ ``line``), the output column where output row y starts (+ ``at``)."""
    return ("(h * taps + k)", "(y - top + h) * length + ", "y * width + ") if dims == 2 else ("k", "", "")


def _taps(dims: int, shape: tuple[str, str], col: str, width: str, taps: str, h_range: str) -> list[Stmt]:
    """``acc``: the sum over ``taps`` k (and ``h_range``) of the input's [rows, shape] tile at column
    ``col`` + k (``width`` valid) times the weight's column of the tap, in FP32."""
    valid = items("valid", width)
    tap, line, _ = _reads(dims)
    return [
        Assign("acc", pypto("full", items(*shape), "0.0", FP32, valid_shape=valid)),
        _tap_rows(dims, h_range, loop(
            "k", taps,
            Assign("piece", pypto("view", "x", items(*shape), items("r", f"{line}{col} + k"), valid_shape=valid)),
            Assign("tap", pypto("view", "w", items("rows", "1"), items("i * rows", tap), valid_shape=items("valid", "1"))),
            to_fp32(["piece", "tap"]),
            Assign("acc", pypto("add", "acc", pypto("mul", "piece", "tap"))),
            comment="unrolled: one shifted read per tap")),
    ]


def _store(at: str, col: str, bias: bool, store: tuple[Stmt, ...], whose: str = "channel") -> list[Stmt]:
    """``acc`` plus the bias of each of its rows (b's rows from ``i * rows``), cast and assembled into
    the output at row ``at``, column ``col``."""
    added: list[Stmt] = []
    if bias:
        added = [Assign("bias_tile", pypto("view", "b", items("rows", "1"), items("i * rows", "0"), valid_shape=items("valid", "1"))),
                 to_fp32(["bias_tile"]),
                 Assign("acc", pypto("add", "acc", "bias_tile"), f"one value per {whose}, along the row")]
    return [*added, *store, Do(pypto("assemble", "acc", items(at, col), "out"))]


def _split(lo: str, hi: str, middle: str, edges: str, t: str, size: str, taps: str, before: str, out: str,
           what: str = "columns", whole: str = "row") -> list[Stmt]:
    """The factory's split of the ``out`` output columns (or rows) of an input of ``size``, ``before``
    zeros first: the middle [lo, hi) of whole windows, the edges with the taps that read inside."""
    return [
        Assign(f"{lo}, {hi}", f"{before}, min({out}, {size} - {taps} + 1 + {before})", f"the output {what} whose taps all read inside the {whole}"),
        Assign(middle, f"max(0, {hi} - {lo})"),
        Assign(edges, f"tuple(({t}, max(0, {before} - {t}), min({taps}, {size} + {before} - {t})) for {t} in range({out}) if not {lo} <= {t} < {hi})"),
    ]


def _splits(dims: int) -> list[Stmt]:
    """The factory's splits of the output: a conv2d's rows (``lo_y, hi_y``, ``inner``,
    ``row_edges``), a row's columns (``lo, hi``, ``middle``, ``edges``); see :func:`_split`."""
    rows = _split("lo_y", "hi_y", "inner", "row_edges", "y", "lines", "tap_rows", "top", "height", "rows", "image") if dims == 2 else []
    return [*rows, *_split("lo", "hi", "middle", "edges", "t", "length", "taps", "left", "width")]


def _rows(dims: int, columns: Callable[[str], list[Stmt]]) -> list[Stmt]:
    """A conv2d's output rows, each of ``columns(h_range)``: the middle rows (every tap row) in a
    ``pypto.loop``, the edge rows (their in-image tap rows) unrolled; a conv1d's one row."""
    if dims == 1:
        return columns("")
    return [when("inner > 0", loop("z", pypto("loop", "inner", name='"out_rows"', unroll_list=items("1")),
                                   Assign("y", "lo_y + z"), *columns("range(tap_rows)"))),
            when("len(row_edges) > 0",
                 loop("u", "range(len(row_edges))",
                      Assign("y, h0, h1", "row_edges[u]", "an output row and the tap rows that read inside the image"),
                      *columns("range(h0, h1)"), comment="unrolled"),
                 comment="the parser refuses a loop over nothing")]


def _col_tiles(middle: list[Stmt], edge: list[Stmt]) -> list[Stmt]:
    """A row's middle column tiles, then its edge columns one at a time."""
    return [when("middle > 0", loop("c", pypto("loop", "(middle + cols - 1) // cols", name='"col_tiles"', unroll_list=items("1")), *middle)),
            when("len(edges) > 0", loop("e", "range(len(edges))", *edge, comment="unrolled"),
                 comment="the parser refuses a loop over nothing")]


def _planes(dims: int) -> tuple[str, str, str]:
    """(the factory's sizes, the input's and the output's columns) of a conv of ``dims``."""
    if dims == 2:
        return "channels, lines, length, tap_rows, taps, top, left, height, width", "lines * length", "height * width"
    return "channels, length, taps, left, width", "length", "width"


_EDGES = {1: ("edge columns read their in-row", "taps"), 2: ("edge rows and columns read their in-image", "tap_rows * taps")}


def depthwise_kernel(op: str, bias: bool, dims: int = 1) -> Definition:
    """A factory ``name(dtype, channels, length, taps, left, width)``: each image's [channels,
    length] rows (stacked: [images * channels, length]) convolved with the weight [channels, taps],
    ``left`` zero columns before each row, into [images * channels, width]. Of ``dims`` 2,
    ``name(dtype, channels, lines, length, tap_rows, taps, top, left, height, width)``: [channels,
    lines * length] planes, the weight [channels, tap_rows * taps], into [images * channels, height * width]."""
    name = f"{op}_depthwise{'_bias' if bias else ''}_kernel"
    setup, store = casting("acc", FP32, "dtype")
    sizes, plane, out_plane = _planes(dims)
    params = [tensor("x", items("pypto.DYNAMIC", plane), "dtype"), tensor("w", items("channels", _EDGES[dims][1]), "dtype")]
    if bias:
        params.append(tensor("b", items("channels", "1"), "dtype"))
    params.append(tensor("out", items("pypto.DYNAMIC", out_plane), "dtype"))
    at = _reads(dims)[2]

    def columns(h_range: str) -> list[Stmt]:
        middle = [
            Assign("cols_valid", "(middle - c * cols).min(cols)"),
            *_taps(dims, ("rows", "cols"), "c * cols", "cols_valid", "range(taps)", h_range),
            *_store("r", f"{at}lo + c * cols", bias, store),
        ]
        edge = [
            Assign("t, k0, k1", "edges[e]", "an output column and the taps that read inside the row"),
            *_taps(dims, ("rows", "1"), "t - left", "1", "range(k0, k1)", h_range),
            *_store("r", f"{at}t", bias, store),
        ]
        return _col_tiles(middle, edge)

    body = [
        Assign("tiles", "(channels + rows - 1) // rows"),
        loop("s", pypto("loop", "x.shape[0] // channels * tiles", name='"channel_tiles"', unroll_list=items("1")),
             Assign("n, i", "s // tiles, s % tiles", "image n, its channel tile i"),
             Assign("r", "n * channels + i * rows"),
             Assign("valid", "(channels - i * rows).min(rows)"),
             Do(pypto("set_vec_tile_shapes", "rows", "cols")),
             *_rows(dims, columns)),
    ]
    prelude = [
        *_splits(dims),
        Assign("rows, cols", call("_tile_shape", "-(-max(middle, 1) // 16) * 16", "64", "5", "(dtype, pypto.DT_FP32)", split_cols="True")),
        *setup,
    ]
    doc = (f"Per channel tile, the sum over taps of the input shifted by the tap times the tap's weight column, in FP32"
           f"{', plus the bias of each channel' if bias else ''}; the {_EDGES[dims][0]} taps only.")
    text = factory(name, [f"dtype, {sizes}"], doc, prelude, params, body)
    return Definition(name, text, ("_tile_shape", "_annotated"))


def dense_kernel(op: str, bias: bool, dims: int = 1) -> Definition:
    """A factory ``name(dtype, channels, length, taps, left, width, rows)``: per image, the sum
    over taps of the weight's tap matrix ([taps * out, channels], row tiles of a dynamic out)
    times the image's [channels, length] rows shifted by the tap, ``left`` zero columns before
    each row, into [images * out, width]; the bias added per output channel. Of ``dims`` 2,
    ``name(dtype, channels, lines, length, tap_rows, taps, top, left, height, width, rows)``: the
    image's [channels, lines * length] planes, taps [tap_rows * taps * out, channels] (tap (h, k)
    at rows (h * taps + k) * out), ``top`` zero rows above, into [images * out, height * width];
    each output row y sums the taps h that read inside the image, its input row y - top + h."""
    name = f"{op}_taps{'_bias' if bias else ''}_kernel"
    setup, store = casting("acc", FP32, "dtype")
    sizes, plane, out_plane = _planes(dims)
    params = [tensor("w", items("pypto.DYNAMIC", "channels"), "dtype"), tensor("x", items("pypto.DYNAMIC", plane), "dtype")]
    if bias:
        params.append(tensor("b", items("pypto.DYNAMIC", "1"), "dtype"))
    params.append(tensor("out", items("pypto.DYNAMIC", out_plane), "dtype"))
    tap, line, at = _reads(dims)

    def taps(tiles: str, cols: str, col: str, valid_cols: str, k_range: str, h_range: str) -> list[Stmt]:
        """``acc``: the sum over ``k_range`` (and ``h_range``) of the tap's weight times the input shifted by it."""
        return [
            Do(pypto("set_cube_tile_shapes", items("rows", "rows"), f"{tiles}_k", f"{tiles}_n")),
            Do(pypto("set_vec_tile_shapes", f"{tiles}_rows", f"{tiles}_cols")),
            Assign("acc", pypto("full", items("rows", cols), "0.0", FP32, valid_shape=items("valid", valid_cols))),
            _tap_rows(dims, h_range, loop(
                "k", k_range,
                Assign("tap", pypto("view", "w", items("rows", "c16"), items(f"{tap} * m + i * rows", "0"), valid_shape=items("valid", "channels"))),
                Assign("shifted", pypto("view", "x", items("c16", cols), items("j * channels", f"{line}{col} + k"),
                                        valid_shape=items("channels", valid_cols))),
                Assign("acc", pypto("add", "acc", pypto("matmul", "tap", "shifted", FP32))),
                comment="unrolled: one matmul per tap, its input shifted by the tap")),
        ]

    def columns(h_range: str) -> list[Stmt]:
        middle = [Assign("cols_valid", "(middle - c * cols).min(cols)"),
                  *taps("middle", "cols", "c * cols", "cols_valid", "range(taps)", h_range),
                  *_store("j * m + i * rows", f"{at}lo + c * cols", bias, store, "output channel")]
        edge = [Assign("t, k0, k1", "edges[e]", "an output column and the taps that read inside the row"),
                *taps("edge", "16", "t - left", "1", "range(k0, k1)", h_range),
                *_store("j * m + i * rows", f"{at}t", bias, store, "output channel")]
        return _col_tiles(middle, edge)

    body = [
        Assign("m", f"w.shape[0] // ({_EDGES[dims][1]})" if dims == 2 else "w.shape[0] // taps", "output channels"),
        loop("j", pypto("loop", "x.shape[0] // channels", name='"images"'),
             loop("i", pypto("loop", "(m + rows - 1) // rows", name='"row_tiles"', unroll_list=items("1")),
                  Assign("valid", "(m - i * rows).min(rows)"), *_rows(dims, columns))),
    ]
    prelude = [
        *_splits(dims),
        Assign("c16, cols", "-(-channels // 16) * 16, min(-(-max(middle, 1) // 16) * 16, 256)", "the cube's 32-byte aligned tiles"),
        Assign("middle_k, middle_n", call("_cube_tiles", "c16", "cols", "dtype", "rows")),
        Assign("edge_k, edge_n", call("_cube_tiles", "c16", "16", "dtype", "rows")),
        Assign("middle_rows, middle_cols", call("_tile_shape", "cols", "rows", "3", "(pypto.DT_FP32,)")),
        Assign("edge_rows, edge_cols", call("_tile_shape", "16", "rows", "3", "(pypto.DT_FP32,)")),
        *setup,
    ]
    doc = (f"Per image{' and output row' if dims == 2 else ''}, the sum over taps of pypto.matmul of the tap's weight "
           f"[rows, channels] by the input shifted by the tap, in FP32{', plus the bias of each output channel' if bias else ''}; "
           f"the {_EDGES[dims][0]} taps only.")
    text = factory(name, [f"dtype, {sizes}, rows"], doc, prelude, params, body, CUBE)
    return Definition(name, text, ("_cube_tiles", "_tile_shape", "_annotated"))
