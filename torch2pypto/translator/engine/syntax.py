"""The Python syntax a region is read from: the statements a region takes (``name = <expr>``,
``return <expr>``) and the names they bind, a function's own nodes and locals, literals, and the
shapes of expressions lowering recognises (a ``self`` attribute, a last-dim slice)."""

from __future__ import annotations

import ast
import functools
import io
import tokenize

from torch2pypto.translator.engine.scopes import children

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
STATEMENT_LISTS = ("body", "handlers", "orelse", "finalbody", "cases")  # in the order of each node's fields
# the nodes holding statement lists (handlers and cases are held too; the others hold none)
HOLDERS = frozenset(t for t in (*ast.stmt.__subclasses__(), ast.Module, ast.ExceptHandler, ast.match_case) if {*STATEMENT_LISTS} & {*t._fields})
OPERATORS = (ast.BinOp, ast.UnaryOp, ast.Compare)
_NO_LITERAL = frozenset({ast.Name, ast.Attribute, ast.Subscript, ast.Compare, ast.BoolOp, ast.IfExp, ast.Lambda, ast.NamedExpr, ast.Starred})


@functools.lru_cache(maxsize=256)
def locals_of(function: ast.FunctionDef) -> frozenset[str]:
    """The names a function binds: its parameters and the names it stores."""
    arguments = function.args
    names = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg) if a}
    return frozenset(names | {n.id for n in own_nodes(function) if type(n) is ast.Name and type(n.ctx) is not ast.Load})


def held(node: ast.AST):
    """The statements, handlers and cases in ``node``'s statement lists, in the order of its fields
    (none in a node of :data:`HOLDERS`' complement: an expression, a simple statement)."""
    if type(node) in HOLDERS:
        for field in STATEMENT_LISTS:
            yield from getattr(node, field, ())


def candidate(statement: ast.stmt) -> bool:
    """``name = <expr>`` (``residual = hidden_states`` too: a second name of a region's value),
    ``a, b = <expr>, <expr>`` (phi3's ``q_rot, q_pass = q[..., :n], q[..., n:]``: two bindings) or
    ``return <expr>``."""
    if type(statement) is ast.Assign:
        return len(statement.targets) == 1 and bool(bindings(statement))
    return type(statement) is ast.Return and statement.value is not None and type(statement.value) is not ast.Name


def bindings(statement: ast.Assign) -> list[tuple[str, ast.expr]]:
    """The names an assignment ``name = v`` or ``a, b = v, w`` binds and their expressions (all
    evaluated before any is bound, as Python does); none for another assignment."""
    target, value = statement.targets[0], statement.value
    if type(target) is ast.Name:
        return [(target.id, value)]
    if type(target) is ast.Tuple and type(value) is ast.Tuple and len(target.elts) == len(value.elts) and target.elts \
            and all(type(t) is ast.Name for t in target.elts) and len({t.id for t in target.elts}) == len(target.elts) \
            and not any(type(v) is ast.Starred for v in value.elts):
        return [(t.id, v) for t, v in zip(target.elts, value.elts)]
    return []


def assigned_names(statements) -> set[str]:
    """The names assignments among ``statements`` bind."""
    return {name for s in statements if type(s) is ast.Assign for name, _ in bindings(s)}


@functools.lru_cache(maxsize=256)
def own_nodes(function) -> tuple[ast.AST, ...]:
    """The nodes of a function, not those of functions and classes nested in it (walked once: its
    locals, its regions' checks and the inlining of its callers read them)."""
    nodes, stack = [], list(function.body)
    while stack:
        node = stack.pop()
        nodes.append(node)
        if not isinstance(node, (*FUNCTIONS, ast.ClassDef, ast.Lambda)):
            stack.extend(children(node))
    return tuple(nodes)



def last_dim_slice(node: ast.Subscript) -> bool:
    """``x[..., a:b]`` (no step)."""
    index = node.slice
    return (type(index) is ast.Tuple and len(index.elts) == 2 and type(index.elts[0]) is ast.Constant
            and index.elts[0].value is Ellipsis and type(index.elts[1]) is ast.Slice and index.elts[1].step is None)


def literal_of(node: ast.expr | None, failed=Ellipsis):
    """``ast.literal_eval``'s value of ``node``; ``failed`` where it raises (at once where the
    expression holds a node it surely rejects: names, attributes, subscripts, comparisons, calls
    other than ``set()`` (its name aside), a ``+``/``-`` of no number on the right; its raising costs more)."""
    if node is None:
        return None
    stack = [node]  # depth first, left at the first such node: a value's lowering asks of each of its parts
    while stack:
        n = stack.pop()
        kind = type(n)
        if kind in _NO_LITERAL and not (kind is ast.Name and n.id == "set") or kind is ast.BinOp and type(n.right) is not ast.Constant or kind is ast.Call and not (
            type(n.func) is ast.Name and n.func.id == "set" and not n.args and not n.keywords
        ):
            return failed
        stack += children(n)
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return failed


def dotted(node: ast.expr) -> bool:
    """A plain dotted name (``a``, ``a.b.c``), with no call or subscript in it."""
    while type(node) is ast.Attribute:
        node = node.value
    return type(node) is ast.Name


def self_rooted(node: ast.expr) -> bool:
    while type(node) is ast.Attribute:
        node = node.value
    return type(node) is ast.Name and node.id == "self"


def is_docstring(statement: ast.stmt) -> bool:
    return type(statement) is ast.Expr and type(statement.value) is ast.Constant and isinstance(statement.value.value, str)


def comments(segment: str) -> list[str]:
    """The comments inside a region's text, which stay above its call."""
    if "#" not in segment:
        return []  # a comment starts with one: the text need not be tokenized
    try:
        return [t.string for t in tokenize.generate_tokens(io.StringIO(segment).readline) if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return [line.strip() for line in segment.splitlines() if line.strip().startswith("#")]


def comments_above(segment: str, indent: str) -> str:
    """The comments inside a region's text, each ended by the text's line ending and ``indent``:
    the lines that stay above the call replacing the region."""
    newline = "\r\n" if "\r\n" in segment else "\r" if "\r" in segment else "\n"
    return "".join(f"{c}{newline}{indent}" for c in comments(segment))
