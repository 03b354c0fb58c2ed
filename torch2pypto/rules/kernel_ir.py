"""The kernel IR: the statements and expressions generated kernels are built of, and their printer.

Templates (:mod:`templates`) build a kernel factory as a tree of these nodes; :func:`source` prints
it, so the layout of every generated kernel (indentation, commas, comments, the factory's frame)
is spelled once, here. Expressions are text but for calls and list displays, which the printer
spells; ``Raw`` carries statements still written as text (a caller's activation, the blocked
templates) until they move onto the IR.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Sequence, Union

INDENT = " " * 4


@dataclasses.dataclass(frozen=True)
class Call:
    """``func(args, keyword=value, ...)``."""

    func: str
    args: tuple[Expr, ...] = ()
    keywords: tuple[tuple[str, Expr], ...] = ()


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
    """``if test:`` ``body`` [``else:`` ``orelse``]."""

    test: Expr
    body: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()
    comment: str = ""


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
    kernel_params: tuple[Param | Raw, ...]
    body: tuple[Stmt, ...]
    jit_comment: str = ""


def expression(node: Expr) -> str:
    """The text of an expression."""
    if isinstance(node, str):
        return node
    if isinstance(node, List):
        return f"[{', '.join(map(expression, node.items))}]"
    args = [*map(expression, node.args), *(f"{k}={expression(v)}" for k, v in node.keywords)]
    return f"{node.func}({', '.join(args)})"


def _line(text: str, comment: str) -> str:
    return f"{text}  # {comment}\n" if comment else f"{text}\n"


def source(nodes: Stmt | Factory | Sequence[Stmt], depth: int = 0) -> str:
    """The source of a statement, a sequence of them or a factory, indented ``depth`` levels."""
    if isinstance(nodes, (list, tuple)):
        return "".join(source(node, depth) for node in nodes)
    node, pad = nodes, INDENT * depth
    if isinstance(node, Assign):
        return pad + _line(f"{node.target} = {expression(node.value)}", node.comment)
    if isinstance(node, Do):
        return pad + _line(expression(node.value), node.comment)
    if isinstance(node, Comment):
        return f"{pad}# {node.text}\n"
    if isinstance(node, Raw):
        return textwrap.indent(node.text, pad)
    if isinstance(node, If):
        text = pad + _line(f"if {expression(node.test)}:", node.comment) + source(node.body, depth + 1)
        return text + (f"{pad}else:\n" + source(node.orelse, depth + 1) if node.orelse else "")
    if isinstance(node, For):
        return pad + _line(f"for {node.target} in {expression(node.iterable)}:", node.comment) + source(node.body, depth + 1)
    if isinstance(node, Factory):
        return _factory(node, depth)
    raise TypeError(f"not a kernel IR node: {node!r}")


def _factory(node: Factory, depth: int) -> str:
    pad, inner = INDENT * depth, INDENT * (depth + 1)
    params = "".join(
        source(p, depth + 2) if isinstance(p, Raw) else f"{INDENT * (depth + 2)}{p.name}: {expression(p.annotation)},\n"
        for p in node.kernel_params
    )
    return (
        f"{pad}@functools.cache\n{pad}def {node.name}({', '.join(node.params)}):\n"
        f'{inner}"""{node.doc}"""\n'
        + source(node.prelude, depth + 1)
        + "\n" + inner + _line(f"@{expression(node.jit)}", node.jit_comment)
        + f"{inner}@_annotated(locals())\n{inner}def kernel(\n{params}{inner}):\n"
        + source(node.body, depth + 2)
        + f"\n{inner}return kernel\n"
    )
