"""What every translation must satisfy, checked from its output instead of trusted from the engine.

Shared by the property tests and the corpus harness: the output is valid Python, can be written
in the source's encoding, translates to itself again, and differs from the source only inside
the spans of converted calls, in the generated kernels section and in the imports it adds.
"""

from __future__ import annotations

import ast
import bisect
import collections
import difflib
import re

from torch2pypto.translator.engine import emit
from torch2pypto.translator.engine.report import AMBIGUOUS, CONVERTED, HOST_SIDE, UNSUPPORTED
from torch2pypto.translator.engine.transform import Options
from torch2pypto.translator.engine.translate import Translation, decode, translate_source

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # Python's line breaks (not \f or \u2028)
_ADDED_IMPORT = re.compile(r"import (?:torch|functools|math|pypto)[ \t]*(?:\r\n|\r|\n)?\Z")
_COOKIE = re.compile(r"[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+")  # PEP 263
_DOCSTRING = re.compile(r"[ \t\f]*[rRuU]?[\"']")
_WRAPPER = re.compile(r"\bpypto_\w+")
_NAME_CALL = re.compile(r"[^\W\d]\w*\s*\(")
_DEFINED = re.compile(r"(?:def (pypto_\w+)\(|(pypto_\w+)\s*=)")


def violations(
    translation: Translation,
    *,
    options: Options = Options(),
    kernels_module: str | None = None,
    source: str | bytes | None = None,
) -> list[str]:
    """Human-readable problems with ``translation`` (empty when it is fine).

    ``options`` and ``kernels_module`` must be those the translation was made with: they are
    used to translate the output again. Given the input ``source`` (as passed to
    ``translate_source``), the translation's own ``source`` must be exactly its text.
    """
    problems = _record_problems(translation)
    if source is not None and _decoded(source) != translation.source:
        difference = _first_difference(_decoded(source), translation.source)
        problems.append(f"the translation's source is not the input text: {difference}")
    if translation.code != translation.source:
        problems += _compile_problems(translation)
        problems += _diff_problems(translation, kernels_module)
        problems += _idempotence_problems(translation, options, kernels_module)
    elif translation.conversions:  # sites converted before (calls of generated wrappers) stay as they are
        problems.append("records say a call was converted but the output equals the source")
    return problems


def _record_problems(t: Translation) -> list[str]:
    problems = []
    statuses = collections.Counter(r.status for r in t.records)
    known = {CONVERTED, UNSUPPORTED, AMBIGUOUS, HOST_SIDE}
    if set(statuses) - known:
        problems.append(f"records with unknown statuses: {sorted(set(statuses) - known)}")
    starts = [(r.line, r.column) for r in t.records]
    if starts != sorted(starts):
        problems.append(f"records are not in source order: {starts}")
    paths = {r.path for r in t.records} - {t.path}
    if paths:
        problems.append(f"records name other paths than {t.path!r}: {sorted(paths)}")
    for r in t.records:
        if r.line < 1 or r.column < 1 or (r.end_line, r.end_column) < (r.line, r.column):
            problems.append(f"{r.location}: bad span ending at {r.end_line}:{r.end_column}")
    rewritten = {c.record for c in t.conversions}
    lines = _lines(t.source)
    fused = _regions(t)
    for r in t.records:  # converted before: a call of a generated wrapper, spelt as a plain name
        if r.status == CONVERTED and r not in rewritten and not _in_regions(r, fused) and not _NAME_CALL.match(lines[r.line - 1], r.column - 1):
            problems.append(f"{r.location}: converted call is unchanged in the output")
    return problems


def _compile_problems(t: Translation) -> list[str]:
    try:
        compile(t.code.removeprefix("\ufeff"), t.path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        try:
            compile(t.source.removeprefix("\ufeff"), t.path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return []  # the input does not compile either ('return' outside a function...)
        return [f"output is not valid Python: {exc!r}"]
    return []


def _idempotence_problems(t: Translation, options: Options, kernels_module: str | None) -> list[str]:
    try:
        data: str | bytes = t.code.encode(t.encoding)
    except (UnicodeEncodeError, LookupError) as exc:
        problems, data = [f"output cannot be written in its encoding {t.encoding}: {exc}"], t.code
    else:
        problems = []
    try:
        again = translate_source(data, t.path, options, kernels_module=kernels_module).code
    except Exception as exc:  # noqa: BLE001 - any crash on our own output is the finding
        return [*problems, f"translating the output again raised {type(exc).__name__}: {str(exc)[:200]}"]
    if again != t.code:
        problems.append(f"not idempotent: translating the output again changes {_first_difference(t.code, again)}")
    return problems


def _decoded(source: str | bytes) -> str:
    if isinstance(source, str):
        return source.removeprefix("\ufeff")
    return decode(source)[0]


_MASK_MAKER = re.compile(r"pypto_causal_mask_maker\((\w+)\)")
_MASK_CALL = re.compile(r"pypto_causal_mask\((\w+)(?:, |,(?=\r?\n)|(?=\)))")


def _unmasked(line: str) -> str:
    """A line with engine.masks' reads of transformers' mask builders undone
    (``pypto_causal_mask(create, ...)`` is ``create(...)``): those edits rewrite calls that are no
    call sites of the report."""
    return _MASK_CALL.sub(r"\1(", _MASK_MAKER.sub(r"\1", line))


def _first_difference(old: str, new: str) -> str:
    pairs = zip(_lines(old) + [""], _lines(new) + [""])
    number, (a, b) = next(((i, p) for i, p in enumerate(pairs, 1) if p[0] != p[1]), (0, ("", "")))
    return f"line {number}: {a!r} -> {b!r}"


def _diff_problems(t: Translation, kernels_module: str | None) -> list[str]:
    """Diff source and output, the generated section and added imports set aside.

    The diff matches non-blank lines; between two matched lines, the source text outside
    converted calls must reappear in the output in order, character for character (blank
    lines included, except next to an insertion, where spacing may change).
    """
    problems: list[str] = []
    src, out = ([_unmasked(line) for line in _lines(text)] for text in (t.source, t.code))
    strings = [set(), set()]  # lines inside multi-line statements, where a marker is text
    if not (_plain_markers(t.source, src) and _plain_markers(t.code, out)):
        strings = [_statement_lines(t.source), _statement_lines(t.code)]
    src_kept, _, src_extra = _set_aside(src, kernels_module, strings[0], problems)
    out_kept, cuts, out_extra = _set_aside(out, kernels_module, strings[1], problems)
    problems += _kept_generated_lines(src_extra, out_extra) + _head_problems(src, out)
    rewritten = {c.record for c in t.conversions}
    converted = [  # the calls this translation rewrote
        (r.line - 1, r.column - 1, r.end_line - 1, r.end_column - 1) for r in t.records if r in rewritten
    ]
    fused = _regions(t)
    converted += fused
    calls = _outermost(converted)
    call_ends = [c[2] for c in calls]
    in_call = _mask(len(src), [i for line, _, end_line, _ in calls for i in range(line, end_line + 1)])
    a_lines = [i for i in src_kept if not _is_blank(src[i])]
    b_lines = [j for j in out_kept if not _is_blank(out[j])]
    # lines with converted calls never anchor: their text may reappear anywhere in the new calls
    pairs = _matched([None if in_call[i] else src[i] for i in a_lines], [out[j] for j in b_lines])
    anchors = [(-1, -1), *((a_lines[i], b_lines[j]) for i, j in pairs), (len(src), len(out))]
    src_keep, out_keep = _mask(len(src), src_kept), _mask(len(out), out_kept)

    changed = bytearray(len(src) + 1)
    new_names: set[str] = set()
    for (i, j), (i2, j2) in zip(anchors, anchors[1:]):
        if i2 - i == 1 and j2 - j == 1:
            continue
        old = [k for k in range(i + 1, i2) if src_keep[k]]
        new = [k for k in range(j + 1, j2) if out_keep[k]]
        if bisect.bisect_right(cuts, j) < bisect.bisect_left(cuts, j2):  # spacing around an insertion
            old = [k for k in old if not _is_blank(src[k])]
            new = [k for k in new if not _is_blank(out[k])]
        old_text, new_text = [src[k] for k in old], [out[k] for k in new]
        if old_text == new_text:
            continue
        if not old:
            problems.append(f"output lines {[k + 1 for k in new]} inserted outside the generated section and imports")
            continue
        problems += _outside_calls(src, old, "".join(new_text), calls[bisect.bisect_left(call_ends, old[0]) :], set(fused))
        new_names |= _wrappers(new_text) - _wrappers(old_text)
        for k in old:
            changed[k] = 1

    for line, column, end_line, _ in converted:
        if not any(changed[line : end_line + 1]):
            problems.append(f"{t.path}:{line + 1}:{column + 1}: converted call is unchanged in the output")
    defined = _defined_wrappers(out_extra, kernels_module)
    if new_names - defined:
        problems.append(f"calls to {sorted(new_names - defined)} but no definition or import of them")
    return problems


def _outermost(spans: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """The spans not inside another one, in order (0-based line, column, end line, end column)."""
    result: list[tuple[int, int, int, int]] = []
    for span in sorted(spans):
        if result and span[:2] < result[-1][2:]:
            if span[2:] > result[-1][2:]:
                result[-1] = (*result[-1][:2], *span[2:])
            continue
        result.append(span)
    return result


def _outside_calls(src: list[str], old: list[int], new: str, calls: list[tuple[int, int, int, int]], regions=frozenset()) -> list[str]:
    """Problems with the source lines ``old`` becoming the text ``new``.

    Outside the converted ``calls`` (those from the first that ends on ``old[0]`` or later),
    the text must reappear in order; each call becomes a call (a name or parenthesis up to a
    closing parenthesis) where it starts or ends among these lines. A fused region (in
    ``regions``) becomes any statement text (its comments, then the call of its wrapper).
    """
    starts, text = {}, []
    offset = 0
    for k in old:
        starts[k] = offset
        text.append(src[k])
        offset += len(src[k])
    whole = "".join(text)
    pieces, ends, done = [], [], 0  # the untouched text around calls; each call's (starts, ends) here
    for line, column, end_line, end_column in calls:
        if line > old[-1]:
            break
        start = starts[line] + column if line in starts else 0
        end = starts[end_line] + end_column if end_line in starts else len(whole)
        pieces.append(whole[done:start])
        region = (line, column, end_line, end_column) in regions
        ends.append((line in starts and not region, end_line in starts and not region))
        done = end
    pieces.append(whole[done:])
    if _fits(new, pieces, ends):
        return []
    where = f"{old[0] + 1}" if len(old) == 1 else f"{old[0] + 1}-{old[-1] + 1}"
    return [f"source lines {where}: text outside converted calls changed: {whole[:80]!r} -> {new[:80]!r}"]


def _fits(text: str, pieces: list[str], calls: list[tuple[bool, bool]]) -> bool:
    """``text`` is ``pieces[0] call pieces[1] ... call pieces[-1]`` for some texts of the calls.

    ``calls[k]`` says whether call k starts and ends here: then it starts like a call (a name
    or parenthesis) and ends with a closing parenthesis. Leftmost placement of pieces decides.
    """
    if not text.startswith(pieces[0]):
        return False
    at = len(pieces[0])
    for k, ((starts, ends), piece) in enumerate(zip(calls, pieces[1:]), 1):
        if starts and not _starts_call(text, at):
            return False
        least = at + 1 if starts or ends else at
        if k == len(calls):  # the last piece closes the text
            found = len(text) - len(piece)
            return found >= least and text.endswith(piece) and not (ends and text[found - 1] != ")")
        starts_next = calls[k][0]
        found = text.find(piece, least)
        while found >= 0 and (
            (ends and text[found - 1] != ")") or (starts_next and not _starts_call(text, found + len(piece)))
        ):
            found = text.find(piece, found + 1)
        if found < 0:
            return False
        at = found + len(piece)
    return at == len(text)


def _starts_call(text: str, at: int) -> bool:
    return at < len(text) and (text[at] == "(" or text[at].isidentifier())


def _regions(t: Translation) -> list[tuple[int, int, int, int]]:
    """The statements fused regions replaced (0-based lines and columns)."""
    return [(r.span[0] - 1, r.span[1], r.span[2] - 1, r.span[3]) for r in t.regions]


def _in_regions(r, regions) -> bool:
    return any((a, b) <= (r.line - 1, r.column - 1) and (r.end_line - 1, r.end_column - 1) <= (c, d) for a, b, c, d in regions)


def _mask(size: int, indices: list[int]) -> bytearray:
    mask = bytearray(size)
    for i in indices:
        mask[i] = 1
    return mask


def _wrappers(lines) -> set[str]:
    return set(_WRAPPER.findall("".join(lines)))


def _lines(text: str) -> list[str]:
    return _LINE.findall(text)


def _set_aside(lines: list[str], kernels_module: str | None, strings: set[int], problems: list[str]):
    """Indices of the ordinary lines, cut points, and the other lines by kind.

    Set aside: the generated section ("section"; its markers outside the ``strings`` lines),
    ``from <kernels_module> import ...`` statements ("kernels"), plain ``import torch``-style
    lines the translator may add ("import"); cut points are the 0-based lines where each began.
    """
    kept: list[int] = []
    cuts: list[int] = []
    extra: dict[str, list[str]] = {"section": [], "kernels": [], "import": []}
    head = f"from {kernels_module} import " if kernels_module else None
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if line.rstrip("\r\n") == emit.BEGIN and i not in strings:
            end = next((j for j in range(i + 1, n) if lines[j].rstrip("\r\n") == emit.END and j not in strings), None)
            if end is None:
                problems.append(f"line {i + 1}: generated section has no end marker")
                end = n - 1
            kind, stop = "section", end + 1
            if head:  # the kernels import may have joined the section's imports
                for j in range(i, stop):
                    if lines[j].startswith(head):
                        extra["kernels"] += lines[j : _import_end(lines, j)]
        elif head and line.startswith(head):
            kind, stop = "kernels", _import_end(lines, i)
        elif _ADDED_IMPORT.match(line):
            kind, stop = "import", i + 1
        else:
            kept.append(i)
            i += 1
            continue
        extra[kind] += lines[i:stop]
        cuts.append(i)
        i = stop
    return kept, cuts, extra


def _plain_markers(text: str, lines: list[str]) -> bool:
    """No marker, or one marker line of each in order: no need to tell them from text in strings."""
    if emit.BEGIN not in text and emit.END not in text:
        return True
    marks = [line.rstrip("\r\n") for line in lines if emit.BEGIN in line or emit.END in line]
    return marks == [emit.BEGIN, emit.END]


def _statement_lines(text: str) -> set[int]:
    """0-based lines of the multi-line top-level statements (where the engine ignores markers)."""
    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError):
        return set()
    return {n - 1 for s in body if s.end_lineno > s.lineno for n in range(s.lineno, s.end_lineno + 1)}


def _import_end(lines: list[str], i: int) -> int:
    """Index after the import statement starting on line ``i`` (parenthesized: over several lines)."""
    stop = i + 1
    if "(" in lines[i] and ")" not in lines[i]:
        while stop < len(lines) and ")" not in lines[stop - 1]:
            stop += 1
    return stop


def _head_problems(src: list[str], out: list[str]) -> list[str]:
    """Nothing goes above a shebang or an encoding cookie, or before the module docstring."""
    problems = []
    if src[:1] and src[0].startswith("#!") and out[:1] != src[:1]:
        problems.append("the shebang line is no longer the first line")
    for i, line in enumerate(src[:2]):
        if _COOKIE.match(line) and out[i : i + 1] != [line]:
            problems.append(f"the encoding declaration moved from line {i + 1}")
    first = _first_statement(src)
    if first is not None and _DOCSTRING.match(first) and _first_statement(out) != first:
        problems.append("the module docstring is no longer the first statement")
    return problems


def _first_statement(lines: list[str]) -> str | None:
    return next((line for line in lines if line.strip() and not line.lstrip().startswith("#")), None)


def _kept_generated_lines(src: dict[str, list[str]], out: dict[str, list[str]]) -> list[str]:
    """Generated lines already in the source survive: the translator only adds to them."""
    problems = []
    if not _is_subsequence(src["section"], out["section"]):
        problems.append("lines of the existing generated section were changed or removed")
    if collections.Counter(src["import"]) - collections.Counter(out["import"]):
        problems.append("import lines of the source were removed")
    if _wrappers(src["kernels"]) - _wrappers(out["kernels"]):
        problems.append("names imported from the kernels module were removed")
    return problems


def _is_blank(line: str) -> bool:
    return not line.strip()


def _is_subsequence(small: list[str], big: list[str]) -> bool:
    rest = iter(big)
    return all(line in rest for line in small)


def _matched(a: list[str | None], b: list[str]) -> list[tuple[int, int]]:
    """Indices of equal lines of ``a`` and ``b`` a diff keeps, in order (patience diff).

    Lines that occur once on each side anchor the alignment, so repeated lines (``)``,
    ``return x``) cannot pull it off; stretches without such anchors go to SequenceMatcher.
    """
    pairs: list[tuple[int, int]] = []
    stack = [(0, len(a), 0, len(b))]
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        while alo < ahi and blo < bhi and a[alo] == b[blo]:
            pairs.append((alo, blo))
            alo, blo = alo + 1, blo + 1
        while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:
            ahi, bhi = ahi - 1, bhi - 1
            pairs.append((ahi, bhi))
        if alo == ahi or blo == bhi:
            continue
        anchors = _unique_anchors(a, b, alo, ahi, blo, bhi)
        if not anchors:
            matcher = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            pairs += [(alo + i + k, blo + j + k) for i, j, n in matcher.get_matching_blocks() for k in range(n)]
            continue
        pairs += anchors
        for (i, j), (i2, j2) in zip([(alo - 1, blo - 1), *anchors], [*anchors, (ahi, bhi)]):
            stack.append((i + 1, i2, j + 1, j2))
    return sorted(pairs)


def _unique_anchors(a: list[str | None], b: list[str], alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    """The longest increasing run of lines that occur exactly once in a[alo:ahi] and in b[blo:bhi]."""
    count_a, count_b = collections.Counter(a[alo:ahi]), collections.Counter(b[blo:bhi])
    in_b = {b[j]: j for j in range(blo, bhi) if count_b[b[j]] == 1}
    candidates = [(i, in_b[a[i]]) for i in range(alo, ahi) if count_a[a[i]] == 1 and a[i] in in_b]
    tails: list[int] = []  # patience sorting: tails[k] = smallest j ending a run of length k + 1
    ends: list[int] = []  # candidate index ending that run
    previous = [-1] * len(candidates)
    for index, (_, j) in enumerate(candidates):
        k = bisect.bisect_left(tails, j)
        previous[index] = ends[k - 1] if k else -1
        tails[k:k + 1], ends[k:k + 1] = [j], [index]
    run, index = [], ends[-1] if ends else -1
    while index >= 0:
        run.append(candidates[index])
        index = previous[index]
    return run[::-1]


def _defined_wrappers(extra: dict[str, list[str]], kernels_module: str | None) -> set[str]:
    names = {m[1] or m[2] for m in filter(None, map(_DEFINED.match, extra["section"]))}
    if kernels_module:
        names |= _wrappers(extra["kernels"])
    return names
