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

A residual add after a submodule whose forward returns a linear (llama's ``h = self.mlp(h)`` then
``h = residual + h``, :func:`submodule_epilogue`): the add in that linear's epilogue, the forward's
gated pair (found in its own function, ``regions.Fused.calls``) run before it, both read from the
submodule. One call of a wrapper of :func:`torch2pypto.rules.epilogue.submodule_definitions`.

A row region right before that pair runs as the prologue of the gated kernel: :mod:`prologues`.
"""

from __future__ import annotations

import ast
import dataclasses

from torch2pypto.rules import epilogue, gated
from torch2pypto.rules.fusion import name_of
from torch2pypto.rules.tile_program import ROWS, Param
from torch2pypto.translator.engine.binding import BindError, ast_args, ast_held, bind
from torch2pypto.translator.engine.linears import BACK_BIAS, BACK_WEIGHT, BIAS, MODULE, OTHER, SQUARE_WEIGHT, WEIGHT, dotted, find_activation, find_linear, source_text, unique_name, wrapper_param
from torch2pypto.translator.engine.report import CONVERTED
from torch2pypto.translator.engine.syntax import comments_above



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
    found.calls[finder.lines.span(node)] = (wrapper, tuple(params.values()), definitions, spec)


def submodule_epilogue(finder, statements: list[ast.stmt], i: int, found) -> int:
    """How many statements from ``i`` (0 or 2) are ``h = self.mlp(x)`` then ``out = residual + h``
    (either order), where ``self.mlp`` always holds an instance of a class of the module whose
    forward of one parameter returns a linear (``return self.down_proj(...)``, or bound to a name
    that it returns) of that parameter or of the gated pair its own region made: the residual add
    goes into that linear's epilogue, unless the add starts a row region of more ops (an add and the
    norm after it are one kernel already). One wrapper call assigns ``out``; it runs the forward's
    gated kernel and then the linear's with the add in its epilogue unless the call would run more
    than that class's forward (``_inlined``), where it runs the statements as written."""
    if i + 1 >= len(statements):
        return 0
    first, second = statements[i], statements[i + 1]
    call = _assigned(first)
    value = _assigned(second)
    if call is None or value is None or type(call) is not ast.Call or type(value) is not ast.BinOp or type(value.op) is not ast.Add:
        return 0
    cls = finder.sites.inference.held_class(call.func)
    if cls is None or len(call.args) != 1 or call.keywords or not dotted(call.args[0]):
        return 0
    name = first.targets[0].id
    if {name, second.targets[0].id} & finder.declared:
        return 0  # global or nonlocal: the statements bind it there
    sides = [(value.left, value.right), (value.right, value.left)]
    side = next(((h, o) for h, o in sides if _result(finder, h, name) is not None and dotted(o) and not _reads(o, name)), None)
    other, dropout = (side[1], _result(finder, side[0], name) or None) if side is not None else (None, None)
    add = finder.pending.get(finder.lines.span(value))
    if other is None or add is None or name != second.targets[0].id and _read_after(finder, name, first, second):
        return 0
    inlined = _forward_linear(finder, cls)
    if inlined is None:
        return 0
    later = finder.run(statements, i + 1)
    if later is not None and len(later[1].program.ops) > 1:
        return 0  # the add starts a row region (deimv2's add + norm): as many launches either way
    linear, bound, parameter, inner = inlined
    gated_call = found.calls.get(finder.lines.span(inner)) if not (type(inner) is ast.Name and inner.id == parameter) else None
    if gated_call is None and not (type(inner) is ast.Name and inner.id == parameter):
        return 0
    return _emit_submodule(finder, (first, second), call, cls, other, value, add, bound, parameter, gated_call, dropout, found)


def _result(finder, node: ast.expr, name: str):
    """() if ``node`` reads ``name``; the module if it is ``self.drop(name)`` of a held nn.Dropout
    (phi3's ``self.resid_mlp_dropout(hidden_states)``); else None."""
    if type(node) is ast.Name:
        return () if node.id == name else None
    if type(node) is not ast.Call or len(node.args) != 1 or node.keywords or type(node.args[0]) is not ast.Name or node.args[0].id != name:
        return None
    site = finder.at.get(finder.lines.span(node))
    held = site.resolved.held if site is not None else None
    if held is None or site.resolved.entry is None or site.resolved.entry.op != "dropout" or not dotted(node.func) \
            or source_text(finder, node.func).partition(".")[0] != "self":
        return None
    return node.func


def _assigned(statement: ast.stmt) -> ast.expr | None:
    """The value of ``name = <expr>``, else None."""
    if type(statement) is not ast.Assign or len(statement.targets) != 1 or type(statement.targets[0]) is not ast.Name:
        return None
    return statement.value


def _reads(node: ast.expr, name: str) -> bool:
    return any(type(n) is ast.Name and n.id == name for n in ast.walk(node))


def _read_after(finder, name: str, first: ast.stmt, second: ast.stmt) -> bool:
    """Whether the function reads ``name`` anywhere but in ``second`` (after ``first``, in a loop
    around them, or in a nested function)."""
    inside = {id(n) for n in ast.walk(second)}
    end = (first.end_lineno, first.end_col_offset)
    return any(
        n.id == name and id(n) not in inside and ((n.lineno, n.col_offset) > end or id(n) in finder.loop or id(n) in finder.deferred)
        for n in finder.loads
    )


def _forward_linear(finder, cls: ast.ClassDef):
    """(the linear's attempt, its bound arguments, the forward's parameter, what it projects) if
    ``cls``'s forward takes one parameter and returns a linear of a held nn module, written
    ``return linear(...)`` or ``v = linear(...); return v``, or after a chunked gated pair
    (:mod:`halves`, phi3's: what it projects is then the pair's product), whose weight and bias are
    ``self`` attributes; else None."""
    inference = finder.sites.inference
    forward = inference.method(cls, "forward")
    if forward is None or inference.method(cls, "__call__") is not None or forward.decorator_list:
        return None
    args = forward.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults or len(args.args) != 2:
        return None
    body = forward.body[1:] if type(forward.body[0]) is ast.Expr and type(forward.body[0].value) is ast.Constant else forward.body
    if len(body) == 2 and _assigned(body[0]) is not None and type(body[1]) is ast.Return and type(body[1].value) is ast.Name \
            and body[1].value.id == body[0].targets[0].id:
        node = body[0].value
    elif len(body) == 1 and type(body[0]) is ast.Return:
        node = body[0].value
    elif len(body) == 4 and all(type(s) is ast.Assign for s in body[:2]) and _assigned(body[2]) is not None and type(body[3]) is ast.Return:
        node = body[3].value  # the chunked pair's three statements, then the linear of its product
    else:
        return None
    attempt = finder.pending.get(finder.lines.span(node)) if type(node) is ast.Call else None
    entry = attempt.resolved.entry if attempt is not None else None
    if entry is None or entry.op != "linear" or attempt.resolved.method or attempt.resolved.held is None:
        return None
    try:
        bound = bind(entry.params, ast_args(node) + ast_held(node, attempt.resolved.held), None, entry.aliases)
    except BindError:
        return None
    if not all(_self_rooted(bound[p]) for p in ("weight", "bias") if p in bound) or "input" not in bound:
        return None
    if len(body) == 4:
        if type(bound["input"]) is not ast.Name or bound["input"].id != body[2].targets[0].id:
            return None
        return attempt, bound, args.args[1].arg, body[2].value
    return attempt, bound, args.args[1].arg, bound["input"]


def _self_rooted(node: ast.expr) -> bool:
    while type(node) is ast.Attribute:
        node = node.value
    return type(node) is ast.Name and node.id == "self"


def _emit_submodule(finder, statements, call, cls, other, value, add, bound, parameter, gated_call, dropout, found) -> int:
    from torch2pypto.translator.engine.regions import Region  # regions calls this module

    if cls.name in {n.id for n in ast.walk(finder.function) if type(n) is ast.Name and type(n.ctx) is not ast.Load} \
            | {a.arg for a in ast.walk(finder.function.args) if type(a) is ast.arg}:
        return 0  # the class's name is a local where it is called
    params: dict[str, Param] = {}
    x = wrapper_param(finder, params, call.args[0], ROWS)
    residual = wrapper_param(finder, params, other, ROWS)
    module = wrapper_param(finder, params, call.func, MODULE)
    kind = unique_name(cls.name, {p.name for p in params.values()})
    params[f"class {cls.name}"] = Param(kind, "class", cls.name)
    drop = wrapper_param(finder, params, dropout, MODULE) if dropout is not None else None
    if drop is not None and drop in (x, residual, module):
        return 0

    def outer(source: str) -> str | None:  # a value of the forward, as the wrapper reads it
        if source == "self" or source.startswith("self."):
            return module + source.removeprefix("self")
        return x if source == parameter else None

    if gated_call is None:
        inner, definitions, needs, inner_params, pair_args = x, (), (), (), ()
    else:
        wrapper, inner_params, definitions, _ = gated_call
        read = pair_args = tuple(outer(p.source) for p in inner_params)
        if None in read:
            return 0
        inner, needs = f"{wrapper}({', '.join(read)})", (wrapper,)
    linear = outer(source_text(finder, bound["weight"])), outer(source_text(finder, bound["bias"])) if "bias" in bound else None
    derived = _derived(params, inner_params, outer, linear, gated_call is not None)
    linear_first = value.left is not other
    where = f"{finder.function.name}'s residual add in {cls.name}.forward's linear"
    called = f"{drop}({module}({x}))" if drop else f"{module}({x})"
    torch_source = f"return {called} + {residual}\n" if linear_first else f"return {residual} + {called}\n"
    attempts = [add]  # a dropout stays the host's (seen through in eval), as the table says
    name = name_of(finder.function.name, f"{cls.name}\n{torch_source}", len(attempts), needs)  # the gated pair's wrapper: its own kernel
    definitions = (*definitions, *epilogue.submodule_definitions(
        name, where, [p.name for p in params.values()], torch_source, (x, residual, module, kind), inner, linear, linear_first, needs, drop))
    first, last = statements
    span = finder.lines.span(first)[:2] + finder.lines.span(last)[2:]
    start, end = finder.lines.offset(*span[:2]), finder.lines.offset(*span[2:])
    for a in attempts:
        a.status, a.reason, a.pypto_api = CONVERTED, "", f"{name} (fused)"
    ops = (f"{cls.name}.forward", *(["dropout"] if drop else []), "linear", "x + y")
    found.regions.append(Region(finder.path, span, finder.function.name, ops, name, epilogue.kernel_name("add", epilogue.TENSOR, False),
                                (*params.values(), *derived.values()), ("linear", "add"), None, ((module, kind),),
                                tuple((p.name, p.source) for p in derived.values())))
    indent = finder.text[finder.lines.offset(span[0], 0) : start]
    new = comments_above(finder.text[start:end], indent)
    found.edits.append((start, end, new + f"{last.targets[0].id} = {name}({', '.join(p.source for p in params.values())})"))
    found.definitions.extend((start, d) for d in definitions)
    if gated_call is not None:
        epilogue_call = f"{name.rpartition('_')[0]}_epilogue_1sites({{x}}, {', '.join(r for r in linear if r)}, {{residual}})"
        found.submodules[start] = Submodule(name, tuple(params.values()), gated_call, pair_args, epilogue_call)
    return 2


def _derived(params: dict, inner_params, outer, linear, gated: bool) -> dict[str, Param]:
    """What a wrapper reads from the submodule (its gated pair's ``self`` operands, the linear's
    weight and bias), for --verify's instance of its class: parameters by what they read."""
    derived: dict[str, Param] = {}
    back = (BACK_WEIGHT if gated else SQUARE_WEIGHT, BACK_BIAS)
    for kind_of, read in [*((p.kind, outer(p.source)) for p in inner_params if p.source.startswith("self.")), *zip(back, linear)]:
        if read is not None and read not in derived:
            taken = {p.name for p in (*params.values(), *derived.values())}
            derived[read] = Param(unique_name(read.rpartition(".")[0].rpartition(".")[2] + "_" + read.rpartition(".")[2]
                                              if read.count(".") > 1 else read.rpartition(".")[2], taken), kind_of, read)
    return derived


@dataclasses.dataclass(frozen=True)
class Submodule:
    """A submodule epilogue's call (:func:`submodule_epilogue`) whose forward makes a gated pair:
    its wrapper and parameters (x, the residual, the submodule, its class), the pair's call
    (``Fused.calls``) and the pair's arguments as the wrapper reads them, and the epilogue's
    call of the pair's result ``{x}`` and ``{residual}``."""

    wrapper: str
    params: tuple[Param, ...]
    pair: tuple
    read: tuple[str, ...]
    epilogue: str
