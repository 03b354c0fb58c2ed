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

from torch2pypto.rules.codegen import Definition
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
    row ([1, cols]) that broadcast over the tile's rows (a norm's weight).
    """
    fp32 = any(a.step.fp32 for a in program)
    fixed = program[-1].step.result if program else None
    result = program[-1].target if program else f"{inputs[0]}_tile"
    whole = whole_tiles(program)
    masked = reduces(program)
    width = "width" if masked else "cols"
    whole_rows = whole_rows or masked
    valid = "" if whole and not masked else ", valid_shape=valid"
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


REDUCTION_ROWS = Definition(
    "_reduction_rows",
    '''\
def _reduced_dims(t, dim):
    """The dims a reduction over `dim` (an int, a sequence, or None and () for all) reduces, sorted."""
    rank = max(t.dim(), 1)
    dims = range(rank) if dim is None or dim in ((), []) else [dim] if isinstance(dim, int) else dim
    if any(not -rank <= d < rank for d in dims):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    if len({d % rank for d in dims}) < len(dims):
        raise RuntimeError(f"dim {dim} lists a dim more than once")
    return sorted({d % rank for d in dims})


def _reduced_count(t, dim):
    """How many elements a reduction over `dim` reduces into each result."""
    return math.prod(t.shape[d] for d in _reduced_dims(t, dim) if d < t.dim())


def _reduction_rows(t, dim, keepdim, identity):
    """`t` as [rows, cols] with the dims `dim` last, its real cols, and the shape torch gives the result.

    The cols are padded with the reducer's `identity` to 32 bytes: PyPTO reduces only 32-byte
    aligned tile rows; kernels read the real cols only (valid_shape), the pad never counts.
    """
    dims = _reduced_dims(t, dim)
    kept = [d for d in range(t.dim()) if d not in dims]
    cols = _reduced_count(t, dim)
    rows = t.permute(*kept, *dims).reshape(-1, cols) if t.dim() else t.reshape(1, 1)
    rows = _padded_cols(rows, -cols % (32 // t.element_size()), identity)
    shape = [1 if d in dims else n for d, n in enumerate(t.shape)] if keepdim else [t.shape[d] for d in kept]
    return rows, cols, shape
''',
    ("_padded_cols",),
    imports=("math",),
)


CUBE_JIT = '@pypto.frontend.jit(pass_options={"pg_skip_partition": False})  # set either way: PyPTO keeps pass options'


def cube_kernel(name: str, doc: str, product: Apply, epilogue: Sequence[Apply], *, batched: bool, bias: bool) -> Definition:
    """A kernel factory ``name(dtype, out_dtype, k, n, rows, transposed)`` multiplying row tiles of ``a`` by ``b``.

    ``a`` is [m, k] with a dynamic m walked in tiles of ``rows`` rows (:data:`CUBE_TILES`: the
    host picks them by m); ``b`` is [k, n] (``transposed``: [n, k], read as b.mT), or
    ``batched``: a stack of them whose count splits ``a``'s rows into equal runs of m rows, one per
    matrix. ``product`` (the matmul step, ``b_trans=transposed``) computes ``result`` in FP32
    from ``a_tile`` and ``b_tile``; the ``epilogue`` steps work on it (with ``bias_tile``, [1, n]
    in FP32, given ``bias``) under vector tiles; it is stored as ``out_dtype``.
    K and N are static per compiled kernel and of any size: the cube's tiles are 32-byte aligned
    (16 elements), so the operands are read in place in tiles of k and n rounded up to 16, whose
    valid shape is the real k and n.
    """
    params = "        a: pypto.Tensor([pypto.DYNAMIC, k], dtype),\n        b: pypto.Tensor(b_shape, dtype),\n"
    if bias:
        params += "        bias: pypto.Tensor([1, n], dtype),\n"
    setup, store = cast("result", FP32, "out_dtype")
    offset = "[j * b_rows, 0]" if batched else "[0, 0]"
    body = "pypto.set_cube_tile_shapes([rows, rows], k_tiles, n_tiles)\n"
    body += "a_tile = pypto.view(a, [rows, k16], [r, 0], valid_shape=[(m - i * rows).min(rows), k])\n"
    body += f"b_tile = pypto.view(b, b_tile_shape, {offset}, valid_shape=b_valid)\n"
    body += render([product]) + "pypto.set_vec_tile_shapes(vec_rows, vec_cols)\n"
    if bias:
        body += (f"bias_tile = pypto.view(bias, [1, n16], [0, 0], valid_shape=[1, n])\n"
                 f"if dtype != {FP32}:\n    bias_tile = pypto.cast(bias_tile, {FP32})\n")
    body += render(epilogue) + store + "pypto.assemble(result, [r, 0], out)\n"
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
    prelude += "k_tiles, n_tiles = _cube_tiles(k16, n16, dtype, rows)\nvec_rows, vec_cols = _tile_shape(n16, rows, 3, (pypto.DT_FP32,))\n" + setup
    params += "        out: pypto.Tensor([pypto.DYNAMIC, n], out_dtype),\n"
    kernel_body = loops + textwrap.indent(body, " " * indent)
    source = kernel_factory(name, "dtype, out_dtype, k, n, rows, transposed", doc, prelude, params, kernel_body, CUBE_JIT)
    return Definition(name, source.replace("\n\n\n", "\n\n"), ("_cube_tiles", "_tile_shape", "_annotated"))


CUBE_TILES = Definition(
    "_cube_tiles",
    '''\
# A2/A3 AI cube core buffers, and the cube tiles a kernel starts from: the best of
# scripts/kernels.py's sweep at transformer shapes
_L0A_BYTES, _L0B_BYTES, _L0C_BYTES, _L1_BYTES = 64 * 1024, 64 * 1024, 128 * 1024, 512 * 1024
_CUBE_ROWS, _CUBE_K, _CUBE_N = (16, 128), (128, 512), (256, 256)


def _cube_rows(m):
    """Rows per tile for m rows: a power of two in _CUBE_ROWS' range (decode's m=1 takes 16,
    prefill 128); m stays dynamic in each kernel, which compiles once per row tile."""
    return min(_CUBE_ROWS[1], max(_CUBE_ROWS[0], 1 << (m - 1).bit_length()))


def _cube_tiles(k, n, dtype, rows):
    """The [L0, L1] k and n cube tiles of a [rows, k] x [k, n] product (k and n multiples of
    16): the defaults cut to k and n, L0 shrunk in 16s to fit L0A/L0B/L0C, L1 a multiple of L0
    within L1."""
    size = 4 if dtype == pypto.DT_FP32 else 2
    k0, n0 = min(_CUBE_K[0], k), min(_CUBE_N[0], n)
    while n0 > 16 and rows * n0 * 4 > _L0C_BYTES:
        n0 = max(16, n0 // 32 * 16)
    while k0 > 16 and (rows * k0 * size > _L0A_BYTES or k0 * n0 * size > _L0B_BYTES):
        k0 = max(16, k0 // 32 * 16)
    k1, n1 = k0 * max(1, min(_CUBE_K[1], k) // k0), n0 * max(1, min(_CUBE_N[1], n) // n0)
    while k1 > k0 and (rows + n1) * k1 * size > _L1_BYTES:
        k1 -= k0
    return [k0, k1], [n0, n1]
''',
)


CUBE_OPERANDS = Definition(
    "_cube_operands",
    '''\
def _cube_operands(a, b, transposed=False):
    """`a` ([..., m, k]) and `b` ([..., k, n], or [n, k] if `transposed`: linear's weight) as a cube
    kernel reads them: (a, b, the result's batch dims, whether b is a stack of matrices, whether
    the kernel reads b transposed). Batch dims broadcast as torch's matmul does; with one right
    matrix, a's batch dims fold into its rows ([rows, k] by [k, n]), else a is [batches * m, k]
    and b [batches * k, n]. Each is read in place where it is row-major or b is the transpose of
    a row-major tensor (k.mT: read as k, transposed); K and N of any size (the kernel's valid
    shape). Else a copy: pypto.from_torch takes contiguous tensors only (a batch that
    broadcasts, other strides); a weight's copy is kept on it (_kept_contiguous).
    """
    m, k = a.shape[-2:]
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    stacked = math.prod(b.shape[:-2]) > 1
    if stacked:
        a, b = a.expand(*batch, m, k), b.expand(*batch, *b.shape[-2:])
    a = a.reshape(-1, k).contiguous()
    if not b.is_contiguous() and b.mT.is_contiguous():
        b, transposed = b.mT, not transposed
    elif transposed:
        b = _kept_contiguous(b)
    return a, b.reshape(-1, b.shape[-1]).contiguous(), batch, stacked, transposed


def _kept_contiguous(w):
    """Weight `w`, contiguous: itself, or a copy made once and kept on `w` until `w` changes (its
    version counter), so that no forward copies it again."""
    if w.is_contiguous():
        return w
    kept = getattr(w, "_pypto_contiguous", None)
    if kept is None or kept[0] != w._version:
        kept = w._version, w.contiguous()
        w._pypto_contiguous = kept
    return kept[1]
''',
    imports=("math",),
)


WHOLE_ROWS = Definition(
    "_fits_whole_rows",
    '''\
def _fits_whole_rows(t, dim, buffers):
    """Whether FP32 tiles of whole rows along `dim` (`buffers` of them) fit the unified buffer."""
    return (t.shape[dim] if t.dim() else 1) * 4 * buffers <= _UB_BYTES
''',
)


ROW_WIDTH = Definition(
    "_row_width",
    '''\
def _row_width(cols, dtype):
    """`cols` rounded up to 32 bytes of `dtype`: the width of the tiles a row kernel reads its rows
    in (PyPTO reduces only 32-byte aligned tile rows); their valid shape is the real cols, so
    rows of any width are read in place."""
    align = 32 // dtype.itemsize
    return -(-cols // align) * align
''',
)


ALIGNED_ROWS = Definition(
    "_aligned_rows",
    '''\
def _aligned_rows(t, cols):
    """`t` as [rows, cols], each row zero-padded to 32 bytes: PyPTO reduces only 32-byte aligned
    tile rows, and the kernel's valid shape leaves the padding out."""
    return _padded_cols(t.reshape(-1, cols), -cols % (32 // t.element_size()))

''',
    ("_padded_cols",),
)


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


INDEX = "pypto.DT_INT32"  # the index dtype kernels take: the host converts torch's int64 indices


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
    viewed one row tile at a time (``<name>_tile``), ``"index_rows"`` one of int32 indices,
    ``"index"`` a 1-D int32 index walked alongside, ``"table"`` a [n, cols] matrix of ``dtype``
    taken whole (the rows an index picks), ``"indices"`` a whole 1-D int32 index. ``tiles`` is the factory's expression for the vector
    tile ``(rows, tile_cols)``; the row count comes from the first walked input. ``outputs`` are
    ``(name, tile, dtype, cols)``: each assembles its program tile at the row tile's offset. A
    program step computing in FP32 (``fp32``: topk) gets FP32 copies of the ``dtype`` tiles and
    its results are cast back.
    """
    fp32 = any(a.step.fp32 for a in program)
    walked = [n for n, layout in inputs if layout in ("rows", "index_rows", "index")]
    params, body = "", ""
    for n, layout in inputs:
        shape = {"rows": f"[pypto.DYNAMIC, {n}_cols]", "index_rows": f"[pypto.DYNAMIC, {n}_cols]", "index": "[pypto.DYNAMIC]",
                 "table": "[pypto.DYNAMIC, cols]", "indices": f"[{n}_count]"}[layout]
        params += f"        {n}: pypto.Tensor({shape}, {'dtype' if layout in ('rows', 'table') else INDEX}),\n"
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


INDICES = Definition(
    "_kernel_indices",
    '''\
def _indexed_dim(t, dim, rank=None):
    """`dim` of tensor `t` as a dim in [0, t.dim()), or None: no such dim (torch raises), or `t`
    is not of `rank` when one is given."""
    if not isinstance(t, torch.Tensor) or not t.dim() or rank is not None and t.dim() != rank:
        return None
    return dim % t.dim() if type(dim) is int and -t.dim() <= dim < t.dim() else None


def _kernel_indices(index, count, rank=None):
    """`index` flattened to the int32 indices a kernel takes, or None: not a non-empty int32 or
    int64 tensor (of `rank`, if given), or an index outside [0, count), where torch raises and
    PyPTO would read out of bounds."""
    if not isinstance(index, torch.Tensor) or index.dtype not in (torch.int32, torch.int64) or not index.numel():
        return None
    if rank is not None and index.dim() != rank or count > 2**31 - 1:
        return None
    flat = index.reshape(-1)
    low, high = torch.stack(torch.aminmax(flat)).tolist()  # one reduction, one host sync
    if not (0 <= low and high < count):
        return None
    return flat.to(torch.int32).contiguous()
''',
)
