"""Row groups: neighbouring regions that share operands run as one kernel (horizontal fusion).

llama's RoPE is two regions of one block, one per statement: q's and k's rows differ (H and KV
heads under GQA), and a region's kernel takes rows of one shape::

    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)

A region found right after another (:meth:`regions.Finder.run`) joins it as a further group of
rows of the same kernel when:
- it reads none of the names the groups before it assign, and assigns none of them (no data
  dependence: the wrapper runs all groups at once where the first statement stood);
- it reads a tensor operand one of them reads too, written the same (``cos``, ``sin``): one
  computation written out once per tensor, as RoPE is. Neighbours that share no operand stay
  regions of their own, each with its own launch and its own torch fallback;
- it and they are assignments of two ops or more without a row reduction (the kernels that walk
  their result as [blocks, n, cols] blocks, templates.block_walk) that inline no submodule's
  forward (whose wrapper checks the submodule at run time, region by region).
Statements of such groups may also be written interleaved (phi3's RoPE: q's slices, k's slices,
then q's and k's products). A run of statements that splits into chains (each statement joins the
chain whose names it reads), where no chain reads or assigns a name another assigns, and whose
chains interleave, is grouped a chain per group, by the same rule (:func:`interleaved`); the
wrapper runs where the first statement stood, the fallback runs the statements as written.
Each group keeps its own rows of its own shape, its own window of every rows operand (cos read
against q's heads and against k's), its own tile shape and its own outputs; the kernel runs a
loop per group in one launch (:mod:`torch2pypto.rules.groups`). Its wrapper runs the statements
as written where the groups' operands do not fit the kernel (one group's do not, or their last
dims differ), and gives torch's gradients of them when autograd records.
"""

from __future__ import annotations

import ast
import copy
import dataclasses

from torch2pypto.rules import groups
from torch2pypto.rules.tile_program import ROWS, VECTOR, Param, Program, Unfusible
from torch2pypto.translator.engine.lowering import Built
from torch2pypto.translator.engine.scopes import walk
from torch2pypto.translator.engine.syntax import assigned_names, bindings, candidate


@dataclasses.dataclass(frozen=True)
class Signature:
    """What :meth:`regions.Finder.emit` reads of a grouped region's kernel: the wrapper's
    parameters (one per source) and the ops fused, group after group."""

    params: tuple[Param, ...]
    ops: tuple[str, ...]
    modules: tuple[tuple[str, str], ...] = ()  # none: a group inlines no submodule (_joins)
    derived: dict[str, str] = dataclasses.field(default_factory=dict)


class Grouped:
    """A region of several groups of rows, each a build of its own statements (one after another)."""

    def __init__(self, builds: list[Built]) -> None:
        self.groups = builds
        self.program = Signature(tuple(_wrapper_params(builds)), tuple(op for b in builds for op in b.program.ops))
        self.attempts = [a for b in builds for a in b.attempts]
        self.entries = [e for b in builds for e in b.entries]
        self.outputs = [o for b in builds for o in b.outputs]
        self.returned = None

    def made_of(self) -> tuple[str, ...]:
        """The helpers and forwards its groups inlined (:meth:`Built.made_of`)."""
        return tuple(dict.fromkeys(h for b in self.groups for h in b.made_of()))

    def fallback_source(self, start: int, end: int, indent: int) -> str:
        """All groups' statements as written, leaves spelt as the wrapper's parameters."""
        merged = copy.copy(self.groups[0])
        merged.replacements = {span: text for b in self.groups for span, text in b.replacements.items()}
        return merged.fallback_source(start, end, indent)

    def definitions(self, wrapper: str, where: str, torch_source: str):
        return groups.definitions(wrapper, where, [(b.program, b.outputs) for b in self.groups], self.program.params, torch_source)


def joined(finder, statements: list[ast.stmt], start: int, first: tuple[int, Built]):
    """The region of ``statements[start:first[0]]`` (``first``: its end and build) with the regions
    after it that join it as groups: (its end, its build or a :class:`Grouped`, and the run found
    at that end that did not join, as ``(end, run)``, or None)."""
    end, built = first
    builds, spans = [built], [statements[start:end]]
    ahead = None
    while end < len(statements):
        found = finder.run(statements, end)
        if found is None or not _joins(spans, builds, statements[end : found[0]], found[1]):
            ahead = (end, found)
            break
        rebuilt = _rebuilt(finder, statements[end : found[0]], builds)
        if rebuilt is None:
            ahead = (end, found)
            break
        builds.append(rebuilt)
        spans.append(statements[end : found[0]])
        end = found[0]
    return end, builds[0] if len(builds) == 1 else Grouped(builds), ahead


def _joins(spans: list[list[ast.stmt]], builds: list[Built], statements: list[ast.stmt], built: Built) -> bool:
    """Whether the region of ``statements`` joins the groups ``builds`` (of ``spans``): the rule above."""
    if any(len(b.program.ops) < 2 or b.returned is not None or b.program.reduces or b.program.modules for b in (*builds, built)):
        return False
    assigned = assigned_names(s for span in spans for s in span)
    if any(type(n) is ast.Name and n.id in assigned for s in statements for n in walk(s)):
        return False
    tensors = {p.source for b in builds for p in b.program.params if p.kind in (ROWS, VECTOR)}
    return any(p.kind in (ROWS, VECTOR) and p.source in tensors for p in built.program.params)


def _rebuilt(finder, statements: list[ast.stmt], builds: list[Built]) -> Built | None:
    """The region of ``statements`` built again as a further group: its kernel names none of the
    earlier groups', its operands read by them are the wrapper's parameters once."""
    built = Built(finder, [])
    built.program = Program.after([b.program for b in builds])
    built.earlier = {p.source: p for p in _wrapper_params(builds)}
    try:
        built = finder.build(statements, built)
        built.outputs = finder.outputs(statements, built)
        groups.check([b.program for b in (*builds, built)], [b.outputs for b in (*builds, built)])
    except Unfusible:
        return None
    return built


def _wrapper_params(builds: list[Built]) -> list[Param]:
    """The wrapper's parameters: each group's under the name of its source's first (a group's own
    kernel operand of a source an earlier group reads is an alias of that one's)."""
    params: dict[str, Param] = {}
    for b in builds:
        for p in b.program.params:
            name = b.program.aliases.get(p.name, p.name)
            known = params.get(name)
            if known is None or known.kind == "like" and p.kind in (ROWS, VECTOR):
                params[name] = Param(name, p.kind, p.source)
    return list(params.values())


_WOVEN = 8  # statements an interleaved run may span


def interleaved(finder, statements: list[ast.stmt], start: int) -> tuple[int, Grouped] | None:
    """The longest run of statements from ``start`` whose interleaved chains make a grouped
    region (the rule above): its end and its build, or None (at once where the first chain's first
    statement, ``statements[start]``, failed to build alone)."""
    if finder.failed(statements[start]):
        return None
    stop = start
    while stop < len(statements) and stop - start < _WOVEN and candidate(statements[stop]):
        stop += 1
    for end in reversed(_woven(statements[start:stop], finder.nodes, start)):
        chains = _chains(statements[start:end], finder.nodes)
        builds: list[Built] = []
        for chain in chains or ():
            try:
                if builds:
                    built = _rebuilt(finder, chain, builds)
                    if built is None or not _joins(chains[: len(builds)], builds, chain, built):
                        break
                else:
                    built = finder.build(chain)
                    built.outputs = finder.outputs(chain, built)
            except Unfusible:
                break
            builds.append(built)
        else:
            if chains and len(builds[0].program.ops) >= 2:
                return end, Grouped(builds)
    return None


def _woven(statements: list[ast.stmt], nodes, start: int) -> list[int]:
    """The ends (``start`` plus a length of three or more) of the prefixes of ``statements`` that
    may be chains that interleave: those :func:`_chains` finds none in by their statements alone
    (one reading two chains' names or assigning another's, fewer than two chains, chains in
    order) left out, each found once in one pass instead of once per prefix."""
    ends = []
    for length, (count, woven) in enumerate(_prefixes(statements, nodes), 1):
        if length >= 3 and count >= 2 and woven:
            ends.append(start + length)
    return ends


def _prefixes(statements: list[ast.stmt], nodes):
    """For each prefix of ``statements`` as chains: how many chains, and whether a statement
    joins a chain before the latest (they interleave); none from a prefix where a statement
    reads two chains' names or assigns what another chain assigns."""
    owner: dict[str, int] = {}  # name -> the chain assigning it
    count, last, woven = 0, -1, False
    for statement in statements:
        reads = {n.id for n in nodes(statement.value) if type(n) is ast.Name}
        found = {owner[name] for name in reads if name in owner}
        if len(found) > 1:
            return
        k = found.pop() if found else count
        count = max(count, k + 1)
        woven, last = woven or k < last, k
        for name in assigned_names([statement]) if type(statement) is ast.Assign else ():
            if owner.setdefault(name, k) != k:
                return
        yield count, woven


def _chains(statements: list[ast.stmt], nodes) -> list[list[ast.stmt]] | None:
    """``statements`` as chains that interleave (at least two), each statement in the chain whose
    names it reads (a new chain if none); None where a statement reads two chains' names, a chain
    reads or assigns what another assigns, or the chains do not interleave. ``nodes``: a node's
    walk (the finder's, kept across the windows tried)."""
    chains: list[list[ast.stmt]] = []
    owner: dict[str, int] = {}  # name -> the chain assigning it
    order = []
    for statement in statements:
        reads = {n.id for n in nodes(statement.value) if type(n) is ast.Name}
        found = {owner[name] for name in reads if name in owner}
        if len(found) > 1:
            return None
        k = found.pop() if found else len(chains)
        if k == len(chains):
            chains.append([])
        chains[k].append(statement)
        order.append(k)
        for name in assigned_names([statement]) if type(statement) is ast.Assign else ():
            if owner.setdefault(name, k) != k:
                return None
    if len(chains) < 2 or order == sorted(order):
        return None
    for k, chain in enumerate(chains):
        touched = {n.id for s in chain for n in nodes(s) if type(n) is ast.Name}
        if any(owner[name] != k for name in touched if name in owner):
            return None
    return chains
