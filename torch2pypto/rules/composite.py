"""The composite family: a short recipe of other entries' tile steps.

``recipe`` is an expression over the entry's operands, numbers and other elementwise entries
(``"mul(input, sigmoid(input))"``): each call applies that entry's step, so a composite reuses
the steps of its parts. The kernel and wrapper are the elementwise family's.
"""

from __future__ import annotations

import ast
from typing import Mapping

from torch2pypto.mapping import Entry
from torch2pypto.rules import elementwise
from torch2pypto.rules.calls import rejection, replacement, wrapper_params
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.steps import Apply


class RecipeError(ValueError):
    """The recipe names something that is no elementwise step or operand."""


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if not entry.recipe:
        return "a composite gives its recipe"
    try:
        program(entry, entry.parts)
    except RecipeError as exc:
        return f"recipe {entry.recipe!r}: {exc}"
    return elementwise.problem(entry, entries)


def program(entry: Entry, entries: Mapping[str, Entry]) -> tuple[Apply, ...]:
    """The recipe as applied steps over the operand names; the last one is the result."""
    try:
        tree = ast.parse(entry.recipe or "", mode="eval").body
    except SyntaxError as exc:
        raise RecipeError("not an expression") from exc
    names = {p.name for p in elementwise.operands(entry)} | {p.name for p in elementwise.constants(entry)}
    applied: list[Apply] = []

    def walk(node: ast.expr) -> str:
        if isinstance(node, ast.Name) and node.id in names:
            return node.id
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return repr(node.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            part = entries.get(node.func.id)
            if part is None or part.family != "elementwise":
                raise RecipeError(f"{node.func.id} is no elementwise entry of the table")
            operands = tuple(walk(a) for a in node.args)
            target = "result" if node is tree else f"t{len(applied)}"
            applied.append(Apply(target, elementwise.step(part), operands))
            return target
        raise RecipeError(f"{ast.unparse(node)} is no operand, number or call of an elementwise entry")

    if not isinstance(tree, ast.Call):
        raise RecipeError("a recipe is a call")
    walk(tree)
    return tuple(applied)


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site)
    if rejected:
        return rejected
    entry = site.entry
    steps = program(entry, entry.parts)
    how = f"{entry.recipe} over tiles"
    pypto = " + ".join(f"pypto.{a.step.op}" for a in steps)
    return Converted(replacement(site, f"pypto_{entry.op}"), elementwise.definitions(entry, steps, how), pypto, wrapper_params(entry))

