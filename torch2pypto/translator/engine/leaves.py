"""The leaves of a region's tile program (part of :class:`~torch2pypto.translator.engine.lowering.Built`):
what its expressions read from outside the region, each passed to the wrapper as one parameter per
distinct source text: tensors, Python numbers, and host-side calls of the region's first statement."""

from __future__ import annotations

import ast
import dataclasses

from torch2pypto.rules.tile_program import INDEX, ROWS, VECTOR, Operand, Program, Unfusible
from torch2pypto.translator.engine.inference import TENSOR
from torch2pypto.translator.engine.inlining import INLINE_DEPTH
from torch2pypto.translator.engine.scopes import walk
from torch2pypto.translator.engine.syntax import FUNCTIONS, OPERATORS, dotted, literal_of, own_nodes, self_rooted

_QUERIES = frozenset({"size", "dim", "numel", "stride"})  # tensor methods that read shapes only
_BUILTINS = frozenset({"len", "int", "float", "min", "max", "abs", "range", "tuple", "list", "isinstance"})
COMPUTED = (ast.Call, ast.Subscript, ast.Lambda, ast.NamedExpr)  # an expression holding one is no number
_WRITES = (ast.Global, ast.Nonlocal, ast.AugAssign, ast.Delete, *FUNCTIONS, ast.ClassDef)


class Leaves:
    """The leaves of a region and the parameters they are passed as (a mixin of Built, whose state it reads)."""

    def _source(self, node: ast.AST) -> str:
        lines = self.finder.lines
        span = lines.span(node)
        return self.finder.text[lines.offset(*span[:2]) : lines.offset(*span[2:])]

    def _leaf(self, node: ast.expr, kind: str, name: str):
        """The parameter a leaf expression is passed as (one per distinct source text); an
        attribute of an inlined submodule's ``self`` is read from the submodule by the wrapper."""
        source = self._source(node)
        module = self.module if self.module is not None and self_rooted(node) else None
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
        value = literal_of(node, failed=None)
        if type(value) in (int, float):
            return Program.literal(value)
        if value is not None or self.depth and not self_rooted(node) or type(node) in COMPUTED:
            return None  # a call or a subscript itself: computed, its nodes unwalked
        names, computed = self.finder.reads(node)
        if not names.isdisjoint(env):
            return None  # reads the region
        if computed:
            return None
        if any(self.finder.lines.span(n) in self.pending for n in self.finder.nodes(node) if isinstance(n, OPERATORS)):
            return None  # an operator on a tensor (x == m, where m may be one): no number
        if self.inference.kind(node) == TENSOR:
            return None
        name = node.attr if type(node) is ast.Attribute else node.id if type(node) is ast.Name else "number"
        return Operand(self._leaf(node, "number", name).name)

    def _tensor(self, node: ast.expr, env) -> Operand | None:
        """A tensor leaf: a name or a (``self``) attribute the inference knows to be a tensor."""
        if type(node) not in (ast.Name, ast.Attribute) or self._reads_region(node, env):
            return None
        if type(node) is ast.Attribute and not dotted(node):
            return None
        if self.inference.kind(node) != TENSOR:
            return None
        if self.depth and not self_rooted(node):
            return None  # a helper's own names are its parameters, bound by the caller
        kind = VECTOR if type(node) is ast.Attribute else ROWS
        name = node.attr if type(node) is ast.Attribute else node.id
        return self.program.tensor(self._leaf(node, kind, name))

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
        helper = self.module_function(func) if depth < INLINE_DEPTH else None
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
