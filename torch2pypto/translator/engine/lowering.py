"""Lowering: a region's Python expressions as one tile program (:class:`Built`).

Each value of a region's statements becomes an operand of the program of
:mod:`torch2pypto.rules.tile_program`: a leaf (:mod:`leaves`: a tensor name or ``self`` attribute
the inference knows, a Python number, a host-side call in the region's first statement), or an
op whose family's ``fuse`` hook applies its steps (elementwise, cast, composite, reduction,
last-dim slices and cats), with helpers of the class or the module and the forward of submodules
of the module's classes inlined (:mod:`inlining`). What no kernel can carry raises
:class:`Unfusible`, and :mod:`regions` tries a shorter run.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from typing import TYPE_CHECKING

from torch2pypto.mapping import Entry
from torch2pypto.rules import elementwise, recipe, reduction
from torch2pypto.rules.steps import Apply
from torch2pypto.rules.tile_program import INDEX, ROWS, Operand, Output, Param, Program, Unfusible, static_dtype
from torch2pypto.rules.widths import grouped
from torch2pypto.schema.family import family
from torch2pypto.translator.engine.binding import BindError, ast_args, bind
from torch2pypto.translator.engine.inference import TENSOR
from torch2pypto.translator.engine.inlining import Inlining
from torch2pypto.translator.engine.leaves import Leaves
from torch2pypto.translator.engine.syntax import dotted, last_dim_slice, literal_of, self_rooted

if TYPE_CHECKING:
    from torch2pypto.translator.engine.regions import Context, Finder

INFIX = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow"}
COMPARE = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


@dataclasses.dataclass(frozen=True)
class Dtype:
    """A helper's local holding a tensor's dtype (``input_dtype = x.dtype``): its kernel symbol."""

    symbol: str
    is_tile = False


class Built(Leaves, Inlining):
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
        self.helpers: list[ast.FunctionDef] = []  # every helper and forward inlined, in order: what the kernel is made of besides the statements
        self.module: Param | None = None  # the submodule whose forward is being inlined (its ``self``)
        self.contexts: list[Context] = []  # the pending sites and inference of each helper's chunk
        self.earlier: dict = {}  # a later group of a grouped region (groups.py): the earlier groups' wrapper parameters by source

    @property
    def pending(self) -> dict:
        """The pending call sites of the chunk whose code is being read (a helper's may be another)."""
        return self.contexts[-1].pending if self.contexts else self.finder.pending

    @property
    def inference(self):
        return self.contexts[-1].inference if self.contexts else self.finder.sites.inference

    def snapshot(self) -> Built:
        """A copy of this build as it stands, which building on this one leaves as it is (a run keeps
        its longest region so, instead of building it again after a longer one fails): its
        program snapshot, its lists and dicts copied, their items shared."""
        kept = copy.copy(self)
        kept.program = self.program.snapshot()
        for name, value in vars(self).items():
            if isinstance(value, (list, dict)):
                setattr(kept, name, value.copy())
        return kept

    def made_of(self) -> tuple[str, ...]:
        """The helpers and forwards inlined, each once (their ast, no positions): the kernel's
        steps that the statements' text does not spell (:func:`name_of`)."""
        return tuple(ast.dump(h) for h in dict.fromkeys(self.helpers))

    def _state(self):
        """What a failed inlining restores: the program and the containers of frozen values, copied."""
        return {"program": self.program.snapshot(), "by_source": dict(self.by_source), "replacements": dict(self.replacements),
                "attempts": list(self.attempts), "entries": list(self.entries), "helpers": list(self.helpers)}

    def _restore(self, state) -> None:
        for name, value in state.items():
            setattr(self, name, value)

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
        if kind is ast.BinOp and type(node.op) in INFIX:
            return self.operator(node, self.elementwise(INFIX[type(node.op)], [node.left, node.right], env))
        if kind is ast.UnaryOp and type(node.op) is ast.USub:
            return self.operator(node, self.elementwise("neg", [node.operand], env))
        if kind is ast.Compare and len(node.ops) == 1 and type(node.ops[0]) in COMPARE:
            return self.operator(node, self.elementwise(COMPARE[type(node.ops[0])], [node.left, node.comparators[0]], env))
        if kind is ast.Subscript and last_dim_slice(node):
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
        raise Unfusible(f"{type(node).__name__} is no op of a row kernel")  # not ast.dump: a large subtree, raised often

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
        literal = literal_of(node)
        if type(literal) is int:
            return str(literal) if literal >= 0 else f"{width} - {-literal}"
        if type(node) is ast.BinOp and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv):
            symbol = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//"}[type(node.op)]
            left, right = (self.bound(n, env, width) for n in (node.left, node.right))
            return f"{grouped(left)} {symbol} {grouped(right)}"
        shaped = node.value.value if type(node) is ast.Subscript and type(node.value) is ast.Attribute and node.value.attr == "shape" else None
        if type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr == "size" and len(node.args) == 1 and not node.keywords:
            shaped, literal = node.func.value, literal_of(node.args[0])
        elif shaped is not None:
            literal = literal_of(node.slice)
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
        if type(node) is ast.Attribute and not (dotted(node) and self_rooted(node)) or self.depth and not self_rooted(node):
            return None
        if self.inference.kind(node) == TENSOR:
            return None
        return self.program.index(self._leaf(node, INDEX, node.attr if type(node) is ast.Attribute else node.id))

    def join(self, entry: Entry, bound, env) -> Operand:
        """``torch.cat((a, b, ...), dim=-1)`` of the region's tiles."""
        tensors = bound.get("tensors")
        if set(bound) - {"tensors", "dim"} or literal_of(bound.get("dim")) != -1:
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
            if name in bound and literal_of(bound[name]) != entry.param(name).default:
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
        if self._reads_region(node, env) or type(node) not in (ast.Name, ast.Attribute) or self.depth and not self_rooted(node):
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
        if entry.fields.output or entry.pypto not in recipe.REDUCERS or {"indices", "p"} & set(entry.fields.args) or set(bound) - {"input", "dim", "keepdim"}:
            raise Unfusible(f"{entry.op} is no plain row reduction")
        if literal_of(bound.get("dim")) not in (-1, (-1,), [-1]) or literal_of(bound.get("keepdim")) is not True:
            raise Unfusible("a reduction fuses along dim=-1 with keepdim=True")
        steps = reduction.program(entry)
        return self.program.apply(entry.op, steps, {"x_tile": self.value(bound["input"], env)}, fp32=True, dtypes=entry.dtypes)

    def composite(self, entry: Entry, bound, env) -> Operand:
        if entry.fields.channels or entry.fields.groups or entry.fallback or entry.forward:
            raise Unfusible(f"{entry.op} reads one value per channel, or runs torch on values known at run time: its own kernel")
        cast = None  # softmax's dtype= casts the input first, as torch does
        if entry.fields.along:
            if entry.param(entry.fields.along).kinds != ("int",) or literal_of(bound.get(entry.fields.along)) != -1:
                raise Unfusible(f"{entry.op} fuses along dim=-1")
            if bound.get("dtype") is not None and literal_of(bound["dtype"]) is not None:
                cast = self.dtype_value(bound["dtype"], env)
                if cast is None:
                    raise Unfusible(f"{entry.op} with a dtype= the kernels do not take")
        choice = []
        for name, values in recipe.str_choices(entry).items():
            given = literal_of(bound[name]) if name in bound else entry.param(name).default
            if given not in values:
                raise Unfusible(f"{name}={given!r}")
            choice.append((name, given))
        tensors = [p.name for p in recipe.operands(entry)]
        absent = frozenset(n for n in tensors if n not in bound)
        if any(entry.param(n).required for n in absent):
            raise Unfusible("a missing operand")
        steps = recipe.program(entry, entry.parts, tuple(choice), absent)
        operands = {n: self.value(bound[n], env) for n in tensors if n not in absent}
        if cast is not None:
            operands = {n: self.program.cast(v, cast) for n, v in operands.items()}
        renames = {}
        for name in recipe.constants(entry):
            given = bound.get(name)
            number = self._number(given, env) if given is not None else Program.literal(entry.param(name).default)
            if number is None or entry.param(name).default is None and given is None:
                raise Unfusible(f"{name} of {entry.op}")
            renames[name] = number.text
        if any(not v.is_tile for v in operands.values()):
            raise Unfusible(f"a Python number as an operand of {entry.op}")
        return self.program.apply(entry.op, steps, operands, fp32=True, renames=renames, dtypes=entry.dtypes)

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
