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
from torch2pypto.rules.steps import Apply, render

FP32 = "pypto.DT_FP32"
# ops that break on a partial tile (they build full-size constants): their kernels read whole
# tiles, the last one moved back over rows already done, and the host pads inputs to MIN_ROWS
WHOLE_TILE_OPS = frozenset({"sigmoid"})
MIN_ROWS = 64  # the most rows a tile has (_tile_shape)
# scan blocks: pypto.cumsum of a [rows, 2048] FP32 tile overflows the 192 KB UB in 0.2.0 (its
# TRANSPOSE_VNCHWCONV needs 204800 bytes); [8, 1024] blocks fit
SCAN_BLOCK = 1024


def whole_tiles(program: Sequence[Apply]) -> bool:
    """Whether a kernel of this program must read whole tiles only."""
    return any(a.step.op in WHOLE_TILE_OPS for a in program)


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
) -> Definition:
    """A kernel factory over row tiles of ``inputs`` (all of dtype ``in_dtype``).

    Each input ``a`` is available to the program as the tile ``a_tile``; the program's last
    target is the result, stored as ``out_dtype`` ([rows, ``out_cols``]).
    ``valid_cols``: the columns the tiles hold data in (a reduction's real cols; the rest is
    32-byte padding). ``row_inputs``: FP32 tensors of one row, the same for every tile (an
    index row). ``also``: (output, tile) pairs, further outputs like ``out`` stored as ``in_dtype``
    (torch.max(x, dim) gives values and indices).
    """
    fp32 = any(a.step.fp32 for a in program)
    fixed = program[-1].step.result if program else None
    result = program[-1].target if program else f"{inputs[0]}_tile"
    whole = whole_tiles(program)
    valid = "" if whole else ", valid_shape=valid"
    body = "".join(f"{i}_tile = pypto.view({i}, [rows, cols], [r, 0]{valid})\n" for i in inputs)
    body += "".join(f"{i}_tile = pypto.view({i}, [1, cols], [0, 0], valid_shape=[1, {valid_cols}])\n" for i in row_inputs)
    setup = ""
    if fp32:
        body += f"if {in_dtype} != {FP32}:  # FP32-only ops: compute in FP32\n" + "".join(
            f"    {i}_tile = pypto.cast({i}_tile, {FP32})\n" for i in inputs
        )
    body += render(program)
    if fixed is None:
        setup, store = cast(result, FP32 if fp32 else in_dtype, out_dtype)
        body += store
    for output, tile in also:
        more, store = cast(tile, FP32 if fp32 else in_dtype, in_dtype)
        setup += more
        body += store + f"pypto.assemble({tile}, [r, 0], {output})\n"
    params = "".join(f"        {i}: pypto.Tensor([pypto.DYNAMIC, cols], {in_dtype}),\n" for i in inputs)
    params += "".join(f"        {i}: pypto.Tensor([1, cols], {FP32}),\n" for i in row_inputs)
    params += "".join(f"        {o}: pypto.Tensor([pypto.DYNAMIC, {out_cols}], {in_dtype}),\n" for o, _ in also)
    if whole:  # the host gives at least MIN_ROWS rows; the last tile ends at the last row
        start = " " * 12 + "r = (n - rows).min(i * rows)  # a whole tile: the last one overlaps its predecessor\n"
    else:
        start = " " * 12 + "r = i * rows\n" + " " * 12 + f"valid = [(n - r).min(rows), {valid_cols}]\n"
    source = f'''\
@functools.cache
def {name}({factory_params}):
    """{doc}"""
    rows, tile_cols = _tile_shape(cols, buffers={buffers})
{textwrap.indent(setup, " " * 4)}
    @pypto.frontend.jit()
    @_annotated(locals())
    def kernel(
{params}        out: pypto.Tensor([pypto.DYNAMIC, {out_cols}], {out_dtype}),
    ):
        n = {inputs[0]}.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
{start}            pypto.set_vec_tile_shapes(rows, tile_cols)
{textwrap.indent(body, " " * 12)}            pypto.assemble({result}, [r, 0], out)

    return kernel
'''
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
    source = f'''\
@functools.cache
def {name}(dtype, out_dtype, cols):
    """{doc}"""
    block = min(cols, {SCAN_BLOCK})  # pypto.cumsum transposes its tile: wider blocks overflow the UB
    rows = min(64, _TILE_BYTES // (4 * block))
    blocks = (cols + block - 1) // block
{textwrap.indent(setup, " " * 4)}
    @pypto.frontend.jit()
    @_annotated(locals())
    def kernel(
        x: pypto.Tensor([pypto.DYNAMIC, cols], dtype),
        out: pypto.Tensor([pypto.DYNAMIC, cols], out_dtype),
    ):
        n = x.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
            r = i * rows
            pypto.set_vec_tile_shapes(rows, block)
            for b in range(blocks):  # unrolled
{textwrap.indent(body, " " * 16)}
    return kernel
'''
    return Definition(name, source.replace("\n\n\n", "\n\n"), ("_annotated", "PYPTO_LAUNCHER"))


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
    rows = torch.nn.functional.pad(rows, (0, -cols % (32 // t.element_size())), value=identity)
    shape = [1 if d in dims else n for d, n in enumerate(t.shape)] if keepdim else [t.shape[d] for d in kept]
    return rows.contiguous(), cols, shape
''',
    imports=("math",),
)
