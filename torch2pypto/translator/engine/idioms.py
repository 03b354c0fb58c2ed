"""Idioms of transformers' modeling code the inference reads (names and classes are torch.toml's):
model configs, plain values compared with tensors, and the fields of the model outputs that a
module of this module returns."""

from __future__ import annotations

import ast
import functools
from typing import Callable

from torch2pypto.mapping.facts import load_facts
from torch2pypto.translator.engine.callees import Callees
from torch2pypto.translator.engine.classes import MAX_DEPTH, Classes, is_self
from torch2pypto.translator.engine.declarations import Declarations, is_none, is_vararg
from torch2pypto.translator.engine.hierarchy import Hierarchy
from torch2pypto.translator.engine.kinds import CYCLE, NONE, NOT_TENSOR, TENSOR, Kind, combine
from torch2pypto.translator.engine.scopes import ASSIGN, NAMED, PARAMETER, ModuleIndex

FACTS = load_facts()
_DATACLASS = frozenset({"dataclasses.dataclass"})


class Idioms:
    """The idioms of one module; ``kind`` is the inference's kind of an expression."""

    def __init__(
        self,
        index: ModuleIndex,
        hierarchy: Hierarchy,
        classes: Classes,
        declarations: Declarations,
        callees: Callees,
        kind: Callable[[ast.expr], Kind],
    ) -> None:
        self._index = index
        self._hierarchy = hierarchy
        self._classes = classes
        self._declarations = declarations
        self._callees = callees
        self._kind = kind

    def plain(self, expr: ast.expr, depth: int = 0) -> bool:
        """A Python scalar, string or None, or a value of a model config (JSON data or a sub-config):
        neither a tensor nor anything whose comparison with one answers other than torch or False."""
        kind = type(expr)
        if kind is ast.Constant or depth > MAX_DEPTH:
            return kind is ast.Constant
        if kind is ast.UnaryOp:
            return self.plain(expr.operand, depth + 1)
        if kind is ast.BinOp:
            return self.plain(expr.left, depth + 1) and self.plain(expr.right, depth + 1)
        if kind is ast.Attribute:
            return self.is_config(expr.value) or (expr.attr in FACTS.plain_attributes and self._tensor_or_no_value(expr.value))
        if kind is ast.Subscript:  # x.shape[-1]
            return type(expr.value) is ast.Attribute and self.plain(expr.value, depth + 1)
        if kind is ast.Call:
            func = expr.func
            if self._index.import_names(func) & FACTS.plain_builtins:
                return True
            return type(func) is ast.Attribute and func.attr in FACTS.plain_methods and self._tensor_or_no_value(func.value)
        if kind is ast.Name:
            bindings = self._index.bindings(expr)
            return bool(bindings) and all(
                b.kind in (ASSIGN, NAMED) and b.value is not None and b.value is not expr and self.plain(b.value, depth + 1)
                for b in bindings
            )
        return False

    def _tensor_or_no_value(self, expr: ast.expr) -> bool:
        """A tensor, or no value yet: ``x.shape`` is plain then (kinds only grow, answers stay stable)."""
        return self._kind(expr) in (TENSOR, CYCLE)

    def is_config(self, expr: ast.expr) -> bool:
        """A model config: a parameter named as one (``config``, ``text_config``; not annotated as
        a tensor), ``self.config``, or a config's sub-config (``config.vision_config``)."""
        kind = type(expr)
        if kind is ast.Attribute:
            if not _config_name(expr.attr):
                return False
            if not is_self(expr.value):
                return self.is_config(expr.value)
            stored = self._classes.assigned(expr) or ()  # self.config: what the class stores there is one
            return all(type(v) is ast.Name and self.is_config(v) for v in stored)
        if kind is not ast.Name or not _config_name(expr.id):
            return False
        bindings = self._index.bindings(expr)
        return bool(bindings) and all(
            b.kind == PARAMETER and not is_vararg(b) and (b.annotation is None or self._declarations.kind(b.annotation) == NOT_TENSOR)
            for b in bindings
        )

    def output_field(self, value: ast.expr, field: str, seen: frozenset = frozenset()) -> Kind | None:
        """A field of the model output a call of a module of this module returns
        (``self.model(x).last_hidden_state``, through names assigned such calls); None if not one."""
        if type(value) is ast.Name:
            bindings = self._index.bindings(value)
            if not bindings or id(bindings) in seen or any(b.kind != ASSIGN or b.value is None for b in bindings):
                return None
            fields = [self.output_field(b.value, field, seen | {id(bindings)}) for b in bindings]
            return None if None in fields else combine(fields)
        if type(value) is not ast.Call:
            return None
        functions = self._callees.functions(value.func)
        if not functions or not all(self._keeps_fields(f) for f in functions):
            return None
        returned = [self._returned_field(v, field) for f in functions for v in self._callees.returns(f)]
        return None if None in returned else combine(returned)

    def _keeps_fields(self, function: ast.FunctionDef) -> bool:
        """Every decorator keeps what the function returns, or its output's fields (torch.toml)."""
        for decorator in function.decorator_list:
            target = decorator.func if type(decorator) is ast.Call else decorator
            names = {self._hierarchy.absolute(n) for n in self._index.import_names(target)}
            if not names or not names <= FACTS.module_transparent_decorators | FACTS.module_output_decorators:
                return False
        return True

    def _returned_field(self, value: ast.expr | None, field: str) -> Kind | None:
        """A field of a returned value: ``Output(field=x, ...)``'s x, None if not passed (every field
        but the first defaults to None); None's raises. None if not an output built there."""
        if value is None or is_none(value):
            return CYCLE
        if type(value) is ast.IfExp:
            sides = (self._returned_field(value.body, field), self._returned_field(value.orelse, field))
            return None if None in sides else combine(sides)
        if type(value) is not ast.Call or value.args or not self._output_class(value.func):
            return None
        passed = [k.value for k in value.keywords if k.arg == field]
        if any(k.arg is None for k in value.keywords):
            return None  # **fields
        return self._kind(passed[0]) if passed else NONE

    def _output_class(self, func: ast.expr, depth: int = 0) -> bool:
        """A model-output dataclass: a dataclass of this module deriving from one, or one a file defines."""
        local = self._classes.local(func)
        if local is None:
            names = self._index.import_names(func)
            return len(names) == 1 and self._hierarchy.derives(next(iter(names)), FACTS.module_output_classes)
        dataclass = any(self._index.import_names(d.func if type(d) is ast.Call else d) & _DATACLASS for d in local.decorator_list)
        return dataclass and depth < MAX_DEPTH and len(local.bases) == 1 and self._output_class(local.bases[0], depth + 1)


@functools.lru_cache(maxsize=4096)  # a module reads the same names again and again
def _config_name(name: str) -> bool:
    return any(name == n or name.endswith("_" + n) for n in FACTS.plain_config_names)
