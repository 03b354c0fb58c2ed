"""The gated pair of one projection's two halves (phi3's MLP) as one gated kernel::

    up_states = self.gate_up_proj(hidden_states)
    gate, up_states = up_states.chunk(2, dim=-1)
    up_states = up_states * self.activation_fn(gate)

Three consecutive statements: a linear of names and attributes (:func:`linears.find_linear`)
assigned to a name; that name chunked in two along the last dim into two names; the product of
one half and an activation (:func:`linears.find_activation`) of the other, in either order,
assigned to a name. They become one statement assigning the product's name, a call of a wrapper of
:mod:`torch2pypto.rules.gated` that takes the one weight (and bias) and hands the gated kernel its
two halves, views of it (gate the first, as chunk gives it). The projection's and the halves'
names may be read nowhere else in the function (the product's name may be one of them). The call
is recorded (``Fused.calls``, by the product's span) for a submodule epilogue and a prologue of
the module whose forward this is (:mod:`epilogues`).
"""

from __future__ import annotations

import ast

from torch2pypto.rules import gated
from torch2pypto.rules.fusion import name_of
from torch2pypto.rules.tile_program import ROWS, Param
from torch2pypto.translator.engine.binding import BindError, ast_args, bind
from torch2pypto.translator.engine.linears import BIAS, MODULE, WEIGHT, find_activation, find_linear, source_text, unique_name, wrapper_param
from torch2pypto.translator.engine.report import CONVERTED
from torch2pypto.translator.engine.syntax import comments


def chunked_pair(finder, statements: list[ast.stmt], i: int, found) -> int:
    """3 if the statements from ``i`` are a chunked gated pair (its region, edit and definitions
    added to ``found``), else 0."""
    if i + 3 > len(statements) or not all(_single(s) for s in statements[i : i + 3]):
        return 0
    first, split, product = statements[i : i + 3]
    if type(first.targets[0]) is not ast.Name or type(product.targets[0]) is not ast.Name:
        return 0
    linear = find_linear(finder, first.value)
    projected = first.targets[0].id
    halves = _halves(finder, split, projected) if linear is not None else None
    if halves is None or type(product.value) is not ast.BinOp or type(product.value.op) is not ast.Mult:
        return 0
    mul = finder.pending.get(finder.lines.span(product.value))
    if mul is None:
        return 0
    node = product.value
    for activated, other in ((node.left, node.right), (node.right, node.left)):
        act = find_activation(finder, activated)
        if act is not None and _named(activated.args[0], halves[0]) and _named(other, halves[1]):
            break
    else:
        return 0
    result = product.targets[0].id
    inside = {id(n) for s in (split, product) for n in ast.walk(s)}
    if any(n.id in {projected, *halves} - {result} and id(n) not in inside for n in finder.loads):
        return 0  # a projection or a half read elsewhere: the call would no longer assign it
    if {projected, *halves, result} & finder.declared:
        return 0
    _emit(finder, statements[i : i + 3], linear, halves, activated, act, mul, result, found)
    return 3


def _single(statement: ast.stmt) -> bool:
    return type(statement) is ast.Assign and len(statement.targets) == 1


def _named(node: ast.expr, name: str) -> bool:
    return type(node) is ast.Name and node.id == name


def _halves(finder, statement: ast.Assign, projected: str) -> tuple[str, str] | None:
    """(gate's name, up's) of ``gate, up = projected.chunk(2, dim=-1)`` (or ``torch.chunk``)."""
    target, node = statement.targets[0], statement.value
    if type(target) is not ast.Tuple or len(target.elts) != 2 or not all(type(e) is ast.Name for e in target.elts):
        return None
    names = tuple(e.id for e in target.elts)
    attempt = finder.at.get(finder.lines.span(node)) if type(node) is ast.Call else None
    entry = attempt.resolved.entry if attempt is not None else None
    if entry is None or entry.op != "chunk" or names[0] == names[1]:
        return None
    receiver = node.func.value if attempt.resolved.method else None
    try:
        bound = bind(entry.params, ast_args(node), receiver, entry.aliases)
    except BindError:
        return None
    if not _named(bound.get("input"), projected) or _literal(bound.get("chunks")) != 2 or _literal(bound.get("dim")) != -1:
        return None
    return names


def _literal(node):
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _emit(finder, statements, linear, halves, activated, act_found, mul, result, found) -> None:
    from torch2pypto.translator.engine.regions import Region  # regions calls this module

    (site, bound), (act, kind) = linear, act_found
    params: dict[str, Param] = {}
    act_param = wrapper_param(finder, params, activated.func, MODULE) if kind is None else None
    x, w, b = (wrapper_param(finder, params, bound.get(p), r) for p, r in (("input", ROWS), ("weight", WEIGHT), ("bias", BIAS)))
    taken = {p.name for p in params.values()}
    projected, gate, up = (unique_name(n, taken) for n in (statements[0].targets[0].id, *halves))
    activation = f"{act_param or act.resolved.api}({gate})"
    product = f"{up} * {activation}" if activated is statements[2].value.right else f"{activation} * {up}"
    torch_source = (f"{projected} = torch.nn.functional.linear({x}, {w}, {b or 'None'})\n"
                    f"{gate}, {up} = {projected}.chunk(2, dim=-1)\nreturn {product}\n")
    attempts = [site, act, mul]
    wrapper = name_of(finder.function.name, torch_source, len(attempts))
    weights = [unique_name(n, taken | {projected, gate, up}) for n in ("gate_weight", "up_weight", "gate_bias", "up_bias")]
    spec = gated.Gated(act_param, x, (weights[0], weights[1]), (weights[2], weights[3]) if b else (None, None), kind, halves=(w, b))
    where = f"{finder.function.name}'s gated pair"
    definitions = gated.definitions(wrapper, where, spec, [p.name for p in params.values()], torch_source, site.resolved.entry)
    for a in attempts:
        a.status, a.reason, a.pypto_api = CONVERTED, "", f"{wrapper} (fused)"
        finder.pending.pop(a.span, None)
    span = finder.lines.span(statements[0])[:2] + finder.lines.span(statements[-1])[2:]
    start, end = finder.lines.offset(*span[:2]), finder.lines.offset(*span[2:])
    indent = finder.text[finder.lines.offset(span[0], 0) : start]
    newline = "\r\n" if "\r\n" in finder.text[start:end] else "\n"
    call = f"{result} = {wrapper}({', '.join(p.source for p in params.values())})"
    ops = ("linear", "chunk", kind or source_text(finder, activated.func), "x * y")
    kernel = f"gated_{kind}_kernel" if kind else "gated_<activation>_kernel"
    found.regions.append(Region(finder.path, span, finder.function.name, ops, wrapper, kernel, tuple(params.values()),
                                tuple(op for op in ("linear", kind) if op)))
    found.edits.append((start, end, "".join(f"{c}{newline}{indent}" for c in comments(finder.text[start:end])) + call))
    found.definitions.extend((start, d) for d in definitions)
    found.calls[finder.lines.span(statements[2].value)] = (wrapper, tuple(params.values()), definitions, spec)
