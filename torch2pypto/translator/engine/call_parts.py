"""Parse a call's or an operator's text into the libcst tree ``libcst.parse_expression`` gives, reusing parts.

A converted call is parsed on its own (:mod:`transform`), and most such calls are a callee
applied to plain arguments (``self.proj(hidden_states, dim=-1)``) or one operator between
primaries (``attn_weights * scaling``), whose parts recur across calls: the callee, each argument
or operand, the spaces and line breaks around commas. For such a text the tree is assembled from
those parts, each parsed once (names, numbers, plain strings, calls, subscripts, attributes,
parenthesized expressions, tuples, lists and operators in them assembled alike) and shared:
libcst nodes are immutable, and no rule tells two equal nodes apart by identity. Where the parts
of a text might not parse alone as they do in place, or where libcst places spaces in ways not
written here, it is parsed whole. The rewritten call, whose arguments are mostly the old call's
parts, is written back by :func:`call_text`: each part as the text it was read from, and libcst's
printer only for the nodes a rule made.
"""

from __future__ import annotations

import functools
import keyword
import re
from typing import Callable

import libcst as cst

# texts parsed whole: whitespace other than spaces and LF line breaks (a CR, a comment, a
# continuation belong to nodes of their own), triple-quoted strings (plain strings' commas and brackets
# :func:`_skeleton` hides, and it tells of prefixed ones), lambdas (whose parameters are
# separated by commas) and walruses (which need parentheses alone)
_WHOLE = re.compile(r"[^\S \n]|[#\\]|'''|\"\"\"|\blambda\b|:=")
_STRING = re.compile(r"\"[^\"]*\"|'[^']*'")
_NAME = re.compile(r"[^\W\d]\w*")
_BLANK = " \n"  # what may stand between tokens (within the parentheses the text is parsed in)
_CONSTANTS = frozenset(("True", "False", "None"))  # keywords that are names to libcst
# a keyword but a constant, or a constant as an attribute's name (``not(x)`` is no call, ``x.None`` no attribute)
_KEYWORD = re.compile(rf"(?<!\w)(?:{'|'.join(sorted(set(keyword.kwlist) - _CONSTANTS))})(?!\w)|\.(?:{'|'.join(sorted(_CONSTANTS))})(?!\w)")
_TOKENS = re.compile(rf"[()\[\]{{}},]|{_STRING.pattern}")  # what _skeleton looks at
# a primary in a skeleton (:func:`_skeleton`): names and bracketed groups joined by dots, calls
# or subscripts (``x[0].float``, ``(a + b).sum``, ``f (x)``); no operator, number or other space
_PRIMARY = re.compile(rf"(?:{_NAME.pattern}|[(\[{{]_*[)\]}}])(?:\.{_NAME.pattern}| *[(\[{{]_*[)\]}}])*")
_ARGUMENT = re.compile(rf"(?:(\*\*?)([ \n]*)|({_NAME.pattern})([ \n]*)=(?!=)([ \n]*))?")  # a star, or a keyword and its equal sign
_NUMBER = re.compile(r"\d+(?:\.\d*)?")
_INTEGER = re.compile(r"[1-9]\d*|0+")  # as Python writes them (no 01)
_SYMBOLS = re.compile(r"[-+*/%@&|^<>=!~]+")  # the characters of operators
_OPEN, _CLOSE = "([{", ")]}"
_UNARY = {"-": cst.Minus, "+": cst.Plus, "~": cst.BitInvert}
_BINARY = {
    "+": cst.Add, "-": cst.Subtract, "*": cst.Multiply, "/": cst.Divide, "//": cst.FloorDivide, "%": cst.Modulo,
    "**": cst.Power, "@": cst.MatrixMultiply, "&": cst.BitAnd, "|": cst.BitOr, "^": cst.BitXor,
    "<<": cst.LeftShift, ">>": cst.RightShift,
}
_COMPARE = {
    "<": cst.LessThan, ">": cst.GreaterThan, "<=": cst.LessThanEqual, ">=": cst.GreaterThanEqual,
    "==": cst.Equal, "!=": cst.NotEqual,
}
_LEFT, _RIGHT = cst.LeftParen(), cst.RightParen()
_PARENTHESES = (_LEFT,), (_RIGHT,)  # of the text parsed as "(text)"


def parse(text: str) -> cst.BaseExpression:
    """``libcst.parse_expression(f"({text})")``, raising what it raises."""
    if text and text[0] not in _BLANK and text[-1] not in _BLANK and not _WHOLE.search(text):
        try:
            node = _build(text, *_PARENTHESES)
        except (cst.ParserSyntaxError, RecursionError):  # a part that is no expression: libcst says why in place
            node = None
        if node is not None:
            return node
    return cst.parse_expression(f"({text})")


def call_text(call: cst.Call, code: Callable[[cst.CSTNode], str]) -> str:
    """``code(call)`` without the call's parentheses, each of its parts that :func:`parse` read
    (most arguments of a rewritten call are the old call's) written as read, not printed again."""
    parts = [_part(call.func, code), _part(call.whitespace_after_func, code), "(", _part(call.whitespace_before_args, code)]
    last = len(call.args) - 1
    for i, arg in enumerate(call.args):  # as libcst's Arg prints itself
        parts += (arg.star, _part(arg.whitespace_after_star, code))
        if arg.keyword is not None:
            parts += (_part(arg.keyword, code), " = " if arg.equal is cst.MaybeSentinel.DEFAULT else _part(arg.equal, code))
        parts.append(_part(arg.value, code))
        if arg.comma is cst.MaybeSentinel.DEFAULT:
            parts.append(", " if i != last else "")
        else:
            parts.append(_part(arg.comma, code))
        parts.append(_part(arg.whitespace_after_arg, code))
    parts.append(")")
    return "".join(parts)


def _part(node: cst.CSTNode, code: Callable[[cst.CSTNode], str]) -> str:
    """``code(node)``: a part :func:`parse` read as read (the line breaks of such parts are LF,
    as parse assembles no others); spaces, commas, equal signs, names and attributes as libcst
    writes them; any other node by ``code``."""
    kind = type(node)
    if kind is cst.SimpleWhitespace:
        return node.value
    token = _SEPARATORS.get(kind)
    if token is not None:
        return _part(node.whitespace_before, code) + token + _part(node.whitespace_after, code)
    known = _SOURCES.get(id(node))
    if known is not None:
        return known
    if kind is cst.Name and not node.lpar:
        return node.value
    if kind is cst.Attribute and not node.lpar:
        return _part(node.value, code) + _part(node.dot, code) + _part(node.attr, code)
    return code(node)


_EXPRESSIONS: dict[str, cst.BaseExpression] = {}  # the parts, by their text
_SOURCES: dict[int, str] = {}  # the text of each of _EXPRESSIONS (which keeps it alive), by identity
_KEPT = 20_000
_SEPARATORS = {cst.Comma: ",", cst.AssignEqual: "=", cst.Dot: "."}  # libcst's nodes of one token between spaces


def _expression(text: str) -> cst.BaseExpression:
    """An expression with no space around it, assembled where :func:`_build` can, else parsed; once per text."""
    node = _EXPRESSIONS.get(text)
    if node is None:
        assembled = _build(text, (), ())
        node = cst.parse_expression(text) if assembled is None else assembled
        if len(_EXPRESSIONS) >= _KEPT:
            _EXPRESSIONS.clear()
            _SOURCES.clear()
        _EXPRESSIONS[text] = node
        _SOURCES[id(node)] = text
    return node


def _build(text: str, lpar: tuple, rpar: tuple) -> cst.BaseExpression | None:
    """The text (no space around it) in parentheses ``lpar`` and ``rpar``, assembled: a name, a
    number, a :data:`_PRIMARY` (a call, a subscript, an attribute, a parenthesized expression,
    a tuple or a list) or an :func:`_operation`; else None."""
    if _NAME.fullmatch(text):
        return cst.Name(text, lpar, rpar) if text in _CONSTANTS or not keyword.iskeyword(text) else None
    if _STRING.fullmatch(text):
        return cst.SimpleString(text, lpar, rpar)
    if _NUMBER.fullmatch(text):
        if "." in text:
            return cst.Float(text, lpar, rpar)
        return cst.Integer(text, lpar, rpar) if _INTEGER.fullmatch(text) else None
    scan = _skeleton(text)
    if scan is None:
        return None
    skeleton, commas = scan
    if not _PRIMARY.fullmatch(skeleton) or _KEYWORD.search(skeleton):
        return _operation(text, skeleton, lpar, rpar)
    if skeleton[-1] not in _CLOSE:  # an attribute: a primary, a dot and a name
        head, _, name = text.rpartition(".")
        return cst.Attribute(_expression(head), cst.Name(name), lpar=lpar, rpar=rpar)
    opened = len(skeleton[:-1].rstrip("_")) - 1
    bracket, func = text[opened], text[:opened].rstrip(" ")
    if _CLOSE[_OPEN.index(bracket)] != text[-1]:
        return None
    if bracket == "(":
        return _call(text, func, opened, commas, lpar, rpar) if func else _parenthesized(text, commas, lpar, rpar)
    if bracket == "[":
        elements = _elements(text, opened, commas)
        if elements is None:
            return None
        if not func:
            items = _items(elements)
            return None if items is None else cst.List(items, lpar=lpar, rpar=rpar)
        elements = [_subscript_element(*e) for e in elements]
        if None in elements:
            return None
        return cst.Subscript(_expression(func), elements, lpar=lpar, rpar=rpar, whitespace_after_value=_space(text[len(func):opened]))
    return None


def _skeleton(text: str) -> tuple[str, tuple[int, ...]] | None:
    """The text with what its brackets and strings hold written "_" (the outermost brackets and
    the quotes kept, so that offsets stay), and the offsets of the commas directly inside its last
    bracketed group; None for brackets that do not balance or a prefixed string."""
    depth, parts, done, commas = 0, [], 0, []
    for found in _TOKENS.finditer(text):
        char, at = found.group(), found.start()
        if len(char) > 1:  # a string
            if at and (text[at - 1].isalnum() or text[at - 1] == "_"):  # prefixed (f"{x}"): no plain string
                return None
            if depth == 0:
                parts.append(text[done:at + 1] + "_" * (len(char) - 2))
                done = found.end() - 1
        elif char == ",":
            if depth == 1:
                commas.append(at)
        elif char in _OPEN:
            if depth == 0:
                parts.append(text[done:at + 1])
                done, commas = at + 1, []
            depth += 1
        else:
            depth -= 1
            if depth < 0:
                return None
            if depth == 0:
                parts.append("_" * (at - done))
                done = at
    if depth:
        return None
    parts.append(text[done:])
    return "".join(parts), tuple(commas)


def _call(text: str, func: str, opened: int, commas: tuple[int, ...], lpar: tuple, rpar: tuple) -> cst.Call | None:
    """The call ``func(...)`` (its arguments opened at ``opened``, separated by ``commas``), or
    None for an empty argument (``f(a,,b)``)."""
    pieces = _pieces(text, opened, commas, len(text) - 1)
    trailing = pieces.pop() if len(pieces) > 1 and not pieces[-1].strip(_BLANK) else None  # after a trailing comma
    leads = [p[:len(p) - len(p.lstrip(_BLANK))] for p in pieces]
    if len(pieces) == 1 and not pieces[0].strip(_BLANK):  # no argument
        args, before = (), pieces[0]
    else:
        args, before = [], leads[0]
        for i, piece in enumerate(pieces):
            value = piece.strip(_BLANK)
            if not value:
                return None
            spaces = piece[len(leads[i]) + len(value):]
            if i + 1 < len(pieces):
                args.append(_argument(value, (spaces, leads[i + 1]), ""))
            elif trailing is not None:
                args.append(_argument(value, (spaces, trailing), ""))
            else:
                args.append(_argument(value, None, spaces))
        args = tuple(args)
    return cst.Call(_expression(func), args, lpar, rpar, _space(text[len(func):opened]), _space(before))


def _parenthesized(text: str, commas: tuple[int, ...], lpar: tuple, rpar: tuple) -> cst.BaseExpression | None:
    """``(value)`` or a tuple ``(a, b)``, within ``lpar`` and ``rpar``."""
    if not commas:
        inner = text[1:-1]
        value = inner.strip(_BLANK)
        if not value:
            return None
        before = inner[:len(inner) - len(inner.lstrip(_BLANK))]
        after = inner[len(before) + len(value):]
        return _build(value, (*lpar, cst.LeftParen(_space(before))), (cst.RightParen(_space(after)), *rpar))
    elements = _elements(text, 0, commas)
    items = None if elements is None else _items(elements)
    return None if items is None else cst.Tuple(items, (*lpar, _LEFT), (_RIGHT, *rpar))


def _items(elements: list[tuple[str, object]]) -> list[cst.Element] | None:
    """A tuple's or a list's elements; None for a starred one."""
    if any(value.startswith("*") for value, _ in elements):
        return None
    return [cst.Element(_expression(value), comma) for value, comma in elements]


def _elements(text: str, opened: int, commas: tuple[int, ...]) -> list[tuple[str, object]] | None:
    """The values between the bracket at ``opened`` and the last one, split at ``commas``, each
    with its comma: only where they are written ``a, b``, ``a,b`` or ``a,`` (libcst places other
    spaces unlike for calls); None else."""
    pieces = _pieces(text, opened, commas, len(text) - 1)
    last = cst.MaybeSentinel.DEFAULT
    if len(pieces) > 1 and not pieces[-1]:  # a trailing comma
        pieces.pop()
        last = _comma("", "")
    leads = ["", *(p[:1] if p[:1] == " " else "" for p in pieces[1:])]
    values = [p[len(lead):] for p, lead in zip(pieces, leads)]
    if any(not v or v[0] in _BLANK or v[-1] in _BLANK for v in values):
        return None
    return [(v, _comma("", leads[i + 1]) if i + 1 < len(values) else last) for i, v in enumerate(values)]


def _pieces(text: str, opened: int, cuts, closed: int) -> list[str]:
    """The texts between the offsets ``opened``, each of ``cuts`` and ``closed`` of ``text``."""
    bounds = [opened, *cuts, closed]
    return [text[a + 1:b] for a, b in zip(bounds, bounds[1:])]


def _subscript_element(value: str, comma) -> cst.SubscriptElement | None:
    """An index or a slice without spaces around its colons (``1::2``), with its comma; None else."""
    scan = None if value.startswith("*") else _skeleton(value)
    if scan is None:
        return None
    if ":" not in scan[0]:
        return cst.SubscriptElement(cst.Index(_expression(value)), comma)
    colons = [i for i, char in enumerate(scan[0]) if char == ":"]
    if len(colons) > 2:
        return None
    parts = _pieces(value, -1, colons, len(value))
    if any(p != p.strip(_BLANK) for p in parts):
        return None
    lower, upper, step = [_expression(p) if p else None for p in parts] + [None] * (3 - len(parts))
    second = cst.Colon() if len(colons) == 2 else cst.MaybeSentinel.DEFAULT
    return cst.SubscriptElement(cst.Slice(lower, upper, step, cst.Colon(), second), comma)


def _operation(text: str, skeleton: str, lpar: tuple, rpar: tuple) -> cst.BaseExpression | None:
    """The text as one unary, binary or comparison operator on operands that are numbers, strings
    or :data:`_PRIMARY` s (``-x``, ``a * b``, ``x.sum(-1) > 0``, ``a == -1``: no precedence to
    settle), assembled; else None."""
    found = list(_SYMBOLS.finditer(skeleton))
    signed = len(found) == 2 and found[1].group() in _UNARY and not skeleton[found[0].end():found[1].start()].strip(_BLANK)
    if len(found) != 1 and not signed:  # not one operator, nor one and a unary one on its right (a * -1)
        return None
    symbol, (start, end) = found[0].group(), found[0].span()
    left, right = text[:start].rstrip(_BLANK), text[end:].lstrip(_BLANK)
    if not _operand(skeleton[found[-1].end():].lstrip(_BLANK)) or signed and not left:
        return None
    after = _space(text[end:len(text) - len(right)])
    if not left:
        kind = _UNARY.get(symbol)
        return None if kind is None else cst.UnaryOperation(kind(whitespace_after=after), _expression(right), lpar, rpar)
    if not _operand(skeleton[:len(left)]):
        return None
    spaces = {"whitespace_before": _space(text[len(left):start]), "whitespace_after": after}
    if symbol in _BINARY:
        return cst.BinaryOperation(_expression(left), _BINARY[symbol](**spaces), _expression(right), lpar, rpar)
    if symbol in _COMPARE:
        return cst.Comparison(_expression(left), (cst.ComparisonTarget(_COMPARE[symbol](**spaces), _expression(right)),), lpar, rpar)
    return None


def _operand(skeleton: str) -> bool:
    """Whether an operand's skeleton is a number, a string or a :data:`_PRIMARY`."""
    return bool(_NUMBER.fullmatch(skeleton) or _STRING.fullmatch(skeleton) or _PRIMARY.fullmatch(skeleton) and not _KEYWORD.search(skeleton))


@functools.lru_cache(maxsize=20_000)
def _argument(text: str, comma: tuple[str, str] | None, after: str) -> cst.Arg:
    """An argument ``value``, ``*value`` or ``name=value``, with its comma (the spaces before and
    after it) or none, and the spaces after it."""
    match = _ARGUMENT.match(text)
    star, after_star, name, before_equal, after_equal = match.groups()
    value = _expression(text[match.end():])
    spaces = {"comma": cst.MaybeSentinel.DEFAULT if comma is None else _comma(*comma), "whitespace_after_arg": _space(after)}
    if star:
        return cst.Arg(value, star=star, whitespace_after_star=_space(after_star), **spaces)
    if name:
        return cst.Arg(value, keyword=cst.Name(name), equal=cst.AssignEqual(_space(before_equal), _space(after_equal)), **spaces)
    return cst.Arg(value, **spaces)


@functools.lru_cache(maxsize=1024)
def _space(spaces: str) -> cst.BaseParenthesizableWhitespace:
    """Spaces, or spaces and line breaks as libcst parses them within parentheses."""
    if "\n" not in spaces:
        return cst.SimpleWhitespace(spaces)
    first, *empty, last = spaces.split("\n")
    lines = tuple(cst.EmptyLine(whitespace=cst.SimpleWhitespace(line)) for line in empty)
    return cst.ParenthesizedWhitespace(cst.TrailingWhitespace(cst.SimpleWhitespace(first)), lines, True, cst.SimpleWhitespace(last))


@functools.lru_cache(maxsize=1024)
def _comma(before: str, after: str) -> cst.Comma:
    return cst.Comma(_space(before), _space(after))
