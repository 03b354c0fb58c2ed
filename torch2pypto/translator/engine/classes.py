"""The classes of one module: what a class stores on ``self``, its methods, its bases of this module,
whether it is an ``nn.Module`` (through bases of other files too, :mod:`hierarchy`)."""

from __future__ import annotations

import ast
import bisect
import dataclasses
import operator
from typing import Mapping

from torch2pypto.mapping.facts import load_facts
from torch2pypto.rules.site import Expression
from torch2pypto.translator.engine.hierarchy import Hierarchy
from torch2pypto.translator.engine.scopes import ASSIGN, COMPREHENSIONS, ModuleIndex, walk

FACTS = load_facts()
FUNCTION_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
MAX_DEPTH = 40  # classes followed up a hierarchy of this module
_START = operator.attrgetter("lineno", "col_offset")
_IN_PLACE_CHANGES = frozenset({"append", "extend", "insert", "__setitem__", "update"})  # of a list of modules


class Classes:
    """Facts about the classes of one module, each worked out once."""

    def __init__(self, index: ModuleIndex, hierarchy: Hierarchy) -> None:
        self._index = index
        self._hierarchy = hierarchy
        self._stores: dict[ast.ClassDef, SelfStores] = {}
        self._modules: dict[ast.ClassDef, bool] = {}
        self._held: dict[tuple[ast.ClassDef | None, str], HeldModule | None] = {}
        self._held_classes: dict[tuple[ast.ClassDef | None, str], ast.ClassDef | None] = {}
        self._constructions: dict[tuple[ast.ClassDef, str], list[ast.expr] | None] = {}
        self._storing: list[ast.AST] | None = None  # the module's nodes that may store on self, in source order
        self._indexed: set[ast.ClassDef] = set()
        self._activations: dict[ast.expr, str | None] = {}
        self._callee_only: dict[tuple[ast.AST, str], bool] = {}  # (function, name) -> the name read there only as a callee
        self._inherited: dict[tuple[ast.ClassDef, str], ast.FunctionDef | None] = {}

    def _stores_in(self, cls: ast.ClassDef) -> list[ast.AST]:
        """The nodes of a class (and of its decorators) that may store on ``self``, in source order:
        a slice of the index's assignments and method calls on ``self`` or in place, which its walk found already."""
        if self._storing is None:
            calls = [c for c in self._index.calls if type(c.func) is ast.Attribute and (is_self(c.func.value) or c.func.attr in _IN_PLACE_CHANGES)]
            self._storing = sorted(self._index.assignments + calls, key=_START)  # a call inside one starting with it: after it
            self._indexed = set(self._index.classes)
        if cls not in self._indexed:  # a class of another part of the module (chunks): walked on its own
            return [n for n in walk(cls) if type(n) in _STORING]
        first = min(_START(n) for n in (*cls.decorator_list, cls))
        last = (cls.end_lineno, cls.end_col_offset)
        return self._storing[bisect.bisect_left(self._storing, first, key=_START) : bisect.bisect_right(self._storing, last, key=_START)]

    def stores(self, cls: ast.ClassDef) -> SelfStores:
        """What a class does with ``self``, with what its bases of this module store there (their
        ``__init__`` runs as the class's own, or through ``super().__init__()``)."""
        stores = self._stores.get(cls)
        if stores is None:
            self._stores[cls] = stores = SelfStores(cls, self._stores_in(cls))  # a cyclic hierarchy reads it as it is
            for base in cls.bases:
                local = self.local(base)
                if local is not None:
                    stores.inherit(self.stores(local))
        return stores

    def enclosing(self, name: ast.expr) -> ast.ClassDef | None:
        """The class whose code reads ``name`` (``self``), if any."""
        scope = self._index.scope_of.get(name)
        return scope.enclosing(ast.ClassDef) if scope else None

    def assigned(self, attr: ast.Attribute) -> list[ast.expr] | None:
        """The values the enclosing class stores in ``self.<attr>`` (None: no class)."""
        cls = self.enclosing(attr.value)
        return self.stores(cls).assigned.get(attr.attr) if cls else None

    def local(self, expr: ast.expr) -> ast.ClassDef | None:
        """The class of this module a name always is."""
        if type(expr) is not ast.Name:
            return None
        bindings = self._index.bindings(expr)
        if len(bindings) == 1 and isinstance(bindings[0].node, ast.ClassDef):
            return bindings[0].node
        return None

    def inherited(self, cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
        """The method ``name`` of a class or, depth first, of its bases of this module; found once
        per class and name (fusion asks at each ``self.<name>(...)``; the class bodies and the
        bindings of their bases' names do not change)."""
        key = (cls, name)
        if key not in self._inherited:
            self._inherited[key] = self._inherited_from(cls, name, 0)
        return self._inherited[key]

    def _inherited_from(self, cls: ast.ClassDef, name: str, depth: int) -> ast.FunctionDef | None:
        method = _method(cls, name)
        if method is not None or depth > MAX_DEPTH:
            return method
        for base in cls.bases:
            local = self.local(base)
            found = self._inherited_from(local, name, depth + 1) if local is not None else None
            if found is not None:
                return found
        return None

    def of_function(self, function: ast.AST) -> ast.ClassDef | None:
        """The class whose body defines ``function`` directly."""
        scope = self._index.scope_of.get(function)
        return scope.node if scope is not None and scope.is_class else None

    def is_module(self, cls: ast.ClassDef) -> bool:
        """Derives from ``nn.Module``, directly or through classes of this module or of files it imports."""
        known = self._modules.get(cls)
        if known is None:
            self._modules[cls] = False  # a cyclic hierarchy is not a module
            known = any(self._is_module_base(base) for base in cls.bases)
            self._modules[cls] = known
        return known

    def _is_module_base(self, base: ast.expr) -> bool:
        if any(self._hierarchy.is_module(name) for name in self._index.import_names(base)):
            return True
        if type(base) is not ast.Name:
            return False
        bindings = self._index.bindings(base)
        return len(bindings) == 1 and isinstance(bindings[0].node, ast.ClassDef) and self.is_module(bindings[0].node)

    def derives(self, cls: ast.ClassDef, roots: frozenset[str], depth: int = 0) -> bool:
        """Derives from one of ``roots`` (absolute dotted names: ``torch.nn.Linear``), directly or
        through classes of this module or of files it imports."""
        if depth > MAX_DEPTH:
            return False
        for base in cls.bases:
            if any(self._hierarchy.derives(name, roots) for name in self._index.import_names(base)):
                return True
            local = self.local(base)
            if local is not None and self.derives(local, roots, depth + 1):
                return True
        return False

    def plain(self, cls: ast.ClassDef, depth: int = 0) -> bool:
        """A class whose bases are all classes of this module (or none): no tensor subclass."""
        if depth > MAX_DEPTH or cls.keywords:
            return False
        for base in cls.bases:
            local = self.local(base)
            if local is None or not self.plain(local, depth + 1):
                return False
        return True

    def holds_layers(self, value: ast.expr, layers: frozenset[str]) -> bool:
        """``self.<name>`` always holding an instance of one of ``layers`` (``nn.Linear``)."""
        if type(value) is not ast.Attribute or not is_self(value.value):
            return False
        values = self.constructions(value)
        return bool(values) and all(type(v) is ast.Call and self._index.import_names(v.func) and self._index.import_names(v.func) <= layers for v in values)

    def constructions(self, attr: ast.Attribute) -> list[ast.expr] | None:
        """The calls (or activation registry lookups) that build what ``self.<attr>`` holds, if it only ever holds their results: a
        branch that is None (``nn.Linear(...) if cond else None``) holds nothing a call could run,
        and a setter's value (``self.lm_head = new_embeddings`` in a method other than
        ``__init__``) is taken as a replacement of the same class, as transformers' are. The key of
        a registry lookup known at run time stored there too (``ACT2FN[config.hidden_act]`` if it
        is a name, else ``config.hidden_act`` itself: a callable a config may give) is taken as
        that lookup's module, whose wrapper runs any other callable as it is. Worked out once per
        class and name (asked for the module held, its class and its layers' weights)."""
        cls = self.enclosing(attr.value)
        if cls is None:
            return None
        key = (cls, attr.attr)
        if key not in self._constructions:
            self._constructions[key] = self._constructed(cls, attr.attr)
        return self._constructions[key]

    def _constructed(self, cls: ast.ClassDef, attr: str) -> list[ast.expr] | None:
        stores = self.stores(cls)
        stored = [v for v in stores.assigned.get(attr, ()) if id(v) not in stores.replacements]
        values = []
        while stored:
            value = stored.pop()
            stored += (value.body, value.orelse) if type(value) is ast.IfExp else ()
            values += () if type(value) is ast.IfExp else (value,)
        keys = {ast.dump(key) for key in map(self._run_time_key, values) if key is not None}
        calls: list[ast.expr] = []
        for value in values:
            if type(value) is ast.Call or self.activation(value) is not None:
                calls.append(value)
            elif not (type(value) is ast.Constant and value.value is None or ast.dump(value) in keys):
                return None
        return calls or None

    def _run_time_key(self, value: ast.expr) -> ast.expr | None:
        """The name a registry lookup known at run time looks up (``config.hidden_act``)."""
        if self.activation(value) not in FACTS.module_activation_registries:
            return None
        key = value.slice if type(value) is ast.Subscript else value.args[0]
        return None if type(key) is ast.Constant else key

    def held_module(self, func: ast.Attribute) -> HeldModule | None:
        """The torch.nn class that ``self.<name>`` always holds, if every value stored there is one's
        instance; worked out once per class and name."""
        if not is_self(func.value):
            return None
        key = (self.enclosing(func.value), func.attr)
        if key not in self._held:
            self._held[key] = self._held_module(func)
        return self._held[key]

    def _held_module(self, func: ast.Attribute) -> HeldModule | None:
        values = self.constructions(func)
        if values is None:
            return None
        names = set()
        for value in values:
            activation = self.activation(value)
            names |= {activation} if activation else self._index.import_names(value.func) if type(value) is ast.Call else {""}
        if len(names) != 1 or not next(iter(names)).startswith(("torch.nn.", *FACTS.module_activation_registries)):
            return None
        return HeldModule(names.pop(), all(self.activation(v) or not v.args and not v.keywords for v in values), _literals(values))

    def named_module(self, func: ast.Name) -> HeldModule | None:
        """The torch.nn class a function's local name holds where it is called (``loss_fct =
        CrossEntropyLoss()``, then ``loss_fct(x, y)``): every binding that reaches the call an
        assignment of a construction of that one class in the same function, and the name read
        there only as a callee (no attribute of the module set or read, the module passed nowhere)."""
        bindings = self._index.bindings(func)
        scope = self._index.scope_of.get(func)
        function = scope.node if scope is not None else None
        if not bindings or not isinstance(function, FUNCTION_DEFS):
            return None
        values = []
        for binding in bindings:
            if binding.kind != ASSIGN or type(binding.value) is not ast.Call or self._index.scope_of.get(binding.node) is not scope:
                return None
            values.append(binding.value)
        names = set().union(*(self._index.import_names(v.func) for v in values))
        name = names.pop() if len(names) == 1 else ""
        if not name.startswith("torch.nn.") or not name.rpartition(".")[2][:1].isupper():
            return None
        callee_only = self._callee_only.get((function, func.id))
        if callee_only is None:  # found once per function and name: each call of the module asks
            nodes = walk(function)
            callees = {id(n.func) for n in nodes if type(n) is ast.Call}
            reads = (n for n in nodes if type(n) is ast.Name and n.id == func.id and type(n.ctx) is not ast.Store)
            self._callee_only[function, func.id] = callee_only = all(id(n) in callees for n in reads)
        if not callee_only:
            return None
        return HeldModule(name, all(not v.args and not v.keywords for v in values), _literals(values))

    def super_module(self, func: ast.Attribute, is_super: bool) -> HeldModule | None:
        """The torch.nn class whose forward ``super().forward`` (``is_super``: func's value is a
        ``super()``) runs in a method of a class of one such base, called on ``self``."""
        if not is_super or func.attr != "forward":
            return None
        cls = self.enclosing(func.value.func)
        if cls is None or len(cls.bases) != 1 or cls.keywords or self.local(cls.bases[0]) is not None:
            return None
        method = self._index.scope_of.get(func.value.func)
        function = method.enclosing(ast.FunctionDef) if method else None
        if function is None or not function.args.args or function.args.args[0].arg != "self":
            return None
        names = self._index.import_names(cls.bases[0])
        name = next(iter(names)) if len(names) == 1 else ""
        return HeldModule(name, False) if name.startswith("torch.nn.") else None

    def attribute_activation(self, func: ast.Attribute) -> HeldModule | None:
        """``m.act_fn`` read on a name of no class here (a function's parameter: moe.py's
        ``_default_apply_gate(self, x)``): the activation registry's module, which transformers'
        classes hold there (torch.toml's module.activation_attributes), its class known at run time."""
        if type(func.value) is not ast.Name or func.attr not in FACTS.module_activation_attributes or self.enclosing(func.value):
            return None
        return HeldModule(min(FACTS.module_activation_registries), True)

    def activation(self, value: ast.expr) -> str | None:
        """The module of transformers' activation registry that ``value`` builds (``ACT2FN[name]``,
        ``get_activation(name)``): the torch.nn class a literal name gives, built with no
        arguments (torch.toml's module.activations), else the registry's name (chosen at run time);
        found once per value (a construction's is asked for its key, its module and its arguments)."""
        if value not in self._activations:
            self._activations[value] = self._activation(value)
        return self._activations[value]

    def _activation(self, value: ast.expr) -> str | None:
        kind = type(value)
        if kind is ast.Subscript:
            names, known, key = self._index.import_names(value.value), FACTS.module_activation_registries, value.slice
        elif kind is ast.Call and len(value.args) == 1 and not value.keywords:
            names, known, key = self._index.import_names(value.func), FACTS.module_activation_factories, value.args[0]
        else:
            return None
        if not names or not {self._hierarchy.absolute(n) for n in names} <= known:
            return None
        literal = key.value if type(key) is ast.Constant and isinstance(key.value, str) else ""
        return FACTS.module_activations.get(literal) or min(FACTS.module_activation_registries)

    def held_class(self, func: ast.expr) -> ast.ClassDef | None:
        """The nn.Module class of this module that ``self.<name>`` always holds (every value stored
        there a call of that class's name: ``self.norm = LlamaRMSNorm(...)``), if any."""
        if type(func) is not ast.Attribute or not is_self(func.value):
            return None
        key = (self.enclosing(func.value), func.attr)
        if key not in self._held_classes:
            classes = {self.local(v.func) if type(v) is ast.Call else None for v in self.constructions(func) or ()}
            cls = classes.pop() if len(classes) == 1 else None
            self._held_classes[key] = cls if cls is not None and self.is_module(cls) else None
        return self._held_classes[key]

    def self_method(self, func: ast.expr) -> ast.FunctionDef | None:
        """The method of the enclosing class (or its bases here) that ``self.<name>`` calls, if any."""
        if type(func) is not ast.Attribute or not is_self(func.value):
            return None
        cls = self.enclosing(func.value)
        return self.inherited(cls, func.attr) if cls is not None else None


@dataclasses.dataclass(frozen=True)
class HeldModule:
    """An nn module class held in an attribute; ``bare``: every instance was built with no arguments."""

    name: str
    bare: bool
    literals: tuple[tuple[str | int, object], ...] = ()  # what the constructions pass (_literals)

    def built(self, attributes: Mapping[str, str]) -> tuple[tuple[str | int, object], ...]:
        """What the constructions pass (``nn.Conv1d(..., padding=1)``: the module's padding is 1
        whenever it runs; see :func:`_literals`): a keyword by the parameter that reads the attribute
        of that name, else by the keyword (``kernel_size``); a positional argument by its index."""
        literals = dict(self.literals)
        by_param = {p: literals.pop(a) for p, a in attributes.items() if a in literals}
        return tuple(sorted({**literals, **by_param}.items(), key=lambda item: (type(item[0]) is str, str(item[0]))))

    def held(self, attributes: Mapping[str, str], required: frozenset[str] = frozenset()) -> tuple[tuple[str, str], ...]:
        """(parameter, attribute) pairs a call reads from the module; a bare module's are at their
        defaults, but for the ``required`` parameters, which have none (nn.PReLU()'s weight)."""
        return tuple((p, a) for p, a in attributes.items() if not self.bare or p in required)


def _literals(values: list[ast.expr]) -> tuple[tuple[str | int, object], ...]:
    """The arguments the constructions in ``values`` pass, by keyword or position: the one value
    they all give (a hashable literal, else an :class:`Expression` of one source text), else
    ``...`` (some pass another or none); none where a construction passes ``*args``/``**kwargs``."""
    passed: dict[str | int, list[object]] = {}
    for value in values:
        if type(value) is not ast.Call or any(k.arg is None for k in value.keywords) or any(type(a) is ast.Starred for a in value.args):
            return ()
        for key, node in (*enumerate(value.args), *((k.arg, k.value) for k in value.keywords)):
            passed.setdefault(key, []).append(_literal(node))
    one = lambda given: given[0] if len(given) == len(values) and all(v == given[0] and type(v) is type(given[0]) for v in given) else ...
    return tuple(sorted(((k, one(given)) for k, given in passed.items()), key=lambda item: (type(item[0]) is str, str(item[0]))))


def _literal(node: ast.expr) -> object:
    """A hashable literal's value, else an :class:`Expression` of the node's source text."""
    if type(node) is ast.Constant:
        return node.value  # as ast.literal_eval gives it
    parts, root = [], node
    while type(root) is ast.Attribute:
        parts.append(root.attr)
        root = root.value
    if type(root) is ast.Name:  # a dotted name (config.hidden_size), written as ast.unparse writes it
        return Expression(".".join([root.id, *reversed(parts)]))
    try:
        given = ast.literal_eval(node)
        hash(given)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return Expression(ast.unparse(node))
    return given


class SelfStores:
    """What one class does with ``self``: values stored per attribute, calls per method."""

    def __init__(self, cls: ast.ClassDef, nodes: list[ast.AST]) -> None:
        """``nodes``: the class's assignments, loops, comprehensions, with statements and calls."""
        self.assigned: dict[str, list[ast.expr]] = {}
        self.calls: dict[str, list[ast.Call]] = {}
        self.changed: set[str] = set()  # attributes whose value is changed in place (self.layers.append(m))
        self.replacements: set[int] = set()  # ids of values a setter stores: a parameter of a method but __init__
        named: list[ast.Assign] = []  # assignments of a name's value
        for node in nodes:
            kind = type(node)
            if kind is ast.Assign:
                for target in node.targets:
                    self._store(target, node.value)
                if type(node.value) is ast.Name:
                    named.append(node)
            elif kind is ast.AnnAssign and node.value is not None:
                self._store(node.target, node.value)
            elif kind is ast.AugAssign:
                self._store(node.target, ast.BinOp(node.target, node.op, node.value))
            elif kind in _TARGETED:
                for target in _targets(node):
                    self._store(target, UNKNOWN_VALUE)
            elif kind is ast.Call and type(node.func) is ast.Attribute and is_self(node.func.value):
                self._call(node)
            elif kind is ast.Call and type(node.func) is ast.Attribute and node.func.attr in _IN_PLACE_CHANGES:
                self._changed(node.func.value)
        for method in cls.body if named else ():
            if isinstance(method, FUNCTION_DEFS) and method.name != "__init__":
                params = {a.arg for a in (*method.args.posonlyargs, *method.args.args, *method.args.kwonlyargs)}
                first, last = (method.lineno, method.col_offset), (method.end_lineno, method.end_col_offset)
                self.replacements |= {
                    id(n.value) for n in named if n.value.id in params and first <= (n.lineno, n.col_offset) <= last
                }  # the method's statements (its nested ones too) are those within its lines

    def _call(self, node: ast.Call) -> None:
        method = node.func.attr
        self.calls.setdefault(method, []).append(node)
        args = node.args
        if method == "register_buffer" and len(args) >= 2 and type(args[0]) is ast.Constant:
            if isinstance(args[0].value, str):
                self.assigned.setdefault(args[0].value, []).append(args[1])

    def inherit(self, base: SelfStores) -> None:
        """Add what a base class stores on ``self`` (its calls of methods stay its own)."""
        for name, values in base.assigned.items():
            self.assigned[name] = self.assigned[name] + values if name in self.assigned else values
        self.changed |= base.changed
        self.replacements |= base.replacements

    def _changed(self, target: ast.expr) -> None:
        if type(target) is ast.Attribute and is_self(target.value):
            self.changed.add(target.attr)

    def _store(self, target: ast.expr, value: ast.expr) -> None:
        if type(target) is ast.Subscript:  # self.layers[0] = m
            self._changed(target.value)
        elif type(target) is ast.Attribute and is_self(target.value):
            self.assigned.setdefault(target.attr, []).append(value)
        elif type(target) in (ast.Tuple, ast.List, ast.Starred):  # self.a, self.b = ...: not followed
            for element in ast.walk(target):
                if type(element) is ast.Attribute and is_self(element.value):
                    self.assigned.setdefault(element.attr, []).append(UNKNOWN_VALUE)


_TARGETED = frozenset({ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, *COMPREHENSIONS})  # store to targets: nothing known
_STORING = frozenset({ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Call, *_TARGETED})
UNKNOWN_VALUE = ast.Starred(ast.Constant(None), ast.Load())  # a stored value nothing is known about


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    """A method the class body itself defines (a plain one: no decorator that changes it)."""
    found = [s for s in cls.body if isinstance(s, FUNCTION_DEFS) and s.name == name]
    return found[-1] if found else None


def _targets(node: ast.AST) -> list[ast.expr]:
    """The targets a loop, comprehension or with statement stores to."""
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    if isinstance(node, COMPREHENSIONS):
        return [generator.target for generator in node.generators]
    return [node.target]


def is_self(node: ast.expr) -> bool:
    return type(node) is ast.Name and node.id == "self"
