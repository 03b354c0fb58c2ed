"""Bounds: what a region may make, found without building it.

A build that fails costs a lowering and a restore; most statements and expressions of a model
make no region. :class:`Bounds` answers first, from the syntax and the decided call sites alone:
an upper bound of the ops an expression or a run of statements makes (a region needs two), the
first statements whose build fails at once, and the runs that are no region of their own.
:class:`regions.Finder` asks before it builds.
"""

from __future__ import annotations

import ast

from torch2pypto.schema.family import never_fuses
from torch2pypto.translator.engine.classes import is_self
from torch2pypto.translator.engine.identity import ByIdentity
from torch2pypto.translator.engine.inlining import takes
from torch2pypto.translator.engine.lowering import COMPARE, INFIX
from torch2pypto.translator.engine.scopes import INERT, children
from torch2pypto.translator.engine.syntax import candidate, last_dim_slice

_NO_OPS = INERT | {ast.Name}  # nodes of no op, nor any inside: their bound is 0
_OPERATORS = frozenset({ast.BinOp, ast.UnaryOp, ast.Compare, ast.Subscript})


class Bounds:
    """The bounds of one function's statements and expressions, each found once. A subclass sets
    ``sites`` (the inference), ``pending`` (the pending call sites by span), ``lines`` and
    ``helpers`` (the module's functions that a region may inline)."""

    def __init__(self) -> None:
        self._bounds: dict[ast.AST, float] = {}  # an expression -> its _ops_at_most
        self._ahead = ByIdentity()  # a block -> the _ops_ahead of each statement

    def _ops_at_most(self, node: ast.AST) -> float:
        """An upper bound of the ops a build of the expression ``node`` alone makes (counted up to
        two), found without building: one per operator and subscript that may be an op itself
        (:func:`_own_op`), one per pending call site (its family's step), none for another call (an
        operand computed on the host, or no region); a call that may inline a helper
        (:meth:`_inlines`), which may make many, counts as many. A node's bound is its own count
        and its children's, so that it bounds each expression inside it too."""
        known = self._bounds.get(node)
        if known is not None:
            return known
        kind = type(node)
        if kind is ast.Call:
            count = float("inf") if self._inlines(node) else 1 if self.lines.span(node) in self.pending else 0
        else:
            count = 1 if kind in _OPERATORS and _own_op(node) else 0
        for child in children(node):
            if count >= 2:
                break
            kind = type(child)
            if kind is ast.keyword:
                child = child.value  # a keyword argument's bound is its value's
                kind = type(child)
            while kind is ast.Attribute:  # an attribute makes no op: its bound is its value's
                child = child.value
                kind = type(child)
            if kind not in _NO_OPS:
                count += self._ops_at_most(child)
        self._bounds[node] = count
        return count

    def _inlines(self, call: ast.Call) -> bool:
        """Whether a build may inline a function at ``call``: a helper of the module it names, the
        method of the class or the forward of the submodule of a class of the module it calls; none
        where each fails :func:`inlining.takes` (keywords, a decorator, parameters the call does not
        fill one for one, a body of no straight line; a submodule's class with no forward of its own
        or a ``__call__``), which no argument changes. A call that inlines nothing is a leaf, a
        pending site's step or no op of a region; a helper of another chunk is not read here (it may inline)."""
        func, inference = call.func, self.sites.inference
        if type(func) is ast.Name:
            helper = self.helpers.get(func.id)
            return helper is not None and (callable(helper) or takes(call, helper, method=False))
        if type(func) is not ast.Attribute or not is_self(func.value):
            return False  # the inference's methods and submodules are those of self.<name> alone, asked of no other call
        method = inference.self_method(func)
        if method is not None and takes(call, method, method=True):
            return True
        cls = inference.held_class(func)
        if cls is None:
            return False
        forward = inference.method(cls, "forward")
        return forward is not None and inference.method(cls, "__call__") is None and takes(call, forward, method=True)

    def _ops_ahead(self, statements: list[ast.stmt], i: int) -> float:
        """An upper bound of the ops of a run from ``i`` (counted up to two): the sum of
        :meth:`_ops_at_most` over the statements from ``i`` that may join it, found once per block."""
        ahead = self._ahead.get(statements)
        if ahead is None:
            ahead, count = [0.0] * len(statements), 0.0
            for j in range(len(statements) - 1, -1, -1):
                count = min(2, count + self._ops_at_most(statements[j].value)) if candidate(statements[j]) else 0.0
                ahead[j] = count
            self._ahead[statements] = ahead
        return ahead[i]

    def _fails_first(self, value: ast.expr) -> bool:
        """Whether a region whose first statement evaluates ``value`` (or the expression ``value``
        alone) fails at once, found without building it: a statement of a leaf makes no op, and
        ``value`` is at most a leaf where it holds no op (:meth:`_ops_at_most`: a name, a number,
        a call computed on the host), is a subscript but a last-dim slice (computed on the host),
        or is a call no kernel computes (:meth:`_host_call`) or fuses (:meth:`_never_fuses`)."""
        if self._ops_at_most(value) == 0:
            return True
        if type(value) is ast.Subscript:
            return not last_dim_slice(value)
        return type(value) is ast.Call and (self._host_call(value) or self._never_fuses(value))

    def _never_fuses(self, call: ast.Call) -> bool:
        """Whether ``call`` is a pending site of an entry no kernel fuses (:func:`family.never_fuses`:
        ``torch.matmul``, ``torch.arange``) that inlines nothing (:meth:`_inlines`): a build whose
        first statement evaluates it (or of it alone) lowers it as the call itself (no leaf: a
        call is no tensor name nor number, nor an operand computed on the host, being a pending
        site), and the call's lowering raises, by binding, a rejected argument or its family's
        None, before it lowers any argument."""
        attempt = self.pending.get(self.lines.span(call))
        entry = attempt.resolved.entry if attempt is not None else None
        return entry is not None and never_fuses(entry.family) and not self._inlines(call)

    def _host_call(self, value: ast.expr) -> bool:
        """Whether ``value`` is a call that no kernel computes: one that inlines nothing
        (:meth:`_inlines`) and is no pending site (computed on the host), or a module's or a
        wrapper's."""
        if type(value) is not ast.Call or self._inlines(value):
            return False
        attempt = self.pending.get(self.lines.span(value))
        return attempt is None or attempt.resolved.held is not None or bool(attempt.resolved.wrapper)

    def _ends_run(self, statements: list[ast.stmt], i: int, j: int, fusing: bool = False) -> bool:
        """Whether statement ``j`` ends the statements a run from ``i`` may take: it is no candidate,
        or, after ``i``, evaluates a call that no kernel computes (:meth:`_host_call`; a leaf computed
        on the host only in a region's first statement, it fails a build there) or, where ``fusing``,
        fuses (:meth:`_never_fuses`: its build fails there as in a first statement, no leaf being
        computed on the host after it)."""
        if not candidate(statements[j]):
            return True
        if j == i:
            return False
        value = statements[j].value
        return self._host_call(value) or fusing and type(value) is ast.Call and self._never_fuses(value)

    def _candidates_end(self, statements: list[ast.stmt], i: int) -> int:
        """Where the statements from ``i`` that a run may take end (:meth:`_ends_run`). A run's
        regions are prefixes of them, and a prefix that makes a region of its own (:meth:`_worth`)
        makes the whole of them one too."""
        j = i
        while j < len(statements) and not self._ends_run(statements, i, j):
            j += 1
        return j

    def _run_ops(self, statements: list[ast.stmt], i: int) -> float:
        """An upper bound of the ops of any region of a run from ``i`` (counted up to two): the sum of
        :meth:`_ops_at_most` over the statements :meth:`_candidates_end` takes (a run's regions
        are prefixes of them) up to a call that no kernel fuses (:meth:`_ends_run` ``fusing``),
        tighter than :meth:`_ops_ahead` where a later statement evaluates a call that no kernel
        computes (``h = residual + h`` before ``h = self.layer_norm(h)``, an ``nn.LayerNorm``) or
        fuses; read from ``i`` until it reaches two."""
        count, j = 0.0, i
        while j < len(statements) and not self._ends_run(statements, i, j, fusing=True):
            count += self._ops_at_most(statements[j].value)
            if count >= 2:
                break
            j += 1
        return count

    def _worth(self, parts: list) -> bool:
        """Whether statements or expressions ``parts`` make a region of their own: not one call of
        a submodule (``h = self.norm(h)``, its own forward's region already) and names alone."""
        calls = 0
        for part in parts:
            value = part.value if isinstance(part, ast.stmt) else part
            if type(value) is ast.Name:
                continue
            if type(value) is not ast.Call or self.sites.inference.held_class(value.func) is None or any(type(a) is not ast.Name for a in value.args):
                return True
            calls += 1
        return calls > 1


def no_op(node: ast.AST) -> bool:
    """Whether ``node`` holds no op, seen at once (a name, a constant, ``self.x``): its bound is 0,
    and it holds no expression that fuses."""
    kind = type(node)
    return kind in _NO_OPS or kind is ast.Attribute and type(node.value) is ast.Name


def _own_op(node: ast.AST) -> bool:
    """Whether the operator or subscript ``node`` may be an op itself: an infix operator of
    :data:`lowering.INFIX`, a negation of no number written out, one comparison of
    :data:`lowering.COMPARE`, a last-dim slice. :meth:`lowering.Built.value` makes another
    (``a // b``, ``-1``, ``x is None``, ``x[0]``, ``~m``) a number or an operand computed on the host,
    or refuses it, no op of its own either way (its operands are not lowered there)."""
    kind = type(node)
    if kind is ast.BinOp:
        return type(node.op) in INFIX
    if kind is ast.UnaryOp:
        operand = node.operand
        return type(node.op) is ast.USub and not (type(operand) is ast.Constant and type(operand.value) in (int, float))
    if kind is ast.Compare:
        return len(node.ops) == 1 and type(node.ops[0]) in COMPARE
    return last_dim_slice(node)
