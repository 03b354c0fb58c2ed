"""Translate one module's source: find torch calls, rewrite the converted ones, add their kernels."""

from __future__ import annotations

import ast
import bisect
import collections
import dataclasses
import functools
import gc
import re
import tokenize
from typing import Callable

import libcst as cst

from torch2pypto.mapping import Table, load_table
from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.fusion import fused_sites
from torch2pypto.schema import operators
from torch2pypto.translator.engine import chunks, emit, masks, repeats
from torch2pypto.translator.engine.bodies import module_functions
from torch2pypto.translator.engine.hierarchy import Hierarchy
from torch2pypto.translator.engine.regions import Context, Fused, Region, fuse
from torch2pypto.translator.engine.report import CONVERTED, UNSUPPORTED, Record
from torch2pypto.translator.engine.scopes import ModuleIndex, Scope, walk
from torch2pypto.translator.engine.syntax import held
from torch2pypto.translator.engine.transform import FUSED, FUSED_API, Attempt, CallRewriter, Conversion, Options, Sites, Span

_BEYOND_ASCII = re.compile(r"[^\x00-\x7f]")
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
    regions: tuple[Region, ...] = ()

    @property
    def changed(self) -> bool:
        return self.code != self.source


def _collector_paused(translate: Callable[..., Translation]) -> Callable[..., Translation]:
    """``translate`` with Python's cyclic garbage collector paused while it runs (unless it was
    off already). A translation builds a large graph of long-lived objects (the ``ast``, scopes,
    inference, libcst nodes) that the collector would scan again and again, for little garbage:
    paused, a module translates about a third faster and the time stays linear in its size. The
    young objects are collected after each chunk (:func:`translate_source`) and after the call,
    so that no cycle of one translation outlives it."""

    @functools.wraps(translate)
    def paused(*args, **kwargs) -> Translation:
        if not gc.isenabled():
            return translate(*args, **kwargs)
        gc.disable()
        try:
            return translate(*args, **kwargs)
        finally:
            gc.enable()
            gc.collect(0)

    return paused


@_collector_paused
def translate_source(
    source: str | bytes,
    path: str = "<string>",
    options: Options = Options(),
    table: Table | None = None,
    kernels_module: str | None = None,
    progress: Callable[[float], None] | None = None,
) -> Translation:
    """Translate module source; bytes are decoded as Python would (PEP 263, BOM).

    Kernels go into a marked section of the module itself, or, given ``kernels_module`` (an
    import target such as ``._pypto_kernels``), are imported from there and listed in
    ``Translation.definitions``. ``progress`` is called with the share of the text done
    after each call site rewritten. Raises ``SyntaxError`` on invalid Python and
    ``UnicodeDecodeError``/``LookupError`` on undecodable bytes.
    """
    text, encoding = decode(source)
    table = table or load_table()
    cut = chunks.cut(text)
    module = _Parted.read(text, path, cut) if cut else None
    if module is None:
        try:
            tree = ast.parse(text, path)
        except ValueError as exc:  # null bytes
            raise SyntaxError(str(exc)) from None
        except (RecursionError, MemoryError):  # CPython cannot compile it either
            raise SyntaxError("nested too deeply for Python's parser") from None
        cut, module = [None], _Parted(tree)
    if not _candidates(table).search(text):  # no torch name and no mapped method name
        return Translation(path, text, text, encoding, ())
    section = emit.section_lines(text, module.outline)
    module.set_aside(section)
    lines = _Lines(text)
    generated = emit.defined_names(text, section)
    hierarchy = Hierarchy(path, options.module_bases)
    records, edits, conversions, definitions, regions, called = [], [], [], {}, [], []
    spelt_free_torch = deferring = masking = False
    mask_names = masks.imported(module.outline)
    for chunk in cut:
        index = module.index(text, chunk, path, section)
        sites = Sites(table, options, index, path, generated, hierarchy, module.reads_torch)
        attempts = _decide(sites, lines)
        loaded: dict = {}  # the other chunks this one's fusion loads: chunk -> (tree, Context)
        elsewhere = _elsewhere(module, chunk, index.tree, loaded, text, path, section, lines, (table, options, generated, hierarchy)) \
            if module.functions else None
        fused = fuse(sites, attempts, lines, text, index.tree, path, elsewhere) if options.fuse else Fused([], [], [])
        chunk_edits, chunk_conversions, chunk_definitions, nested = _rewrite(text, lines, attempts, progress, fused.edits)
        chunk_edits += [e for e in fused.edits if e not in nested]
        deferred = repeats.defer(index.tree, lines, chunk_conversions, chunk_edits)
        chunk_edits += deferred
        deferring |= bool(deferred)
        masked = masks.defer(mask_names, index.tree, lines, chunk_edits)
        chunk_edits += masked
        masking |= bool(masked)
        chunk_definitions = [d for _, d in sorted([*fused.definitions, *chunk_definitions], key=lambda p: p[0])]  # source order
        regions += fused.regions
        called += fused.called
        by_attempt = {id(a): _record(path, a) for a in attempts}
        records += by_attempt.values()
        edits += chunk_edits
        conversions += [Conversion(by_attempt[id(a)], call, params) for a, call, params in chunk_conversions]
        for definition in chunk_definitions:
            definitions.setdefault(definition.name, definition)
        spelt_free_torch |= sites.inference.spelt_free_torch
        for inference in [sites.inference, *(context.inference for _, context in loaded.values())]:
            inference.release()  # the chunk's ast and answers freed by reference counts, not walked by the collector
        if len(cut) > 1:  # the chunk's ast and inference, in cycles, freed before the next chunk is read
            del index, sites, attempts, elsewhere, fused, loaded
            gc.collect(0)
    if masking:
        definitions.setdefault(masks.DEFINITION.name, masks.DEFINITION)
    ordered = emit.ordered(definitions.values())
    if kernels_module is None:
        edits += emit.section_edits(text, module.outline, ordered) if ordered else []
    elif conversions or regions or masking:
        wrappers = sorted({c.call.func.value for c in conversions} | {r.wrapper for r in regions} | set(called) | set(repeats.NAMES if deferring else ())
                          | set(masks.NAMES if masking else ()))
        edits += emit.import_kernels(text, module.outline, kernels_module, wrappers, spelt_free_torch)
    code = emit.splice(text, edits)  # every edit is in the input's coordinates
    return Translation(path, text, code, encoding, tuple(records), tuple(conversions), tuple(ordered), tuple(regions))


class _Parted:
    """A module as its chunks see it: its whole ``tree``, or for a large module parsed a chunk at a
    time (:mod:`chunks`) the module-level bindings of every chunk, an ``outline`` of its top-level
    statements (imports and docstring whole, the others as placeholders of their lines), and
    whether it reads a name ``torch``."""

    def __init__(self, tree: ast.Module, scope: Scope | None = None, scope_of=None, read=None) -> None:
        self.outline = tree
        self.tree = tree if scope is None else None
        self.scope, self.scope_of = scope, scope_of
        self.reads_torch: Callable[[], bool] | None = None  # asked only where torch is free at a site
        self._read = read  # text, path and cut of a module parsed in chunks
        self._section = range(0)
        self.functions: dict[str, tuple[int, int, int]] | None = None  # read in chunks: the chunk of each module function

    @classmethod
    def read(cls, text: str, path: str, cut: list[tuple[int, int, int]]) -> _Parted | None:
        """Each chunk indexed shallowly into one module scope; None if a chunk does not parse."""
        scope = Scope(ast.Module([], []), None)
        scope_of: dict = {}
        outline: list[ast.stmt] = []
        bound, where = collections.Counter(), {}
        for chunk in cut:
            try:
                tree = chunks.tree(text, chunk, path)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return None  # parsed whole, it raises what Python says
            counts, functions = module_functions(tree.body)
            bound += counts
            where.update(dict.fromkeys(functions, chunk))
            ModuleIndex(tree, module=scope, scope_of=scope_of, shallow=True)
            outline += [s if _kept(s) else ast.Pass(**_position(s)) for s in tree.body]
            for definition in _module_definitions(tree):  # what the bindings hold, not the bodies
                definition.body = []
        parted = cls(ast.Module(outline, []), scope, scope_of, (text, path, cut))
        parted.functions = {name: chunk for name, chunk in where.items() if bound[name] == 1}
        return parted

    def set_aside(self, section: range) -> None:
        """Leave out what the generated section on ``section`` binds: it is not the user's code."""
        if self.scope is None:
            return
        if section:
            for name, bindings in list(self.scope.bindings.items()):
                kept = [b for b in bindings if b.node.lineno not in section]
                if kept:
                    self.scope.bindings[name] = kept
                else:
                    del self.scope.bindings[name]
        self._section = section
        self.reads_torch = functools.cache(self._reads_torch)

    def _reads_torch(self) -> bool:
        """Whether a statement outside the generated section reads a name ``torch`` (chunks parsed again)."""
        text, path, cut = self._read
        return any(
            _reads_torch(s) for chunk in cut for s in chunks.tree(text, chunk, path).body if s.lineno not in self._section
        )

    def index(self, text: str, chunk, path: str, section: range) -> ModuleIndex:
        if self.scope is None:
            return ModuleIndex(self.tree, section)  # the generated section is not user code
        return ModuleIndex(chunks.tree(text, chunk, path), section, self.scope, dict(self.scope_of))


def _elsewhere(module: _Parted, chunk, tree: ast.Module, loaded: dict, text: str, path: str, section: range, lines: _Lines,
               setting) -> dict:
    """For fusion in a module read in chunks: each module function, one of ``chunk`` itself
    (parsed as ``tree``) as it is, one of another chunk loaded on demand as the whole module's
    translation sees it (its chunk parsed and decided again, into ``loaded``: chunk -> (tree, Context))."""
    table, options, generated, hierarchy = setting
    own = {n.name: n for n in tree.body if type(n) is ast.FunctionDef}

    def load(name: str, where):
        if where not in loaded:
            index = module.index(text, where, path, section)
            sites = Sites(table, options, index, path, generated, hierarchy, module.reads_torch)
            pending = {a.span: a for a in _decide(sites, lines) if not a.status}
            loaded[where] = (index.tree, Context(pending, sites.inference))
        other, context = loaded[where]
        function = next((n for n in other.body if type(n) is ast.FunctionDef and n.name == name), None)
        return None if function is None else (function, context)

    return {name: own[name] if where == chunk else functools.partial(load, name, where) for name, where in module.functions.items()}


def _module_definitions(tree: ast.Module) -> list[ast.AST]:
    """The functions and classes a module binds at its level, its blocks' (``if``, ``try``)
    included: the nodes of its ``DEFINITION`` bindings (found in the chunk itself, not among the
    whole module's bindings, which grow with each chunk)."""
    found, statements = [], list(tree.body)
    while statements:
        statement = statements.pop()
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(statement)
        else:
            statements += held(statement)
    return found


def _kept(statement: ast.stmt) -> bool:
    """Top-level statements the emitter reads: imports and a docstring."""
    kind = type(statement)
    return kind in (ast.Import, ast.ImportFrom) or (kind is ast.Expr and type(statement.value) is ast.Constant)


def _position(node: ast.AST) -> dict[str, int]:
    return {k: getattr(node, k) for k in ("lineno", "col_offset", "end_lineno", "end_col_offset")}


def _reads_torch(statement: ast.stmt) -> bool:
    return any(type(n) is ast.Name and n.id == "torch" for n in ast.walk(statement))


def _candidates(table: Table) -> re.Pattern[str]:
    """Text a module must contain to hold a torch call site (re caches the compiled pattern)."""
    methods = "|".join(sorted(table.methods))
    return re.compile(rf"torch|pypto_|\.\s*(?:{methods})\b")


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
    in_fstrings = {id(n) for s in sites.index.fstrings for n in walk(s) if type(n) in (ast.Call, *operators.OPERATORS)}
    attempts = []
    calls = [(call, call, sites.resolve(call)) for call in sites.index.calls]
    calls += [(node, *found) for node in sites.index.operators if (found := sites.operator(node))]
    for node, call, found in calls:
        if found is None or not sites.options.selects(found.api, found.entry):
            continue
        span = lines.span(call)
        if id(node) in in_fstrings:
            attempts.append(Attempt(span, found, reason="inside an f-string"))
        else:
            # a fused region's call stands for the torch call sites it fused: the rate holds after a migration
            repeat = fused_sites(call.func.id) if found.api == FUSED_API else 1
            attempts += [sites.attempt(call, found, span) for _ in range(repeat)]
    attempts.sort(key=lambda a: a.span)
    return attempts


def _rewrite(text: str, lines: _Lines, attempts: list[Attempt], progress: Callable[[float], None] | None = None, fused=()):
    """Run the rules on pending attempts, one outermost call segment at a time. A ``fused`` edit
    (start, end, new) inside a segment (a gated pair in ``self.down_proj(...)``) is made in it
    first, so the call around it is rewritten with it; returns the edits, conversions,
    definitions and the fused edits so made."""
    pending = sorted((a for a in attempts if not a.status), key=lambda a: (a.span[:2], -a.span[2], -a.span[3]))
    groups: list[list[Attempt]] = []
    for attempt in pending:
        if groups and attempt.span[:2] < groups[-1][0].span[2:]:
            groups[-1].append(attempt)
        else:
            groups.append([attempt])
    edits, conversions, definitions, nested = [], [], [], []
    rewriter = CallRewriter()
    for group in groups:
        start, end = lines.offset(*group[0].span[:2]), lines.offset(*group[0].span[2:])
        calls = [(lines.offset(*a.span[:2]) - start, lines.offset(*a.span[2:]) - start, a) for a in group]
        inside = [e for e in fused if start <= e[0] and e[1] <= end]
        nested += inside
        calls += [(a - start, b - start, new) for a, b, new in inside]
        new, converted = _rewrite_segment(rewriter, text[start:end], calls)
        if converted or inside:  # a fused edit inside stands even if the call around it stays torch
            edits.append((start, end, new))
        for attempt, result in converted:
            conversions.append((attempt, result.call, result.params))
            definitions.extend((start, d) for d in result.definitions)
        if progress is not None:
            progress(end / len(text))
    return edits, conversions, definitions, nested


def _rewrite_segment(rewriter: CallRewriter, segment: str, calls: list[tuple[int, int, Attempt]]):
    """The segment with its calls (offsets into it) rewritten, inner calls first, so that an outer
    call's rule sees its arguments already converted; and the converted ones, inner first. A call
    given as text instead of an attempt is a fused region's, put in as it is."""
    applied: list[tuple[int, int, int]] = []  # start, end (before any edit), change of length
    converted = []
    for start, end, attempt in sorted(calls, key=lambda c: (-c[0], c[1])):
        stop = end + sum(delta for s, e, delta in applied if start <= s and e <= end)  # edits inside it
        if isinstance(attempt, str):
            segment = segment[:start] + attempt + segment[stop:]
            applied.append((start, end, len(attempt) - (stop - start)))
            continue
        try:
            done = rewriter.rewrite(segment[start:stop], attempt)
        except (cst.ParserSyntaxError, RecursionError):  # e.g. nested beyond libcst's stack
            attempt.status, attempt.reason = UNSUPPORTED, "could not be rewritten in place"
            continue
        if done is not None:
            new, result = done
            segment = segment[:start] + new + segment[stop:]
            applied.append((start, end, len(new) - (stop - start)))
            converted.append((end, attempt, result))
    return segment, [(attempt, result) for _, attempt, result in sorted(converted, key=lambda c: c[0])]


def _record(path: str, attempt: Attempt) -> Record:
    found, entry = attempt.resolved, attempt.resolved.entry
    category = entry.category if entry else FUSED if found.api == FUSED_API else "unmapped"
    pypto_api = attempt.pypto_api or (f"pypto.{entry.pypto}" if entry and entry.pypto else "")
    line, column, end_line, end_column = attempt.span
    reason = "" if attempt.status == CONVERTED else attempt.reason
    return Record(path, line, column + 1, end_line, end_column + 1, found.api, category, pypto_api, attempt.status, reason)


class _Lines:
    """Line starts of a text, to turn ast positions (UTF-8 byte columns) into text offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = emit.line_starts(text)
        # the lines holding a character beyond ASCII, found once: on the others a byte is a character
        self.wide = set() if text.isascii() else {bisect.bisect_right(self.starts, m.start()) for m in _BEYOND_ASCII.finditer(text)}

    def span(self, node: ast.AST) -> Span:
        """0-based character columns of a node's start and end (on lines of ASCII only, the byte
        columns themselves: what :meth:`_column` gives there, without asking it)."""
        line, end_line, wide = node.lineno, node.end_lineno, self.wide
        if line not in wide and end_line not in wide:
            return line, node.col_offset, end_line, node.end_col_offset
        return (
            node.lineno,
            self._column(node.lineno, node.col_offset),
            node.end_lineno,
            self._column(node.end_lineno, node.end_col_offset),
        )

    def offset(self, line: int, column: int) -> int:
        return self.starts[line - 1] + column

    def _column(self, line: int, byte_column: int) -> int:
        if line not in self.wide:
            return byte_column
        start = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.text)
        text = self.text[start:end]
        return len(text.encode()[:byte_column].decode(errors="replace"))
