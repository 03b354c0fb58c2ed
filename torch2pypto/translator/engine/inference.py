"""What the engine knows statically about an expression: is it a tensor, is it a dtype.

Answers are three-valued for tensors (:data:`TENSOR`, :data:`NOT_TENSOR`, :data:`UNKNOWN`, of
:class:`~torch2pypto.translator.engine.kinds.Kind`): a method call is rewritten only on a known
tensor, left alone on a known non-tensor, and reported as ambiguous otherwise. Evidence, strongest
first: annotations, what a name was assigned, the call that produced a value, ``nn.Parameter``/
buffers set on ``self``, and the parameters of an ``nn.Module``'s ``forward`` (or of a method of
the same class only ever called with tensors). Calls of this module's functions, methods and
module classes answer with what those return (``self.mlp(x)``: ``MLP.forward``'s returns;
``self.proj(x)``: an ``nn.Linear``'s tensor); a function's parameter is what every call of it in
the module passes, when its name is only ever called. Unpacking and iterating follow the parts of
the value (``q, k = rotate(q, k)``, ``a, b = x.chunk(2)``, ``for h in x.unbind(0)``).

This module holds the rules; the engine's other concerns are its own modules: the fixpoint
solver (:mod:`solver`), what a call may run (:mod:`callees`), declared types in this module and
the files it imports (:mod:`declarations`, :mod:`hierarchy`), the module's classes
(:mod:`classes`), transformers idioms (:mod:`idioms`) and static dtypes, devices and torch names
(:mod:`statics`); torch's and transformers' names are data (torch.toml, :mod:`mapping.facts`).

The module is taken as closed: calls from other modules, and overriding methods of subclasses
elsewhere, are not seen.
"""

from __future__ import annotations

import ast
from typing import Callable

from torch2pypto.mapping.facts import is_tensor_function, load_facts
from torch2pypto.translator.engine.callees import Callee, Callees, function_kind
from torch2pypto.translator.engine.classes import FUNCTION_DEFS, Classes, HeldModule, is_self
from torch2pypto.translator.engine.declarations import Declarations, is_none, is_vararg
from torch2pypto.translator.engine.hierarchy import Hierarchy
from torch2pypto.translator.engine.idioms import Idioms
from torch2pypto.translator.engine.kinds import (
    CYCLE, MAYBE, NONE, NOT_TENSOR, TENSOR, UNKNOWN, Kind, combine, of_receiver, public, through,
)  # fmt: skip
from torch2pypto.translator.engine.scopes import (
    ANNOTATED, ASSIGN, AUGMENTED, DEFINITION, IMPORT, ITEM, NAMED, PARAMETER, REST, UNPACKED, Binding, ModuleIndex,
)  # fmt: skip
from torch2pypto.translator.engine.solver import Solver
from torch2pypto.translator.engine.statics import Statics
from torch2pypto.translator.engine.syntax import dotted

__all__ = ["DTYPE_NAMES", "NOT_TENSOR", "TENSOR", "UNKNOWN", "HeldModule", "Inference", "Kind", "is_tensor_function"]

FACTS = load_facts()
DTYPE_NAMES = FACTS.dtypes  # torch.<dtype> spellings and the dtype they name
_MAX_PATH = 8  # steps of an unpacking path followed (a deeper part, as of `for x in xs: xs = [x]`, is unknown)
_LITERALS = (
    ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp,
    ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda,
)  # fmt: skip
_ORDER = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)  # comparisons a tensor answers elementwise


class Inference:
    """Static facts over one module, answered from its :class:`ModuleIndex`; memoised per node.

    Its questions: :meth:`kind` (is this expression a tensor?), :meth:`receiver_kind` (of a
    method call's receiver), :meth:`static_dtype`, :meth:`static_device`, :meth:`torch_name`,
    :meth:`held_module`, :meth:`held_class`, :meth:`self_method` and :meth:`method`.
    """

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
        hierarchy = hierarchy or Hierarchy(None)
        self._index = index
        self._wrapper_api = wrapper_api
        self._tensor_methods = tensor_methods
        self._solver = Solver(self._infer)
        self._kind = self._solver.kind
        self._pending = self._solver.pending
        self._classes = Classes(index, hierarchy)
        self._declarations = Declarations(index, hierarchy, self._classes, lambda func: self._callees.of(func))
        self._callees = Callees(index, hierarchy, self._classes, self._declarations)
        self._idioms = Idioms(index, hierarchy, self._classes, self._declarations, self._callees, self._kind)
        self._statics = Statics(index, self._declarations, reads_torch)
        self._augmented_values: dict[ast.Name, ast.BinOp] = {}  # x += v: x + v, x read where it is

    def release(self) -> None:
        """Let go of the module, once every question is answered: the inference's parts refer
        back to it (the solver to its equations, the declarations to the callees, its caller's
        wrapper names), a cycle that would hold the module's tree and every answer until the
        cyclic collector walked them all; released, they are freed as soon as the translation
        drops them. Nothing may be asked after."""
        self.__dict__.clear()

    # --- the questions -------------------------------------------------------------------

    def kind(self, expr: ast.expr) -> Kind:
        """TENSOR, NOT_TENSOR or UNKNOWN for an expression (a tensor or None: unknown)."""
        return public(self._solver.answer(expr))

    def receiver_kind(self, expr: ast.expr) -> Kind:
        """The kind of a method call's receiver: a tensor or None is a tensor there (None has no methods)."""
        return of_receiver(self._solver.answer(expr))

    def static_dtype(self, expr: ast.expr) -> str | None:
        """The dtype an expression statically is, ``"?"`` for an unknown dtype, else None."""
        return self._statics.dtype(expr)

    def static_device(self, expr: ast.expr) -> bool:
        """Whether an expression statically names a device: ``"cuda:0"``, ``torch.device(...)``, ``x.device``."""
        return self._statics.device(expr)

    def torch_name(self, node: ast.AST) -> str | None:
        """A name that reaches the torch package at ``node`` (``torch`` if free there)."""
        return self._statics.torch_name(node)

    @property
    def spelt_free_torch(self) -> bool:
        """Whether :meth:`torch_name` answered a ``torch`` the module must import."""
        return self._statics.spelt_free_torch

    def held_module(self, func: ast.Attribute | ast.Name) -> HeldModule | None:
        """The torch.nn class that ``self.<name>`` always holds, if every value stored there is one's
        instance; for a local name, the one its assignments in the function build (``Classes.named_module``)."""
        return self._classes.named_module(func) if type(func) is ast.Name else self._classes.held_module(func)

    def attribute_activation(self, call: ast.Call) -> HeldModule | None:
        """The activation registry's module that ``m.act_fn(x)`` calls, ``m`` of no known class
        (``Classes.attribute_activation``), on one argument that may be a tensor."""
        func = call.func
        if type(func) is not ast.Attribute or call.keywords or len(call.args) != 1 or type(call.args[0]) is ast.Starred:
            return None
        module = self._classes.attribute_activation(func)  # read off the syntax first: most calls are none
        if module is None or self.kind(func.value) == TENSOR or self.kind(call.args[0]) == NOT_TENSOR:
            return None
        return module

    def super_module(self, func: ast.Attribute) -> HeldModule | None:
        """``super().forward`` in a subclass of a torch.nn layer (transformers' scaled embeddings:
        ``super().forward(input_ids) * scale``): that layer's call on ``self``, every attribute read."""
        return self._classes.super_module(func, self._callees.is_super(func.value))

    def self_method(self, func: ast.expr) -> ast.FunctionDef | None:
        """The method of the enclosing class (or its bases here) that ``self.<name>`` calls, if any."""
        return self._classes.self_method(func)

    def held_class(self, func: ast.expr) -> ast.ClassDef | None:
        """The nn.Module class of this module that ``self.<name>`` always holds, if any."""
        return self._classes.held_class(func)

    def method(self, cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
        """The method ``name`` of a class of this module or, depth first, of its bases here."""
        return self._classes.inherited(cls, name)

    # --- expressions ---------------------------------------------------------------------

    def _infer(self, expr: ast.expr) -> Kind:
        kind = type(expr)
        if kind is ast.Name:
            return self._name_kind(expr)
        if kind is ast.Call:
            return self._call_kind(expr)
        if kind is ast.Attribute:
            return self._attribute_kind(expr)
        if kind is ast.Constant and expr.value is None:
            return NONE
        if isinstance(expr, _LITERALS):
            return NOT_TENSOR
        if kind is ast.BinOp:
            sides = (self._kind(expr.left), self._kind(expr.right))
            if CYCLE in sides or NONE in sides:
                return CYCLE  # no value yet (x / (x.sum() + 1e-6) in x's own assignment), or None's: raises
            return TENSOR if TENSOR in sides or MAYBE in sides else combine(sides)
        if kind is ast.UnaryOp:
            operand = self._kind(expr.operand)
            return NOT_TENSOR if isinstance(expr.op, ast.Not) else through(operand) if operand in (MAYBE, NONE) else operand
        if kind is ast.Compare:
            return self._compare_kind(expr)
        if kind is ast.BoolOp:  # `a or b` is one of its operands
            return combine(self._kind(v) for v in expr.values)
        if kind is ast.Subscript:
            value = self._kind(expr.value)
            if value in (TENSOR, MAYBE):
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

    def _compare_kind(self, compare: ast.Compare) -> Kind:
        """``x == 0`` and ``x < y`` of a tensor are tensors; ``is``/``in`` and non-tensors' are not."""
        if not all(type(op) in _ORDER for op in compare.ops):
            return NOT_TENSOR if all(type(op) not in _ORDER for op in compare.ops) else UNKNOWN
        sides = [compare.left, *compare.comparators]
        kinds = [self._kind(side) for side in sides]
        if CYCLE in kinds:
            return CYCLE  # a side read in its own assignment: the assumed kind decides (see solver)
        if TENSOR not in kinds:
            return combine(kinds)
        if len(sides) > 2:  # a < x < b is (a < x) and (x < b): a tensor's truth value
            return UNKNOWN
        if all(k == TENSOR or _is_number(s) for k, s in zip(kinds, sides)):
            return TENSOR
        if kinds[0] != TENSOR and not all(k == TENSOR or self._idioms.plain(s) for k, s in zip(kinds, sides)):
            return UNKNOWN
        # a tensor on the left (its operator answers first; a tensor subclass on the right is a
        # tensor too) or a plain value on either side: torch compares, or gives up and Python's ==
        # answers a bool (None, a string, a list); an order raises then. A bool has no method of a tensor.
        return MAYBE if type(compare.ops[0]) in (ast.Eq, ast.NotEq) else TENSOR

    # --- calls ---------------------------------------------------------------------------

    def _call_kind(self, call: ast.Call) -> Kind:
        func = call.func
        if type(func) is ast.Name:
            api = self._wrapper_api(func)
            if api is not None and api.startswith("torch.Tensor.__"):  # an operator's wrapper (x[i]): a tensor
                return TENSOR
            if api is not None:  # a method's wrapper returns what the function of its name does
                return function_kind(api.replace("torch.Tensor.", "torch.", 1)) if api.startswith("torch.") else UNKNOWN
        if type(func) is ast.Attribute and not dotted(func):
            return self._called(call) if self._callees.is_super(func.value) else self._method_kind(func)
        names = self._index.import_names(func)
        if names:
            return self._callee_result(self._callees.imported(names), call, ())
        if self._callees.of(func) is not None or type(func) is not ast.Attribute:
            return self._called(call)
        return self._method_kind(func)

    def _called(self, call: ast.Call, path: tuple = ()) -> Kind:
        """What calling a name, a ``self`` attribute, an item or ``super()``'s method returns (or the
        part of it ``path`` reaches), from every callee it may run."""
        callees = self._callees.of(call.func)
        if callees is None:
            return UNKNOWN
        return self._pending(("called", call, path), callees, lambda c: self._callee_result(c, call, path))

    def _callee_result(self, callee: Callee, call: ast.Call, path: tuple) -> Kind:
        """The kind of what one callee returns, or of the part of it ``path`` reaches."""
        function = callee.function
        if function is not None:
            if not path:
                return self._returns_kind(function)
            return self._returned_part(function, path) if self._callees.transparent(function) else UNKNOWN
        if callee.declared is not None:
            return self._declarations.part(callee.declared[0], path, names=callee.declared[1])
        known = self._activated(call) if callee.activation else callee.kind
        if not path:
            return known
        return TENSOR if known in (TENSOR, MAYBE) else CYCLE if known == CYCLE else UNKNOWN  # a tensor's items

    def _activated(self, call: ast.Call) -> Kind:
        """An activation module's result: a tensor for a tensor (one returns its input as it is)."""
        if len(call.args) != 1 or call.keywords or type(call.args[0]) is ast.Starred:
            return UNKNOWN
        known = self._kind(call.args[0])
        return known if known in (TENSOR, MAYBE, CYCLE) else UNKNOWN

    def _returns_kind(self, function: ast.AST) -> Kind:
        """What a function of this module returns, from its own return statements.

        A bare ``return`` or a body that can end without one returns None; a generator is none
        either. A decorator that is not known to keep the result makes it unknown.
        """
        if not isinstance(function, FUNCTION_DEFS) or not self._callees.transparent(function):
            return UNKNOWN
        if function.returns is not None:
            declared = self._declarations.kind(function.returns)
            if declared != UNKNOWN:
                return declared
        returns = self._callees.returns(function)
        return self._pending(("returns", function), returns, self._returned) if returns else NOT_TENSOR

    def _returned(self, value: ast.expr | None) -> Kind:
        return NONE if value is None else self._kind(value)

    def _method_kind(self, func: ast.Attribute) -> Kind:
        method = func.attr
        if method in FACTS.not_tensor_methods:
            receiver = self._kind(func.value)
            return NOT_TENSOR if receiver in (TENSOR, MAYBE) else through(receiver)
        if method in self._tensor_methods or method in FACTS.tensor_methods:
            return through(self._kind(func.value))
        declared = self._declarations.method(func)
        return self._declarations.kind(*declared) if declared else UNKNOWN

    # --- parts of values -----------------------------------------------------------------

    def _part_kind(self, value: ast.expr, path: tuple) -> Kind:
        """The kind of the part of ``value`` that unpacking along ``path`` reaches."""
        if not path:
            return self._kind(value)
        if len(path) > _MAX_PATH:
            return UNKNOWN
        step, rest = path[0], path[1:]
        if step == REST:
            return NOT_TENSOR if not rest else UNKNOWN  # a starred target is a list
        if self._kind(value) in (TENSOR, MAYBE):
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
            return self._pending(("part", path, *map(id, bindings)), bindings, lambda b: self._binding_part(b, path))
        if kind is ast.Call:
            return self._call_part(value, path)
        declared = self._declarations.of(value) if kind is ast.Attribute else None  # outputs.hidden_states[0]
        return self._declarations.part(declared[0], path, names=declared[1]) if declared else UNKNOWN

    def _binding_part(self, binding: Binding, path: tuple) -> Kind:
        if binding.kind in (ASSIGN, NAMED) and binding.value is not None:
            return self._part_kind(binding.value, path)
        if binding.kind == UNPACKED:
            return self._part_kind(binding.value, binding.path + path)
        if binding.kind in (PARAMETER, ANNOTATED) and binding.annotation is not None:
            return self._declarations.part(binding.annotation, path, is_vararg(binding))
        return TENSOR if self._binding_kind(binding) in (TENSOR, MAYBE) else UNKNOWN

    def _call_part(self, call: ast.Call, path: tuple) -> Kind:
        """A part of a call's result: tuples of tensors of torch, zip/enumerate, functions of this module."""
        func = call.func
        if type(func) is ast.Attribute and func.attr in FACTS.tensors_methods and not self._index.import_names(func):
            return through(self._kind(func.value))
        if type(func) is ast.Attribute:
            declared = self._declarations.method(func)
            if declared:
                return self._declarations.part(declared[0], path, names=declared[1])
        names = self._index.import_names(func)
        if names:
            if names <= FACTS.tensors_functions:
                return TENSOR
            if all(n.startswith("builtins.") for n in names):
                return self._builtin_part(names, call, path)
            return self._callee_result(self._callees.imported(names), call, path)
        return self._called(call, path)

    def _returned_part(self, function: ast.FunctionDef, path: tuple) -> Kind:
        """A part of what a function of this module returns: as its return annotation declares, else
        as its return statements give."""
        if function.returns is not None:
            declared = self._declarations.part(function.returns, path)
            if declared != UNKNOWN:
                return declared
        returns = [v for v in self._callees.returns(function) if v is not None]  # unpacking None raises
        return self._pending(("returned part", path, function), returns, lambda v: self._part_kind(v, path)) if returns else UNKNOWN

    def _builtin_part(self, names: set[str], call: ast.Call, path: tuple) -> Kind:
        """Items of ``zip(a, b)`` and ``enumerate(a)``: tuples of the arguments' items."""
        if len(path) < 2 or path[0] is not ITEM or not isinstance(path[1], int) or call.keywords:
            return UNKNOWN
        args, step = call.args, path[1]
        if names == {"builtins.zip"} and not any(type(a) is ast.Starred for a in args):
            return self._part_kind(args[step], (ITEM, *path[2:])) if -len(args) <= step < len(args) else UNKNOWN
        if names == {"builtins.enumerate"} and len(args) == 1 and step in (0, 1, -1, -2):
            return NOT_TENSOR if step in (0, -2) and len(path) == 2 else self._part_kind(args[0], (ITEM, *path[2:])) if step in (1, -1) else UNKNOWN
        return UNKNOWN

    # --- attributes and names ------------------------------------------------------------

    def _attribute_kind(self, attr: ast.Attribute) -> Kind:
        if self._index.import_names(attr):
            return NOT_TENSOR  # a module attribute: torch.float32, math.pi, np.newaxis
        name = attr.attr
        if name in FACTS.not_tensor_attributes:
            return NOT_TENSOR
        if name in FACTS.tensor_attributes:
            return through(self._kind(attr.value))
        if self._idioms.is_config(attr.value) or self._idioms.is_config(attr):
            return NOT_TENSOR  # a config's value: JSON data or a sub-config
        if is_self(attr.value):
            return self._self_attribute_kind(attr)
        if name in FACTS.module_parameters and self._classes.holds_layers(attr.value, FACTS.module_tensor_results):
            return MAYBE  # an nn module's weight or bias: a parameter, or None (bias=False)
        if name in FACTS.module_output_fields:
            field = self._idioms.output_field(attr.value, name)
            if field is not None:
                return field
        declared = self._declarations.of(attr)  # cache.layers[i].keys
        return self._declarations.kind(*declared) if declared else UNKNOWN

    def _self_attribute_kind(self, attr: ast.Attribute) -> Kind:
        """``self.x``: what every ``self.x = ...`` / ``register_buffer("x", ...)`` in the class holds."""
        values = self._classes.assigned(attr)
        if values:
            return self._pending(("attribute", id(values)), values, self._kind)
        if attr.attr in FACTS.module_parameters:  # FalconLinear(nn.Linear): self.weight is the layer's own
            cls = self._classes.enclosing(attr.value)
            if cls is not None and self._classes.derives(cls, FACTS.module_tensor_results):
                return MAYBE
        return UNKNOWN

    def _name_kind(self, name: ast.Name) -> Kind:
        if self._idioms.is_config(name):
            return NOT_TENSOR
        bindings = self._index.bindings(name)
        return self._pending(("name", *map(id, bindings)), bindings, self._binding_kind) if bindings else UNKNOWN

    def _binding_kind(self, binding: Binding) -> Kind:
        how = binding.kind
        if how in (IMPORT, DEFINITION):
            return NOT_TENSOR
        if how == PARAMETER:
            return self._param_kind(binding)
        if how in (ASSIGN, NAMED):
            return self._kind(binding.value)
        if how == ANNOTATED:
            declared = self._declarations.kind(binding.annotation)
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

    def _param_kind(self, param: Binding) -> Kind:
        if is_vararg(param):
            return NOT_TENSOR  # *args is a tuple (its annotation is its items')
        if param.annotation is not None:
            return self._declarations.kind(param.annotation)
        if param.value is not None and not is_none(param.value):
            return self._kind(param.value)
        function = param.function
        if not isinstance(function, FUNCTION_DEFS):
            return UNKNOWN
        cls = self._classes.of_function(function)
        if cls is None:
            return self._function_param_kind(function, param) if self._callees.transparent(function) else UNKNOWN
        if param.index < 0 or not self._classes.is_module(cls):
            return UNKNOWN
        static = self._callees.decorated(function, "builtins.staticmethod")
        if not static:
            if self._callees.decorated(function, "builtins.classmethod"):
                return UNKNOWN
            if param.index == 0:
                return NOT_TENSOR  # self: a module (self.norm(x) is no Tensor.norm)
            if function.name == "forward":
                return TENSOR
        if not self._callees.transparent(function):
            return UNKNOWN
        return self._passed_kind(self._classes.stores(cls).calls.get(function.name, ()), param, 0 if static else 1)

    def _function_param_kind(self, function: ast.FunctionDef, param: Binding) -> Kind:
        """A parameter of a function (not a method) of this module: what every call of it passes.

        Only for a function whose name is read nowhere but as a call's callee (so no caller is
        out of sight in this module), bound by that one ``def``.
        """
        calls = self._callees.direct_calls().get(function)
        return self._passed_kind(calls, param, 0) if calls else UNKNOWN

    def _passed_kind(self, calls, param: Binding, offset: int) -> Kind:
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


def _argument_at(call: ast.Call, index: int, name: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    positional = [a for a in call.args if type(a) is not ast.Starred]
    return positional[index] if 0 <= index < len(positional) else None
