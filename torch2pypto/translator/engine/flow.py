"""Which bindings of a name reach a read of it, inside one function: flow, not just scope.

``h = self.embed(ids); h = self.norm(h)`` binds ``h`` twice, but a read after the second binding
sees that one only. The rule is dominance along a block: the nearest statement before the read,
in the read's block or an enclosing one, that binds the name unconditionally (an assignment)
runs on every path to the read and kills every binding before it (an augmented assignment
``h += x`` too: its value is ``h + x``, whose ``h`` reads the bindings before it); a bare
annotation (``h: Tensor``) keeps what came before it. After an ``if``, a read sees what reaches
the end of each branch (a branch that binds nothing passes on what came before it). A ``for``
loop's target is what a read in its body sees, unless the body binds the name before the read.
Anything less certain (a binding inside a ``try`` before the read, a loop that binds the name
again after it, a walrus, a read in a lambda, a generator or a nested function, which run
later) answers every binding, as scope alone does.
"""

from __future__ import annotations

import ast
import bisect
from typing import Iterable

_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return, ast.Raise, ast.Assert, ast.Delete)
_SIMPLE_TYPES = frozenset(_SIMPLE)
_ASSIGNMENTS = (ast.Assign, ast.AnnAssign)
_DEFERRED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)  # statements whose body runs later, or elsewhere
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def reaching(read: ast.Name, owner: ast.AST, bindings: list, walrus: str, parameter: str) -> list:
    """The bindings of ``read``'s name (all of ``owner``'s, the scope node that binds it) that may
    reach it; ``walrus`` and ``parameter`` are the binding kinds of ``x := v`` and of parameters."""
    if len(bindings) < 2 or not isinstance(owner, _FUNCTIONS) or any(b.kind == walrus for b in bindings):
        return bindings
    chain = _chain(owner.body, _start(read))
    if chain is None:
        return bindings
    augmented: list = []  # bare annotations on the way, which keep what came before them
    for block, index, statement, own in reversed(chain):
        inside = _within(bindings, statement)
        if inside:
            found = _inside(statement, own, read, inside, bindings)
            if found is not None:
                return found if found is bindings else found + augmented
        found = _before(bindings, block, index, augmented)
        if found is not None:
            return found if found is bindings else found + augmented
    parameters = [b for b in bindings if b.kind == parameter]
    return parameters + augmented if parameters else bindings


def _inside(statement: ast.stmt, own: bool, read: ast.Name, inside: list, bindings: list) -> list | None:
    """What bindings inside the statement that holds a read leave to it: None if none can reach it
    (they come after it, or in another branch), else the answer."""
    kind = type(statement)
    if own:  # the read is in the statement's own expressions: an assignment binds after its value
        return None if isinstance(statement, _SIMPLE) or kind in (ast.For, ast.AsyncFor, ast.If) else bindings
    if kind in (ast.For, ast.AsyncFor):  # the target is bound again before each pass of the body
        return (_within(inside, statement.target) or bindings) if _in(_start(read), statement.body) else bindings
    if kind is ast.If:
        return None
    if kind in (ast.With, ast.AsyncWith):
        bound = [i.optional_vars for i in statement.items if i.optional_vars is not None]
        return bindings if any(_within(inside, target) for target in bound) else None
    if kind is ast.Try or kind.__name__ == "TryStar":
        return None if _in(_start(read), statement.body) else bindings
    return bindings  # a while loop's later bindings reach its body, a match's patterns bind


def _before(bindings: list, block: list[ast.stmt], index: int, augmented: list) -> list | None:
    """The bindings an earlier statement of ``block`` leaves to a read in ``block[index]``: the
    nearest assignment's; all of them if a statement that binds conditionally comes first; None if
    no earlier statement assigns the name. Bare annotations passed on the way are added to
    ``augmented``."""
    for statement in reversed(block[:index]):
        found = _within(bindings, statement)
        if not found:
            continue
        if type(statement) is ast.AnnAssign and statement.value is None:
            augmented += found  # keeps the value before it: a bare annotation binds nothing
            continue
        if type(statement) is ast.If:  # what reaches the end of each branch; one that binds nothing passes on
            ends = []
            for branch in (statement.body, statement.orelse):
                end = _before(bindings, branch, len(branch), augmented)
                if end is bindings:
                    return bindings
                ends.append(end)
                augmented += end or []
            if None not in ends:
                return []  # every branch binds: nothing before the `if` reaches
            continue
        return found if isinstance(statement, (*_ASSIGNMENTS, ast.AugAssign)) else bindings
    return None


def _chain(body: list[ast.stmt], position: tuple[int, int]) -> list[tuple] | None:
    """The statements that contain ``position``, outermost first: (block, index in it, statement,
    whether the position is in the statement's own expressions rather than in a block of it)."""
    chain = []
    block = body
    while True:
        index = bisect.bisect_right(block, position, key=_start) - 1
        if index < 0 or _end(block[index]) < position:
            return None
        statement = block[index]
        # a simple statement holds no block (_blocks finds none): most reads are in one
        inner = None if type(statement) in _SIMPLE_TYPES else next((b for b in _blocks(statement) if _in(position, b)), None)
        if isinstance(statement, _DEFERRED):
            return None  # the read runs when that function does
        chain.append((block, index, statement, inner is None))
        if inner is None:
            return chain
        block = inner


def _blocks(statement: ast.stmt) -> Iterable[list[ast.stmt]]:
    for field in ("body", "orelse", "finalbody"):
        block = getattr(statement, field, None)
        if isinstance(block, list):
            yield block
    for handler in getattr(statement, "handlers", ()):
        yield handler.body
    for case in getattr(statement, "cases", ()):
        yield case.body


def _within(bindings: Iterable, node: ast.AST) -> list:
    first, last = _start(node), _end(node)
    lines = range(first[0], last[0] + 1)  # most bindings are on other lines: no position made of them
    return [b for b in bindings if b.node.lineno in lines and first <= _start(b.node) <= last]


def _in(position: tuple[int, int], block: list[ast.stmt]) -> bool:
    """Whether ``position`` lies within the statements of ``block``."""
    return bool(block) and _start(block[0]) <= position <= _end(block[-1])


def _start(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset


def _end(node: ast.AST) -> tuple[int, int]:
    return node.end_lineno, node.end_col_offset
