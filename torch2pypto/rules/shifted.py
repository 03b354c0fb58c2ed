"""conv1d and conv2d kernels of shifted reads: zero padding, depthwise (vector) or ungrouped
(cube); of stride 1, or strided (any stride and dilation).

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

A strided kernel's output t reads input ``t * stride + k * dilation - left`` (rows alike, their
offsets scalars): a middle tile of its columns reads ``stride`` times as many in place, then
``pypto.index_select`` picks every stride-th (the int32 ``picks``, made once per shape on the
host); an edge column reads its own. Its factories take the stride and dilation, one kernel each.
"""

from __future__ import annotations

from typing import Callable

from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.kernel_ir import Assign, Do, Stmt, call, items, loop, pypto, when
from torch2pypto.rules.templates import CUBE, FP32, casting, factory, tensor, to_fp32
from torch2pypto.rules.walks import REVERSED_BLOCK


def _tap_rows(dims: int, h_range: str, taps: Stmt) -> Stmt:
    """A conv2d's loop of ``taps`` over its tap rows ``h_range``; a conv1d's ``taps`` alone."""
    return loop("h", h_range, taps, comment="unrolled: the tap rows that read inside the image") if dims == 2 else taps


def _reads(dims: int, strided: bool = False) -> tuple[str, str, str]:
    """(tap, line, at): the index of tap (h, k) of the weight's taps, the input column where tap
    row h's row starts (+ ``line``), the output column where output row y starts (+ ``at``)."""
    row = "(y * stride_y - top + h * dilation_y)" if strided else "(y - top + h)"
    return ("(h * taps + k)", f"{row} * length + ", "y * width + ") if dims == 2 else ("k", "", "")


def _picked(tile: str, shape: tuple[str, str], valid: tuple[str, str], tiles: tuple[str, str], *after: Stmt) -> Stmt:
    """Of a strided conv (decided when the kernel is parsed), ``tile``'s columns 0, stride, 2 *
    stride, ... picked by pypto.index_select (its read spans ``stride`` times its columns), their
    ``valid`` columns kept, on vector tiles ``tiles`` (then the [rows, cols * stride] read's); then ``after``."""
    return when("stride > 1",
                Do(pypto("set_vec_tile_shapes", "cols")),
                Assign("picks_tile", pypto("view", "picks", items("cols"), items("0"), valid_shape=items(valid[1]))),
                Do(pypto("set_vec_tile_shapes", *tiles)),
                Assign(tile, pypto("view", pypto("index_select", tile, "1", "picks_tile"), items(*shape), items("0", "0"),
                                   valid_shape=items(*valid))),
                *after,
                comment="the row's columns at the stride, read in place")


def _taps(dims: int, shape: tuple[str, str], col: str, width: str, taps: str, h_range: str, strided: bool = False) -> list[Stmt]:
    """``acc``: the sum over ``taps`` k (and ``h_range``) of the input's [rows, shape] tile at column
    ``col`` + k (``width`` valid) times the weight's column of the tap, in FP32. ``strided``: at
    column ``col`` + k * dilation, a tile of several columns reading ``stride`` times as many."""
    valid = items("valid", width)
    tap, line, _ = _reads(dims, strided)
    read: tuple[Stmt, ...] = (Assign("piece", pypto("view", "x", items(*shape), items("r", f"{line}{col} + k"), valid_shape=valid)),)
    if strided and shape[1] == "1":
        read = (Assign("piece", pypto("view", "x", items(*shape), items("r", f"{line}{col} + k * dilation"), valid_shape=valid)),)
    elif strided:
        read = (Assign("piece", pypto("view", "x", items("rows", "cols * stride"), items("r", f"{line}{col} + k * dilation"),
                                      valid_shape=items("valid", f"({width} - 1) * stride + 1"))),)
    picked = (_picked("piece", shape, ("valid", width), ("rows", "cols * stride")),) if strided and shape[1] != "1" else ()
    return [
        Assign("acc", pypto("full", items(*shape), "0.0", FP32, valid_shape=valid)),
        _tap_rows(dims, h_range, loop(
            "k", taps,
            *read,
            Assign("tap", pypto("view", "w", items("rows", "1"), items("i * rows", tap), valid_shape=items("valid", "1"))),
            to_fp32(["piece", "tap"]),
            *picked,
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
           what: str = "columns", whole: str = "row", steps: tuple[str, str] | None = None) -> list[Stmt]:
    """The factory's split of the ``out`` output columns (or rows) of an input of ``size``, ``before``
    zeros first: the middle [lo, hi) of whole windows, the edges with the taps that read inside.
    ``steps``: the names of the stride and dilation of a strided conv (output t reads t * stride
    + k * dilation - before)."""
    if steps:
        step, spread = steps
        return [
            Assign(f"{lo}, {hi}", f"-(-{before} // {step}), min({out}, ({size} - 1 - {spread} * ({taps} - 1) + {before}) // {step} + 1)",
                   f"the output {what} whose taps all read inside the {whole}"),
            Assign(middle, f"max(0, {hi} - {lo})"),
            Assign(edges, f"tuple(({t}, max(0, -(({t} * {step} - {before}) // {spread})), min({taps}, ({size} - 1 + {before} - {t} * {step}) // {spread} + 1)) "
                          f"for {t} in range({out}) if not {lo} <= {t} < {hi})"),
        ]
    return [
        Assign(f"{lo}, {hi}", f"{before}, min({out}, {size} - {taps} + 1 + {before})", f"the output {what} whose taps all read inside the {whole}"),
        Assign(middle, f"max(0, {hi} - {lo})"),
        Assign(edges, f"tuple(({t}, max(0, {before} - {t}), min({taps}, {size} + {before} - {t})) for {t} in range({out}) if not {lo} <= {t} < {hi})"),
    ]


def _splits(dims: int, strided: bool = False) -> list[Stmt]:
    """The factory's splits of the output: a conv2d's rows (``lo_y, hi_y``, ``inner``,
    ``row_edges``), a row's columns (``lo, hi``, ``middle``, ``edges``); see :func:`_split`."""
    row_steps, steps = (("stride_y", "dilation_y"), ("stride", "dilation")) if strided else (None, None)
    rows = _split("lo_y", "hi_y", "inner", "row_edges", "y", "lines", "tap_rows", "top", "height", "rows", "image", row_steps) if dims == 2 else []
    return [*rows, *_split("lo", "hi", "middle", "edges", "t", "length", "taps", "left", "width", steps=steps)]


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


def _planes(dims: int, strided: bool = False) -> tuple[str, str, str]:
    """(the factory's sizes, the input's and the output's columns) of a conv of ``dims``; ``strided``:
    per dim, the zeros before, the output's size, the stride and the dilation."""
    if dims == 2 and strided:
        return ("channels, lines, length, tap_rows, taps, top, height, stride_y, dilation_y, left, width, stride, dilation",
                "lines * length", "height * width")
    if dims == 2:
        return "channels, lines, length, tap_rows, taps, top, left, height, width", "lines * length", "height * width"
    return f"channels, length, taps, left, width{', stride, dilation' if strided else ''}", "length", "width"


def _strided(name: str, strided: bool) -> str:
    """A kernel's name, ``_strided`` before its ``_kernel`` where it is strided."""
    return name.replace("_kernel", "_strided_kernel") if strided else name


# a strided kernel's [cols] tile of the columns it picks (runtime.conv._conv_picks), of its output row's width
PICKS = ("picks", "-(-width // 16) * 16", "pypto.DT_INT32")


_PICKED = "; a strided read's columns picked in place by pypto.index_select"
_EDGES = {1: ("edge columns read their in-row", "taps"), 2: ("edge rows and columns read their in-image", "tap_rows * taps")}


def depthwise_kernel(op: str, bias: bool, dims: int = 1, strided: bool = False) -> Definition:
    """A factory ``name(dtype, channels, length, taps, left, width)``: each image's [channels,
    length] rows (stacked: [images * channels, length]) convolved with the weight [channels, taps],
    ``left`` zero columns before each row, into [images * channels, width]. Of ``dims`` 2,
    ``name(dtype, channels, lines, length, tap_rows, taps, top, left, height, width)``: [channels,
    lines * length] planes, the weight [channels, tap_rows * taps], into [images * channels, height * width].
    ``strided``: ``name(dtype, channels, length, taps, left, width, stride, dilation)`` (conv2d:
    ``top, height, stride_y, dilation_y`` before ``left``), output t reading input t * stride + k *
    dilation - left, its tiles' columns picked by ``picks`` (:data:`PICKS`)."""
    name = _strided(f"{op}_depthwise{'_bias' if bias else ''}_kernel", strided)
    setup, store = casting("acc", FP32, "dtype")
    sizes, plane, out_plane = _planes(dims, strided)
    params = [tensor("x", items("pypto.DYNAMIC", plane), "dtype"), tensor("w", items("channels", _EDGES[dims][1]), "dtype")]
    if bias:
        params.append(tensor("b", items("channels", "1"), "dtype"))
    if strided:
        params.append(tensor(PICKS[0], items(PICKS[1]), PICKS[2]))
    params.append(tensor("out", items("pypto.DYNAMIC", out_plane), "dtype"))
    at = _reads(dims)[2]

    def columns(h_range: str) -> list[Stmt]:
        middle = [
            Assign("cols_valid", "(middle - c * cols).min(cols)"),
            *_taps(dims, ("rows", "cols"), "(lo + c * cols) * stride - left" if strided else "c * cols", "cols_valid", "range(taps)", h_range, strided),
            *_store("r", f"{at}lo + c * cols", bias, store),
        ]
        edge = [
            Assign("t, k0, k1", "edges[e]", "an output column and the taps that read inside the row"),
            *_taps(dims, ("rows", "1"), "t * stride - left" if strided else "t - left", "1", "range(k0, k1)", h_range, strided),
            *_store("r", f"{at}t", bias, store),
        ]
        return _col_tiles(middle, edge)

    body = [
        Assign("tiles", "(channels + rows - 1) // rows"),
        loop("s", pypto("loop", "x.shape[0] // channels * tiles", name='"channel_tiles"', unroll_list=items("1")),
             Assign("n, i", "s // tiles, s % tiles", "image n, its channel tile i"),
             Assign("r", "n * channels + i * rows"),
             Assign("valid", "(channels - i * rows).min(rows)"),
             Do(pypto("set_vec_tile_shapes", "rows", "cols * stride" if strided else "cols")),
             *_rows(dims, columns)),
    ]
    wide = "-(-max(middle, 1) // 16) * 16"
    tiles = [Assign("rows, cols", call("_tile_shape", wide, "64", "5", "(dtype, pypto.DT_FP32)", split_cols="True"))]
    if strided:
        tiles = [Assign("rows, cols", call("_tile_shape", f"{wide} * stride", "64", "5", "(dtype, pypto.DT_FP32)", split_cols="True")),
                 Assign("cols", f"max(16, min(cols, {REVERSED_BLOCK}) // stride // 16 * 16)",
                        "a tile's read spans stride times its columns, at most the widest pypto.index_select")]
    prelude = [*_splits(dims, strided), *tiles, *setup]
    doc = (f"Per channel tile, the sum over taps of the input shifted by the tap times the tap's weight column, in FP32"
           f"{', plus the bias of each channel' if bias else ''}; the {_EDGES[dims][0]} taps only{_PICKED if strided else ''}.")
    text = factory(name, [f"dtype, {sizes}"], doc, prelude, params, body)
    return Definition(name, text, ("_tile_shape", "_annotated"))


def dense_kernel(op: str, bias: bool, dims: int = 1, strided: bool = False) -> Definition:
    """A factory ``name(dtype, channels, length, taps, left, width, rows)``: per image, the sum
    over taps of the weight's tap matrix ([taps * out, channels], row tiles of a dynamic out)
    times the image's [channels, length] rows shifted by the tap, ``left`` zero columns before
    each row, into [images * out, width]; the bias added per output channel. Of ``dims`` 2,
    ``name(dtype, channels, lines, length, tap_rows, taps, top, left, height, width, rows)``: the
    image's [channels, lines * length] planes, taps [tap_rows * taps * out, channels] (tap (h, k)
    at rows (h * taps + k) * out), ``top`` zero rows above, into [images * out, height * width];
    each output row y sums the taps h that read inside the image, its input row y - top + h.
    ``strided``: the sizes as :func:`depthwise_kernel`'s, then ``rows``."""
    name = _strided(f"{op}_taps{'_bias' if bias else ''}_kernel", strided)
    setup, store = casting("acc", FP32, "dtype")
    sizes, plane, out_plane = _planes(dims, strided)
    params = [tensor("w", items("pypto.DYNAMIC", "channels"), "dtype"), tensor("x", items("pypto.DYNAMIC", plane), "dtype")]
    if bias:
        params.append(tensor("b", items("pypto.DYNAMIC", "1"), "dtype"))
    if strided:
        params.append(tensor(PICKS[0], items(PICKS[1]), PICKS[2]))
    params.append(tensor("out", items("pypto.DYNAMIC", out_plane), "dtype"))
    tap, line, at = _reads(dims, strided)

    def taps(tiles: str, cols: str, col: str, valid_cols: str, k_range: str, h_range: str) -> list[Stmt]:
        """``acc``: the sum over ``k_range`` (and ``h_range``) of the tap's weight times the input shifted by it."""
        read: tuple[Stmt, ...] = (Assign("shifted", pypto("view", "x", items("c16", cols), items("j * channels", f"{line}{col} + k"),
                                                          valid_shape=items("channels", valid_cols))),)
        if strided and cols == "16":
            read = (Assign("shifted", pypto("view", "x", items("c16", cols), items("j * channels", f"{line}{col} + k * dilation"),
                                            valid_shape=items("channels", valid_cols))),)
        elif strided:
            read = (Assign("shifted", pypto("view", "x", items("c16", "cols * stride"), items("j * channels", f"{line}{col} + k * dilation"),
                                            valid_shape=items("channels", f"({valid_cols} - 1) * stride + 1"))),
                    _picked("shifted", ("c16", cols), ("channels", valid_cols), ("picked_rows", "cols * stride"),
                            Do(pypto("set_vec_tile_shapes", f"{tiles}_rows", f"{tiles}_cols"))))
        return [
            Do(pypto("set_cube_tile_shapes", items("rows", "rows"), f"{tiles}_k", f"{tiles}_n")),
            Do(pypto("set_vec_tile_shapes", f"{tiles}_rows", f"{tiles}_cols")),
            Assign("acc", pypto("full", items("rows", cols), "0.0", FP32, valid_shape=items("valid", valid_cols))),
            _tap_rows(dims, h_range, loop(
                "k", k_range,
                Assign("tap", pypto("view", "w", items("rows", "c16"), items(f"{tap} * m + i * rows", "0"), valid_shape=items("valid", "channels"))),
                *read,
                Assign("acc", pypto("add", "acc", pypto("matmul", "tap", "shifted", FP32))),
                comment="unrolled: one matmul per tap, its input shifted by the tap")),
        ]

    def columns(h_range: str) -> list[Stmt]:
        middle = [Assign("cols_valid", "(middle - c * cols).min(cols)"),
                  *taps("middle", "cols", "(lo + c * cols) * stride - left" if strided else "c * cols", "cols_valid", "range(taps)", h_range),
                  *_store("j * m + i * rows", f"{at}lo + c * cols", bias, store, "output channel")]
        edge = [Assign("t, k0, k1", "edges[e]", "an output column and the taps that read inside the row"),
                *taps("edge", "16", "t * stride - left" if strided else "t - left", "1", "range(k0, k1)", h_range),
                *_store("j * m + i * rows", f"{at}t", bias, store, "output channel")]
        return _col_tiles(middle, edge)

    body = [
        Assign("m", f"w.shape[0] // ({_EDGES[dims][1]})" if dims == 2 else "w.shape[0] // taps", "output channels"),
        loop("j", pypto("loop", "x.shape[0] // channels", name='"images"'),
             loop("i", pypto("loop", "(m + rows - 1) // rows", name='"row_tiles"', unroll_list=items("1")),
                  Assign("valid", "(m - i * rows).min(rows)"), *_rows(dims, columns))),
    ]
    widest = "max(16, 256 // stride // 16 * 16)" if strided else "256"
    picked = [Assign("picked_rows, _", call("_tile_shape", "cols * stride", "c16", "2", "(dtype,)"), "the vector tiles picking a strided read's columns")]
    prelude = [
        *_splits(dims, strided),
        Assign("c16, cols", f"-(-channels // 16) * 16, min(-(-max(middle, 1) // 16) * 16, {widest})", "the cube's 32-byte aligned tiles"),
        *(picked if strided else ()),
        Assign("middle_k, middle_n", call("_cube_tiles", "c16", "cols", "dtype", "rows")),
        Assign("edge_k, edge_n", call("_cube_tiles", "c16", "16", "dtype", "rows")),
        Assign("middle_rows, middle_cols", call("_tile_shape", "cols", "rows", "3", "(pypto.DT_FP32,)")),
        Assign("edge_rows, edge_cols", call("_tile_shape", "16", "rows", "3", "(pypto.DT_FP32,)")),
        *setup,
    ]
    doc = (f"Per image{' and output row' if dims == 2 else ''}, the sum over taps of pypto.matmul of the tap's weight "
           f"[rows, channels] by the input shifted by the tap, in FP32{', plus the bias of each output channel' if bias else ''}; "
           f"the {_EDGES[dims][0]} taps only{_PICKED if strided else ''}.")
    text = factory(name, [f"dtype, {sizes}, rows"], doc, prelude, params, body, CUBE)
    return Definition(name, text, ("_cube_tiles", "_tile_shape", "_annotated"))
