"""Callee resolution: what a call of one module may run, and what a function of the module returns.

A callee is a function of this module (its returns), a declared result (a return annotation,
of this module or of a file it imports), an activation module (its argument's kind), or a fixed
kind (a torch function, a layer of torch, a class). Calls are followed through names, ``self``
attributes, module lists, registries and ``super()``; a function of this module whose every read
is a call has those calls as all its callers.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Iterable

from torch2pypto.mapping.facts import is_tensor_function, load_facts
from torch2pypto.translator.engine.classes import FUNCTION_DEFS, Classes, is_self
from torch2pypto.translator.engine.declarations import Declarations, Declared, is_none
from torch2pypto.translator.engine.hierarchy import Hierarchy
from torch2pypto.translator.engine.identity import ByIdentity
from torch2pypto.translator.engine.kinds import NOT_TENSOR, TENSOR, UNKNOWN, Kind, combine
from torch2pypto.translator.engine.scopes import ANNOTATED, ASSIGN, DEFINITION, IMPORT, ITEM, NAMED, PARAMETER, UNPACKED, Binding, ModuleIndex, children

FACTS = load_facts()
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_SUPER = frozenset({"builtins.super"})
_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)  # what holds statements, or is one


@dataclasses.dataclass(frozen=True, eq=False)
class Callee:
    """What a call may run: a function of this module (its returns), a declared result (an
    annotation, with what its names import), an activation (its argument's kind), or a fixed kind."""

    function: ast.FunctionDef | None = None
    declared: Declared | None = None
    activation: bool = False
    kind: Kind = UNKNOWN


class Callees:
    """The callees of one module's calls, each call's found once."""

    def __init__(self, index: ModuleIndex, hierarchy: Hierarchy, classes: Classes, declarations: Declarations) -> None:
        self._index = index
        self._hierarchy = hierarchy
        self._classes = classes
        self._declarations = declarations
        self._of: dict[ast.expr, list[Callee] | None] = {}
        self._returns: dict[ast.AST, list[ast.expr | None]] = {}
        self._calls_of: dict[ast.AST, list[ast.Call]] | None = None
        self._imported: dict[frozenset[str], Callee] = {}

    def of(self, func: ast.expr) -> list[Callee] | None:
        """What calling ``func`` may run (None: something not known): what a name or a ``self``
        attribute holds, a method of the class, an item of a module list or a registry,
        ``super()``'s method (``ACT2FN["gelu"](x)``, ``self.layers[i](x)``, ``rope_init_fn(config)``)."""
        if func not in self._of:
            self._of[func] = None  # asked again on the way (through a declaration): not known
            self._of[func] = self._find(func, frozenset())
        return self._of[func]

    def functions(self, func: ast.expr) -> list[ast.FunctionDef]:
        """The functions of this module a call of ``func`` may run ([]: some it may run are not
        functions of this module, or not known)."""
        callees = self.of(func) or []
        functions = [c.function for c in callees]
        return functions if None not in functions else []

    def _find(self, func: ast.expr, seen: frozenset) -> list[Callee] | None:
        """``of``, not following again the names and attributes in ``seen`` (a cycle)."""
        kind = type(func)
        if kind is ast.Name:
            bindings = self._index.bindings(func)
            if not bindings or id(bindings) in seen:
                return None
            return _all(self._binding(b, seen | {id(bindings)}) for b in bindings)
        if kind is ast.Subscript:
            if self.is_activation(func):
                return [Callee(activation=True)]
            if type(func.slice) is ast.Slice:
                return None
            items = self.module_items(func.value)
            if items is not None:
                return _all(self._value(i, seen) for i in items)
            result = self._declarations.registry_result(func.value)
            return [Callee(declared=result)] if result else None
        if kind is not ast.Attribute:
            return None
        if self.is_super(func.value):
            return self._super(func)
        if not is_self(func.value):
            return None
        cls = self._classes.enclosing(func.value)
        if cls is None:
            return None
        method = self._classes.inherited(cls, func.attr)
        if method is not None:
            return [Callee(function=method)]
        stores = self._classes.stores(cls)
        values = stores.assigned.get(func.attr)
        if not values or id(values) in seen:
            return None
        kept = [v for v in values if id(v) not in stores.replacements] or values  # a setter's: of the same class
        kept = [v for v in kept if not is_none(v)]  # None runs nothing: calling it raises
        return _all(self._value(v, seen | {id(values)}) for v in kept) if kept else None

    def _binding(self, binding: Binding, seen: frozenset) -> list[Callee] | None:
        node, how = binding.node, binding.kind
        if how == DEFINITION:
            return [Callee(function=node) if isinstance(node, FUNCTION_DEFS) else Callee(kind=self.instance_kind(node))]
        if how == IMPORT:
            return [self.imported({binding.qualified})]
        if how in (PARAMETER, ANNOTATED) and binding.annotation is not None:
            result = self._declarations.callable_result(binding.annotation, self._index.import_names)
            if result is not None:
                return [Callee(declared=result)]
        if how in (ASSIGN, NAMED, ANNOTATED) and binding.value is not None:
            return self._value(binding.value, seen)
        items = self._iterated_items(binding) if how == UNPACKED else None
        return _all(self._value(i, seen) for i in items) if items else None

    def _value(self, value: ast.expr, seen: frozenset) -> list[Callee] | None:
        """What calling a value stored in a name or attribute may run: a module's forward, a torch
        layer (a tensor), an activation, a registry's item or its lookup's default, a function."""
        kind = type(value)
        if kind is ast.IfExp:  # a branch that is None runs nothing: calling it raises
            branches = [v for v in (value.body, value.orelse) if not is_none(v)]
            return _all(self._value(v, seen) for v in branches) if branches else None
        if self.is_activation(value):
            return [Callee(activation=True)]
        if kind in (ast.Name, ast.Attribute, ast.Subscript):
            return self._find(value, seen)
        if kind is not ast.Call:
            return None
        func = value.func
        if type(func) is ast.Attribute and func.attr in FACTS.registry_lookups and not value.keywords:
            result = self._declarations.registry_result(func.value)  # registry.get_interface(name, default)
            if result is not None and 1 <= len(value.args) <= 2 and not any(type(a) is ast.Starred for a in value.args):
                default = self._value(value.args[1], seen) if len(value.args) == 2 else []
                return None if default is None else [Callee(declared=result), *default]
        names = self._index.import_names(func)
        if names and names <= FACTS.module_sequentials:  # runs its modules in turn: the last one's result
            args = value.args
            last = self._value(args[-1], seen) if args and not value.keywords and type(args[-1]) is not ast.Starred else None
            return last if last is not None and not any(c.activation for c in last) else None
        if names:
            return [Callee(kind=TENSOR)] if names <= FACTS.module_tensor_results else None
        forward = self._forward_of(value)
        return [Callee(function=forward)] if forward is not None else None

    def imported(self, names: set[str]) -> Callee:
        """A function or class an import names: what its file declares it returns, else what torch's
        (or another library's) name tells; found once per names."""
        names = frozenset(names)
        callee = self._imported.get(names)
        if callee is None:
            declared = self._hierarchy.function_returns(next(iter(names))) if len(names) == 1 else None
            callee = Callee(declared=declared) if declared is not None else Callee(kind=combine(function_kind(n) for n in names))
            self._imported[names] = callee
        return callee

    def _super(self, func: ast.Attribute) -> list[Callee] | None:
        """``super().<method>`` in a class of one base: the base's method (of a class of this module),
        a torch layer's forward (a tensor), or what a class in another file declares it returns."""
        cls = self._classes.enclosing(func.value.func)
        if cls is None or len(cls.bases) != 1 or cls.keywords:
            return None
        base = cls.bases[0]
        local = self._classes.local(base)
        if local is not None:
            method = self._classes.inherited(local, func.attr)
            return [Callee(function=method)] if method is not None else None
        names = self._index.import_names(base)
        if len(names) != 1:
            return None
        name = next(iter(names))
        if func.attr == "forward" and name in FACTS.module_tensor_results:
            return [Callee(kind=TENSOR)]
        declared = self._hierarchy.method_returns(name, func.attr)
        return [Callee(declared=declared)] if declared is not None else None

    def is_super(self, expr: ast.expr) -> bool:
        """A ``super()`` call with no arguments."""
        return type(expr) is ast.Call and not expr.args and not expr.keywords and self._index.import_names(expr.func) == _SUPER

    def is_activation(self, value: ast.expr) -> bool:
        """An activation module of a registry (``ACT2FN[config.hidden_act]``, ``get_activation(name)``)."""
        return self._classes.activation(value) is not None

    def _iterated_items(self, binding: Binding) -> list[ast.expr] | None:
        """What builds the modules a loop over a module list binds (``for layer in self.layers``,
        ``for i, layer in enumerate(self.layers[:n])``, ``zip(self.layers, ...)``)."""
        value, path = binding.value, binding.path
        if path == (ITEM,):
            return self.module_items(value)
        if len(path) != 2 or path[0] is not ITEM or type(value) is not ast.Call or value.keywords:
            return None
        names, args, step = self._index.import_names(value.func), value.args, path[1]
        if any(type(a) is ast.Starred for a in args):
            return None
        if names == {"builtins.enumerate"} and len(args) == 1 and step in (1, -1):
            return self.module_items(args[0])
        return self.module_items(args[step]) if names == {"builtins.zip"} and -len(args) <= step < len(args) else None

    def module_items(self, expr: ast.expr) -> list[ast.expr] | None:
        """What builds the items of the module list ``expr`` is: ``self.layers``, holding only
        ``nn.ModuleList([Layer(config, i) for i in ...])`` or lists of modules and never changed
        in place, or a slice of it. None if not known."""
        if type(expr) is ast.Subscript and type(expr.slice) is ast.Slice:
            return self.module_items(expr.value)
        if type(expr) is not ast.Attribute or not is_self(expr.value):
            return None
        cls = self._classes.enclosing(expr.value)
        stores = self._classes.stores(cls) if cls else None
        if stores is None or expr.attr in stores.changed or not stores.assigned.get(expr.attr):
            return None
        items: list[ast.expr] = []
        for value in stores.assigned[expr.attr]:
            names = self._index.import_names(value.func) if type(value) is ast.Call else set()
            if not names or not names <= FACTS.module_lists or value.keywords or len(value.args) != 1:
                return None
            built = value.args[0]
            if type(built) in (ast.List, ast.Tuple) and not any(type(e) is ast.Starred for e in built.elts):
                items += built.elts
            elif type(built) in (ast.ListComp, ast.GeneratorExp) and len(built.generators) == 1:
                items.append(built.elt)
            else:
                return None
        return items

    def _forward_of(self, value: ast.expr) -> ast.FunctionDef | None:
        """The ``forward`` a call of ``value`` runs: an instance of a module class of this module
        (built by the class or one of its constructors of torch.toml)."""
        func = value.func if type(value) is ast.Call else None
        if type(func) is ast.Attribute and func.attr in FACTS.module_constructors:
            func = func.value  # Model._from_config(config): an instance of Model
        cls = self._classes.local(func) if func is not None else None
        if cls is None or not self._classes.is_module(cls) or self._classes.inherited(cls, "__call__") is not None:
            return None
        return self._classes.inherited(cls, "forward")

    def instance_kind(self, cls: ast.ClassDef) -> Kind:
        """A class of this module called: an instance; a module's or a plain local class's is no tensor."""
        return NOT_TENSOR if self._classes.is_module(cls) or self._classes.plain(cls) else UNKNOWN

    def returns(self, function: ast.FunctionDef) -> list[ast.expr | None]:
        """The values a function returns (None for None); memoised so that recursion is a cycle.

        A bare ``return`` or a body that can end without one returns None; a generator is none either.
        """
        found = self._returns.get(function)
        if found is None:
            found = []
            stack = list(function.body)
            while stack:  # its statements, not those of the definitions in it
                node = stack.pop()
                kind = type(node)
                if kind is ast.Return:
                    found.append(node.value)
                elif kind not in _SCOPES:
                    stack.extend(c for c in children(node) if isinstance(c, _BLOCKS))
            generator = function in self._index.yielding and _yields(function.body)
            if generator or _falls_through(function.body):
                found.append(None)
            self._returns[function] = found = [None] if generator else found
        return found

    def transparent(self, function: ast.FunctionDef) -> bool:
        """Whether every decorator of a function keeps what it takes and returns (torch.toml)."""
        for decorator in function.decorator_list:
            target = decorator.func if type(decorator) is ast.Call else decorator
            names = {*self._index.import_names(target)}
            names |= {self._hierarchy.absolute(n) for n in names}
            if not names & FACTS.module_transparent_decorators:
                return False
        return True

    def decorated(self, function: ast.FunctionDef, name: str) -> bool:
        """Whether a decorator of ``function`` is the builtin ``name`` (``builtins.staticmethod``)."""
        return any(name in self._index.import_names(d) for d in function.decorator_list)

    def direct_calls(self) -> dict[ast.AST, list[ast.Call]]:
        """Functions of this module whose every read is a call's callee, with those calls."""
        if self._calls_of is None:
            callee = {c.func: c for c in self._index.calls if type(c.func) is ast.Name}
            passed_to = {a: c for c in self._index.calls for a in c.args}
            calls: dict[ast.AST, list[ast.Call]] = {}
            module_functions, read = self._index.module_answer("functions read at module level", _read_at_module_level)
            escaped: set[ast.AST] = set(read)
            defined = ByIdentity()  # a bindings list -> [its functions' definitions, whether they escaped]
            own = self._index.own_scopes()
            functions = module_functions | {n.name for n, _ in own if type(n) in FUNCTION_DEFS}  # the names a def binds
            for node, scope in own:
                if type(node) is not ast.Name or node.id not in functions or type(node.ctx) is not ast.Load:
                    continue
                bindings = self._index.lookup(scope, node.id)
                if not bindings:
                    continue
                known = defined.get(bindings)
                if known is None:  # once per list: a name bound many times (torch, imported by each copy of a model) is read often
                    known = defined[bindings] = [_functions(bindings), False]
                if not known[0]:
                    continue
                call = callee.get(node)
                if call is None and node in passed_to and self._names_only(passed_to[node]):
                    continue  # named to a decorator that never calls it
                if call is not None and len(bindings) == 1:
                    calls.setdefault(known[0][0], []).append(call)
                elif not known[1]:  # a list's functions escape once: a function defined by each copy of a model is read often
                    escaped.update(known[0])
                    known[1] = True
            exported = self._index.module_answer("exported", _exported)
            self._calls_of = {f: c for f, c in calls.items() if f not in escaped and f.name not in exported}
        return self._calls_of

    def _names_only(self, call: ast.Call) -> bool:
        """A call that only takes note of the functions passed to it (a hub kernel's registration)."""
        return any(self._hierarchy.absolute(n) in FACTS.module_naming_calls for n in self._index.import_names(call.func))


def function_kind(name: str) -> Kind:
    """What calling a library's function or class (fully qualified) returns."""
    if name.startswith("builtins."):
        return NOT_TENSOR if name[9:] in FACTS.not_tensor_builtins else UNKNOWN
    return TENSOR if name in FACTS.tensor_classes or is_tensor_function(name) else NOT_TENSOR


def _all(found: Iterable[list[Callee] | None]) -> list[Callee] | None:
    """Every list's callees, or None if some list is None (not known)."""
    callees: list[Callee] = []
    for part in found:
        if part is None:
            return None
        callees += part
    return callees


def _yields(body: list[ast.stmt]) -> bool:
    """Whether a yield is in ``body``, outside the definitions in it (asked of the few functions the
    index found a yield in)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is ast.Yield or kind is ast.YieldFrom:
            return True
        if kind not in _SCOPES:
            stack.extend(children(node))
    return False


def _falls_through(body: list[ast.stmt]) -> bool:
    """Whether running ``body`` can reach its end (no return or raise on some path)."""
    if not body:
        return True
    last = body[-1]
    kind = type(last)
    if kind in (ast.Return, ast.Raise):
        return False
    if kind is ast.If:
        return _falls_through(last.body) or _falls_through(last.orelse)
    if kind in (ast.With, ast.AsyncWith):
        return _falls_through(last.body)
    if kind is ast.Try:
        if last.finalbody and not _falls_through(last.finalbody):
            return False
        return any(_falls_through(b) for b in [last.orelse or last.body, *(h.body for h in last.handlers)])
    return True


def _exported(index: ModuleIndex) -> frozenset[str]:
    """Names the module's ``__all__`` lists."""
    names = set()
    for binding in index.module.bindings.get("__all__", ()):
        value = binding.value
        if isinstance(value, (ast.List, ast.Tuple)):
            names.update(e.value for e in value.elts if type(e) is ast.Constant and isinstance(e.value, str))
    return frozenset(names)


def _read_at_module_level(index: ModuleIndex) -> tuple[frozenset[str], frozenset[ast.AST]]:
    """The names the module-level definitions bind, and the functions read by the names the
    shallow walks of a module read in chunks recorded: what :meth:`Callees.direct_calls` finds
    of them in every chunk, as no chunk's call is one of those names (its chunk parsed again),
    so each escapes (module-level reads look up module bindings only, the same for every chunk)."""
    shared = index.shared_scopes()
    functions = frozenset(n.name for n, _ in shared if type(n) in FUNCTION_DEFS)
    read: set[ast.AST] = set()
    for node, scope in shared:
        if type(node) is ast.Name and node.id in functions and type(node.ctx) is ast.Load:
            read.update(_functions(index.lookup(scope, node.id)))
    return functions, frozenset(read)


def _functions(bindings: list[Binding]) -> list[ast.AST]:
    return [b.node for b in bindings if b.kind == DEFINITION and isinstance(b.node, FUNCTION_DEFS)]
