"""Parse a call's text into the libcst tree ``libcst.parse_expression`` gives, reusing parts.

A converted call is parsed on its own (:mod:`transform`), and most such calls are one line of
a callee applied to plain arguments (``self.proj(hidden_states, dim=-1)``), whose parts recur
across calls: the callee, each argument, the spaces around commas. For such a text the tree is
assembled from those parts, each parsed once (calls and dotted names in them assembled alike)
and shared: libcst nodes are immutable, and no rule tells two equal nodes apart by identity.
Where the parts of a text might not parse alone as they do in place, it is parsed whole.
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
# a callee's characters outside brackets, each bracketed group written "()": names and groups
# joined by dots and calls or subscripts (``x[0].float``, ``(a + b).sum``); no operator, space or number
_PRIMARY = re.compile(rf"(?:{_NAME.pattern}|\(\))(?:\.{_NAME.pattern}|\(\))*")
_ARGUMENT = re.compile(rf"(?:(\*\*?)( *)|({_NAME.pattern})( *)=(?!=)( *))?")  # a star, or a keyword and its equal sign
_OPEN, _CLOSE = "([{", ")]}"
_PARENTHESES = (cst.LeftParen(),), (cst.RightParen(),)  # of the text parsed as "(text)"


def parse_call(text: str) -> cst.Call:
    """``libcst.parse_expression(f"({text})")`` for the text of a call, raising what it raises."""
    if not _WHOLE.search(text):
        try:
            call = _call(text, _PARENTHESES)
        except (cst.ParserSyntaxError, RecursionError):  # a part that is no expression: libcst says why in place
            call = None
        if call is not None:
            return call
    return cst.parse_expression(f"({text})")


@functools.lru_cache(maxsize=20_000)
def _expression(text: str) -> cst.BaseExpression:
    """An expression with no space around it, assembled where :func:`_assembled` can, else parsed."""
    assembled = _assembled(text)
    return cst.parse_expression(text) if assembled is None else assembled


@functools.lru_cache(maxsize=20_000)
def _assembled(text: str) -> cst.BaseExpression | None:
    """A name, or a name or call of a :data:`_PRIMARY` (``x.transpose(1, 2).contiguous``), assembled; else None."""
    head, dot, name = text.rpartition(".")
    if _NAME.fullmatch(name) and not keyword.iskeyword(name):  # True, None: parsed as libcst does
        if not dot:
            return cst.Name(name)
        value = _assembled(head)
        return None if value is None else cst.Attribute(value, cst.Name(name))
    return _call(text, ((), ())) if text.endswith(")") else None


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
    return any(keyword.iskeyword(name) for name in re.findall(r"\w+", text))


@functools.lru_cache(maxsize=None)
def _space(spaces: str) -> cst.SimpleWhitespace:
    return cst.SimpleWhitespace(spaces)


@functools.lru_cache(maxsize=None)
def _comma(before: str, after: str) -> cst.Comma:
    return cst.Comma(_space(before), _space(after))
