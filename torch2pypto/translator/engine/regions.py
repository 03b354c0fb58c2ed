"""Regions: runs of straight-line tensor statements become one call of one fused kernel.

Within each function body (and each block in it), consecutive statements ``name = <expr>`` (or
``a, b = <expr>, <expr>``: bindings made after both are evaluated; and a final ``return <expr>``) whose expressions are made of ops one row kernel can carry form a
region: table entries of the elementwise, cast, composite (row recipes along the last dim) and
reduction (last-dim, keepdim) families, the infix operators on tensors with Python numbers,
last-dim slices ``x[..., a:b]`` (bounds of ints, of names of ints known at run time only, a
factory int of the kernel, and of the values' last dim) and ``torch.cat(...,
dim=-1)``, and helpers called with tensors, inlined: of the same class (``self._norm(x.float())``)
or of the module (``rotate_half(q)``; the wrapper takes the function, its fallback calls it), and
the forward of a submodule that ``self.<name>`` always holds an instance of a class of the module
(``self.post_attention_layernorm(h)``: the wrapper takes the submodule and its class, reads the
forward's ``self`` attributes from it, and runs the fallback, which calls it, unless the call would
run exactly that forward: no subclass, no hooks). A statement ``a = b`` gives a region's value a
second name (``residual = hidden_states``). Leaves are names and ``self`` attributes the inference
knows to be tensors (the kernel's operands; ``self`` attributes are taken as weights of the row's
width), Python numbers and dtypes. A region of at least two ops, not one bare submodule call
(``h = self.norm(h)`` is the submodule's own region already), becomes ``a, b = pypto_fused_<function>_<digest>(...)``: the names it assigns that
are read anywhere else in the function are its outputs. Its kernel, torch fallback (the
statements as they were) and wrapper come from :mod:`torch2pypto.rules.fusion`; the region's
call sites are converted sites, fused.

A statement of two ops or more that reads none of the region's values and brings rows of its own
starts another region (q's and k's RoPE: their heads differ under GQA, a kernel's loop takes rows
of one shape); where that region shares an operand with the one before it and depends on nothing
of it, the two run as groups of rows of one kernel, a loop each (:mod:`groups`); so do such
regions written interleaved (phi3's RoPE: q's slices, k's slices, then q's and k's products).
A linear, its chunk in two along the last dim and the gated product of the halves (phi3's MLP)
are one gated kernel (:mod:`halves`). A region right before an MLP whose residual add goes into its
down projection's epilogue is the gated kernel's prologue (:func:`prologues.prologue`).
A statement that does not fuse as a whole still holds regions: its largest expressions that fuse
(a call's argument, a list item) become calls standing where they were written. In a region's
first statement, a call of no torch op nor helper that fuses, or a subscript, that gives a tensor
(``x.view(s)``, ``self.proj_helper(q)``) runs on the host as written and is an operand of the kernel.

This module finds the regions (:class:`Finder`), asking :mod:`bounds` before it builds;
:mod:`lowering` turns a region's expressions into its tile program.
"""

from __future__ import annotations

import ast
import bisect
import collections
import dataclasses
import functools

from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.fusion import definitions, name_of
from torch2pypto.rules.tile_program import ROWS, VECTOR, Output, Param, Unfusible
from torch2pypto.translator.engine import bodies, deferrals, epilogues, groups, halves, joins, prologues, qkv, siblings
from torch2pypto.translator.engine.bounds import Bounds, no_op
from torch2pypto.translator.engine.leaves import COMPUTED
from torch2pypto.translator.engine.lowering import Built
from torch2pypto.translator.engine.report import CONVERTED, HOST_SIDE
from torch2pypto.translator.engine.scopes import children, walk
from torch2pypto.translator.engine.syntax import FUNCTIONS, OPERATORS, assigned_names, bindings, candidate, comments, comments_above, own_nodes

_NESTED = frozenset({*FUNCTIONS, ast.ClassDef, ast.Lambda})  # what own_nodes does not walk into
_VALUED = frozenset({ast.Assign, ast.AugAssign, ast.Expr, ast.Return})  # statements whose one expression evaluated is their value


@dataclasses.dataclass(frozen=True)
class Region:
    """A fused region: its statements' span (1-based lines, 0-based columns), the ops fused, the
    wrapper its statements call and the kernel it launches; for ``--verify``, the wrapper's
    parameters, the table entries fused (their sample hints) and the class whose ``self`` the
    fallback reads (a qualified name in the module; None: none, or a class not at module level);
    the submodules inlined and the parameters the wrapper reads from them, not passed."""

    path: str
    span: tuple[int, int, int, int]
    function: str
    ops: tuple[str, ...]
    wrapper: str
    kernel: str
    params: tuple[Param, ...] = ()
    entries: tuple[str, ...] = ()
    owner: str | None = None
    modules: tuple[tuple[str, str], ...] = ()  # (submodule, its class) parameters of an inlined forward
    derived: tuple[tuple[str, str], ...] = ()  # parameters the wrapper reads from a submodule (weight: norm.weight)
    rank: int = 1  # the least rank of its operands (a paired join along dim -2: 2)
    deferred: deferrals.Deferral | None = None  # a region deferred into a projections kernel's prologue


@dataclasses.dataclass(frozen=True)
class Context:
    """The pending call sites (by span) and the inference of a chunk of a module read in chunks."""

    pending: dict
    inference: object


@dataclasses.dataclass
class Fused:
    regions: list[Region]
    edits: list[tuple[int, int, str]]
    definitions: list[tuple[int, Definition]]  # (offset of the region, definition)
    # a gated pair's call by span: (wrapper, parameters, definitions), for a caller that inlines
    # the forward holding it (epilogues.submodule_epilogue)
    calls: dict = dataclasses.field(default_factory=dict)
    # a submodule epilogue's call by its offset: its gated pair's, for a region before it (prologues.prologue)
    submodules: dict = dataclasses.field(default_factory=dict)
    # a module function's grouped region (the function -> its statements and Grouped), for a
    # caller that composes its groups into a projection's epilogue (siblings' RoPE)
    grouped: dict = dataclasses.field(default_factory=dict)
    # a method's region that returns its result (the method -> its statements and Built), for
    # a caller that composes its program into a projection's epilogue (siblings' per-head norm)
    returned: dict = dataclasses.field(default_factory=dict)
    # a forward's projections-and-RoPE kernel (the forward -> its :class:`Rotation`), for a caller
    # that defers the region before the forward's call into it (deferrals.deferred_region)
    rotations: dict = dataclasses.field(default_factory=dict)
    # wrappers the edits call that no region names: a deferred region's (its region names its own
    # wrapper, which --verify runs), for a file that imports its wrappers
    called: list = dataclasses.field(default_factory=list)
    # finds a function's regions before its turn, once (siblings: a norm's forward defined after its caller)
    ahead: object = None


@dataclasses.dataclass(frozen=True)
class Rotation:
    """A forward's projections-and-RoPE kernel: the definitions of its kernel with a region in its
    prologue (``definitions(deferred=...)``: :func:`rope.definitions`, all else bound), its RoPE
    groups, the source of the x it projects, the lines of the statements its call replaced, and
    its wrapper."""

    definitions: object
    groups: tuple
    x: str
    lines: tuple[int, int]
    wrapper: str


def fuse(sites, attempts, lines, text: str, tree: ast.Module, path: str, elsewhere=None) -> Fused:
    """Find the regions of ``tree``'s functions; mark their call sites converted; the edits that
    replace their statements and the definitions their calls need. ``elsewhere`` (a module read
    in chunks): the module's functions by name, one of ``tree`` itself as it is, one of another
    chunk a callable giving ``(function, Context)`` or None."""
    pending = {a.span: a for a in attempts if not a.status}
    at = {a.span: a for a in attempts}
    host = {a.span for a in attempts if a.status == HOST_SIDE}
    found = Fused([], [], [])
    owners = dict(bodies.methods(tree.body, ""))
    helpers: dict = bodies.unique_module_functions(tree) if elsewhere is None else {}
    contexts: dict[ast.AST, Context] = {}
    for name, load in (elsewhere or {}).items():
        helpers[name] = functools.partial(_loaded, load, contexts) if callable(load) else load
    spans = sorted(pending)  # the pending spans in source order, a site no longer pending left out where read
    functions = list(bodies.functions(tree))
    left = set(functions)

    def run(function) -> None:
        if function not in left:
            return
        left.remove(function)
        finder = Finder(sites, pending, lines, text, function)
        finder.path, finder.owner, finder.helpers, finder.host = path, owners.get(function), helpers, host
        finder.contexts, finder.at, finder.spans = contexts, at, spans
        for block, loop in bodies.blocks(function):
            finder.block(block, loop, found)

    found.ahead = run
    for function in functions:
        run(function)
    found.ahead = None  # every function done; kept, it and ``found`` would hold each other, a cycle left to the collector
    return found


def _apart(before: list[ast.stmt], statement: ast.stmt, ops: int, rows: set[str], extended: Built) -> bool:
    """Whether ``statement`` reads none of the values of the statements ``before`` it (which made
    ``ops`` ops of the rows operands ``rows``), brings rows operands of its own and is a region by
    itself (two ops at least): apart, as q's and k's RoPE (their rows differ under GQA, and a
    kernel's loop takes rows of one shape; :mod:`groups` may join them as groups of one kernel).
    Single ops stay together (``a = a + t`` and ``b = b + t``: one kernel where the shapes agree,
    torch where not)."""
    if len(extended.program.ops) - ops < 2:
        return False
    assigned = assigned_names(before)
    if any(type(n) is ast.Name and n.id in assigned for n in walk(statement.value)):
        return False
    return any(p.kind == ROWS and p.source not in rows for p in extended.program.params)


def _of(attempt, op: str) -> bool:
    """Whether a pending site (None: no site) is a call of table entry ``op``."""
    return attempt is not None and attempt.resolved.entry is not None and attempt.resolved.entry.op == op


def _rows(built: Built) -> set[str]:
    return {p.source for p in built.program.params if p.kind == ROWS}


def _loaded(load, contexts: dict):
    """A function of another chunk, its context recorded (None: it is no module function)."""
    found = load()
    if found is None:
        return None
    function, context = found
    contexts[function] = context
    return function


class Finder(Bounds):
    """The regions of one function."""

    def __init__(self, sites, pending, lines, text: str, function) -> None:
        super().__init__()
        self.sites, self.pending, self.lines, self.text, self.function = sites, pending, lines, text, function
        self.loop_node = None  # the loop around the current block
        self.near: list = []  # the pending spans on the lines of the statement searched for expressions
        self._loops: dict[ast.AST, set[int]] = {}
        self._alone: dict[ast.AST, int] = {}  # a statement's value -> the ops of its build alone (0: none)
        self._walks: dict[ast.AST, list[ast.AST]] = {}  # an expression -> its nodes
        self._inside: dict[ast.stmt, set[int]] = {}  # a statement -> its :meth:`_ids`
        self._reads: dict[ast.AST, tuple[frozenset[str], bool]] = {}  # an expression -> its :meth:`reads`
        self.path, self.owner = "", None
        self.helpers: dict[str, ast.FunctionDef] = {}  # the module's functions that a region may inline
        self.host: set = set()  # the spans of host-side torch calls (views, shapes)
        self.contexts: dict[ast.AST, Context] = {}  # a helper of another chunk -> that chunk's
        self.at: dict = {}  # every call site's attempt by span, decided or pending
        self.spans: list = []  # the module's pending spans (when the finder was made), in source order

    # what the function reads and declares: walked only for a function with a region to try

    @functools.cached_property
    def declared(self) -> set[str]:
        text = self._text(self.function)
        if "global" not in text and "nonlocal" not in text:
            return set()  # no declaration written: the function's nodes left unwalked
        return {name for n in own_nodes(self.function) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}

    @functools.cached_property
    def walked(self) -> list[ast.AST]:
        """``walk(self.function)``, once."""
        return walk(self.function)

    @functools.cached_property
    def loads(self) -> list[ast.Name]:
        return [n for n in self.walked if type(n) is ast.Name and type(n.ctx) is ast.Load]

    @functools.cached_property
    def loads_of(self) -> dict[str, list[ast.Name]]:
        """The reads of each name (a region's outputs are its names read elsewhere)."""
        found = collections.defaultdict(list)
        for n in self.loads:
            found[n.id].append(n)
        return found

    @functools.cached_property
    def deferred(self) -> set[int]:
        """Names read by a nested function, whenever it runs: the reads outside the function's own
        nodes (:func:`own_nodes`), those of its header and of the functions, lambdas and classes
        it defines, found by walking these alone."""
        body = set(map(id, self.function.body))
        outside = [c for c in children(self.function) if id(c) not in body]
        outside += [n for n in self.walked[1:] if type(n) in _NESTED]
        return {id(n) for node in outside for n in walk(node) if type(n) is ast.Name and type(n.ctx) is ast.Load}

    @functools.cached_property
    def on_lines(self) -> list:
        """The module's spans pending when fusion began (``spans``, sorted once) on the function's lines."""
        first = bisect.bisect_left(self.spans, (self.function.lineno,))
        last = bisect.bisect_left(self.spans, (self.function.end_lineno + 1,))
        return self.spans[first:last]

    @functools.cached_property
    def starts(self) -> list:
        """The pending spans on the function's lines in source order (a call site holding an
        expression is in its statement)."""
        return [s for s in self.on_lines if s in self.pending]

    @functools.cached_property
    def linears(self) -> bool:
        """Whether a pending linear site is on the function's lines: sibling projections, a sliced
        RoPE and a chunked gated pair each start at one, and are not looked for in a function of none."""
        return any(_of(self.pending.get(s), "linear") for s in self.on_lines)

    @functools.cached_property
    def cats(self) -> bool:
        """Whether a pending torch.cat site is on the function's lines: paired joins start at one."""
        return any(_of(self.pending.get(s), "cat") for s in self.on_lines)

    @property
    def loop(self) -> set[int]:
        """The nodes of the loop around the current block."""
        loop = self.loop_node
        if loop is None:
            return set()
        if loop not in self._loops:
            self._loops[loop] = {id(n) for n in walk(loop)}
        return self._loops[loop]

    def block(self, statements: list[ast.stmt], loop, found: Fused) -> None:
        self.loop_node = loop
        i, ahead = 0, None  # ahead: the run found from a statement after a region (groups.joined)
        while i < len(statements):
            inlined = epilogues.submodule_epilogue(self, statements, i, found)
            if inlined:
                i, ahead = i + inlined, None
                continue
            linears = self.linears
            grouped = (siblings.sibling_linears(self, statements, i, found) or qkv.sliced_rope(self, statements, i, found)) if linears else 0  # their other expressions as usual
            if not grouped and linears and halves.chunked_pair(self, statements, i, found):
                i += 3  # a linear, its chunk in two halves and their gated product: one gated kernel
                continue
            best = None if grouped else ahead[1] if ahead is not None and ahead[0] == i else self.run(statements, i)
            woven = groups.interleaved(self, statements, i) if not grouped and (best is None or len(best[1].program.ops) < 2) \
                and self._ops_ahead(statements, i) >= 2 else None  # no chain from i makes two ops either
            if woven is not None:  # chains of statements written interleaved (phi3's RoPE): a group each
                self.emit(statements[i : woven[0]], woven[1], found)
                i, ahead = woven[0], None
                continue
            if best is None or len(best[1].program.ops) < 2:
                if not grouped and self.cats and joins.paired_joins(self, statements, i, found):
                    i += 2  # two joins: one launch
                    continue
                if not grouped and deferrals.deferred_region(self, statements, i, found):
                    i += 1  # a norm before an attention's call: in its projections' kernel
                    continue
                for statement in statements[i : i + max(grouped, 1)]:
                    spans = self.starts  # found at the first statement searched, as later pops would change it
                    roots = [root for root in _expressions(statement) if self._ops_at_most(root) >= 2]  # the others hold no region
                    if roots:
                        self.near = spans[bisect.bisect_left(spans, (statement.lineno,)) : bisect.bisect_left(spans, (statement.end_lineno + 1,))]
                    for root in roots:
                        self.expression(root, found)
                i += max(grouped, 1)
                continue
            end, built, ahead = groups.joined(self, statements, i, best)
            self.emit(statements[i:end], built, found)
            taken = prologues.prologue(self, statements, end, built, found)  # the region and an MLP after it
            i, ahead = (end + taken, None) if taken else (end, ahead)

    def run(self, statements: list[ast.stmt], i: int) -> tuple[int, Built] | None:
        """The longest region of the statements from ``i``: where it ends, and its build. Each
        statement extends the build of the ones before it; where one does not fit, the longest
        region found so far is the snapshot taken of its build. None, unbuilt, where no region from ``i``
        makes two ops (:meth:`_run_ops`): block and :func:`groups.joined` take one of fewer as none; the
        unrecorded ``_alone`` of statement ``i`` is a shortcut only (:meth:`expression` asks it of
        expressions bounded by two or more, which that value is not; :func:`groups.interleaved` builds)."""
        if self._ops_ahead(statements, i) < 2:
            return None  # no build from i makes two ops
        if self._fails_first(statements[i].value):
            self._alone[statements[i].value] = 0  # as its build would fail
            return None
        if not self._worth(statements[i : i + 1]) and not self._worth(statements[i : self._candidates_end(statements, i)]):
            return None  # no run from i is a region of its own: ``h = self.norm(h)`` before no other tensor statement
        if self._run_ops(statements, i) < 2:
            return None  # every region from i makes fewer than two ops
        best, built, j = None, None, i  # best: the longest region's end and a snapshot of its build
        while j < len(statements) and candidate(statements[j]):
            before = None if built is None else (len(built.program.ops), _rows(built))
            try:
                built = self.build(statements[i : j + 1], built)
            except Unfusible:
                break
            if before is not None and _apart(statements[i:j], statements[j], *before, built):
                break
            j += 1
            try:
                built.outputs = self.outputs(statements[i:j], built)
            except Unfusible:
                continue  # a later statement may read what this prefix cannot return
            if self._worth(statements[i:j]):
                best = j, built.snapshot()  # extended later, or left half-extended by a failure
        return best

    def failed(self, statement: ast.stmt) -> bool:
        """Whether the build of ``statement`` alone, as a region's first, is known to have failed
        (a run from it tried it): a later try of a region that starts with it need not build it."""
        return self._alone.get(statement.value) == 0

    def expression(self, node: ast.expr, found: Fused) -> None:
        """The largest expressions in ``node`` that fuse (two ops at least), each one region whose
        call stands where it was written: ``self.o_proj(a * b + c)``, ``x = foo(q * cos + r * sin)``;
        a gated pair or a linear and its epilogue (:mod:`epilogues`), also inside a converted call:
        ``self.down(act(gate(x)) * up(x))``, ``self.q_proj(h) * self.scaling``. An expression of
        fewer than two ops holds none of two."""
        if self._ops_at_most(node) < 2:
            return
        if any(find(self, node, found) for find in (epilogues.gated_pair, epilogues.linear_epilogue, epilogues.linear_activation)):
            return
        alone = self._alone.get(node)
        if isinstance(node, (*OPERATORS, ast.Call)) and self._worth([node]) and not (alone is not None and alone < 2) \
                and not self._enclosed(node) and not self._fails_first(node):
            returned = ast.Return(value=node)
            ast.copy_location(returned, node)
            try:
                built = self.build([returned])
                if len(built.program.ops) >= 2 and not comments(self._text(node)):
                    built.outputs = self.outputs([returned], built)
                    self.emit([returned], built, found, inline=True)
                    return
            except Unfusible:
                pass
        for child in children(node):
            if isinstance(child, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                continue  # its names are its own
            for inner in [child] if isinstance(child, ast.expr) else children(child):
                if isinstance(inner, ast.expr) and not no_op(inner):
                    self.expression(inner, found)

    def nodes(self, node: ast.AST) -> list[ast.AST]:
        """``walk(node)``, once per node (the builds of a statement and of its expressions read the same ones)."""
        known = self._walks.get(node)
        if known is None:
            known = self._walks[node] = walk(node)
        return known

    def _ids(self, statement: ast.stmt) -> set[int]:
        """The ids of ``statement``'s nodes, once per statement (a run asks for the outputs of each
        longer prefix)."""
        known = self._inside.get(statement)
        if known is None:
            known = self._inside[statement] = {id(n) for n in self.nodes(statement)}
        return known

    def reads(self, node: ast.AST) -> tuple[frozenset[str], bool]:
        """The names an expression reads and whether it holds a call, a subscript, a lambda or a
        walrus (no number then), once per node: a build asks at each level of an expression."""
        known = self._reads.get(node)
        if known is None:
            nodes = self.nodes(node)
            known = self._reads[node] = frozenset(n.id for n in nodes if type(n) is ast.Name), any(isinstance(n, COMPUTED) for n in nodes)
        return known

    def _text(self, node: ast.AST) -> str:
        span = self.lines.span(node)
        return self.text[self.lines.offset(*span[:2]) : self.lines.offset(*span[2:])]

    def _enclosed(self, node: ast.expr) -> bool:
        """Whether a pending call site holds ``node`` (its rewrite would overlap the region's)."""
        line, column, end_line, end_column = self.lines.span(node)
        return any(
            (s[0], s[1]) <= (line, column) and (end_line, end_column) <= (s[2], s[3]) and s != (line, column, end_line, end_column)
            for s in self.near
        )

    def build(self, statements: list[ast.stmt], built: Built | None = None) -> Built:
        """The region of ``statements``; ``built``: the build of all but the last, extended."""
        start = 0 if built is None else len(built.statements)
        if built is None:
            built = Built(self, statements)
        built.statements = statements
        for index, statement in enumerate(statements[start:], start):
            built.first = index == 0
            parts = [(None, statement.value)] if type(statement) is ast.Return else bindings(statement)
            try:
                values = [(name, built.value(node, built.env)) for name, node in parts]  # all before any is bound
            except Unfusible:
                if index == 0:
                    self._alone[statement.value] = 0
                raise
            if index == 0:  # built alone: as an expression, it makes as many ops
                self._alone[statement.value] = len(built.program.ops)
            for name, value in values:
                if not value.is_tile:
                    raise Unfusible("a statement of no tensor")
                if any(value.text == f"{p.name}_tile" for p in built.program.params):
                    raise Unfusible("a statement of no op")
                if name is None:
                    built.returned = value
                    continue
                if name in self.declared:
                    raise Unfusible(f"{name} is global or nonlocal")
                built.env[name] = value
                built.assigned[name] = value
        return built

    def outputs(self, statements, built: Built) -> list[Output]:
        """The values of the region read elsewhere: after its statements, in the loop around them or
        by a nested function. A read after the statements' end is none of theirs (a node starts within
        its statement's span), so the statements' nodes are asked only of the reads in the loop or
        deferred that start before it (most reads are neither)."""
        end = (statements[-1].end_lineno, statements[-1].end_col_offset)
        loop, deferred, inside = self.loop, self.deferred, None
        read = set()
        for name in built.assigned:
            for n in self.loads_of.get(name, ()):
                if (n.lineno, n.col_offset) > end:
                    read.add(name)
                    break
                if id(n) in loop or id(n) in deferred:
                    if inside is None:
                        inside = [self._ids(s) for s in statements]
                    if not any(id(n) in ids for ids in inside):
                        read.add(name)
                        break
        live = [Output(name, value) for name, value in built.assigned.items() if name in read]
        if built.returned is not None:
            if live:
                raise Unfusible("a return after values read elsewhere")
            live = [Output("result", built.returned)]
        if not live:
            raise Unfusible("no value of the region is read")
        for o in live:
            if o.value.width != "cols":
                raise Unfusible(f"{o.name} is a last-dim slice: a row kernel stores whole rows")
            if o.value.role == VECTOR:
                raise Unfusible(f"{o.name} is a vector: a row kernel stores rows and columns")
        # torch returns a cast to its own dtype as its operand: where that is an input or another
        # output, the caller holds one tensor twice (a write into one shows in the other), not a copy
        inputs = {f"{p.name}_tile" for p in built.program.params if p.kind in (ROWS, VECTOR)}
        origins = [built.program.origin(o.value) for o in live]
        for o, origin in zip(live, origins):
            if origin in inputs or origins.count(origin) > 1:
                raise Unfusible(f"{o.name} may be an input or another output itself (a cast to its own dtype)")
        return live

    def emit(self, statements: list[ast.stmt], built: Built, found: Fused, inline: bool = False) -> None:
        """Replace the statements by the region's call (``inline``: the one expression returned)."""
        first, last = statements[0], statements[-1]
        span = self.lines.span(first)[:2] + self.lines.span(last)[2:]
        start, end = self.lines.offset(*span[:2]), self.lines.offset(*span[2:])
        torch_source = built.expression_source(start, end) if inline else built.fallback_source(start, end, first.col_offset)
        kinds = "".join(f"{p.name}:{p.kind}," for p in built.program.params)
        wrapper = name_of(self.function.name, kinds + torch_source, len(built.attempts), built.made_of())
        outputs = built.outputs
        where = f"{self.function.name}'s region"
        if isinstance(built, groups.Grouped):
            defined = built.definitions(wrapper, where, torch_source)
            if self.owner is None and not inline:
                found.grouped[self.function] = (statements, built)
        else:
            defined = definitions(wrapper, where, built.program, outputs, torch_source, built.returned is not None)
            if self.owner is not None and not inline and built.returned is not None:
                found.returned[self.function] = (statements, built)
        call = f"{wrapper}({', '.join(p.source for p in built.program.params if p.name not in built.program.derived)})"
        statement = call if inline else f"return {call}" if built.returned is not None else f"{', '.join(o.name for o in built.outputs)} = {call}"
        indent = self.text[self.lines.offset(span[0], 0) : start]
        new = comments_above(self.text[start:end], indent) + statement
        for attempt in built.attempts:
            attempt.status, attempt.pypto_api = CONVERTED, f"{wrapper} (fused)"
        kernel = f"{wrapper.removeprefix('pypto_').rpartition('_')[0]}_kernel"
        params = tuple(built.program.params)
        owner = self.owner if any(p.kind == "self" for p in params) else None
        found.regions.append(Region(self.path, span, self.function.name, tuple(built.program.ops), wrapper, kernel,
                                    params, tuple(dict.fromkeys(built.entries)), owner,
                                    tuple(built.program.modules), tuple(built.program.derived.items())))
        found.edits.append((start, end, new))
        found.definitions.extend((start, d) for d in defined)



def _expressions(statement: ast.stmt) -> list[ast.expr]:
    """The expressions a statement evaluates itself (not those of its nested blocks or definitions).
    Most statements are an assignment, an expression or a return: their value is the one (an
    assignment's targets are all stored, of ``Store`` context), found without listing their children."""
    kind = type(statement)
    if kind in _VALUED:
        return [] if statement.value is None else [statement.value]
    if kind in FUNCTIONS or kind is ast.ClassDef:
        return []
    found = []
    for child in children(statement):
        if isinstance(child, ast.expr) and type(getattr(child, "ctx", None)) is not ast.Store:
            found.append(child)
        elif isinstance(child, ast.withitem):
            found.append(child.context_expr)
    return found


