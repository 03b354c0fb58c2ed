"""Deferred regions: a norm right before an attention's call, computed in its projections' kernel.

llama's decoder layer norms x, then calls its attention, whose forward projects the result three
times and rotates q and k (one kernel: :mod:`torch2pypto.rules.rope`)::

    hidden_states = self.input_layernorm(hidden_states)
    hidden_states, _ = self.self_attn(hidden_states=hidden_states, ...)

The norm's statement becomes the call of a wrapper that returns a tensor of the norm's shape and
dtype that holds no values and carries the norm's operands (:func:`runtime.rope._deferred`); the
projections' wrapper, handed it, launches one kernel that computes the norm in its prologue. That
is safe where nothing else reads the norm's values: the forward reads its parameter only as the
projections' x and for its metadata (``.shape``, ``.dtype``...), the decoder reads the name no
more, and at run time both modules run their classes' forwards (no hooks), with grad mode off;
else the norm runs its own kernel, as before.
"""

from __future__ import annotations

import ast
import dataclasses

from torch2pypto.rules import rope, wrappers
from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.fusion import FUSED_SHAPE, INLINED, name_of, shape_guard
from torch2pypto.rules.tile_program import Param, Unfusible, torch_dtype
from torch2pypto.translator.engine.epilogues import _read_after
from torch2pypto.translator.engine.linears import MODULE, source_text, unique_name
from torch2pypto.translator.engine.scopes import walk

_METADATA = {"shape", "dtype", "device", "ndim", "size", "dim"}  # what reads a tensor's metadata, not its values


@dataclasses.dataclass(frozen=True)
class Deferral:
    """What ``--verify`` needs of a region deferred into a projections kernel's prologue: the
    function the projections' wrapper hands the deferred call to, that wrapper, the kernels the
    function launches and the keyword it takes each of the region's parameters by."""

    function: str
    projections: str
    kernels: tuple[str, ...]
    keywords: tuple[tuple[str, str], ...]


def deferred_region(finder, statements: list[ast.stmt], i: int, found) -> int:
    """1 if ``statements[i]`` is ``h = self.norm(x)``, a region, and the next statement calls a
    held module whose forward projects its first parameter ``h`` in a projections-and-RoPE kernel
    and reads it nowhere else but for metadata (its call replaced, its definitions added to
    ``found``); else 0, nothing done."""
    if i + 1 >= len(statements):
        return 0
    first, second = statements[i], statements[i + 1]
    if type(first) is not ast.Assign or len(first.targets) != 1 or type(first.targets[0]) is not ast.Name or type(first.value) is not ast.Call:
        return 0
    inference = finder.sites.inference
    if inference.held_class(first.value.func) is None:
        return 0
    target = first.targets[0].id
    attention = _attention(finder, second, target, found)
    if attention is None or not _unread(finder, target, second):
        return 0
    call, cls, rotation = attention
    try:
        built = finder.build(statements[i : i + 1])
        built.outputs = finder.outputs(statements[i : i + 1], built)
    except Unfusible:
        return 0
    program = built.program
    if getattr(built, "groups", None) is not None or built.returned is not None or [o.name for o in built.outputs] != [target]:
        return 0
    try:
        prologue = rope.Prologue(program, built.outputs[0])
    except Unfusible:
        return 0
    if not rope.fits(rotation.groups, 3, prologue):
        return 0
    called = [p for p in program.params if p.name not in program.derived]
    taken = {p.name for p in program.params}
    module = Param(unique_name(source_text(finder, call.func).rpartition(".")[2], taken), MODULE, source_text(finder, call.func))
    kind = Param(unique_name(cls.name, taken | {module.name}), "class", cls.name)
    finder.emit(statements[i : i + 1], built, found)
    region = found.regions[-1]
    name = name_of(finder.function.name, f"deferred\n{region.wrapper}\n{rotation.wrapper}\n{ast.dump(first)}\n", len(built.attempts))
    where = f"{finder.function.name}'s region and {cls.name}.forward's projections"
    handed = f"{name.rpartition('_')[0]}_prologue"
    handing = rotation.definitions(deferred=rope.Deferred(handed, where, prologue, region.wrapper, tuple(p.name for p in called)))
    kernels = tuple(d.name for d in handing if d.name.endswith("_kernel"))
    keywords = tuple((p.name, prologue.names[p.name]) for p in program.params)
    found.regions[-1] = dataclasses.replace(region, deferred=Deferral(handed, rotation.wrapper, kernels, keywords))
    start, end, _ = found.edits.pop()
    found.called.append(name)
    found.edits.append((start, end, f"{target} = {name}({', '.join([*(p.source for p in called), module.source, kind.source])})"))
    found.definitions.extend((start, d) for d in (*handing, *_wrapper(name, where, program, prologue, region.wrapper, called, (module, kind), handed)))
    return 1


def _unread(finder, name: str, statement: ast.stmt) -> bool:
    """Whether nothing reads ``name`` after ``statement`` but the value it assigns ``name``, if it
    does, and no nested function reads it."""
    if any(n.id == name and id(n) in finder.deferred for n in finder.loads):
        return False
    targets = getattr(statement, "targets", ())
    return any(type(n) is ast.Name and n.id == name for t in targets for n in ast.walk(t)) or not _read_after(finder, name, statement, statement)


def _attention(finder, statement: ast.stmt, name: str, found):
    """(the call, its class, the forward's :class:`Rotation`) if ``statement``'s value calls a held
    module, ``name`` its one argument that reads it and bound to its forward's first parameter,
    which the forward projects in a projections-and-RoPE kernel and reads nowhere else but for
    its metadata, in no loop; else None."""
    call = getattr(statement, "value", None)
    if type(statement) not in (ast.Assign, ast.Expr) or type(call) is not ast.Call:
        return None
    inference = finder.sites.inference
    cls = inference.held_class(call.func)
    forward = inference.method(cls, "forward") if cls is not None else None
    if forward is None or inference.method(cls, "__call__") is not None or forward.decorator_list or len(forward.args.args) < 2:
        return None
    parameter = forward.args.args[1].arg
    reads = [n for n in ast.walk(statement) if type(n) is ast.Name and n.id == name and type(n.ctx) is ast.Load]
    bound = call.args[:1] if call.args else [k.value for k in call.keywords if k.arg == parameter]
    if len(reads) != 1 or [type(n) is ast.Name and n.id for n in bound] != [name] or any(type(a) is ast.Starred for a in call.args):
        return None
    if found.ahead is not None:
        found.ahead(forward)  # its regions found, if not yet
    rotation = found.rotations.get(forward)
    if rotation is None or rotation.x != parameter:
        return None
    nodes = walk(forward)
    if not _metadata_only(forward, nodes, parameter, rotation.lines):
        return None
    if any(type(n) in (ast.For, ast.AsyncFor, ast.While) and n.lineno <= rotation.lines[0] <= n.end_lineno for n in nodes):
        return None  # a second call would find the result taken
    return call, cls, rotation


def _metadata_only(forward: ast.FunctionDef, nodes: list[ast.AST], parameter: str, lines: tuple[int, int]) -> bool:
    """Whether ``forward`` (its ``nodes``) reads ``parameter`` only in ``lines`` (the projections'
    statements) and for its metadata, and never assigns it."""
    meta = {id(n.value) for n in nodes if type(n) is ast.Attribute and n.attr in _METADATA and type(n.value) is ast.Name}
    for n in nodes:
        if type(n) is ast.Name and n.id == parameter:
            if type(n.ctx) is not ast.Load:
                return False
            if id(n) not in meta and not lines[0] <= n.lineno <= lines[1]:
                return False
        elif type(n) is ast.arg and n.arg == parameter and n is not forward.args.args[1]:
            return False
    return True


def _wrapper(name: str, where: str, program, prologue: rope.Prologue, region: str, called: list[Param], held: tuple[Param, Param],
             handed: str) -> tuple[Definition, ...]:
    """The wrapper of the norm's statement: the deferred result, or the region's own kernel's."""
    modules = [*program.modules, tuple(p.name for p in held)]
    read = "".join(f"    {p} = {value}\n" for p, value in program.derived.items())
    symbol = prologue.output.value.dtype
    dtype = program.symbols.get(symbol) or torch_dtype(program, symbol)
    shape, guard = shape_guard(program, (prologue.output,))
    bound = ", ".join(f"{prologue.names[p.name]}={p.name}" for p in program.params)
    params = [*(p.name for p in called), *(p.name for p in held)]
    doc = wrappers.docstring(
        f"{where}: the region's result, deferred into the projections' kernel, which computes it in its prologue.",
        f"The result is a tensor that holds no values, which only the projections read. With grad mode on, a module whose "
        f"call runs more than its class's forward, or operands the kernel does not take, the region runs {region} now.")
    separate = f"return {region}({', '.join(p.name for p in called)})\n"
    text = (f"def {name}({', '.join(params)}):\n" + doc
            + f"    if torch.is_grad_enabled() or not _inlined({', '.join(f'({m}, {c})' for m, c in modules)}):\n        {separate}"
            + read + f"    shape = {shape}\n"
            + f"    if not ({guard}):\n        {separate}"
            + f"    return _deferred(shape, {dtype}, {prologue.rows[0].name}.device, functools.partial({handed}, {bound}))\n")
    return INLINED, FUSED_SHAPE, rope.DEFERRED, Definition(name, text, ("_inlined", "_fused_shape", "_deferred", region, handed))
