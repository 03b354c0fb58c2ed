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
from typing import Mapping, Sequence

from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.steps import Apply, render

FP32 = "pypto.DT_FP32"
BOOL = "pypto.DT_BOOL"
# ops that break on a partial tile (they build full-size constants): their kernels read whole
# tiles, the last one moved back over rows already done, and the host pads inputs to MIN_ROWS
WHOLE_TILE_OPS = frozenset({"sigmoid"})
MIN_ROWS = 64  # the most rows a tile has (_tile_shape)


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
    whole_rows: bool = False,
    masks: Sequence[str] = (),
) -> Definition:
    """A kernel factory over row tiles of ``inputs`` (all of dtype ``in_dtype`` but the bool
    ``masks``).

    Each input ``a`` is available to the program as the tile ``a_tile``; the program's last
    target is the result, stored as ``out_dtype`` ([rows, ``out_cols``]). ``whole_rows``: a
    tile spans every column (scans), which the host checks fits (:data:`WHOLE_ROWS`).
    """
    fp32 = any(a.step.fp32 for a in program)
    fixed = program[-1].step.result if program else None
    result = program[-1].target if program else f"{inputs[0]}_tile"
    whole = whole_tiles(program)
    valid = "" if whole else ", valid_shape=valid"
    body = "".join(f"{i}_tile = pypto.view({i}, [rows, cols], [r, 0]{valid})\n" for i in inputs)
    setup = ""
    if fp32:
        body += f"if {in_dtype} != {FP32}:  # FP32-only ops: compute in FP32\n" + "".join(
            f"    {i}_tile = pypto.cast({i}_tile, {FP32})\n" for i in inputs if i not in masks
        )
    body += render(program)
    if fixed is None:
        setup, store = cast(result, FP32 if fp32 else in_dtype, out_dtype)
        body += store
    params = "".join(f"        {i}: pypto.Tensor([pypto.DYNAMIC, cols], {BOOL if i in masks else in_dtype}),\n" for i in inputs)
    if whole:  # the host gives at least MIN_ROWS rows; the last tile ends at the last row
        start = " " * 12 + "r = (n - rows).min(i * rows)  # a whole tile: the last one overlaps its predecessor\n"
    else:
        start = " " * 12 + "r = i * rows\n" + " " * 12 + "valid = [(n - r).min(rows), cols]\n"
    source = f'''\
@functools.cache
def {name}({factory_params}):
    """{doc}"""
    rows, tile_cols = {"_whole_rows_tile(cols, buffers=" if whole_rows else "_tile_shape(cols, buffers="}{buffers})
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
    return Definition(name, source, ("_fits_whole_rows" if whole_rows else "_tile_shape", "_annotated"))


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
def _reduction_rows(t, dim, keepdim, identity):
    """`t` as [rows, cols] with the dims `dim` last, and the shape torch gives a reduction's result.

    The cols are padded with the reducer's `identity` to 32 bytes: PyPTO reduces only 32-byte
    aligned tile rows.
    """
    rank = max(t.dim(), 1)
    dims = range(rank) if dim is None or dim in ((), []) else [dim] if isinstance(dim, int) else dim
    dims = sorted({d % rank for d in dims})
    kept = [d for d in range(t.dim()) if d not in dims]
    cols = math.prod(t.shape[d] for d in dims if d < t.dim())
    rows = t.permute(*kept, *dims).reshape(-1, cols) if t.dim() else t.reshape(1, 1)
    rows = torch.nn.functional.pad(rows, (0, -cols % (32 // t.element_size())), value=identity)
    shape = [1 if d in dims else n for d, n in enumerate(t.shape)] if keepdim else [t.shape[d] for d in kept]
    return rows.contiguous(), shape
''',
    imports=("math",),
)


WHOLE_ROWS = Definition(
    "_fits_whole_rows",
    '''\
def _fits_whole_rows(t, dim, buffers):
    """Whether FP32 tiles of whole rows along `dim` (`buffers` of them) fit the unified buffer."""
    return (t.shape[dim] if t.dim() else 1) * 4 * buffers <= _UB_BYTES


def _whole_rows_tile(cols, buffers):
    """Vector tile [rows, cols] of whole rows whose FP32 copies (`buffers` of them) fit the unified buffer."""
    return max(1, min(64, _TILE_BYTES // (4 * cols), _UB_BYTES // (4 * buffers * cols))), cols
''',
)
