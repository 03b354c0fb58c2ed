"""Matmul epilogues: a linear and the elementwise work on its result as one cube kernel.

The gated pair of an MLP:

An expression ``act(L1(x)) * L2(x)`` (either order), where L1 and L2 are pending linear sites
(``self.gate_proj(x)`` of an nn.Linear, or ``F.linear(x, w, b)``) of one input ``x`` (a name or
a ``self`` attribute, read twice as written) and ``act`` is an activation: a table function the
kernels compute (``F.silu``), or an activation module (``self.act_fn``: an nn.SiLU or nn.GELU site,
or one of an activation registry, ``ACT2FN[config.hidden_act]``), whose kind the wrapper checks
at run time. It becomes one call of a wrapper of :mod:`torch2pypto.rules.gated` standing where it
was written; its sites are converted, fused. The call may stand inside another call that is
converted (``self.down_proj(...)``): the translation splices it into that call's rewrite.

A linear and the infix op that consumes its result, ``linear(x, w, b) <op> other`` (+, -, *, /;
+ and * in either order), ``other`` a name, an attribute or a number: ``self.q_proj(h) *
self.scaling``, ``self.dense(h) + residual``. One call of a wrapper of
:mod:`torch2pypto.rules.epilogue`; the wrapper checks at run time whether ``other`` is a number or a
tensor of the result's shape (else it runs the expression as written).
"""

from __future__ import annotations

import ast

from torch2pypto.rules import epilogue, gated
from torch2pypto.rules.fusion import ROWS, Param, name_of
from torch2pypto.translator.engine.linears import BIAS, MODULE, OTHER, WEIGHT, dotted, find_activation, find_linear, source_text, wrapper_param
from torch2pypto.translator.engine.report import CONVERTED



def gated_pair(finder, node: ast.expr, found) -> bool:
    """Whether ``node`` is a gated pair; if so, its region is added to ``found`` (a Fused)."""
    if type(node) is not ast.BinOp or type(node.op) is not ast.Mult:
        return False
    mul = finder.pending.get(finder.lines.span(node))
    if mul is None:
        return False
    for first, second in ((node.left, node.right), (node.right, node.left)):
        match = _match(finder, first, second)
        if match is not None:
            _emit(finder, node, first, mul, *match, found)
            return True
    return False


_EPILOGUE_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def linear_epilogue(finder, node: ast.expr, found) -> bool:
    """Whether ``node`` is ``linear(x, w, b) <op> other`` (+ and * in either order), other a name,
    an attribute or a number; if so, its region is added to ``found``."""
    if type(node) is not ast.BinOp or type(node.op) not in _EPILOGUE_OPS:
        return False
    op = _EPILOGUE_OPS[type(node.op)]
    site = finder.pending.get(finder.lines.span(node))
    if site is None:
        return False
    sides = [(node.left, node.right)] + ([(node.right, node.left)] if op in ("add", "mul") else [])
    for first, other in sides:
        linear = find_linear(finder, first)
        if linear is None or not (dotted(other) or type(_literal(other)) in (int, float)):
            continue
        _emit_epilogue(finder, node, op, first is node.left, linear, other, site, found)
        return True
    return False


def _emit_epilogue(finder, node, op, linear_first, linear, other, site, found) -> None:
    from torch2pypto.translator.engine.regions import Region  # regions calls this module

    attempt, bound = linear
    params: dict[str, Param] = {}
    x, w, b = (wrapper_param(finder, params, bound.get(p), r) for p, r in (("input", ROWS), ("weight", WEIGHT), ("bias", BIAS)))
    literal = type(_literal(other)) in (int, float)
    kinds = (epilogue.NUMBER,) if literal else (epilogue.TENSOR, epilogue.NUMBER)  # a name's: the wrapper checks
    value = wrapper_param(finder, params, other, "number" if literal else OTHER)
    linear_call = f"torch.nn.functional.linear({x}, {w}, {b or 'None'})"
    symbol = _SYMBOLS[op]
    expression = f"{linear_call} {symbol} {value}" if linear_first else f"{value} {symbol} {linear_call}"
    torch_source = f"return {expression}\n"
    attempts = [attempt, site]
    wrapper = name_of(finder.function.name, torch_source, len(attempts))
    where = f"{finder.function.name}'s linear epilogue"
    names = [p.name for p in params.values()]
    definitions = epilogue.definitions(wrapper, where, op, kinds, names, torch_source, (x, w, b, value))
    kernel = epilogue.kernel_name(op, kinds[0], False)
    _record(finder, node, attempts, wrapper, Region, ("linear", f"x {symbol} y"), kernel, params, ("linear",), definitions, found)


def _literal(node: ast.expr):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _match(finder, activated: ast.expr, other: ast.expr):
    """(activation attempt, its kind, gate's (attempt, bound), up's) if ``activated`` is act(L1(x))
    and ``other`` L2(x), else None."""
    act = find_activation(finder, activated)
    if act is None:
        return None
    gate, up = find_linear(finder, activated.args[0]), find_linear(finder, other)
    if gate is None or up is None or source_text(finder, gate[1]["input"]) != source_text(finder, up[1]["input"]):
        return None
    return (*act, gate, up)


def linear_activation(finder, node: ast.expr, found) -> bool:
    """Whether ``node`` is ``act(linear(x, w, b))`` (bart's ``self.activation_fn(self.fc1(h))``);
    if so, its region is added to ``found``."""
    act = find_activation(finder, node)
    linear = find_linear(finder, node.args[0]) if act is not None else None
    if linear is None:
        return False
    from torch2pypto.translator.engine.regions import Region  # regions calls this module

    (attempt, kind), (site, bound) = act, linear
    params: dict[str, Param] = {}
    act_param = wrapper_param(finder, params, node.func, MODULE) if kind is None else None
    x, w, b = (wrapper_param(finder, params, bound.get(p), r) for p, r in (("input", ROWS), ("weight", WEIGHT), ("bias", BIAS)))
    torch_source = f"return {act_param or attempt.resolved.api}(torch.nn.functional.linear({x}, {w}, {b or 'None'}))\n"
    attempts = [site, attempt]
    wrapper = name_of(finder.function.name, torch_source, len(attempts))
    where = f"{finder.function.name}'s linear epilogue"
    names = [p.name for p in params.values()]
    definitions = epilogue.activation_definitions(wrapper, where, kind, act_param, names, torch_source, (x, w, b), site.resolved.entry)
    ops = ("linear", kind or source_text(finder, node.func))
    kernel = epilogue.activation_kernel(kind, False) if kind else "linear_<activation>_kernel"
    _record(finder, node, attempts, wrapper, Region, ops, kernel, params, ("linear", *([kind] if kind else [])), definitions, found)
    return True


def _record(finder, node, attempts, wrapper, Region, ops, kernel, params, entries, definitions, found) -> None:
    """Mark the sites converted; the region, its call's edit and its definitions."""
    span = finder.lines.span(node)
    start, end = finder.lines.offset(*span[:2]), finder.lines.offset(*span[2:])
    for a in attempts:
        a.status, a.reason, a.pypto_api = CONVERTED, "", f"{wrapper} (fused)"
    found.regions.append(Region(finder.path, span, finder.function.name, ops, wrapper, kernel, tuple(params.values()), entries))
    found.edits.append((start, end, f"{wrapper}({', '.join(p.source for p in params.values())})"))
    found.definitions.extend((start, d) for d in definitions)


def _emit(finder, node: ast.BinOp, activated_node: ast.Call, mul, act, kind, gate, up, found) -> None:
    from torch2pypto.translator.engine.regions import Region  # regions calls this module

    params: dict[str, Param] = {}  # source -> parameter
    act_param = wrapper_param(finder, params, activated_node.func, MODULE) if kind is None else None
    x = wrapper_param(finder, params, gate[1]["input"], ROWS)
    names = [(wrapper_param(finder, params, b["weight"], WEIGHT), wrapper_param(finder, params, b.get("bias"), BIAS)) for _, b in (gate, up)]
    linear = [f"torch.nn.functional.linear({x}, {w}, {b or 'None'})" for w, b in names]
    activated = f"{act_param or act.resolved.api}({linear[0]})"
    expression = f"{activated} * {linear[1]}" if activated_node is node.left else f"{linear[1]} * {activated}"
    torch_source = f"return {expression}\n"
    attempts = [gate[0], up[0], act, mul]
    wrapper = name_of(finder.function.name, torch_source, len(attempts))
    spec = gated.Gated(act_param, x, (names[0][0], names[1][0]), (names[0][1], names[1][1]), kind)
    where = f"{finder.function.name}'s gated pair"
    definitions = gated.definitions(wrapper, where, spec, [p.name for p in params.values()], torch_source, gate[0].resolved.entry)
    ops = ("linear", kind or source_text(finder, activated_node.func), "linear", "x * y")
    kernel = f"gated_{kind}_kernel" if kind else "gated_<activation>_kernel"
    _record(finder, node, attempts, wrapper, Region, ops, kernel, params, tuple(op for op in ("linear", kind) if op), definitions, found)
