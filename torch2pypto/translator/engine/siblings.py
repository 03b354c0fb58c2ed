"""Sibling projections: consecutive statements that each project the same input by a linear.

llama's attention::

    query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

Each statement is an assignment whose value is its linear (a pending site of ``self.q_proj``, an
nn.Linear, or ``F.linear(x, w, b)``, of names and attributes) with methods, attributes and
subscripts after it, or as the first argument of a call of a name or an attribute (qwen3's
``self.q_norm(self.q_proj(h).view(s))``); the linears read one input (the same text), which no statement of the group
assigns before it reads it, nor any weight or bias. One statement before the group calls a
wrapper of :mod:`torch2pypto.rules.siblings`, one launch for all projections; each linear's call
becomes the name of its result, the host views after it as written (a statement that is only
``name = linear(...)`` goes: the group's call assigns its name). The linears run first in
their statements, as they did: nothing is evaluated before them there.
"""

from __future__ import annotations

import ast

from torch2pypto.rules import siblings
from torch2pypto.rules.fusion import name_of
from torch2pypto.rules.tile_program import ROWS, Param
from torch2pypto.translator.engine.linears import BIAS, WEIGHT, dotted, find_activation, find_linear, source_text, unique_name, wrapper_param
from torch2pypto.translator.engine.report import CONVERTED


def sibling_linears(finder, statements: list[ast.stmt], i: int, found) -> int:
    """How many statements from ``i`` form a group of sibling projections (0: none, else at least
    two); a group's region, edits and definitions are added to ``found``."""
    group, assigned = [], set()
    for statement in statements[i:]:
        linear = _leading_linear(finder, statement)
        if linear is None or group and source_text(finder, linear[1]["input"]) != source_text(finder, group[0][1]["input"]):
            break
        if any(_root(v) in assigned for v in linear[1].values() if v is not None):
            break  # reads what the group assigned before it
        group.append(linear)
        targets = [n for t in statement.targets for n in ast.walk(t)]
        if not all(type(n) in (ast.Name, ast.Tuple, ast.List, ast.Store) for n in targets):
            break  # assigns an attribute or an item: the last of the group
        assigned |= {n.id for n in targets if type(n) is ast.Name}
    return _emit(finder, statements[i : i + len(group)], group, found) if len(group) > 1 else 0


def _leading_linear(finder, statement: ast.stmt):
    """(attempt, bound arguments, call) of the linear a statement ``t = linear(...).view(...)...``
    evaluates first, else None."""
    if type(statement) is not ast.Assign:
        return None
    node = statement.value
    while True:
        linear = find_linear(finder, node)
        if linear is not None:
            return (*linear, node)
        if type(node) is ast.Call and type(node.func) is ast.Attribute and not dotted(node.func):
            node = node.func.value  # a method of what the linear gave
        elif type(node) is ast.Call and dotted(node.func) and node.args and type(node.args[0]) is not ast.Starred and find_activation(finder, node) is None:
            node = node.args[0]  # a call of a name or an attribute (qwen3's self.q_norm(...)), no activation epilogue's: its first argument first
        elif type(node) in (ast.Attribute, ast.Subscript):
            node = node.value
        else:
            return None


def _root(node: ast.expr) -> str | None:
    while type(node) is ast.Attribute:
        node = node.value
    return node.id if type(node) is ast.Name else None


def _bare(finder, statement: ast.stmt, node: ast.expr, before: list[ast.stmt]) -> str | None:
    """The name ``statement`` assigns if it is ``name = linear(...)`` alone on its lines and no
    statement ``before`` it in the group reads that name: the group's call assigns it instead."""
    target = statement.targets[0] if len(statement.targets) == 1 else None
    if statement.value is not node or type(target) is not ast.Name:
        return None
    if any(type(n) is ast.Name and n.id == target.id for b in before for n in ast.walk(b)):
        return None
    end = finder.lines.offset(*finder.lines.span(statement)[2:])
    return target.id if finder.text[end : finder.text.find("\n", end) % (len(finder.text) + 1)].strip() == "" else None


def _emit(finder, statements: list[ast.stmt], group: list, found) -> int:
    from torch2pypto.translator.engine.regions import Region  # regions calls this module

    first_span = finder.lines.span(statements[0])
    start = finder.lines.offset(*first_span[:2])
    line = finder.text.rfind("\n", 0, start) + 1
    indent = finder.text[line:start]
    if indent.strip():
        return 0  # not the line's first statement
    params: dict[str, Param] = {}
    x = wrapper_param(finder, params, group[0][1]["input"], ROWS)
    projections = [(wrapper_param(finder, params, b["weight"], WEIGHT), wrapper_param(finder, params, b.get("bias"), BIAS)) for _, b, _ in group]
    taken = {n.id for n in ast.walk(finder.function) if type(n) is ast.Name} | {a.arg for a in ast.walk(finder.function) if type(a) is ast.arg}
    results, edits = [], []
    for j, ((_, _, node), statement, (weight, _)) in enumerate(zip(group, statements, projections)):
        bare = _bare(finder, statement, node, statements[:j])
        if bare is not None:  # its line goes: the group's call assigns its name
            s = finder.lines.span(statement)
            own = finder.lines.offset(*s[:2])
            end = finder.text.find("\n", finder.lines.offset(*s[2:]))
            edits.append((finder.text.rfind("\n", 0, own) + 1, len(finder.text) if end < 0 else end + 1, ""))
            results.append(bare)
            continue
        results.append(unique_name(weight.removesuffix("_weight"), taken))
        taken.add(results[-1])
        s = finder.lines.span(node)
        edits.append((finder.lines.offset(*s[:2]), finder.lines.offset(*s[2:]), results[-1]))
    linears = ", ".join(f"torch.nn.functional.linear({x}, {w}, {b or 'None'})" for w, b in projections)
    torch_source = f"return {linears}\n"
    attempts = [a for a, _, _ in group]
    wrapper = name_of(finder.function.name, torch_source, len(attempts))
    where = f"{finder.function.name}'s sibling projections"
    names = [p.name for p in params.values()]
    definitions = siblings.definitions(wrapper, where, x, projections, names, torch_source)
    for a in attempts:
        a.status, a.reason, a.pypto_api = CONVERTED, "", f"{wrapper} (fused)"
        finder.pending.pop(a.span, None)
    span = (*first_span[:2], *finder.lines.span(group[-1][2])[2:])
    kernel = siblings.kernel_name(len(group), False)
    found.regions.append(Region(finder.path, span, finder.function.name, ("linear",) * len(group), wrapper, kernel,
                                tuple(params.values()), ("linear",)))
    call = f"{wrapper}({', '.join(p.source for p in params.values())})"
    found.edits.append((line, line, f"{indent}{', '.join(results)} = {call}\n"))
    found.edits.extend(edits)
    found.definitions.extend((start, d) for d in definitions)
    return len(group)
