"""Lowering: a region's Python expressions as one tile program (:class:`Built`).

Each value of a region's statements becomes an operand of the program of
:mod:`torch2pypto.rules.tile_program`: a leaf (a tensor name or ``self`` attribute the inference knows,
a Python number, a host-side call in the region's first statement), or an op whose family's
``fuse`` hook applies its steps (elementwise, cast, composite, reduction, last-dim slices and
cats), with helpers of the class or the module and the forward of submodules of the module's
classes inlined. What no kernel can carry raises :class:`Unfusible`, and :mod:`regions` tries a
shorter run.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
from typing import TYPE_CHECKING

from torch2pypto.mapping import Entry
from torch2pypto.rules import composite, elementwise, reduction
from torch2pypto.rules.steps import Apply
from torch2pypto.rules.tile_program import INDEX, ROWS, VECTOR, Operand, Output, Param, Program, Unfusible, static_dtype
from torch2pypto.schema.family import family
from torch2pypto.translator.engine.binding import BindError, ast_args, bind
from torch2pypto.translator.engine.inference import TENSOR
from torch2pypto.translator.engine.scopes import children, walk

if TYPE_CHECKING:
    from torch2pypto.translator.engine.regions import Context, Finder

_INFIX = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow"}
_COMPARE = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_INLINE_DEPTH = 4
OPERATORS = (ast.BinOp, ast.UnaryOp, ast.Compare)
_NO_LITERAL = frozenset({ast.Name, ast.Attribute, ast.Subscript, ast.Compare, ast.BoolOp, ast.IfExp, ast.Lambda, ast.NamedExpr, ast.Starred})


@functools.lru_cache(maxsize=256)
def _locals(function: ast.FunctionDef) -> frozenset[str]:
    """The names a function binds: its parameters and the names it stores."""
    arguments = function.args
    names = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg) if a}
    return frozenset(names | {n.id for n in own_nodes(function) if type(n) is ast.Name and type(n.ctx) is not ast.Load})


def candidate(statement: ast.stmt) -> bool:
    """``name = <expr>`` (``residual = hidden_states`` too: a second name of a region's value),
    ``a, b = <expr>, <expr>`` (phi3's ``q_rot, q_pass = q[..., :n], q[..., n:]``: two bindings) or
    ``return <expr>``."""
    if type(statement) is ast.Assign:
        return len(statement.targets) == 1 and bool(bindings(statement))
    return type(statement) is ast.Return and statement.value is not None and type(statement.value) is not ast.Name


def bindings(statement: ast.Assign) -> list[tuple[str, ast.expr]]:
    """The names an assignment ``name = v`` or ``a, b = v, w`` binds and their expressions (all
    evaluated before any is bound, as Python does); none for another assignment."""
    target, value = statement.targets[0], statement.value
    if type(target) is ast.Name:
        return [(target.id, value)]
    if type(target) is ast.Tuple and type(value) is ast.Tuple and len(target.elts) == len(value.elts) and target.elts \
            and all(type(t) is ast.Name for t in target.elts) and len({t.id for t in target.elts}) == len(target.elts) \
            and not any(type(v) is ast.Starred for v in value.elts):
        return [(t.id, v) for t, v in zip(target.elts, value.elts)]
    return []


def assigned_names(statements) -> set[str]:
    """The names assignments among ``statements`` bind."""
    return {name for s in statements if type(s) is ast.Assign for name, _ in bindings(s)}


@dataclasses.dataclass(frozen=True)
class Dtype:
    """A helper's local holding a tensor's dtype (``input_dtype = x.dtype``): its kernel symbol."""

    symbol: str
    is_tile = False


class Built:
    """One attempt at a region: the program, the values its names hold, the parameters' leaves."""

    def __init__(self, finder: Finder, statements) -> None:
        self.finder = finder
        self.statements = statements
        self.program = Program()
        self.env: dict[str, Operand] = {}
        self.assigned: dict[str, Operand] = {}
        self.returned: Operand | None = None
        self.outputs: list[Output] = []
        self.attempts = []
        self.entries: list[str] = []  # the table ops applied
        self.by_source: dict[str, object] = {}  # leaf source -> Param
        self.replacements: dict[tuple[int, int], tuple[int, int, str]] = {}  # leaf span -> text in the fallback
        self.depth = 0
        self.first = True  # building the region's first statement
        self.inlined: list[ast.FunctionDef] = []  # the helpers being inlined, innermost last
        self.module: Param | None = None  # the submodule whose forward is being inlined (its ``self``)
        self.contexts: list[Context] = []  # the pending sites and inference of each helper's chunk
        self.earlier: dict = {}  # a later group of a grouped region (groups.py): the earlier groups' wrapper parameters by source

    # --- leaves ----------------------------------------------------------------------------

    def _source(self, node: ast.AST) -> str:
        lines = self.finder.lines
        span = lines.span(node)
        return self.finder.text[lines.offset(*span[:2]) : lines.offset(*span[2:])]

    def _leaf(self, node: ast.expr, kind: str, name: str):
        """The parameter a leaf expression is passed as (one per distinct source text); an
        attribute of an inlined submodule's ``self`` is read from the submodule by the wrapper."""
        source = self._source(node)
        module = self.module if self.module is not None and _self_rooted(node) else None
        if module is not None:
            source = module.source + source.removeprefix("self")
        param = self.by_source.get(source)
        if param is None:
            param = self._param(name, kind, source)
            self.by_source[source] = param
            if module is not None:
                self.program.derived[param.name] = module.name + source.removeprefix(module.source)
        elif param.kind == "like" and kind in (ROWS, VECTOR):
            upgraded = dataclasses.replace(param, kind=kind)
            self.program.params[self.program.params.index(param)] = upgraded
            self.by_source[source] = param = upgraded
        elif param.kind != kind and not (kind == "like" and param.kind in (ROWS, VECTOR)):
            raise Unfusible(f"{source} is both a {param.kind} and a {kind}")
        if self.depth == 0:
            self._replace(node, self.program.aliases.get(param.name, param.name))
        return param

    def _param(self, name: str, kind: str, source: str):
        """A new parameter; in a later group of a grouped region, one of a source an earlier group
        passes too is the wrapper's parameter once: a ``self``, callee, number or dtype that one,
        a tensor its own (of its own window), spelt as that one in the fallback."""
        earlier = self.earlier.get(source)
        if earlier is not None and kind == earlier.kind and kind in ("self", "callee", "number", INDEX, "dtype"):
            return earlier
        param = self.program.param(name, kind, source) if kind != "callee" else self.program.callee(name)
        if earlier is not None:
            self.program.aliases[param.name] = earlier.name
        return param

    def _replace(self, node: ast.AST, text: str) -> None:
        lines = self.finder.lines
        span = lines.span(node)
        self.replacements[(lines.offset(*span[:2]), lines.offset(*span[2:]))] = text

    def _reads_region(self, node: ast.expr, env) -> bool:
        return any(type(n) is ast.Name and n.id in env for n in walk(node))

    def _number(self, node: ast.expr, env) -> Operand | None:
        """A Python number: a literal, or an expression of no tensor (checked at run time)."""
        value = _literal(node, failed=None)
        if type(value) in (int, float):
            return Program.literal(value)
        if value is not None or self.depth and not _self_rooted(node):
            return None
        nodes = self.finder.nodes(node)
        if any(type(n) is ast.Name and n.id in env for n in nodes):
            return None  # reads the region
        if any(isinstance(n, (ast.Call, ast.Subscript, ast.Lambda, ast.NamedExpr)) for n in nodes):
            return None
        if any(self.finder.lines.span(n) in self.pending for n in nodes if isinstance(n, OPERATORS)):
            return None  # an operator on a tensor (x == m, where m may be one): no number
        if self.inference.kind(node) == TENSOR:
            return None
        name = node.attr if type(node) is ast.Attribute else node.id if type(node) is ast.Name else "number"
        return Operand(self._leaf(node, "number", name).name)

    def _tensor(self, node: ast.expr, env) -> Operand | None:
        """A tensor leaf: a name or a (``self``) attribute the inference knows to be a tensor."""
        if type(node) not in (ast.Name, ast.Attribute) or self._reads_region(node, env):
            return None
        if type(node) is ast.Attribute and not _dotted(node):
            return None
        if self.inference.kind(node) != TENSOR:
            return None
        if self.depth and not _self_rooted(node):
            return None  # a helper's own names are its parameters, bound by the caller
        kind = VECTOR if type(node) is ast.Attribute else ROWS
        name = node.attr if type(node) is ast.Attribute else node.id
        return self.program.tensor(self._leaf(node, kind, name))

    @property
    def pending(self) -> dict:
        """The pending call sites of the chunk whose code is being read (a helper's may be another)."""
        return self.contexts[-1].pending if self.contexts else self.finder.pending

    @property
    def inference(self):
        return self.contexts[-1].inference if self.contexts else self.finder.sites.inference

    _STATE = ("program", "by_source", "replacements", "attempts", "entries")

    def _state(self):
        return copy.deepcopy({name: getattr(self, name) for name in self._STATE if name != "attempts"}) | {"attempts": list(self.attempts)}

    def _restore(self, state) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def _opaque(self, node: ast.expr, env) -> Operand | None:
        """A call or a subscript that gives a tensor and writes none (its calls: host-side torch
        calls such as views, ``size``, and the module's functions that write nothing): it runs on
        the host as written, where the region's call stands, and its result is a rows operand.
        Only in the region's first statement, so that nothing the region computes runs before it;
        each one its own operand."""
        if self.depth or not self.first:
            return None
        nodes = self.finder.nodes(node)
        if any(type(n) is ast.Name and n.id in env for n in nodes):
            return None  # reads the region
        if type(node) is ast.Call and self.inference.self_method(node.func) is not None:
            return None
        if any(self.finder.lines.span(n) in self.pending for n in nodes if isinstance(n, (*OPERATORS, ast.Call, ast.Subscript))):
            return None
        if any(isinstance(n, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)) for n in nodes):
            return None
        if not all(self._writes_nothing(n) for n in nodes if type(n) is ast.Call):
            return None
        if self.inference.kind(node) != TENSOR:
            return None
        func = node.func if type(node) is ast.Call else node.value
        name = func.attr if type(func) is ast.Attribute else func.id if type(func) is ast.Name else "value"
        param = self._param(name, ROWS, self._source(node))
        self._replace(node, self.program.aliases.get(param.name, param.name))
        return self.program.tensor(param)

    def _writes_nothing(self, call: ast.Call, depth: int = 0) -> bool:
        """Whether a call surely writes no tensor: a host-side torch call, a shape query, or a
        function of the module whose body writes nothing and calls only such calls."""
        if self.finder.lines.span(call) in self.finder.host:
            return True
        func = call.func
        if type(func) is ast.Attribute and func.attr in _QUERIES:
            return True
        helper = self.module_function(func) if depth < _INLINE_DEPTH else None
        nodes = own_nodes(helper) if helper is not None else ()
        if helper is None or any(isinstance(n, _WRITES) for n in nodes):
            return False
        if any(isinstance(n, (ast.Attribute, ast.Subscript)) and type(n.ctx) is not ast.Load for n in nodes):
            return False
        return all(self._inner_writes_nothing(n, depth + 1) for n in nodes if type(n) is ast.Call)

    def _inner_writes_nothing(self, call: ast.Call, depth: int) -> bool:
        """A call in a helper: as :meth:`_writes_nothing`, a method or torch function that is not an
        in-place one (``torch.cat``, ``x.neg()``; not ``x.add_(...)`` nor ``out=``), or a builtin."""
        func = call.func
        if any(k.arg == "out" for k in call.keywords):
            return False
        if type(func) is ast.Attribute:
            return not func.attr.endswith("_")
        return type(func) is ast.Name and func.id in _BUILTINS or self._writes_nothing(call, depth)

    # --- expressions -----------------------------------------------------------------------

    def value(self, node: ast.expr, env) -> Operand:
        kind = type(node)
        if kind is ast.Name and node.id in env:
            if type(env[node.id]) is Dtype:
                raise Unfusible(f"{node.id} is a dtype")
            return env[node.id]
        if kind is ast.Attribute and node.attr == "dtype" and self.depth:
            return Dtype(self.dtype_of(node.value, env))
        for leaf in (self._tensor, self._number):
            found = leaf(node, env)
            if found is not None:
                return found
        if kind is ast.BinOp and type(node.op) in _INFIX:
            return self.operator(node, self.elementwise(_INFIX[type(node.op)], [node.left, node.right], env))
        if kind is ast.UnaryOp and type(node.op) is ast.USub:
            return self.operator(node, self.elementwise("neg", [node.operand], env))
        if kind is ast.Compare and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return self.operator(node, self.elementwise(_COMPARE[type(node.ops[0])], [node.left, node.comparators[0]], env))
        if kind is ast.Subscript and _last_dim_slice(node):
            return self.slice(node, env)
        inliners = (
            (self.module_function, lambda helper: self.inline(node, helper, env, method=False)),
            (self.inference.held_class, lambda cls: self.inline_module(node, cls, env)),
        ) if kind is ast.Call else ()
        for find, inline in inliners:  # a helper of the module, or a submodule's forward
            target = find(node.func)
            if target is None:
                continue
            saved = self._state()
            try:
                return inline(target)
            except Unfusible:
                if self.depth:
                    raise
                self._restore(saved)  # it may still be an operand computed on the host
        if kind in (ast.Call, ast.Subscript):
            opaque = self._opaque(node, env)
            if opaque is not None:
                return opaque
        if kind is ast.Call:
            return self.call(node, env)
        raise Unfusible(f"{ast.dump(node)[:40]} is no op of a row kernel")

    def operator(self, node: ast.expr, result: Operand) -> Operand:
        """An infix operator's result; the operator's site, written in the region, is the region's."""
        attempt = self.pending.get(self.finder.lines.span(node)) if self.depth == 0 else None
        if attempt is not None:
            self.attempts.append(attempt)
        return result

    def entry(self, op: str) -> Entry:
        entry = self.finder.sites.table.entries.get(op)
        if entry is None or not self.finder.sites.options.selects(entry.apis[0], entry):
            raise Unfusible(f"{op} is not part of the run")
        self.entries.append(entry.op)
        return entry

    def elementwise(self, op: str, nodes: list[ast.expr], env, entry: Entry | None = None) -> Operand:
        """An elementwise entry's step on its operands (an infix operator is its entry's)."""
        infix = entry is None
        entry = entry or self.entry(op)
        values = [self.value(n, env) if n is not None else None for n in nodes]
        names = [p.name for p in elementwise.operands(entry)]
        if len(values) != len(names) or None in values:
            raise Unfusible(f"{op} takes {len(names)} operands")
        if not values[0].is_tile:
            if entry.fields.commutative:
                values = values[::-1]
            elif op == "sub" and values[1].is_tile and infix:  # 1 - x as -x + 1: the same single rounding
                negated = self.program.apply("neg", (Apply("result", elementwise.step(self.entry("neg")), ("input",)),), {"input": values[1]})
                self.program.ops.pop()  # one torch op, two steps
                values = [negated, values[0]]
                entry = self.entry("add")
            else:
                raise Unfusible(f"a Python number first in {op}")
        step = elementwise.step(entry)
        label = f"x {_SYMBOL[op]} y" if op in _SYMBOL else op
        return self.program.apply(
            label, (Apply("result", step, tuple(names)),), dict(zip(names, values)),
            fp32=entry.fields.compute == "float32", bools=entry.fields.bool_operands, result=entry.fields.output,
            dtypes=entry.dtypes,
        )

    def slice(self, node: ast.Subscript, env) -> Operand:
        """``x[..., a:b]``: a view of x's tile, its bounds kernel expressions of cols."""
        value = self.value(node.value, env)
        part = node.slice.elts[1]
        start = self.bound(part.lower, env, value.width) if part.lower is not None else "0"
        stop = self.bound(part.upper, env, value.width) if part.upper is not None else value.width
        return self.program.slice(value, start, stop)

    def bound(self, node: ast.expr, env, width: str) -> str:
        """A slice bound as a kernel expression: ints, +, -, *, // and the last dim of region values."""
        literal = _literal(node)
        if type(literal) is int:
            return str(literal) if literal >= 0 else f"{width} - {-literal}"
        if type(node) is ast.BinOp and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv):
            symbol = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//"}[type(node.op)]
            left, right = (self.bound(n, env, width) for n in (node.left, node.right))
            return f"{_group(left)} {symbol} {_group(right)}"
        shaped = node.value.value if type(node) is ast.Subscript and type(node.value) is ast.Attribute and node.value.attr == "shape" else None
        if type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr == "size" and len(node.args) == 1 and not node.keywords:
            shaped, literal = node.func.value, _literal(node.args[0])
        elif shaped is not None:
            literal = _literal(node.slice)
        if type(shaped) is ast.Name and shaped.id in env and env[shaped.id].role == ROWS and literal == -1:
            return env[shaped.id].width
        index = self._index(node, env)
        if index is not None:
            return index
        raise Unfusible("a slice bound of no int or last dim of the region's values")

    def _index(self, node: ast.expr, env) -> str | None:
        """A slice bound that is an int known at run time only (phi3's ``rotary_dim``, a name or a
        ``self`` attribute of no tensor): a factory int of the kernel; the wrapper checks its type."""
        if type(node) is ast.Name and node.id in env or type(node) not in (ast.Name, ast.Attribute):
            return None
        if type(node) is ast.Attribute and not (_dotted(node) and _self_rooted(node)) or self.depth and not _self_rooted(node):
            return None
        if self.inference.kind(node) == TENSOR:
            return None
        return self.program.index(self._leaf(node, INDEX, node.attr if type(node) is ast.Attribute else node.id))

    def join(self, entry: Entry, bound, env) -> Operand:
        """``torch.cat((a, b, ...), dim=-1)`` of the region's tiles."""
        tensors = bound.get("tensors")
        if set(bound) - {"tensors", "dim"} or _literal(bound.get("dim")) != -1:
            raise Unfusible("a cat fuses along dim=-1")
        if type(tensors) not in (ast.Tuple, ast.List) or any(type(e) is ast.Starred for e in tensors.elts):
            raise Unfusible("a cat of no tuple or list written out")
        return self.program.concat(entry.op, [self.value(e, env) for e in tensors.elts])

    def call(self, node: ast.Call, env) -> Operand:
        helper = self.inference.self_method(node.func)
        if helper is not None:
            return self.inline(node, helper, env)

        attempt = self.pending.get(self.finder.lines.span(node))
        if attempt is None:
            raise Unfusible("a call that is no pending torch op")
        found, entry = attempt.resolved, attempt.resolved.entry
        self.entries.append(entry.op)
        if found.held is not None or found.wrapper:
            raise Unfusible("a module's or a wrapper's call")
        receiver = node.func.value if found.method else None
        try:
            bound = bind(entry.params, ast_args(node), receiver, entry.aliases)
        except BindError as exc:
            raise Unfusible(str(exc)) from None
        for name, reason in entry.reject.items():
            if name in bound and _literal(bound[name]) != entry.param(name).default:
                raise Unfusible(reason)
        result = family(entry.family).fuse(self, entry, bound, env) if entry.family else None
        if result is None:
            raise Unfusible(f"{entry.op} is of the {entry.family} family")
        if found.method is False and self.depth == 0 and node.func is not None:
            self._replace(node.func, found.api)  # the fallback spells the torch function fully
        if self.depth == 0:
            self.attempts.append(attempt)
        self.program.ops[-1] = found.api.removeprefix("torch.")
        return result

    def cast(self, entry: Entry, bound, env) -> Operand:
        value = self.value(bound["input"], env)
        extra = set(bound) - {"input", "dtype", "other", "arg1"}
        if extra:
            raise Unfusible(f"{', '.join(sorted(extra))} of a cast")
        if entry.fields.target:
            dtype = static_dtype(entry.fields.target)
        elif "other" in bound or ("arg1" in bound and self.inference.kind(bound["arg1"]) == TENSOR):
            dtype = self.dtype_of(bound.get("other", bound.get("arg1")), env)
        elif "dtype" in bound or "arg1" in bound:
            dtype = self.dtype_value(bound.get("dtype", bound.get("arg1")), env)
        else:
            raise Unfusible("a cast without a dtype")
        if dtype is None:
            raise Unfusible("a cast to a dtype the kernels do not take")
        return self.program.to(entry.op, value, dtype)

    def dtype_of(self, node: ast.expr, env) -> str:
        """The dtype symbol of a tensor (a region value, or a tensor read for its dtype only)."""
        if type(node) is ast.Name and node.id in env:
            return env[node.id].dtype
        if self._reads_region(node, env) or type(node) not in (ast.Name, ast.Attribute) or self.depth and not _self_rooted(node):
            raise Unfusible("the dtype of an expression")
        if self.inference.kind(node) != TENSOR:
            raise Unfusible("the dtype of no known tensor")
        name = node.attr if type(node) is ast.Attribute else node.id
        return self.program.tensor(self._leaf(node, "like", name)).dtype

    def dtype_value(self, node: ast.expr, env) -> str | None:
        if type(node) is ast.Name and type(env.get(node.id)) is Dtype:
            return env[node.id].symbol
        static = self.inference.static_dtype(node)
        if static is None:
            raise Unfusible("no dtype")
        if static != "?":
            return static_dtype(static)
        if type(node) is ast.Attribute and node.attr == "dtype":
            return self.dtype_of(node.value, env)
        if self._reads_region(node, env) or self.depth or type(node) not in (ast.Name, ast.Attribute):
            raise Unfusible("a dtype of the region")
        return self.program.dtype(self._leaf(node, "dtype", node.attr if type(node) is ast.Attribute else node.id))

    def reduce(self, entry: Entry, bound, env) -> Operand:
        if entry.fields.output or entry.pypto not in composite.REDUCERS or {"indices", "p"} & set(entry.fields.args) or set(bound) - {"input", "dim", "keepdim"}:
            raise Unfusible(f"{entry.op} is no plain row reduction")
        if _literal(bound.get("dim")) not in (-1, (-1,), [-1]) or _literal(bound.get("keepdim")) is not True:
            raise Unfusible("a reduction fuses along dim=-1 with keepdim=True")
        steps = reduction.program(entry)
        return self.program.apply(entry.op, steps, {"x_tile": self.value(bound["input"], env)}, fp32=True, dtypes=entry.dtypes)

    def composite(self, entry: Entry, bound, env) -> Operand:
        if entry.fields.channels or entry.fallback or entry.forward:
            raise Unfusible(f"{entry.op} reads one value per channel, or runs torch on values known at run time: its own kernel")
        cast = None  # softmax's dtype= casts the input first, as torch does
        if entry.fields.along:
            if entry.param(entry.fields.along).kinds != ("int",) or _literal(bound.get(entry.fields.along)) != -1:
                raise Unfusible(f"{entry.op} fuses along dim=-1")
            if bound.get("dtype") is not None and _literal(bound["dtype"]) is not None:
                cast = self.dtype_value(bound["dtype"], env)
                if cast is None:
                    raise Unfusible(f"{entry.op} with a dtype= the kernels do not take")
        choice = []
        for name, values in composite._choices(entry).items():
            given = _literal(bound[name]) if name in bound else entry.param(name).default
            if given not in values:
                raise Unfusible(f"{name}={given!r}")
            choice.append((name, given))
        tensors = [p.name for p in composite.operands(entry)]
        absent = frozenset(n for n in tensors if n not in bound)
        if any(entry.param(n).required for n in absent):
            raise Unfusible("a missing operand")
        steps = composite.program(entry, entry.parts, tuple(choice), absent)
        operands = {n: self.value(bound[n], env) for n in tensors if n not in absent}
        if cast is not None:
            operands = {n: self.program.cast(v, cast) for n, v in operands.items()}
        renames = {}
        for name in composite.constants(entry):
            given = bound.get(name)
            number = self._number(given, env) if given is not None else Program.literal(entry.param(name).default)
            if number is None or entry.param(name).default is None and given is None:
                raise Unfusible(f"{name} of {entry.op}")
            renames[name] = number.text
        if any(not v.is_tile for v in operands.values()):
            raise Unfusible(f"a Python number as an operand of {entry.op}")
        return self.program.apply(entry.op, steps, operands, fp32=True, renames=renames, dtypes=entry.dtypes)

    def module_function(self, func: ast.expr) -> ast.FunctionDef | None:
        """The module's function a call names, unless a name of the function written around the
        call binds it (a parameter or a local); one of another chunk of a module read in chunks
        comes with that chunk's sites and inference (:meth:`context_of`)."""
        found = self.finder.helpers.get(func.id) if type(func) is ast.Name else None
        helper = found() if callable(found) else found
        if helper is None:
            return None
        around = self.inlined[-1] if self.inlined else self.finder.function
        return None if func.id in _locals(around) else helper

    def inline(self, node: ast.Call, helper, env, method: bool = True) -> Operand:
        """A helper of the same class (``method``) or module called with tensors: its statements in
        the caller's kernel."""
        args = helper.args
        if node.keywords or any(type(a) is ast.Starred for a in node.args) or helper.decorator_list:
            raise Unfusible("a helper call with keywords or decorators")
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or len(args.args) != len(node.args) + method:
            raise Unfusible("a helper whose parameters the call does not fill one for one")
        if self.depth >= _INLINE_DEPTH:
            raise Unfusible("helpers nested too deep")
        scope = {a.arg: self.value(v, env) for a, v in zip(args.args[method:], node.args)}
        context = None if method else self.finder.contexts.get(id(helper))
        body = helper.body[1:] if _docstring(helper.body[0]) else helper.body
        if not body or type(body[-1]) is not ast.Return or not all(candidate(s) for s in body):
            raise Unfusible(f"{helper.name} is no straight line of tensor statements")
        self.depth += 1
        self.inlined.append(helper)
        self.contexts += [context] if context is not None else []
        try:
            for statement in body:
                if type(statement) is ast.Return:
                    value = self.value(statement.value, scope)
                    break
                values = [(name, self.value(node, scope)) for name, node in bindings(statement)]
                scope.update(values)
        finally:
            self.depth -= 1
            self.inlined.pop()
            if context is not None:
                self.contexts.pop()
        if not value.is_tile:
            raise Unfusible(f"{helper.name} returns no tensor")
        if not method:  # the fallback calls it: the wrapper takes it, as a kernels module does not define it
            if helper.name not in self.by_source:
                self.by_source[helper.name] = self._param(helper.name, "callee", helper.name)
        elif self.module is None and "self" not in self.by_source:  # a submodule's: the fallback calls the submodule
            self.by_source["self"] = self._param("self", "self", "self")
        return value

    def inline_module(self, node: ast.Call, cls: ast.ClassDef, env) -> Operand:
        """``self.norm(x)``, ``self.norm`` always an instance of the module's class ``cls``: its
        forward in the caller's kernel, ``self`` there the submodule. The wrapper takes the
        submodule and its class, reads the attributes the forward reads from it, and runs the
        fallback (which calls it) unless the call would run exactly that forward (_inlined)."""
        if self.module is not None:
            raise Unfusible("a submodule of an inlined submodule")
        forward = self.inference.method(cls, "forward")
        if forward is None or self.inference.method(cls, "__call__") is not None:
            raise Unfusible(f"{cls.name} has no forward of its own here, or a __call__")
        if cls.name in _locals(self.inlined[-1] if self.inlined else self.finder.function):
            raise Unfusible(f"{cls.name} is a local name where it is called")
        source = self._source(node.func)
        module = self.by_source.get(source)
        if module is None:
            module = self.by_source[source] = self.program.param(node.func.attr, "module", source)
            kind = self.by_source.get(f"class {cls.name}") or self.program.param(cls.name, "class", cls.name)
            self.by_source[f"class {cls.name}"] = kind
            self.program.modules.append((module.name, kind.name))
        if self.depth == 0:
            self._replace(node.func, module.name)
        self.module = module
        try:
            return self.inline(node, forward, env)
        finally:
            self.module = None

    # --- the fallback ----------------------------------------------------------------------

    def expression_source(self, start: int, end: int) -> str:
        """The returned expression as written, leaves spelt as the wrapper's parameters."""
        text = self.finder.text
        pieces, done = [], start
        for (a, b), new in sorted(self.replacements.items()):
            pieces += [text[done:a], new]
            done = b
        pieces.append(text[done:end])
        expression = "".join(pieces)
        return f"return ({expression})\n" if "\n" in expression or "\r" in expression else f"return {expression}\n"

    def fallback_source(self, start: int, end: int, indent: int) -> str:
        """The region's statements as written, leaves spelt as the wrapper's parameters."""
        text = self.finder.text
        begin = text.rfind("\n", 0, start) + 1
        pieces, done = [], begin
        for (a, b), new in sorted(self.replacements.items()):
            pieces += [text[done:a], new]
            done = b
        pieces.append(text[done:end])
        lines = []
        depth = 0
        for line in "".join(pieces).splitlines():
            if depth == 0 and (not line.strip() or line.strip().startswith("#")):
                continue
            lines.append(line[indent:] if depth == 0 and line[:indent].strip() == "" else line)
            depth = max(0, depth + sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}"))
        return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=256)
def own_nodes(function) -> tuple[ast.AST, ...]:
    """The nodes of a function, not those of functions and classes nested in it (walked once: its
    locals, its regions' checks and the inlining of its callers read them)."""
    nodes, stack = [], list(function.body)
    while stack:
        node = stack.pop()
        nodes.append(node)
        if not isinstance(node, (*FUNCTIONS, ast.ClassDef, ast.Lambda)):
            stack.extend(children(node))
    return tuple(nodes)


_QUERIES = frozenset({"size", "dim", "numel", "stride"})  # tensor methods that read shapes only
_BUILTINS = frozenset({"len", "int", "float", "min", "max", "abs", "range", "tuple", "list", "isinstance"})
_WRITES = (ast.Global, ast.Nonlocal, ast.AugAssign, ast.Delete, *FUNCTIONS, ast.ClassDef)


def _last_dim_slice(node: ast.Subscript) -> bool:
    """``x[..., a:b]`` (no step)."""
    index = node.slice
    return (type(index) is ast.Tuple and len(index.elts) == 2 and type(index.elts[0]) is ast.Constant
            and index.elts[0].value is Ellipsis and type(index.elts[1]) is ast.Slice and index.elts[1].step is None)


def _group(expression: str) -> str:
    return expression if expression.isidentifier() or expression.isdigit() else f"({expression})"


def _literal(node: ast.expr | None, failed=Ellipsis):
    """``ast.literal_eval``'s value of ``node``; ``failed`` where it raises (at once where the
    expression holds a node it surely rejects: names, attributes, subscripts, comparisons, calls
    other than ``set()`` (its name aside), a ``+``/``-`` of no number on the right; its raising costs more)."""
    if node is None:
        return None
    for n in walk(node):
        kind = type(n)
        if kind in _NO_LITERAL and not (kind is ast.Name and n.id == "set") or kind is ast.BinOp and type(n.right) is not ast.Constant or kind is ast.Call and not (
            type(n.func) is ast.Name and n.func.id == "set" and not n.args and not n.keywords
        ):
            return failed
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return failed


def _dotted(node: ast.expr) -> bool:
    while type(node) is ast.Attribute:
        node = node.value
    return type(node) is ast.Name


def _self_rooted(node: ast.expr) -> bool:
    while type(node) is ast.Attribute:
        node = node.value
    return type(node) is ast.Name and node.id == "self"


def _docstring(statement: ast.stmt) -> bool:
    return type(statement) is ast.Expr and type(statement.value) is ast.Constant and isinstance(statement.value.value, str)
