"""A fused region's kernel factory: its program's statements in the row-tile loop of a PyPTO kernel
(a row reduction's over padded whole rows, else a blocked walk reading rows in place)."""

from __future__ import annotations

from torch2pypto.rules import templates
from torch2pypto.rules.kernel_ir import Assign, Do, Param, Raw, Stmt, call, items, pypto
from torch2pypto.rules.tile_program import FP32, ROWS, Program, row_tile_loop, row_tile_params, row_tile_steps, row_tile_stores


def kernel_source(name, where, program: Program, rows, vectors, outputs, factory, buffers) -> str:
    """The kernel factory's source: a row reduction's kernel, or a blocked one (:func:`_blocks_source`)."""
    if not program.reduces:
        return _blocks_source(name, where, program, rows, vectors, outputs, factory, buffers)
    # a loop iteration is one task: whole rows (a reduction's) leave the unified buffer few rows of
    # a wide tile, so a task takes max_rows (the launch's spread) in tiles of `rows`, not 1024 tasks at 4096x4096
    params = [*row_tile_params(program, rows, vectors),
              *(templates.tensor(f"{o.name}_out", items("pypto.DYNAMIC", "width" if o.value.role == ROWS else "1"), o.value.dtype)
                for o in outputs)]
    tile_dtypes = ", ".join([*(f for f in factory if f.endswith("_dtype") or f.startswith("promoted_dtype")), FP32])
    prelude = [Assign("rows, tile_cols", call("_tile_shape", "width", "max_rows", str(buffers), f"({tile_dtypes})", whole_rows="True")),
               Assign("count", "cols", "the real cols a row reduction counts"),
               Raw("".join(s for s in dict.fromkeys(program.setup) if s))]
    body = row_tile_loop(rows[0].name, Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")),
                         *row_tile_steps(program, rows, vectors, program.whole), *row_tile_stores(outputs),
                         count="n", whole=program.whole, comment="a task: max_rows rows, a tile: rows")
    doc = f"{where}: {' + '.join(dict.fromkeys(program.pypto))} on [rows, cols] tiles, one launch."
    return templates.factory(name, factory, doc, prelude, params, body)


def _blocks_source(name, where, program: Program, rows, vectors, outputs, factory, buffers) -> str:
    """The kernel of a region without a row reduction: its result, [blocks * n, cols], is walked
    in the row tiles of every block (templates.block_walk) and each rows operand read in place where its map
    places the block (templates.ROW_BLOCKS)."""
    tile_dtypes = [f for f in factory if f.endswith("_dtype") or f.startswith("promoted_dtype")]
    prelude, params, body = block_group(program, rows, vectors, outputs, tile_dtypes, buffers, "max_rows")
    doc = f"{where}: {' + '.join(dict.fromkeys(program.pypto))} on [rows, cols] tiles of [blocks * n, cols], one launch."
    return templates.factory(name, factory, doc, prelude, params, body)


def block_group(program: Program, rows, vectors, outputs, dtypes, buffers, max_rows: str) -> tuple[list[Stmt], list[Param], list[Stmt]]:
    """A blocked kernel's pieces for one program's rows: the factory's statements (its tile shape
    for ``max_rows``, a factory expression, and tiles of ``dtypes``), the kernel's parameters and
    its loops."""
    params = [*(templates.tensor(p.name, items("pypto.DYNAMIC", f"{p.name}_width"), program.dtype_symbol(p)) for p in rows),
              *(templates.tensor(p.name, items("1", "cols"), program.dtype_symbol(p)) for p in vectors),
              *(templates.tensor(f"{o.name}_out", items("pypto.DYNAMIC", "cols"), o.value.dtype) for o in outputs)]
    body = [*templates.block_views([p.name for p in rows], program.whole, program.narrow()),
            *(Assign(f"{p.name}_tile", pypto("view", p.name, items("1", "cols"), items("0", "0"), valid_shape=items("1", "cols")))
              for p in vectors),
            Raw("".join(program.body)),
            *templates.block_assembles([(o.value.text, f"{o.name}_out") for o in outputs])]
    tile = call("_tile_shape", "cols", max_rows, str(buffers), f"({', '.join([*dtypes, FP32])})", split_cols="True")
    prelude = [Assign("rows, tile_cols", tile), Raw("".join(s for s in dict.fromkeys(program.setup) if s)),
               *templates.block_maps([p.name for p in rows])]
    return prelude, params, templates.block_walk(f"{outputs[0].name}_out", body, program.whole)
