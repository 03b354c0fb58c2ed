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

from torch2pypto.mapping.facts import load_facts
from torch2pypto.rules import epilogue, gated
from torch2pypto.rules.fusion import ROWS, Param, name_of
from torch2pypto.translator.engine.binding import BindError, ast_args, ast_held, bind
from torch2pypto.translator.engine.report import CONVERTED

FACTS = load_facts()
_REGISTRIES = FACTS.module_activation_registries | FACTS.module_activation_factories
# names the wrapper uses itself
_RESERVED = frozenset({"a", "n", "k", "out", "kernel", "biased", "activation", "kernel_path", "torch", "pypto", "math", "functools"})
# the parameter kinds of gated and epilogue wrappers besides rows and numbers: a linear's weight and
# bias, an activation module, an epilogue's other operand (a number or a tensor, known at run time)
WEIGHT, BIAS, MODULE, OTHER = "weight", "bias", "module", "other"


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
        linear = _linear(finder, first)
        if linear is None or not (_dotted(other) or type(_literal(other)) in (int, float)):
            continue
        _emit_epilogue(finder, node, op, first is node.left, linear, other, site, found)
        return True
    return False


def _emit_epilogue(finder, node, op, linear_first, linear, other, site, found) -> None:
    from torch2pypto.translator.engine.regions import Region  # regions calls this module

    attempt, bound = linear
    params: dict[str, Param] = {}
    x, w, b = (_param(finder, params, bound.get(p), r) for p, r in (("input", ROWS), ("weight", WEIGHT), ("bias", BIAS)))
    literal = type(_literal(other)) in (int, float)
    kinds = (epilogue.NUMBER,) if literal else (epilogue.TENSOR, epilogue.NUMBER)  # a name's: the wrapper checks
    value = _param(finder, params, other, "number" if literal else OTHER)
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


def _unique(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken or name in _RESERVED:
        name, k = f"{base}_{k}", k + 1
    return name


def _match(finder, activated: ast.expr, other: ast.expr):
    """(activation attempt, its kind, gate's (attempt, bound), up's) if ``activated`` is act(L1(x))
    and ``other`` L2(x), else None."""
    act = _activation(finder, activated)
    if act is None:
        return None
    gate, up = _linear(finder, activated.args[0]), _linear(finder, other)
    if gate is None or up is None or _text(finder, gate[1]["input"]) != _text(finder, up[1]["input"]):
        return None
    return (*act, gate, up)


def _activation(finder, node: ast.expr):
    """(attempt, kind) if ``node`` is a call of one argument of an activation: a table function a
    kernel computes (kind its name) or a module (kind None: read at run time)."""
    if type(node) is not ast.Call or len(node.args) != 1 or node.keywords or type(node.args[0]) is ast.Starred:
        return None
    act = finder.at.get(finder.lines.span(node))
    if act is None:
        return None
    found = act.resolved
    if found.api in _REGISTRIES and _dotted(node.func):  # ACT2FN[config.hidden_act]: decided or not
        return act, None
    if act.status or found.entry is None:
        return None
    if found.held is None and found.entry.op in gated.FUNCTIONS:
        return act, gated.FUNCTIONS[found.entry.op]
    if found.held is not None and found.entry.op in gated.MODULE_OPS and _dotted(node.func):
        return act, None
    return None


def linear_activation(finder, node: ast.expr, found) -> bool:
    """Whether ``node`` is ``act(linear(x, w, b))`` (bart's ``self.activation_fn(self.fc1(h))``);
    if so, its region is added to ``found``."""
    act = _activation(finder, node)
    linear = _linear(finder, node.args[0]) if act is not None else None
    if linear is None:
        return False
    from torch2pypto.translator.engine.regions import Region  # regions calls this module

    (attempt, kind), (site, bound) = act, linear
    params: dict[str, Param] = {}
    act_param = _param(finder, params, node.func, MODULE) if kind is None else None
    x, w, b = (_param(finder, params, bound.get(p), r) for p, r in (("input", ROWS), ("weight", WEIGHT), ("bias", BIAS)))
    torch_source = f"return {act_param or attempt.resolved.api}(torch.nn.functional.linear({x}, {w}, {b or 'None'}))\n"
    attempts = [site, attempt]
    wrapper = name_of(finder.function.name, torch_source, len(attempts))
    where = f"{finder.function.name}'s linear epilogue"
    names = [p.name for p in params.values()]
    definitions = epilogue.activation_definitions(wrapper, where, kind, act_param, names, torch_source, (x, w, b), site.resolved.entry)
    ops = ("linear", kind or _text(finder, node.func))
    kernel = epilogue.activation_kernel(kind, False) if kind else "linear_<activation>_kernel"
    _record(finder, node, attempts, wrapper, Region, ops, kernel, params, ("linear", *([kind] if kind else [])), definitions, found)
    return True


def _param(finder, params: dict, node: ast.expr | None, role: str) -> str | None:
    """The wrapper parameter passing ``node`` (one per source text), None for no value."""
    if node is None or type(node) is ast.Constant and node.value is None:
        return None
    source = _text(finder, node)
    if source not in params:
        taken = {p.name for p in params.values()}
        params[source] = Param(_name(node, taken) if _dotted(node) else _unique("other", taken), role, source)
    return params[source].name


def _record(finder, node, attempts, wrapper, Region, ops, kernel, params, entries, definitions, found) -> None:
    """Mark the sites converted; the region, its call's edit and its definitions."""
    span = finder.lines.span(node)
    start, end = finder.lines.offset(*span[:2]), finder.lines.offset(*span[2:])
    for a in attempts:
        a.status, a.reason, a.pypto_api = CONVERTED, "", f"{wrapper} (fused)"
    found.regions.append(Region(finder.path, span, finder.function.name, ops, wrapper, kernel, tuple(params.values()), entries))
    found.edits.append((start, end, f"{wrapper}({', '.join(p.source for p in params.values())})"))
    found.definitions.extend((start, d) for d in definitions)


def _linear(finder, node: ast.expr):
    """(attempt, bound arguments) of a pending linear site whose operands are names or attributes."""
    if type(node) is not ast.Call:
        return None
    attempt = finder.pending.get(finder.lines.span(node))
    entry = attempt.resolved.entry if attempt is not None else None
    if entry is None or entry.op != "linear" or attempt.resolved.method:
        return None
    try:
        bound = bind(entry.params, ast_args(node) + ast_held(node, attempt.resolved.held), None, entry.aliases)
    except BindError:
        return None
    if not all(_dotted(v) or type(v) is ast.Constant and v.value is None for v in bound.values()) or type(bound["input"]) is ast.Constant:
        return None
    return attempt, bound


def _emit(finder, node: ast.BinOp, activated_node: ast.Call, mul, act, kind, gate, up, found) -> None:
    from torch2pypto.translator.engine.regions import Region  # regions calls this module

    params: dict[str, Param] = {}  # source -> parameter
    act_param = _param(finder, params, activated_node.func, MODULE) if kind is None else None
    x = _param(finder, params, gate[1]["input"], ROWS)
    names = [(_param(finder, params, b["weight"], WEIGHT), _param(finder, params, b.get("bias"), BIAS)) for _, b in (gate, up)]
    linear = [f"torch.nn.functional.linear({x}, {w}, {b or 'None'})" for w, b in names]
    activated = f"{act_param or act.resolved.api}({linear[0]})"
    expression = f"{activated} * {linear[1]}" if activated_node is node.left else f"{linear[1]} * {activated}"
    torch_source = f"return {expression}\n"
    attempts = [gate[0], up[0], act, mul]
    wrapper = name_of(finder.function.name, torch_source, len(attempts))
    spec = gated.Gated(act_param, x, (names[0][0], names[1][0]), (names[0][1], names[1][1]), kind)
    where = f"{finder.function.name}'s gated pair"
    definitions = gated.definitions(wrapper, where, spec, [p.name for p in params.values()], torch_source, gate[0].resolved.entry)
    ops = ("linear", kind or _text(finder, activated_node.func), "linear", "x * y")
    kernel = f"gated_{kind}_kernel" if kind else "gated_<activation>_kernel"
    _record(finder, node, attempts, wrapper, Region, ops, kernel, params, tuple(op for op in ("linear", kind) if op), definitions, found)


def _text(finder, node: ast.expr) -> str:
    if not hasattr(node, "lineno"):  # a held module's attribute (binding.ast_held): module.attribute
        return f"{_text(finder, node.value)}.{node.attr}"
    span = finder.lines.span(node)
    return finder.text[finder.lines.offset(*span[:2]) : finder.lines.offset(*span[2:])]


def _name(node: ast.expr, taken: set[str]) -> str:
    """A parameter name from a leaf's source: ``self.gate_proj.weight`` -> gate_proj_weight."""
    parts = []
    while type(node) is ast.Attribute:
        parts.insert(0, node.attr)
        node = node.value
    if type(node) is ast.Name and node.id != "self":
        parts.insert(0, node.id)
    base = "_".join(parts[-2:]) if len(parts) > 1 and parts[-1] in (WEIGHT, BIAS) else parts[-1] if parts else "arg"
    return _unique(base if base.isidentifier() and not base.startswith("_") else "arg", taken)


def _dotted(node: ast.expr) -> bool:
    """A name or an attribute of one (no call, no subscript): read twice, it gives the same value."""
    if not hasattr(node, "lineno") and type(node) is ast.Attribute:
        return _dotted(node.value)
    while type(node) is ast.Attribute:
        node = node.value
    return type(node) is ast.Name
