"""Grouped kernels: several regions' programs, each on rows of its own shape, as one launch.

A grouped region (:mod:`torch2pypto.translator.engine.groups`: q's and k's RoPE) is a program per
group of rows, built in one namespace (:meth:`Program.after`: no kernel name twice). Its kernel
runs each group's blocked loop (templates.block_walk) one after the other: each group walks its
own result [blocks * n, cols] with its own blocks, heads and tile shape, reading its own window of every
rows operand (:func:`fused_kernel.block_group`); the groups share the last dim ``cols``. The wrapper
takes each source once, checks each group's operands as a region's wrapper does and that their
last dims agree, and otherwise runs the statements as written; when autograd records, the
results carry torch's gradients of those statements (``_with_torch_grads``).
"""

from __future__ import annotations

import textwrap
from typing import Sequence

from torch2pypto.rules import templates
from torch2pypto.rules.codegen import Definition, filled
from torch2pypto.rules.fused_kernel import block_group
from torch2pypto.rules.fusion import FUSED_SHAPE, fallback_definition, narrow_rows, narrow_shape, tuple_text
from torch2pypto.rules.kernel_ir import Assign, Param as KernelParam, Stmt
from torch2pypto.rules.tile_program import FP32, INDEX, ROWS, VECTOR, Output, Param, Program, Unfusible, torch_dtype
from torch2pypto.rules.widths import needed

Group = tuple[Program, Sequence[Output]]


def _suffix(k: int) -> str:
    """The wrapper's names of group ``k``: shape, shape_1, ..."""
    return f"_{k}" if k else ""


def check(programs: Sequence[Program], outputs: Sequence[Sequence[Output]]) -> None:
    """Raise :class:`Unfusible` unless the groups make one kernel: each reads rows and stores
    rows, none reduces, and the names the kernel and wrapper give a group are free."""
    taken = set().union(*(p._names for p in programs))
    for k, (program, results) in enumerate(zip(programs, outputs)):
        if program.reduces or not any(p.kind == ROWS for p in program.params):
            raise Unfusible("a group of a row reduction or of no rows operand")
        if any(o.value.role != ROWS for o in results):
            raise Unfusible("a group's result of no rows")
        names = {f"{o.name}_tiles" for o in results[:1]} | ({f"{n}{_suffix(k)}" for n in ("shape", "heads", "blocks", "n")} if k else set())
        if names & taken:
            raise Unfusible(f"{', '.join(sorted(names & taken))} is also a name of the kernel")


def definitions(wrapper: str, where: str, groups: Sequence[Group], params: Sequence[Param], torch_source: str) -> tuple[Definition, ...]:
    """The kernel factory, the torch fallback (``torch_source``: the groups' statements, with the
    wrapper's parameters' names) and the wrapper ``wrapper`` (of ``params``) of a grouped region."""
    base = wrapper.removeprefix("pypto_").rpartition("_")[0]
    kernel, fallback = f"{base}_kernel", f"_torch_{base}"
    signature = ", ".join(p.name for p in params)
    outputs = [o for _, results in groups for o in results]
    fallback_def = fallback_definition(fallback, signature, where, torch_source + f"return {', '.join(o.name for o in outputs)}\n")
    pieces = [_Group(k, program, results) for k, (program, results) in enumerate(groups)]
    dtypes = list(dict.fromkeys(s for g in pieces for s in g.dtypes))
    promoted = [s for g in pieces for s in g.promoted]
    numbers = [p for g in pieces for p in g.numbers]
    indices = [p for g in pieces for p in g.indices]
    maps = [f"{p.name}_map" for g in pieces for p in g.rows]
    factory = [*dtypes, *promoted, "cols", *(p.name for p in (*numbers, *indices)), "blocks", "heads", *maps, "max_rows"]
    pypto_ops = " + ".join(dict.fromkeys(op for program, _ in groups for op in program.pypto))
    labels = "; ".join(", ".join(o.name for o in results) for _, results in groups)
    doc = f"{where}: {pypto_ops} on [rows, cols] tiles of [blocks * n, cols], one loop per group of rows ({labels}), one launch."
    prelude, kernel_params, loops = ([node for part in parts for node in part] for parts in zip(*(g.kernel() for g in pieces)))
    source = templates.factory(kernel, factory, doc, prelude, kernel_params, loops)
    kernel_def = Definition(kernel, source, ("_tile_shape", "_annotated"))
    args = [f"_PYPTO_ALL_DTYPES[{_symbol_of(groups, s)}]" for s in dtypes] + [f"_PYPTO_ALL_DTYPES[{s}]" for s in promoted]
    args += ["cols", *(f"float({p.source})" for p in numbers), *(p.source for p in indices), f"({tuple_text(f'blocks{g.suffix}' for g in pieces)})",
             f"({tuple_text(f'heads{g.suffix}' for g in pieces)})", *maps,
             f"({tuple_text(g.spread for g in pieces)})"]
    body = "cols = shape[-1]\n" + "".join(g.host() for g in pieces)
    body += f"_launch({kernel}({', '.join(args)}), {', '.join(a for g in pieces for a in g.launched)})\n"
    body += f"return {', '.join(f'{o.name}_out.reshape(shape{g.suffix})' for g in pieces for o in g.results)}\n"
    ops = "; ".join(", ".join(program.ops) for program, _ in groups)
    doc = filled(f"{where} as one PyPTO kernel, a group of rows per statement ({labels}): {ops}.", 92, subsequent_indent="    ")
    more = filled(
        f"{pypto_ops} in torch's dtypes, rounded where torch rounds. Operands the kernel does not take (other shapes or "
        f"dtypes, groups of other last dims, off the NPU) run {fallback}; autograd gets its gradients.",
        92, initial_indent="    ", subsequent_indent="    ",
    )
    shapes = [f"shape{g.suffix}" for g in pieces]
    conditions = [*(f"{s} is not None" for s in shapes), *(f"{s}[-1] == shape[-1]" for s in shapes[1:]),
                  *dict.fromkeys(c for g in pieces for c in g.checks)]
    source = (f'def {wrapper}({signature}):\n    """{doc}\n\n{more}\n    """\n' + "".join(f"    {g.guard()}\n" for g in pieces)
              + f"    if not ({' and '.join(conditions)}):\n        return {fallback}({signature})\n"
              + f"\n    def kernel_path({signature}):\n" + textwrap.indent(body, " " * 8)
              + f"\n    return _with_torch_grads(kernel_path, {fallback}, {signature})\n")
    requires = ("_fused_shape", "_launch", kernel, fallback, "_row_blocks", "_with_torch_grads")
    return (templates.ROW_BLOCKS, kernel_def, fallback_def, FUSED_SHAPE, Definition(wrapper, source, requires))


class _Group:
    """Group ``k``'s part of the kernel and of the wrapper (whose names end in its suffix: shape_1)."""

    def __init__(self, k: int, program: Program, results: Sequence[Output]) -> None:
        self.k, self.program, self.results, self.suffix = k, program, results, f"_{k}" if k else ""
        self.rows = [p for p in program.params if p.kind == ROWS]
        self.vectors = [p for p in program.params if p.kind == VECTOR]
        self.dtypes = [s for s in program.symbols if s != FP32 and not s.startswith("promoted_dtype")]
        self.promoted = [s for s in program.symbols if s.startswith("promoted_dtype")]
        # a number's factory parameter: its own name (the body's), its source the wrapper's name
        self.numbers = [Param(p.name, p.kind, self.named(p)) for p in program.params if p.kind == "number"]
        self.indices = [Param(p.name, p.kind, self.named(p)) for p in program.params if p.kind == INDEX]
        self.checks = [*(c.replace("cols", "shape[-1]") for c in needed(program.checks)), *program.dtype_checks]
        self.spread = f"_spread_rows(n{self.suffix}, cols{', whole=True' if program.whole else ''})"
        self.launched = [*(f"{p.name}_rows" for p in (*self.rows, *self.vectors)), *(f"{o.name}_out" for o in results)]

    def named(self, param: Param | str) -> str:
        """The wrapper's name of one of the group's parameters (or parameter names): an alias's is the earlier group's."""
        name = param if isinstance(param, str) else param.name
        return self.program.aliases.get(name, name)

    def names(self, kind: str) -> str:
        return tuple_text(self.named(p) for p in self.program.params if p.kind == kind)

    def guard(self) -> str:
        """The wrapper's check of the group's operands: the shape of its rows, or None."""
        narrow = self.program.narrow()
        rows = {p.name for p in self.rows} - set(narrow)
        results = ", ".join(f"({tuple_text(sorted(self.named(d) for d in o.value.deps & rows))})" for o in self.results)
        full = tuple_text(self.named(p) for p in self.rows if p.name not in narrow)
        return (f"shape{self.suffix} = _fused_shape(({full}), ({self.names(VECTOR)}), numbers=({self.names('number')}), "
                f"dtypes=({self.names('dtype')}), like=({self.names('like')}), results=({results},){narrow_shape(narrow, self.named)})")

    def host(self) -> str:
        """The kernel path's statements for the group: its windows, promoted dtypes and outputs."""
        sfx = self.suffix
        narrow = self.program.narrow()
        operands = tuple_text(narrow_rows(p.name, narrow, self.named) for p in self.rows)
        lines = f"heads{sfx}, blocks{sfx}, n{sfx}, operands = _row_blocks(shape{sfx}, {operands})\n"
        lines += f"{tuple_text(f'({p.name}_rows, {p.name}_map)' for p in self.rows)} = operands\n"
        lines += "".join(f"{p.name}_rows = {self.named(p)}.reshape(1, cols).contiguous()\n" for p in self.vectors)
        lines += "".join(f"{s} = {self.program.symbols[s]}\n" for s in self.promoted)
        return lines + "".join(f"{o.name}_out = torch.empty(blocks{sfx} * n{sfx}, cols, dtype={torch_dtype(self.program, o.value.dtype)}, "
                               f"device={self.named(self.rows[0])}.device)\n" for o in self.results)

    def kernel(self) -> tuple[list[Stmt], list[KernelParam], list[Stmt]]:
        """The factory's statements (its tile shape, blocks and heads as ``<first output>_tiles``),
        the kernel's parameters and its loops, which rebind blocks, heads and the tile shape first."""
        buffers = self.program.buffers([f"{p.name}_tile" for p in self.rows], [o.value.text for o in self.results])
        setup, params, loop = block_group(self.program, self.rows, self.vectors, self.results, [*self.dtypes, *self.promoted], buffers,
                                          f"max_rows[{self.k}]")
        tiles = f"{self.results[0].name}_tiles"
        rebound = Assign("blocks, heads, rows, tile_cols", tiles, f"{', '.join(o.name for o in self.results)}: its rows")
        return [*setup, Assign(tiles, f"blocks[{self.k}], heads[{self.k}], rows, tile_cols")], params, [rebound, *loop]


def _symbol_of(groups: Sequence[Group], symbol: str) -> str:
    """The wrapper's torch dtype of a dtype symbol (the first group's that has it)."""
    return next(program.symbols[symbol] for program, _ in groups if symbol in program.symbols)
