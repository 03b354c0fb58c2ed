"""What every translation must satisfy, checked from its output instead of trusted from the engine.

Shared by the property tests and the corpus harness: the output is valid Python, can be written
in the source's encoding, translates to itself again, and differs from the source only inside
the spans of converted calls, in the generated kernels section and in the imports it adds.
"""

from __future__ import annotations

import bisect
import collections
import difflib
import io
import re
import tokenize

from torch2pypto.translator import emit
from torch2pypto.translator.report import AMBIGUOUS, CONVERTED, UNSUPPORTED
from torch2pypto.translator.transform import Options
from torch2pypto.translator.translate import Translation, translate_source

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # Python's line breaks (not \f or \u2028)
_ADDED_IMPORT = re.compile(r"import (?:torch|functools|math|pypto)[ \t]*(?:\r\n|\r|\n)?\Z")
_COOKIE = re.compile(r"[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+")  # PEP 263
_DOCSTRING = re.compile(r"[ \t\f]*[rRuU]?[\"']")
_WRAPPER = re.compile(r"\bpypto_\w+")
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
    elif any(r.status == CONVERTED for r in translation.records):
        problems.append("records say a call was converted but the output equals the source")
    return problems


def _record_problems(t: Translation) -> list[str]:
    problems = []
    statuses = collections.Counter(r.status for r in t.records)
    if statuses[CONVERTED] + statuses[UNSUPPORTED] + statuses[AMBIGUOUS] != len(t.records):
        problems.append(f"records with unknown statuses: {sorted(set(statuses) - {CONVERTED, UNSUPPORTED, AMBIGUOUS})}")
    starts = [(r.line, r.column) for r in t.records]
    if starts != sorted(starts):
        problems.append(f"records are not in source order: {starts}")
    paths = {r.path for r in t.records} - {t.path}
    if paths:
        problems.append(f"records name other paths than {t.path!r}: {sorted(paths)}")
    for r in t.records:
        if r.line < 1 or r.column < 1 or (r.end_line, r.end_column) < (r.line, r.column):
            problems.append(f"{r.location}: bad span ending at {r.end_line}:{r.end_column}")
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
    encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    return source.decode(encoding)


def _first_difference(old: str, new: str) -> str:
    pairs = zip(_lines(old) + [""], _lines(new) + [""])
    number, (a, b) = next(((i, p) for i, p in enumerate(pairs, 1) if p[0] != p[1]), (0, ("", "")))
    return f"line {number}: {a!r} -> {b!r}"


def _diff_problems(t: Translation, kernels_module: str | None) -> list[str]:
    """Diff source and output lines, the generated section and added imports set aside.

    The diff runs on the non-blank lines; blank lines are then compared between each pair of
    matched lines (more of them are allowed only where something was inserted).
    """
    problems: list[str] = []
    src, out = _lines(t.source), _lines(t.code)
    src_kept, _, src_extra = _set_aside(src, kernels_module, problems)
    out_kept, cuts, out_extra = _set_aside(out, kernels_module, problems)
    problems += _kept_generated_lines(src_extra, out_extra) + _head_problems(src, out)
    a_lines = [i for i in src_kept if not _is_blank(src[i])]
    b_lines = [j for j in out_kept if not _is_blank(out[j])]
    spans = [(r.line - 1, r.end_line - 1, r.column - 1, r.end_column - 1) for r in t.records if r.status == CONVERTED]
    covered, prefix_end, suffix_start = _span_bounds(src, spans)

    anchors = [(-1, -1)]  # matched (source, output) line pairs
    changed = bytearray(len(src) + 1)
    new_names: set[str] = set()
    for tag, i1, i2, j1, j2 in _opcodes([src[i] for i in a_lines], [out[j] for j in b_lines]):
        lines, new = a_lines[i1:i2], [out[j] for j in b_lines[j1:j2]]
        if tag == "equal":
            anchors += zip(lines, b_lines[j1:j2])
        elif not lines:
            inserted = [j + 1 for j in b_lines[j1:j2]]
            problems.append(f"output lines {inserted} inserted outside the generated section and imports")
        elif not all(covered[i] for i in lines):
            outside = [i + 1 for i in lines if not covered[i]]
            problems.append(f"source lines {outside} changed outside any converted call")
        else:
            problems += _replaced(src, lines, new, prefix_end, suffix_start)
            new_names |= _wrappers(new) - _wrappers(src[i] for i in lines)
            for i in lines:
                changed[i] = 1
    anchors.append((len(src), len(out)))
    problems += _blank_problems(src, out, set(src_kept), set(out_kept), anchors, cuts)

    for line, end_line, column, _ in spans:
        if not any(changed[line : end_line + 1]):
            problems.append(f"{t.path}:{line + 1}:{column + 1}: converted call is unchanged in the output")
    defined = _defined_wrappers(out_extra, kernels_module)
    if new_names - defined:
        problems.append(f"calls to {sorted(new_names - defined)} but no definition or import of them")
    return problems


def _span_bounds(src: list[str], spans: list[tuple[int, int, int, int]]):
    """Per source line (0-based): inside a converted call? where its untouched head ends and tail starts."""
    covered = bytearray(len(src) + 1)
    prefix_end: dict[int, int] = {}
    suffix_start: dict[int, int] = {}
    for line, end_line, column, end_column in spans:
        covered[line : end_line + 1] = b"\1" * (end_line + 1 - line)
        prefix_end[line] = min(prefix_end.get(line, column), column)
        suffix_start[end_line] = max(suffix_start.get(end_line, end_column), end_column)
    for line, end_line, _, _ in spans:  # a line inside a longer call keeps no head or tail
        for inner in range(line + 1, end_line + 1):
            prefix_end[inner] = 0
        for inner in range(line, end_line):
            suffix_start[inner] = len(src[inner])
    return covered, prefix_end, suffix_start


def _replaced(src: list[str], lines: list[int], new: list[str], prefix_end: dict, suffix_start: dict) -> list[str]:
    """Problems with the source ``lines`` (all in converted calls) becoming the ``new`` lines.

    The text before a call's start and after its end stays: line by line when the rewrite kept
    the number of lines, else on the first and last line.
    """
    head = lambda i: src[i][: prefix_end.get(i, 0)]  # noqa: E731
    tail = lambda i: src[i][suffix_start.get(i, len(src[i])) :]  # noqa: E731
    if len(lines) == len(new):
        checks = [(i, n, head(i), tail(i)) for i, n in zip(lines, new)]
    else:
        first, last = lines[0], lines[-1]
        checks = [(first, (new or [""])[0], head(first), ""), (last, (new or [""])[-1], "", tail(last))]
    return [
        f"source line {i + 1}: text around a converted call changed: {src[i]!r} -> {n!r}"
        for i, n, before, after in checks
        if not _keeps(n, before, after)
    ]


def _keeps(line: str, head: str, tail: str) -> bool:
    """``line`` starts with ``head`` and ends with ``tail`` (line ending and all), without overlap."""
    fits = line.startswith(head) and line.endswith(tail) and len(line) >= len(head) + len(tail)
    return fits and (not tail or _ending(line) == _ending(tail))


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]


def _blank_problems(src, out, src_kept: set[int], out_kept: set[int], anchors, cuts: list[int]) -> list[str]:
    """Between matched lines, the same blank lines; more only around an insertion (a cut)."""
    problems = []
    for (i, j), (i2, j2) in zip(anchors, anchors[1:]):
        if i2 - i == j2 - j == 1:
            continue
        old = [src[k] for k in range(i + 1, i2) if k in src_kept and _is_blank(src[k])]
        new = [out[k] for k in range(j + 1, j2) if k in out_kept and _is_blank(out[k])]
        inserted = bisect.bisect_right(cuts, j) < bisect.bisect_left(cuts, j2)
        if old != new and not (inserted and _is_subsequence(old, new)):
            problems.append(f"blank lines changed between source lines {i + 1} and {i2 + 1}")
    return problems


def _wrappers(lines) -> set[str]:
    return set(_WRAPPER.findall("".join(lines)))


def _lines(text: str) -> list[str]:
    return _LINE.findall(text)


def _set_aside(lines: list[str], kernels_module: str | None, problems: list[str]):
    """Indices of the ordinary lines, cut points, and the other lines by kind.

    Set aside: the generated section ("section"), ``from <kernels_module> import ...``
    statements ("kernels"), plain ``import torch``-style lines the translator may add
    ("import"); the cut points are the line numbers (0-based) where each of those began.
    """
    kept: list[int] = []
    cuts: list[int] = []
    extra: dict[str, list[str]] = {"section": [], "kernels": [], "import": []}
    head = f"from {kernels_module} import " if kernels_module else None
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if line.rstrip("\r\n") == emit.BEGIN:
            end = next((j for j in range(i + 1, n) if lines[j].rstrip("\r\n") == emit.END), None)
            if end is None:
                problems.append(f"line {i + 1}: generated section has no end marker")
                end = n - 1
            kind, stop = "section", end + 1
        elif head and line.startswith(head):
            stop = i + 1
            if "(" in line and ")" not in line:
                while stop < n and ")" not in lines[stop - 1]:
                    stop += 1
            kind = "kernels"
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


def _opcodes(a: list[str], b: list[str]):
    """SequenceMatcher opcodes, with the common head and tail matched up front (the usual case)."""
    head = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    if head:
        yield "equal", 0, head, 0, head
    middle = difflib.SequenceMatcher(None, a[head : len(a) - tail], b[head : len(b) - tail], autojunk=False)
    for tag, i1, i2, j1, j2 in middle.get_opcodes():
        yield tag, i1 + head, i2 + head, j1 + head, j2 + head
    if tail:
        yield "equal", len(a) - tail, len(a), len(b) - tail, len(b)


def _defined_wrappers(extra: dict[str, list[str]], kernels_module: str | None) -> set[str]:
    names = {m[1] or m[2] for m in filter(None, map(_DEFINED.match, extra["section"]))}
    if kernels_module:
        names |= _wrappers(extra["kernels"])
    return names
