"""Grouped kernels: several regions' programs, each on rows of its own shape, as one launch.

A grouped region (:mod:`torch2pypto.translator.engine.groups`: q's and k's RoPE) is a program per
group of rows, built in one namespace (:meth:`Program.after`: no kernel name twice). Its kernel
runs each group's blocked loop (templates.blocks_loop) one after the other: each group walks its
own result [blocks, n, cols] with its own heads and tile shape, reading its own window of every
rows operand (:func:`fusion.block_group`); the groups share the last dim ``cols``. The wrapper
takes each source once, checks each group's operands as a region's wrapper does and that their
last dims agree, and otherwise runs the statements as written; when autograd records, the
results carry torch's gradients of those statements (``_with_torch_grads``).
"""

from __future__ import annotations

import textwrap
from typing import Sequence

from torch2pypto.rules import templates
from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.fusion import (
    FP32, FUSED_SHAPE, ROWS, VECTOR, Output, Param, Program, Unfusible, _needed, _torch_dtype, _tuple, block_group, fallback_definition,
)

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
    dtypes, promoted, numbers, maps, spread = [], [], [], [], []
    guards, shapes, checks, body, prelude, kernel_params, loops = [], [], [], "cols = shape[-1]\n", "", "", ""
    launched, returned = [], []
    for k, (program, results) in enumerate(groups):
        sfx = _suffix(k)
        rows = [p for p in program.params if p.kind == ROWS]
        vectors = [p for p in program.params if p.kind == VECTOR]
        own = [s for s in program.symbols if s != FP32 and not s.startswith("promoted_dtype")]
        dtypes += [s for s in own if s not in dtypes]
        promoted += [s for s in program.symbols if s.startswith("promoted_dtype")]
        numbers += [(p.name, _named(program, p)) for p in program.params if p.kind == "number"]
        names = {p.name for p in rows}
        results_of = ", ".join(f"({_tuple(sorted(_named(program, d) for d in o.value.deps & names))})" for o in results)
        guards.append(f"shape{sfx} = _fused_shape(({_tuple(_named(program, p) for p in rows)}), ({_tuple(_named(program, p) for p in vectors)}), "
                      f"numbers=({_tuple(_named(program, p) for p in program.params if p.kind == 'number')}), "
                      f"dtypes=({_tuple(_named(program, p) for p in program.params if p.kind == 'dtype')}), "
                      f"like=({_tuple(_named(program, p) for p in program.params if p.kind == 'like')}), results=({results_of},))\n")
        shapes.append(f"shape{sfx}")
        checks += [*(c.replace("cols", "shape[-1]") for c in _needed(program.checks)), *program.dtype_checks]
        body += f"heads{sfx}, blocks{sfx}, n{sfx}, operands = _row_blocks(shape{sfx}, {_tuple(_named(program, p) for p in rows)})\n"
        body += f"{_tuple(f'({p.name}_rows, {p.name}_map)' for p in rows)} = operands\n"
        body += "".join(f"{p.name}_rows = {_named(program, p)}.reshape(1, cols).contiguous()\n" for p in vectors)
        body += "".join(f"{s} = {program.symbols[s]}\n" for s in program.symbols if s.startswith("promoted_dtype"))
        body += "".join(f"{o.name}_out = torch.empty(blocks{sfx}, n{sfx}, cols, dtype={_torch_dtype(program, o.value.dtype)}, "
                        f"device={_named(program, rows[0])}.device)\n" for o in results)
        maps += [f"{p.name}_map" for p in rows]
        spread.append(f"_spread_rows(n{sfx}, cols{', whole=True' if program.whole else ''})")
        launched += [*(f"{p.name}_rows" for p in (*rows, *vectors)), *(f"{o.name}_out" for o in results)]
        returned += [f"{o.name}_out.reshape(shape{sfx})" for o in results]
        buffers = program.buffers([f"{p.name}_tile" for p in rows], [o.value.text for o in results])
        tile_dtypes = [*own, *(s for s in program.symbols if s.startswith("promoted_dtype"))]
        setup, group_params, loop = block_group(program, rows, vectors, results, tile_dtypes, buffers, f"max_rows[{k}]")
        tiles = f"{results[0].name}_tiles"
        prelude += setup + f"{tiles} = heads[{k}], rows, tile_cols\n"
        kernel_params += group_params
        loops += f"        heads, rows, tile_cols = {tiles}  # {', '.join(o.name for o in results)}: its rows\n" + loop
    factory = [*dtypes, *promoted, "cols", *(n for n, _ in numbers), "heads", *maps, "max_rows"]
    pypto_ops = " + ".join(dict.fromkeys(op for program, _ in groups for op in program.pypto))
    labels = "; ".join(", ".join(o.name for o in results) for _, results in groups)
    doc = f"{where}: {pypto_ops} on [rows, cols] tiles of [blocks, n, cols], one loop per group of rows ({labels}), one launch."
    source = templates.kernel_factory(kernel, ", ".join(factory), doc, prelude, kernel_params, loops).replace("\n\n\n", "\n\n")
    kernel_def = Definition(kernel, source, ("_tile_shape", "_annotated"))
    args = [f"_PYPTO_ALL_DTYPES[{symbol_of(groups, s)}]" for s in dtypes] + [f"_PYPTO_ALL_DTYPES[{s}]" for s in promoted]
    args += ["cols", *(f"float({a})" for _, a in numbers), f"({_tuple(f'heads{_suffix(k)}' for k in range(len(groups)))})", *maps,
             f"({_tuple(spread)})"]
    body += f"_launch({kernel}({', '.join(args)}), {', '.join(launched)})\n"
    body += f"return {', '.join(returned)}\n"
    ops = "; ".join(", ".join(program.ops) for program, _ in groups)
    doc = textwrap.fill(f"{where} as one PyPTO kernel, a group of rows per statement ({labels}): {ops}.", 92, subsequent_indent="    ")
    more = textwrap.fill(
        f"{pypto_ops} in torch's dtypes, rounded where torch rounds. Operands the kernel does not take (other shapes or "
        f"dtypes, groups of other last dims, off the NPU) run {fallback}; autograd gets its gradients.",
        92, initial_indent="    ", subsequent_indent="    ",
    )
    conditions = [*(f"{s} is not None" for s in shapes), *(f"{s}[-1] == shape[-1]" for s in shapes[1:]), *dict.fromkeys(checks)]
    source = (f'def {wrapper}({signature}):\n    """{doc}\n\n{more}\n    """\n' + textwrap.indent("".join(guards), "    ")
              + f"    if not ({' and '.join(conditions)}):\n        return {fallback}({signature})\n"
              + f"\n    def kernel_path({signature}):\n" + textwrap.indent(body, " " * 8)
              + f"\n    return _with_torch_grads(kernel_path, {fallback}, {signature})\n")
    requires = ("_fused_shape", "_launch", kernel, fallback, "_row_blocks", "_with_torch_grads")
    return (templates.ROW_BLOCKS, kernel_def, fallback_def, FUSED_SHAPE, Definition(wrapper, source, requires))


def _named(program: Program, param: Param | str) -> str:
    """The wrapper's name of a group's parameter (or parameter name): an alias's is the earlier group's."""
    name = param if isinstance(param, str) else param.name
    return program.aliases.get(name, name)


def symbol_of(groups: Sequence[Group], symbol: str) -> str:
    """The wrapper's torch dtype of a dtype symbol (the first group's that has it)."""
    return next(program.symbols[symbol] for program, _ in groups if symbol in program.symbols)
