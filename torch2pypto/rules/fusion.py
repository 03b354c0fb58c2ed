"""A fused region's definitions: its kernel factory (:mod:`~torch2pypto.rules.fused_kernel`), the
torch fallback and the host wrapper that picks one of them at run time.

:func:`definitions` gives the kernel factory, the original statements as the torch fallback,
and the host wrapper: it checks at run time that the operands fit the kernel (rows of one
shape, vectors of its last dim, float dtypes, Python numbers, on the kernel path) and otherwise
runs the fallback; while autograd records, the kernel computes the results and backward gives
torch's gradients of the fallback. A region that inlines a submodule's forward takes the
submodule and reads its weights itself, after checking that its call would run that forward
alone (:data:`INLINED`); in backward its fallback calls the submodule, so the weights get their
gradients too. A region without a row reduction reads its rows
operands in place, broadcast, permuted or column-sliced (templates.ROW_BLOCKS); a reduction's
rows are padded to 32-byte aligned rows on the host.
"""

from __future__ import annotations

import hashlib
import re
import textwrap
from typing import Mapping, Sequence

from torch2pypto.rules import templates
from torch2pypto.rules.codegen import Definition, copied, filled
from torch2pypto.rules.fused_kernel import kernel_source
from torch2pypto.rules.tile_program import FP32, INDEX, ROWS, VECTOR, Output, Program, Unfusible, torch_dtype
from torch2pypto.rules.widths import needed


def name_of(function: str, torch_source: str, sites: int, made_of: Sequence[str] = ()) -> str:
    """The region's wrapper name: the function's, a digest of its statements (so a shared
    kernels module holds one kernel per distinct region) and how many torch call sites it
    fused (a later run counts its call as that many converted sites). ``made_of``: what else
    the kernel computes that the statements do not spell (the helpers and forwards they call,
    inlined): in the digest too, so that one name is one kernel across a tree's files."""
    digest = hashlib.sha1((torch_source + "".join(made_of)).encode()).hexdigest()[:6]
    return f"pypto_fused_{function.strip('_') or 'region'}_{digest}_{sites}sites"  # engine.transform.FUSED_PREFIX


def fused_sites(wrapper: str) -> int:
    """The torch call sites a fused wrapper's call stands for (its name says)."""
    count = wrapper.rpartition("_")[2].removesuffix("sites")
    return int(count) if count.isdigit() else 1


def definitions(
    wrapper: str, where: str, program: Program, outputs: Sequence[Output], torch_source: str, returns: bool
) -> tuple[Definition, ...]:
    """The kernel factory, the torch fallback (``torch_source``: the region's statements, with the
    parameters' names) and the wrapper ``wrapper`` of a built region.

    Built once per process: the same region copied into many model files gives the same
    definitions. The key is every argument, the program's whole state included; at most
    _DEFINED_MAX are kept."""
    key = (wrapper, where, program.state(), tuple(outputs), torch_source, returns)
    if key not in _DEFINED:
        if len(_DEFINED) >= _DEFINED_MAX:
            _DEFINED.clear()
        _DEFINED[key] = _definitions(wrapper, where, program, outputs, torch_source, returns)
    return _DEFINED[key]


_DEFINED: dict[tuple, tuple[Definition, ...]] = {}
_DEFINED_MAX = 2048


def _definitions(
    wrapper: str, where: str, program: Program, outputs: Sequence[Output], torch_source: str, returns: bool
) -> tuple[Definition, ...]:
    base = wrapper.removeprefix("pypto_").rpartition("_")[0]  # without the sites count
    kernel, fallback = f"{base}_kernel", f"_torch_{base}"
    params = program.params
    signature = ", ".join(p.name for p in params)
    called = ", ".join(p.name for p in params if p.name not in program.derived)  # the wrapper's
    torch_args = ", ".join(p.name for p in params if p.name not in program.derived and p.kind != "class")  # the fallback's
    returned = ", ".join(o.name for o in outputs)
    ending = "" if returns else f"return {returned}\n"
    fallback_def = fallback_definition(fallback, torch_args, where, torch_source + ending)
    rows = [p for p in params if p.kind == ROWS]
    vectors = [p for p in params if p.kind == VECTOR]
    numbers = [p for p in params if p.kind == "number"]
    indices = [p for p in params if p.kind == INDEX]
    if not rows:
        raise Unfusible("no rows tensor among the inputs")
    tensors = [*rows, *vectors]
    buffers = program.buffers([f"{p.name}_tile" for p in rows], [o.value.text for o in outputs if o.value.role == ROWS])
    promoted = [s for s in program.symbols if s.startswith("promoted_dtype")]
    dtypes = [s for s in program.symbols if s != FP32 and s not in promoted]
    blocked = not program.reduces  # rows read in place as blocks (_row_blocks); a reduction's rows are padded
    maps = ["blocks", "heads", *(f"{p.name}_map" for p in rows)] if blocked else []
    factory = [*dtypes, *promoted, "cols", *(["width"] if program.reduces else []), *(p.name for p in (*numbers, *indices)), *maps, "max_rows"]
    source = kernel_source(kernel, where, program, rows, vectors, outputs, factory, buffers)
    kernel_def = Definition(kernel, source, ("_tile_shape", "_annotated"))
    # autograd may record: torch's gradients of the fallback (_with_torch_grad, _with_torch_grads
    # of several results; through a submodule, whose fallback reads its parameters from it,
    # _with_held_grads, which gives them theirs)
    narrow = program.narrow()
    shape, guard = shape_guard(program, outputs)
    prologue = f"shape = {shape}\n"
    if program.modules:
        pairs = ", ".join(f"({m}, {c})" for m, c in program.modules)
        prologue = (f"if not _inlined({pairs}):\n    return {fallback}({torch_args})\n"
                    + "".join(f"{p} = {read}\n" for p, read in program.derived.items()) + prologue)
    first = rows[0].name
    body = "cols = shape[-1]\n"
    if program.reduces:
        body += (f"({tuple_text(f'{p.name}_rows' for p in tensors)}), order = _reduction_operands(shape, "
                 f"({tuple_text(p.name for p in rows)}), ({tuple_text(p.name for p in vectors)}))\n")
    else:
        body += f"heads, blocks, n, operands = _row_blocks(shape, {tuple_text(narrow_rows(p.name, narrow) for p in rows)})\n"
        body += f"{tuple_text(f'({p.name}_rows, {p.name}_map)' for p in rows)} = operands\n"
        body += "".join(f"{p.name}_rows = {p.name}.reshape(1, cols).contiguous()\n" for p in vectors)
    for symbol in promoted:
        body += f"{symbol} = {program.symbols[symbol]}\n"
    width = f"{first}_rows.shape[1]"
    for o in outputs:
        if o.value.role != ROWS and blocked:
            raise Unfusible("a column result of a kernel without a row reduction")
        size = "blocks * n, cols" if blocked else f"{first}_rows.shape[0], {width if o.value.role == ROWS else '1'}"
        body += f"{o.name}_out = torch.empty({size}, dtype={torch_dtype(program, o.value.dtype)}, device={first}.device)\n"
    args = [f"_PYPTO_ALL_DTYPES[{program.symbols[s]}]" for s in dtypes] + [f"_PYPTO_ALL_DTYPES[{s}]" for s in promoted]
    spread = "n, cols" if blocked else f"*{first}_rows.shape"
    args += ["cols", *([width] if program.reduces else []), *(f"float({p.name})" for p in numbers), *(p.name for p in indices), *maps,
             f"_spread_rows({spread}{', whole=True' if program.whole else ''})"]
    launched = ", ".join([*(f"{p.name}_rows" for p in tensors), *(f"{o.name}_out" for o in outputs)])
    body += f"_launch({kernel}({', '.join(args)}), {launched})\n"
    results = []
    for o in outputs:
        if blocked:
            shaped = f"{o.name}_out.reshape(shape)"
        else:
            shaped = f"_ordered({o.name}_out{'[:, :cols]' if o.value.role == ROWS else ''}, shape, order)"
        results.append(shaped)
    body += f"return {', '.join(results)}\n"
    requires = ["_fused_shape", "_launch", "_as_rows", kernel, fallback, "_reduction_operands"] if program.reduces else \
        ["_fused_shape", "_launch", kernel, fallback, "_row_blocks"]
    requires += ["_inlined"] if program.modules else []
    doc = filled(f"{where} as one PyPTO kernel: {', '.join(program.ops)}.", 92, subsequent_indent="    ")
    submodules = ", a submodule whose call runs more than its class's forward" if program.modules else ""
    more = filled(
        f"{' + '.join(dict.fromkeys(program.pypto))} in torch's dtypes, rounded where torch rounds. Operands "
        f"the kernel does not take (other shapes or dtypes, off the NPU{submodules}) run {fallback}.",
        92, initial_indent="    ", subsequent_indent="    ",
    )
    source = (f'def {wrapper}({called}):\n    """{doc}\n\n{more}\n    """\n'
              f"{textwrap.indent(prologue, '    ')}    if not ({guard}):\n        return {fallback}({torch_args})\n")
    if not program.modules:
        grads = "_with_torch_grad" if len(outputs) == 1 else "_with_torch_grads"
        source += (f"\n    def kernel_path({signature}):\n" + textwrap.indent(body, " " * 8)
                   + f"\n    return {grads}(kernel_path, {fallback}, {signature})\n")
        requires.append(grads)
    else:
        held = [p for p in params if p.name in program.derived]
        source += (f"\n    def kernel_path({', '.join([*torch_args.split(', '), *(p.name for p in held)])}):\n" + textwrap.indent(body, " " * 8)
                   + f"\n    return _with_held_grads(kernel_path, {fallback}, {torch_args}, held=({tuple_text(p.name for p in held)}))\n")
        requires.append("_with_held_grads")
    wrapper_def = Definition(wrapper, source, tuple(requires), imports=("math",) if program.reduces else ())
    extra = (templates.ALIGNED_ROWS, templates.REDUCTION_OPERANDS) if program.reduces else (templates.ROW_BLOCKS,)
    extra += (INLINED,) if program.modules else ()
    return (*extra, kernel_def, fallback_def, FUSED_SHAPE, wrapper_def)


def shape_guard(program: Program, outputs: Sequence[Output]) -> tuple[str, str]:
    """The wrapper's expressions of a region's ``shape`` (_fused_shape of its operands: None
    where its kernel does not take them) and of the condition its kernel runs on, given it."""
    params = program.params
    rows = [p for p in params if p.kind == ROWS]
    narrow = program.narrow()
    names = {p.name for p in rows} - set(narrow)
    results = ", ".join(f"({tuple_text(sorted(o.value.deps & names))})" for o in outputs)
    shape = (f"_fused_shape(({tuple_text(p.name for p in rows if p.name not in narrow)}), ({tuple_text(p.name for p in params if p.kind == VECTOR)}), "
             f"numbers=({tuple_text(p.name for p in params if p.kind == 'number')}), dtypes=({tuple_text(p.name for p in params if p.kind == 'dtype')}), "
             f"like=({tuple_text(p.name for p in params if p.kind == 'like')}), results=({results},){narrow_shape(narrow)})")
    guard = " and ".join(["shape is not None", *(c.replace("cols", "shape[-1]") for c in needed(program.checks)), *dict.fromkeys(program.dtype_checks)])
    return shape, guard


def narrow_shape(narrow: Mapping[str, str], named=lambda name: name) -> str:
    """_fused_shape's ``narrow=`` argument (the wrapper's names of the narrow operands, ``named``,
    and their widths at run time), or nothing."""
    pairs = [f"({named(name)}, {_run_time(width)})" for name, width in narrow.items()]
    return f", narrow=({tuple_text(pairs)})" if pairs else ""


def narrow_rows(name: str, narrow: Mapping[str, str], named=lambda name: name) -> str:
    """A rows operand as _row_blocks takes it: a narrow one with its width at run time."""
    return f"({named(name)}, {_run_time(narrow[name])})" if name in narrow else named(name)


def _run_time(width: str) -> str:
    return re.sub(r"\bcols\b", "shape[-1]", width)


def fallback_definition(name: str, signature: str, where: str, torch_source: str) -> Definition:
    """The torch fallback ``name``: the region's statements as written (``torch_source``, which ends in a return)."""
    return Definition(name, f'def {name}({signature}):\n    """{where}: the original torch statements."""\n'
                      + textwrap.indent(torch_source.rstrip("\n") + "\n", "    "))


def tuple_text(names) -> str:
    """The names as a tuple's items (one with its comma)."""
    names = list(names)
    return ", ".join(names) + ("," if len(names) == 1 else "")


INLINED = copied("launch", "_inlined")

FUSED_SHAPE = copied("layout", "_fused_shape")
