"""Prologues: a row region right before a gated MLP as the prologue of its pair's cube kernel.

A region whose two results are the submodule's input and the residual of the add after it
(llama's add and post-attention RMSNorm, :func:`prologue`): the region as the prologue of the
gated kernel (:mod:`torch2pypto.rules.prologue`), one call for all the statements. Without the
add (gemma3's, a norm between the MLP and the add), the region and the MLP's call (:func:`_mlp_after`),
and a row region after them that reads the MLP's result as the MLP's down projection's epilogue
(:mod:`torch2pypto.rules.region_epilogue`).
"""

from __future__ import annotations

import ast
import dataclasses

from torch2pypto.rules import cube, region_epilogue
from torch2pypto.rules import prologue as prologue_rules
from torch2pypto.rules.fusion import name_of
from torch2pypto.rules.tile_program import ROWS, Param, Unfusible
from torch2pypto.translator.engine.epilogues import _assigned, _derived, _forward_linear, _read_after, submodule_epilogue
from torch2pypto.translator.engine.linears import MODULE, source_text, unique_name, wrapper_param
from torch2pypto.translator.engine.report import CONVERTED
from torch2pypto.translator.engine.syntax import comments_above


def prologue(finder, statements: list[ast.stmt], end: int, built, found) -> int:
    """After a region (``built``) of the statements before ``end``: how many statements from
    ``end`` a submodule epilogue takes (:func:`submodule_epilogue`: 0 or 2). Where its submodule's
    forward makes a gated pair of one of the region's two results and the add reads the other,
    and neither is read after the add, the region runs as the prologue of the pair's kernel
    (:mod:`torch2pypto.rules.prologue`): one call of one wrapper stands for all the statements."""
    edits = len(found.edits)
    taken = submodule_epilogue(finder, statements, end, found)
    if not taken:
        return _mlp_after(finder, statements, end, built, found) if end < len(statements) else 0
    sub = found.submodules.get(found.edits[-1][0]) if taken else None
    if sub is None or edits < 1 or getattr(built, "groups", None) is not None:
        return taken
    first, second = statements[end], statements[end + 1]
    outputs = [o.name for o in built.outputs]
    x, residual = (p.source for p in sub.params[:2])
    if sorted(outputs) != sorted({x, residual}) or x == residual or built.returned is not None:
        return taken
    target = second.targets[0].id
    if any(n != target and _read_after(finder, n, first, second) for n in (x, residual)):
        return taken
    wrapper, pair_params, _, spec = sub.pair
    module, cls, *dropout = sub.params[2:]  # the dropout between the call and the add, if any
    program = built.program
    region_call, region_wrapper = found.edits[edits - 1], found.regions[-2].wrapper
    pair = prologue_rules.Pair(wrapper, tuple(p.name for p in pair_params), spec.x, spec.act, spec.activation, spec.weights, spec.biases,
                               spec.halves)
    region = prologue_rules.Region(region_wrapper, program, tuple(built.outputs), x)
    called = [p for p in program.params if p.name not in program.derived]
    where = f"{finder.function.name}'s region and {cls.source}.forward"
    name = name_of(finder.function.name, f"prologue\n{region_wrapper}\n{sub.wrapper}\n", len(built.attempts) + 1)
    inner = f"{name.rpartition('_')[0]}_prologue_1sites"
    try:
        definitions = prologue_rules.definitions(inner, where, region, pair)
    except Unfusible:
        return taken
    bound_names = {*(p.name for p in (*program.params, *pair_params)), *outputs, module.name, cls.name}
    renamed = [dataclasses.replace(d, name=unique_name(d.name, bound_names)) for d in dropout]  # emu3's self.dropout(h) is the region's "dropout"
    held = [module, cls, *renamed]
    if {*(p.name for p in called), *outputs} & {p.name for p in held}:
        return taken  # the outer wrapper binds them all
    params = [*(p.name for p in called), *(p.name for p in held)]
    own = [r for r, p in zip(sub.read, pair_params) if p.name != spec.x]
    separate = (f"{', '.join(outputs)} = {region_wrapper}({', '.join(p.name for p in called)})\n"
                f"return {sub.wrapper}({', '.join([x, residual, *(p.name for p in held)])})\n")
    fused = (f"{x}, {residual} = {inner}({', '.join([*(p.name for p in called), *own])})\n"
             f"return {sub.epilogue.format(x=x, residual=residual)}\n")
    top = prologue_rules.outer(name, where, params, (module.name, cls.name), separate, fused, dropout=renamed[0].name if renamed else None)
    first_region, sub_region = found.regions[-2:]
    sub_params = [dict(zip(dropout, renamed)).get(p, p) for p in sub_region.params if p not in sub.params[:2]]  # x and the residual: the region's results
    if len({p.name for p in (*first_region.params, *sub_params)}) != len(first_region.params) + len(sub_params):
        return taken  # --verify's instances: one name each
    found.regions[-2:] = [dataclasses.replace(
        first_region, span=first_region.span[:2] + sub_region.span[2:], ops=(*first_region.ops, *sub_region.ops), wrapper=name,
        kernel=prologue_rules.kernel_name(region_wrapper), params=(*first_region.params, *sub_params),
        entries=tuple(dict.fromkeys((*first_region.entries, *sub_region.entries))), modules=(*first_region.modules, *sub_region.modules),
        derived=(*first_region.derived, *sub_region.derived))]
    start, end_offset = region_call[0], found.edits[-1][1]
    del found.edits[edits - 1 :]
    segment = finder.text[start:end_offset]
    indent = finder.text[finder.text.rfind("\n", 0, start) + 1 : start]
    new = comments_above(segment, indent)
    found.edits.append((start, end_offset, new + f"{target} = {name}({', '.join([*(p.source for p in called), *(p.source for p in held)])})"))
    found.definitions.extend((start, d) for d in (*definitions, top))
    return taken


def _mlp_after(finder, statements: list[ast.stmt], end: int, built, found) -> int:
    """1 if ``statements[end]`` is ``t = self.mlp(x)`` with no residual add after it (gemma3's,
    whose norm comes between), ``x`` one of the region's two results and not read after: the
    region as the prologue of the forward's gated pair, then its linear (``pypto_linear``); one
    call assigns ``t`` and the region's other result. Where a row region follows that reads ``t``
    (:func:`_region_after`: gemma3's post-feedforward norm and residual add), it is the linear's
    epilogue (:mod:`torch2pypto.rules.region_epilogue`) and the one call stands for its statements
    too (1 + theirs). Else 0, nothing done."""

    first = statements[end]
    call = _assigned(first)
    if call is None or type(call) is not ast.Call or len(call.args) != 1 or call.keywords or type(call.args[0]) is not ast.Name:
        return 0
    cls = finder.sites.inference.held_class(call.func)
    outputs = [o.name for o in built.outputs]
    x, target = call.args[0].id, first.targets[0].id
    others = [n for n in outputs if n != x]
    if cls is None or getattr(built, "groups", None) is not None or built.returned is not None or x not in outputs or len(others) != 1:
        return 0
    if target in others or {x, target} & finder.declared or x != target and _read_after(finder, x, first, first):
        return 0
    inlined = _forward_linear(finder, cls)
    gated_call = found.calls.get(finder.lines.span(inlined[3])) if inlined is not None else None
    if gated_call is None or cls.name in {n.id for n in ast.walk(finder.function) if type(n) is ast.Name and type(n.ctx) is not ast.Load} \
            | {a.arg for a in ast.walk(finder.function.args) if type(a) is ast.arg}:
        return 0  # no gated pair, or the class's name is a local where it is called
    linear_attempt, bound, parameter, _ = inlined
    program = built.program
    called = [p for p in program.params if p.name not in program.derived]
    params: dict[str, Param] = {p.source: p for p in program.params}
    module = wrapper_param(finder, params, call.func, MODULE)
    kind = unique_name(cls.name, {p.name for p in params.values()} | set(outputs))
    if module in outputs:
        return 0

    def outer(source: str) -> str | None:
        if source == "self" or source.startswith("self."):
            return module + source.removeprefix("self")
        return x if source == parameter else None

    wrapper, pair_params, _, spec = gated_call
    read = [outer(p.source) for p in pair_params]
    linear = outer(source_text(finder, bound["weight"])), outer(source_text(finder, bound["bias"])) if "bias" in bound else None
    if None in read or linear[0] is None:
        return 0
    region_wrapper = found.regions[-1].wrapper
    pair = prologue_rules.Pair(wrapper, tuple(p.name for p in pair_params), spec.x, spec.act, spec.activation, spec.weights, spec.biases,
                               spec.halves)
    where = f"{finder.function.name}'s region and {cls.name}.forward"
    called_site = finder.pending.get(finder.lines.span(call))  # the submodule's call, if a site
    attempts = [*built.attempts, *([called_site] if called_site is not None else [])]
    name = name_of(finder.function.name, f"prologue\n{region_wrapper}\n{cls.name}\n", len(attempts), (wrapper,))
    inner = f"{name.rpartition('_')[0]}_prologue_1sites"
    try:
        definitions = prologue_rules.definitions(inner, where, prologue_rules.Region(region_wrapper, program, tuple(built.outputs), x), pair)
    except Unfusible:
        return 0
    own = [r for r, p in zip(read, pair_params) if p.name != spec.x]
    entry = linear_attempt.resolved.entry
    projected = f"pypto_{entry.op}({x}, {linear[0]}, bias={linear[1] or 'None'})"
    separate = (f"{', '.join(outputs)} = {region_wrapper}({', '.join(p.name for p in called)})\n"
                f"return {module}({x}), {others[0]}\n")
    fused = (f"{x}, {others[0]} = {inner}({', '.join([*(p.name for p in called), *own])})\n"
             f"return {projected}, {others[0]}\n")
    top = prologue_rules.outer(name, where, [*(p.name for p in called), module, kind], (module, kind), separate, fused,
                               f"then its linear ({projected.partition('(')[0]})")
    derived = _derived({**params, f"class {cls.name}": Param(kind, "class", cls.name)}, pair_params, outer, linear, True)
    region = found.regions[-1]
    region = found.regions[-1] = dataclasses.replace(
        region, span=region.span[:2] + finder.lines.span(first)[2:], ops=(*region.ops, f"{cls.name}.forward"), wrapper=name,
        kernel=prologue_rules.kernel_name(region_wrapper),
        params=(*region.params, params[source_text(finder, call.func)], Param(kind, "class", cls.name), *derived.values()),
        entries=tuple(dict.fromkeys((*region.entries, "linear"))), modules=(*region.modules, (module, kind)),
        derived=(*region.derived, *((p.name, p.source) for p in derived.values())))
    start, _, _ = found.edits.pop()
    arguments = [*(p.source for p in called), source_text(finder, call.func), cls.name]
    assigned, stop, taken = f"{target}, {others[0]}", first, 1
    after = _region_after(finder, statements, end + 1, (x, target, others[0]), {p.name: p.source for p in called} | {module: None, kind: None},
                          built, found)
    if after is not None:
        later, region_call = after
        epilogue_name = f"{name.rpartition('_')[0]}_epilogue_1sites"
        try:
            epilogue_definitions = region_epilogue.definitions(epilogue_name, f"{where} and the region after it", region_call.wrapper,
                                                               later.program, tuple(later.outputs), region_call.x, projected.partition("(")[0])
        except Unfusible:
            epilogue_definitions = None
        if epilogue_definitions is not None:
            name = name_of(finder.function.name, f"prologue\n{region_wrapper}\n{cls.name}\n{region_call.wrapper}\n", len(attempts) + len(later.attempts),
                           (wrapper,))
            separate = (f"{', '.join(outputs)} = {region_wrapper}({', '.join(p.name for p in called)})\n"
                        f"{region_call.x} = {module}({x})\nreturn {region_call.wrapper}({', '.join(region_call.called)})\n")
            fused = (f"{x}, {others[0]} = {inner}({', '.join([*(p.name for p in called), *own])})\n"
                     f"return {epilogue_name}({x}, {', '.join(r or 'None' for r in linear)}, {', '.join(region_call.own)})\n")
            top = prologue_rules.outer(name, f"{where} and the region after it", [*(p.name for p in called), module, kind, *region_call.params],
                                       (module, kind), separate, fused, f"then its linear with the region after it in the epilogue")
            definitions = (*definitions, *epilogue_definitions)
            attempts += later.attempts
            arguments += [p.source for p in region_call.added]
            assigned, stop, taken = ", ".join(o.name for o in later.outputs), region_call.last, 1 + region_call.count
            taken_names = {p.name for p in (*region.params, *region_call.added)}
            derived_after = []  # the region after's, renamed apart from the prologue's (--verify's instances: one name each)
            for param_name, read_from in region_call.region.derived:
                derived_after.append(Param(unique_name(param_name, taken_names), next(p.kind for p in region_call.region.params if p.name == param_name), read_from))
                taken_names.add(derived_after[-1].name)
            region = dataclasses.replace(
                region, span=region.span[:2] + finder.lines.span(region_call.last)[2:], wrapper=name, ops=(*region.ops, *region_call.region.ops),
                params=(*region.params, *region_call.added, *derived_after), entries=tuple(dict.fromkeys((*region.entries, *region_call.region.entries))),
                modules=(*region.modules, *region_call.region.modules), derived=(*region.derived, *((p.name, p.source) for p in derived_after)))
            found.regions[-1] = region
    for a in attempts:
        a.status, a.reason, a.pypto_api = CONVERTED, "", f"{name} (fused)"
    stop_offset = finder.lines.offset(*finder.lines.span(stop)[2:])
    segment = finder.text[start:stop_offset]
    indent = finder.text[finder.text.rfind("\n", 0, start) + 1 : start]
    new = comments_above(segment, indent)
    found.edits.append((start, stop_offset, new + f"{assigned} = {name}({', '.join(arguments)})"))
    found.definitions.extend((start, d) for d in (*definitions, *cube.definitions(entry), top))
    return taken


@dataclasses.dataclass(frozen=True)
class _After:
    """A row region after the MLP's call that reads its result: its wrapper, its parameter of that
    result ``x`` and the parameters its call passes (``called``, in order), those the epilogue's
    wrapper takes (``own``: all but ``x``), those the outer wrapper adds (``params``, passed as
    ``added``), its last statement, how many statements and its :class:`Region`."""

    wrapper: str
    x: str
    called: tuple[str, ...]
    own: tuple[str, ...]
    params: tuple[str, ...]
    added: tuple[Param, ...]
    last: ast.stmt
    count: int
    region: object


def _region_after(finder, statements: list[ast.stmt], j: int, names: tuple[str, str, str], bound: dict, built, found):
    """(its build, :class:`_After`) of the row region from ``statements[j]`` if it reads the MLP's
    result ``t`` (``names``: the MLP's input, ``t``, the prologue's other result) as rows, no value
    the prologue's region or the MLP's call assigned but those two, and neither is read after it
    unless it assigns it; its parameters' names are none of the outer wrapper's (``bound``: name ->
    source; None: the submodule's and its class's) but one of the same source. The region is emitted
    (its definitions stay), its call's edit and record taken back. Else None, nothing done."""
    x, target, kept = names
    run = finder.run(statements, j) if j < len(statements) else None
    if run is None:
        return None
    end, later = run
    program = later.program
    if getattr(later, "groups", None) is not None or later.returned is not None or not program.reduces:
        return None
    called = [p for p in program.params if p.name not in program.derived]
    xs = [p for p in called if p.source == target and p.kind == ROWS]
    if len(xs) != 1 or any(p.source in (x, *built.assigned) and p.source not in (target, kept) for p in called):
        return None
    if any(p.source == kept and p.name != kept or p.name != xs[0].name and p.source == target for p in called):
        return None  # the outer wrapper binds the prologue's other result by its name
    if any(n not in later.assigned and _read_after(finder, n, statements[end - 1], statements[end - 1]) for n in (target, kept)):
        return None
    added = [p for p in called if p is not xs[0] and p.source != kept and p.name not in bound]
    if any(p.name in bound and bound[p.name] != p.source for p in called if p is not xs[0] and p.source != kept) \
            or xs[0].name in bound and bound[xs[0].name] is None:
        return None  # a name the outer wrapper binds to another value
    finder.emit(statements[j:end], later, found)
    found.edits.pop()
    region = found.regions.pop()
    return later, _After(region.wrapper, xs[0].name, tuple(p.name for p in called), tuple(p.name for p in called if p is not xs[0]),
                         tuple(p.name for p in added), tuple(added), statements[end - 1], end - j, region)
