"""Kernel templates: load the input tiles, apply steps, store the result.

Every kernel sees its tensors as ``[rows, cols]`` matrices (the host folds leading dims), with a
dynamic row axis walked by ``pypto.loop`` in tiles of ``rows`` rows: ``pypto.view(...,
valid_shape=...)`` cuts the tail tile, ``pypto.assemble`` writes it back. Kernels are built by
``functools.cache``'d factories, one compiled kernel per dtype, width and constant.

PyPTO's quirks are handled here, once: FP32-only ops compute in FP32 between a cast in and a
cast out; BF16 <-> FP16 casts go through FP32; reductions get 32-byte aligned rows (host side,
:data:`REDUCTION_ROWS`).
"""

from __future__ import annotations

import textwrap
from typing import Sequence

from torch2pypto.rules.codegen import Definition, copied
from torch2pypto.rules.steps import Apply, Step, render

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


def whole_tiles(program: Sequence[Apply]) -> bool:
    """Whether a kernel of this program must read whole tiles only."""
    return any(a.step.op in WHOLE_TILE_OPS for a in program)


def reduces(program: Sequence[Apply]) -> bool:
    """Whether a program reduces along the row: its kernel reads whole, 32-byte aligned rows."""
    return any(a.step.reduces for a in program)


VECTOR_JIT = "@pypto.frontend.jit(pass_options=_VECTOR_PASSES)"


def kernel_factory(name: str, factory_params: str, doc: str, prelude: str, kernel_params: str, kernel_body: str, jit: str = VECTOR_JIT) -> str:
    """The source of ``name(factory_params)``, a ``functools.cache``'d factory of one jit ``kernel``.

    ``prelude``: the factory's statements before the kernel (unindented); ``kernel_params`` and
    ``kernel_body``: the kernel's parameter and statement lines, indented into it (8 spaces);
    ``jit``: its decorator line.
    """
    return f'''\
@functools.cache
def {name}({factory_params}):
    """{doc}"""
{textwrap.indent(prelude, " " * 4)}
    {jit}
    @_annotated(locals())
    def kernel(
{kernel_params}    ):
{kernel_body}
    return kernel
'''


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
    [X, n or 1, width] windows and the result written as [blocks, n, cols] (ROW_BLOCKS); the
    factory also takes ``heads`` and each input's map.
    """
    fp32 = any(a.step.fp32 for a in program)
    fixed = program[-1].step.result if program else None
    result = program[-1].target if program else f"{inputs[0]}_tile"
    whole = whole_tiles(program)
    masked = reduces(program)
    width = "width" if masked else "cols"
    whole_rows = whole_rows or masked
    valid = "" if whole and not masked else ", valid_shape=valid"
    blocked = blocked and not masked
    if blocked:
        body = block_tiles(inputs, whole)
    else:
        body = "".join(f"{i}_tile = pypto.view({i}, [rows, {width}], [r, 0]{valid})\n" for i in inputs)
    body += "".join(f"{i}_tile = pypto.view({i}, [1, cols], [0, 0], valid_shape=[1, {valid_cols}])\n" for i in row_inputs)
    body += "".join(f"{v}_tile = pypto.view({v}, [1, width], [0, 0], valid_shape=[1, cols])\n" for v in vectors)
    setup = ""
    if fp32:
        body += f"if {in_dtype} != {FP32}:  # FP32-only ops: compute in FP32\n" + "".join(
            f"    {i}_tile = pypto.cast({i}_tile, {FP32})\n" for i in (*inputs, *vectors) if i not in masks
        )
    body += render(program)
    if fixed is None:
        setup, store = cast(result, FP32 if fp32 else in_dtype, out_dtype)
        body += store
    for output, tile in also:
        more, store = cast(tile, FP32 if fp32 else in_dtype, in_dtype)
        setup += more
        body += store + f"pypto.assemble({tile}, [r, 0], {output})\n"
    params = "".join(f"        {i}: pypto.Tensor([pypto.DYNAMIC, cols], {BOOL if i in masks else in_dtype}),\n" for i in inputs)
    params += "".join(f"        {i}: pypto.Tensor([1, cols], {FP32}),\n" for i in row_inputs)
    params += "".join(f"        {v}: pypto.Tensor([1, cols], {in_dtype}),\n" for v in vectors)
    params += "".join(f"        {o}: pypto.Tensor([pypto.DYNAMIC, {out_cols}], {in_dtype}),\n" for o, _ in also)
    if whole:  # tiles of at most n rows (WHOLE_SPREAD_ROWS); the last tile ends at the last row
        start = " " * 12 + "r = (n - rows).min(i * rows)  # a whole tile: the last one overlaps its predecessor\n"
        if masked:
            start += " " * 12 + "valid = [rows, cols]\n"
    else:
        start = " " * 12 + "r = i * rows\n" + " " * 12 + f"valid = [(n - r).min(rows), {valid_cols}]\n"
    dtypes = _dtypes(in_dtype, out_dtype, *([FP32] if fp32 else []))
    # a row splits into column tiles only where no step works along it
    mode = ", whole_rows=True" if whole_rows else "" if any(dict(a.step.keywords).get("dim") for a in program) else ", split_cols=True"
    prelude = f'rows, tile_cols = _tile_shape({width if whole_rows else "cols"}, max_rows, {buffers}, {dtypes}{mode})\n' + setup
    if blocked:
        params = "".join(f"        {i}: pypto.Tensor([pypto.DYNAMIC, pypto.DYNAMIC, {i}_width], {BOOL if i in masks else in_dtype}),\n"
                         for i in inputs)
        params += f"        out: pypto.Tensor([pypto.DYNAMIC, pypto.DYNAMIC, cols], {out_dtype}),\n"
        kernel_body = blocks_loop("out", body + block_stores([(result, "out")], whole), whole)
        source = kernel_factory(name, ", ".join([factory_params, "heads", *(f"{i}_map" for i in inputs), "max_rows"]), doc,
                                prelude + block_setup(inputs), params, kernel_body)
        return Definition(name, source.replace("\n\n\n", "\n\n"), ("_tile_shape", "_annotated"))
    params += f"        out: pypto.Tensor([pypto.DYNAMIC, {out_cols}], {out_dtype}),\n"
    kernel_body = f'''\
        n = {inputs[0]}.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
{start}            pypto.set_vec_tile_shapes(rows, tile_cols)
{textwrap.indent(body, " " * 12)}            pypto.assemble({result}, [r, 0], out)
'''
    source = kernel_factory(name, f"{factory_params}, max_rows", doc, prelude, params, kernel_body)
    return Definition(name, source, ("_tile_shape", "_annotated"))


def scan_kernel(name: str, doc: str, program: Sequence[Apply]) -> Definition:
    """A kernel factory scanning the rows of ``x`` along its cols, in column blocks of one tile.

    ``program`` scans the block ``x_tile``; each block then adds the carry, the last column of
    the block before it, so rows of any width scan (block + carry, the blocks unrolled).
    """
    fp32 = any(a.step.fp32 for a in program)
    result = program[-1].target
    load = "x_tile = pypto.view(x, [rows, block], [r, b * block], valid_shape=[(n - r).min(rows), min(block, cols - b * block)])\n"
    if fp32:
        load += f"if dtype != {FP32}:  # FP32-only ops: compute in FP32\n    x_tile = pypto.cast(x_tile, {FP32})\n"
    setup, store = cast(result, FP32 if fp32 else "dtype", "out_dtype")
    body = (load + render(program)
            + f"if b > 0:\n    {result} = pypto.add({result}, carry)\n"
            + f"carry = pypto.view({result}, [rows, 1], [0, block - 1])  # the running total\n"
            + store + f"pypto.assemble({result}, [r, b * block], out)\n")
    prelude = f'''\
block = min(cols, {SCAN_BLOCK})  # pypto.cumsum transposes its tile: wider blocks overflow the UB
# pypto.cumsum's transposes take 4 live tiles, 16 of an FP32 input (scripts/tiles.csv: larger fail)
rows, _ = _tile_shape(block, max_rows, 16 if dtype == {FP32} else 4, {_dtypes("dtype", "out_dtype", *([FP32] if fp32 else []))}, whole_rows=True)
blocks = (cols + block - 1) // block
{setup}'''
    params = "        x: pypto.Tensor([pypto.DYNAMIC, cols], dtype),\n        out: pypto.Tensor([pypto.DYNAMIC, cols], out_dtype),\n"
    kernel_body = f'''\
        n = x.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
            r = i * rows
            pypto.set_vec_tile_shapes(rows, block)
            for b in range(blocks):  # unrolled
{textwrap.indent(body, " " * 16)}'''
    source = kernel_factory(name, "dtype, out_dtype, cols, max_rows", doc, prelude, params, kernel_body)
    return Definition(name, source.replace("\n\n\n", "\n\n"), ("_tile_shape", "_annotated"))


def _dtypes(*dtypes: str) -> str:
    """A kernel's tile dtypes as the tuple _tile_shape takes."""
    unique = list(dict.fromkeys(dtypes))
    return f"({', '.join(unique)}{',' if len(unique) == 1 else ''})"


def cast(var: str, src: str, dst: str) -> tuple[str, str]:
    """Factory setup and kernel statements casting tile ``var`` from dtype ``src`` to ``dst``.

    BF16 and FP16 have no direct cast in PyPTO and go through FP32; a cast to the same dtype is
    skipped when the kernel is parsed.
    """
    if src == dst:
        return "", ""
    cast = f"if {src} != {dst}:\n    {var} = pypto.cast({var}, {dst})\n"
    if FP32 in (src, dst):
        return "", cast
    setup = f"{var}_via_fp32 = {{{src}, {dst}}} == {{pypto.DT_BF16, pypto.DT_FP16}}\n"
    return setup, f"if {var}_via_fp32:\n    {var} = pypto.cast({var}, {FP32})\n" + cast


REDUCTION_ROWS = copied("layout", "_reduction_rows", "_reduced_dims")


CUBE_JIT = '@pypto.frontend.jit(pass_options={"pg_skip_partition": False})  # set either way: PyPTO keeps pass options'


def cube_kernel(
    name: str, doc: str, product: Apply, epilogue: Sequence[Apply], *, batched: bool, bias: bool,
    others: Sequence[str] = (), constants: Sequence[str] = (), rounded: bool = False, tail: str = "",
) -> Definition:
    """A kernel factory ``name(dtype, out_dtype, k, n, rows, transposed)`` multiplying row tiles of ``a`` by ``b``.

    ``a`` is [m, k] with a dynamic m walked in tiles of ``rows`` rows (:data:`CUBE_TILES`: the
    host picks them by m); ``b`` is [k, n] (``transposed``: [n, k], read as b.mT), or
    ``batched``: a stack of them whose count splits ``a``'s rows into equal runs of m rows, one per
    matrix. ``product`` (the matmul step, ``b_trans=transposed``) computes ``result`` in FP32
    from ``a_tile`` and ``b_tile``; the ``epilogue`` steps work on it (with ``bias_tile``, [1, n]
    in FP32, given ``bias``) under vector tiles; it is stored as ``out_dtype``. An epilogue may also
    read ``others`` (``<name>_tile``: row tiles of [m, n] inputs of ``dtype``, in FP32) and
    ``constants`` (further factory parameters: Python numbers); ``rounded``: the product (plus
    the bias: the epilogue's first step, given ``bias``) is rounded to ``dtype`` before the epilogue, where
    torch's linear rounds its result; ``tail``: statements on ``result`` after the epilogue steps (an
    activation's).
    K and N are static per compiled kernel and of any size: the cube's tiles are 32-byte aligned
    (16 elements), so the operands are read in place in tiles of k and n rounded up to 16, whose
    valid shape is the real k and n.
    """
    params = "        a: pypto.Tensor([pypto.DYNAMIC, k], dtype),\n        b: pypto.Tensor(b_shape, dtype),\n"
    if bias:
        params += "        bias: pypto.Tensor([1, n], dtype),\n"
    params += "".join(f"        {o}: pypto.Tensor([pypto.DYNAMIC, n], dtype),\n" for o in others)
    setup, store = cast("result", FP32, "out_dtype")
    offset = "[j * b_rows, 0]" if batched else "[0, 0]"
    body = "pypto.set_cube_tile_shapes([rows, rows], k_tiles, n_tiles)\n"
    body += "a_tile = pypto.view(a, [rows, k16], [r, 0], valid_shape=[(m - i * rows).min(rows), k])\n"
    body += f"b_tile = pypto.view(b, b_tile_shape, {offset}, valid_shape=b_valid)\n"
    body += render([product]) + "pypto.set_vec_tile_shapes(vec_rows, vec_cols)\n"
    if bias:
        body += (f"bias_tile = pypto.view(bias, [1, n16], [0, 0], valid_shape=[1, n])\n"
                 f"if dtype != {FP32}:\n    bias_tile = pypto.cast(bias_tile, {FP32})\n")
    if rounded:
        body += render(epilogue[:1]) if bias else ""
        epilogue = epilogue[1:] if bias else epilogue
        body += f"if dtype != {FP32}:  # torch's linear rounds its result to its dtype\n    result = pypto.cast(pypto.cast(result, dtype), {FP32})\n"
    for o in others:
        body += (f"{o}_tile = pypto.view({o}, [rows, n16], [r, 0], valid_shape=[(m - i * rows).min(rows), n])\n"
                 f"if dtype != {FP32}:\n    {o}_tile = pypto.cast({o}_tile, {FP32})\n")
    body += render(epilogue) + tail + store + "pypto.assemble(result, [r, 0], out)\n"
    if batched:
        loops = (
            "        m = a.shape[0] // (b.shape[0] // b_rows)  # rows per right matrix\n"
            "        for j in pypto.loop(b.shape[0] // b_rows, name=\"matrices\"):\n"
            "            for i in pypto.loop((m + rows - 1) // rows, name=\"row_tiles\", unroll_list=[1]):\n"
            "                r = j * m + i * rows\n"
        )
        indent = 16
    else:
        loops = (
            "        m = a.shape[0]\n"
            "        for i in pypto.loop((m + rows - 1) // rows, name=\"row_tiles\", unroll_list=[1]):\n"
            "            r = i * rows\n"
        )
        indent = 12
    prelude = (
        "k16, n16 = -(-k // 16) * 16, -(-n // 16) * 16  # the cube's 32-byte aligned tiles over the real k and n\n"
        "b_rows, b_valid = (n, [n, k]) if transposed else (k, [k, n])\n"
        "b_tile_shape = [n16, k16] if transposed else [k16, n16]\n"
        + ("b_shape = [pypto.DYNAMIC, b_valid[1]]  # the matrices stacked\n" if batched else "b_shape = b_valid\n")
    )
    prelude += f"k_tiles, n_tiles = _cube_tiles(k16, n16, dtype, rows)\nvec_rows, vec_cols = _tile_shape(n16, rows, {3 + len(others)}, (pypto.DT_FP32,))\n" + setup
    params += "        out: pypto.Tensor([pypto.DYNAMIC, n], out_dtype),\n"
    kernel_body = loops + textwrap.indent(body, " " * indent)
    factory = ", ".join(["dtype, out_dtype, k, n, rows, transposed", *constants])
    source = kernel_factory(name, factory, doc, prelude, params, kernel_body, CUBE_JIT)
    return Definition(name, source.replace("\n\n\n", "\n\n"), ("_cube_tiles", "_tile_shape", "_annotated"))


def gated_kernel(name: str, doc: str, activation: str, *, bias: bool) -> Definition:
    """A kernel factory ``name(dtype, k, n, rows)`` computing ``act(a @ wg.T + bg) * (a @ wu.T + bu)``
    of row tiles of ``a`` ([m, k], m dynamic, in tiles of ``rows`` rows: :data:`CUBE_TILES`).

    Each row tile is read once and multiplied by both weights ([n, k], read transposed) on the cube,
    in FP32; the vector epilogue adds the biases (given ``bias``: ``bg``, ``bu`` [1, n]), rounds each
    projection to ``dtype`` where torch's linear rounds it, applies ``activation`` (the FP32 statements
    on the tile ``gate``, rounded after as torch's activation rounds) and multiplies. K and N are
    static and of any size, as in :func:`cube_kernel`.
    """
    params = ("        a: pypto.Tensor([pypto.DYNAMIC, k], dtype),\n        wg: pypto.Tensor([n, k], dtype),\n"
              "        wu: pypto.Tensor([n, k], dtype),\n")
    if bias:
        params += "        bg: pypto.Tensor([1, n], dtype),\n        bu: pypto.Tensor([1, n], dtype),\n"
    params += "        out: pypto.Tensor([pypto.DYNAMIC, n], dtype),\n"
    matmul = Step("matmul", (("b_trans", "True"),))
    body = "pypto.set_cube_tile_shapes([rows, rows], k_tiles, n_tiles)\n"
    body += "a_tile = pypto.view(a, [rows, k16], [r, 0], valid_shape=[(m - r).min(rows), k])\n"
    body += "".join(f"{w}_tile = pypto.view({w}, [n16, k16], [0, 0], valid_shape=[n, k])\n" for w in ("wg", "wu"))
    body += matmul.render("gate", ("a_tile", "wg_tile", FP32)) + matmul.render("up", ("a_tile", "wu_tile", FP32))
    body += "pypto.set_vec_tile_shapes(vec_rows, vec_cols)\n"
    if bias:
        for b, tile in (("bg", "gate"), ("bu", "up")):
            body += (f"{b}_tile = pypto.view({b}, [1, n16], [0, 0], valid_shape=[1, n])\n"
                     f"if dtype != {FP32}:\n    {b}_tile = pypto.cast({b}_tile, {FP32})\n"
                     f"{tile} = pypto.add({tile}, {b}_tile)\n")
    rounded = "".join(f"    {t} = pypto.cast(pypto.cast({t}, dtype), {FP32})\n" for t in ("gate", "up"))
    body += f"if dtype != {FP32}:  # torch's linear rounds each projection to its dtype\n{rounded}"
    body += activation
    body += f"if dtype != {FP32}:  # and its activation its result\n    gate = pypto.cast(pypto.cast(gate, dtype), {FP32})\n"
    setup, store = cast("result", FP32, "dtype")
    body += "result = pypto.mul(gate, up)\n" + store + "pypto.assemble(result, [r, 0], out)\n"
    loops = (
        "        m = a.shape[0]\n"
        "        for i in pypto.loop((m + rows - 1) // rows, name=\"row_tiles\", unroll_list=[1]):\n"
        "            r = i * rows\n"
    )
    prelude = (
        "k16, n16 = -(-k // 16) * 16, -(-n // 16) * 16  # the cube's 32-byte aligned tiles over the real k and n\n"
        "k_tiles, n_tiles = _cube_tiles(k16, n16, dtype, rows)\n"
        "vec_rows, vec_cols = _tile_shape(n16, rows, 4, (pypto.DT_FP32,))  # gate, up and two temporaries\n" + setup
    )
    source = kernel_factory(name, "dtype, k, n, rows", doc, prelude, params, loops + textwrap.indent(body, " " * 12), CUBE_JIT)
    return Definition(name, source.replace("\n\n\n", "\n\n"), ("_cube_tiles", "_tile_shape", "_annotated"))


def linears_kernel(name: str, count: int, *, bias: bool) -> Definition:
    """A kernel factory ``name(dtype, k, n0, .., rows)`` computing ``count`` projections of row tiles
    of ``a`` ([m, k], m dynamic, in tiles of ``rows`` rows: :data:`CUBE_TILES`): ``a @ wj.T (+ bj)``
    into ``outj``, each weight [nj, k] (read transposed) its own N.

    Each row tile is read once and multiplied by every weight on the cube, in FP32; the vector
    epilogue adds each bias (given ``bias``: ``bj`` [1, nj]) and rounds to ``dtype`` once, as torch's
    linear rounds. K and each N are static and of any size, as in :func:`cube_kernel`.
    """
    ids = range(count)
    params = "        a: pypto.Tensor([pypto.DYNAMIC, k], dtype),\n"
    params += "".join(f"        w{j}: pypto.Tensor([n{j}, k], dtype),\n" for j in ids)
    params += "".join(f"        b{j}: pypto.Tensor([1, n{j}], dtype),\n" for j in ids) if bias else ""
    params += "".join(f"        out{j}: pypto.Tensor([pypto.DYNAMIC, n{j}], dtype),\n" for j in ids)
    matmul = Step("matmul", (("b_trans", "True"),))
    setup, store = cast("result", FP32, "dtype")
    body = "a_tile = pypto.view(a, [rows, k16], [r, 0], valid_shape=[(m - r).min(rows), k])\n"
    for j in ids:
        body += (f"pypto.set_cube_tile_shapes([rows, rows], k_tiles{j}, n_tiles{j})\n"
                 f"w{j}_tile = pypto.view(w{j}, [n{j}_16, k16], [0, 0], valid_shape=[n{j}, k])\n"
                 + matmul.render("result", ("a_tile", f"w{j}_tile", FP32))
                 + f"pypto.set_vec_tile_shapes(vec_rows{j}, vec_cols{j})\n")
        if bias:
            body += (f"b{j}_tile = pypto.view(b{j}, [1, n{j}_16], [0, 0], valid_shape=[1, n{j}])\n"
                     f"if dtype != {FP32}:\n    b{j}_tile = pypto.cast(b{j}_tile, {FP32})\n"
                     f"result = pypto.add(result, b{j}_tile)\n")
        body += store + f"pypto.assemble(result, [r, 0], out{j})\n"
    loops = (
        "        m = a.shape[0]\n"
        "        for i in pypto.loop((m + rows - 1) // rows, name=\"row_tiles\", unroll_list=[1]):\n"
        "            r = i * rows\n"
    )
    prelude = "k16 = -(-k // 16) * 16  # the cube's 32-byte aligned tiles over the real k and each n\n"
    for j in ids:
        prelude += (f"n{j}_16 = -(-n{j} // 16) * 16\n"
                    f"k_tiles{j}, n_tiles{j} = _cube_tiles(k16, n{j}_16, dtype, rows)\n"
                    f"vec_rows{j}, vec_cols{j} = _tile_shape(n{j}_16, rows, 3, (pypto.DT_FP32,))\n")
    prelude += setup
    factory = ", ".join(["dtype", "k", *(f"n{j}" for j in ids), "rows"])
    source = kernel_factory(name, factory, _linears_doc(count, bias), prelude, params, loops + textwrap.indent(body, " " * 12), CUBE_JIT)
    return Definition(name, source.replace("\n\n\n", "\n\n"), ("_cube_tiles", "_tile_shape", "_annotated"))


def _linears_doc(count: int, bias: bool) -> str:
    terms = ", ".join(f"a @ w{j}.T{f' + b{j}' if bias else ''}" for j in range(count))
    return f"{terms}: {count} projections of one read of a's row tiles."


CUBE_TILES = copied("tiles", "_cube_tiles", "_L0A_BYTES")


CUBE_OPERANDS = copied("operands", "_cube_operands", last="_kept_contiguous")


WHOLE_ROWS = copied("layout", "_fits_whole_rows")


ROW_WIDTH = copied("layout", "_row_width")


ALIGNED_ROWS = copied("layout", "_aligned_rows")


def block_setup(names: Sequence[str]) -> str:
    """A blocked kernel factory's statements: each operand's map unpacked (ROW_BLOCKS), and the
    last dim of its [1, rows, cols] tiles, which PyPTO wants spanning 32-byte blocks."""
    return ("tile_cols = -(-tile_cols // 32) * 32  # reshaped tiles' last dim spans 32-byte blocks (bool's too)\n"
            + "".join(f"{n}_width, {n}_span, {n}_xo, {n}_xh, {n}_co, {n}_ch, {n}_c0, {n}_step = {n}_map\n" for n in names))


def block_tiles(names: Sequence[str], whole: bool) -> str:
    """Kernel statements giving each of ``names`` (a [X, n or 1, width] window, ROW_BLOCKS) its
    [rows, cols] tile of block ``o``: rows r.. of it, its one row spread over the tile's rows, a
    column (span 1) spread along them."""
    valid = "" if whole else ", valid_shape=valid"
    body = ""
    for n in names:
        at = f"outer * {n}_xo + inner * {n}_xh, {{}}, outer * {n}_co + inner * {n}_ch + {n}_c0"
        rows_valid = f", valid_shape=[1, valid[0], {n}_span]" if valid else ""
        tile_valid = f", valid_shape=[valid[0], {n}_span]" if valid else ""
        body += (f"if {n}_step:\n"
                 f"    {n}_tile = pypto.reshape(pypto.view({n}, [1, rows, {n}_span], [{at.format('r')}]{rows_valid}), [rows, {n}_span]{tile_valid})\n"
                 f"    if {n}_span != cols:  # a column: spread along the rows on chip\n"
                 f"        {n}_tile = pypto.expand_clone({n}_tile, [rows, cols]{valid})\n"
                 f"else:  # one row for the block's rows (a broadcast): read once, spread on chip\n"
                 f"    {n}_tile = pypto.reshape(pypto.view({n}, [1, 1, {n}_span], [{at.format('0')}]), [1, {n}_span])\n"
                 f"    if {n}_span != cols:\n"
                 f"        {n}_tile = pypto.expand_clone({n}_tile, [1, cols])\n"
                 f"    {n}_tile = pypto.expand_clone({n}_tile, [rows, cols]{valid})\n")
    return body


def block_stores(results: Sequence[tuple[str, str]], whole: bool) -> str:
    """Kernel statements writing each (tile, output) into rows r.. of the output's block ``o``."""
    valid = "" if whole else ", valid_shape=[1, valid[0], cols]"
    return "pypto.set_vec_tile_shapes(1, rows, tile_cols)\n" + "".join(
        f"pypto.assemble(pypto.reshape({tile}, [1, rows, cols]{valid}), [o, r, 0], {out})\n" for tile, out in results)


def blocks_loop(out: str, body: str, whole: bool) -> str:
    """A blocked kernel's loops: the blocks of ``out`` ([blocks, n, cols]), each in row tiles."""
    if whole:  # tiles of at most n rows; the last tile ends at the last row
        start = "r = (n - rows).min(i * rows)  # a whole tile: the last one overlaps its predecessor\n"
    else:
        start = "r = i * rows\nvalid = [(n - r).min(rows), cols]\n"
    return f'''\
        blocks, n = {out}.shape[0], {out}.shape[1]
        for o in pypto.loop(blocks, name="blocks"):
            outer, inner = o // heads, o % heads
            for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
{textwrap.indent(start, " " * 16)}                pypto.set_vec_tile_shapes(rows, tile_cols)
{textwrap.indent(body, " " * 16)}'''


ROW_BLOCKS = copied("layout", "_row_blocks", last="_block_window")
BROADCAST_BLOCKS = copied("layout", "_broadcast_blocks", last="_result_blocks")


def assemble_kernel(name: str, inputs: int) -> Definition:
    """A kernel factory ``name(dtype, cols, width, places, fills=(), value=0.0)`` copying column
    runs of ``inputs`` [rows, cols[i]] matrices into a [rows, width] output, row tile by row tile.

    ``places[i]`` lists input i's runs as (source col, size, output col); ``fills`` lists the
    output's other runs as (output col, size), set to ``value``. Runs may start at any column and
    be any width: view and assemble copy them as they are, only the tile's width is 32-byte
    aligned (PyPTO refuses other vector tiles). pypto.full
    makes FP32 tiles only: a fill of another dtype is cast.
    """
    params = "".join(f"        x{i}: pypto.Tensor([pypto.DYNAMIC, cols[{i}]], dtype),\n" for i in range(inputs))
    copies = [
        f"            for p in range(len(places[{i}])):  # unrolled\n"
        f"                src, size, dst = places[{i}][p]\n"
        f"                piece = pypto.view(x{i}, [rows, size], [r, src], valid_shape=[valid, size])\n"
        f"                pypto.assemble(piece, [r, dst], out)\n"
        for i in range(inputs)
    ]
    if inputs == 1:  # a pad may crop its one input away: the parser refuses a loop over nothing
        copies = [f"            if len(places[0]) > 0:\n{textwrap.indent(copies[0], '    ')}"]
    _, store = cast("piece", FP32, "dtype")
    fill = (
        "            for p in range(len(fills)):  # unrolled\n"
        "                dst, size = fills[p]\n"
        f"                piece = pypto.full([rows, size], value, {FP32}, valid_shape=[valid, size])\n"
        f"{textwrap.indent(store, ' ' * 16)}"
        "                pypto.assemble(piece, [r, dst], out)\n"
    )
    copies = "".join(copies)
    setup, _ = cast("piece", FP32, "dtype")
    doc = f"Column runs of {inputs} [rows, cols[i]] input{'s' if inputs > 1 else ''} (places) and fills assembled into [rows, width]."
    prelude = f'''\
widest = max(run[1] for runs in (*places, fills) for run in runs)  # (src, size, dst), (dst, size)
rows, tile_cols = _tile_shape(-(-widest // 16) * 16, 64, 2, (dtype, pypto.DT_FP32))  # tiles 32-byte aligned: runs need not be
{setup}'''
    params += "        out: pypto.Tensor([pypto.DYNAMIC, width], dtype),\n"
    kernel_body = f'''\
        n = x0.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
            r = i * rows
            valid = (n - r).min(rows)
            pypto.set_vec_tile_shapes(rows, tile_cols)
{copies}            if len(fills) > 0:  # the parser refuses a loop over nothing
{textwrap.indent(fill, "    ")}'''
    source = kernel_factory(name, "dtype, cols, width, places, fills=(), value=0.0", doc, prelude, params, kernel_body)
    return Definition(name, source.replace("\n\n\n", "\n\n"), ("_tile_shape", "_annotated"))


def triangle_kernel(name: str, doc: str, keep: Step) -> Definition:
    """A kernel factory ``name(dtype, h, w, diagonal)`` keeping one triangle of each [h, w] matrix.

    pypto.tril/triu fail to compile in 0.2.0 (``F7A001 idx < size_``), so the triangle is a
    mask: ``offsets`` ([h, w], FP32, from the host) holds each entry's col - row, ``keep``
    compares it with ``diagonal`` and pypto.where zeroes the rest. The matrices are stacked
    rows of ``x`` ([matrices * h, w]); each is walked in row tiles.
    """
    body = (
        "x_tile = pypto.view(x, [rows, w], [m * h + r, 0], valid_shape=valid)\n"
        "offsets_tile = pypto.view(offsets, [rows, w], [r, 0], valid_shape=valid)\n"
        + keep.render("kept", ("offsets_tile", "diagonal"))
        + "result = pypto.where(kept, x_tile, 0.0)\n"
        "pypto.assemble(result, [m * h + r, 0], out)\n"
    )
    prelude = "rows, tile_cols = _tile_shape(-(-w // 16) * 16, 64, 4, (dtype,))  # 32-byte aligned tiles\n"
    params = f'''\
        x: pypto.Tensor([pypto.DYNAMIC, w], dtype),
        offsets: pypto.Tensor([h, w], {FP32}),
        out: pypto.Tensor([pypto.DYNAMIC, w], dtype),
'''
    kernel_body = f'''\
        for m in pypto.loop(x.shape[0] // h, name="matrices"):
            for i in pypto.loop((h + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
                r = i * rows
                valid = [(r * -1 + h).min(rows), w]
                pypto.set_vec_tile_shapes(rows, tile_cols)
{textwrap.indent(body, " " * 16)}'''
    source = kernel_factory(name, "dtype, h, w, diagonal", doc, prelude, params, kernel_body)
    return Definition(name, source, ("_tile_shape", "_annotated"))


def one_hot_kernel(name: str, doc: str) -> Definition:
    """A kernel factory ``name(dtype, classes)``: pypto.one_hot of row tiles of the indices ``x``
    ([n], INT64) into ``out`` ([n, classes], INT64). pypto.one_hot's tile spans the classes
    (TiledOneHot: "The numClasses and last axis of tileshape should be equal")."""
    prelude = "rows = max(1, min(64, _UB_BYTES // (8 * 3 * classes)))\n"
    params = "        x: pypto.Tensor([pypto.DYNAMIC], dtype),\n        out: pypto.Tensor([pypto.DYNAMIC, classes], dtype),\n"
    kernel_body = '''\
        n = x.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
            r = i * rows
            valid = (n - r).min(rows)
            pypto.set_vec_tile_shapes(rows)
            x_tile = pypto.view(x, [rows], [r], valid_shape=[valid])
            pypto.set_vec_tile_shapes(rows, classes)  # one_hot's tile spans the classes
            result = pypto.one_hot(x_tile, classes)
            pypto.assemble(result, [r, 0], out)
'''
    source = kernel_factory(name, "dtype, classes", doc, prelude, params, kernel_body)
    return Definition(name, source, ("_tile_shape", "_annotated", "PYPTO_LAUNCHER"))


INDEX = "pypto.DT_INT64"  # torch's index dtype: pypto.topk's INT32 indices are cast to it on the kernel


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
    params, body = "", ""
    for n, layout in inputs:
        shape = {"rows": f"[pypto.DYNAMIC, {n}_cols]", "index_rows": f"[pypto.DYNAMIC, {n}_cols]", "index": "[pypto.DYNAMIC]",
                 "table": "[pypto.DYNAMIC, cols]", "indices": f"[{n}_count]"}[layout]
        params += f"        {n}: pypto.Tensor({shape}, {'dtype' if layout in ('rows', 'table') else 'index_dtype'}),\n"
        if layout == "index":
            body += (f"pypto.set_vec_tile_shapes(rows)\n"
                     f"{n}_tile = pypto.view({n}, [rows], [r], valid_shape=[valid])\n")
    body += "pypto.set_vec_tile_shapes(rows, tile_cols)\n"
    for n, layout in inputs:
        if layout in ("rows", "index_rows"):
            body += f"{n}_tile = pypto.view({n}, [rows, {n}_cols], [r, 0], valid_shape=[valid, {n}_cols])\n"
            if fp32 and layout == "rows":
                body += f"if dtype != {FP32}:  # FP32-only ops: compute in FP32\n    {n}_tile = pypto.cast({n}_tile, {FP32})\n"
    body += render(program)
    setup = ""
    for out, tile, dtype, _ in outputs:
        if fp32 and dtype == "dtype":
            more, store = cast(tile, FP32, dtype)
            setup, body = setup + more, body + store
        if dtype == INDEX:  # PyPTO's indices are INT32 (A2/A3 cast INT32 to INT64)
            body += f"{tile} = pypto.cast({tile}, {INDEX})\n"
        body += f"pypto.assemble({tile}, [r, 0], {out})\n"
    params += "".join(f"        {out}: pypto.Tensor([pypto.DYNAMIC, {cols}], {dtype}),\n" for out, _, dtype, cols in outputs)
    kernel_body = f'''\
        n = {walked[0]}.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
            r = i * rows
            valid = (n - r).min(rows)
{textwrap.indent(body, " " * 12)}'''
    source = kernel_factory(name, factory_params, doc, f"rows, tile_cols = {tiles}\n" + setup, params, kernel_body)
    return Definition(name, source.replace("\n\n\n", "\n\n"), ("_tile_shape", "_annotated"))


INDEXED_DIM = copied("operands", "_indexed_dim")


def index_bounds_kernel() -> Definition:
    """The factory ``index_bounds_kernel(index_dtype, rows)`` of a kernel bounding a 1-D index
    (int64 or int32) in tiles of ``rows`` indices: each tile's least and largest, in FP32, at
    ``2 * i`` and ``2 * i + 1`` of ``bounds``, which the host reduces (the indexing wrappers' check
    that every index lies in the table, before a kernel reads by them)."""
    params = ("        index: pypto.Tensor([pypto.DYNAMIC], index_dtype),\n"
              f"        bounds: pypto.Tensor([pypto.DYNAMIC], {FP32}),\n")
    kernel_body = f'''\
        n = index.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="index_tiles", unroll_list=[1]):
            r = i * rows
            pypto.set_vec_tile_shapes(rows)
            index_tile = pypto.view(index, [rows], [r], valid_shape=[(n - r).min(rows)])
            values = pypto.cast(index_tile, {FP32})
            pypto.assemble(pypto.amin(values, 0, keepdim=True), [2 * i], bounds)
            pypto.assemble(pypto.amax(values, 0, keepdim=True), [2 * i + 1], bounds)
'''
    doc = "The least and largest of each tile of rows indices, in FP32."
    source = kernel_factory("index_bounds_kernel", "index_dtype, rows", doc, "", params, kernel_body)
    return Definition("index_bounds_kernel", source.replace("\n\n\n", "\n\n"), ("_annotated",))


INDEX_BOUNDS = index_bounds_kernel()
INDICES = copied("operands", "_kernel_indices", last="_index_bounds")


def channel_kernel(name: str, doc: str, factory_params: str, channels: Sequence[str], program: Sequence[Apply], *, buffers: int) -> Definition:
    """A kernel factory over ``x``, an [n * count, cols] matrix (the input's batch and channel
    dims folded into rows, the rest into cols), and ``channels``: [count, 1] columns of one value
    per channel (a norm's statistics, prelu's weight), read in place.

    The kernel walks each batch's channels in tiles of ``rows`` channels: the columns' tiles are
    the same rows of every batch, and broadcast along the row. The last target of ``program`` is
    the result, stored as the input's dtype.
    """
    fp32 = any(a.step.fp32 for a in program)
    valid = "valid_shape=[valid[0], 1]"
    body = "x_tile = pypto.view(x, [rows, cols], [r, 0], valid_shape=valid)\n"
    body += "".join(f"{c}_tile = pypto.view({c}, [rows, 1], [c, 0], {valid})\n" for c in channels)
    if fp32:
        body += f"if dtype != {FP32}:  # FP32-only ops: compute in FP32\n" + "".join(
            f"    {t}_tile = pypto.cast({t}_tile, {FP32})\n" for t in ("x", *channels))
    body += render(program)
    setup, store = cast(program[-1].target, FP32 if fp32 else "dtype", "dtype")
    body += store
    params = "        x: pypto.Tensor([pypto.DYNAMIC, cols], dtype),\n"
    params += "".join(f"        {c}: pypto.Tensor([count, 1], dtype),\n" for c in channels)
    params += "        out: pypto.Tensor([pypto.DYNAMIC, cols], dtype),\n"
    tiles = f"_tile_shape(cols, max_rows, {buffers}, {_dtypes('dtype', *([FP32] if fp32 else []))}, split_cols=True)"
    kernel_body = f'''\
        n = x.shape[0] // count
        for b in pypto.loop(n, name="batch", unroll_list=[1]):
            for j in pypto.loop((count + rows - 1) // rows, name="channel_tiles", unroll_list=[1]):
                c = j * rows
                r = b * count + c
                valid = [(count - c).min(rows), cols]
                pypto.set_vec_tile_shapes(rows, tile_cols)
{textwrap.indent(body, " " * 16)}                pypto.assemble({program[-1].target}, [r, 0], out)
'''
    source = kernel_factory(name, f"{factory_params}, max_rows", doc, f"rows, tile_cols = {tiles}\n" + setup, params, kernel_body)
    return Definition(name, source, ("_tile_shape", "_annotated"))
