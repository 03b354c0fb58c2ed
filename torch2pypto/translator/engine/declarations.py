"""What annotations declare, in this module and in the files it imports (:mod:`hierarchy`).

An annotation comes with what its names import where it is written (:data:`Names`): this
module's imports, or those of the file that declares it. String annotations are read as the
expression they spell. A value's declaration is its name's annotation, its class's field, the
return annotation of what a call of it runs, or torch.toml's facts about library classes.
"""

from __future__ import annotations

import ast
from typing import Callable

from torch2pypto.mapping.facts import load_facts
from torch2pypto.translator.engine.classes import MAX_DEPTH, Classes
from torch2pypto.translator.engine.hierarchy import Hierarchy
from torch2pypto.translator.engine.kinds import NOT_TENSOR, TENSOR, UNKNOWN, Kind, combine
from torch2pypto.translator.engine.scopes import ANNOTATED, ASSIGN, IMPORT, ITEM, PARAMETER, REST, Binding, ModuleIndex
from torch2pypto.translator.engine.syntax import dotted

FACTS = load_facts()
Names = Callable[[ast.expr], set]  # what a dotted name imports, where it is written
Declared = tuple[ast.expr, Names]
_FACT_ANNOTATIONS = {k: ast.parse(v, mode="eval").body for k, v in FACTS.attributes.items()}  # "Class.attribute"
_REGISTRY_RESULTS = {k: ast.parse(v, mode="eval").body for k, v in FACTS.registry_results.items()}  # "Class"
_CONTAINERS = frozenset({"builtins.tuple", "builtins.list", "builtins.dict"}) | FACTS.annotation_tuples | FACTS.annotation_sequences


class Declarations:
    """The declared types of one module's values; ``callees`` tells what a call may run (for
    the return annotations of what it runs)."""

    def __init__(self, index: ModuleIndex, hierarchy: Hierarchy, classes: Classes, callees: Callable) -> None:
        self._index = index
        self._hierarchy = hierarchy
        self._classes = classes
        self._callees = callees
        self._strings: dict[ast.Constant, ast.expr] = {}  # string annotations, parsed

    def parsed(self, annotation: ast.expr) -> ast.expr:
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

    def kind(self, annotation: ast.expr, names: Names | None = None) -> Kind:
        """Tensor for ``Tensor``/``torch.Tensor``/``Optional[Tensor]``/``Tensor | None``; else not.

        ``names``: what a dotted name in the annotation imports (default: in this module).
        """
        names = names or self._index.import_names
        annotation = self.parsed(annotation)
        kind = type(annotation)
        if kind is ast.Constant:
            return NOT_TENSOR if annotation.value is None else UNKNOWN
        if kind is ast.BinOp:  # X | None
            parts = (annotation.left, annotation.right)
            return combine({self.kind(p, names) for p in parts if not is_none(p)})
        if kind is ast.Subscript:
            if names(annotation.value) & FACTS.annotation_unions:
                inner = annotation.slice
                elements = inner.elts if type(inner) is ast.Tuple else [inner]
                return combine(self.kind(e, names) for e in elements if not is_none(e))
            return NOT_TENSOR
        named = names(annotation)
        if named & FACTS.tensor_classes:
            return TENSOR
        if named & FACTS.annotation_unknown:
            return UNKNOWN
        return NOT_TENSOR if named or kind in (ast.Name, ast.Attribute) else UNKNOWN

    def part(self, annotation: ast.expr, path: tuple, items: bool = False, names: Names | None = None) -> Kind:
        """The kind of the part of a value declared ``annotation`` that unpacking along ``path``
        reaches: ``tuple[Tensor, Tensor]``'s elements, ``list[Tensor]``'s items; None raises there.

        ``items``: the annotation declares the items of the value (``*args: Tensor``).
        """
        names = names or self._index.import_names
        annotation = self.parsed(annotation)
        if items:
            if path and path[0] == REST:
                return NOT_TENSOR if len(path) == 1 else UNKNOWN
            return self.part(annotation, path[1:], names=names) if path else NOT_TENSOR
        if not path:
            return self.kind(annotation, names)
        step, rest = path[0], path[1:]
        kind = type(annotation)
        if kind is ast.BinOp and type(annotation.op) is ast.BitOr:  # X | None
            parts = [p for p in (annotation.left, annotation.right) if not is_none(p)]
            return combine(self.part(p, path, names=names) for p in parts)
        if kind is not ast.Subscript:
            return TENSOR if self.kind(annotation, names) == TENSOR else UNKNOWN  # a tensor's items
        generic = names(annotation.value)
        inner = annotation.slice
        elements = inner.elts if type(inner) is ast.Tuple else [inner]
        if generic & FACTS.annotation_unions:
            return combine(self.part(e, path, names=names) for e in elements if not is_none(e))
        if step == REST:
            return NOT_TENSOR if not rest else UNKNOWN  # a starred target is a list
        if generic & FACTS.annotation_tuples:
            if len(elements) == 2 and type(elements[1]) is ast.Constant and elements[1].value is Ellipsis:
                return self.part(elements[0], rest, names=names)  # tuple[T, ...]
            if step is ITEM:
                return combine(self.part(e, rest, names=names) for e in elements) if elements else UNKNOWN
            return self.part(elements[step], rest, names=names) if -len(elements) <= step < len(elements) else UNKNOWN
        if generic & FACTS.annotation_sequences and len(elements) == 1:
            return self.part(elements[0], rest, names=names)
        return UNKNOWN

    def method(self, func: ast.Attribute) -> tuple[ast.expr, Names | None] | None:
        """The return annotation of a method called on a value whose class is declared
        (``cache.update(k, v)`` with ``cache: Cache | None``), with what its names import where it
        is written: a class of this module, or of a file an import names. None if not known."""
        declared = self.of(func.value)
        cls = self.declared_class(*declared) if declared else None
        if isinstance(cls, ast.ClassDef):
            method = self._classes.inherited(cls, func.attr)
            if method is None or method.returns is None or method.decorator_list:
                return None
            return method.returns, None
        return self._hierarchy.method_returns(cls, func.attr) if cls else None

    def of(self, expr: ast.expr, seen: frozenset = frozenset()) -> Declared | None:
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
            qualified, imports_only = self._index.imports(bindings)
            if imports_only:  # each name asked once, not once per import of it (torch, by each copy of a model)
                found = [self._hierarchy.declared(q) for q in qualified]  # answers cached: the same for each import
            else:
                found = []
                for binding in bindings:
                    if binding.kind in (PARAMETER, ANNOTATED) and binding.annotation is not None and not is_vararg(binding):
                        found.append((binding.annotation, self._index.import_names))
                    elif binding.kind == ASSIGN and binding.value is not None:
                        found.append(self.of(binding.value, seen | {id(bindings)}))
                    elif binding.kind == IMPORT:
                        found.append(self._hierarchy.declared(binding.qualified))
                    else:
                        return None
            if None in found:
                return None
            if len(bindings) > 1 and (len({self.declared_class(*d) for d in found}) != 1 or self.declared_class(*found[0]) is None):
                return None
            return found[0]
        if kind is ast.Call:
            if dotted(expr.func) and not expr.args and not expr.keywords:
                return expr.func, self._index.import_names  # an instance: AttentionInterface()
            return self._result(expr)
        if kind is ast.Attribute:
            owner = self.of(expr.value, seen)
            cls = self.declared_class(*owner, fields=True) if owner else None
            return self._field(cls, expr.attr) if cls is not None else None
        if kind is ast.IfExp:
            sides = [self.of(e, seen) for e in (expr.body, expr.orelse)]
            classes = {self.declared_class(*side) if side else None for side in sides}
            return sides[0] if len(classes) == 1 and None not in classes else None
        if kind is ast.Subscript and type(expr.slice) is not ast.Slice:
            owner = self.of(expr.value, seen)
            annotation, names = owner if owner else (None, None)
            if type(annotation) is ast.Subscript and names(annotation.value) & FACTS.annotation_sequences:
                return annotation.slice, names
        return None

    def _result(self, call: ast.Call) -> Declared | None:
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
        classes = {self.declared_class(*declared, fields=True) for declared in found}
        return found[0] if len(classes) == 1 and None not in classes else None

    def declared_class(self, annotation: ast.expr, names: Names | None = None, fields: bool = False) -> ast.ClassDef | str | None:
        """The class an annotation declares, None aside (``Cache | None``, ``Optional[Cache]``): a
        class of this module, or the absolute name of one a file defines. ``fields``: for reading a
        field, so tuples, lists and dicts aside too (``tuple | ModelOutput``: a tuple has none)."""
        names = names or self._index.import_names
        parts = [p for p in self._alternatives(annotation, names) if not is_none(p)]
        if fields:
            parts = [p for p in parts if not names(p.value if type(p) is ast.Subscript else p) & _CONTAINERS]
        if len(parts) != 1:
            return None
        annotation = parts[0]
        if not dotted(annotation) or self.kind(annotation, names) != NOT_TENSOR:
            return None
        if names == self._index.import_names:
            local = self._classes.local(annotation)
            if local is not None:
                return local
        qualified = names(annotation)
        return self._hierarchy.absolute(next(iter(qualified))) if len(qualified) == 1 else None

    def _alternatives(self, annotation: ast.expr, names: Names) -> list[ast.expr]:
        """The alternatives of a union annotation (``A | B | None``, ``Optional[A]``, ``Union[A, B]``)."""
        annotation = self.parsed(annotation)
        if type(annotation) is ast.BinOp and type(annotation.op) is ast.BitOr:
            return self._alternatives(annotation.left, names) + self._alternatives(annotation.right, names)
        if type(annotation) is ast.Subscript and names(annotation.value) & FACTS.annotation_unions:
            inner = annotation.slice
            return [a for e in (inner.elts if type(inner) is ast.Tuple else [inner]) for a in self._alternatives(e, names)]
        return [annotation]

    def _field(self, cls: ast.ClassDef | str, name: str, depth: int = 0) -> Declared | None:
        """The annotation of a field a class declares in its body (``last_hidden_state: torch.FloatTensor
        | None = None`` of a model output dataclass), or of its bases; torch.toml's [attributes]
        first, for classes that do not declare it where it is read."""
        if isinstance(cls, str):
            declared = _FACT_ANNOTATIONS.get(f"{cls}.{name}")
            return (declared, _written_names) if declared is not None else self._hierarchy.field(cls, name)
        for statement in cls.body:
            if type(statement) is ast.AnnAssign and type(statement.target) is ast.Name and statement.target.id == name:
                return statement.annotation, self._index.import_names
        for base in cls.bases if depth < MAX_DEPTH else ():
            local = self._classes.local(base)
            names = self._index.import_names(base)
            found = self._field(local, name, depth + 1) if local else self._field(next(iter(names)), name) if len(names) == 1 else None
            if found is not None:
                return found
        return None

    def registry_result(self, registry: ast.expr) -> Declared | None:
        """What calling an item of ``registry`` returns, as declared: a mapping annotated
        ``dict[str, Callable[..., R]]``, or an instance of a class torch.toml's [registry] names."""
        declared = self.of(registry)
        if declared is None:
            return None
        annotation, names = self.parsed(declared[0]), declared[1]
        if type(annotation) is ast.Subscript and names(annotation.value) & FACTS.annotation_mappings:
            inner = annotation.slice
            return self.callable_result(inner.elts[-1], names) if type(inner) is ast.Tuple and len(inner.elts) == 2 else None
        cls = self.declared_class(annotation, names)
        return (_REGISTRY_RESULTS[cls], _written_names) if isinstance(cls, str) and cls in _REGISTRY_RESULTS else None

    def callable_result(self, annotation: ast.expr, names: Names) -> Declared | None:
        """R of an annotation ``Callable[..., R]`` (or of one that may be None, whose call raises)."""
        parts = [p for p in self._alternatives(annotation, names) if not is_none(p)]
        if len(parts) != 1 or type(parts[0]) is not ast.Subscript:
            return None
        generic, inner = names(parts[0].value), parts[0].slice
        if generic & FACTS.annotation_callables and type(inner) is ast.Tuple and len(inner.elts) == 2:
            return inner.elts[1], names
        return None


def _written_names(expr: ast.expr) -> set[str]:
    """A dotted name as written (torch.toml's annotations spell absolute names)."""
    return {ast.unparse(expr)} if dotted(expr) else set()


def is_none(node: ast.expr) -> bool:
    return type(node) is ast.Constant and node.value is None


def is_vararg(binding: Binding) -> bool:
    """A ``*args`` parameter."""
    function = binding.function
    return binding.kind == PARAMETER and function is not None and function.args.vararg is binding.node
