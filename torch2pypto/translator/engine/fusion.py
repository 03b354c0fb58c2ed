"""Fusion: runs of straight-line tensor statements become one call of one fused kernel.

Within each function body (and each block in it), consecutive statements ``name = <expr>`` (and
a final ``return <expr>``) whose expressions are made of ops one row kernel can carry form a
region: table entries of the elementwise, cast, composite (row recipes along the last dim) and
reduction (last-dim, keepdim) families, the infix operators on tensors with Python numbers,
last-dim slices ``x[..., a:b]`` (bounds of ints and the values' last dim) and ``torch.cat(...,
dim=-1)``, and helpers called with tensors, inlined: of the same class (``self._norm(x.float())``)
or of the module (``rotate_half(q)``; the wrapper takes the function, its fallback calls it). Leaves are
names and ``self`` attributes the inference knows to be tensors (the kernel's operands; ``self``
attributes are taken as weights of the row's width), Python numbers and dtypes. A region of at
least two ops becomes ``a, b = pypto_fused_<function>_<digest>(...)``: the names it assigns that
are read anywhere else in the function are its outputs. Its kernel, torch fallback (the
statements as they were) and wrapper come from :mod:`torch2pypto.rules.fusion`; the region's
call sites are converted sites, fused.

A statement of two ops or more that reads none of the region's values and brings rows of its own
starts another region (q's and k's RoPE: their heads differ under GQA, a kernel takes rows of one
shape).
A statement that does not fuse as a whole still holds regions: its largest expressions that fuse
(a call's argument, a list item) become calls standing where they were written. In a region's
first statement, a call of no torch op nor helper that fuses, or a subscript, that gives a tensor
(``x.view(s)``, ``self.proj_helper(q)``) runs on the host as written and is an operand of the kernel.
"""

from __future__ import annotations

import ast
import bisect
import collections
import copy
import dataclasses
import functools
import io
import tokenize

from torch2pypto.mapping import Entry
from torch2pypto.rules import composite, elementwise, reduction
from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.fusion import ROWS, VECTOR, Operand, Output, Param, Program, Unfusible, definitions, name_of, static_dtype
from torch2pypto.rules.steps import Apply
from torch2pypto.schema.family import family
from torch2pypto.translator.engine import epilogues, siblings
from torch2pypto.translator.engine.binding import BindError, ast_args, bind
from torch2pypto.translator.engine.inference import TENSOR
from torch2pypto.translator.engine.report import CONVERTED, HOST_SIDE
from torch2pypto.translator.engine.scopes import children, walk

_INFIX = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow"}
_COMPARE = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_BLOCKS = ("body", "orelse", "finalbody")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)  # what can hold a function
_INLINE_DEPTH = 4
_OPERATORS = (ast.BinOp, ast.UnaryOp, ast.Compare)
_NO_LITERAL = frozenset({ast.Name, ast.Attribute, ast.Subscript, ast.Compare, ast.BoolOp, ast.IfExp, ast.Lambda, ast.NamedExpr, ast.Starred})


@dataclasses.dataclass(frozen=True)
class Region:
    """A fused region: its statements' span (1-based lines, 0-based columns), the ops fused, the
    wrapper its statements call and the kernel it launches; for ``--verify``, the wrapper's
    parameters, the table entries fused (their sample hints) and the class whose ``self`` the
    fallback reads (a qualified name in the module; None: none, or a class not at module level)."""

    path: str
    span: tuple[int, int, int, int]
    function: str
    ops: tuple[str, ...]
    wrapper: str
    kernel: str
    params: tuple[Param, ...] = ()
    entries: tuple[str, ...] = ()
    owner: str | None = None


@dataclasses.dataclass(frozen=True)
class Context:
    """The pending call sites (by span) and the inference of a part of a module read in parts."""

    pending: dict
    inference: object


@dataclasses.dataclass
class Fused:
    regions: list[Region]
    edits: list[tuple[int, int, str]]
    definitions: list[tuple[int, Definition]]  # (offset of the region, definition)


def fuse(sites, attempts, lines, text: str, tree: ast.Module, path: str, elsewhere=None) -> Fused:
    """Find the regions of ``tree``'s functions; mark their call sites converted; the edits that
    replace their statements and the definitions their calls need. ``elsewhere`` (a module read
    in parts): the module's functions of the other parts, by name, each a callable giving
    ``(function, Context)`` or None."""
    pending = {a.span: a for a in attempts if not a.status}
    at = {a.span: a for a in attempts}
    host = {a.span for a in attempts if a.status == HOST_SIDE}
    found = Fused([], [], [])
    owners = dict(_methods(tree.body, ""))
    helpers: dict = _module_functions(tree) if elsewhere is None else {}
    contexts: dict[int, Context] = {}
    for name, load in (elsewhere or {}).items():
        helpers[name] = functools.partial(_loaded, load, contexts)
    for function in _functions(tree):
        finder = _Finder(sites, pending, lines, text, function)
        finder.path, finder.owner, finder.helpers, finder.host = path, owners.get(id(function)), helpers, host
        finder.contexts, finder.at = contexts, at
        for block, loop in _blocks(function):
            finder.block(block, loop, found)
    return found


def _functions(tree: ast.Module):
    """The functions of a module, nested ones too, in ``ast.walk``'s order; only statements (and
    their handlers and cases) can hold one, so expressions are not walked."""
    queue = collections.deque([tree])
    while queue:
        node = queue.popleft()
        if isinstance(node, _FUNCTIONS):
            yield node
        queue.extend(c for c in children(node) if isinstance(c, _STATEMENTS))


def _apart(before: list[ast.stmt], statement: ast.stmt, ops: int, rows: set[str], extended: _Built) -> bool:
    """Whether ``statement`` reads none of the values of the statements ``before`` it (which made
    ``ops`` ops of the rows operands ``rows``), brings rows operands of its own and is a region by
    itself (two ops at least): apart, as q's and k's RoPE (their rows differ under GQA, and a
    kernel takes rows of one shape). Single ops stay together (``a = a + t`` and ``b = b + t``:
    one kernel where the shapes agree, torch where not)."""
    if len(extended.program.ops) - ops < 2:
        return False
    assigned = {s.targets[0].id for s in before if type(s) is ast.Assign}
    if any(type(n) is ast.Name and n.id in assigned for n in walk(statement.value)):
        return False
    return any(p.kind == ROWS and p.source not in rows for p in extended.program.params)


def _rows(built: _Built) -> set[str]:
    return {p.source for p in built.program.params if p.kind == ROWS}


def _loaded(load, contexts: dict):
    """A function of another part, its context recorded by id (None: it is no module function)."""
    found = load()
    if found is None:
        return None
    function, context = found
    contexts[id(function)] = context
    return function


@functools.lru_cache(maxsize=256)
def _locals(function: ast.FunctionDef) -> frozenset[str]:
    """The names a function binds: its parameters and the names it stores."""
    arguments = function.args
    names = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg) if a}
    return frozenset(names | {n.id for n in _own_nodes(function) if type(n) is ast.Name and type(n.ctx) is not ast.Load})


def _module_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module's functions by name, those it binds nowhere else at module level."""
    bound, functions = module_functions(tree.body)
    return {name: n for name, n in functions.items() if bound[name] == 1}


def module_functions(body: list[ast.stmt]) -> tuple[collections.Counter, dict[str, ast.FunctionDef]]:
    """How often top-level statements ``body`` bind each name at module level, and their
    functions by name (a module read in parts adds up its parts')."""
    bound = collections.Counter()
    for node in body:
        for n in ast.walk(node) if not isinstance(node, (*_FUNCTIONS, ast.ClassDef)) else [node]:
            if isinstance(n, (*_FUNCTIONS, ast.ClassDef)):
                bound[n.name] += 1
            elif type(n) is ast.Name and type(n.ctx) is not ast.Load:
                bound[n.id] += 1
            elif isinstance(n, ast.alias):
                bound[(n.asname or n.name).split(".")[0]] += 1
    return bound, {n.name: n for n in body if type(n) is ast.FunctionDef}


def _methods(body: list[ast.stmt], prefix: str):
    """(id of a method, qualified name of its class) of the classes at module level, nested ones too."""
    for node in body:
        if isinstance(node, ast.ClassDef):
            name = prefix + node.name
            yield from ((id(n), name) for n in node.body if isinstance(n, _FUNCTIONS))
            yield from _methods(node.body, name + ".")


def _blocks(function: ast.AST):
    """The statement lists of a function body, nested blocks included, not nested functions';
    each with the outermost loop of the function around it (None: no loop)."""
    stack = [(function.body, None)]
    while stack:
        block, loop = stack.pop()
        yield block, loop
        for statement in block:
            if isinstance(statement, (*_FUNCTIONS, ast.ClassDef)):
                continue
            inner_loop = loop or (statement if isinstance(statement, (ast.For, ast.AsyncFor, ast.While)) else None)
            for field in _BLOCKS:
                inner = getattr(statement, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    stack.append((inner, inner_loop))
            for handler in getattr(statement, "handlers", ()):
                stack.append((handler.body, inner_loop))
            for case in getattr(statement, "cases", ()):
                stack.append((case.body, inner_loop))


def _candidate(statement: ast.stmt) -> bool:
    if type(statement) is ast.Assign:
        return len(statement.targets) == 1 and type(statement.targets[0]) is ast.Name and type(statement.value) is not ast.Name
    return type(statement) is ast.Return and statement.value is not None and type(statement.value) is not ast.Name


class _Finder:
    """The regions of one function."""

    def __init__(self, sites, pending, lines, text: str, function) -> None:
        self.sites, self.pending, self.lines, self.text, self.function = sites, pending, lines, text, function
        self.loop_node = None  # the loop around the current block
        self.near: list = []  # the pending spans on the lines of the statement searched for expressions
        self._loops: dict[int, set[int]] = {}
        self._bounds: dict[int, tuple[ast.AST, float]] = {}  # id of an expression -> (it, _ops_at_most)
        self._alone: dict[int, tuple[ast.AST, int]] = {}  # id of a statement's value -> (it, the ops of its build alone; 0: none)
        self._walks: dict[int, tuple[ast.AST, list[ast.AST]]] = {}  # id of an expression -> (it, its nodes)
        self.path, self.owner = "", None
        self.helpers: dict[str, ast.FunctionDef] = {}  # the module's functions that a region may inline
        self.host: set = set()  # the spans of host-side torch calls (views, shapes)
        self.contexts: dict[int, Context] = {}  # id of a helper of another part -> that part's
        self.at: dict = {}  # every call site's attempt by span, decided or pending

    # what the function reads and declares: walked only for a function with a region to try

    @functools.cached_property
    def declared(self) -> set[str]:
        return {name for n in _own_nodes(self.function) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}

    @functools.cached_property
    def loads(self) -> list[ast.Name]:
        return [n for n in walk(self.function) if type(n) is ast.Name and type(n.ctx) is ast.Load]

    @functools.cached_property
    def deferred(self) -> set[int]:
        """Names read by a nested function, whenever it runs."""
        own = {id(n) for n in _own_nodes(self.function)}
        return {id(n) for n in self.loads if id(n) not in own}

    @functools.cached_property
    def starts(self) -> list:
        """The pending spans in source order (a call site holding an expression is in its statement)."""
        return sorted(self.pending)

    @property
    def loop(self) -> set[int]:
        """The nodes of the loop around the current block."""
        loop = self.loop_node
        if loop is None:
            return set()
        if id(loop) not in self._loops:
            self._loops[id(loop)] = {id(n) for n in walk(loop)}
        return self._loops[id(loop)]

    def block(self, statements: list[ast.stmt], loop, found: Fused) -> None:
        self.loop_node = loop
        i = 0
        while i < len(statements):
            grouped = siblings.sibling_linears(self, statements, i, found)  # their other expressions as usual
            best = None if grouped else self.run(statements, i)
            if best is None or len(best[1].program.ops) < 2:
                for statement in statements[i : i + max(grouped, 1)]:
                    spans = self.starts
                    self.near = spans[bisect.bisect_left(spans, (statement.lineno,)) : bisect.bisect_left(spans, (statement.end_lineno + 1,))]
                    for root in _expressions(statement):
                        self.expression(root, found)
                i += max(grouped, 1)
                continue
            self.emit(statements[i : best[0]], best[1], found)
            i = best[0]

    def run(self, statements: list[ast.stmt], i: int) -> tuple[int, _Built] | None:
        """The longest region of the statements from ``i``: where it ends, and its build. Each
        statement extends the build of the ones before it; where one does not fit, the longest
        region found so far is built again from its statements."""
        best, built, j = None, None, i
        while j < len(statements) and _candidate(statements[j]):
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
            best = j
        if best is None:
            return None
        if len(built.statements) != best - i:  # extended past it, or left half-extended by a failure
            built = self.build(statements[i:best])
            built.outputs = self.outputs(statements[i:best], built)
        return best, built

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
        alone = self._alone.get(id(node))
        if isinstance(node, (*_OPERATORS, ast.Call)) and not (alone and alone[0] is node and alone[1] < 2) and not self._enclosed(node):
            returned = ast.Return(value=node)
            ast.copy_location(returned, node)
            try:
                built = self.build([returned])
                if len(built.program.ops) >= 2 and not _comments(self._text(node)):
                    built.outputs = self.outputs([returned], built)
                    self.emit([returned], built, found, inline=True)
                    return
            except Unfusible:
                pass
        for child in children(node):
            if isinstance(child, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                continue  # its names are its own
            for inner in [child] if isinstance(child, ast.expr) else children(child):
                if isinstance(inner, ast.expr):
                    self.expression(inner, found)

    def nodes(self, node: ast.AST) -> list[ast.AST]:
        """``walk(node)``, once per node (the builds of a statement and of its expressions read the same ones)."""
        known = self._walks.get(id(node))
        if known is None or known[0] is not node:
            known = self._walks[id(node)] = (node, walk(node))  # the node kept, so that its id is not reused
        return known[1]

    def _ops_at_most(self, node: ast.AST) -> float:
        """An upper bound of the ops a build of the expression ``node`` alone makes (counted up to
        two), found without building: one per operator and subscript (a last-dim slice), one per pending call
        site (its family's step), none for another call (an operand computed on the host, or no
        region); a call of a helper, which may inline many, counts as many."""
        known = self._bounds.get(id(node))
        if known is not None and known[0] is node:
            return known[1]
        kind = type(node)
        if kind is ast.Call:
            func = node.func
            if type(func) is ast.Name and func.id in self.helpers or self.sites.inference.self_method(func) is not None:
                count = float("inf")
            else:
                count = 1 if self.lines.span(node) in self.pending else 0
        else:
            count = 1 if kind in (ast.BinOp, ast.UnaryOp, ast.Compare, ast.Subscript) else 0
        for child in children(node):
            if count >= 2:
                break
            count += self._ops_at_most(child)
        self._bounds[id(node)] = (node, count)  # the node kept, so that its id is not reused
        return count

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

    def build(self, statements: list[ast.stmt], built: _Built | None = None) -> _Built:
        """The region of ``statements``; ``built``: the build of all but the last, extended."""
        start = 0 if built is None else len(built.statements)
        if built is None:
            built = _Built(self, statements)
        built.statements = statements
        for index, statement in enumerate(statements[start:], start):
            built.first = index == 0
            try:
                value = built.value(statement.value, built.env)
            except Unfusible:
                if index == 0:
                    self._alone[id(statement.value)] = (statement.value, 0)
                raise
            if index == 0:  # built alone: as an expression, it makes as many ops
                self._alone[id(statement.value)] = (statement.value, len(built.program.ops))
            if not value.is_tile:
                raise Unfusible("a statement of no tensor")
            if any(value.text == f"{p.name}_tile" for p in built.program.params):
                raise Unfusible("a statement of no op")
            if type(statement) is ast.Return:
                built.returned = value
            else:
                name = statement.targets[0].id
                if name in self.declared:
                    raise Unfusible(f"{name} is global or nonlocal")
                built.env[name] = value
                built.assigned[name] = value
        return built

    def outputs(self, statements, built: _Built) -> list[Output]:
        inside = {id(n) for s in statements for n in walk(s)}
        end = (statements[-1].end_lineno, statements[-1].end_col_offset)
        read = {
            n.id for n in self.loads
            if id(n) not in inside and ((n.lineno, n.col_offset) > end or id(n) in self.loop or id(n) in self.deferred)
        }
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

    def emit(self, statements: list[ast.stmt], built: _Built, found: Fused, inline: bool = False) -> None:
        """Replace the statements by the region's call (``inline``: the one expression returned)."""
        first, last = statements[0], statements[-1]
        span = self.lines.span(first)[:2] + self.lines.span(last)[2:]
        start, end = self.lines.offset(*span[:2]), self.lines.offset(*span[2:])
        torch_source = built.expression_source(start, end) if inline else built.fallback_source(start, end, first.col_offset)
        kinds = "".join(f"{p.name}:{p.kind}," for p in built.program.params)
        wrapper = name_of(self.function.name, kinds + torch_source, len(built.attempts))
        outputs = built.outputs
        where = f"{self.function.name}'s region"
        defined = definitions(wrapper, where, built.program, outputs, torch_source, built.returned is not None)
        call = f"{wrapper}({', '.join(p.source for p in built.program.params)})"
        statement = call if inline else f"return {call}" if built.returned is not None else f"{', '.join(o.name for o in built.outputs)} = {call}"
        indent = self.text[self.lines.offset(span[0], 0) : start]
        comments = _comments(self.text[start:end])
        newline = "\r\n" if "\r\n" in self.text[start:end] else "\r" if "\r" in self.text[start:end] else "\n"
        new = "".join(f"{c}{newline}{indent}" for c in comments) + statement
        for attempt in built.attempts:
            attempt.status, attempt.pypto_api = CONVERTED, f"{wrapper} (fused)"
        kernel = f"{wrapper.removeprefix('pypto_').rpartition('_')[0]}_kernel"
        params = tuple(built.program.params)
        owner = self.owner if any(p.kind == "self" for p in params) else None
        found.regions.append(Region(self.path, span, self.function.name, tuple(built.program.ops), wrapper, kernel,
                                    params, tuple(dict.fromkeys(built.entries)), owner))
        found.edits.append((start, end, new))
        found.definitions.extend((start, d) for d in defined)


def _comments(segment: str) -> list[str]:
    """The comments inside a region's text, which stay above its call."""
    try:
        return [t.string for t in tokenize.generate_tokens(io.StringIO(segment).readline) if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return [line.strip() for line in segment.splitlines() if line.strip().startswith("#")]


class _Built:
    """One attempt at a region: the program, the values its names hold, the parameters' leaves."""

    def __init__(self, finder: _Finder, statements) -> None:
        self.finder = finder
        self.statements = statements
        self.program = Program()
        self.env: dict[str, Operand] = {}
        self.assigned: dict[str, Operand] = {}
        self.returned: Operand | None = None
        self.outputs: list[Output] = []
        self.attempts = []
        self.entries: list[str] = []  # the table ops applied
        self.by_source: dict[str, object] = {}  # leaf source -> Param
        self.replacements: dict[tuple[int, int], tuple[int, int, str]] = {}  # leaf span -> text in the fallback
        self.depth = 0
        self.first = True  # building the region's first statement
        self.inlined: list[ast.FunctionDef] = []  # the helpers being inlined, innermost last
        self.contexts: list[Context] = []  # the pending sites and inference of each helper's part

    # --- leaves ----------------------------------------------------------------------------

    def _source(self, node: ast.AST) -> str:
        lines = self.finder.lines
        span = lines.span(node)
        return self.finder.text[lines.offset(*span[:2]) : lines.offset(*span[2:])]

    def _leaf(self, node: ast.expr, kind: str, name: str):
        """The parameter a leaf expression is passed as (one per distinct source text)."""
        source = self._source(node)
        param = self.by_source.get(source)
        if param is None:
            param = self.program.param(name, kind, source)
            self.by_source[source] = param
        elif param.kind == "like" and kind in (ROWS, VECTOR):
            upgraded = dataclasses.replace(param, kind=kind)
            self.program.params[self.program.params.index(param)] = upgraded
            self.by_source[source] = param = upgraded
        elif param.kind != kind and not (kind == "like" and param.kind in (ROWS, VECTOR)):
            raise Unfusible(f"{source} is both a {param.kind} and a {kind}")
        if self.depth == 0:
            self._replace(node, param.name)
        return param

    def _replace(self, node: ast.AST, text: str) -> None:
        lines = self.finder.lines
        span = lines.span(node)
        self.replacements[(lines.offset(*span[:2]), lines.offset(*span[2:]))] = text

    def _reads_region(self, node: ast.expr, env) -> bool:
        return any(type(n) is ast.Name and n.id in env for n in walk(node))

    def _number(self, node: ast.expr, env) -> Operand | None:
        """A Python number: a literal, or an expression of no tensor (checked at run time)."""
        value = _literal(node, failed=None)
        if type(value) in (int, float):
            return Program.literal(value)
        if value is not None or self.depth and not _self_rooted(node):
            return None
        nodes = self.finder.nodes(node)
        if any(type(n) is ast.Name and n.id in env for n in nodes):
            return None  # reads the region
        if any(isinstance(n, (ast.Call, ast.Subscript, ast.Lambda, ast.NamedExpr)) for n in nodes):
            return None
        if any(self.finder.lines.span(n) in self.pending for n in nodes if isinstance(n, _OPERATORS)):
            return None  # an operator on a tensor (x == m, where m may be one): no number
        if self.inference.kind(node) == TENSOR:
            return None
        name = node.attr if type(node) is ast.Attribute else node.id if type(node) is ast.Name else "number"
        return Operand(self._leaf(node, "number", name).name)

    def _tensor(self, node: ast.expr, env) -> Operand | None:
        """A tensor leaf: a name or a (``self``) attribute the inference knows to be a tensor."""
        if type(node) not in (ast.Name, ast.Attribute) or self._reads_region(node, env):
            return None
        if type(node) is ast.Attribute and not _dotted(node):
            return None
        if self.inference.kind(node) != TENSOR:
            return None
        if self.depth and not _self_rooted(node):
            return None  # a helper's own names are its parameters, bound by the caller
        kind = VECTOR if type(node) is ast.Attribute else ROWS
        name = node.attr if type(node) is ast.Attribute else node.id
        return self.program.tensor(self._leaf(node, kind, name))

    @property
    def pending(self) -> dict:
        """The pending call sites of the part whose code is being read (a helper's may be another)."""
        return self.contexts[-1].pending if self.contexts else self.finder.pending

    @property
    def inference(self):
        return self.contexts[-1].inference if self.contexts else self.finder.sites.inference

    _STATE = ("program", "by_source", "replacements", "attempts", "entries")

    def _state(self):
        return copy.deepcopy({name: getattr(self, name) for name in self._STATE if name != "attempts"}) | {"attempts": list(self.attempts)}

    def _restore(self, state) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def _opaque(self, node: ast.expr, env) -> Operand | None:
        """A call or a subscript that gives a tensor and writes none (its calls: host-side torch
        calls such as views, ``size``, and the module's functions that write nothing): it runs on
        the host as written, where the region's call stands, and its result is a rows operand.
        Only in the region's first statement, so that nothing the region computes runs before it;
        each one its own operand."""
        if self.depth or not self.first:
            return None
        nodes = self.finder.nodes(node)
        if any(type(n) is ast.Name and n.id in env for n in nodes):
            return None  # reads the region
        if type(node) is ast.Call and self.inference.self_method(node.func) is not None:
            return None
        if any(self.finder.lines.span(n) in self.pending for n in nodes if isinstance(n, (*_OPERATORS, ast.Call, ast.Subscript))):
            return None
        if any(isinstance(n, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)) for n in nodes):
            return None
        if not all(self._writes_nothing(n) for n in nodes if type(n) is ast.Call):
            return None
        if self.inference.kind(node) != TENSOR:
            return None
        func = node.func if type(node) is ast.Call else node.value
        name = func.attr if type(func) is ast.Attribute else func.id if type(func) is ast.Name else "value"
        param = self.program.param(name, ROWS, self._source(node))
        self._replace(node, param.name)
        return self.program.tensor(param)

    def _writes_nothing(self, call: ast.Call, depth: int = 0) -> bool:
        """Whether a call surely writes no tensor: a host-side torch call, a shape query, or a
        function of the module whose body writes nothing and calls only such calls."""
        if self.finder.lines.span(call) in self.finder.host:
            return True
        func = call.func
        if type(func) is ast.Attribute and func.attr in _QUERIES:
            return True
        helper = self.module_function(func) if depth < _INLINE_DEPTH else None
        nodes = list(_own_nodes(helper)) if helper is not None else []
        if helper is None or any(isinstance(n, _WRITES) for n in nodes):
            return False
        if any(isinstance(n, (ast.Attribute, ast.Subscript)) and type(n.ctx) is not ast.Load for n in nodes):
            return False
        return all(self._inner_writes_nothing(n, depth + 1) for n in nodes if type(n) is ast.Call)

    def _inner_writes_nothing(self, call: ast.Call, depth: int) -> bool:
        """A call in a helper: as :meth:`_writes_nothing`, a method or torch function that is not an
        in-place one (``torch.cat``, ``x.neg()``; not ``x.add_(...)`` nor ``out=``), or a builtin."""
        func = call.func
        if any(k.arg == "out" for k in call.keywords):
            return False
        if type(func) is ast.Attribute:
            return not func.attr.endswith("_")
        return type(func) is ast.Name and func.id in _BUILTINS or self._writes_nothing(call, depth)

    # --- expressions -----------------------------------------------------------------------

    def value(self, node: ast.expr, env) -> Operand:
        kind = type(node)
        if kind is ast.Name and node.id in env:
            return env[node.id]
        for leaf in (self._tensor, self._number):
            found = leaf(node, env)
            if found is not None:
                return found
        if kind is ast.BinOp and type(node.op) in _INFIX:
            return self.operator(node, self.elementwise(_INFIX[type(node.op)], [node.left, node.right], env))
        if kind is ast.UnaryOp and type(node.op) is ast.USub:
            return self.operator(node, self.elementwise("neg", [node.operand], env))
        if kind is ast.Compare and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return self.operator(node, self.elementwise(_COMPARE[type(node.ops[0])], [node.left, node.comparators[0]], env))
        if kind is ast.Subscript and _last_dim_slice(node):
            return self.slice(node, env)
        helper = self.module_function(node.func) if kind is ast.Call else None
        if helper is not None:
            saved = self._state()
            try:
                return self.inline(node, helper, env, method=False)
            except Unfusible:
                if self.depth:
                    raise
                self._restore(saved)  # it may still be an operand computed on the host
        if kind in (ast.Call, ast.Subscript):
            opaque = self._opaque(node, env)
            if opaque is not None:
                return opaque
        if kind is ast.Call:
            return self.call(node, env)
        raise Unfusible(f"{ast.dump(node)[:40]} is no op of a row kernel")

    def operator(self, node: ast.expr, result: Operand) -> Operand:
        """An infix operator's result; the operator's site, written in the region, is the region's."""
        attempt = self.pending.get(self.finder.lines.span(node)) if self.depth == 0 else None
        if attempt is not None:
            self.attempts.append(attempt)
        return result

    def entry(self, op: str) -> Entry:
        entry = self.finder.sites.table.entries.get(op)
        if entry is None or not self.finder.sites.options.selects(entry.apis[0], entry):
            raise Unfusible(f"{op} is not part of the run")
        self.entries.append(entry.op)
        return entry

    def elementwise(self, op: str, nodes: list[ast.expr], env, entry: Entry | None = None) -> Operand:
        """An elementwise entry's step on its operands (an infix operator is its entry's)."""
        infix = entry is None
        entry = entry or self.entry(op)
        values = [self.value(n, env) if n is not None else None for n in nodes]
        names = [p.name for p in elementwise.operands(entry)]
        if len(values) != len(names) or None in values:
            raise Unfusible(f"{op} takes {len(names)} operands")
        if not values[0].is_tile:
            if entry.fields.commutative:
                values = values[::-1]
            elif op == "sub" and values[1].is_tile and infix:  # 1 - x as -x + 1: the same single rounding
                negated = self.program.apply("neg", (Apply("result", elementwise.step(self.entry("neg")), ("input",)),), {"input": values[1]})
                self.program.ops.pop()  # one torch op, two steps
                values = [negated, values[0]]
                entry = self.entry("add")
            else:
                raise Unfusible(f"a Python number first in {op}")
        step = elementwise.step(entry)
        label = f"x {_SYMBOL[op]} y" if op in _SYMBOL else op
        return self.program.apply(
            label, (Apply("result", step, tuple(names)),), dict(zip(names, values)),
            fp32=entry.fields.compute == "float32", bools=entry.fields.bool_operands, result=entry.fields.output,
            dtypes=entry.dtypes,
        )

    def slice(self, node: ast.Subscript, env) -> Operand:
        """``x[..., a:b]``: a view of x's tile, its bounds kernel expressions of cols."""
        value = self.value(node.value, env)
        part = node.slice.elts[1]
        start = self.bound(part.lower, env, value.width) if part.lower is not None else "0"
        stop = self.bound(part.upper, env, value.width) if part.upper is not None else value.width
        return self.program.slice(value, start, stop)

    def bound(self, node: ast.expr, env, width: str) -> str:
        """A slice bound as a kernel expression: ints, +, -, *, // and the last dim of region values."""
        literal = _literal(node)
        if type(literal) is int:
            return str(literal) if literal >= 0 else f"{width} - {-literal}"
        if type(node) is ast.BinOp and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv):
            symbol = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//"}[type(node.op)]
            left, right = (self.bound(n, env, width) for n in (node.left, node.right))
            return f"{_group(left)} {symbol} {_group(right)}"
        shaped = node.value.value if type(node) is ast.Subscript and type(node.value) is ast.Attribute and node.value.attr == "shape" else None
        if type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr == "size" and len(node.args) == 1 and not node.keywords:
            shaped, literal = node.func.value, _literal(node.args[0])
        elif shaped is not None:
            literal = _literal(node.slice)
        if type(shaped) is ast.Name and shaped.id in env and env[shaped.id].role == ROWS and literal == -1:
            return env[shaped.id].width
        raise Unfusible("a slice bound of no int or last dim of the region's values")

    def join(self, entry: Entry, bound, env) -> Operand:
        """``torch.cat((a, b, ...), dim=-1)`` of the region's tiles."""
        tensors = bound.get("tensors")
        if set(bound) - {"tensors", "dim"} or _literal(bound.get("dim")) != -1:
            raise Unfusible("a cat fuses along dim=-1")
        if type(tensors) not in (ast.Tuple, ast.List) or any(type(e) is ast.Starred for e in tensors.elts):
            raise Unfusible("a cat of no tuple or list written out")
        return self.program.concat(entry.op, [self.value(e, env) for e in tensors.elts])

    def call(self, node: ast.Call, env) -> Operand:
        helper = self.inference.self_method(node.func)
        if helper is not None:
            return self.inline(node, helper, env)

        attempt = self.pending.get(self.finder.lines.span(node))
        if attempt is None:
            raise Unfusible("a call that is no pending torch op")
        found, entry = attempt.resolved, attempt.resolved.entry
        self.entries.append(entry.op)
        if found.held is not None or found.wrapper:
            raise Unfusible("a module's or a wrapper's call")
        receiver = node.func.value if found.method else None
        try:
            bound = bind(entry.params, ast_args(node), receiver, entry.aliases)
        except BindError as exc:
            raise Unfusible(str(exc)) from None
        for name, reason in entry.reject.items():
            if name in bound and _literal(bound[name]) != entry.param(name).default:
                raise Unfusible(reason)
        result = family(entry.family).fuse(self, entry, bound, env) if entry.family else None
        if result is None:
            raise Unfusible(f"{entry.op} is of the {entry.family} family")
        if found.method is False and self.depth == 0 and node.func is not None:
            self._replace(node.func, found.api)  # the fallback spells the torch function fully
        if self.depth == 0:
            self.attempts.append(attempt)
        self.program.ops[-1] = found.api.removeprefix("torch.")
        return result

    def cast(self, entry: Entry, bound, env) -> Operand:
        value = self.value(bound["input"], env)
        extra = set(bound) - {"input", "dtype", "other", "arg1"}
        if extra:
            raise Unfusible(f"{', '.join(sorted(extra))} of a cast")
        if entry.fields.target:
            dtype = static_dtype(entry.fields.target)
        elif "other" in bound or ("arg1" in bound and self.inference.kind(bound["arg1"]) == TENSOR):
            dtype = self.dtype_of(bound.get("other", bound.get("arg1")), env)
        elif "dtype" in bound or "arg1" in bound:
            dtype = self.dtype_value(bound.get("dtype", bound.get("arg1")), env)
        else:
            raise Unfusible("a cast without a dtype")
        if dtype is None:
            raise Unfusible("a cast to a dtype the kernels do not take")
        return self.program.to(entry.op, value, dtype)

    def dtype_of(self, node: ast.expr, env) -> str:
        """The dtype symbol of a tensor (a region value, or a tensor read for its dtype only)."""
        if type(node) is ast.Name and node.id in env:
            return env[node.id].dtype
        if self._reads_region(node, env) or type(node) not in (ast.Name, ast.Attribute) or self.depth and not _self_rooted(node):
            raise Unfusible("the dtype of an expression")
        if self.inference.kind(node) != TENSOR:
            raise Unfusible("the dtype of no known tensor")
        name = node.attr if type(node) is ast.Attribute else node.id
        return self.program.tensor(self._leaf(node, "like", name)).dtype

    def dtype_value(self, node: ast.expr, env) -> str | None:
        static = self.inference.static_dtype(node)
        if static is None:
            raise Unfusible("no dtype")
        if static != "?":
            return static_dtype(static)
        if type(node) is ast.Attribute and node.attr == "dtype":
            return self.dtype_of(node.value, env)
        if self._reads_region(node, env) or self.depth or type(node) not in (ast.Name, ast.Attribute):
            raise Unfusible("a dtype of the region")
        return self.program.dtype(self._leaf(node, "dtype", node.attr if type(node) is ast.Attribute else node.id))

    def reduce(self, entry: Entry, bound, env) -> Operand:
        if entry.fields.output or entry.pypto not in composite.REDUCERS or {"indices", "p"} & set(entry.fields.args) or set(bound) - {"input", "dim", "keepdim"}:
            raise Unfusible(f"{entry.op} is no plain row reduction")
        if _literal(bound.get("dim")) not in (-1, (-1,), [-1]) or _literal(bound.get("keepdim")) is not True:
            raise Unfusible("a reduction fuses along dim=-1 with keepdim=True")
        steps = reduction.program(entry)
        return self.program.apply(entry.op, steps, {"x_tile": self.value(bound["input"], env)}, fp32=True, dtypes=entry.dtypes)

    def composite(self, entry: Entry, bound, env) -> Operand:
        if entry.fields.channels or entry.fallback or entry.forward:
            raise Unfusible(f"{entry.op} reads one value per channel, or runs torch on values known at run time: its own kernel")
        cast = None  # softmax's dtype= casts the input first, as torch does
        if entry.fields.along:
            if entry.param(entry.fields.along).kinds != ("int",) or _literal(bound.get(entry.fields.along)) != -1:
                raise Unfusible(f"{entry.op} fuses along dim=-1")
            if bound.get("dtype") is not None and _literal(bound["dtype"]) is not None:
                cast = self.dtype_value(bound["dtype"], env)
                if cast is None:
                    raise Unfusible(f"{entry.op} with a dtype= the kernels do not take")
        choice = []
        for name, values in composite._choices(entry).items():
            given = _literal(bound[name]) if name in bound else entry.param(name).default
            if given not in values:
                raise Unfusible(f"{name}={given!r}")
            choice.append((name, given))
        tensors = [p.name for p in composite.operands(entry)]
        absent = frozenset(n for n in tensors if n not in bound)
        if any(entry.param(n).required for n in absent):
            raise Unfusible("a missing operand")
        steps = composite.program(entry, entry.parts, tuple(choice), absent)
        operands = {n: self.value(bound[n], env) for n in tensors if n not in absent}
        if cast is not None:
            operands = {n: self.program.cast(v, cast) for n, v in operands.items()}
        renames = {}
        for name in composite.constants(entry):
            given = bound.get(name)
            number = self._number(given, env) if given is not None else Program.literal(entry.param(name).default)
            if number is None or entry.param(name).default is None and given is None:
                raise Unfusible(f"{name} of {entry.op}")
            renames[name] = number.text
        if any(not v.is_tile for v in operands.values()):
            raise Unfusible(f"a Python number as an operand of {entry.op}")
        return self.program.apply(entry.op, steps, operands, fp32=True, renames=renames, dtypes=entry.dtypes)

    def module_function(self, func: ast.expr) -> ast.FunctionDef | None:
        """The module's function a call names, unless a name of the function written around the
        call binds it (a parameter or a local); one of another part of a module read in parts
        comes with that part's sites and inference (:meth:`context_of`)."""
        found = self.finder.helpers.get(func.id) if type(func) is ast.Name else None
        helper = found() if callable(found) else found
        if helper is None:
            return None
        around = self.inlined[-1] if self.inlined else self.finder.function
        return None if func.id in _locals(around) else helper

    def inline(self, node: ast.Call, helper, env, method: bool = True) -> Operand:
        """A helper of the same class (``method``) or module called with tensors: its statements in
        the caller's kernel."""
        args = helper.args
        if node.keywords or any(type(a) is ast.Starred for a in node.args) or helper.decorator_list:
            raise Unfusible("a helper call with keywords or decorators")
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or len(args.args) != len(node.args) + method:
            raise Unfusible("a helper whose parameters the call does not fill one for one")
        if self.depth >= _INLINE_DEPTH:
            raise Unfusible("helpers nested too deep")
        scope = {a.arg: self.value(v, env) for a, v in zip(args.args[method:], node.args)}
        context = None if method else self.finder.contexts.get(id(helper))
        body = helper.body[1:] if _docstring(helper.body[0]) else helper.body
        if not body or type(body[-1]) is not ast.Return or not all(_candidate(s) for s in body):
            raise Unfusible(f"{helper.name} is no straight line of tensor statements")
        self.depth += 1
        self.inlined.append(helper)
        self.contexts += [context] if context is not None else []
        try:
            for statement in body:
                value = self.value(statement.value, scope)
                if type(statement) is ast.Return:
                    break
                scope[statement.targets[0].id] = value
        finally:
            self.depth -= 1
            self.inlined.pop()
            if context is not None:
                self.contexts.pop()
        if not value.is_tile:
            raise Unfusible(f"{helper.name} returns no tensor")
        if not method:  # the fallback calls it: the wrapper takes it, as a kernels module does not define it
            if helper.name not in self.by_source:
                self.by_source[helper.name] = self.program.callee(helper.name)
        elif "self" not in self.by_source:
            self.by_source["self"] = self.program.param("self", "self", "self")
        return value

    # --- the fallback ----------------------------------------------------------------------

    def expression_source(self, start: int, end: int) -> str:
        """The returned expression as written, leaves spelt as the wrapper's parameters."""
        text = self.finder.text
        pieces, done = [], start
        for (a, b), new in sorted(self.replacements.items()):
            pieces += [text[done:a], new]
            done = b
        pieces.append(text[done:end])
        expression = "".join(pieces)
        return f"return ({expression})\n" if "\n" in expression or "\r" in expression else f"return {expression}\n"

    def fallback_source(self, start: int, end: int, indent: int) -> str:
        """The region's statements as written, leaves spelt as the wrapper's parameters."""
        text = self.finder.text
        begin = text.rfind("\n", 0, start) + 1
        pieces, done = [], begin
        for (a, b), new in sorted(self.replacements.items()):
            pieces += [text[done:a], new]
            done = b
        pieces.append(text[done:end])
        lines = []
        depth = 0
        for line in "".join(pieces).splitlines():
            if depth == 0 and (not line.strip() or line.strip().startswith("#")):
                continue
            lines.append(line[indent:] if depth == 0 and line[:indent].strip() == "" else line)
            depth = max(0, depth + sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}"))
        return "\n".join(lines) + "\n"


def _expressions(statement: ast.stmt):
    """The expressions a statement evaluates itself (not those of its nested blocks or definitions)."""
    if isinstance(statement, (*_FUNCTIONS, ast.ClassDef)):
        return
    for child in children(statement):
        if isinstance(child, ast.expr) and type(getattr(child, "ctx", None)) is not ast.Store:
            yield child
        elif isinstance(child, ast.withitem):
            yield child.context_expr


def _own_nodes(function):
    """The nodes of a function, not those of functions and classes nested in it."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
            stack.extend(children(node))


_QUERIES = frozenset({"size", "dim", "numel", "stride"})  # tensor methods that read shapes only
_BUILTINS = frozenset({"len", "int", "float", "min", "max", "abs", "range", "tuple", "list", "isinstance"})
_WRITES = (ast.Global, ast.Nonlocal, ast.AugAssign, ast.Delete, *_FUNCTIONS, ast.ClassDef)


def _last_dim_slice(node: ast.Subscript) -> bool:
    """``x[..., a:b]`` (no step)."""
    index = node.slice
    return (type(index) is ast.Tuple and len(index.elts) == 2 and type(index.elts[0]) is ast.Constant
            and index.elts[0].value is Ellipsis and type(index.elts[1]) is ast.Slice and index.elts[1].step is None)


def _group(expression: str) -> str:
    return expression if expression.isidentifier() or expression.isdigit() else f"({expression})"


def _literal(node: ast.expr | None, failed=Ellipsis):
    """``ast.literal_eval``'s value of ``node``; ``failed`` where it raises (at once for the nodes it
    surely rejects: names, attributes, subscripts, comparisons, calls other than ``set()``, a
    ``+``/``-`` of no number on the right)."""
    if node is None:
        return None
    kind = type(node)
    if kind in _NO_LITERAL or kind is ast.BinOp and type(node.right) is not ast.Constant or kind is ast.Call and not (
        type(node.func) is ast.Name and node.func.id == "set" and not node.args and not node.keywords
    ):
        return failed
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return failed


def _dotted(node: ast.expr) -> bool:
    while type(node) is ast.Attribute:
        node = node.value
    return type(node) is ast.Name


def _self_rooted(node: ast.expr) -> bool:
    while type(node) is ast.Attribute:
        node = node.value
    return type(node) is ast.Name and node.id == "self"


def _docstring(statement: ast.stmt) -> bool:
    return type(statement) is ast.Expr and type(statement.value) is ast.Constant and isinstance(statement.value.value, str)
