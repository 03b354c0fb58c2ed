"""The bodies fusion searches: a module's functions (nested ones too) and its classes' methods,
its functions by name, and the statement lists of a function with the loop around each."""

from __future__ import annotations

import ast
import collections

from torch2pypto.translator.engine.scopes import walk
from torch2pypto.translator.engine.syntax import FUNCTIONS, HOLDERS, held

_BLOCKS = ("body", "orelse", "finalbody")
_COMPOUND = HOLDERS - {*FUNCTIONS, ast.ClassDef, ast.Module, ast.ExceptHandler, ast.match_case}  # the holders that are a function's own blocks (not definitions)


def functions(tree: ast.Module):
    """The functions of a module, nested ones too, in ``ast.walk``'s order: found through the
    statement lists (handlers and cases too), their expressions left unvisited."""
    found = [tree]
    for current in found:
        found.extend(held(current))
    return (node for node in found if isinstance(node, FUNCTIONS))


def unique_module_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module's functions by name, those it binds nowhere else at module level."""
    bound, found = module_functions(tree.body)
    return {name: n for name, n in found.items() if bound[name] == 1}


def module_functions(body: list[ast.stmt]) -> tuple[collections.Counter, dict[str, ast.FunctionDef]]:
    """How often top-level statements ``body`` bind each name at module level, and their
    functions by name (a module read in chunks adds up its chunks')."""
    bound = collections.Counter()
    for node in body:
        for n in walk(node) if not isinstance(node, (*FUNCTIONS, ast.ClassDef)) else [node]:
            if isinstance(n, (*FUNCTIONS, ast.ClassDef)):
                bound[n.name] += 1
            elif type(n) is ast.Name and type(n.ctx) is not ast.Load:
                bound[n.id] += 1
            elif isinstance(n, ast.alias):
                bound[(n.asname or n.name).split(".")[0]] += 1
    return bound, {n.name: n for n in body if type(n) is ast.FunctionDef}


def methods(body: list[ast.stmt], prefix: str):
    """(a method, qualified name of its class) of the classes at module level, nested ones too."""
    for node in body:
        if isinstance(node, ast.ClassDef):
            name = prefix + node.name
            yield from ((n, name) for n in node.body if isinstance(n, FUNCTIONS))
            yield from methods(node.body, name + ".")


def blocks(function: ast.AST):
    """The statement lists of a function body, nested blocks included, not nested functions';
    each with the outermost loop of the function around it (None: no loop)."""
    stack = [(function.body, None)]
    while stack:
        block, loop = stack.pop()
        yield block, loop
        for statement in block:
            if type(statement) not in _COMPOUND:
                continue  # a simple statement or a definition: no block of the function's
            inner_loop = loop or (statement if isinstance(statement, (ast.For, ast.AsyncFor, ast.While)) else None)
            for field in _BLOCKS:
                inner = getattr(statement, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    stack.append((inner, inner_loop))
            for handler in getattr(statement, "handlers", ()):
                stack.append((handler.body, inner_loop))
            for case in getattr(statement, "cases", ()):
                stack.append((case.body, inner_loop))
