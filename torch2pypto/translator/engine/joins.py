"""Paired joins: two statements in a row, each assigning a torch.cat of a literal list along one dim.

A DynamicCache's update::

    self.keys = torch.cat([self.keys, key_states], dim=-2)
    self.values = torch.cat([self.values, value_states], dim=-2)

Each statement is ``target = torch.cat([...], dim)`` on lines of its own (a name or an attribute
assigned, no comment), its list as long as the other's, the same literal dim; the tensors hold
no call and no other pending call site, and the second reads nothing the first assigns. One
statement replaces both, ``self.keys, self.values = <wrapper>(...)``: the tensors are evaluated
before either target is assigned, which the second reading neither target makes the same. One
launch of :mod:`torch2pypto.rules.joins` for both; ``--no-fuse`` keeps one per join.
"""

from __future__ import annotations

import ast
import bisect

from torch2pypto.rules import joins
from torch2pypto.rules.fusion import name_of
from torch2pypto.rules.movement import MAX_INPUTS
from torch2pypto.rules.tile_program import ROWS, Param
from torch2pypto.translator.engine.linears import dotted, pending_call, source_text, wrapper_param
from torch2pypto.translator.engine.report import CONVERTED
from torch2pypto.translator.engine.syntax import comments

_EVALUATES = (ast.Call, ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.Starred,
              ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)  # what a tensor read ahead must not hold


def paired_joins(finder, statements: list[ast.stmt], i: int, found) -> int:
    """2 if statements ``i`` and ``i + 1`` are a pair of joins (its region, edit and definitions
    added to ``found``), else 0."""
    if i + 1 >= len(statements):
        return 0
    pair = [_join(finder, s) for s in statements[i : i + 2]]
    if None in pair:
        return 0
    (_, first, tensors, dim), (_, second, others, other_dim) = pair
    if dim != other_dim or len(tensors) != len(others) or not _apart(first, second, statements[i + 1]):
        return 0
    edit = _edit(finder, statements[i], statements[i + 1])
    if edit is None:
        return 0
    params: dict[str, Param] = {}
    names = [[wrapper_param(finder, params, t, ROWS) for t in join] for join in (tensors, others)]
    torch_source = "return " + ", ".join(f"torch.cat([{', '.join(n)}], dim={dim})" for n in names) + "\n"
    wrapper = name_of(finder.function.name, torch_source, 2)
    where = f"{finder.function.name}'s paired joins"
    definitions = joins.definitions(wrapper, where, pair[0][0].resolved.entry, names, dim, [p.name for p in params.values()], torch_source)
    for attempt, *_ in pair:
        attempt.status, attempt.reason, attempt.pypto_api = CONVERTED, "", f"{wrapper} (fused)"
        finder.pending.pop(attempt.span, None)
    from torch2pypto.translator.engine.regions import Region  # regions calls this module

    span = (*finder.lines.span(statements[i])[:2], *finder.lines.span(statements[i + 1])[2:])
    rank = dim + 1 if dim >= 0 else -dim  # the operands' least rank: verify's samples
    found.regions.append(Region(finder.path, span, finder.function.name, ("cat", "cat"), wrapper, joins.kernel_name(len(tensors)),
                                tuple(params.values()), ("cat",), rank=rank))
    start, end = edit
    call = f"{wrapper}({', '.join(p.source for p in params.values())})"
    found.edits.append((start, end, f"{source_text(finder, statements[i].targets[0])}, {source_text(finder, statements[i + 1].targets[0])} = {call}"))
    found.definitions.extend((start, d) for d in definitions)
    return 2


def _join(finder, statement: ast.stmt):
    """(attempt, target, tensors, dim) of ``target = torch.cat([...], dim)``, a pending site of a
    literal list or tuple of two tensors or more (half a join kernel's most inputs at most), of a
    literal dim; else None."""
    if type(statement) is not ast.Assign or len(statement.targets) != 1 or not dotted(statement.targets[0]):
        return None
    found = pending_call(finder, statement.value, "cat")
    if found is None:
        return None
    attempt, bound = found
    tensors, dim = bound.get("tensors"), bound.get("dim")
    if set(bound) - {"tensors", "dim"} or type(tensors) not in (ast.List, ast.Tuple) or not 2 <= len(tensors.elts) <= MAX_INPUTS // 2:
        return None
    try:
        dim = 0 if dim is None else ast.literal_eval(dim)
    except ValueError:
        return None
    if type(dim) is not int or any(isinstance(n, _EVALUATES) for t in tensors.elts for n in ast.walk(t)):
        return None
    line, column, end_line, end_column = finder.lines.span(statement)
    spans = finder.starts[bisect.bisect_left(finder.starts, (line,)) : bisect.bisect_left(finder.starts, (end_line + 1,))]
    if any(s in finder.pending and s != attempt.span and (line, column) <= s[:2] and s[2:] <= (end_line, end_column) for s in spans):
        return None  # another site in it: its rewrite would overlap the pair's
    return attempt, statement.targets[0], tensors.elts, dim


def _apart(first: ast.expr, second: ast.expr, statement: ast.Assign) -> bool:
    """Whether ``statement``, which assigns ``second``, reads nothing ``first`` (a name or an
    attribute) names and assigns another target."""
    assigned = _path(first)
    if _path(second) == assigned or _path(second).startswith(assigned + "."):
        return False
    return not any(_path(n) == assigned for n in ast.walk(statement.value) if type(n) in (ast.Name, ast.Attribute))


def _path(node: ast.expr) -> str | None:
    """``self.keys`` of an attribute of attributes of a name, the name of a name, else None."""
    parts = []
    while type(node) is ast.Attribute:
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if type(node) is ast.Name else None


def _edit(finder, first: ast.stmt, second: ast.stmt) -> tuple[int, int] | None:
    """Where the statement replacing ``first`` and ``second`` goes (their text), if each stands on
    lines of its own, the second right below the first, at its indent, and no comment is in them."""
    (start, first_end), (second_start, end) = (_offsets(finder, s) for s in (first, second))
    text = finder.text
    line = text.rfind("\n", 0, start) + 1
    indent = text[line:start]
    if indent.strip() or second.lineno != first.end_lineno + 1 or second.col_offset != first.col_offset:
        return None
    between = text[first_end:second_start]
    after = text[end : text.find("\n", end) % (len(text) + 1)]
    if between.strip() or after.strip() or comments(text[start:end]):
        return None
    return start, end


def _offsets(finder, statement: ast.stmt) -> tuple[int, int]:
    """The offsets in the text where ``statement`` starts and ends."""
    line, column, end_line, end_column = finder.lines.span(statement)
    return finder.lines.offset(line, column), finder.lines.offset(end_line, end_column)
