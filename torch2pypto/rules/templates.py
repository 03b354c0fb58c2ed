"""Kernel templates: load the input tiles, apply steps, store the result.

Every kernel sees its tensors as ``[rows, cols]`` matrices (the host folds leading dims), with a
dynamic row axis walked by ``pypto.loop`` in tiles of ``rows`` rows: ``pypto.view(...,
valid_shape=...)`` cuts the tail tile, ``pypto.assemble`` writes it back. Kernels are built by
``functools.cache``'d factories, one compiled kernel per dtype, width and constant; a template
builds its factory in the kernel IR (:mod:`kernel_ir`), printed once. Templates of other walks
(column runs, stacked matrices, indices, channels) are in :mod:`walks`.

PyPTO's quirks are handled here, once: FP32-only ops compute in FP32 between a cast in and a
cast out; BF16 <-> FP16 casts go through FP32; reductions get 32-byte aligned rows (host side,
:data:`REDUCTION_ROWS`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

from torch2pypto.rules.codegen import Definition, copied
from torch2pypto.rules.kernel_ir import Assign, Comment, Do, Expr, Factory, For, If, Param, Stmt, call, items, loop, pypto, source, when
from torch2pypto.rules.steps import Apply, Step, statements

FP32 = "pypto.DT_FP32"
BOOL = "pypto.DT_BOOL"
# ops that break on a partial tile (they build full-size constants): their kernels read whole
# tiles, the last one moved back over rows already done, of at most as many rows as the launch has
WHOLE_TILE_OPS = frozenset({"sigmoid"})
# the factory argument every vector kernel's wrapper passes last, for its [rows, cols] matrix x:
# the most rows a tile of this launch has (kernels are built per value); WHOLE_SPREAD_ROWS for
# kernels that read whole tiles (whole_tiles)
SPREAD_ROWS = "_spread_rows(*x.shape)"
WHOLE_SPREAD_ROWS = "_spread_rows(*x.shape, whole=True)"
# scan blocks: pypto.cumsum of a [rows, 2048] FP32 tile overflows the 192 KB UB in 0.2.0 (its
# TRANSPOSE_VNCHWCONV needs 204800 bytes); [8, 1024] blocks fit
SCAN_BLOCK = 1024
# product blocks: a column tile's widest (_WIDEST_TILE); a row of up to PRODUCT_BLOCKS of them
# launches (each block's multiply is unrolled in the kernel)
PRODUCT_BLOCK, PRODUCT_BLOCKS = 8192, 16


def whole_tiles(program: Sequence[Apply]) -> bool:
    """Whether a kernel of this program must read whole tiles only."""
    return any(a.step.op in WHOLE_TILE_OPS for a in program)


def reduces(program: Sequence[Apply]) -> bool:
    """Whether a program reduces along the row: its kernel reads whole, 32-byte aligned rows."""
    return any(a.step.reduces for a in program)


# the kernels' jit decorators: (call, comment)
VECTOR = (pypto("frontend.jit", pass_options="_VECTOR_PASSES"), "")
CUBE = (pypto("frontend.jit", pass_options='{"pg_skip_partition": False}'), "set either way: PyPTO keeps pass options")


def factory(
    name: str, params: Sequence[str], doc: str, prelude: Sequence[Stmt], kernel_params: Sequence[Param], body: Sequence[Stmt],
    jit: tuple[Expr, str] = VECTOR,
) -> str:
    """The source of ``name(params)``, a ``functools.cache``'d factory of one jit ``kernel``."""
    return _printed(Factory(name, tuple(params), doc, tuple(prelude), jit[0], tuple(kernel_params), tuple(body), jit[1]))


@functools.lru_cache(maxsize=2048)
def _printed(node: Factory) -> str:
    """A factory's source, printed once per process: the same region copied into many model files
    gives the same kernel. The key is the whole node (frozen, of strings and tuples), all its text
    depends on."""
    return source(node)


def tensor(name: str, shape: Expr, dtype: str) -> Param:
    """The kernel parameter ``name: pypto.Tensor(shape, dtype)``."""
    return Param(name, pypto("Tensor", shape, dtype))


def to_fp32(tiles: Sequence[str], dtype: str = "dtype", comment: str = "") -> If:
    """Tiles of ``dtype`` cast to FP32 unless ``dtype`` is FP32 (decided when the kernel is parsed)."""
    return when(f"{dtype} != {FP32}", *(Assign(t, pypto("cast", t, FP32)) for t in tiles), comment=comment)


def row_tiles(count: str, *body: Stmt, target: str = "i") -> For:
    """The ``pypto.loop`` over the row tiles of ``count`` rows, ``rows`` at a time."""
    return loop(target, pypto("loop", f"({count} + rows - 1) // rows", name='"row_tiles"', unroll_list=items("1")), *body)


def row_kernel(
    name: str,
    doc: str,
    factory_params: str,
    inputs: Sequence[str],
    program: Sequence[Apply],
    *,
    in_dtype: str = "dtype",
    out_dtype: str = "dtype",
    out_cols: str = "cols",
    buffers: int = 2,
    valid_cols: str = "cols",
    row_inputs: Sequence[str] = (),
    also: Sequence[tuple[str, str]] = (),
    whole_rows: bool = False,
    vectors: Sequence[str] = (),
    masks: Sequence[str] = (),
    blocked: bool = False,
    routed: bool = False,
) -> Definition:
    """A kernel factory over row tiles of ``inputs`` (all of dtype ``in_dtype`` but the bool
    ``masks``).

    Each input ``a`` is available to the program as the tile ``a_tile``; the program's last
    target is the result, stored as ``out_dtype`` ([rows, ``out_cols``]).
    ``valid_cols``: the columns the tiles hold data in (a reduction's real cols; the rest is
    32-byte padding). ``row_inputs``: FP32 tensors of one row, the same for every tile (an
    index row). ``also``: (output, tile) pairs, further outputs like ``out`` stored as ``in_dtype``
    (torch.max(x, dim) gives values and indices). ``whole_rows``: a tile spans every column
    where the row fits the unified buffer, else its column tiles (``_tile_shape``).
    A program that reduces along the row (:func:`reduces`) reads whole rows in tiles ``width``
    wide (``cols`` rounded up to 32 bytes, :data:`ROW_WIDTH`) whose valid shape is the row's
    ``cols``, so rows of any width are read and written in place; ``vectors`` are inputs of one
    row ([1, cols]) that broadcast over the tile's rows (a norm's weight). ``blocked`` (no
    reduction, ``row_inputs``, ``also`` nor ``vectors``): the inputs are read in place as
    [X * (n or 1), width] windows and the result written as [blocks * n, cols] (ROW_BLOCKS);
    the factory also takes ``blocks``, ``heads`` and each input's map. ``routed``: the result is
    stored as any ``out_dtype`` :func:`routing` reaches from ``in_dtype`` (the cast kernel's).
    """
    fp32 = any(a.step.fp32 for a in program)
    fixed = program[-1].step.result if program else None
    result = program[-1].target if program else f"{inputs[0]}_tile"
    whole = whole_tiles(program)
    masked = reduces(program)
    width = "width" if masked else "cols"
    whole_rows = whole_rows or masked
    blocked = blocked and not masked
    valid = {} if whole and not masked else {"valid_shape": "valid"}
    body: list[Stmt] = block_views(inputs, whole) if blocked else [
        Assign(f"{i}_tile", pypto("view", i, items("rows", width), items("r", "0"), **valid)) for i in inputs
    ]
    body += [Assign(f"{i}_tile", pypto("view", i, items("1", "cols"), items("0", "0"), valid_shape=items("1", valid_cols))) for i in row_inputs]
    body += [Assign(f"{v}_tile", pypto("view", v, items("1", "width"), items("0", "0"), valid_shape=items("1", "cols"))) for v in vectors]
    if fp32:
        body.append(to_fp32([f"{i}_tile" for i in (*inputs, *vectors) if i not in masks], in_dtype, "FP32-only ops: compute in FP32"))
    body += statements(program)
    setup: list[Stmt] = []
    if fixed is None:
        more, store = (routing if routed else casting)(result, FP32 if fp32 else in_dtype, out_dtype)
        setup += more
        body += store
    for output, tile in also:
        more, store = casting(tile, FP32 if fp32 else in_dtype, in_dtype)
        setup += more
        body += [*store, Do(pypto("assemble", tile, items("r", "0"), output))]
    params = [tensor(i, items("pypto.DYNAMIC", "cols"), BOOL if i in masks else in_dtype) for i in inputs]
    params += [tensor(i, items("1", "cols"), FP32) for i in row_inputs]
    params += [tensor(v, items("1", "cols"), in_dtype) for v in vectors]
    params += [tensor(o, items("pypto.DYNAMIC", out_cols), in_dtype) for o, _ in also]
    # whole: tiles of at most n rows (WHOLE_SPREAD_ROWS)
    start = _tile_start(whole, valid_cols) + ([Assign("valid", "[rows, cols]")] if whole and masked else [])
    # a row splits into column tiles only where no step works along it
    mode = {"whole_rows": "True"} if whole_rows else {} if any(dict(a.step.keywords).get("dim") for a in program) else {"split_cols": "True"}
    dtypes = tile_dtypes(in_dtype, out_dtype, *([FP32] if fp32 else []))
    prelude = [Assign("rows, tile_cols", call("_tile_shape", width if whole_rows else "cols", "max_rows", str(buffers), dtypes, **mode)), *setup]
    if blocked:
        params = [tensor(i, items("pypto.DYNAMIC", f"{i}_width"), BOOL if i in masks else in_dtype) for i in inputs]
        params.append(tensor("out", items("pypto.DYNAMIC", "cols"), out_dtype))
        loops = block_walk("out", [*body, *block_assembles([(result, "out")])], whole)
        text = factory(name, [factory_params, "blocks", "heads", *(f"{i}_map" for i in inputs), "max_rows"], doc,
                       [*prelude, *block_maps(inputs)], params, loops)
        return Definition(name, text, ("_tile_shape", "_annotated"))
    params.append(tensor("out", items("pypto.DYNAMIC", out_cols), out_dtype))
    loops = [
        Assign("n", f"{inputs[0]}.shape[0]"),
        row_tiles("n", *start, Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")), *body, Do(pypto("assemble", result, items("r", "0"), "out"))),
    ]
    requires = ("_tile_shape", "_annotated", *(["_cast_route"] if routed else []))
    return Definition(name, factory(name, [factory_params, "max_rows"], doc, prelude, params, loops), requires)


def scan_kernel(name: str, doc: str, program: Sequence[Apply]) -> Definition:
    """A kernel factory scanning the rows of ``x`` along its cols, in column blocks of one tile.

    ``program`` scans the block ``x_tile``; each block then adds the running total before it, a
    column of the block before it, so rows of any width scan (block + carry, the blocks unrolled).
    An FP32 program scans float tiles in FP32 and, into int32, INT32 tiles (a float input truncated
    to INT32 first, as torch casts before it sums): pypto.cumsum sums an INT32 tile in INT32 and
    widens the sums to INT64, which the kernel narrows back (exact: they are INT32 values), so the
    carry and the result are INT32 sums as torch's. PyPTO 0.2.0 widens a copy of the tile's full
    shape, which fails on a partial tile: INT32 tiles are one row, and no block is partial (the
    last one overlaps the one before, which is causal for a scan).
    """
    fp32 = any(a.step.fp32 for a in program)
    result = program[-1].target
    setup, store = ((), (when("acc != out_dtype", Assign(result, pypto("cast", result, "out_dtype"))),)) if fp32 \
        else casting(result, "dtype", "out_dtype")
    block = [
        Assign("start", "min(b * block, cols - block)", "the last block ends at the row's end, overlapping the one before"),
        Assign("x_tile", pypto("view", "x", items("rows", "block"), items("r", "start"), valid_shape=items("(n - r).min(rows)", "block"))),
        *([when("dtype != acc", Assign("x_tile", pypto("cast", "x_tile", "acc", mode="mode")), comment="FP32-only ops: compute in FP32"),
           *statements(program),
           when(f"acc != {FP32}", Assign(result, pypto("cast", result, "acc")), comment="pypto.cumsum widens INT32 sums to INT64")]
          if fp32 else statements(program)),
        when("b > 0", Assign(result, pypto("add", result, pypto("view", "before", items("rows", "1"), items("0", "start - 1 - (b - 1) * block"))),
                                   "the running total before start")),
        Assign("before", result),
        *store,
        Do(pypto("assemble", result, items("r", "start"), "out")),
    ]
    body = [
        Assign("n", "x.shape[0]"),
        row_tiles("n", Assign("r", "i * rows"), Do(pypto("set_vec_tile_shapes", "rows", "block")),
                  loop("b", "range(blocks)", *block, comment="unrolled")),
    ]
    dtypes = tile_dtypes("dtype", "out_dtype", *([f"{FP32} if acc == {FP32} else pypto.DT_INT64"] if fp32 else []))
    prelude = [
        *([Assign("acc", f"pypto.DT_INT32 if out_dtype == pypto.DT_INT32 else {FP32}", "the dtype the tiles scan in"),
           Assign("mode", "pypto.CastMode.CAST_TRUNC if acc == pypto.DT_INT32 else pypto.CastMode.CAST_NONE",
                  "a float into int32 truncated first, as torch casts it")] if fp32 else []),
        Assign("block", f"min(cols, {SCAN_BLOCK})", "pypto.cumsum transposes its tile: wider blocks overflow the UB"),
        Comment("pypto.cumsum's transposes take 4 live tiles, 16 of an FP32 input (scripts/tiles.csv: larger fail)"),
        Assign("rows, _", call("_tile_shape", "block", "max_rows", f"16 if dtype == {FP32} else 4", dtypes, whole_rows="True")),
        *([when(f"acc != {FP32}", Assign("rows", "1"), comment="INT32: whole tiles only (pypto.cumsum widens a copy of the tile's full shape)")]
          if fp32 else []),
        Assign("blocks", "(cols + block - 1) // block"),
        *setup,
    ]
    params = [tensor("x", items("pypto.DYNAMIC", "cols"), "dtype"), tensor("out", items("pypto.DYNAMIC", "cols"), "out_dtype")]
    return Definition(name, factory(name, ["dtype, out_dtype, cols, max_rows"], doc, prelude, params, body), ("_tile_shape", "_annotated"))


def product_kernel(name: str, doc: str) -> Definition:
    """A kernel factory multiplying the cols of each row of ``x`` into one, in FP32.

    PyPTO 0.2.0's pypto.prod fails to compile (F7A001): the product is made of pypto.mul. The row
    is ``blocks`` column blocks ``block`` wide (the widest power of two in it, at most
    :data:`PRODUCT_BLOCK`) multiplied together, then halved down to one column, the left half
    times the right; the ``rest`` of the row after the blocks is one piece per set bit of its
    width, each multiplied in as the halving reaches its width. Every view lies within the row:
    no padding is read or needed.
    """
    body = [
        Assign("r", "i * rows"),
        Assign("valid", "(n - r).min(rows)"),
        Do(pypto("set_vec_tile_shapes", "rows", "max(block, 16)"), "at least 32 bytes wide (a row of a few cols)"),
        loop("b", "range(blocks)",
             Assign("x_tile", pypto("view", "x", items("rows", "block"), items("r", "b * block"), valid_shape=items("valid", "block"))),
             to_fp32(["x_tile"]),
             If("b == 0", (Assign("result", "x_tile"),), (Assign("result", pypto("mul", "result", "x_tile")),)),
             comment="unrolled"),
        loop("k", "range(block.bit_length())",
             Assign("width", "block >> k"),
             when("k > 0", Assign("result", pypto("mul", pypto("view", "result", items("rows", "width"), items("0", "0")),
                                                  pypto("view", "result", items("rows", "width"), items("0", "width")))),
                  comment="the left half times the right"),
             when("rest & width != 0",
                  Assign("x_tile", pypto("view", "x", items("rows", "width"), items("r", "cols - (rest & (2 * width - 1))"),
                                         valid_shape=items("valid", "width"))),
                  to_fp32(["x_tile"]),
                  Assign("result", pypto("mul", "result", "x_tile")),
                  comment="the piece of the rest as wide"),
             comment="unrolled"),
        *casting("result", FP32, "out_dtype")[1],
        Do(pypto("assemble", "result", items("r", "0"), "out")),
    ]
    prelude = [
        Assign("block", f"min(1 << (cols.bit_length() - 1), {PRODUCT_BLOCK})"),
        Assign("blocks", "cols // block"),
        Assign("rest", "cols - blocks * block", "fewer than block: a piece per set bit"),
        Assign("rows, _", call("_tile_shape", "block", "max_rows", "4", tile_dtypes("dtype", "out_dtype", FP32), whole_rows="True")),
    ]
    params = [tensor("x", items("pypto.DYNAMIC", "cols"), "dtype"), tensor("out", items("pypto.DYNAMIC", "1"), "out_dtype")]
    loops = [Assign("n", "x.shape[0]"), row_tiles("n", *body)]
    return Definition(name, factory(name, ["dtype, out_dtype, cols, max_rows"], doc, prelude, params, loops), ("_tile_shape", "_annotated"))


def tile_dtypes(*dtypes: str) -> str:
    """A kernel's tile dtypes as the tuple _tile_shape takes."""
    unique = list(dict.fromkeys(dtypes))
    return f"({', '.join(unique)}{',' if len(unique) == 1 else ''})"


def casting(var: str, src: str, dst: str) -> tuple[tuple[Stmt, ...], tuple[Stmt, ...]]:
    """Factory setup and kernel statements casting tile ``var`` from dtype ``src`` to ``dst``.

    BF16 and FP16 have no direct cast in PyPTO and go through FP32; a cast to the same dtype is
    skipped when the kernel is parsed.
    """
    if src == dst:
        return (), ()
    cast = when(f"{src} != {dst}", Assign(var, pypto("cast", var, dst)))
    if FP32 in (src, dst):
        return (), (cast,)
    setup = Assign(f"{var}_via_fp32", f"{{{src}, {dst}}} == {{pypto.DT_BF16, pypto.DT_FP16}}")
    return (setup,), (when(f"{var}_via_fp32", Assign(var, pypto("cast", var, FP32))), cast)


def routing(var: str, src: str, dst: str) -> tuple[tuple[Stmt, ...], tuple[Stmt, ...]]:
    """As :func:`casting`, between any dtypes ``_cast_route`` (runtime/casting.py) takes: through
    FP16 and FP32 where A2/A3 cast no further directly, a float truncated into an integer, a bool
    as ``x != 0``."""
    setup = Assign(f"{var}_via_fp16, {var}_via_fp32, {var}_mode", call("_cast_route", src, dst))
    return (setup,), (
        when(f"{var}_via_fp16", Assign(var, pypto("cast", var, "pypto.DT_FP16"))),
        when(f"{var}_via_fp32", Assign(var, pypto("cast", var, FP32))),
        when(f"{dst} == {BOOL}", Assign(var, pypto("ne", var, "0.0"))),
        when(f"{dst} not in ({src}, {BOOL})", Assign(var, pypto("cast", var, dst, mode=f"{var}_mode"))),
    )


REDUCTION_ROWS = copied("layout", "_reduction_rows", "_reduced_dims")
REDUCED_RUNS = copied("layout", "_reduced_runs")


def cube_kernel(
    name: str, doc: str, product: Apply, epilogue: Sequence[Apply], *, batched: bool, bias: bool,
    others: Sequence[str] = (), constants: Sequence[str] = (), rounded: bool = False, tail: Sequence[Stmt] = (),
    grouped: bool = False,
) -> Definition:
    """A kernel factory ``name(dtype, out_dtype, k, n, rows, transposed)`` multiplying row tiles of ``a`` by ``b``.

    ``a`` is [m, k] with a dynamic m walked in tiles of ``rows`` rows (:data:`CUBE_TILES`: the
    host picks them by m); ``b`` is [k, n] (``transposed``: [n, k], read as b.mT), or
    ``batched``: a stack of them whose count splits ``a``'s rows into equal runs of m rows, one per
    matrix; ``grouped`` (with ``batched``): the runs are data, ``offs`` ([groups] INT32, a
    cumulative row count per matrix: grouped_mm's) bounds run j at rows [offs[j-1], offs[j]),
    read in the kernel as loop bounds (an empty run walks no tile), so the host never reads
    them. ``product`` (the matmul step, ``b_trans=transposed``) computes ``result`` in FP32
    from ``a_tile`` and ``b_tile``; the ``epilogue`` steps work on it (with ``bias_tile``, [1, n]
    in FP32, given ``bias``) under vector tiles; it is stored as ``out_dtype``. An epilogue may also
    read ``others`` (``<name>_tile``: row tiles of [m, n] inputs of ``dtype``, in FP32) and
    ``constants`` (further factory parameters: Python numbers); ``rounded``: the product (plus
    the bias: the epilogue's first step, given ``bias``) is rounded to ``dtype`` before the epilogue, where
    torch's linear rounds its result; ``tail``: statements on ``result`` after the epilogue steps (an
    activation's). With none of these, the cube writes the product as ``out_dtype`` itself, rounding
    its FP32 sum once as torch does: no FP32 copy through GM and no vector task (in PyPTO's cost
    model, bf16 linear 2048x4096x4096 387.4 -> 370.7 µs, 64 rows 42.9 -> 33.3, 2048x11008x4096
    900.5 -> 881.3; but 2048x4096x11008 932.2 -> 971.1, PyPTO no longer pairing two n tiles a task).
    K and N are static per compiled kernel and of any size: the cube's tiles are 32-byte aligned
    (16 elements), so the operands are read in place in tiles of k and n rounded up to 16, whose
    valid shape is the real k and n.
    """
    params = [tensor("a", items("pypto.DYNAMIC", "k"), "dtype"), tensor("b", "b_shape", "dtype")]
    params += [tensor("offs", items("pypto.DYNAMIC"), "pypto.DT_INT32")] if grouped else []
    params += [tensor("bias", items("1", "n"), "dtype")] if bias else []
    params += [tensor(o, items("pypto.DYNAMIC", "n"), "dtype") for o in others]
    params.append(tensor("out", items("pypto.DYNAMIC", "n"), "out_dtype"))
    direct = not (epilogue or bias or rounded or tail or others)  # the product is the result: the cube stores it
    if direct:
        product = dataclasses.replace(product, operands=tuple("out_dtype" if o == FP32 else o for o in product.operands))
    setup, store = ((), ()) if direct else casting("result", FP32, "out_dtype")
    body: list[Stmt] = [
        Do(pypto("set_cube_tile_shapes", items("rows", "rows"), "k_tiles", "n_tiles")),
        Assign("a_tile", pypto("view", "a", items("rows", "k16"), items("r", "0"), valid_shape=items("(m - i * rows).min(rows)", "k"))),
        Assign("b_tile", pypto("view", "b", "b_tile_shape", items("j * b_rows" if batched else "0", "0"), valid_shape="b_valid")),
        *statements([product]),
        *(() if direct else (Do(pypto("set_vec_tile_shapes", "vec_rows", "vec_cols")),)),
    ]
    if bias:
        body += [_row_vector("bias", "n", "n16"), to_fp32(["bias_tile"])]
    if rounded:
        body += statements(epilogue[:1]) if bias else ()
        epilogue = epilogue[1:] if bias else epilogue
        body.append(_rounded(["result"], "torch's linear rounds its result to its dtype"))
    for o in others:
        body += [Assign(f"{o}_tile", pypto("view", o, items("rows", "n16"), items("r", "0"), valid_shape=items("(m - i * rows).min(rows)", "n"))),
                 to_fp32([f"{o}_tile"])]
    body += [*statements(epilogue), *tail, *store, Do(pypto("assemble", "result", items("r", "0"), "out"))]
    if grouped:
        loops = [loop("j", pypto("loop", "offs.shape[0]", name='"groups"'),
                      Assign("start", "offs[(j - 1).max(0)] * j.min(1)", "where the run before ended (0 for the first)"),
                      Assign("m", "offs[j] - start"),
                      row_tiles("m", Assign("r", "start + i * rows"), *body))]
    elif batched:
        loops = [
            Assign("m", "a.shape[0] // (b.shape[0] // b_rows)", "rows per right matrix"),
            loop("j", pypto("loop", "b.shape[0] // b_rows", name='"matrices"'), row_tiles("m", Assign("r", "j * m + i * rows"), *body)),
        ]
    else:
        loops = [Assign("m", "a.shape[0]"), row_tiles("m", Assign("r", "i * rows"), *body)]
    prelude = [
        Assign("k16, n16", "-(-k // 16) * 16, -(-n // 16) * 16", "the cube's 32-byte aligned tiles over the real k and n"),
        Assign("b_rows, b_valid", "(n, [n, k]) if transposed else (k, [k, n])"),
        Assign("b_tile_shape", "[n16, k16] if transposed else [k16, n16]"),
        Assign("b_shape", "[pypto.DYNAMIC, b_valid[1]]", "the matrices stacked") if batched else Assign("b_shape", "b_valid"),
        Assign("k_tiles, n_tiles", call("_cube_tiles", "k16", "n16", "dtype", "rows")),
        *(() if direct else (Assign("vec_rows, vec_cols", call("_tile_shape", "n16", "rows", str(3 + len(others)), "(pypto.DT_FP32,)")),)),
        *setup,
    ]
    text = factory(name, ["dtype, out_dtype, k, n, rows, transposed", *constants], doc, prelude, params, loops, CUBE)
    return Definition(name, text, ("_cube_tiles", "_annotated") if direct else ("_cube_tiles", "_tile_shape", "_annotated"))


def _row_vector(name: str, cols: str, width: str) -> Assign:
    """The tile of a bias ``name`` ([1, cols]) in a [1, width] tile (cols rounded up to 16)."""
    return Assign(f"{name}_tile", pypto("view", name, items("1", width), items("0", "0"), valid_shape=items("1", cols)))


def _rounded(tiles: Sequence[str], comment: str) -> If:
    """FP32 tiles rounded to ``dtype`` where torch rounds (a linear's or an activation's result)."""
    return when(f"dtype != {FP32}", *(Assign(t, pypto("cast", pypto("cast", t, "dtype"), FP32)) for t in tiles), comment=comment)


def gated_kernel(name: str, doc: str, activation: Sequence[Stmt], *, bias: bool) -> Definition:
    """A kernel factory ``name(dtype, k, n, rows)`` computing ``act(a @ wg.T + bg) * (a @ wu.T + bu)``
    of row tiles of ``a`` ([m, k], m dynamic, in tiles of ``rows`` rows: :data:`CUBE_TILES`).

    Each row tile is read once and multiplied by both weights ([n, k], read transposed) on the cube,
    in FP32; the vector epilogue adds the biases (given ``bias``: ``bg``, ``bu`` [1, n]), rounds each
    projection to ``dtype`` where torch's linear rounds it, applies ``activation`` (the FP32 statements
    on the tile ``gate``, rounded after as torch's activation rounds) and multiplies. K and N are
    static and of any size, as in :func:`cube_kernel`.
    """
    params = [tensor("a", items("pypto.DYNAMIC", "k"), "dtype"), tensor("wg", items("n", "k"), "dtype"), tensor("wu", items("n", "k"), "dtype")]
    params += [tensor(b, items("1", "n"), "dtype") for b in ("bg", "bu")] if bias else []
    params.append(tensor("out", items("pypto.DYNAMIC", "n"), "dtype"))
    body: list[Stmt] = [
        Do(pypto("set_cube_tile_shapes", items("rows", "rows"), "k_tiles", "n_tiles")),
        Assign("a_tile", pypto("view", "a", items("rows", "k16"), items("r", "0"), valid_shape=items("(m - r).min(rows)", "k"))),
    ]
    setup, tail = gated_tail(activation, bias=bias)
    body += tail
    prelude = [
        Assign("k16, n16", "-(-k // 16) * 16, -(-n // 16) * 16", "the cube's 32-byte aligned tiles over the real k and n"),
        Assign("k_tiles, n_tiles", call("_cube_tiles", "k16", "n16", "dtype", "rows")),
        Assign("vec_rows, vec_cols", call("_tile_shape", "n16", "rows", "4", "(pypto.DT_FP32,)"), "gate, up and two temporaries"),
        *setup,
    ]
    loops = [Assign("m", "a.shape[0]"), row_tiles("m", Assign("r", "i * rows"), *body)]
    text = factory(name, ["dtype, k, n, rows"], doc, prelude, params, loops, CUBE)
    return Definition(name, text, ("_cube_tiles", "_tile_shape", "_annotated"))


def gated_tail(activation: Sequence[Stmt], *, bias: bool) -> tuple[tuple[Stmt, ...], list[Stmt]]:
    """The factory setup and the kernel statements of the gated pair after its row tile ``a_tile``
    ([rows, k16], valid [rows of it, k]) under the cube's tile shapes: both projections (``wg``,
    ``wu`` [n, k] read transposed), then on the vector cores the biases (given ``bias``), the
    rounding where torch rounds, ``activation`` on ``gate``, the product and its store into ``out``."""
    matmul = Step("matmul", (("b_trans", "True"),))
    body: list[Stmt] = [
        *(Assign(f"{w}_tile", pypto("view", w, items("n16", "k16"), items("0", "0"), valid_shape=items("n", "k"))) for w in ("wg", "wu")),
        matmul.statement("gate", ("a_tile", "wg_tile", FP32)),
        matmul.statement("up", ("a_tile", "wu_tile", FP32)),
        Do(pypto("set_vec_tile_shapes", "vec_rows", "vec_cols")),
    ]
    if bias:
        for b, tile in (("bg", "gate"), ("bu", "up")):
            body += [_row_vector(b, "n", "n16"), to_fp32([f"{b}_tile"]), Assign(tile, pypto("add", tile, f"{b}_tile"))]
    setup, store = casting("result", FP32, "dtype")
    body += [
        _rounded(["gate", "up"], "torch's linear rounds each projection to its dtype"),
        *activation,
        _rounded(["gate"], "and its activation its result"),
        Assign("result", pypto("mul", "gate", "up")),
        *store,
        Do(pypto("assemble", "result", items("r", "0"), "out")),
    ]
    return setup, body


def linears_kernel(name: str, count: int, *, bias: bool) -> Definition:
    """A kernel factory ``name(dtype, k, n0, .., rows)`` computing ``count`` projections of row tiles
    of ``a`` ([m, k], m dynamic, in tiles of ``rows`` rows: :data:`CUBE_TILES`): ``a @ wj.T (+ bj)``
    into ``outj``, each weight [nj, k] (read transposed) its own N.

    Each row tile is read once and multiplied by every weight on the cube, in FP32; the vector
    epilogue adds each bias (given ``bias``: ``bj`` [1, nj]) and rounds to ``dtype`` once, as torch's
    linear rounds. K and each N are static and of any size, as in :func:`cube_kernel`.
    """
    ids = range(count)
    params = [tensor("a", items("pypto.DYNAMIC", "k"), "dtype"), *(tensor(f"w{j}", items(f"n{j}", "k"), "dtype") for j in ids)]
    params += [tensor(f"b{j}", items("1", f"n{j}"), "dtype") for j in ids] if bias else []
    params += [tensor(f"out{j}", items("pypto.DYNAMIC", f"n{j}"), "dtype") for j in ids]
    matmul = Step("matmul", (("b_trans", "True"),))
    setup, store = casting("result", FP32, "dtype")
    body: list[Stmt] = [Assign("a_tile", pypto("view", "a", items("rows", "k16"), items("r", "0"), valid_shape=items("(m - r).min(rows)", "k")))]
    for j in ids:
        body += [
            Do(pypto("set_cube_tile_shapes", items("rows", "rows"), f"k_tiles{j}", f"n_tiles{j}")),
            Assign(f"w{j}_tile", pypto("view", f"w{j}", items(f"n{j}_16", "k16"), items("0", "0"), valid_shape=items(f"n{j}", "k"))),
            matmul.statement("result", ("a_tile", f"w{j}_tile", FP32)),
            Do(pypto("set_vec_tile_shapes", f"vec_rows{j}", f"vec_cols{j}")),
        ]
        if bias:
            body += [_row_vector(f"b{j}", f"n{j}", f"n{j}_16"), to_fp32([f"b{j}_tile"]), Assign("result", pypto("add", "result", f"b{j}_tile"))]
        body += [*store, Do(pypto("assemble", "result", items("r", "0"), f"out{j}"))]
    prelude: list[Stmt] = [Assign("k16", "-(-k // 16) * 16", "the cube's 32-byte aligned tiles over the real k and each n")]
    for j in ids:
        prelude += [
            Assign(f"n{j}_16", f"-(-n{j} // 16) * 16"),
            Assign(f"k_tiles{j}, n_tiles{j}", call("_cube_tiles", "k16", f"n{j}_16", "dtype", "rows")),
            Assign(f"vec_rows{j}, vec_cols{j}", call("_tile_shape", f"n{j}_16", "rows", "3", "(pypto.DT_FP32,)")),
        ]
    loops = [Assign("m", "a.shape[0]"), row_tiles("m", Assign("r", "i * rows"), *body)]
    text = factory(name, ["dtype", "k", *(f"n{j}" for j in ids), "rows"], _linears_doc(count, bias), [*prelude, *setup], params, loops, CUBE)
    return Definition(name, text, ("_cube_tiles", "_tile_shape", "_annotated"))


def _linears_doc(count: int, bias: bool) -> str:
    terms = ", ".join(f"a @ w{j}.T{f' + b{j}' if bias else ''}" for j in range(count))
    return f"{terms}: {count} projections of one read of a's row tiles."


CUBE_TILES = copied("tiles", "_cube_tiles", "_L0A_BYTES")


CUBE_OPERANDS = copied("operands", "_cube_operands", last="_kept_contiguous")


WHOLE_ROWS = copied("layout", "_fits_whole_rows")


ROW_WIDTH = copied("layout", "_row_width")


ALIGNED_ROWS = copied("layout", "_aligned_rows")


REDUCTION_OPERANDS = copied("layout", "_reduction_operands", last="_ordered")


def block_maps(names: Sequence[str]) -> list[Stmt]:
    """A blocked kernel factory's statements: each operand's map unpacked (ROW_BLOCKS), and the
    last dim of its tiles, which PyPTO wants spanning 32-byte blocks (a column's, bool's too)."""
    fields = ("width", "span", "xo", "xh", "co", "ch", "c0", "step")
    return [Assign("tile_cols", "-(-tile_cols // 32) * 32", "tiles' last dim spans 32-byte blocks"),
            *(Assign(", ".join(f"{n}_{f}" for f in fields), f"{n}_map") for n in names)]


def block_views(names: Sequence[str], whole: bool, widths: dict[str, str] | None = None) -> list[Stmt]:
    """Kernel statements giving each of ``names`` (a [X * (n or 1), width] window, ROW_BLOCKS) its
    [rows, cols] tile of block ``o``: rows r.. of it, its one row spread over the tile's rows, a
    column (span 1) spread along them. ``widths``: the operands of another last dim (a kernel
    expression: phi3's cos, rotary_dim wide), whose tiles are that wide."""
    views: list[Stmt] = []
    for n in names:
        cols = (widths or {}).get(n, "cols")
        valid = {} if whole else {"valid_shape": "valid" if cols == "cols" else items("valid[0]", cols)}
        tile, x, c = f"{n}_tile", f"outer * {n}_xo + inner * {n}_xh", f"outer * {n}_co + inner * {n}_ch + {n}_c0"
        spread = Assign(tile, pypto("expand_clone", tile, items("rows", cols), **valid))
        rows = pypto("view", n, items("rows", f"{n}_span"), items(f"({x}) * n + r", c), **({} if whole else {"valid_shape": items("valid[0]", f"{n}_span")}))
        row = (
            Assign(tile, pypto("view", n, items("1", f"{n}_span"), items(x, c))),
            when(f"{n}_span != {cols}", Assign(tile, pypto("expand_clone", tile, items("1", cols)))),
            spread,
        )
        views.append(If(f"{n}_step", (Assign(tile, rows), when(f"{n}_span != {cols}", spread, comment="a column: spread along the rows on chip")), row,
                        else_comment="one row for the block's rows (a broadcast): read once, spread on chip"))
    return views


def block_assembles(results: Sequence[tuple[str, str]]) -> list[Stmt]:
    """Kernel statements writing each (tile, output) into rows r.. of the output's block ``o``."""
    return [Do(pypto("assemble", tile, items("o * n + r", "0"), out)) for tile, out in results]


def block_walk(out: str, body: Sequence[Stmt], whole: bool) -> list[Stmt]:
    """A blocked kernel's loop over the row tiles of every block of ``out`` ([blocks * n, cols]):
    one loop, as a row kernel's (a nested loop of blocks leaves most vector cores idle)."""
    return [
        Assign("n", f"{out}.shape[0] // blocks", "rows per block"),
        Assign("tiles", "(n + rows - 1) // rows"),
        loop("t", pypto("loop", "blocks * tiles", name='"row_tiles"', unroll_list=items("1")),
             Assign("o, i", "t // tiles, t % tiles"),
             Assign("outer, inner", "o // heads, o % heads"),
             *_tile_start(whole), Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")), *body),
    ]


def _tile_start(whole: bool, valid_cols: str = "cols") -> list[Stmt]:
    """A row tile's first row ``r`` of ``n`` and, unless ``whole`` (tiles of at most n rows, the
    last one ending at the last row), its ``valid`` shape."""
    if whole:
        return [Assign("r", "(n - rows).min(i * rows)", "a whole tile: the last one overlaps its predecessor")]
    return [Assign("r", "i * rows"), Assign("valid", f"[(n - r).min(rows), {valid_cols}]")]


ROW_BLOCKS = copied("layout", "_row_blocks", last="_block_window")
BROADCAST_BLOCKS = copied("layout", "_broadcast_blocks", last="_result_blocks")
