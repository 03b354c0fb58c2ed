"""What the engine knows statically about an expression: is it a tensor, is it a dtype.

Answers are three-valued for tensors (:data:`TENSOR`, :data:`NOT_TENSOR`, :data:`UNKNOWN`):
a method call is rewritten only on a known tensor, left alone on a known non-tensor, and
reported as ambiguous otherwise. Evidence, strongest first: annotations, what a name was
assigned, the call that produced a value, ``nn.Parameter``/buffers set on ``self``, and the
parameters of an ``nn.Module``'s ``forward`` (or of a method of the same class only ever
called with tensors).
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Iterable, Mapping

from torch2pypto.mapping.facts import load_facts
from torch2pypto.translator.engine.hierarchy import Hierarchy
from torch2pypto.translator.engine.scopes import (
    ANNOTATED,
    ASSIGN,
    AUGMENTED,
    DEFINITION,
    IMPORT,
    NAMED,
    PARAMETER,
    Binding,
    ModuleIndex,
)

TENSOR, NOT_TENSOR, UNKNOWN = "tensor", "not-tensor", "unknown"
_CYCLE = "cycle"  # a name read while its own assignments are being inferred: no evidence either way
_MAX_DEPTH = 40  # names/attributes followed at once before giving up (UNKNOWN)

FACTS = load_facts()
DTYPE_NAMES = FACTS.dtypes  # torch.<dtype> spellings and the dtype they name
_LITERALS = (
    ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp,
    ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda, ast.Compare,
)  # fmt: skip


def combine(kinds: Iterable[str]) -> str:
    """All tensor: tensor; all not: not; anything else (or nothing): unknown.

    Cyclic reads (``x = x.float()``) carry no evidence and are skipped.
    """
    seen = set(kinds)
    if seen == {_CYCLE}:
        return _CYCLE
    seen.discard(_CYCLE)
    return seen.pop() if len(seen) == 1 else UNKNOWN


def _through(receiver: str) -> str:
    """The kind of a tensor-preserving operation's result, given its receiver's kind."""
    return receiver if receiver in (TENSOR, _CYCLE) else UNKNOWN


class Inference:
    """Static facts over one module, answered from its :class:`ModuleIndex`; memoised per node."""

    def __init__(self, index: ModuleIndex, tensor_methods: frozenset[str], hierarchy: Hierarchy | None = None) -> None:
        """``hierarchy`` answers for base classes that other files define (None: no file is read)."""
        self._index = index
        self._hierarchy = hierarchy or Hierarchy(None)
        self._tensor_methods = tensor_methods
        self._kinds: dict[ast.AST, str] = {}
        self._pending: set[int] = set()
        self._depth = 0
        self._cycles = 0  # cycles met so far: answers computed across one are not memoised
        self._torch_read: bool | None = None
        self.spelt_free_torch = False  # torch_name() answered a `torch` the module must import
        self._classes: dict[ast.ClassDef, _ClassIndex] = {}
        self._module_classes: dict[ast.ClassDef, bool] = {}

    # --- tensors -------------------------------------------------------------------------

    def kind(self, expr: ast.expr) -> str:
        """TENSOR, NOT_TENSOR or UNKNOWN for an expression."""
        known = self._kinds.get(expr)
        if known is None:
            if self._depth > _MAX_DEPTH * 4:  # a very long operator chain: give up, do not overflow
                return UNKNOWN
            self._depth += 1
            cycles = self._cycles
            try:
                known = self._infer(expr)
            finally:
                self._depth -= 1
            if self._cycles == cycles:  # an answer that met a cycle depends on what is pending
                self._kinds[expr] = known
        return known if known != _CYCLE or self._pending else UNKNOWN

    def _infer(self, expr: ast.expr) -> str:
        kind = type(expr)
        if kind is ast.Name:
            return self._name_kind(expr)
        if kind is ast.Call:
            return self._call_kind(expr)
        if kind is ast.Attribute:
            return self._attribute_kind(expr)
        if isinstance(expr, _LITERALS):
            return NOT_TENSOR
        if kind is ast.BinOp:
            sides = (self.kind(expr.left), self.kind(expr.right))
            return TENSOR if TENSOR in sides else combine(sides)
        if kind is ast.UnaryOp:
            return NOT_TENSOR if isinstance(expr.op, ast.Not) else self.kind(expr.operand)
        if kind is ast.Subscript:
            return _through(self.kind(expr.value))
        if kind is ast.IfExp:
            return combine((self.kind(expr.body), self.kind(expr.orelse)))
        if kind is ast.NamedExpr:
            return self.kind(expr.value)
        return UNKNOWN

    def _call_kind(self, call: ast.Call) -> str:
        func = call.func
        if type(func) is ast.Attribute and not is_dotted(func):
            return self._method_kind(func)
        names = self._index.import_names(func)
        if names:
            return combine(_function_kind(n) for n in names)
        if type(func) is ast.Attribute and _is_self(func.value):
            return self._self_method_return_kind(func)
        if type(func) is ast.Attribute:
            return self._method_kind(func)
        return UNKNOWN

    def _self_method_return_kind(self, func: ast.Attribute) -> str:
        """``self.helper(...)``: what the class's ``helper`` returns, if it is defined there."""
        cls = self._enclosing_class(func.value)
        method = next(
            (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == func.attr), None
        ) if cls else None
        if method is None:
            return self._method_kind(func)
        values = [n.value for n in ast.walk(method) if isinstance(n, ast.Return) and n.value is not None]
        return combine(self.kind(v) for v in values) if values else UNKNOWN

    def _method_kind(self, func: ast.Attribute) -> str:
        method = func.attr
        if method in FACTS.not_tensor_methods:
            return NOT_TENSOR if self.kind(func.value) == TENSOR else UNKNOWN
        if method in self._tensor_methods or method in FACTS.tensor_methods:
            return _through(self.kind(func.value))
        return UNKNOWN

    def _attribute_kind(self, attr: ast.Attribute) -> str:
        if self._index.import_names(attr):
            return NOT_TENSOR  # a module attribute: torch.float32, math.pi, np.newaxis
        name = attr.attr
        if name in FACTS.not_tensor_attributes:
            return NOT_TENSOR
        if name in FACTS.tensor_attributes:
            return _through(self.kind(attr.value))
        if _is_self(attr.value):
            return self._self_attribute_kind(attr)
        return UNKNOWN

    def _self_attribute_kind(self, attr: ast.Attribute) -> str:
        """``self.x``: what every ``self.x = ...`` / ``register_buffer("x", ...)`` in the class holds."""
        cls = self._enclosing_class(attr.value)
        values = self._class_index(cls).assigned.get(attr.attr) if cls else None
        return self._combine_pending(values, self.kind) if values else UNKNOWN

    def _name_kind(self, name: ast.Name) -> str:
        bindings = self._index.bindings(name)
        return self._combine_pending(bindings, self._binding_kind) if bindings else UNKNOWN

    def _combine_pending(self, evidence: list, kind_of) -> str:
        """Combine the kinds of ``evidence`` (one list per name or ``self`` attribute).

        A list read again while it is being inferred (``x = x.float()``) gives no evidence;
        a chain deeper than the interpreter's stack allows gives none either.
        """
        key = id(evidence)
        if key in self._pending:
            self._cycles += 1
            return _CYCLE
        if len(self._pending) > _MAX_DEPTH:
            return UNKNOWN
        self._pending.add(key)
        try:
            kind = combine([kind_of(e) for e in evidence])
        finally:
            self._pending.discard(key)
        return UNKNOWN if kind == _CYCLE else kind

    def _binding_kind(self, binding: Binding) -> str:
        how = binding.kind
        if how in (IMPORT, DEFINITION):
            return NOT_TENSOR
        if how == PARAMETER:
            return self._param_kind(binding)
        if how in (ASSIGN, NAMED):
            return self.kind(binding.value)
        if how == ANNOTATED:
            declared = self._annotation_kind(binding.annotation)
            if declared != UNKNOWN or binding.value is None:
                return declared
            return self.kind(binding.value)
        if how == AUGMENTED:
            return _through(self.kind(binding.value))
        return UNKNOWN

    def _param_kind(self, param: Binding) -> str:
        if param.annotation is not None:
            return self._annotation_kind(param.annotation)
        if param.value is not None and not _is_none(param.value):
            return self.kind(param.value)
        function = param.function
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or param.index <= 0:
            return UNKNOWN
        cls = self._class_of_function(function)
        if cls is None or not self._is_module_class(cls):
            return UNKNOWN
        if function.name == "forward":
            return TENSOR
        return self._internal_param_kind(cls, function, param)

    def _internal_param_kind(self, cls: ast.ClassDef, function: ast.FunctionDef, param: Binding) -> str:
        """A method parameter is a tensor if every ``self.<method>(...)`` call in the class passes one."""
        kinds = []
        for call in self._class_index(cls).calls.get(function.name, ()):
            arg = _argument_at(call, param.index - 1, param.node.arg)
            kinds.append(UNKNOWN if arg is None else self.kind(arg))
        return combine(kinds) if kinds else UNKNOWN

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

    def _annotation_kind(self, annotation: ast.expr) -> str:
        """Tensor for ``Tensor``/``torch.Tensor``/``Optional[Tensor]``/``Tensor | None``; else not."""
        kind = type(annotation)
        if kind is ast.Constant:
            return NOT_TENSOR if annotation.value is None else UNKNOWN
        if kind is ast.BinOp:  # X | None
            parts = (annotation.left, annotation.right)
            return combine({self._annotation_kind(p) for p in parts if not _is_none(p)})
        if kind is ast.Subscript:
            if self._index.import_names(annotation.value) & {"typing.Optional", "typing.Union"}:
                inner = annotation.slice
                elements = inner.elts if type(inner) is ast.Tuple else [inner]
                return combine(self._annotation_kind(e) for e in elements if not _is_none(e))
            return NOT_TENSOR
        names = self._index.import_names(annotation)
        if names & FACTS.tensor_classes:
            return TENSOR
        return NOT_TENSOR if names or kind in (ast.Name, ast.Attribute) else UNKNOWN

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
        module = self._index.module.bindings
        aliases = sorted(n for n, bs in module.items() if n != "torch" and any(_imports_torch(b) for b in bs))
        for candidate in ["torch", *aliases]:
            bindings = self._index.lookup(scope, candidate)
            if bindings and all(_imports_torch(b) for b in bindings):
                return candidate
        if self._index.lookup(scope, "torch") or self._reads_torch():
            return None
        self.spelt_free_torch = True  # free everywhere: an added `import torch` gives it meaning
        return "torch"

    def _reads_torch(self) -> bool:
        """Whether the module reads a name ``torch`` (importing torch would change what it means)."""
        if self._torch_read is None:
            self._torch_read = any(type(n) is ast.Name and n.id == "torch" for n in self._index.scope_of)
        return self._torch_read

    # --- helpers -------------------------------------------------------------------------

    def _class_index(self, cls: ast.ClassDef) -> _ClassIndex:
        if cls not in self._classes:
            self._classes[cls] = _ClassIndex(cls)
        return self._classes[cls]

    def _enclosing_class(self, name: ast.expr) -> ast.ClassDef | None:
        scope = self._index.scope_of.get(name)
        return scope.enclosing(ast.ClassDef) if scope else None

    def _class_of_function(self, function: ast.AST) -> ast.ClassDef | None:
        """The class whose body defines ``function`` directly."""
        scope = self._index.scope_of.get(function)
        return scope.node if scope is not None and scope.is_class else None


@dataclasses.dataclass(frozen=True)
class HeldModule:
    """An nn module class held in an attribute; ``bare``: every instance was built with no arguments."""

    name: str
    bare: bool

    def held(self, attributes: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """(parameter, attribute) pairs a call reads from the module; a bare module's are at their defaults."""
        return () if self.bare else tuple(attributes.items())


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


def _is_none(node: ast.expr) -> bool:
    return type(node) is ast.Constant and node.value is None


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
        for node in ast.walk(cls):
            kind = type(node)
            if kind is ast.Assign:
                for target in node.targets:
                    self._store(target, node.value)
            elif kind is ast.AnnAssign and node.value is not None:
                self._store(node.target, node.value)
            elif kind is ast.Call and type(node.func) is ast.Attribute and _is_self(node.func.value):
                self._call(node)

    def _call(self, node: ast.Call) -> None:
        method = node.func.attr
        self.calls.setdefault(method, []).append(node)
        args = node.args
        if method == "register_buffer" and len(args) >= 2 and type(args[0]) is ast.Constant:
            if isinstance(args[0].value, str):
                self.assigned.setdefault(args[0].value, []).append(args[1])

    def _store(self, target: ast.expr, value: ast.expr) -> None:
        if type(target) is ast.Attribute and _is_self(target.value):
            self.assigned.setdefault(target.attr, []).append(value)
