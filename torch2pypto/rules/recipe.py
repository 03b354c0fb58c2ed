"""The composite family's recipes (:mod:`torch2pypto.rules.composite`): a recipe parsed into applied steps.

A recipe names tensor operands, kernel constants, other entries' steps, PyPTO ops and row
reducers; each kernel variant (str parameter values, absent optional tensors, operands given as
Python numbers) is one program of :class:`Apply` steps whose last is the result.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
from typing import Mapping

from torch2pypto.rules import elementwise
from torch2pypto.rules.calls import wrapper_params
from torch2pypto.rules.codegen import per_entry
from torch2pypto.rules.steps import Apply, Step, row_reduction
from torch2pypto.schema.entry import Entry, Param, TableError


REDUCERS = ("sum", "amax", "amin")  # row reductions a recipe may call


class RecipeError(ValueError):
    """The recipe names something that is no step, operand or constant."""


def operands(entry: Entry) -> tuple[Param, ...]:
    """The parameters that take tensors: the recipe's operands."""
    return tuple(p for p in wrapper_params(entry) if "Tensor" in p.kinds)


def tensor_names(entry: Entry) -> list[str]:
    """The tensors the recipe names: its operands, or the input's halves ``a`` and ``b``."""
    return ["a", "b"] if entry.fields.halves else [p.name for p in operands(entry)]


def number_operands(entry: Entry) -> tuple[Param, ...]:
    """The operands that may be Python numbers."""
    return tuple(p for p in operands(entry) if "Number" in p.kinds)


def optional_operands(entry: Entry) -> tuple[Param, ...]:
    """The operands that may be None (a norm's weight)."""
    return tuple(p for p in operands(entry) if p.default is None)


def _tree(entry: Entry) -> tuple[list[tuple[str, ast.expr]], ast.expr]:
    """The recipe's assignments and its result expression."""
    try:
        body = ast.parse(entry.fields.recipe or "").body
    except SyntaxError as exc:
        raise RecipeError("not Python statements") from exc
    if not body or not isinstance(body[-1], ast.Expr):
        raise RecipeError("a recipe ends with its result expression")
    assigned = []
    for statement in body[:-1]:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)):
            raise RecipeError(f"{ast.unparse(statement)} is no assignment to a name")
        assigned.append((statement.targets[0].id, statement.value))
    return assigned, body[-1].value


@per_entry
def str_choices(entry: Entry) -> dict[str, tuple[str, ...]]:
    """str parameter -> the values the recipe's conditions name (its default first)."""
    seen: dict[str, list[str]] = {}
    for node in ast.walk(ast.parse(entry.fields.recipe or "")):
        if isinstance(node, ast.IfExp):
            name, value = _condition(entry, node.test)
            seen.setdefault(name, [entry.param(name).default])
            if value not in seen[name]:
                seen[name].append(value)
    return {name: tuple(values) for name, values in seen.items()}


def _condition(entry: Entry, test: ast.expr) -> tuple[str, str]:
    if (
        isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq) and isinstance(test.comparators[0], ast.Constant)
        and isinstance(test.comparators[0].value, str)
        and test.left.id in {p.name for p in entry.params if p.kinds == ("str",)}
    ):
        return test.left.id, test.comparators[0].value
    raise RecipeError(f"{ast.unparse(test)} is no comparison of a str parameter with a string")


def variants(entry: Entry) -> list[tuple[tuple[tuple[str, str], ...], frozenset[str], frozenset[str]]]:
    """(str parameter values, absent optional tensors, operands given as numbers) of each kernel,
    the defaults and all tensors first."""
    try:
        choices = str_choices(entry)
    except SyntaxError as exc:
        raise RecipeError("not Python statements") from exc
    picks = [tuple(zip(choices, values)) for values in itertools.product(*choices.values())]
    optional = [p.name for p in optional_operands(entry)]
    absents = [frozenset(c) for r in range(len(optional), -1, -1) for c in itertools.combinations(optional, r)]
    numeric = [p.name for p in number_operands(entry)]
    numbers = [frozenset(c) for r in range(len(numeric) + 1) for c in itertools.combinations(numeric, r)]
    return [(pick, absent, given) for pick in picks for absent in absents for given in numbers]


def constant_names(entry: Entry) -> tuple[str, ...]:
    """The kernel constants the recipe may name: parameters that are no tensors, and ``cols``."""
    return (*(p.name for p in wrapper_params(entry) if "Tensor" not in p.kinds and p.name != entry.fields.along), "cols")


@per_entry
def constants(entry: Entry) -> tuple[str, ...]:
    """The constants the recipe uses, in signature order (the kernel factory's parameters)."""
    used = {n.id for n in ast.walk(ast.parse(entry.fields.recipe or "")) if isinstance(n, ast.Name)}
    choices = str_choices(entry)
    return tuple(n for n in constant_names(entry) if n in used and n not in choices and n != "cols")


def program(entry: Entry, entries: Mapping[str, Entry], choice=(), absent: frozenset[str] = frozenset()) -> tuple[Apply, ...]:
    """The recipe as applied steps over operand and constant names; the last one is the result."""
    assigned, result = _tree(entry)
    chosen = dict(choice)
    tensors = set(tensor_names(entry))
    names = {n: n for n in (*tensors, *constant_names(entry))}
    applied: list[Apply] = []

    def walk(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name) and (node.id in names or node.id in bound):
            return None if node.id in absent else walk_name(node.id)
        if isinstance(node, (ast.Constant, ast.UnaryOp)) and type(_number(node)) in (int, float):
            return repr(_number(node))
        if _math(node):  # math.log(other): a constant the kernel computes once
            for name in (n.id for a in node.args for n in ast.walk(a) if isinstance(n, ast.Name)):
                if name not in constant_names(entry) or name == "cols":
                    raise RecipeError(f"{ast.unparse(node)} takes constants only, not {name!r}")
            return ast.unparse(node)
        if isinstance(node, ast.IfExp):
            name, value = _condition(entry, node.test)
            return walk(node.body if chosen.get(name) == value else node.orelse)
        if isinstance(node, ast.Call) and (isinstance(node.func, ast.Name) or _pypto(node)) and not node.keywords:
            args = [walk(a) for a in node.args]
            if None in args:  # an absent optional tensor: the step is the identity on its other operand
                given = [a for a in args if a is not None]
                if len(given) != 1:
                    raise RecipeError(f"{ast.unparse(node)} drops an absent tensor but has not one other operand")
                return given[0]
            if _pypto(node):
                return apply(Step(node.func.attr), args)
            part = entries.get(node.func.id)
            if part is not None and part.family == "composite":
                return inline(part, args)
            step, arity = _step(node.func.id, entries)
            if len(args) != arity:
                raise RecipeError(f"{ast.unparse(node)}: {node.func.id} takes {arity} operand(s)")
            return apply(step, args)
        raise RecipeError(f"{ast.unparse(node)} is no operand, constant, number or call of an elementwise entry, composite or reducer")

    def apply(step: Step, args) -> str:
        target = f"t{len(applied)}"
        applied.append(Apply(target, step, tuple(args)))
        return target

    def inline(part: Entry, args) -> str:
        """A composite part's steps on these operands (one kernel's: tensors only, no constants)."""
        if str_choices(part) or constants(part) or optional_operands(part) or part.fields.along or part.fields.halves or part.fields.channels:
            raise RecipeError(f"{part.op} is a composite of more than one kernel, or of constants: call its steps")
        if len(args) != len(tensor_names(part)):
            raise RecipeError(f"{part.op} takes {len(tensor_names(part))} operand(s)")
        renames = dict(zip(tensor_names(part), args))
        for a in program(part, part.parts):
            fp32 = a.step.fp32 or part.fields.compute == "float32"
            renames[a.target] = apply(dataclasses.replace(a.step, fp32=fp32), [renames.get(o, o) for o in a.operands])
        return renames["result"]

    bound = dict(assigned)  # walked where first used, so a branch not taken adds no steps

    def walk_name(name: str) -> str | None:
        if name not in names:
            names[name] = walk(bound.pop(name))
        return names[name]

    last = walk(result)
    if not applied or last != applied[-1].target:
        raise RecipeError("the result is no step's")
    *rest, final = applied
    return (*rest, Apply("result", final.step, final.operands))


def stages(entry: Entry, steps: tuple[Apply, ...]) -> tuple[tuple[Apply, ...], tuple[Apply, ...]]:
    """A grouped recipe's program (``groups``) cut before its first step on a channel operand:
    the steps over each group's row, their last one's target ``result``, and the steps applying
    the channel operands to it, which they read as ``input`` (none: the rows' result is the
    recipe's)."""
    channels = set(entry.fields.channels)
    cut = next((k for k, a in enumerate(steps) if channels & set(a.operands)), len(steps))
    if cut == len(steps):
        return steps, ()
    rows, applied = steps[:cut], steps[cut:]
    earlier = {*(a.target for a in rows[:-1]), *(set(tensor_names(entry)) - channels)}
    if not rows or any(a.step.reduces or earlier & set(a.operands) for a in applied):
        raise RecipeError("from its first step on a channel operand, a grouped recipe reads only channel operands and the result of the steps before, and reduces nothing")
    last = rows[-1].target
    return (*rows[:-1], Apply("result", rows[-1].step, rows[-1].operands)), tuple(
        Apply(a.target, a.step, tuple("input" if o == last else o for o in a.operands)) for a in applied)


def _pypto(node: ast.Call) -> bool:
    """Whether the call names a PyPTO op itself (``pypto.log1p(x)``), not a table entry's step."""
    return isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and node.func.value.id == "pypto"


def _math(node: ast.expr) -> bool:
    """Whether the node is a call of a function of Python's math module (``math.log(other)``)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.keywords
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "math")


def _number(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _step(name: str, entries: Mapping[str, Entry]) -> tuple[Step, int]:
    """The step a recipe's call applies, and how many operands it takes."""
    if name in REDUCERS:
        return row_reduction(name), 1
    part = entries.get(name)
    if part is None or part.family != "elementwise":
        raise RecipeError(f"{name} is no elementwise entry of the table nor a reducer ({', '.join(REDUCERS)})")
    if part.fields.order:
        raise RecipeError(f"{name} takes its operands in an order of its own (order): call where directly")
    return elementwise.step(part), len(elementwise.operands(part))


def parts(entry: Entry, entries: Mapping[str, Entry]) -> tuple[str, ...]:
    """The entries the recipe calls."""
    if not entry.fields.recipe:
        return ()
    try:
        tree = ast.parse(entry.fields.recipe)
    except SyntaxError as exc:
        raise TableError(f"{entry.op}: recipe {entry.fields.recipe!r} is not Python statements") from exc
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return tuple(op for op in sorted(called) if op in entries)
