"""What an expression statically names: a dtype, a device, or the torch package (how a module
reaches it where a rule spells a torch name)."""

from __future__ import annotations

import ast
from typing import Callable

from torch2pypto.mapping.facts import load_facts, torch_dtype
from torch2pypto.translator.engine.declarations import Declarations, is_vararg
from torch2pypto.translator.engine.scopes import ANNOTATED, ASSIGN, IMPORT, PARAMETER, Binding, ModuleIndex

FACTS = load_facts()
UNKNOWN_DTYPE = "?"  # a dtype not known statically
_DTYPE_CLASS = "torch.dtype"  # the class of dtypes, as an annotation names it


class Statics:
    """Static names of one module; ``reads_torch`` tells whether the module reads a name ``torch``,
    if the index is only a part of it."""

    def __init__(self, index: ModuleIndex, declarations: Declarations, reads_torch: Callable[[], bool] | None = None) -> None:
        self._index = index
        self._declarations = declarations
        self._module_reads_torch = reads_torch
        self._torch_read: bool | None = None
        self.spelt_free_torch = False  # torch_name() answered a `torch` the module must import

    def dtype(self, expr: ast.expr) -> str | None:
        """The dtype an expression statically is, ``"?"`` for an unknown dtype, else None."""
        kind = type(expr)
        if kind is ast.Attribute:
            dtype = torch_dtype(self._index.import_names(expr))
            if dtype:
                return dtype
            return UNKNOWN_DTYPE if expr.attr == "dtype" else None
        if kind is ast.Call and "torch.get_default_dtype" in self._index.import_names(expr.func):
            return UNKNOWN_DTYPE
        if kind is ast.Name:
            return self._name_dtype(expr)
        return None

    def _name_dtype(self, name: ast.Name) -> str | None:
        dtype = torch_dtype(self._index.import_names(name))
        if dtype:
            return dtype
        bindings = self._index.bindings(name)
        values = [self._binding_dtype(b) for b in bindings if b.value is not name]
        if not values or None in values:
            return None
        return values[0] if len(set(values)) == 1 else UNKNOWN_DTYPE

    def _binding_dtype(self, binding: Binding) -> str | None:
        """What a binding makes a name: an assigned dtype, or a dtype not known statically for a
        name declared ``torch.dtype`` (``def f(x, dtype: torch.dtype)``)."""
        if binding.kind == ASSIGN:
            return self.dtype(binding.value)
        if binding.kind in (PARAMETER, ANNOTATED) and binding.annotation is not None and not is_vararg(binding):
            declared = self._index.import_names(self._declarations.parsed(binding.annotation))
            return UNKNOWN_DTYPE if _DTYPE_CLASS in declared else None
        return None

    def device(self, expr: ast.expr) -> bool:
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
        return binding.kind == ASSIGN and binding.value is not binding.node and self.device(binding.value)

    def torch_name(self, node: ast.AST) -> str | None:
        """A name that reaches the torch package at ``node`` (``torch`` if free there)."""
        scope = self._index.scope_of.get(node)
        if scope is None:
            return None
        for candidate in self._index.module_answer("torch names", _torch_names):
            bindings = self._index.lookup(scope, candidate)
            if bindings and self._index.imports(bindings) == (["torch"], True):
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


def _torch_names(index: ModuleIndex) -> list[str]:
    """``torch`` and the module-level names other than torch an import binds to it, in order."""
    return ["torch", *sorted(n for n, bs in index.module.bindings.items() if n != "torch" and any(_imports_torch(b) for b in bs))]


def _imports_torch(binding: Binding) -> bool:
    return binding.kind == IMPORT and binding.qualified == "torch"
