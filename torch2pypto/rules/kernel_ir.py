"""The kernel IR: the statements and expressions generated kernels are built of, and their printer.

Templates (:mod:`templates`) build a kernel factory as a tree of these nodes; :func:`source` prints
it, so the layout of every generated kernel (indentation, commas, comments, the factory's frame)
is spelled once, here. Expressions are text but for calls and list displays, which the printer
spells; an expression's text may break lines, whose continuations the printer indents with its
statement. ``Raw`` carries statements a fused region's tile program gives as text (its ops'
statements and setup, :mod:`tile_program`).
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Sequence, Union

INDENT = " " * 4


@dataclasses.dataclass(frozen=True)
class Call:
    """``func(args, keyword=value, ...)``; ``lines``: each argument after the first on a line of
    its own, aligned with the first."""

    func: str
    args: tuple[Expr, ...] = ()
    keywords: tuple[tuple[str, Expr], ...] = ()
    lines: bool = False


@dataclasses.dataclass(frozen=True)
class List:
    """A list display ``[items]``."""

    items: tuple[Expr, ...]


Expr = Union[str, Call, List]


def call(func: str, *args: Expr, **keywords: Expr) -> Call:
    """``func(*args, **keywords)``, keywords in the order given."""
    return Call(func, args, tuple(keywords.items()))


def pypto(op: str, *args: Expr, **keywords: Expr) -> Call:
    """``pypto.<op>(*args, **keywords)``."""
    return call(f"pypto.{op}", *args, **keywords)


def items(*values: Expr) -> List:
    """The list display of ``values``."""
    return List(values)


@dataclasses.dataclass(frozen=True)
class Assign:
    """``target = value``; ``target`` may be a tuple's names (``"a, b"``)."""

    target: str
    value: Expr
    comment: str = ""


@dataclasses.dataclass(frozen=True)
class Do:
    """An expression statement: a call for its effect (``pypto.assemble(...)``)."""

    value: Expr
    comment: str = ""


@dataclasses.dataclass(frozen=True)
class Comment:
    """A comment line."""

    text: str


@dataclasses.dataclass(frozen=True)
class Raw:
    """Statements given as text, one ``\\n``-terminated line each, unindented."""

    text: str


@dataclasses.dataclass(frozen=True)
class If:
    """``if test:`` ``body`` [``else:`` ``orelse``], ``comment`` on the if's line, ``else_comment`` on the else's."""

    test: Expr
    body: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()
    comment: str = ""
    else_comment: str = ""


@dataclasses.dataclass(frozen=True)
class For:
    """``for target in iterable:`` ``body`` (a ``pypto.loop`` or a Python loop unrolled when the kernel is parsed)."""

    target: str
    iterable: Expr
    body: tuple[Stmt, ...]
    comment: str = ""


Stmt = Union[Assign, Do, Comment, Raw, If, For]


def when(test: Expr, *body: Stmt, comment: str = "") -> If:
    """``if test:`` ``body``, without an else."""
    return If(test, body, comment=comment)


def loop(target: str, iterable: Expr, *body: Stmt, comment: str = "") -> For:
    """``for target in iterable:`` ``body``."""
    return For(target, iterable, body, comment)


@dataclasses.dataclass(frozen=True)
class Param:
    """A kernel parameter ``name: annotation`` (a ``pypto.Tensor``)."""

    name: str
    annotation: Expr


@dataclasses.dataclass(frozen=True)
class Factory:
    """A ``functools.cache``'d factory ``name(params)`` of one jit ``kernel``.

    ``prelude``: the factory's statements before the kernel; ``jit``: the kernel's jit decorator
    (an expression) and ``jit_comment`` its comment; ``kernel_params`` and ``body``: the kernel's
    parameters and statements.
    """

    name: str
    params: tuple[str, ...]
    doc: str
    prelude: tuple[Stmt, ...]
    jit: Expr
    kernel_params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    jit_comment: str = ""


def expression(node: Expr, column: int = 0) -> str:
    """The text of an expression starting at ``column`` of its statement (where a call's
    ``lines`` align)."""
    if isinstance(node, str):
        return node
    if isinstance(node, List):
        return f"[{_arguments([(None, v) for v in node.items], column + 1, False)}]"
    pairs = [*((None, v) for v in node.args), *node.keywords]
    return f"{node.func}({_arguments(pairs, column + len(node.func) + 1, node.lines)})"


def _arguments(pairs: Sequence[tuple[str | None, Expr]], column: int, lines: bool) -> str:
    """Arguments (``keyword=``value or value) from ``column``: after each other, or one a line."""
    texts: list[str] = []
    at = column  # where the next argument starts
    for keyword, value in pairs:
        prefix = f"{keyword}=" if keyword else ""
        texts.append(prefix + expression(value, at + len(prefix)))
        at = column if lines else at + len(texts[-1]) + 2
    return (",\n" + " " * column if lines else ", ").join(texts)


def _line(pad: str, text: str, comment: str) -> str:
    """A statement's lines: ``text`` indented by ``pad`` (its continuations too), ``comment`` after it."""
    text = pad + text.replace("\n", "\n" + pad)
    return f"{text}  # {comment}\n" if comment else f"{text}\n"


def source(nodes: Stmt | Factory | Sequence[Stmt], depth: int = 0) -> str:
    """The source of a statement, a sequence of them or a factory, indented ``depth`` levels."""
    if isinstance(nodes, (list, tuple)):
        return "".join(source(node, depth) for node in nodes)
    node, pad = nodes, INDENT * depth
    if isinstance(node, Assign):
        return _line(pad, f"{node.target} = {expression(node.value, len(node.target) + 3)}", node.comment)
    if isinstance(node, Do):
        return _line(pad, expression(node.value), node.comment)
    if isinstance(node, Comment):
        return f"{pad}# {node.text}\n"
    if isinstance(node, Raw):
        return textwrap.indent(node.text, pad)
    if isinstance(node, If):
        text = _line(pad, f"if {expression(node.test, 3)}:", node.comment) + source(node.body, depth + 1)
        return text + (_line(pad, "else:", node.else_comment) + source(node.orelse, depth + 1) if node.orelse else "")
    if isinstance(node, For):
        iterable = expression(node.iterable, len(node.target) + 8)
        return _line(pad, f"for {node.target} in {iterable}:", node.comment) + source(node.body, depth + 1)
    if isinstance(node, Factory):
        return _factory(node, depth)
    raise TypeError(f"not a kernel IR node: {node!r}")


def _factory(node: Factory, depth: int) -> str:
    pad, inner = INDENT * depth, INDENT * (depth + 1)
    params = "".join(f"{INDENT * (depth + 2)}{p.name}: {expression(p.annotation)},\n" for p in node.kernel_params)
    return (
        f"{pad}@functools.cache\n{pad}def {node.name}({', '.join(node.params)}):\n"
        f'{inner}"""{node.doc}"""\n'
        + source(node.prelude, depth + 1)
        + "\n" + _line(inner, f"@{expression(node.jit, 1)}", node.jit_comment)
        + f"{inner}@_annotated(locals())\n{inner}def kernel(\n{params}{inner}):\n"
        + source(node.body, depth + 2)
        + f"\n{inner}return kernel\n"
    )
