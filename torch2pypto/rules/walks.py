"""Kernel templates that walk other layouts than one [rows, cols] matrix's row tiles.

Column runs copied between matrices (:func:`assemble_kernel`), tensors joined from windows of
their storage (:func:`join_kernel`), stacked matrices
(:func:`triangle_kernel`), rows or columns reversed (:func:`reversed_cols_kernel`, :func:`reversed_rows_kernel`), 1-D indices (:func:`one_hot_kernel`, :func:`indexed_kernel`), a sequence (:func:`arange_kernel`), a
batch's channels (:func:`channel_kernel`) and images resampled (:func:`resampled_kernel`). They are built on the kernel IR with the frame, casts
and row loop of :mod:`templates`, where PyPTO's quirks live.
"""

from __future__ import annotations

from typing import Sequence

from torch2pypto.rules.codegen import Definition, copied
from torch2pypto.rules.kernel_ir import Assign, Do, Stmt, call, items, loop, pypto, when
from torch2pypto.rules.steps import Apply, Step, statements
from torch2pypto.rules.templates import FP32, casting, factory, row_tiles, tensor, tile_dtypes, to_fp32

INT32 = "pypto.DT_INT32"
INDEX = "pypto.DT_INT64"  # torch's index dtype: pypto.topk's INT32 indices are cast to it on the kernel
INDEXED_DIM = copied("operands", "_indexed_dim")
INDICES = copied("operands", "_kernel_indices", last="_index_bounds")
TILE_SHAPE = ("_tile_shape", "_annotated")  # the definitions every kernel here uses
# the widest block a reversal's index_select takes: the interpreter's memory for one grows faster
# than the square of its width (0.1 GB at 1024 columns, 9 GB at 4096)
REVERSED_BLOCK = 512


def _row_start(valid: str) -> list[Stmt]:
    """A row tile's first row ``r`` and its ``valid`` rows of ``n``, spelled ``valid``."""
    return [Assign("r", "i * rows"), Assign("valid", valid)]


def assemble_kernel(name: str, inputs: int) -> Definition:
    """A kernel factory ``name(dtype, cols, width, places, fills=(), value=0.0)`` copying column
    runs of ``inputs`` [rows, cols[i]] matrices into a [rows, width] output, row tile by row tile.

    ``places[i]`` lists input i's runs as (source col, size, output col); ``fills`` lists the
    output's other runs as (output col, size), set to ``value``. Runs may start at any column and
    be any width: view and assemble copy them as they are, only the tile's width is 32-byte
    aligned (PyPTO refuses other vector tiles). pypto.full
    makes FP32 tiles only: a fill of another dtype is cast.
    """
    params = [*(tensor(f"x{i}", items("pypto.DYNAMIC", f"cols[{i}]"), "dtype") for i in range(inputs)),
              tensor("out", items("pypto.DYNAMIC", "width"), "dtype")]
    copies: list[Stmt] = [
        loop("p", f"range(len(places[{i}]))",
             Assign("src, size, dst", f"places[{i}][p]"),
             Assign("piece", pypto("view", f"x{i}", items("rows", "size"), items("r", "src"), valid_shape=items("valid", "size"))),
             Do(pypto("assemble", "piece", items("r", "dst"), "out")),
             comment="unrolled")
        for i in range(inputs)
    ]
    if inputs == 1:  # a pad may crop its one input away: the parser refuses a loop over nothing
        copies = [when("len(places[0]) > 0", *copies)]
    setup, store = casting("piece", FP32, "dtype")
    fill = loop("p", "range(len(fills))",
                Assign("dst, size", "fills[p]"),
                Assign("piece", pypto("full", items("rows", "size"), "value", FP32, valid_shape=items("valid", "size"))),
                *store,
                Do(pypto("assemble", "piece", items("r", "dst"), "out")),
                comment="unrolled")
    body = [
        Assign("n", "x0.shape[0]"),
        row_tiles("n", *_row_start("(n - r).min(rows)"), Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")),
                  *copies, when("len(fills) > 0", fill, comment="the parser refuses a loop over nothing")),
    ]
    doc = f"Column runs of {inputs} [rows, cols[i]] input{'s' if inputs > 1 else ''} (places) and fills assembled into [rows, width]."
    prelude = [
        Assign("widest", "max(run[1] for runs in (*places, fills) for run in runs)", "(src, size, dst), (dst, size)"),
        Assign("rows, tile_cols", call("_tile_shape", "-(-widest // 16) * 16", "64", "2", "(dtype, pypto.DT_FP32)"),
               "tiles 32-byte aligned: runs need not be"),
        *setup,
    ]
    return Definition(name, factory(name, ["dtype, cols, width, places, fills=(), value=0.0"], doc, prelude, params, body), TILE_SHAPE)


def join_kernel(name: str, inputs: int, outputs: int = 1) -> Definition:
    """A kernel factory ``name(dtype, widths, width, maps, max_rows)`` joining ``inputs`` tensors
    (torch.cat, torch.stack) into a contiguous [rows, width] output, each read in place from a
    window of its storage, [X * n, widths[i]] (runtime ``_joined``: a transposed key, a column
    slice), in tiles of up to ``max_rows`` rows (runtime ``_join_rows``: a copy's tile grows with n).

    ``maps[i]`` is (span, X, blocks, heads, xo, xh, co, ch, c0, row, col): block o (outer, inner
    = divmod(o, heads)) of input i is its n = rows // X rows of span columns at row
    (outer * xo + inner * xh) * n, column outer * co + inner * ch + c0, and goes to rows
    o * (output rows // blocks) + row.., column col of the output. Each input has its own loop
    over the row tiles of all its blocks; an input of no blocks is not read.

    ``outputs`` above 1: as many joins in one launch (a cache's keys and values), ``inputs``
    tensors each, in turn, into ``out0``, ``out1``.. of widths ``width[0]``, ``width[1]``..
    """
    outs = ["out"] if outputs == 1 else [f"out{k}" for k in range(outputs)]
    params = [*(tensor(f"x{i}", items("pypto.DYNAMIC", f"widths[{i}]"), "dtype") for i in range(inputs * outputs)),
              *(tensor(out, items("pypto.DYNAMIC", "width" if outputs == 1 else f"width[{k}]"), "dtype") for k, out in enumerate(outs))]
    body: list[Stmt] = []
    for i in range(inputs * outputs):
        x, out = f"x{i}", outs[i // inputs]
        start = f"(outer * {x}_xo + inner * {x}_xh) * n + r", f"outer * {x}_co + inner * {x}_ch + {x}_c0"
        body.append(when(
            f"{x}_blocks > 0",
            Assign("n", f"{x}.shape[0] // {x}_stack", "rows of each block"),
            Assign("tiles", "(n + rows - 1) // rows"),
            loop("t", pypto("loop", f"{x}_blocks * tiles", name=f'"{x}_tiles"', unroll_list=items("1")),
                 Assign("o, i", "t // tiles, t % tiles"),
                 Assign("outer, inner", f"o // {x}_heads, o % {x}_heads"),
                 Assign("r", "i * rows"),
                 Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")),
                 Assign("piece", pypto("view", x, items("rows", f"{x}_span"), items(*start),
                                       valid_shape=items("(n - r).min(rows)", f"{x}_span"))),
                 Do(pypto("assemble", "piece", items(f"o * ({out}.shape[0] // {x}_blocks) + {x}_row + r", f"{x}_col"), out))),
            comment="an empty tensor joins nothing"))
    prelude = [
        Assign("rows, tile_cols", call("_tile_shape", "-(-max(m[0] for m in maps) // 16) * 16", "max_rows", "2", "(dtype, pypto.DT_FP32)"),
               "tiles 32-byte aligned: spans need not be"),
        *(Assign(f"x{i}_span, x{i}_stack, x{i}_blocks, x{i}_heads, x{i}_xo, x{i}_xh, x{i}_co, x{i}_ch, x{i}_c0, x{i}_row, x{i}_col",
                 f"maps[{i}]") for i in range(inputs * outputs)),
    ]
    doc = (f"{inputs} input{'s' if inputs > 1 else ''}, each a window of blocks of rows (maps), joined into [rows, width]."
           if outputs == 1 else f"{outputs} joins of {inputs} inputs each, windows of blocks of rows (maps), into [rows, width[k]] each.")
    return Definition(name, factory(name, ["dtype, widths, width, maps, max_rows"], doc, prelude, params, body), TILE_SHAPE)


def triangle_kernel(name: str, doc: str, keep: Step) -> Definition:
    """A kernel factory ``name(dtype, h, w, diagonal)`` keeping one triangle of each [h, w] matrix.

    pypto.tril/triu fail to compile in 0.2.0 (``F7A001 idx < size_``), so the triangle is a
    mask: ``offsets`` ([h, w], FP32, from the host) holds each entry's col - row, ``keep``
    compares it with ``diagonal`` and pypto.where zeroes the rest. The matrices are stacked
    rows of ``x`` ([matrices * h, w]); each is walked in row tiles.
    """
    tile = row_tiles(
        "h",
        *_row_start("[(r * -1 + h).min(rows), w]"),
        Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")),
        Assign("x_tile", pypto("view", "x", items("rows", "w"), items("m * h + r", "0"), valid_shape="valid")),
        Assign("offsets_tile", pypto("view", "offsets", items("rows", "w"), items("r", "0"), valid_shape="valid")),
        keep.statement("kept", ("offsets_tile", "diagonal")),
        Assign("result", pypto("where", "kept", "x_tile", "0.0")),
        Do(pypto("assemble", "result", items("m * h + r", "0"), "out")),
    )
    body = [loop("m", pypto("loop", "x.shape[0] // h", name='"matrices"'), tile)]
    prelude = [Assign("rows, tile_cols", call("_tile_shape", "-(-w // 16) * 16", "64", "4", "(dtype,)"), "32-byte aligned tiles")]
    params = [tensor("x", items("pypto.DYNAMIC", "w"), "dtype"), tensor("offsets", items("h", "w"), FP32),
              tensor("out", items("pypto.DYNAMIC", "w"), "dtype")]
    return Definition(name, factory(name, ["dtype, h, w, diagonal"], doc, prelude, params, body), TILE_SHAPE)


def one_hot_kernel(name: str, doc: str) -> Definition:
    """A kernel factory ``name(dtype, classes)``: pypto.one_hot of row tiles of the indices ``x``
    ([n], INT64) into ``out`` ([n, classes], INT64). pypto.one_hot's tile spans the classes
    (TiledOneHot: "The numClasses and last axis of tileshape should be equal")."""
    body = [
        Assign("n", "x.shape[0]"),
        row_tiles(
            "n",
            *_row_start("(n - r).min(rows)"),
            Do(pypto("set_vec_tile_shapes", "rows")),
            Assign("x_tile", pypto("view", "x", items("rows"), items("r"), valid_shape=items("valid"))),
            Do(pypto("set_vec_tile_shapes", "rows", "classes"), "one_hot's tile spans the classes"),
            Assign("result", pypto("one_hot", "x_tile", "classes")),
            Do(pypto("assemble", "result", items("r", "0"), "out")),
        ),
    ]
    prelude = [Assign("rows", "max(1, min(64, _UB_BYTES // (8 * 3 * classes)))")]
    params = [tensor("x", items("pypto.DYNAMIC"), "dtype"), tensor("out", items("pypto.DYNAMIC", "classes"), "dtype")]
    return Definition(name, factory(name, ["dtype, classes"], doc, prelude, params, body), (*TILE_SHAPE, "PYPTO_LAUNCHER"))


def arange_kernel(name: str, doc: str) -> Definition:
    """A kernel factory ``name(dtype, start, step)``: ``out`` ([n], ``dtype``) = start + k * step
    in INT32, ``rows`` values a tile, for any n up to ``rows * tiles``. pypto.arange takes only
    constants and pypto.full no symbolic value the interpreter computes, so a tile's start is the
    tile's element of a constant arange of every tile's start, viewed at the loop index."""
    ramp = pypto("reshape", pypto("arange", "0", "rows * step", "step"), items("1", "rows"))
    starts = pypto("reshape", pypto("arange", "start", "start + tiles * rows * step", "rows * step"), items("1", "tiles"))
    body = [
        Assign("n", "out.shape[0]"),
        row_tiles(
            "n",
            *_row_start("(n - r).min(rows)"),
            Do(pypto("set_vec_tile_shapes", "1", "tiles")),
            Assign("first", pypto("view", starts, items("1", "1"), items("0", "i")), "this tile's start"),
            Do(pypto("set_vec_tile_shapes", "1", "rows")),
            Assign("values", pypto("add", ramp, "first")),
            when(f"dtype != {INT32}", Assign("values", pypto("cast", "values", "dtype"))),
            Assign("values", pypto("reshape", "values", items("rows"))),
            Do(pypto("set_vec_tile_shapes", "rows")),
            Do(pypto("assemble", pypto("view", "values", items("rows"), items("0"), valid_shape=items("valid")), items("r"), "out")),
        ),
    ]
    prelude = [Assign("rows, tiles", "_ARANGE_TILE")]
    params = [tensor("out", items("pypto.DYNAMIC"), "dtype")]
    return Definition(name, factory(name, ["dtype, start, step"], doc, prelude, params, body), (*TILE_SHAPE, "_arange_plan"))  # _ARANGE_TILE


def reversed_cols_kernel(name: str, doc: str) -> Definition:
    """A kernel factory ``name(dtype, cols, max_rows)``: ``out`` [rows, cols] = ``x`` with each
    row's cols in reverse order. PyPTO 0.2.0 has no reverse: pypto.index_select by a descending
    pypto.arange reverses a tile's columns. The row is walked in column blocks of one tile (at most
    :data:`REVERSED_BLOCK`), the
    last ending at the row's end (overlapping the one before: a copy may write a column twice),
    each read from its mirror block."""
    body = [
        *_row_start("(n - r).min(rows)"),
        Do(pypto("set_vec_tile_shapes", "rows", "block")),
        loop("b", "range(blocks)",
             Assign("c", "min(b * block, cols - block)", "the last block ends at the row's end"),
             Assign("x_tile", pypto("view", "x", items("rows", "block"), items("r", "cols - c - block"), valid_shape=items("valid", "block")),
                    "its mirror"),
             Assign("result", pypto("index_select", "x_tile", "1", pypto("arange", "block - 1", "-1", "-1"))),
             Do(pypto("assemble", "result", items("r", "c"), "out")),
             comment="unrolled"),
    ]
    prelude = [Assign("rows, block", call("_tile_shape", f"min(cols, {REVERSED_BLOCK})", "max_rows", "4", tile_dtypes("dtype"))),
               Assign("blocks", "(cols + block - 1) // block")]
    params = [tensor("x", items("pypto.DYNAMIC", "cols"), "dtype"), tensor("out", items("pypto.DYNAMIC", "cols"), "dtype")]
    loops = [Assign("n", "x.shape[0]"), row_tiles("n", *body)]
    return Definition(name, factory(name, ["dtype, cols, max_rows"], doc, prelude, params, loops), TILE_SHAPE)


def reversed_rows_kernel(name: str, doc: str) -> Definition:
    """A kernel factory ``name(dtype, cols, group, max_rows)``: ``out`` [n, cols] = ``x`` with the
    rows of each group of ``group`` rows in reverse order. pypto.index_select by a descending
    pypto.arange reverses a tile's rows; tiles are whole, at most ``group`` rows (``max_rows``),
    the last of a group overlapping the one before, each read from its mirror tile; rows wider
    than a tile in column blocks, the last ending at the row's end."""
    block = [
        Assign("c", "min(b * block, cols - block)", "the last block ends at the row's end"),
        Assign("x_tile", pypto("view", "x", items("rows", "block"), items("g * group + group - r - rows", "c")), "its mirror"),
        Assign("result", pypto("index_select", "x_tile", "0", pypto("arange", "rows - 1", "-1", "-1"))),
        Do(pypto("assemble", "result", items("g * group + r", "c"), "out")),
    ]
    tiles = loop("i", pypto("loop", "tiles", name='"row_tiles"', unroll_list=items("1")),
                 Assign("r", "(i * rows).min(group - rows)", "a whole tile: the last one overlaps its predecessor"),
                 Do(pypto("set_vec_tile_shapes", "rows", "block")),
                 loop("b", "range(blocks)", *block, comment="unrolled"))
    body = [Assign("n", "x.shape[0]"), loop("g", pypto("loop", "n // group", name='"groups"', unroll_list=items("1")), tiles)]
    prelude = [Assign("rows, block", call("_tile_shape", f"min(cols, {REVERSED_BLOCK})", "max_rows", "4", tile_dtypes("dtype"))),
               Assign("tiles", "(group + rows - 1) // rows"),
               Assign("blocks", "(cols + block - 1) // block")]
    params = [tensor("x", items("pypto.DYNAMIC", "cols"), "dtype"), tensor("out", items("pypto.DYNAMIC", "cols"), "dtype")]
    return Definition(name, factory(name, ["dtype, cols, group, max_rows"], doc, prelude, params, body), TILE_SHAPE)


def indexed_kernel(
    name: str,
    doc: str,
    factory_params: str,
    tiles: str,
    inputs: Sequence[tuple[str, str]],
    program: Sequence[Apply],
    outputs: Sequence[tuple[str, str, str, str]],
) -> Definition:
    """A kernel factory walking row tiles of its tensors, for indexing and sorting ops.

    ``inputs`` are ``(name, layout)``: ``"rows"`` a [rows, <name>_cols] matrix of ``dtype``
    viewed one row tile at a time (``<name>_tile``), ``"index_rows"`` one of indices,
    ``"index"`` a 1-D index walked alongside, ``"table"`` a [n, cols] matrix of ``dtype``
    taken whole (the rows an index picks), ``"indices"`` a whole 1-D index; indices are of the
    factory's ``index_dtype``, torch's int64 or int32, read as they are (PyPTO indexes by
    either). ``tiles`` is the factory's expression for the vector tile ``(rows, tile_cols)``;
    the row count comes from the first walked input. ``outputs`` are ``(name, tile, dtype,
    cols)``: each assembles its program tile at the row tile's offset, indices (:data:`INDEX`)
    cast to torch's int64. A program step computing in FP32 (``fp32``: topk) gets FP32 copies
    of the ``dtype`` tiles and its results are cast back.
    """
    fp32 = any(a.step.fp32 for a in program)
    walked = [n for n, layout in inputs if layout in ("rows", "index_rows", "index")]
    shapes = {"rows": "[pypto.DYNAMIC, {}_cols]", "index_rows": "[pypto.DYNAMIC, {}_cols]", "index": "[pypto.DYNAMIC]",
              "table": "[pypto.DYNAMIC, cols]", "indices": "[{}_count]"}
    params = [tensor(n, shapes[layout].format(n), "dtype" if layout in ("rows", "table") else "index_dtype") for n, layout in inputs]
    body: list[Stmt] = []
    for n in (n for n, layout in inputs if layout == "index"):
        body += [Do(pypto("set_vec_tile_shapes", "rows")), Assign(f"{n}_tile", pypto("view", n, items("rows"), items("r"), valid_shape=items("valid")))]
    body.append(Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")))
    for n, layout in inputs:
        if layout in ("rows", "index_rows"):
            body.append(Assign(f"{n}_tile", pypto("view", n, items("rows", f"{n}_cols"), items("r", "0"), valid_shape=items("valid", f"{n}_cols"))))
            if fp32 and layout == "rows":
                body.append(to_fp32([f"{n}_tile"], comment="FP32-only ops: compute in FP32"))
    body += statements(program)
    setup: list[Stmt] = []
    for out, tile, dtype, _ in outputs:
        if fp32 and dtype == "dtype":
            more, store = casting(tile, FP32, dtype)
            setup += more
            body += store
        if dtype == INDEX:  # PyPTO's indices are INT32 (A2/A3 cast INT32 to INT64)
            body.append(Assign(tile, pypto("cast", tile, INDEX)))
        body.append(Do(pypto("assemble", tile, items("r", "0"), out)))
    params += [tensor(out, items("pypto.DYNAMIC", cols), dtype) for out, _, dtype, cols in outputs]
    loops = [Assign("n", f"{walked[0]}.shape[0]"), row_tiles("n", *_row_start("(n - r).min(rows)"), *body)]
    return Definition(name, factory(name, [factory_params], doc, [Assign("rows, tile_cols", tiles), *setup], params, loops), TILE_SHAPE)


def index_bounds_kernel() -> Definition:
    """The factory ``index_bounds_kernel(index_dtype, rows)`` of a kernel bounding a 1-D index
    (int64 or int32) in tiles of ``rows`` indices: each tile's least and largest, in FP32, at
    ``2 * i`` and ``2 * i + 1`` of ``bounds``, which the host reduces (the indexing wrappers' check
    that every index lies in the table, before a kernel reads by them)."""
    body = [
        Assign("n", "index.shape[0]"),
        loop("i", pypto("loop", "(n + rows - 1) // rows", name='"index_tiles"', unroll_list=items("1")),
             Assign("r", "i * rows"),
             Do(pypto("set_vec_tile_shapes", "rows")),
             Assign("index_tile", pypto("view", "index", items("rows"), items("r"), valid_shape=items("(n - r).min(rows)"))),
             Assign("values", pypto("cast", "index_tile", FP32)),
             Do(pypto("assemble", pypto("amin", "values", "0", keepdim="True"), items("2 * i"), "bounds")),
             Do(pypto("assemble", pypto("amax", "values", "0", keepdim="True"), items("2 * i + 1"), "bounds"))),
    ]
    params = [tensor("index", items("pypto.DYNAMIC"), "index_dtype"), tensor("bounds", items("pypto.DYNAMIC"), FP32)]
    doc = "The least and largest of each tile of rows indices, in FP32."
    return Definition("index_bounds_kernel", factory("index_bounds_kernel", ["index_dtype, rows"], doc, [], params, body), ("_annotated",))


INDEX_BOUNDS = index_bounds_kernel()


def channel_kernel(
    name: str, doc: str, factory_params: str, channels: Sequence[str], program: Sequence[Apply], *, buffers: int, in_dtype: str = "dtype",
) -> Definition:
    """A kernel factory over ``x``, an [n * count, cols] matrix (the input's batch and channel
    dims folded into rows, the rest into cols), and ``channels``: [count, 1] columns of one value
    per channel (a norm's statistics, prelu's weight), read in place.

    The kernel walks each batch's channels in tiles of ``rows`` channels: the columns' tiles are
    the same rows of every batch, and broadcast along the row. The last target of ``program`` is
    the result, stored as ``dtype``, the channels'; ``x`` is of ``in_dtype`` (FP32: group_norm's
    normalized rows, whose affine rounds once).
    """
    fp32 = any(a.step.fp32 for a in program)
    result = program[-1].target
    body: list[Stmt] = [
        Assign("c", "j * rows"),
        Assign("r", "b * count + c"),
        Assign("valid", "[(count - c).min(rows), cols]"),
        Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")),
        Assign("x_tile", pypto("view", "x", items("rows", "cols"), items("r", "0"), valid_shape="valid")),
        *(Assign(f"{c}_tile", pypto("view", c, items("rows", "1"), items("c", "0"), valid_shape=items("valid[0]", "1"))) for c in channels),
    ]
    if fp32:
        tiles = [f"{t}_tile" for t in ("x", *channels) if t != "x" or in_dtype != FP32]
        body.append(to_fp32(tiles, comment="FP32-only ops: compute in FP32"))
    setup, store = casting(result, FP32 if fp32 else "dtype", "dtype")
    body += [*statements(program), *store, Do(pypto("assemble", result, items("r", "0"), "out"))]
    loops = [
        Assign("n", "x.shape[0] // count"),
        loop("b", pypto("loop", "n", name='"batch"', unroll_list=items("1")),
             loop("j", pypto("loop", "(count + rows - 1) // rows", name='"channel_tiles"', unroll_list=items("1")), *body)),
    ]
    params = [tensor("x", items("pypto.DYNAMIC", "cols"), in_dtype), *(tensor(c, items("count", "1"), "dtype") for c in channels),
              tensor("out", items("pypto.DYNAMIC", "cols"), "dtype")]
    tiles = call("_tile_shape", "cols", "max_rows", str(buffers), tile_dtypes(in_dtype, "dtype", *([FP32] if fp32 else [])), split_cols="True")
    prelude = [Assign("rows, tile_cols", tiles), *setup]
    return Definition(name, factory(name, [factory_params, "max_rows"], doc, prelude, params, loops), TILE_SHAPE)


def resampled_kernel(name: str, doc: str) -> Definition:
    """A kernel factory ``name(dtype, h, w, out_h, out_w, row_taps, col_taps)``: ``out`` [n *
    out_h, out_w] = each [h, w] image of ``x`` [n * h, w] resampled, one image a tile, in FP32:
    its cols by the sum over ``col_taps`` taps of ``col_weights[t]`` (a row) times the cols
    pypto.index_select picks by ``cols[t * out_w:]``, then its rows likewise by ``rows`` and the
    columns of ``row_weights`` (:func:`torch2pypto.runtime.resample._resampling_taps`)."""
    def taps(result: str, tile: str, dim: str, index: str, points: str, count: str, weight: Stmt) -> Stmt:
        return loop("t", f"range({count})",
                    Do(pypto("set_vec_tile_shapes", "width" if dim == "1" else "height")),
                    Assign("index", pypto("view", index, items(points), items(f"t * {points}"))),
                    Do(pypto("set_vec_tile_shapes", "height", "width")),
                    weight,
                    Assign("term", pypto("mul", pypto("index_select", tile, dim, "index"), "weight")),
                    Assign(result, f"term if t == 0 else pypto.add({result}, term)"),
                    comment="unrolled")
    body = [
        Do(pypto("set_vec_tile_shapes", "height", "width")),
        Assign("x_tile", pypto("view", "x", items("h", "w"), items("b * h", "0"))),
        to_fp32(["x_tile"]),
        taps("across", "x_tile", "1", "cols", "out_w", "col_taps",
             Assign("weight", pypto("view", "col_weights", items("1", "out_w"), items("t", "0")), "a row")),
        taps("result", "across", "0", "rows", "out_h", "row_taps",
             Assign("weight", pypto("view", "row_weights", items("out_h", "1"), items("0", "t")), "a column")),
        when(f"dtype != {FP32}", Assign("result", pypto("cast", "result", "dtype"))),
        Do(pypto("assemble", "result", items("b * out_h", "0"), "out")),
    ]
    params = [tensor("x", items("pypto.DYNAMIC", "w"), "dtype"),
              tensor("cols", items("col_taps * out_w"), INT32), tensor("col_weights", items("col_taps", "out_w"), FP32),
              tensor("rows", items("row_taps * out_h"), INT32), tensor("row_weights", items("out_h", "row_taps"), FP32),
              tensor("out", items("pypto.DYNAMIC", "out_w"), "dtype")]
    loops = [loop("b", pypto("loop", "x.shape[0] // h", name='"images"', unroll_list=items("1")), *body)]
    prelude = [Assign("height, width", call("_resampled_tile", "h", "w", "out_h", "out_w"))]
    return Definition(name, factory(name, ["dtype, h, w, out_h, out_w, row_taps, col_taps"], doc, prelude, params, loops),
                      ("_resampled_tile", "_annotated"))
