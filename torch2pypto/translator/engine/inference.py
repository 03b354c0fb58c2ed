"""What the engine knows statically about an expression: is it a tensor, is it a dtype.

Answers are three-valued for tensors (:data:`TENSOR`, :data:`NOT_TENSOR`, :data:`UNKNOWN`):
a method call is rewritten only on a known tensor, left alone on a known non-tensor, and
reported as ambiguous otherwise. Evidence, strongest first: annotations, what a name was
assigned, the call that produced a value, ``nn.Parameter``/buffers set on ``self``, and the
parameters of an ``nn.Module``'s ``forward`` (or of a method of the same class only ever
called with tensors). Calls of this module's functions, methods and module classes answer
with what those return (``self.mlp(x)``: ``MLP.forward``'s returns; ``self.proj(x)``: an
``nn.Linear``'s tensor); a function's parameter is what every call of it in the module passes,
when its name is only ever called. Unpacking and iterating follow the parts of the value
(``q, k = rotate(q, k)``, ``a, b = x.chunk(2)``, ``for h in x.unbind(0)``).

The module is taken as closed: calls from other modules, and overriding methods of subclasses
elsewhere, are not seen.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Callable, Iterable, Mapping

from torch2pypto.mapping.facts import load_facts
from torch2pypto.translator.engine.hierarchy import Hierarchy
from torch2pypto.translator.engine.scopes import (
    ANNOTATED,
    ASSIGN,
    AUGMENTED,
    DEFINITION,
    IMPORT,
    ITEM,
    NAMED,
    PARAMETER,
    REST,
    UNPACKED,
    Binding,
    ModuleIndex,
)

TENSOR, NOT_TENSOR, UNKNOWN = "tensor", "not-tensor", "unknown"
_NONE, _MAYBE = "none", "tensor-or-none"  # None itself; a tensor or None (a method call on it is a tensor's)
_CYCLE = "cycle"  # no value (yet): a name read while its own assignments are being inferred; None operated on
_MAX_DEPTH = 40  # names/attributes followed at once before the innermost is answered first (see _answer)
_MAX_PATH = 8  # steps of an unpacking path followed (a deeper part, as of `for x in xs: xs = [x]`, is unknown)

FACTS = load_facts()
DTYPE_NAMES = FACTS.dtypes  # torch.<dtype> spellings and the dtype they name
_LITERALS = (
    ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp,
    ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda,
)  # fmt: skip
_ORDER = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)  # comparisons a tensor answers elementwise
_FUNCTION_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
Names = Callable[[ast.expr], set]  # what a dotted name imports, where it is written
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def combine(kinds: Iterable[str]) -> str:
    """All tensor: tensor; all not: not; tensors and None: tensor or None; else (or nothing): unknown.

    Cyclic reads (``x = x.float()``) carry no evidence and are skipped.
    """
    seen = set(kinds)
    if seen == {_CYCLE}:
        return _CYCLE
    seen.discard(_CYCLE)
    if len(seen) == 1:
        return seen.pop()
    if seen and seen <= {TENSOR, _NONE, _MAYBE}:
        return _MAYBE
    return NOT_TENSOR if seen and seen <= {NOT_TENSOR, _NONE} else UNKNOWN


def _through(receiver: str) -> str:
    """The kind of a tensor-preserving operation's result, given its receiver's kind.

    On None the operation raises, so a result that exists is a tensor's, and None's is no value.
    """
    if receiver in (TENSOR, _MAYBE):
        return TENSOR
    return _CYCLE if receiver in (_CYCLE, _NONE) else UNKNOWN


class Inference:
    """Static facts over one module, answered from its :class:`ModuleIndex`; memoised per node."""

    def __init__(
        self,
        index: ModuleIndex,
        tensor_methods: frozenset[str],
        hierarchy: Hierarchy | None = None,
        reads_torch: Callable[[], bool] | None = None,
        wrapper_api: Callable[[ast.Name], str | None] = lambda _: None,
    ) -> None:
        """``hierarchy`` answers for base classes that other files define (None: no file is read);
        ``reads_torch`` tells whether the module reads a name ``torch``, if ``index`` is only a part of it;
        ``wrapper_api``: the torch API a generated wrapper's name stands for (None: no wrapper), so
        that its call is what the torch call was and a second translation decides as the first."""
        self._index = index
        self._wrapper_api = wrapper_api
        self._hierarchy = hierarchy or Hierarchy(None)
        self._tensor_methods = tensor_methods
        self._kinds: dict = {}  # final answers: expressions and evidence keys (see _combine_pending)
        self._pending: set = set()  # evidence keys being inferred
        self._circle: dict | None = None  # evidence keys read while pending -> their kind so far
        self._round: dict = {}  # answers of the circle's current round that read a kind so far
        self._reads: list[tuple] = []  # (key, kind so far) of this round's reads of pending keys
        self._tentative = 0  # reads of kinds so far: an answer computed across one is not final
        self._depth = 0
        self._torch_read: bool | None = None
        self._module_reads_torch = reads_torch
        self._torch_aliases: list[str] | None = None  # module-level names other than torch bound to it
        self.spelt_free_torch = False  # torch_name() answered a `torch` the module must import
        self._classes: dict[ast.ClassDef, _ClassIndex] = {}
        self._module_classes: dict[ast.ClassDef, bool] = {}
        self._function_returns: dict[ast.AST, list[ast.expr | None]] = {}
        self._calls_of: dict[ast.AST, list[ast.Call]] | None = None
        self._strings: dict[ast.Constant, ast.expr] = {}  # string annotations, parsed
        self._callees_of: dict[ast.expr, list[_Callee] | None] = {}
        self._augmented_values: dict[ast.Name, ast.BinOp] = {}  # x += v: x + v, x read where it is

    # --- tensors -------------------------------------------------------------------------

    def kind(self, expr: ast.expr) -> str:
        """TENSOR, NOT_TENSOR or UNKNOWN for an expression (a tensor or None: unknown)."""
        known = self._answer(expr)
        return NOT_TENSOR if known == _NONE else UNKNOWN if known in (_MAYBE, _CYCLE) else known

    def receiver_kind(self, expr: ast.expr) -> str:
        """The kind of a method call's receiver: a tensor or None is a tensor there (None has no methods)."""
        known = self._answer(expr)
        return NOT_TENSOR if known == _NONE else TENSOR if known == _MAYBE else UNKNOWN if known == _CYCLE else known

    def _answer(self, expr: ast.expr) -> str:
        """``_kind`` of a question asked from outside; a chain too deep to follow at once is
        answered from its innermost link out, so that no answer depends on where it was entered."""
        todo: list[tuple] = [(expr, lambda: self._kind(expr))]
        while True:
            try:
                known = todo[-1][1]()
            except _Deep as deep:
                if len(todo) > _MAX_DEPTH or any(key == deep.key for key, _ in todo):  # a cycle longer than the stack allows
                    self._kinds[deep.key] = UNKNOWN
                else:
                    todo.append((deep.key, deep.again))
                continue
            todo.pop()
            if not todo:
                return known

    def _kind(self, expr: ast.expr) -> str:
        known = self._kinds.get(expr)
        if known is not None:
            return known
        if self._circle is not None:
            known = self._round.get(expr)
            if known is not None:
                self._tentative += 1
                return known
        if self._depth > _MAX_DEPTH * 4:  # a very long operator chain: its inner part first
            raise _Deep(expr, lambda: self._kind(expr))
        self._depth += 1
        tentative = self._tentative
        try:
            known = self._infer(expr)
        finally:
            self._depth -= 1
        (self._kinds if self._tentative == tentative else self._round)[expr] = known
        return known

    def _infer(self, expr: ast.expr) -> str:
        kind = type(expr)
        if kind is ast.Name:
            return self._name_kind(expr)
        if kind is ast.Call:
            return self._call_kind(expr)
        if kind is ast.Attribute:
            return self._attribute_kind(expr)
        if kind is ast.Constant and expr.value is None:
            return _NONE
        if isinstance(expr, _LITERALS):
            return NOT_TENSOR
        if kind is ast.BinOp:
            sides = (self._kind(expr.left), self._kind(expr.right))
            if _CYCLE in sides or _NONE in sides:
                return _CYCLE  # no value yet (x / (x.sum() + 1e-6) in x's own assignment), or None's: raises
            return TENSOR if TENSOR in sides or _MAYBE in sides else combine(sides)
        if kind is ast.UnaryOp:
            operand = self._kind(expr.operand)
            return NOT_TENSOR if isinstance(expr.op, ast.Not) else _through(operand) if operand in (_MAYBE, _NONE) else operand
        if kind is ast.Compare:
            return self._compare_kind(expr)
        if kind is ast.BoolOp:  # `a or b` is one of its operands
            return combine(self._kind(v) for v in expr.values)
        if kind is ast.Subscript:
            value = self._kind(expr.value)
            if value in (TENSOR, _MAYBE):
                return TENSOR
            index = _constant_index(expr.slice)
            if index is not None:
                return self._part_kind(expr.value, (index,))
            if value == NOT_TENSOR and type(expr.slice) not in (ast.Slice, ast.Tuple):
                return self._part_kind(expr.value, (ITEM,))  # xs[i]: any item of a list or tuple
            return value  # a slice of a list is a list
        if kind is ast.IfExp:
            return combine((self._kind(expr.body), self._kind(expr.orelse)))
        if kind is ast.NamedExpr:
            return self._kind(expr.value)
        return UNKNOWN

    def _compare_kind(self, compare: ast.Compare) -> str:
        """``x == 0`` and ``x < y`` of a tensor are tensors; ``is``/``in`` and non-tensors' are not."""
        if not all(type(op) in _ORDER for op in compare.ops):
            return NOT_TENSOR if all(type(op) not in _ORDER for op in compare.ops) else UNKNOWN
        sides = [compare.left, *compare.comparators]
        kinds = [self._kind(side) for side in sides]
        if _CYCLE in kinds:
            return _CYCLE  # a side read in its own assignment: the assumed kind decides (see _combine_pending)
        if TENSOR not in kinds:
            return combine(kinds)
        if len(sides) > 2:  # a < x < b is (a < x) and (x < b): a tensor's truth value
            return UNKNOWN
        if all(k == TENSOR or _is_number(s) for k, s in zip(kinds, sides)):
            return TENSOR
        if kinds[0] != TENSOR and not all(k == TENSOR or self._plain(s) for k, s in zip(kinds, sides)):
            return UNKNOWN
        # a tensor on the left (its operator answers first; a tensor subclass on the right is a
        # tensor too) or a plain value on either side: torch compares, or gives up and Python's ==
        # answers a bool (None, a string, a list); an order raises then. A bool has no method of a tensor.
        return _MAYBE if type(compare.ops[0]) in (ast.Eq, ast.NotEq) else TENSOR

    def _plain(self, expr: ast.expr, depth: int = 0) -> bool:
        """A Python scalar, string or None, or a value of a model config (JSON data or a sub-config):
        neither a tensor nor anything whose comparison with one answers other than torch or False."""
        kind = type(expr)
        if kind is ast.Constant or depth > _MAX_DEPTH:
            return kind is ast.Constant
        if kind is ast.UnaryOp:
            return self._plain(expr.operand, depth + 1)
        if kind is ast.BinOp:
            return self._plain(expr.left, depth + 1) and self._plain(expr.right, depth + 1)
        if kind is ast.Attribute:
            return self._is_config(expr.value) or (expr.attr in FACTS.plain_attributes and self._tensor_or_no_value(expr.value))
        if kind is ast.Subscript:  # x.shape[-1]
            return type(expr.value) is ast.Attribute and self._plain(expr.value, depth + 1)
        if kind is ast.Call:
            func = expr.func
            if self._index.import_names(func) & FACTS.plain_builtins:
                return True
            return type(func) is ast.Attribute and func.attr in FACTS.plain_methods and self._tensor_or_no_value(func.value)
        if kind is ast.Name:
            bindings = self._index.bindings(expr)
            return bool(bindings) and all(
                b.kind in (ASSIGN, NAMED) and b.value is not None and b.value is not expr and self._plain(b.value, depth + 1)
                for b in bindings
            )
        return False

    def _tensor_or_no_value(self, expr: ast.expr) -> bool:
        """A tensor, or no value yet: ``x.shape`` is plain then (kinds only grow, answers stay stable)."""
        return self._kind(expr) in (TENSOR, _CYCLE)

    def _is_config(self, expr: ast.expr) -> bool:
        """A model config: a parameter named as one (``config``, ``text_config``; not annotated as
        a tensor), ``self.config``, or a config's sub-config (``config.vision_config``)."""
        kind = type(expr)
        if kind is ast.Attribute:
            if not _config_name(expr.attr):
                return False
            if not _is_self(expr.value):
                return self._is_config(expr.value)
            cls = self._enclosing_class(expr.value)  # self.config: what the class stores there is one
            stored = self._class_index(cls).assigned.get(expr.attr, ()) if cls else ()
            return all(type(v) is ast.Name and self._is_config(v) for v in stored)
        if kind is not ast.Name or not _config_name(expr.id):
            return False
        bindings = self._index.bindings(expr)
        return bool(bindings) and all(
            b.kind == PARAMETER and not _is_vararg(b) and (b.annotation is None or self._annotation_kind(b.annotation) == NOT_TENSOR)
            for b in bindings
        )

    def _call_kind(self, call: ast.Call) -> str:
        func = call.func
        if type(func) is ast.Name:
            api = self._wrapper_api(func)
            if api is not None:  # a method's wrapper returns what the function of its name does
                return _function_kind(api.replace("torch.Tensor.", "torch.", 1)) if api.startswith("torch.") else UNKNOWN
        if type(func) is ast.Attribute and not is_dotted(func):
            return self._called(call) if self._is_super(func.value) else self._method_kind(func)
        names = self._index.import_names(func)
        if names:
            return self._callee_result(self._imported_callee(names), call, ())
        if self._callees(func) is not None or type(func) is not ast.Attribute:
            return self._called(call)
        return self._method_kind(func)

    def _called(self, call: ast.Call, path: tuple = ()) -> str:
        """What calling a name, a ``self`` attribute, an item or ``super()``'s method returns (or the
        part of it ``path`` reaches), from every callee it may run."""
        callees = self._callees(call.func)
        if callees is None:
            return UNKNOWN
        return self._combine_pending(("called", call, path), callees, lambda c: self._callee_result(c, call, path))

    def _callee_result(self, callee: _Callee, call: ast.Call, path: tuple) -> str:
        """The kind of what one callee returns, or of the part of it ``path`` reaches."""
        function = callee.function
        if function is not None:
            if not path:
                return self._returns_kind(function)
            return self._returned_part(function, path) if self._transparent(function) else UNKNOWN
        if callee.declared is not None:
            return self._annotation_part(callee.declared[0], path, names=callee.declared[1])
        known = self._activated(call) if callee.activation else callee.kind
        if not path:
            return known
        return TENSOR if known in (TENSOR, _MAYBE) else _CYCLE if known == _CYCLE else UNKNOWN  # a tensor's items

    def _callees(self, func: ast.expr) -> list[_Callee] | None:
        """What calling ``func`` may run (None: something not known): what a name or a ``self``
        attribute holds, a method of the class, an item of a module list or a registry,
        ``super()``'s method (``ACT2FN["gelu"](x)``, ``self.layers[i](x)``, ``rope_init_fn(config)``)."""
        if func not in self._callees_of:
            self._callees_of[func] = None  # asked again on the way (through a declaration): not known
            self._callees_of[func] = self._find_callees(func, frozenset())
        return self._callees_of[func]

    def _find_callees(self, func: ast.expr, seen: frozenset) -> list[_Callee] | None:
        """``_callees``, not following again the names and attributes in ``seen`` (a cycle)."""
        kind = type(func)
        if kind is ast.Name:
            bindings = self._index.bindings(func)
            if not bindings or id(bindings) in seen:
                return None
            return _all(self._binding_callees(b, seen | {id(bindings)}) for b in bindings)
        if kind is ast.Subscript:
            if self._activation(func):
                return [_Callee(activation=True)]
            if type(func.slice) is ast.Slice:
                return None
            items = self._module_items(func.value)
            if items is not None:
                return _all(self._value_callees(i, seen) for i in items)
            result = self._registry_result(func.value)
            return [_Callee(declared=result)] if result else None
        if kind is not ast.Attribute:
            return None
        if self._is_super(func.value):
            return self._super_callees(func)
        if not _is_self(func.value):
            return None
        cls = self._enclosing_class(func.value)
        if cls is None:
            return None
        method = self._inherited(cls, func.attr)
        if method is not None:
            return [_Callee(function=method)]
        values = self._class_index(cls).assigned.get(func.attr)
        if not values or id(values) in seen:
            return None
        return _all(self._value_callees(v, seen | {id(values)}) for v in values)

    def _binding_callees(self, binding: Binding, seen: frozenset) -> list[_Callee] | None:
        node, how = binding.node, binding.kind
        if how == DEFINITION:
            return [_Callee(function=node) if isinstance(node, _FUNCTION_DEFS) else _Callee(kind=self._instance_kind(node))]
        if how == IMPORT:
            return [self._imported_callee({binding.qualified})]
        if how in (PARAMETER, ANNOTATED) and binding.annotation is not None:
            result = self._callable_result(binding.annotation, self._index.import_names)
            if result is not None:
                return [_Callee(declared=result)]
        if how in (ASSIGN, NAMED, ANNOTATED) and binding.value is not None:
            return self._value_callees(binding.value, seen)
        items = self._iterated_items(binding) if how == UNPACKED else None
        return _all(self._value_callees(i, seen) for i in items) if items else None

    def _value_callees(self, value: ast.expr, seen: frozenset) -> list[_Callee] | None:
        """What calling a value stored in a name or attribute may run: a module's forward, a torch
        layer (a tensor), an activation, a registry's item or its lookup's default, a function."""
        kind = type(value)
        if kind is ast.IfExp:
            return _all(self._value_callees(v, seen) for v in (value.body, value.orelse))
        if self._activation(value):
            return [_Callee(activation=True)]
        if kind in (ast.Name, ast.Attribute, ast.Subscript):
            return self._find_callees(value, seen)
        if kind is not ast.Call:
            return None
        func = value.func
        if type(func) is ast.Attribute and func.attr in FACTS.registry_lookups and not value.keywords:
            result = self._registry_result(func.value)  # registry.get_interface(name, default)
            if result is not None and 1 <= len(value.args) <= 2 and not any(type(a) is ast.Starred for a in value.args):
                default = self._value_callees(value.args[1], seen) if len(value.args) == 2 else []
                return None if default is None else [_Callee(declared=result), *default]
        names = self._index.import_names(func)
        if names and names <= FACTS.module_sequentials:  # runs its modules in turn: the last one's result
            args = value.args
            last = self._value_callees(args[-1], seen) if args and not value.keywords and type(args[-1]) is not ast.Starred else None
            return last if last is not None and not any(c.activation for c in last) else None
        if names:
            return [_Callee(kind=TENSOR)] if names <= FACTS.module_tensor_results else None
        forward = self._forward_of(value)
        return [_Callee(function=forward)] if forward is not None else None

    def _imported_callee(self, names: set[str]) -> _Callee:
        """A function or class an import names: what its file declares it returns, else what torch's
        (or another library's) name tells."""
        if len(names) == 1:
            declared = self._hierarchy.function_returns(next(iter(names)))
            if declared is not None:
                return _Callee(declared=declared)
        return _Callee(kind=combine(_function_kind(n) for n in names))

    def _super_callees(self, func: ast.Attribute) -> list[_Callee] | None:
        """``super().<method>`` in a class of one base: the base's method (of a class of this module),
        a torch layer's forward (a tensor), or what a class in another file declares it returns."""
        cls = self._enclosing_class(func.value.func)
        if cls is None or len(cls.bases) != 1 or cls.keywords:
            return None
        base = cls.bases[0]
        local = self._local_class(base)
        if local is not None:
            method = self._inherited(local, func.attr)
            return [_Callee(function=method)] if method is not None else None
        names = self._index.import_names(base)
        if len(names) != 1:
            return None
        name = names.pop()
        if func.attr == "forward" and name in FACTS.module_tensor_results:
            return [_Callee(kind=TENSOR)]
        declared = self._hierarchy.method_returns(name, func.attr)
        return [_Callee(declared=declared)] if declared is not None else None

    def _is_super(self, expr: ast.expr) -> bool:
        """A ``super()`` call with no arguments."""
        return type(expr) is ast.Call and not expr.args and not expr.keywords and self._index.import_names(expr.func) == {"builtins.super"}

    def _registry_result(self, registry: ast.expr) -> tuple[ast.expr, Names] | None:
        """What calling an item of ``registry`` returns, as declared: a mapping annotated
        ``dict[str, Callable[..., R]]``, or an instance of a class torch.toml's [registry] names."""
        declared = self._declared(registry)
        if declared is None:
            return None
        annotation, names = self._parsed(declared[0]), declared[1]
        if type(annotation) is ast.Subscript and names(annotation.value) & FACTS.annotation_mappings:
            inner = annotation.slice
            return self._callable_result(inner.elts[-1], names) if type(inner) is ast.Tuple and len(inner.elts) == 2 else None
        cls = self._declared_class(annotation, names)
        return (_REGISTRY_RESULTS[cls], _written_names) if isinstance(cls, str) and cls in _REGISTRY_RESULTS else None

    def _callable_result(self, annotation: ast.expr, names: Names) -> tuple[ast.expr, Names] | None:
        """R of an annotation ``Callable[..., R]`` (or of one that may be None, whose call raises)."""
        parts = [p for p in self._alternatives(annotation, names) if not _is_none(p)]
        if len(parts) != 1 or type(parts[0]) is not ast.Subscript:
            return None
        generic, inner = names(parts[0].value), parts[0].slice
        if generic & FACTS.annotation_callables and type(inner) is ast.Tuple and len(inner.elts) == 2:
            return inner.elts[1], names
        return None

    def _activation(self, value: ast.expr) -> bool:
        """An activation module of a registry (``ACT2FN[config.hidden_act]``, ``get_activation(name)``)."""
        kind = type(value)
        if kind is ast.Subscript:
            names, known = self._index.import_names(value.value), FACTS.module_activation_registries
        elif kind is ast.Call:
            names, known = self._index.import_names(value.func), FACTS.module_activation_factories
        else:
            return False
        return bool(names) and {self._hierarchy.absolute(n) for n in names} <= known

    def _activated(self, call: ast.Call) -> str:
        """An activation module's result: a tensor for a tensor (one returns its input as it is)."""
        if len(call.args) != 1 or call.keywords or type(call.args[0]) is ast.Starred:
            return UNKNOWN
        known = self._kind(call.args[0])
        return known if known in (TENSOR, _MAYBE, _CYCLE) else UNKNOWN

    def _iterated_items(self, binding: Binding) -> list[ast.expr] | None:
        """What builds the modules a loop over a module list binds (``for layer in self.layers``,
        ``for i, layer in enumerate(self.layers[:n])``, ``zip(self.layers, ...)``)."""
        value, path = binding.value, binding.path
        if path == (ITEM,):
            return self._module_items(value)
        if len(path) != 2 or path[0] is not ITEM or type(value) is not ast.Call or value.keywords:
            return None
        names, args, step = self._index.import_names(value.func), value.args, path[1]
        if any(type(a) is ast.Starred for a in args):
            return None
        if names == {"builtins.enumerate"} and len(args) == 1 and step in (1, -1):
            return self._module_items(args[0])
        return self._module_items(args[step]) if names == {"builtins.zip"} and -len(args) <= step < len(args) else None

    def _module_items(self, expr: ast.expr) -> list[ast.expr] | None:
        """What builds the items of the module list ``expr`` is: ``self.layers``, holding only
        ``nn.ModuleList([Layer(config, i) for i in ...])`` or lists of modules and never changed
        in place, or a slice of it. None if not known."""
        if type(expr) is ast.Subscript and type(expr.slice) is ast.Slice:
            return self._module_items(expr.value)
        if type(expr) is not ast.Attribute or not _is_self(expr.value):
            return None
        cls = self._enclosing_class(expr.value)
        index = self._class_index(cls) if cls else None
        if index is None or expr.attr in index.changed or not index.assigned.get(expr.attr):
            return None
        items: list[ast.expr] = []
        for value in index.assigned[expr.attr]:
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
        cls = self._local_class(func) if func is not None else None
        if cls is None or not self._is_module_class(cls) or self._inherited(cls, "__call__") is not None:
            return None
        return self._inherited(cls, "forward")

    def _instance_kind(self, cls: ast.ClassDef) -> str:
        """A class of this module called: an instance; a module's or a plain local class's is no tensor."""
        return NOT_TENSOR if self._is_module_class(cls) or self._plain_class(cls) else UNKNOWN

    def _plain_class(self, cls: ast.ClassDef, depth: int = 0) -> bool:
        """A class whose bases are all classes of this module (or none): no tensor subclass."""
        if depth > _MAX_DEPTH or cls.keywords:
            return False
        for base in cls.bases:
            local = self._local_class(base)
            if local is None or not self._plain_class(local, depth + 1):
                return False
        return True

    def _returns_kind(self, function: ast.AST) -> str:
        """What a function of this module returns, from its own return statements.

        A bare ``return`` or a body that can end without one returns None; a generator is none
        either. A decorator that is not known to keep the result makes it unknown.
        """
        if not isinstance(function, _FUNCTION_DEFS) or not self._transparent(function):
            return UNKNOWN
        if function.returns is not None:
            declared = self._annotation_kind(function.returns)
            if declared != UNKNOWN:
                return declared
        returns = self._returns(function)
        return self._combine_pending(("returns", function), returns, self._returned) if returns else NOT_TENSOR

    def _returned(self, value: ast.expr | None) -> str:
        return _NONE if value is None else self._kind(value)

    def _returns(self, function: ast.FunctionDef) -> list[ast.expr | None]:
        """The values a function returns (None for None); memoised so that recursion is a cycle."""
        found = self._function_returns.get(function)
        if found is None:
            found = []
            generator = False
            stack = list(function.body)
            while stack:
                node = stack.pop()
                if isinstance(node, _SCOPES):
                    continue
                if type(node) is ast.Return:
                    found.append(node.value)
                generator = generator or isinstance(node, (ast.Yield, ast.YieldFrom))
                stack.extend(ast.iter_child_nodes(node))
            if generator or _falls_through(function.body):
                found.append(None)
            self._function_returns[function] = found = [None] if generator else found
        return found

    def _transparent(self, function: ast.FunctionDef) -> bool:
        """Whether every decorator of a function keeps what it takes and returns (torch.toml)."""
        for decorator in function.decorator_list:
            target = decorator.func if type(decorator) is ast.Call else decorator
            names = {*self._index.import_names(target)}
            names |= {self._hierarchy.absolute(n) for n in names}
            if not names & FACTS.module_transparent_decorators:
                return False
        return True

    def _part_kind(self, value: ast.expr, path: tuple) -> str:
        """The kind of the part of ``value`` that unpacking along ``path`` reaches."""
        if not path:
            return self._kind(value)
        if len(path) > _MAX_PATH:
            return UNKNOWN
        step, rest = path[0], path[1:]
        if step == REST:
            return NOT_TENSOR if not rest else UNKNOWN  # a starred target is a list
        if self._kind(value) in (TENSOR, _MAYBE):
            return TENSOR  # the items of a tensor are tensors, and theirs too (None's raise)
        kind = type(value)
        if kind in (ast.Tuple, ast.List) and not any(type(e) is ast.Starred for e in value.elts):
            elements = value.elts
            if step is ITEM:
                return combine(self._part_kind(e, rest) for e in elements) if elements else UNKNOWN
            return self._part_kind(elements[step], rest) if -len(elements) <= step < len(elements) else UNKNOWN
        if kind in (ast.ListComp, ast.GeneratorExp):  # each item is the element expression's value
            return self._part_kind(value.elt, rest)
        if kind is ast.IfExp:
            return combine((self._part_kind(value.body, path), self._part_kind(value.orelse, path)))
        if kind is ast.Name:
            bindings = self._index.bindings(value)
            if not bindings:
                return UNKNOWN
            return self._combine_pending(("part", path, *map(id, bindings)), bindings, lambda b: self._binding_part(b, path))
        if kind is ast.Call:
            return self._call_part(value, path)
        declared = self._declared(value) if kind is ast.Attribute else None  # outputs.hidden_states[0]
        return self._annotation_part(declared[0], path, names=declared[1]) if declared else UNKNOWN

    def _binding_part(self, binding: Binding, path: tuple) -> str:
        if binding.kind in (ASSIGN, NAMED) and binding.value is not None:
            return self._part_kind(binding.value, path)
        if binding.kind == UNPACKED:
            return self._part_kind(binding.value, binding.path + path)
        if binding.kind in (PARAMETER, ANNOTATED) and binding.annotation is not None:
            return self._annotation_part(binding.annotation, path, _is_vararg(binding))
        return TENSOR if self._binding_kind(binding) in (TENSOR, _MAYBE) else UNKNOWN

    def _call_part(self, call: ast.Call, path: tuple) -> str:
        """A part of a call's result: tuples of tensors of torch, zip/enumerate, functions of this module."""
        func = call.func
        if type(func) is ast.Attribute and func.attr in FACTS.tensors_methods and not self._index.import_names(func):
            return _through(self._kind(func.value))
        if type(func) is ast.Attribute:
            declared = self._declared_method(func)
            if declared:
                return self._annotation_part(declared[0], path, names=declared[1])
        names = self._index.import_names(func)
        if names:
            if names <= FACTS.tensors_functions:
                return TENSOR
            if all(n.startswith("builtins.") for n in names):
                return self._builtin_part(names, call, path)
            return self._callee_result(self._imported_callee(names), call, path)
        return self._called(call, path)

    def _returned_part(self, function: ast.FunctionDef, path: tuple) -> str:
        """A part of what a function of this module returns: as its return annotation declares, else
        as its return statements give."""
        if function.returns is not None:
            declared = self._annotation_part(function.returns, path)
            if declared != UNKNOWN:
                return declared
        returns = [v for v in self._returns(function) if v is not None]  # unpacking None raises
        return self._combine_pending(("returned part", path, function), returns, lambda v: self._part_kind(v, path)) if returns else UNKNOWN

    def _builtin_part(self, names: set[str], call: ast.Call, path: tuple) -> str:
        """Items of ``zip(a, b)`` and ``enumerate(a)``: tuples of the arguments' items."""
        if len(path) < 2 or path[0] is not ITEM or not isinstance(path[1], int) or call.keywords:
            return UNKNOWN
        args, step = call.args, path[1]
        if names == {"builtins.zip"} and not any(type(a) is ast.Starred for a in args):
            return self._part_kind(args[step], (ITEM, *path[2:])) if -len(args) <= step < len(args) else UNKNOWN
        if names == {"builtins.enumerate"} and len(args) == 1 and step in (0, 1, -1, -2):
            return NOT_TENSOR if step in (0, -2) and len(path) == 2 else self._part_kind(args[0], (ITEM, *path[2:])) if step in (1, -1) else UNKNOWN
        return UNKNOWN

    def _functions_called(self, func: ast.expr) -> list[ast.FunctionDef]:
        """The functions of this module a call of ``func`` may run ([]: some it may run are not
        functions of this module, or not known)."""
        callees = self._callees(func) or []
        functions = [c.function for c in callees]
        return functions if None not in functions else []

    def _method_kind(self, func: ast.Attribute) -> str:
        method = func.attr
        if method in FACTS.not_tensor_methods:
            receiver = self._kind(func.value)
            return NOT_TENSOR if receiver in (TENSOR, _MAYBE) else _through(receiver)
        if method in self._tensor_methods or method in FACTS.tensor_methods:
            return _through(self._kind(func.value))
        declared = self._declared_method(func)
        return self._annotation_kind(*declared) if declared else UNKNOWN

    def _declared_method(self, func: ast.Attribute) -> tuple[ast.expr, Names | None] | None:
        """The return annotation of a method called on a value whose class is declared
        (``cache.update(k, v)`` with ``cache: Cache | None``), with what its names import where it
        is written: a class of this module, or of a file an import names. None if not known."""
        declared = self._declared(func.value)
        cls = self._declared_class(*declared) if declared else None
        if isinstance(cls, ast.ClassDef):
            method = self._inherited(cls, func.attr)
            if method is None or method.returns is None or method.decorator_list:
                return None
            return method.returns, None
        return self._hierarchy.method_returns(cls, func.attr) if cls else None

    def _declared(self, expr: ast.expr, seen: frozenset = frozenset()) -> tuple[ast.expr, Names] | None:
        """The annotation that declares what ``expr`` is, with what its names import: a name's (its one
        binding annotated, imported from a file that annotates it, or assigned a declared value; or
        every binding of one class), an instance's class (``AttentionInterface()``), an attribute's
        of a declared class as torch.toml's [attributes] gives it (``cache.self_attention_cache``),
        an item's of a declared list (``cache.layers[i]``). None if not known."""
        kind = type(expr)
        if kind is ast.Name:
            bindings = self._index.bindings(expr)
            if not bindings or id(bindings) in seen:
                return None
            found = []
            for binding in bindings:
                if binding.kind in (PARAMETER, ANNOTATED) and binding.annotation is not None and not _is_vararg(binding):
                    found.append((binding.annotation, self._index.import_names))
                elif binding.kind == ASSIGN and binding.value is not None:
                    found.append(self._declared(binding.value, seen | {id(bindings)}))
                elif binding.kind == IMPORT:
                    found.append(self._hierarchy.declared(binding.qualified))
                else:
                    return None
            if None in found:
                return None
            if len(found) > 1 and (len({self._declared_class(*d) for d in found}) != 1 or self._declared_class(*found[0]) is None):
                return None
            return found[0]
        if kind is ast.Call:
            if is_dotted(expr.func) and not expr.args and not expr.keywords:
                return expr.func, self._index.import_names  # an instance: AttentionInterface()
            return self._declared_result(expr)
        if kind is ast.Attribute:
            owner = self._declared(expr.value, seen)
            cls = self._declared_class(*owner, fields=True) if owner else None
            return self._field(cls, expr.attr) if cls is not None else None
        if kind is ast.IfExp:
            sides = [self._declared(e, seen) for e in (expr.body, expr.orelse)]
            classes = {self._declared_class(*side) if side else None for side in sides}
            return sides[0] if len(classes) == 1 and None not in classes else None
        if kind is ast.Subscript and type(expr.slice) is not ast.Slice:
            owner = self._declared(expr.value, seen)
            annotation, names = owner if owner else (None, None)
            if type(annotation) is ast.Subscript and names(annotation.value) & FACTS.annotation_sequences:
                return annotation.slice, names
        return None

    def _declared_result(self, call: ast.Call) -> tuple[ast.expr, Names] | None:
        """The return annotation of what a call runs (a method, a module's forward, a function of
        another file), if every callee declares one class (``-> tuple | BaseModelOutput``)."""
        found = []
        for callee in self._callees(call.func) or [None]:
            if callee is not None and callee.function is not None and callee.function.returns is not None:
                found.append((callee.function.returns, self._index.import_names))
            elif callee is not None and callee.declared is not None:
                found.append(callee.declared)
            else:
                return None
        classes = {self._declared_class(*declared, fields=True) for declared in found}
        return found[0] if len(classes) == 1 and None not in classes else None

    def _declared_class(self, annotation: ast.expr, names: Names | None = None, fields: bool = False) -> ast.ClassDef | str | None:
        """The class an annotation declares, None aside (``Cache | None``, ``Optional[Cache]``): a
        class of this module, or the absolute name of one a file defines. ``fields``: for reading a
        field, so tuples, lists and dicts aside too (``tuple | ModelOutput``: a tuple has none)."""
        names = names or self._index.import_names
        parts = [p for p in self._alternatives(annotation, names) if not _is_none(p)]
        if fields:
            parts = [p for p in parts if not names(p.value if type(p) is ast.Subscript else p) & _CONTAINERS]
        if len(parts) != 1:
            return None
        annotation = parts[0]
        if not is_dotted(annotation) or self._annotation_kind(annotation, names) != NOT_TENSOR:
            return None
        if names == self._index.import_names:
            local = self._local_class(annotation)
            if local is not None:
                return local
        qualified = names(annotation)
        return self._hierarchy.absolute(qualified.pop()) if len(qualified) == 1 else None

    def _alternatives(self, annotation: ast.expr, names: Names) -> list[ast.expr]:
        """The alternatives of a union annotation (``A | B | None``, ``Optional[A]``, ``Union[A, B]``)."""
        annotation = self._parsed(annotation)
        if type(annotation) is ast.BinOp and type(annotation.op) is ast.BitOr:
            return self._alternatives(annotation.left, names) + self._alternatives(annotation.right, names)
        if type(annotation) is ast.Subscript and names(annotation.value) & FACTS.annotation_unions:
            inner = annotation.slice
            return [a for e in (inner.elts if type(inner) is ast.Tuple else [inner]) for a in self._alternatives(e, names)]
        return [annotation]

    def _field(self, cls: ast.ClassDef | str, name: str, depth: int = 0) -> tuple[ast.expr, Names] | None:
        """The annotation of a field a class declares in its body (``last_hidden_state: torch.FloatTensor
        | None = None`` of a model output dataclass), or of its bases; torch.toml's [attributes]
        first, for classes that do not declare it where it is read."""
        if isinstance(cls, str):
            declared = _FACT_ANNOTATIONS.get(f"{cls}.{name}")
            return (declared, _written_names) if declared is not None else self._hierarchy.field(cls, name)
        for statement in cls.body:
            if type(statement) is ast.AnnAssign and type(statement.target) is ast.Name and statement.target.id == name:
                return statement.annotation, self._index.import_names
        for base in cls.bases if depth < _MAX_DEPTH else ():
            local = self._local_class(base)
            names = self._index.import_names(base)
            found = self._field(local, name, depth + 1) if local else self._field(names.pop(), name) if len(names) == 1 else None
            if found is not None:
                return found
        return None

    def _attribute_kind(self, attr: ast.Attribute) -> str:
        if self._index.import_names(attr):
            return NOT_TENSOR  # a module attribute: torch.float32, math.pi, np.newaxis
        name = attr.attr
        if name in FACTS.not_tensor_attributes:
            return NOT_TENSOR
        if name in FACTS.tensor_attributes:
            return _through(self._kind(attr.value))
        if self._is_config(attr.value) or self._is_config(attr):
            return NOT_TENSOR  # a config's value: JSON data or a sub-config
        if _is_self(attr.value):
            return self._self_attribute_kind(attr)
        if name in FACTS.module_parameters and self._held_torch_module(attr.value):
            return _MAYBE  # an nn module's weight or bias: a parameter, or None (bias=False)
        if name in FACTS.module_output_fields:
            field = self._output_field(attr.value, name, frozenset())
            if field is not None:
                return field
        declared = self._declared(attr)  # cache.layers[i].keys
        return self._annotation_kind(*declared) if declared else UNKNOWN

    def _output_field(self, value: ast.expr, field: str, seen: frozenset) -> str | None:
        """A field of the model output a call of a module of this module returns
        (``self.model(x).last_hidden_state``, through names assigned such calls); None if not one."""
        if type(value) is ast.Name:
            bindings = self._index.bindings(value)
            if not bindings or id(bindings) in seen or any(b.kind != ASSIGN or b.value is None for b in bindings):
                return None
            fields = [self._output_field(b.value, field, seen | {id(bindings)}) for b in bindings]
            return None if None in fields else combine(fields)
        if type(value) is not ast.Call:
            return None
        functions = self._functions_called(value.func)
        if not functions or not all(self._keeps_fields(f) for f in functions):
            return None
        returned = [self._returned_field(v, field) for f in functions for v in self._returns(f)]
        return None if None in returned else combine(returned)

    def _keeps_fields(self, function: ast.FunctionDef) -> bool:
        """Every decorator keeps what the function returns, or its output's fields (torch.toml)."""
        for decorator in function.decorator_list:
            target = decorator.func if type(decorator) is ast.Call else decorator
            names = {self._hierarchy.absolute(n) for n in self._index.import_names(target)}
            if not names or not names <= FACTS.module_transparent_decorators | FACTS.module_output_decorators:
                return False
        return True

    def _returned_field(self, value: ast.expr | None, field: str) -> str | None:
        """A field of a returned value: ``Output(field=x, ...)``'s x, None if not passed (every field
        but the first defaults to None); None's raises. None if not an output built there."""
        if value is None or _is_none(value):
            return _CYCLE
        if type(value) is ast.IfExp:
            sides = (self._returned_field(value.body, field), self._returned_field(value.orelse, field))
            return None if None in sides else combine(sides)
        if type(value) is not ast.Call or value.args or not self._output_class(value.func):
            return None
        passed = [k.value for k in value.keywords if k.arg == field]
        if any(k.arg is None for k in value.keywords):
            return None  # **fields
        return self._kind(passed[0]) if passed else _NONE

    def _output_class(self, func: ast.expr, depth: int = 0) -> bool:
        """A model-output dataclass: a dataclass of this module deriving from one, or one a file defines."""
        local = self._local_class(func)
        if local is None:
            names = self._index.import_names(func)
            return len(names) == 1 and self._hierarchy.derives(names.pop(), FACTS.module_output_classes)
        dataclass = any(self._index.import_names(d.func if type(d) is ast.Call else d) & _DATACLASS for d in local.decorator_list)
        return dataclass and depth < _MAX_DEPTH and len(local.bases) == 1 and self._output_class(local.bases[0], depth + 1)

    def _held_torch_module(self, value: ast.expr) -> bool:
        """``self.<name>`` always holding an instance of one of torch's layers (``nn.Linear``)."""
        if type(value) is not ast.Attribute or not _is_self(value.value):
            return False
        cls = self._enclosing_class(value.value)
        values = self._class_index(cls).assigned.get(value.attr) if cls else None
        return bool(values) and all(
            type(v) is ast.Call and self._index.import_names(v.func) and self._index.import_names(v.func) <= FACTS.module_tensor_results
            for v in values
        )

    def _self_attribute_kind(self, attr: ast.Attribute) -> str:
        """``self.x``: what every ``self.x = ...`` / ``register_buffer("x", ...)`` in the class holds."""
        cls = self._enclosing_class(attr.value)
        values = self._class_index(cls).assigned.get(attr.attr) if cls else None
        return self._combine_pending(("attribute", id(values)), values, self._kind) if values else UNKNOWN

    def _name_kind(self, name: ast.Name) -> str:
        if self._is_config(name):
            return NOT_TENSOR
        bindings = self._index.bindings(name)
        return self._combine_pending(("name", *map(id, bindings)), bindings, self._binding_kind) if bindings else UNKNOWN

    def _combine_pending(self, key: tuple, evidence: list, kind_of) -> str:
        """Combine the kinds of ``evidence`` (the bindings of a name, the values stored in a
        ``self`` attribute, a function's returns), asked as the question ``key``.

        Answers are the least fixed point of these equations, whatever question came first: a
        key read while it is being inferred (``x = x.float()``) reads its kind so far (at
        first: no value), and the first pending key (the circle's) infers again, round after
        round, until every such read read what its key came to (``n = 1; n = (n * 2).sin()``:
        an int, then unknown). Kinds only grow, so rounds end.
        """
        known = self._kinds.get(key)
        if known is not None:
            return known
        if key in self._pending:
            self._tentative += 1
            known = self._circle.get(key, _CYCLE)
            self._reads.append((key, known))
            return known
        if self._circle is not None:
            return self._infer_pending(key, evidence, kind_of)
        self._circle = {}
        try:
            while True:
                self._round, self._reads = {}, []
                known = self._infer_pending(key, evidence, kind_of)
                if all(self._circle.get(k) == read for k, read in self._reads):
                    self._kinds.update(self._round)  # every answer of this round is final
                    return known
        finally:
            self._circle, self._round, self._reads = None, {}, []

    def _infer_pending(self, key: tuple, evidence: list, kind_of) -> str:
        """One round's kind of ``key``: final if it read no kind so far, else joined with the last."""
        known = self._round.get(key)
        if known is not None:
            self._tentative += 1
            return known
        if len(self._pending) > _MAX_DEPTH:
            raise _Deep(key, lambda: self._combine_pending(key, evidence, kind_of))
        tentative = self._tentative
        self._pending.add(key)
        try:
            known = combine([kind_of(e) for e in evidence])
        finally:
            self._pending.discard(key)
        if self._tentative == tentative:
            self._kinds[key] = known
            return known
        self._circle[key] = self._round[key] = known = combine((self._circle.get(key, _CYCLE), known))
        return known

    def _binding_kind(self, binding: Binding) -> str:
        how = binding.kind
        if how in (IMPORT, DEFINITION):
            return NOT_TENSOR
        if how == PARAMETER:
            return self._param_kind(binding)
        if how in (ASSIGN, NAMED):
            return self._kind(binding.value)
        if how == ANNOTATED:
            declared = self._annotation_kind(binding.annotation)
            if declared != UNKNOWN or binding.value is None:
                return declared
            return self._kind(binding.value)
        if how == AUGMENTED:  # x op= v: x op v, x's in-place method where x is a tensor
            return self._kind(self._augmented(binding))
        if how == UNPACKED:
            return self._part_kind(binding.value, binding.path)
        return UNKNOWN

    def _augmented(self, binding: Binding) -> ast.expr:
        """``x op v`` for the augmented assignment ``x op= v`` of ``binding``, its ``x`` the read it
        first is (the value ``v`` alone where ``x`` is no name)."""
        found = self._augmented_values.get(binding.node)
        if found is None:
            target = binding.node
            if type(target) is not ast.Name:
                return binding.value
            read = ast.copy_location(ast.Name(target.id, ast.Load()), target)
            self._index.scope_of[read] = self._index.scope_of[target]
            found = self._augmented_values[target] = ast.copy_location(ast.BinOp(read, ast.Add(), binding.value), target)
        return found

    def _param_kind(self, param: Binding) -> str:
        if _is_vararg(param):
            return NOT_TENSOR  # *args is a tuple (its annotation is its items')
        if param.annotation is not None:
            return self._annotation_kind(param.annotation)
        if param.value is not None and not _is_none(param.value):
            return self._kind(param.value)
        function = param.function
        if not isinstance(function, _FUNCTION_DEFS):
            return UNKNOWN
        cls = self._class_of_function(function)
        if cls is None:
            return self._function_param_kind(function, param) if self._transparent(function) else UNKNOWN
        if param.index < 0 or not self._is_module_class(cls):
            return UNKNOWN
        static = self._decorated(function, "builtins.staticmethod")
        if not static:
            if self._decorated(function, "builtins.classmethod"):
                return UNKNOWN
            if param.index == 0:
                return NOT_TENSOR  # self: a module (self.norm(x) is no Tensor.norm)
            if function.name == "forward":
                return TENSOR
        if not self._transparent(function):
            return UNKNOWN
        return self._passed_kind(self._class_index(cls).calls.get(function.name, ()), param, 0 if static else 1)

    def _decorated(self, function: ast.FunctionDef, name: str) -> bool:
        """Whether a decorator of ``function`` is the builtin ``name`` (``builtins.staticmethod``)."""
        return any(name in self._index.import_names(d) for d in function.decorator_list)

    def _function_param_kind(self, function: ast.FunctionDef, param: Binding) -> str:
        """A parameter of a function (not a method) of this module: what every call of it passes.

        Only for a function whose name is read nowhere but as a call's callee (so no caller is
        out of sight in this module), bound by that one ``def``.
        """
        calls = self._direct_calls().get(function)
        return self._passed_kind(calls, param, 0) if calls else UNKNOWN

    def _passed_kind(self, calls, param: Binding, offset: int) -> str:
        """What the calls pass for a parameter (its default where they pass nothing)."""
        kinds = []
        for call in calls:
            if any(type(a) is ast.Starred for a in call.args) or any(k.arg is None for k in call.keywords):
                return UNKNOWN
            arg = _argument_at(call, param.index - offset if param.index >= 0 else -1, param.node.arg)
            if arg is None:
                arg = param.value if param.value is not None else ast.Constant(None)
            kinds.append(self._kind(arg))
        return combine(kinds) if kinds else UNKNOWN

    def _direct_calls(self) -> dict[ast.AST, list[ast.Call]]:
        """Functions of this module whose every read is a call's callee, with those calls."""
        if self._calls_of is None:
            callee = {id(c.func): c for c in self._index.calls if type(c.func) is ast.Name}
            named = {id(a) for c in self._index.calls if self._names_only(c) for a in c.args}
            calls: dict[ast.AST, list[ast.Call]] = {}
            escaped: set[ast.AST] = set()
            for node, scope in self._index.scope_of.items():
                if type(node) is not ast.Name or type(node.ctx) is not ast.Load:
                    continue
                bindings = self._index.lookup(scope, node.id)
                for b in bindings:
                    if b.kind == DEFINITION and isinstance(b.node, _FUNCTION_DEFS):
                        call = callee.get(id(node))
                        if call is None and id(node) in named:
                            continue  # named to a decorator that never calls it
                        if call is None or len(bindings) != 1:
                            escaped.add(b.node)
                        else:
                            calls.setdefault(b.node, []).append(call)
            exported = _exported(self._index)
            self._calls_of = {
                f: c for f, c in calls.items() if f not in escaped and f.name not in exported
            }
        return self._calls_of

    def _names_only(self, call: ast.Call) -> bool:
        """A call that only takes note of the functions passed to it (a hub kernel's registration)."""
        return any(self._hierarchy.absolute(n) in FACTS.module_naming_calls for n in self._index.import_names(call.func))

    def _is_module_class(self, cls: ast.ClassDef) -> bool:
        """Derives from ``nn.Module``, directly or through classes of this module or of files it imports."""
        known = self._module_classes.get(cls)
        if known is None:
            self._module_classes[cls] = False  # a cyclic hierarchy is not a module
            known = any(self._is_module_base(base) for base in cls.bases)
            self._module_classes[cls] = known
        return known

    def _is_module_base(self, base: ast.expr) -> bool:
        if any(self._hierarchy.is_module(name) for name in self._index.import_names(base)):
            return True
        if type(base) is not ast.Name:
            return False
        bindings = self._index.bindings(base)
        return len(bindings) == 1 and isinstance(bindings[0].node, ast.ClassDef) and self._is_module_class(bindings[0].node)

    def _parsed(self, annotation: ast.expr) -> ast.expr:
        """A string annotation (``"torch.Tensor"``) as the expression it spells, its names read at
        module level, as ``typing.get_type_hints`` reads them; any other annotation as it is."""
        if type(annotation) is not ast.Constant or not isinstance(annotation.value, str):
            return annotation
        parsed = self._strings.get(annotation)
        if parsed is None:
            try:
                parsed = ast.parse(annotation.value.strip(), mode="eval").body
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                parsed = ast.Constant(...)  # says nothing
            for node in ast.walk(parsed):
                if type(node) is ast.Name:
                    self._index.scope_of[node] = self._index.module
            self._strings[annotation] = parsed
        return parsed

    def _annotation_kind(self, annotation: ast.expr, names: Names | None = None) -> str:
        """Tensor for ``Tensor``/``torch.Tensor``/``Optional[Tensor]``/``Tensor | None``; else not.

        ``names``: what a dotted name in the annotation imports (default: in this module).
        """
        names = names or self._index.import_names
        annotation = self._parsed(annotation)
        kind = type(annotation)
        if kind is ast.Constant:
            return NOT_TENSOR if annotation.value is None else UNKNOWN
        if kind is ast.BinOp:  # X | None
            parts = (annotation.left, annotation.right)
            return combine({self._annotation_kind(p, names) for p in parts if not _is_none(p)})
        if kind is ast.Subscript:
            if names(annotation.value) & FACTS.annotation_unions:
                inner = annotation.slice
                elements = inner.elts if type(inner) is ast.Tuple else [inner]
                return combine(self._annotation_kind(e, names) for e in elements if not _is_none(e))
            return NOT_TENSOR
        named = names(annotation)
        if named & FACTS.tensor_classes:
            return TENSOR
        if named & FACTS.annotation_unknown:
            return UNKNOWN
        return NOT_TENSOR if named or kind in (ast.Name, ast.Attribute) else UNKNOWN

    def _annotation_part(self, annotation: ast.expr, path: tuple, items: bool = False, names: Names | None = None) -> str:
        """The kind of the part of a value declared ``annotation`` that unpacking along ``path``
        reaches: ``tuple[Tensor, Tensor]``'s elements, ``list[Tensor]``'s items; None raises there.

        ``items``: the annotation declares the items of the value (``*args: Tensor``).
        """
        names = names or self._index.import_names
        annotation = self._parsed(annotation)
        if items:
            if path and path[0] == REST:
                return NOT_TENSOR if len(path) == 1 else UNKNOWN
            return self._annotation_part(annotation, path[1:], names=names) if path else NOT_TENSOR
        if not path:
            return self._annotation_kind(annotation, names)
        step, rest = path[0], path[1:]
        kind = type(annotation)
        if kind is ast.BinOp and type(annotation.op) is ast.BitOr:  # X | None
            parts = [p for p in (annotation.left, annotation.right) if not _is_none(p)]
            return combine(self._annotation_part(p, path, names=names) for p in parts)
        if kind is not ast.Subscript:
            return TENSOR if self._annotation_kind(annotation, names) == TENSOR else UNKNOWN  # a tensor's items
        generic = names(annotation.value)
        inner = annotation.slice
        elements = inner.elts if type(inner) is ast.Tuple else [inner]
        if generic & FACTS.annotation_unions:
            return combine(self._annotation_part(e, path, names=names) for e in elements if not _is_none(e))
        if step == REST:
            return NOT_TENSOR if not rest else UNKNOWN  # a starred target is a list
        if generic & FACTS.annotation_tuples:
            if len(elements) == 2 and type(elements[1]) is ast.Constant and elements[1].value is Ellipsis:
                return self._annotation_part(elements[0], rest, names=names)  # tuple[T, ...]
            if step is ITEM:
                return combine(self._annotation_part(e, rest, names=names) for e in elements) if elements else UNKNOWN
            return self._annotation_part(elements[step], rest, names=names) if -len(elements) <= step < len(elements) else UNKNOWN
        if generic & FACTS.annotation_sequences and len(elements) == 1:
            return self._annotation_part(elements[0], rest, names=names)
        return UNKNOWN

    def held_module(self, func: ast.Attribute) -> HeldModule | None:
        """The torch.nn class that ``self.<name>`` always holds, if every value stored there is one's instance."""
        if not _is_self(func.value):
            return None
        cls = self._enclosing_class(func.value)
        values = self._class_index(cls).assigned.get(func.attr) if cls else None
        if not values or any(type(v) is not ast.Call for v in values):
            return None
        names = set.union(*(self._index.import_names(v.func) for v in values))
        if len(names) != 1 or not next(iter(names)).startswith("torch.nn."):
            return None
        return HeldModule(names.pop(), all(not v.args and not v.keywords for v in values))

    def self_method(self, func: ast.expr) -> ast.FunctionDef | None:
        """The method of the enclosing class (or its bases here) that ``self.<name>`` calls, if any."""
        if type(func) is not ast.Attribute or not _is_self(func.value):
            return None
        cls = self._enclosing_class(func.value)
        return self._inherited(cls, func.attr) if cls is not None else None

    # --- dtypes and names ----------------------------------------------------------------

    def static_dtype(self, expr: ast.expr) -> str | None:
        """The dtype an expression statically is, ``"?"`` for an unknown dtype, else None."""
        kind = type(expr)
        if kind is ast.Attribute:
            dtype = _torch_dtype(self._index.import_names(expr))
            if dtype:
                return dtype
            return "?" if expr.attr == "dtype" else None
        if kind is ast.Call and "torch.get_default_dtype" in self._index.import_names(expr.func):
            return "?"
        if kind is ast.Name:
            return self._name_dtype(expr)
        return None

    def static_device(self, expr: ast.expr) -> bool:
        """Whether an expression statically names a device: ``"cuda:0"``, ``torch.device(...)``, ``x.device``."""
        kind = type(expr)
        if kind is ast.Constant:
            return isinstance(expr.value, str) and expr.value.partition(":")[0] in FACTS.device_types
        if kind is ast.Call:
            return bool(self._index.import_names(expr.func) & FACTS.device_classes)
        if kind is ast.Attribute:
            return expr.attr == "device" and not self._index.import_names(expr)
        if kind is ast.Name:
            bindings = self._index.bindings(expr)
            return bool(bindings) and all(self._binding_device(b) for b in bindings)
        return False

    def _binding_device(self, binding: Binding) -> bool:
        if binding.kind in (PARAMETER, ANNOTATED) and binding.annotation is not None:
            return bool(self._index.import_names(binding.annotation) & FACTS.device_classes)
        return binding.kind == ASSIGN and binding.value is not binding.node and self.static_device(binding.value)

    def _name_dtype(self, name: ast.Name) -> str | None:
        dtype = _torch_dtype(self._index.import_names(name))
        if dtype:
            return dtype
        bindings = self._index.bindings(name)
        if not bindings or any(b.kind != ASSIGN for b in bindings):
            return None
        values = [self.static_dtype(b.value) for b in bindings if b.value is not name]
        if not values or None in values:
            return None
        return values[0] if len(set(values)) == 1 else "?"

    def torch_name(self, node: ast.AST) -> str | None:
        """A name that reaches the torch package at ``node`` (``torch`` if free there)."""
        scope = self._index.scope_of.get(node)
        if scope is None:
            return None
        if self._torch_aliases is None:
            module = self._index.module.bindings
            self._torch_aliases = sorted(n for n, bs in module.items() if n != "torch" and any(_imports_torch(b) for b in bs))
        for candidate in ["torch", *self._torch_aliases]:
            bindings = self._index.lookup(scope, candidate)
            if bindings and all(_imports_torch(b) for b in bindings):
                return candidate
        if self._index.lookup(scope, "torch") or self._reads_torch():
            return None
        self.spelt_free_torch = True  # free everywhere: an added `import torch` gives it meaning
        return "torch"

    def _reads_torch(self) -> bool:
        """Whether the module reads a name ``torch`` (importing torch would change what it means)."""
        if self._torch_read is None and self._module_reads_torch is not None:
            self._torch_read = self._module_reads_torch()
        if self._torch_read is None:
            self._torch_read = any(type(n) is ast.Name and n.id == "torch" for n in self._index.scope_of)
        return self._torch_read

    # --- helpers -------------------------------------------------------------------------

    def _class_index(self, cls: ast.ClassDef) -> _ClassIndex:
        """What a class does with ``self``, with what its bases of this module store there (their
        ``__init__`` runs as the class's own, or through ``super().__init__()``)."""
        index = self._classes.get(cls)
        if index is None:
            self._classes[cls] = index = _ClassIndex(cls)  # a cyclic hierarchy reads it as it is
            for base in cls.bases:
                local = self._local_class(base)
                if local is not None:
                    index.inherit(self._class_index(local))
        return index

    def _enclosing_class(self, name: ast.expr) -> ast.ClassDef | None:
        scope = self._index.scope_of.get(name)
        return scope.enclosing(ast.ClassDef) if scope else None

    def _local_class(self, expr: ast.expr) -> ast.ClassDef | None:
        """The class of this module a name always is."""
        if type(expr) is not ast.Name:
            return None
        bindings = self._index.bindings(expr)
        if len(bindings) == 1 and isinstance(bindings[0].node, ast.ClassDef):
            return bindings[0].node
        return None

    def _method(self, cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
        """A method the class body itself defines (a plain one: no decorator that changes it)."""
        found = [s for s in cls.body if isinstance(s, _FUNCTION_DEFS) and s.name == name]
        return found[-1] if found else None

    def _inherited(self, cls: ast.ClassDef, name: str, depth: int = 0) -> ast.FunctionDef | None:
        """The method ``name`` of a class or, depth first, of its bases of this module."""
        method = self._method(cls, name)
        if method is not None or depth > _MAX_DEPTH:
            return method
        for base in cls.bases:
            local = self._local_class(base)
            found = self._inherited(local, name, depth + 1) if local is not None else None
            if found is not None:
                return found
        return None

    def _class_of_function(self, function: ast.AST) -> ast.ClassDef | None:
        """The class whose body defines ``function`` directly."""
        scope = self._index.scope_of.get(function)
        return scope.node if scope is not None and scope.is_class else None


@dataclasses.dataclass(frozen=True, eq=False)
class _Callee:
    """What a call may run: a function of this module (its returns), a declared result (an
    annotation, with what its names import), an activation (its argument's kind), or a fixed kind."""

    function: ast.FunctionDef | None = None
    declared: tuple[ast.expr, Names] | None = None
    activation: bool = False
    kind: str = UNKNOWN


def _all(found: Iterable[list[_Callee] | None]) -> list[_Callee] | None:
    """Every list's callees, or None if some list is None (not known)."""
    callees: list[_Callee] = []
    for part in found:
        if part is None:
            return None
        callees += part
    return callees


class _Deep(Exception):
    """A chain of questions deeper than the stack allows: ``again`` asks its innermost ``key`` first."""

    def __init__(self, key, again: Callable[[], str]) -> None:
        self.key, self.again = key, again


@dataclasses.dataclass(frozen=True)
class HeldModule:
    """An nn module class held in an attribute; ``bare``: every instance was built with no arguments."""

    name: str
    bare: bool

    def held(self, attributes: Mapping[str, str], required: frozenset[str] = frozenset()) -> tuple[tuple[str, str], ...]:
        """(parameter, attribute) pairs a call reads from the module; a bare module's are at their
        defaults, but for the ``required`` parameters, which have none (nn.PReLU()'s weight)."""
        return tuple((p, a) for p, a in attributes.items() if not self.bare or p in required)


def is_tensor_function(name: str) -> bool:
    """Whether a torch function (fully qualified) returns one tensor: the ops a report counts."""
    module, _, function = name.rpartition(".")
    return (
        module in FACTS.tensor_namespaces
        and function[:1].islower()
        and not function.startswith("_")
        and function not in FACTS.not_tensor_functions
    )


def is_dotted(node: ast.expr) -> bool:
    """A plain dotted name (``a``, ``a.b.c``), with no call or subscript in it."""
    while type(node) is ast.Attribute:
        node = node.value
    return type(node) is ast.Name


def _function_kind(name: str) -> str:
    if name.startswith("builtins."):
        return NOT_TENSOR if name[9:] in FACTS.not_tensor_builtins else UNKNOWN
    return TENSOR if name in FACTS.tensor_classes or is_tensor_function(name) else NOT_TENSOR


def _torch_dtype(names: set[str]) -> str | None:
    for name in names:
        prefix, _, last = name.rpartition(".")
        if prefix == "torch" and last in DTYPE_NAMES:
            return DTYPE_NAMES[last]
    return None


def _constant_index(node: ast.expr) -> int | None:
    """An integer literal index (``t[0]``, ``t[-1]``), else None."""
    if type(node) is ast.UnaryOp and type(node.op) is ast.USub:
        inner = _constant_index(node.operand)
        return -inner if inner is not None else None
    if type(node) is ast.Constant and type(node.value) is int:
        return node.value
    return None


def _is_number(node: ast.expr) -> bool:
    if type(node) is ast.UnaryOp and type(node.op) in (ast.USub, ast.UAdd):
        return _is_number(node.operand)
    return type(node) is ast.Constant and type(node.value) in (int, float, bool)


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


def _exported(index: ModuleIndex) -> set[str]:
    """Names the module's ``__all__`` lists."""
    names = set()
    for binding in index.module.bindings.get("__all__", ()):
        value = binding.value
        if isinstance(value, (ast.List, ast.Tuple)):
            names.update(e.value for e in value.elts if type(e) is ast.Constant and isinstance(e.value, str))
    return names


def _is_none(node: ast.expr) -> bool:
    return type(node) is ast.Constant and node.value is None


def _config_name(name: str) -> bool:
    return any(name == n or name.endswith("_" + n) for n in FACTS.plain_config_names)


def _is_vararg(binding: Binding) -> bool:
    """A ``*args`` parameter."""
    function = binding.function
    return binding.kind == PARAMETER and function is not None and function.args.vararg is binding.node


def _is_self(node: ast.expr) -> bool:
    return type(node) is ast.Name and node.id == "self"


def _imports_torch(binding: Binding) -> bool:
    return binding.kind == IMPORT and binding.qualified == "torch"


def _argument_at(call: ast.Call, index: int, name: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    positional = [a for a in call.args if type(a) is not ast.Starred]
    return positional[index] if 0 <= index < len(positional) else None


class _ClassIndex:
    """What one class does with ``self``: values stored per attribute, calls per method."""

    def __init__(self, cls: ast.ClassDef) -> None:
        self.assigned: dict[str, list[ast.expr]] = {}
        self.calls: dict[str, list[ast.Call]] = {}
        self.changed: set[str] = set()  # attributes whose value is changed in place (self.layers.append(m))
        for node in ast.walk(cls):
            kind = type(node)
            if kind is ast.Assign:
                for target in node.targets:
                    self._store(target, node.value)
            elif kind is ast.AnnAssign and node.value is not None:
                self._store(node.target, node.value)
            elif kind is ast.AugAssign:
                self._store(node.target, ast.BinOp(node.target, node.op, node.value))
            elif kind in (ast.For, ast.AsyncFor, ast.comprehension, ast.With, ast.AsyncWith):
                for target in _targets(node):
                    self._store(target, _UNKNOWN_VALUE)
            elif kind is ast.Call and type(node.func) is ast.Attribute and _is_self(node.func.value):
                self._call(node)
            elif kind is ast.Call and type(node.func) is ast.Attribute and node.func.attr in _IN_PLACE_CHANGES:
                self._changed(node.func.value)

    def _call(self, node: ast.Call) -> None:
        method = node.func.attr
        self.calls.setdefault(method, []).append(node)
        args = node.args
        if method == "register_buffer" and len(args) >= 2 and type(args[0]) is ast.Constant:
            if isinstance(args[0].value, str):
                self.assigned.setdefault(args[0].value, []).append(args[1])

    def inherit(self, base: _ClassIndex) -> None:
        """Add what a base class stores on ``self`` (its calls of methods stay its own)."""
        for name, values in base.assigned.items():
            self.assigned[name] = self.assigned[name] + values if name in self.assigned else values
        self.changed |= base.changed

    def _changed(self, target: ast.expr) -> None:
        if type(target) is ast.Attribute and _is_self(target.value):
            self.changed.add(target.attr)

    def _store(self, target: ast.expr, value: ast.expr) -> None:
        if type(target) is ast.Subscript:  # self.layers[0] = m
            self._changed(target.value)
        elif type(target) is ast.Attribute and _is_self(target.value):
            self.assigned.setdefault(target.attr, []).append(value)
        elif type(target) in (ast.Tuple, ast.List, ast.Starred):  # self.a, self.b = ...: not followed
            for element in ast.walk(target):
                if type(element) is ast.Attribute and _is_self(element.value):
                    self.assigned.setdefault(element.attr, []).append(_UNKNOWN_VALUE)


_UNKNOWN_VALUE = ast.Starred(ast.Constant(None), ast.Load())  # a stored value nothing is known about
_FACT_ANNOTATIONS = {k: ast.parse(v, mode="eval").body for k, v in FACTS.attributes.items()}  # "Class.attribute"
_CONTAINERS = frozenset({"builtins.tuple", "builtins.list", "builtins.dict"}) | FACTS.annotation_tuples | FACTS.annotation_sequences
_REGISTRY_RESULTS = {k: ast.parse(v, mode="eval").body for k, v in FACTS.registry_results.items()}  # "Class"


def _written_names(expr: ast.expr) -> set[str]:
    """A dotted name as written (torch.toml's annotations spell absolute names)."""
    return {ast.unparse(expr)} if is_dotted(expr) else set()
_DATACLASS = frozenset({"dataclasses.dataclass"})
_IN_PLACE_CHANGES = frozenset({"append", "extend", "insert", "__setitem__", "update"})  # of a list of modules


def _targets(node: ast.AST) -> list[ast.expr]:
    """The targets a loop, comprehension or with statement stores to."""
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    return [node.target]
