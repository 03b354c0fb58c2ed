"""A large module, parsed a chunk at a time so that its ``ast`` is never whole in memory.

Python's ``ast`` of a module takes about 2 KB per line, and parsing it briefly twice that: a
200,000-line file would need most of a gigabyte. A module longer than :data:`CHUNK_LINES` is cut
between top-level statements (found by a scan of its text for strings, comments, brackets and
line continuations) into chunks of about that many lines, and each chunk is parsed on its own,
at its own line numbers. If any chunk does not parse, the cut is not trusted: the whole module
is parsed once, as for a small module, and raises the error Python would.
"""

from __future__ import annotations

import ast
import re

from torch2pypto.translator.engine.emit import line_starts

CHUNK_LINES = 5000

_SCAN = re.compile(
    r"""(?P<string>(?:[rRbBuUfF]{1,2})?(?:'''|\"\"\"|'|"))|(?P<comment>\#[^\r\n]*)"""
    r"""|(?P<open>[(\[{])|(?P<close>[)\]}])|(?P<escaped>\\(?:\r\n|\r|\n))|(?P<newline>\r\n|\r|\n)"""
)
_STRING_END = {
    q: re.compile(rf"(?:[^\\{q[0]}]|\\.|{q[0]}(?!{q[1:]}))*{q}" if len(q) == 3 else rf"(?:[^\\{q}\r\n]|\\.)*{q}", re.S)
    for q in ("'''", '"""', "'", '"')
}
_CONTINUES = re.compile(r"(?:else|elif|except|finally)\b|[ \t\f\r\n#]|$", re.M)


def cut(text: str, every: int | None = None) -> list[tuple[int, int, int]] | None:
    """The chunks of a module longer than ``every`` (:data:`CHUNK_LINES`) lines: (first line,
    start, end offset) each; None for a module parsed whole (short, or its text does not scan)."""
    every = every or CHUNK_LINES
    if "\r" not in text and text.count("\n") < every:
        return None  # counted without listing the line starts: fewer than ``every`` line breaks
    starts = line_starts(text)
    if len(starts) <= every:
        return None
    firsts = _boundaries(text, starts, every)
    if firsts is None or len(firsts) < 2:
        return None
    ends = [starts[f - 1] for f in firsts[1:]] + [len(text)]
    return [(first, starts[first - 1], end) for first, end in zip(firsts, ends)]


def tree(text: str, chunk: tuple[int, int, int], path: str) -> ast.Module:
    """The chunk's ``ast``, at the module's line numbers (raises ``SyntaxError``)."""
    first, start, end = chunk
    return ast.parse("\n" * (first - 1) + text[start:end], path)


def _boundaries(text: str, starts: list[int], every: int) -> list[int] | None:
    """First lines (1-based) of chunks of at least ``every`` lines, each starting a top-level
    statement: a line that begins outside any bracket, string or continuation, at column 0, is
    no clause of the statement before (``else:``) and does not follow a decorator. None if the
    scan finds the text malformed (an unclosed string)."""
    cuts = [1]
    depth = 0
    position = 0
    line = 1  # the line the scan is on
    decorated = False  # the last logical line at column 0 was a decorator
    scan = _SCAN.search
    while True:
        match = scan(text, position)
        if match is None:
            return cuts
        kind = match.lastgroup
        if kind == "string":
            quote = match.group().lstrip("rRbBuUfF")
            end = _STRING_END[quote].match(text, match.end())
            if end is None:
                return None
            line += _newlines(text, match.start(), end.end())
            position = end.end()
            continue
        position = match.end()
        if kind == "open":
            depth += 1
        elif kind == "close":
            depth = max(depth - 1, 0)
        elif kind == "escaped":
            line += 1
        elif kind == "newline":
            line += 1
            if depth or line > len(starts):
                continue
            at = starts[line - 1]
            if _CONTINUES.match(text, at):  # indented, blank, a comment or a clause: no new statement
                continue
            if line - cuts[-1] >= every and not decorated:
                cuts.append(line)
            decorated = text.startswith("@", at)


def _newlines(text: str, start: int, end: int) -> int:
    chunk = text[start:end]
    return chunk.count("\n") + chunk.count("\r") - chunk.count("\r\n")
