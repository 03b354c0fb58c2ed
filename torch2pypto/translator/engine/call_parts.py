"""Parse a call's or an operator's text into the libcst tree ``libcst.parse_expression`` gives, reusing parts.

A converted call is parsed on its own (:mod:`transform`), and most such calls are one line of
a callee applied to plain arguments (``self.proj(hidden_states, dim=-1)``) or one operator
between primaries (``attn_weights * scaling``), whose parts recur across calls: the callee, each
argument or operand, the spaces around commas. For such a text the tree is assembled from those
parts, each parsed once (calls, operators and dotted names in them assembled alike) and shared:
libcst nodes are immutable, and no rule tells two equal nodes apart by identity. Where the
parts of a text might not parse alone as they do in place, it is parsed whole.
"""

from __future__ import annotations

import functools
import keyword
import re

import libcst as cst

# texts parsed whole: whitespace other than spaces (a line break, a comment, a continuation
# belong to nodes of their own), strings (which may hold commas and brackets), lambdas (whose
# parameters are separated by commas) and walruses (which need parentheses alone)
_WHOLE = re.compile(r"[^\S ]|[#\\'\"]|lambda|:=")
_NAME = re.compile(r"[^\W\d]\w*")
_WORD = re.compile(r"\w+")
# a callee's characters outside brackets, each bracketed group written "()": names and groups
# joined by dots and calls or subscripts (``x[0].float``, ``(a + b).sum``); no operator, space or number
_PRIMARY = re.compile(rf"(?:{_NAME.pattern}|\(\))(?:\.{_NAME.pattern}|\(\))*")
_ARGUMENT = re.compile(rf"(?:(\*\*?)( *)|({_NAME.pattern})( *)=(?!=)( *))?")  # a star, or a keyword and its equal sign
_NUMBER = re.compile(r"\d+(?:\.\d*)?")
_OPEN, _CLOSE = "([{", ")]}"
_SYMBOLS = frozenset("+-*/%@&|^<>=!~")  # the characters of operators
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
_PARENTHESES = (cst.LeftParen(),), (cst.RightParen(),)  # of the text parsed as "(text)"


def parse(text: str) -> cst.BaseExpression:
    """``libcst.parse_expression(f"({text})")``, raising what it raises."""
    if not _WHOLE.search(text):
        try:
            node = _call(text, _PARENTHESES) if text.endswith(")") else None
            node = _operation(text, _PARENTHESES) if node is None else node
        except (cst.ParserSyntaxError, RecursionError):  # a part that is no expression: libcst says why in place
            node = None
        if node is not None:
            return node
    return cst.parse_expression(f"({text})")


@functools.lru_cache(maxsize=20_000)
def _expression(text: str) -> cst.BaseExpression:
    """An expression with no space around it, assembled where :func:`_assembled` can, else parsed."""
    assembled = _assembled(text)
    return cst.parse_expression(text) if assembled is None else assembled


@functools.lru_cache(maxsize=20_000)
def _assembled(text: str) -> cst.BaseExpression | None:
    """A name, a name or call of a :data:`_PRIMARY` (``x.transpose(1, 2).contiguous``) or an
    :func:`_operation`, assembled; else None."""
    head, dot, name = text.rpartition(".")
    if _NAME.fullmatch(name) and not keyword.iskeyword(name):  # True, None: parsed as libcst does
        if not dot:
            return cst.Name(name)
        value = _assembled(head)
        if isinstance(value, (cst.Name, cst.Attribute, cst.Call)):  # a primary's attribute, not an operand's (x * y.z)
            return cst.Attribute(value, cst.Name(name))
    call = _call(text, ((), ())) if text.endswith(")") else None
    return _operation(text, ((), ())) if call is None else call


def _call(text: str, parentheses) -> cst.Call | None:
    """The text as a call assembled from its parts, or None for a text that is no call of a
    callee :data:`_PRIMARY` spells or that has an empty argument (``f(a,,b)``)."""
    parts = _split(text)
    if parts is None:
        return None
    opened, commas = parts
    func = text[:opened].rstrip(" ")
    bounds = [opened, *commas, len(text) - 1]
    pieces = [text[a + 1:b] for a, b in zip(bounds, bounds[1:])]
    trailing = pieces.pop() if len(pieces) > 1 and not pieces[-1].strip(" ") else None  # after a trailing comma
    leads = [len(p) - len(p.lstrip(" ")) for p in pieces]
    if len(pieces) == 1 and not pieces[0].strip(" "):  # no argument
        args, before = (), pieces[0]
    else:
        args, before = [], " " * leads[0]
        for i, piece in enumerate(pieces):
            value = piece.strip(" ")
            if not value:
                return None
            spaces = piece[leads[i] + len(value):]
            if i + 1 < len(pieces):
                comma, after = _comma(spaces, " " * leads[i + 1]), _space("")
            elif trailing is not None:
                comma, after = _comma(spaces, trailing), _space("")
            else:
                comma, after = cst.MaybeSentinel.DEFAULT, _space(spaces)
            args.append(_argument(value).with_changes(comma=comma, whitespace_after_arg=after))
        args = tuple(args)
    lpar, rpar = parentheses
    return cst.Call(_expression(func), args, lpar, rpar, _space(text[len(func):opened]), _space(before))


def _split(text: str) -> tuple[int, list[int]] | None:
    """The offsets of the parenthesis opening a call's arguments and of the commas between them,
    or None for a text that is not :data:`_PRIMARY` followed by its arguments."""
    depth, opened, commas, outside = 0, -1, [], []
    for i, char in enumerate(text):
        if char in _OPEN:
            if depth == 0:
                opened, commas = i, []
                outside.append("()")
            depth += 1
        elif char in _CLOSE:
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0:
            outside.append(char)
        elif char == "," and depth == 1:
            commas.append(i)
    if depth or not text.endswith(")") or text[opened] != "(":
        return None
    callee = "".join(outside[:-1]).rstrip(" ")
    return (opened, commas) if _PRIMARY.fullmatch(callee) and not _keywords(callee) else None


def _operation(text: str, parentheses) -> cst.BaseExpression | None:
    """The text as one unary, binary or comparison operator on operands that are numbers or
    :data:`_PRIMARY` s (``-x``, ``a * b``, ``x.sum(-1) > 0``: no precedence to settle), assembled; else None."""
    depth, symbols = 0, []
    for i, char in enumerate(text):
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
        elif depth == 0 and char in _SYMBOLS:
            symbols.append(i)
    if depth or not symbols or symbols[-1] - symbols[0] != len(symbols) - 1:  # not one operator
        return None
    start, end = symbols[0], symbols[-1] + 1
    symbol, left, right = text[start:end], text[:start].rstrip(" "), text[end:].lstrip(" ")
    if not _operand(right):
        return None
    after = _space(text[end:len(text) - len(right)])
    lpar, rpar = parentheses
    if not left:
        kind = _UNARY.get(symbol)
        return None if kind is None else cst.UnaryOperation(kind(whitespace_after=after), _expression(right), lpar, rpar)
    if not _operand(left):
        return None
    spaces = {"whitespace_before": _space(text[len(left):start]), "whitespace_after": after}
    if symbol in _BINARY:
        return cst.BinaryOperation(_expression(left), _BINARY[symbol](**spaces), _expression(right), lpar, rpar)
    if symbol in _COMPARE:
        return cst.Comparison(_expression(left), (cst.ComparisonTarget(_COMPARE[symbol](**spaces), _expression(right)),), lpar, rpar)
    return None


def _operand(text: str) -> bool:
    """Whether the text is a number or a :data:`_PRIMARY` (its bracketed groups written "()")."""
    if _NUMBER.fullmatch(text):
        return True
    depth, outside = 0, []
    for char in text:
        if char in _OPEN:
            if depth == 0:
                outside.append("()")
            depth += 1
        elif char in _CLOSE:
            depth -= 1
        elif depth == 0:
            outside.append(char)
    skeleton = "".join(outside)
    return bool(_PRIMARY.fullmatch(skeleton)) and not _keywords(skeleton)


@functools.lru_cache(maxsize=20_000)
def _argument(text: str) -> cst.Arg:
    """An argument with no comma and no space after it: ``value``, ``*value``, ``name=value``."""
    match = _ARGUMENT.match(text)
    star, after_star, name, before_equal, after_equal = match.groups()
    value = _expression(text[match.end():])
    if star:
        return cst.Arg(value, star=star, whitespace_after_star=_space(after_star))
    if name:
        return cst.Arg(value, keyword=cst.Name(name), equal=cst.AssignEqual(_space(before_equal), _space(after_equal)))
    return cst.Arg(value)


def _keywords(text: str) -> bool:
    """Whether a name in the text is a keyword (``not(x)`` is no call, ``True`` parsed as libcst does)."""
    return any(keyword.iskeyword(name) for name in _WORD.findall(text))


@functools.lru_cache(maxsize=1024)
def _space(spaces: str) -> cst.SimpleWhitespace:
    return cst.SimpleWhitespace(spaces)


@functools.lru_cache(maxsize=1024)
def _comma(before: str, after: str) -> cst.Comma:
    return cst.Comma(_space(before), _space(after))
