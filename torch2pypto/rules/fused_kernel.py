"""A fused region's kernel factory: its program's statements in the row-tile loop of a PyPTO kernel
(a row reduction's over padded whole rows, else a blocked walk reading rows in place)."""

from __future__ import annotations

import textwrap

from torch2pypto.rules import templates
from torch2pypto.rules.tile_program import FP32, ROWS, Program


def kernel_source(name, where, program: Program, rows, vectors, outputs, factory, buffers) -> str:
    """The kernel factory's source: a row reduction's kernel, or a blocked one (:func:`_blocks_source`)."""
    if not program.reduces:
        return _blocks_source(name, where, program, rows, vectors, outputs, factory, buffers)
    width = "width" if program.reduces else "cols"
    # a loop iteration is one task: whole rows (a reduction's) leave the unified buffer few rows of
    # a wide tile, so a task takes max_rows (the launch's spread) in tiles of `rows`, not 1024 tasks at 4096x4096
    block = "max_rows" if program.reduces else "rows"
    valid = "" if program.whole else ", valid_shape=valid"
    params = "".join(f"        {p.name}: pypto.Tensor([pypto.DYNAMIC, {width}], {p.name}_dtype),\n" for p in rows)
    params += "".join(f"        {p.name}: pypto.Tensor([1, {width}], {p.name}_dtype),\n" for p in vectors)
    params += "".join(
        f"        {o.name}_out: pypto.Tensor([pypto.DYNAMIC, {width if o.value.role == ROWS else 1}], {o.value.dtype}),\n" for o in outputs
    )
    body = "".join(f"{p.name}_tile = pypto.view({p.name}, [{block}, {width}], [r, 0]{valid})\n" for p in rows)
    body += "".join(f"{p.name}_tile = pypto.view({p.name}, [1, {width}], [0, 0], valid_shape=[1, cols])\n" for p in vectors)
    body += "".join(program.body)
    body += "".join(f"pypto.assemble({o.value.text}, [r, 0], {o.name}_out)\n" for o in outputs)
    if program.whole:
        start = "r = (n - rows).min(i * rows)  # a whole tile: the last one overlaps its predecessor\n"
    else:
        start = f"r = i * {block}\nvalid = [(n - r).min({block}), cols]\n"
    tile_dtypes = ", ".join([*(f for f in factory if f.endswith("_dtype") or f.startswith("promoted_dtype")), FP32])
    mode = "width, max_rows, {}, ({}), whole_rows=True" if program.reduces else "cols, max_rows, {}, ({}), split_cols=True"
    tile = f"_tile_shape({mode.format(buffers, tile_dtypes)})"
    setup = "".join(s for s in dict.fromkeys(program.setup) if s)
    setup = ("count = cols  # the real cols a row reduction counts\n" if program.reduces else "") + setup
    doc = f"{where}: {' + '.join(dict.fromkeys(program.pypto))} on [rows, cols] tiles, one launch."
    kernel_body = f'''\
        n = {rows[0].name}.shape[0]
        for i in pypto.loop((n + {block} - 1) // {block}, name="row_tiles", unroll_list=[1]):{"  # a task: max_rows rows, a tile: rows" if program.reduces else ""}
{textwrap.indent(start, " " * 12)}            pypto.set_vec_tile_shapes(rows, tile_cols)
{textwrap.indent(body, " " * 12)}'''
    source = templates.kernel_factory(name, ", ".join(factory), doc, f"rows, tile_cols = {tile}\n" + setup, params, kernel_body)
    return source.replace("\n\n\n", "\n\n")


def _blocks_source(name, where, program: Program, rows, vectors, outputs, factory, buffers) -> str:
    """The kernel of a region without a row reduction: its result, [blocks * n, cols], is walked
    in the row tiles of every block (templates.blocks_loop) and each rows operand read in place where its map
    places the block (templates.ROW_BLOCKS)."""
    tile_dtypes = [f for f in factory if f.endswith("_dtype") or f.startswith("promoted_dtype")]
    prelude, params, kernel_body = block_group(program, rows, vectors, outputs, tile_dtypes, buffers, "max_rows")
    doc = f"{where}: {' + '.join(dict.fromkeys(program.pypto))} on [rows, cols] tiles of [blocks * n, cols], one launch."
    source = templates.kernel_factory(name, ", ".join(factory), doc, prelude, params, kernel_body)
    return source.replace("\n\n\n", "\n\n")


def block_group(program: Program, rows, vectors, outputs, dtypes, buffers, max_rows: str) -> tuple[str, str, str]:
    """A blocked kernel's pieces for one program's rows: the factory's statements (its tile shape
    for ``max_rows``, a factory expression, and tiles of ``dtypes``), the kernel's parameters and
    its loops."""
    params = "".join(f"        {p.name}: pypto.Tensor([pypto.DYNAMIC, {p.name}_width], {program.dtype_symbol(p)}),\n" for p in rows)
    params += "".join(f"        {p.name}: pypto.Tensor([1, cols], {program.dtype_symbol(p)}),\n" for p in vectors)
    params += "".join(f"        {o.name}_out: pypto.Tensor([pypto.DYNAMIC, cols], {o.value.dtype}),\n" for o in outputs)
    body = templates.block_tiles([p.name for p in rows], program.whole, program.narrow())
    body += "".join(f"{p.name}_tile = pypto.view({p.name}, [1, cols], [0, 0], valid_shape=[1, cols])\n" for p in vectors)
    body += "".join(program.body)
    body += templates.block_stores([(o.value.text, f"{o.name}_out") for o in outputs], program.whole)
    tile = f"_tile_shape(cols, {max_rows}, {buffers}, ({', '.join([*dtypes, FP32])}), split_cols=True)"
    setup = "".join(s for s in dict.fromkeys(program.setup) if s) + templates.block_setup([p.name for p in rows])
    return f"rows, tile_cols = {tile}\n" + setup, params, templates.blocks_loop(f"{outputs[0].name}_out", body, program.whole)
