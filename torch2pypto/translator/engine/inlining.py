"""Inlining (part of :class:`~torch2pypto.translator.engine.lowering.Built`): a helper of the class or
the module, or the forward of a submodule of the module's classes, called in a region, lowered
statement by statement into the caller's kernel."""

from __future__ import annotations

import ast

from torch2pypto.rules.tile_program import Operand, Unfusible
from torch2pypto.translator.engine.syntax import bindings, candidate, is_docstring, locals_of

INLINE_DEPTH = 4


class Inlining:
    """Helpers and submodules' forwards lowered in the caller's kernel (a mixin of Built, whose state it reads)."""

    def module_function(self, func: ast.expr) -> ast.FunctionDef | None:
        """The module's function a call names, unless a name of the function written around the
        call binds it (a parameter or a local); one of another chunk of a module read in chunks
        comes with that chunk's sites and inference (:meth:`context_of`)."""
        found = self.finder.helpers.get(func.id) if type(func) is ast.Name else None
        helper = found() if callable(found) else found
        if helper is None:
            return None
        around = self.inlined[-1] if self.inlined else self.finder.function
        return None if func.id in locals_of(around) else helper

    def inline(self, node: ast.Call, helper, env, method: bool = True) -> Operand:
        """A helper of the same class (``method``) or module called with tensors: its statements in
        the caller's kernel."""
        body = _inlinable(node, helper, method)  # before the arguments are lowered
        if self.depth >= INLINE_DEPTH:
            raise Unfusible("helpers nested too deep")
        scope = {a.arg: self.value(v, env) for a, v in zip(helper.args.args[method:], node.args)}
        context = None if method else self.finder.contexts.get(helper)
        self.depth += 1
        self.inlined.append(helper)
        self.helpers.append(helper)
        self.contexts += [context] if context is not None else []
        try:
            for statement in body:
                if type(statement) is ast.Return:
                    value = self.value(statement.value, scope)
                    break
                values = [(name, self.value(node, scope)) for name, node in bindings(statement)]
                scope.update(values)
        finally:
            self.depth -= 1
            self.inlined.pop()
            if context is not None:
                self.contexts.pop()
        if not value.is_tile:
            raise Unfusible(f"{helper.name} returns no tensor")
        if not method:  # the fallback calls it: the wrapper takes it, as a kernels module does not define it
            if helper.name not in self.by_source:
                self.by_source[helper.name] = self._param(helper.name, "callee", helper.name)
        elif self.module is None and "self" not in self.by_source:  # a submodule's: the fallback calls the submodule
            self.by_source["self"] = self._param("self", "self", "self")
        return value

    def inline_module(self, node: ast.Call, cls: ast.ClassDef, env) -> Operand:
        """``self.norm(x)``, ``self.norm`` always an instance of the module's class ``cls``: its
        forward in the caller's kernel, ``self`` there the submodule. The wrapper takes the
        submodule and its class, reads the attributes the forward reads from it, and runs the
        fallback (which calls it) unless the call would run exactly that forward (_inlined)."""
        if self.module is not None:
            raise Unfusible("a submodule of an inlined submodule")
        forward = self.inference.method(cls, "forward")
        if forward is None or self.inference.method(cls, "__call__") is not None:
            raise Unfusible(f"{cls.name} has no forward of its own here, or a __call__")
        _inlinable(node, forward, method=True)  # before the submodule's locals are read
        if cls.name in locals_of(self.inlined[-1] if self.inlined else self.finder.function):
            raise Unfusible(f"{cls.name} is a local name where it is called")
        source = self._source(node.func)
        module = self.by_source.get(source)
        if module is None:
            module = self.by_source[source] = self.program.param(node.func.attr, "module", source)
            kind = self.by_source.get(f"class {cls.name}") or self.program.param(cls.name, "class", cls.name)
            self.by_source[f"class {cls.name}"] = kind
            self.program.modules.append((module.name, kind.name))
        if self.depth == 0:
            self._replace(node.func, module.name)
        self.module = module
        try:
            return self.inline(node, forward, env)
        finally:
            self.module = None


def takes(node: ast.Call, helper: ast.FunctionDef, method: bool) -> bool:
    """Whether the call ``node`` can inline ``helper`` whatever its arguments hold (:func:`_inlinable`)."""
    try:
        _inlinable(node, helper, method)
    except Unfusible:
        return False
    return True


def _inlinable(node: ast.Call, helper: ast.FunctionDef, method: bool) -> list[ast.stmt]:
    """The statements of ``helper`` (its docstring left out) if the call ``node`` can inline it
    whatever its arguments hold: positional arguments filling its parameters one for one, no
    decorator, and a straight line of tensor statements ending in a return; else Unfusible."""
    args = helper.args
    if node.keywords or any(type(a) is ast.Starred for a in node.args) or helper.decorator_list:
        raise Unfusible("a helper call with keywords or decorators")
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or len(args.args) != len(node.args) + method:
        raise Unfusible("a helper whose parameters the call does not fill one for one")
    body = helper.body[1:] if is_docstring(helper.body[0]) else helper.body
    if not body or type(body[-1]) is not ast.Return or not all(candidate(s) for s in body):
        raise Unfusible(f"{helper.name} is no straight line of tensor statements")
    return body
