"""The fixpoint solver behind :mod:`inference`: memoised kinds of expressions and of questions.

Kinds are the least fixed point of the inference's equations, whatever question came first. A
question (a name's bindings, a ``self`` attribute's values, a function's returns) read while it is
being answered (``x = x.float()``) reads its kind so far (at first: no value), and the first
pending question (the circle's) is answered again, round after round, until every such read read
what its question came to (``n = 1; n = (n * 2).sin()``: an int, then unknown). Kinds only grow,
so rounds end. A chain of questions deeper than the stack allows is answered from its innermost
link out, so that no answer depends on where it was entered.
"""

from __future__ import annotations

import ast
from typing import Callable, Hashable

from torch2pypto.translator.engine.kinds import CYCLE, UNKNOWN, Kind, combine

MAX_DEPTH = 40  # questions followed at once before the innermost is answered first


class Solver:
    """Memoised kinds of one module's expressions; ``infer`` gives an expression's kind (asking
    :meth:`kind` and :meth:`pending` for the parts it reads)."""

    def __init__(self, infer: Callable[[ast.expr], Kind]) -> None:
        self._infer = infer
        self._kinds: dict = {}  # final answers: expressions and question keys
        self._pending: set = set()  # question keys being answered
        self._circle: dict | None = None  # question keys read while pending -> their kind so far
        self._round: dict = {}  # answers of the circle's current round that read a kind so far
        self._reads: list[tuple] = []  # (key, kind so far) of this round's reads of pending keys
        self._tentative = 0  # reads of kinds so far: an answer computed across one is not final
        self._depth = 0

    def answer(self, expr: ast.expr) -> Kind:
        """:meth:`kind` of a question asked from outside; a chain too deep to follow at once is
        answered from its innermost link out."""
        known = self._kinds.get(expr)
        if known is not None:
            return known
        try:
            return self.kind(expr)
        except _Deep as deep:
            return self._inside_out(expr, deep)

    def _inside_out(self, expr: ast.expr, deep: _Deep) -> Kind:
        """:meth:`answer` of a question whose chain ran too ``deep``: the innermost link first."""
        todo: list[tuple] = [(expr, lambda: self.kind(expr))]
        while True:
            if deep is not None:
                if len(todo) > MAX_DEPTH or any(key == deep.key for key, _ in todo):  # a cycle longer than the stack allows
                    self._kinds[deep.key] = UNKNOWN
                else:
                    todo.append((deep.key, deep.again))
            try:
                known = todo[-1][1]()
            except _Deep as inner:
                deep = inner
                continue
            deep = None
            todo.pop()
            if not todo:
                return known

    def kind(self, expr: ast.expr) -> Kind:
        """The kind of an expression, memoised (a kind so far inside a circle)."""
        known = self._kinds.get(expr)
        if known is not None:
            return known
        if self._circle is not None:
            known = self._round.get(expr)
            if known is not None:
                self._tentative += 1
                return known
        if self._depth > MAX_DEPTH * 4:  # a very long operator chain: its inner part first
            raise _Deep(expr, lambda: self.kind(expr))
        self._depth += 1
        tentative = self._tentative
        try:
            known = self._infer(expr)
        finally:
            self._depth -= 1
        (self._kinds if self._tentative == tentative else self._round)[expr] = known
        return known

    def pending(self, key: Hashable, evidence: list, kind_of: Callable) -> Kind:
        """Combine the kinds of ``evidence`` (the bindings of a name, the values stored in a
        ``self`` attribute, a function's returns), asked as the question ``key``."""
        known = self._kinds.get(key)
        if known is not None:
            return known
        if key in self._pending:
            self._tentative += 1
            known = self._circle.get(key, CYCLE)
            self._reads.append((key, known))
            return known
        if self._circle is not None:
            return self._infer_pending(key, evidence, kind_of)
        self._circle = {}
        try:
            while True:
                self._round, self._reads = {}, []
                known = self._infer_pending(key, evidence, kind_of)
                if all(self._circle.get(k) == read for k, read in self._reads):
                    self._kinds.update(self._round)  # every answer of this round is final
                    return known
        finally:
            self._circle, self._round, self._reads = None, {}, []

    def _infer_pending(self, key: Hashable, evidence: list, kind_of: Callable) -> Kind:
        """One round's kind of ``key``: final if it read no kind so far, else joined with the last."""
        known = self._round.get(key)
        if known is not None:
            self._tentative += 1
            return known
        if len(self._pending) > MAX_DEPTH:
            raise _Deep(key, lambda: self.pending(key, evidence, kind_of))
        tentative = self._tentative
        self._pending.add(key)
        try:
            known = combine([kind_of(e) for e in evidence])
        finally:
            self._pending.discard(key)
        if self._tentative == tentative:
            self._kinds[key] = known
            return known
        self._circle[key] = self._round[key] = known = combine((self._circle.get(key, CYCLE), known))
        return known


class _Deep(Exception):
    """A chain of questions deeper than the stack allows: ``again`` asks its innermost ``key`` first."""

    def __init__(self, key, again: Callable[[], Kind]) -> None:
        self.key, self.again = key, again
