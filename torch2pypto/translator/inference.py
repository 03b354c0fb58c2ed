"""What the engine knows statically about an expression: is it a tensor, is it a dtype.

Answers are three-valued for tensors (:data:`TENSOR`, :data:`NOT_TENSOR`, :data:`UNKNOWN`):
a method call is rewritten only on a known tensor, left alone on a known non-tensor, and
reported as ambiguous otherwise. Evidence, strongest first: annotations, what a name was
assigned, the call that produced a value, ``nn.Parameter``/buffers set on ``self``, and the
parameters of an ``nn.Module``'s ``forward`` (or of a method of the same class only ever
called with tensors).
"""

from __future__ import annotations

from typing import Callable, Iterable

import libcst as cst
from libcst.metadata import (
    Assignment,
    ClassScope,
    ImportAssignment,
    QualifiedName,
    QualifiedNameSource,
    Scope,
)

TENSOR, NOT_TENSOR, UNKNOWN = "tensor", "not-tensor", "unknown"
_CYCLE = "cycle"  # a name read while its own assignments are being inferred: no evidence either way

# torch.<dtype> spellings and the dtype they name
DTYPE_NAMES = {
    "float32": "float32", "float": "float32", "float16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "float64": "float64", "double": "float64", "bool": "bool",
    "int8": "int8", "uint8": "uint8", "int16": "int16", "short": "int16", "int32": "int32",
    "int": "int32", "int64": "int64", "long": "int64", "complex64": "complex64",
    "complex128": "complex128", "cfloat": "complex64", "cdouble": "complex128",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
}  # fmt: skip
_TENSOR_NAMESPACES = ("torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special")
_TENSOR_CLASSES = {"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer", "torch.Tensor"}
_NOT_TENSOR_FUNCTIONS = {
    "is_tensor", "is_floating_point", "is_complex", "numel", "device", "dtype", "finfo", "iinfo",
    "get_default_dtype", "set_default_dtype", "manual_seed", "no_grad", "enable_grad",
    "inference_mode", "set_grad_enabled", "is_grad_enabled", "compile", "load", "save",
    "broadcast_shapes", "chunk", "split", "unbind", "tensor_split", "meshgrid", "sort", "topk",
    "max", "min", "median", "mode", "kthvalue", "std_mean", "var_mean", "aminmax",
}  # fmt: skip
# tensor methods whose result is not one tensor
_NOT_TENSOR_METHODS = {
    "size", "dim", "ndimension", "item", "tolist", "numel", "nelement", "numpy", "stride",
    "element_size", "is_contiguous", "is_floating_point", "data_ptr", "get_device",
    "untyped_storage", "storage", "chunk", "split", "unbind", "tensor_split", "sort", "topk",
    "max", "min", "median", "mode", "kthvalue", "backward", "register_hook", "__len__",
    "equal", "allclose", "is_complex", "aminmax", "unique_consecutive",
}  # fmt: skip
_TENSOR_ATTRIBUTES = {"T", "mT", "H", "mH", "data", "grad", "real", "imag"}
_NOT_TENSOR_ATTRIBUTES = {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout"}
_LITERALS = (
    cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
    cst.FormattedString, cst.List, cst.Tuple, cst.Dict, cst.Set, cst.ListComp, cst.SetComp,
    cst.DictComp, cst.GeneratorExp, cst.Lambda, cst.Comparison,
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
    """Static facts over one module, from libcst metadata.

    ``qualified_names``, ``scope`` and ``parent`` are the resolved QualifiedNameProvider,
    ScopeProvider and ParentNodeProvider lookups; answers are memoised per node.
    """

    def __init__(
        self,
        qualified_names: Callable[[cst.CSTNode], set[QualifiedName]],
        scope: Callable[[cst.CSTNode], Scope | None],
        parent: Callable[[cst.CSTNode], cst.CSTNode | None],
        tensor_methods: frozenset[str],
    ) -> None:
        self._qualified_names = qualified_names
        self._scope = scope
        self._parent = parent
        self._tensor_methods = tensor_methods
        self._kinds: dict[cst.CSTNode, str] = {}
        self._pending: set[tuple[int, str]] = set()
        self._classes: dict[cst.ClassDef, _ClassIndex] = {}

    # --- tensors -------------------------------------------------------------------------

    def kind(self, expr: cst.BaseExpression) -> str:
        """TENSOR, NOT_TENSOR or UNKNOWN for an expression."""
        known = self._kinds.get(expr)
        if known is None:
            known = self._infer(expr)
            if known != _CYCLE:  # a cyclic answer depends on the caller's pending name
                self._kinds[expr] = known
        return known if known != _CYCLE or self._pending else UNKNOWN

    def _infer(self, expr: cst.BaseExpression) -> str:
        if isinstance(expr, _LITERALS):
            return NOT_TENSOR
        if isinstance(expr, cst.Name):
            return self._name_kind(expr)
        if isinstance(expr, cst.Call):
            return self._call_kind(expr)
        if isinstance(expr, cst.Attribute):
            return self._attribute_kind(expr)
        if isinstance(expr, cst.BinaryOperation):
            sides = (self.kind(expr.left), self.kind(expr.right))
            return TENSOR if TENSOR in sides else combine(sides)
        if isinstance(expr, cst.UnaryOperation):
            return NOT_TENSOR if isinstance(expr.operator, cst.Not) else self.kind(expr.expression)
        if isinstance(expr, cst.Subscript):
            return _through(self.kind(expr.value))
        if isinstance(expr, cst.IfExp):
            return combine((self.kind(expr.body), self.kind(expr.orelse)))
        if isinstance(expr, cst.NamedExpr):
            return self.kind(expr.value)
        return UNKNOWN

    def _call_kind(self, call: cst.Call) -> str:
        func = call.func
        if isinstance(func, cst.Attribute) and not is_dotted(func):
            return self._method_kind(func)
        names = self._import_names(func)
        if names:
            return combine(_function_kind(n) for n in names)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            return self._self_method_return_kind(func)
        if isinstance(func, cst.Attribute):
            return self._method_kind(func)
        if isinstance(func, cst.Name) and func.value in _BUILTINS:
            return NOT_TENSOR
        return UNKNOWN

    def _self_method_return_kind(self, func: cst.Attribute) -> str:
        """``self.helper(...)``: what the class's ``helper`` returns, if it is defined there."""
        cls = self._enclosing(func, cst.ClassDef)
        method = next(
            (s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == func.attr.value),
            None,
        ) if cls else None
        if method is None:
            return self._method_kind(func)
        returns = _Returns()
        method.visit(returns)
        return combine(self.kind(v) for v in returns.values) if returns.values else UNKNOWN

    def _method_kind(self, func: cst.Attribute) -> str:
        method = func.attr.value
        if method in _NOT_TENSOR_METHODS:
            return NOT_TENSOR if self.kind(func.value) == TENSOR else UNKNOWN
        if method in self._tensor_methods or method in _TENSOR_LIKE_METHODS:
            return _through(self.kind(func.value))
        return UNKNOWN

    def _attribute_kind(self, attr: cst.Attribute) -> str:
        names = self._import_names(attr)
        if names:
            return NOT_TENSOR  # a module attribute: torch.float32, math.pi, np.newaxis
        name = attr.attr.value
        if name in _NOT_TENSOR_ATTRIBUTES:
            return NOT_TENSOR
        if name in _TENSOR_ATTRIBUTES:
            return _through(self.kind(attr.value))
        if isinstance(attr.value, cst.Name) and attr.value.value == "self":
            return self._self_attribute_kind(attr)
        return UNKNOWN

    def _self_attribute_kind(self, attr: cst.Attribute) -> str:
        """``self.x``: what every ``self.x = ...`` / ``register_buffer("x", ...)`` in the class holds."""
        cls = self._enclosing(attr, cst.ClassDef)
        if cls is None:
            return UNKNOWN
        name = attr.attr.value
        kinds = [self.kind(v) for v in self._index(cls).assigned.get(name, ())]
        return combine(kinds) if kinds else UNKNOWN

    def _name_kind(self, name: cst.Name) -> str:
        scope = self._scope(name)
        if scope is None:
            return UNKNOWN
        assignments = [a for a in scope[name.value] if isinstance(a, Assignment)]
        if not assignments:
            return UNKNOWN
        key = (id(scope), name.value)
        if key in self._pending:
            return _CYCLE
        self._pending.add(key)
        try:
            kind = combine([self._assignment_kind(a) for a in assignments])
        finally:
            self._pending.discard(key)
        return UNKNOWN if kind == _CYCLE else kind

    def _assignment_kind(self, assignment: Assignment) -> str:
        node = assignment.node
        if isinstance(assignment, ImportAssignment) or isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return NOT_TENSOR
        if isinstance(node, cst.Param):
            return self._param_kind(node)
        parent = self._parent(node)
        if isinstance(parent, cst.AssignTarget):
            statement = self._parent(parent)
            return self.kind(statement.value) if isinstance(statement, cst.Assign) else UNKNOWN
        if isinstance(parent, cst.AnnAssign) and parent.target is node:
            declared = _annotation_kind(parent.annotation.annotation, self._import_names)
            if declared != UNKNOWN or parent.value is None:
                return declared
            return self.kind(parent.value)
        if isinstance(parent, cst.NamedExpr):
            return self.kind(parent.value)
        if isinstance(parent, cst.AugAssign):
            return _through(self.kind(parent.value))
        return UNKNOWN

    def _param_kind(self, param: cst.Param) -> str:
        if param.annotation is not None:
            return _annotation_kind(param.annotation.annotation, self._import_names)
        if param.default is not None and not _is_none(param.default):
            return self.kind(param.default)
        function = self._enclosing(param, cst.FunctionDef)
        cls = self._enclosing(function, cst.ClassDef) if function else None
        if function is None or cls is None or _param_index(function, param) == 0:
            return UNKNOWN
        if function.name.value == "forward" and self._is_module_class(cls):
            return TENSOR
        return self._internal_param_kind(cls, function, param)

    def _internal_param_kind(self, cls: cst.ClassDef, function: cst.FunctionDef, param: cst.Param) -> str:
        """A method parameter is a tensor if every ``self.<method>(...)`` call in the class passes one."""
        if not self._is_module_class(cls):
            return UNKNOWN
        index = _param_index(function, param) - 1
        kinds = []
        for call in self._index(cls).calls.get(function.name.value, ()):
            arg = _argument_at(call, index, param.name.value)
            kinds.append(UNKNOWN if arg is None else self.kind(arg))
        return combine(kinds) if kinds else UNKNOWN

    def _is_module_class(self, cls: cst.ClassDef) -> bool:
        return any(
            n.name in ("torch.nn.Module", "torch.nn.modules.module.Module")
            for base in cls.bases
            for n in self._import_names(base.value)
        )

    # --- dtypes and names ----------------------------------------------------------------

    def static_dtype(self, expr: cst.BaseExpression) -> str | None:
        """The dtype an expression statically is, ``"?"`` for an unknown dtype, else None."""
        if isinstance(expr, cst.Attribute):
            for n in self._import_names(expr):
                prefix, _, last = n.name.rpartition(".")
                if prefix == "torch" and last in DTYPE_NAMES:
                    return DTYPE_NAMES[last]
            return "?" if expr.attr.value == "dtype" else None
        if isinstance(expr, cst.Call) and any(
            n.name == "torch.get_default_dtype" for n in self._import_names(expr.func)
        ):
            return "?"
        if isinstance(expr, cst.Name):
            return self._name_dtype(expr)
        return None

    def _name_dtype(self, name: cst.Name) -> str | None:
        for n in self._import_names(name):
            prefix, _, last = n.name.rpartition(".")
            if prefix == "torch" and last in DTYPE_NAMES:
                return DTYPE_NAMES[last]
        scope = self._scope(name)
        if scope is None:
            return None
        values = []
        for a in scope[name.value]:
            parent = self._parent(a.node) if isinstance(a, Assignment) else None
            statement = self._parent(parent) if isinstance(parent, cst.AssignTarget) else None
            if not isinstance(statement, cst.Assign):
                return None
            values.append(self.static_dtype(statement.value))
        if not values or None in values:
            return None
        return values[0] if len(set(values)) == 1 else "?"

    def torch_name(self, node: cst.CSTNode) -> str | None:
        """A name that reaches the torch package at ``node`` (``torch`` if free there)."""
        scope = self._scope(node)
        if scope is None:
            return None
        candidates = ["torch"] + sorted(
            a.name for a in _module_scope(scope).assignments if _imports_torch(a) and a.name != "torch"
        )
        for candidate in candidates:
            assignments = scope[candidate]
            if not assignments and candidate == "torch":
                return candidate  # the generated section imports torch at module level
            if assignments and all(_imports_torch(a) for a in assignments):
                return candidate
        return None

    # --- helpers -------------------------------------------------------------------------

    def _import_names(self, node: cst.CSTNode) -> set[QualifiedName]:
        return {
            n
            for n in self._qualified_names(node)
            if n.source in (QualifiedNameSource.IMPORT, QualifiedNameSource.BUILTIN)
        }

    def _index(self, cls: cst.ClassDef) -> _ClassIndex:
        if cls not in self._classes:
            index = _ClassIndex()
            cls.visit(index)
            self._classes[cls] = index
        return self._classes[cls]

    def _enclosing(self, node: cst.CSTNode | None, kind: type) -> cst.CSTNode | None:
        while node is not None:
            node = self._parent(node)
            if isinstance(node, kind):
                return node
        return None


_BUILTINS = {"len", "int", "float", "str", "bool", "list", "tuple", "dict", "set", "range", "print",
             "isinstance", "getattr", "hasattr", "type", "sorted", "min", "max", "sum", "abs",
             "round", "enumerate", "zip", "repr", "id", "hash"}  # fmt: skip
# tensor methods outside the table whose result is a tensor (so chains like x.view(...).float() resolve)
_TENSOR_LIKE_METHODS = {
    "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "contiguous", "clone",
    "detach", "unsqueeze", "squeeze", "expand", "expand_as", "repeat", "flatten", "matmul",
    "softmax", "sigmoid", "tanh", "masked_fill", "narrow", "roll", "flip", "t", "int", "long",
    "bool", "double", "cpu", "cuda", "npu", "square", "clamp", "clip", "where", "gather",
    "index_select", "mm", "bmm", "cumsum", "amax", "amin", "norm", "var", "std", "prod",
    "triu", "tril", "requires_grad_", "float", "half", "bfloat16", "add_", "mul_", "sub_",
    "div_", "copy_", "zero_", "fill_", "new_zeros", "new_ones", "new_empty", "new_full",
    "new_tensor", "logsumexp", "silu", "relu", "gelu", "erf", "log_softmax", "argmax",
}  # fmt: skip


def is_tensor_function(name: str) -> bool:
    """Whether a torch function (fully qualified) returns one tensor: the ops a report counts."""
    module, _, function = name.rpartition(".")
    return (
        module in _TENSOR_NAMESPACES
        and function[:1].islower()
        and not function.startswith("_")
        and function not in _NOT_TENSOR_FUNCTIONS
    )


def _function_kind(name: QualifiedName) -> str:
    return TENSOR if name.name in _TENSOR_CLASSES or is_tensor_function(name.name) else NOT_TENSOR


def _annotation_kind(annotation: cst.BaseExpression, import_names) -> str:
    """Tensor for ``Tensor``/``torch.Tensor``/``Optional[Tensor]``/``Tensor | None``; else not."""
    if isinstance(annotation, cst.SimpleString):
        return UNKNOWN
    if isinstance(annotation, cst.BinaryOperation):  # X | None
        parts = [annotation.left, annotation.right]
        kinds = {_annotation_kind(p, import_names) for p in parts if not _is_none(p)}
        return combine(kinds)
    if isinstance(annotation, cst.Subscript):
        base = {n.name for n in import_names(annotation.value)}
        if base & {"typing.Optional", "typing.Union"}:
            elements = [e.slice.value for e in annotation.slice if isinstance(e.slice, cst.Index)]
            return combine(_annotation_kind(e, import_names) for e in elements if not _is_none(e))
        return NOT_TENSOR
    names = {n.name for n in import_names(annotation)}
    if names & _TENSOR_CLASSES:
        return TENSOR
    return NOT_TENSOR if names or isinstance(annotation, (cst.Name, cst.Attribute)) else UNKNOWN


def is_dotted(node: cst.BaseExpression) -> bool:
    """A plain dotted name (``a``, ``a.b.c``), with no call or subscript in it."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _is_none(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _imports_torch(assignment) -> bool:
    if not isinstance(assignment, ImportAssignment):
        return False
    node = assignment.node
    if isinstance(node, cst.Import):
        for alias in node.names:
            local = alias.evaluated_alias or alias.evaluated_name
            if alias.evaluated_name == "torch" and local == assignment.name:
                return True
    return False


def _module_scope(scope: Scope) -> Scope:
    while scope.parent is not scope:
        scope = scope.parent
    return scope


def _param_index(function: cst.FunctionDef, param: cst.Param) -> int:
    params = [*function.params.posonly_params, *function.params.params]
    return next((i for i, p in enumerate(params) if p is param), -1)


def _argument_at(call: cst.Call, index: int, name: str) -> cst.BaseExpression | None:
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a.value
    return positional[index].value if 0 <= index < len(positional) else None


class _Returns(cst.CSTVisitor):
    """The values a function returns."""

    def __init__(self) -> None:
        self.values: list[cst.BaseExpression] = []

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self.values.append(node.value)


class _ClassIndex(cst.CSTVisitor):
    """What one class does with ``self``: values stored per attribute, calls per method."""

    def __init__(self) -> None:
        self.assigned: dict[str, list[cst.BaseExpression]] = {}
        self.calls: dict[str, list[cst.Call]] = {}

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._store(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._store(node.target, node.value)

    def visit_Call(self, node: cst.Call) -> None:
        if not _is_self_attr(node.func):
            return
        method = node.func.attr.value
        self.calls.setdefault(method, []).append(node)
        first = node.args[0].value if len(node.args) >= 2 else None
        if method == "register_buffer" and isinstance(first, cst.SimpleString):
            self.assigned.setdefault(first.evaluated_value, []).append(node.args[1].value)

    def _store(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if _is_self_attr(target):
            self.assigned.setdefault(target.attr.value, []).append(value)


def _is_self_attr(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self"
