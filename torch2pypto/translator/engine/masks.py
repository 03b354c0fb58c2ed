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

from torch2pypto.rules.attention import CAUSAL_MASKS

NAMES = ("pypto_causal_mask", "pypto_causal_mask_maker")
DEFINITION = CAUSAL_MASKS
_CREATES = ("create_causal_mask", "create_sliding_window_causal_mask")
_BINDERS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def defer(outline: ast.Module, tree: ast.Module, lines, edits) -> list[tuple[int, int, str]]:
    """The edits that read ``tree``'s masks through pypto_causal_mask (``outline``: the module's
    top-level imports; ``edits``: (start, end, new) made already, which these must not overlap)."""
    names = _imported(outline) - _rebound(tree)
    if not names:
        return []
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    made = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load)):
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in NAMES:
            continue  # translated already
        start, end = lines.offset(*lines.span(node)[:2]), lines.offset(*lines.span(node)[2:])
        if isinstance(parent, ast.Call) and parent.func is node and lines.text[end:end + 1] == "(":
            rest = "" if not (parent.args or parent.keywords) else "," if lines.text[end + 1:end + 2] in "\r\n" else ", "
            made.append((start, end + 1, f"pypto_causal_mask({node.id}{rest}"))
        else:
            made.append((start, end, f"pypto_causal_mask_maker({node.id})"))
    taken = [(s, e) for s, e, _ in edits]
    return [] if any(s < e2 and s2 < e for s, e, _ in made for s2, e2 in taken) else sorted(made)


def _imported(outline: ast.Module) -> set[str]:
    """The names the module's top-level imports from transformers' masking_utils bind to the masks."""
    return {a.asname or a.name for s in outline.body if isinstance(s, ast.ImportFrom) and _masking_utils(s)
            for a in s.names if a.name in _CREATES}


def _masking_utils(statement: ast.ImportFrom) -> bool:
    module = statement.module or ""
    return module == "transformers.masking_utils" or statement.level > 0 and module.rsplit(".", 1)[-1] == "masking_utils"


def _rebound(tree: ast.Module) -> set[str]:
    """The names ``tree`` binds other than by a from-import of masking_utils (the masks' names
    these hold are not transformers')."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, _BINDERS):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, ast.Import) or isinstance(node, ast.ImportFrom) and not _masking_utils(node):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return bound
