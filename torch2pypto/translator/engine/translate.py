"""Translate one module's source: find torch calls, rewrite the converted ones, add their kernels."""

from __future__ import annotations

import ast
import dataclasses
import re
import tokenize

import libcst as cst

from torch2pypto.mapping import Table, load_table
from torch2pypto.rules.codegen import Definition
from torch2pypto.translator.engine import emit
from torch2pypto.translator.engine.report import CONVERTED, UNSUPPORTED, Record
from torch2pypto.translator.engine.scopes import ModuleIndex
from torch2pypto.translator.engine.transform import Attempt, Conversion, Options, Sites, Span, rewrite_segment

_LINE_BYTES = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


@dataclasses.dataclass(frozen=True)
class Translation:
    """A module before and after translation, with one record per torch call site.

    ``definitions`` are the kernels and wrappers the converted calls use, dependencies first
    (with ``kernels_module``, what that module must define).
    """

    path: str
    source: str
    code: str
    encoding: str
    records: tuple[Record, ...]
    conversions: tuple[Conversion, ...] = ()
    definitions: tuple[Definition, ...] = ()

    @property
    def changed(self) -> bool:
        return self.code != self.source


def translate_source(
    source: str | bytes,
    path: str = "<string>",
    options: Options = Options(),
    table: Table | None = None,
    kernels_module: str | None = None,
) -> Translation:
    """Translate module source; bytes are decoded as Python would (PEP 263, BOM).

    Kernels go into a marked section of the module itself, or, given ``kernels_module`` (an
    import target such as ``._pypto_kernels``), are imported from there and listed in
    ``Translation.definitions``. Raises ``SyntaxError`` on invalid Python and
    ``UnicodeDecodeError``/``LookupError`` on undecodable bytes.
    """
    text, encoding = decode(source)
    table = table or load_table()
    try:
        tree = ast.parse(text, path)
    except ValueError as exc:  # null bytes
        raise SyntaxError(str(exc)) from None
    except (RecursionError, MemoryError):  # CPython cannot compile it either
        raise SyntaxError("nested too deeply for Python's parser") from None
    if not _candidates(table).search(text):  # no torch name and no mapped method name
        return Translation(path, text, text, encoding, ())
    index = ModuleIndex(tree, emit.section_lines(text, tree))  # the generated section is not user code
    lines = _Lines(text)
    sites = Sites(table, options, index, path)
    attempts = _decide(sites, lines)
    edits, conversions, definitions = _rewrite(text, lines, attempts)
    records = {id(a): _record(path, a) for a in attempts}
    definitions = emit.ordered(definitions)
    if kernels_module is None:
        edits += emit.section_edits(text, tree, definitions) if definitions else []
    elif conversions:
        wrappers = sorted({call.func.value for _, call, _ in conversions})
        edits += emit.import_kernels(text, tree, kernels_module, wrappers, sites.inference.spelt_free_torch)
    code = emit.splice(text, edits)  # every edit is in the input's coordinates
    return Translation(
        path,
        text,
        code,
        encoding,
        tuple(records[id(a)] for a in attempts),
        tuple(Conversion(records[id(a)], call, params) for a, call, params in conversions),
        tuple(definitions),
    )


def _candidates(table: Table) -> re.Pattern[str]:
    """Text a module must contain to hold a torch call site (re caches the compiled pattern)."""
    methods = "|".join(sorted(table.methods))
    return re.compile(rf"torch|\.\s*(?:{methods})\b")


def decode(source: str | bytes) -> tuple[str, str]:
    """Source text and its encoding (BOM or PEP 263 line; UTF-8 by default).

    Text keeps the encoding it declares, for writing it back.
    """
    if isinstance(source, str):
        try:
            return source, _declared(source.encode("utf-8", "surrogatepass")).removesuffix("-sig")
        except (SyntaxError, UnicodeDecodeError):
            return source, "utf-8"
    try:
        encoding = _declared(source)
    except SyntaxError as exc:
        raise LookupError(str(exc)) from None
    return source.decode(encoding), encoding


def _declared(source: bytes) -> str:
    """The encoding Python reads ``source`` in, from its first two lines as Python splits them
    (a lone CR ends a line; BytesIO.readline would not split there)."""
    lines = iter([m.group() for _, m in zip(range(2), _LINE_BYTES.finditer(source))])
    return tokenize.detect_encoding(lambda: next(lines, b""))[0]


def _decide(sites: Sites, lines: _Lines) -> list[Attempt]:
    """One attempt per torch call site the run is about, in source order."""
    in_fstrings = {id(n) for s in sites.index.fstrings for n in ast.walk(s) if type(n) is ast.Call}
    attempts = []
    for call in sites.index.calls:
        found = sites.resolve(call)
        if found is None or not sites.options.selects(found.api, found.entry):
            continue
        span = lines.span(call)
        if id(call) in in_fstrings:
            attempts.append(Attempt(span, found, reason="inside an f-string"))
        else:
            attempts.append(sites.attempt(call, found, span))
    attempts.sort(key=lambda a: a.span)
    return attempts


def _rewrite(text: str, lines: _Lines, attempts: list[Attempt]):
    """Run the rules on pending attempts, one outermost call segment at a time."""
    pending = sorted((a for a in attempts if not a.status), key=lambda a: (a.span[:2], -a.span[2], -a.span[3]))
    groups: list[list[Attempt]] = []
    for attempt in pending:
        if groups and attempt.span[:2] < groups[-1][0].span[2:]:
            groups[-1].append(attempt)
        else:
            groups.append([attempt])
    edits, conversions, definitions = [], [], []
    for group in groups:
        line, column, end_line, end_column = group[0].span
        start, end = lines.offset(line, column), lines.offset(end_line, end_column)
        segment = text[start:end]
        try:
            new, rewriter = rewrite_segment(segment, line, column, {a.span: a for a in group})
        except (cst.ParserSyntaxError, RecursionError):  # e.g. nested beyond libcst's stack
            new, rewriter = segment, None
        for attempt in group:
            if not attempt.status:
                attempt.status, attempt.reason = UNSUPPORTED, "could not be rewritten in place"
        if rewriter is None or not rewriter.converted:
            continue
        edits.append((start, end, new))
        conversions.extend(rewriter.converted)
        definitions.extend(rewriter.definitions)
    return edits, conversions, definitions


def _record(path: str, attempt: Attempt) -> Record:
    found, entry = attempt.resolved, attempt.resolved.entry
    category = entry.category if entry else "unmapped"
    pypto_api = attempt.pypto_api or (f"pypto.{entry.pypto}" if entry and entry.pypto else "")
    line, column, end_line, end_column = attempt.span
    reason = "" if attempt.status == CONVERTED else attempt.reason
    return Record(path, line, column + 1, end_line, end_column + 1, found.api, category, pypto_api, attempt.status, reason)


class _Lines:
    """Line starts of a text, to turn ast positions (UTF-8 byte columns) into text offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = emit.line_starts(text)

    def span(self, node: ast.AST) -> Span:
        """0-based character columns of a node's start and end."""
        return (
            node.lineno,
            self._column(node.lineno, node.col_offset),
            node.end_lineno,
            self._column(node.end_lineno, node.end_col_offset),
        )

    def offset(self, line: int, column: int) -> int:
        return self.starts[line - 1] + column

    def _column(self, line: int, byte_column: int) -> int:
        start = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.text)
        text = self.text[start:end]
        if text.isascii():
            return byte_column
        return len(text.encode()[:byte_column].decode(errors="replace"))
