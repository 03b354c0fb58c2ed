"""transformers' causal masks deferred to the attention kernel.

A module that imports ``create_causal_mask`` or ``create_sliding_window_causal_mask`` from
transformers' masking_utils (and binds the name nowhere else) reads them through the attention
family's ``pypto_causal_mask`` (:mod:`torch2pypto.runtime.masks`): a call ``create(...)`` becomes
``pypto_causal_mask(create, ...)``, any other read ``pypto_causal_mask_maker(create)`` (mistral's
``mask_function = create_causal_mask if ... else create_sliding_window_causal_mask``). Where the
call would build the plain causal (windowed) mask for sdpa, it returns that mask deferred, which
the attention kernel computes in its tiles; any other use builds it as transformers does.
"""

from __future__ import annotations

import ast
import bisect
import re

from torch2pypto.rules.attention import CAUSAL_MASKS
from torch2pypto.translator.engine.scopes import children, walk

NAMES = ("pypto_causal_mask", "pypto_causal_mask_maker")
DEFINITION = CAUSAL_MASKS
_CREATES = ("create_causal_mask", "create_sliding_window_causal_mask")
_BINDERS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_REBINDING = frozenset({*_BINDERS, ast.arg, ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom})  # what _rebinds reads


def defer(imported: frozenset[str], tree: ast.Module, lines, edits) -> list[tuple[int, int, str]]:
    """The edits that read ``tree``'s masks through pypto_causal_mask (``imported``: the names
    the module's top-level imports bind to them, :func:`imported`; ``edits``: (start, end, new)
    made already, which these must not overlap)."""
    if not imported:
        return []
    names = set(imported)
    reads, bound, called, translated = [], set(), {}, set()  # one walk: a module imports the masks in most of the zoo
    for node in _spelling(names, tree, lines):
        kind = type(node)
        if kind is ast.Name:
            if type(node.ctx) is ast.Load:
                if node.id in names:
                    reads.append(node)
            else:
                bound.add(node.id)
        elif kind is ast.Call:
            if type(node.func) is ast.Name:
                called[node.func] = node
                if node.func.id in NAMES:  # translated already: its name and arguments
                    translated.update((node.func, *node.args))
        elif kind in _REBINDING:
            _rebinds(node, bound)
    names -= bound
    made = []
    for node in reads:
        if node.id not in names or node in translated:
            continue
        start, end = lines.offset(*lines.span(node)[:2]), lines.offset(*lines.span(node)[2:])
        call = called.get(node)
        if call is not None and lines.text[end:end + 1] == "(":
            rest = "" if not (call.args or call.keywords) else "," if lines.text[end + 1:end + 2] in "\r\n" else ", "
            made.append((start, end + 1, f"pypto_causal_mask({node.id}{rest}"))
        else:
            made.append((start, end, f"pypto_causal_mask_maker({node.id})"))
    taken = [(s, e) for s, e, _ in edits]
    return [] if any(s < e2 and s2 < e for s, e, _ in made for s2, e2 in taken) else sorted(made)


def _spelling(names: set[str], tree: ast.Module, lines) -> list[ast.AST]:
    """The nodes of ``tree`` that may read, bind or call one of ``names``: those of the statements on
    whose lines one is written, the statements nested in these only where one is written on theirs
    (a line beyond ASCII counts as one: Python normalizes the names written there). Only the
    lines of ``tree`` (a chunk of a large module) are searched: no name spans a line."""
    if not tree.body:
        return []
    first = min([tree.body[0].lineno, *(d.lineno for d in getattr(tree.body[0], "decorator_list", ()))])
    start = lines.starts[first - 1]
    end = lines.starts[tree.body[-1].end_lineno] if tree.body[-1].end_lineno < len(lines.starts) else len(lines.text)
    pattern = re.compile("|".join(map(re.escape, sorted(names))))
    found = {bisect.bisect_right(lines.starts, m.start()) for m in pattern.finditer(lines.text, start, end)}
    found = sorted(found | lines.wide)
    nodes, statements = [], list(tree.body)
    while statements:
        statement = statements.pop()
        first = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))])
        at = bisect.bisect_left(found, first)
        if at == len(found) or found[at] > statement.end_lineno:
            continue
        nodes.append(statement)
        for child in children(statement):
            if isinstance(child, (ast.stmt, ast.excepthandler)):
                statements.append(child)
            else:
                nodes += walk(child)
    return nodes


def imported(outline: ast.Module) -> frozenset[str]:
    """The names the module's top-level imports from transformers' masking_utils bind to the
    masks (``outline``: its top-level statements; read once per module, not per chunk)."""
    return frozenset({a.asname or a.name for s in outline.body if isinstance(s, ast.ImportFrom) and _masking_utils(s)
            for a in s.names if a.name in _CREATES})


def _masking_utils(statement: ast.ImportFrom) -> bool:
    module = statement.module or ""
    return module == "transformers.masking_utils" or statement.level > 0 and module.rsplit(".", 1)[-1] == "masking_utils"


def _rebinds(node: ast.AST, bound: set[str]) -> None:
    """Add to ``bound`` the names ``node`` (not a name) binds other than by a from-import of
    masking_utils (the masks' names these hold are not transformers')."""
    if isinstance(node, _BINDERS):
        bound.add(node.name)
    elif isinstance(node, ast.arg):
        bound.add(node.arg)
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        bound.update(node.names)
    elif isinstance(node, ast.Import) or isinstance(node, ast.ImportFrom) and not _masking_utils(node):
        bound.update((a.asname or a.name).split(".")[0] for a in node.names)
