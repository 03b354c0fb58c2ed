"""The composite family: a short recipe of other entries' tile steps.

``recipe`` is Python over the entry's parameters: assignments, then the result expression
(``"e = exp(sub(input, amax(input))); div(e, sum(e))"``). A call applies an elementwise entry's
step, a composite entry's steps (one kernel's: tensors only, no constants; atanh's ``log1p``), a
PyPTO op itself (``pypto.log1p``: the op whose departure the log1p entry fixes up) or reduces along
the row (:data:`REDUCERS`: a [rows, 1] tile in FP32 that broadcasts over the row); names are the tensor parameters, the entry's other parameters (kernel constants) and
``cols``, the row's width. A ``Tensor | Number`` operand after the first may be a Python number: a
kernel constant then (one kernel each way), which no step may take first (PyPTO's ops take a
tensor first). ``a if approximate == 'tanh' else b`` picks a recipe by a str
parameter's value (one kernel each, chosen on the host; other values run torch). An optional
tensor (default None) that is None drops the step applying it: its result is the step's other
operand (a norm without weight).

``along`` makes a row recipe: the parameter naming the row its reductions run along, a dim
(``int``: moved last on the host) or a normalized shape (``Dims``: the trailing dims, folded
into the row; the other tensors are rows of that shape, the norm's weight and bias). A ``dtype``
parameter (torch's ``softmax(dtype=)``) makes the recipe compute in FP32 and store that dtype:
the kernel casts its tiles on chip where the cast is exact (to FP32, or to the input's dtype);
the host casts the input first where it rounds (an FP32 input to BF16), as torch does. A Number constant that may be
None (``F.rms_norm``'s eps) is FP32's epsilon when it is, as in torch. ``compute = "float32"``
computes the whole recipe in FP32.

Host layouts for elementwise recipes: ``halves = "dim"`` makes the input's two halves along that
dim the recipe's operands ``a`` and ``b`` (glu; an odd size runs torch, which raises);
``channels = ["weight"]`` names operands holding one value per channel, dim 1 of the input: the
input is read in place as [batch * channels, rest] rows and each such operand as a [channels, 1]
column broadcast along them (:func:`walks.channel_kernel`; prelu, eval-mode batch_norm). One
of ``shared`` may also hold one value for all channels (prelu's single weight); a channel operand
that may be None (batch_norm's weight) drops its step, as a row recipe's does.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import textwrap
from typing import Literal, Mapping

from torch2pypto.rules import templates, walks, wrappers
from torch2pypto.rules.calls import fallback, fallback_checks, number_for_tensor, rejection, replacement, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.steps import Apply, Step, row_reduction
from torch2pypto.rules import elementwise
from torch2pypto.rules.tile_program import Operand
from torch2pypto.schema.entry import Entry, Fields, Param, TableError, field
from torch2pypto.schema.family import Family, length_over, register


@dataclasses.dataclass(frozen=True)
class CompositeFields(Fields):
    """The table fields the composite family reads."""

    recipe: str | None = field("other entries' steps (a composite's inlined) or PyPTO ops (pypto.log1p), as Python: assignments, then the result (\"mul(input, sigmoid(input))\")")
    along: str | None = field("the parameter naming the row a row recipe reduces: a dim (int: moved last) or a normalized shape (Dims: trailing dims folded into the row)")
    halves: str | None = field("a dim whose two halves of the input are the operands a and b (glu)")
    channels: tuple[str, ...] = field("operands of one value per channel (dim 1), read as [channels, 1] columns broadcast along the rows of each channel (prelu's weight, batch_norm's statistics)", ())
    shared: tuple[str, ...] = field("channel operands that may also hold one value for all channels (prelu's single weight); others hold one per channel", ())
    compute: Literal["float32"] | None = field("float32 computes the recipe in FP32")
    output: Literal["bool"] | None = field("bool for a recipe ending in a comparison")
    positive: tuple[str, ...] = field("Number constants the kernel takes only above zero (rpow's base, whose math.log it takes); other values run torch", ())


REDUCERS = ("sum", "amax", "amin")  # row reductions a recipe may call

ROW_OPERANDS = copied("operands", "_row_operands")


class RecipeError(ValueError):
    """The recipe names something that is no step, operand or constant."""


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if not entry.fields.recipe:
        return "a composite gives its recipe"
    try:
        programs = [program(entry, entries, choice, absent) for choice, absent, _ in variants(entry)]
    except RecipeError as exc:
        return f"recipe {entry.fields.recipe!r}: {exc}"
    tensors = operands(entry)
    if any((steps[-1].step.result == "bool") != (entry.fields.output == "bool") for steps in programs):
        return "output = 'bool' is for a recipe whose result is a comparison's (bool), and only then"
    for (_, _, given), steps in zip(variants(entry), programs):
        first = next((a for a in steps if a.operands and a.operands[0] in given), None)
        if first:
            return f"pypto.{first.step.op} takes a tensor first, but {first.operands[0]!r} may be a Python number"
    used = {p.name for p in tensors} | set(constants(entry)) | set(_choices(entry))
    if entry.fields.halves:
        if entry.fields.along or entry.fields.halves not in {p.name for p in entry.params} or entry.param(entry.fields.halves).kinds != ("int",):
            return f"halves = {entry.fields.halves!r} names an int parameter (the dim split in two) of an elementwise recipe"
        if len(tensors) != 1:
            return "a recipe over halves takes one tensor"
        used.add(entry.fields.halves)
    for name in entry.fields.channels:
        if entry.fields.along or entry.fields.halves or name not in {p.name for p in tensors[1:]} or name in {p.name for p in _numeric(entry)}:
            return f"channels names {name!r}, which is no tensor operand after the input of an elementwise recipe"
    if entry.fields.channels and {p.name for p in tensors[1:]} != set(entry.fields.channels):
        return "a recipe over channels takes the input and channel operands only"
    if entry.fields.channels and any(templates.whole_tiles(p) for p in programs):
        return f"a recipe over channels cannot use ops that read whole tiles ({', '.join(sorted(templates.WHOLE_TILE_OPS))})"
    if not set(entry.fields.shared) <= set(entry.fields.channels):
        return "shared names channel operands"
    used |= {*entry.fallback, *entry.torch_only, *filter(None, [entry.forward])}
    if entry.fields.along:
        if entry.fields.along not in {p.name for p in entry.params}:
            return f"along = {entry.fields.along!r} is no parameter"
        kinds = entry.param(entry.fields.along).kinds
        if kinds not in (("int",), ("Dims",)):
            return f"along = {entry.fields.along!r} is a dim (int) or a normalized shape (Dims), not {' | '.join(kinds)}"
        if kinds == ("int",) and len(tensors) > 1:
            return "a recipe along a dim takes one tensor; rows of a normalized shape (Dims) take more"
        if any(templates.whole_tiles(p) for p in programs):
            return f"a row recipe cannot use ops that read whole tiles ({', '.join(sorted(templates.WHOLE_TILE_OPS))})"
        used |= {entry.fields.along, "dtype"}
    elif any(templates.reduces(p) for p in programs):
        return "a recipe that reduces along the row names its row (along)"
    elif any("Tensor" in p.kinds and p.default is None and p.name not in entry.fields.channels for p in tensors):
        return "optional tensors are rows of a normalized shape (along) or channel operands (channels)"
    for p in wrapper_params(entry):
        if p.name not in used:
            return f"parameter {p.name!r} is neither an operand, a name of the recipe, the row (along) nor rejected"
    for name in entry.fields.positive:
        if name not in constants(entry) or entry.param(name).kinds != ("Number",):
            return f"positive names {name!r}, which is no Number constant of the recipe"
    for p in tensors:
        if set(p.kinds) - {"Tensor", "Number"} or p is tensors[0] and p.kinds != ("Tensor",):
            return f"operand {p.name!r} takes {' | '.join(p.kinds)}: a composite's operands are tensors, or numbers after the first"
    if entry.fields.along and (_numeric(entry) or entry.fields.output):
        return "a row recipe's operands are tensors, and its result has the input's dtype"
    return None


def operands(entry: Entry) -> tuple[Param, ...]:
    return tuple(p for p in wrapper_params(entry) if "Tensor" in p.kinds)


def _tiles(entry: Entry) -> list[str]:
    """The tensors the recipe names: its operands, or the input's halves ``a`` and ``b``."""
    return ["a", "b"] if entry.fields.halves else [p.name for p in operands(entry)]


def _numeric(entry: Entry) -> tuple[Param, ...]:
    """The operands that may be Python numbers."""
    return tuple(p for p in operands(entry) if "Number" in p.kinds)


def _optional(entry: Entry) -> tuple[Param, ...]:
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
def _choices(entry: Entry) -> dict[str, tuple[str, ...]]:
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
        choices = _choices(entry)
    except SyntaxError as exc:
        raise RecipeError("not Python statements") from exc
    picks = [tuple(zip(choices, values)) for values in itertools.product(*choices.values())]
    optional = [p.name for p in _optional(entry)]
    absents = [frozenset(c) for r in range(len(optional), -1, -1) for c in itertools.combinations(optional, r)]
    numeric = [p.name for p in _numeric(entry)]
    numbers = [frozenset(c) for r in range(len(numeric) + 1) for c in itertools.combinations(numeric, r)]
    return [(pick, absent, given) for pick in picks for absent in absents for given in numbers]


def _names(entry: Entry) -> tuple[str, ...]:
    """The kernel constants the recipe may name: parameters that are no tensors, and ``cols``."""
    return (*(p.name for p in wrapper_params(entry) if "Tensor" not in p.kinds and p.name != entry.fields.along), "cols")


@per_entry
def constants(entry: Entry) -> tuple[str, ...]:
    """The constants the recipe uses, in signature order (the kernel factory's parameters)."""
    used = {n.id for n in ast.walk(ast.parse(entry.fields.recipe or "")) if isinstance(n, ast.Name)}
    choices = _choices(entry)
    return tuple(n for n in _names(entry) if n in used and n not in choices and n != "cols")


def program(entry: Entry, entries: Mapping[str, Entry], choice=(), absent: frozenset[str] = frozenset()) -> tuple[Apply, ...]:
    """The recipe as applied steps over operand and constant names; the last one is the result."""
    assigned, result = _tree(entry)
    chosen = dict(choice)
    tensors = set(_tiles(entry))
    names = {n: n for n in (*tensors, *_names(entry))}
    applied: list[Apply] = []

    def walk(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name) and (node.id in names or node.id in bound):
            return None if node.id in absent else walk_name(node.id)
        if isinstance(node, (ast.Constant, ast.UnaryOp)) and type(_number(node)) in (int, float):
            return repr(_number(node))
        if _math(node):  # math.log(other): a constant the kernel computes once
            for name in (n.id for a in node.args for n in ast.walk(a) if isinstance(n, ast.Name)):
                if name not in _names(entry) or name == "cols":
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
        if _choices(part) or constants(part) or _optional(part) or part.fields.along or part.fields.halves or part.fields.channels:
            raise RecipeError(f"{part.op} is a composite of more than one kernel, or of constants: call its steps")
        if len(args) != len(_tiles(part)):
            raise RecipeError(f"{part.op} takes {len(_tiles(part))} operand(s)")
        renames = dict(zip(_tiles(part), args))
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


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site) or fallback(site) or number_for_tensor(site, site.entry.params[1:])
    if rejected:
        return rejected
    entry = site.entry
    pypto, definitions = _built(entry)
    return Converted(replacement(site, f"pypto_{entry.op}"), definitions, pypto, wrapper_params(entry))


@per_entry
def _built(entry: Entry) -> tuple[str, tuple[Definition, ...]]:
    """The entry's PyPTO ops, and its kernels and wrapper."""
    kernels = [(_kernel_name(entry, c, a, g), c, a, g, program(entry, entry.parts, c, a)) for c, a, g in variants(entry)]
    pypto = " + ".join(dict.fromkeys(f"pypto.{a.step.op}" for *_, steps in kernels for a in steps))
    if entry.fields.channels:
        return pypto, _channel_definitions(entry, kernels)
    return pypto, _row_definitions(entry, kernels) if entry.fields.along else _definitions(entry, kernels)


def _kernel_name(entry: Entry, choice, absent, given=frozenset()) -> str:
    parts = [v for name, v in choice if v != entry.param(name).default]
    parts += [p.name for p in _optional(entry) if p.name not in absent]
    parts += [*_in_order(entry, given), "number"] if given else []
    return "_".join([entry.op, *parts, "kernel"])


def _in_order(entry: Entry, given) -> list[str]:
    """The operands given as Python numbers, in signature order."""
    return [p.name for p in _numeric(entry) if p.name in given]


def _tile(name: str) -> str:
    return "x" if name == "input" else name


def _kernel(
    entry: Entry, name: str, choice, steps: tuple[Apply, ...], inputs: list[str], vectors: list[str] = (), given=frozenset()
) -> Definition:
    """The kernel of one variant; the operands ``given`` as Python numbers are its constants."""
    inputs = [i for i in inputs if i not in given]
    steps = _on_tiles(entry, steps, given)
    row = bool(entry.fields.along)
    numbers = _in_order(entry, given)
    cast = _casts(entry)
    told = [f"{n}={v!r}" for n, v in choice] + [f"with {v}" for v in vectors] + [f"{n} a Python number" for n in numbers]
    return templates.row_kernel(
        name,
        f"{entry.op} on [rows, cols] tiles{' (' + ', '.join(told) + ')' if told else ''}"
        + (", in FP32" if any(a.step.fp32 for a in steps) else "") + f": {' + '.join(dict.fromkeys(f'pypto.{a.step.op}' for a in steps))}.",
        ", ".join(["dtype", *(["out_dtype"] if cast else []), "cols", *(["width"] if row else []), *constants(entry), *numbers]),
        [_tile(i) for i in inputs],
        steps,
        buffers=len(inputs) + len(vectors) + sum(not a.step.reduces for a in steps),  # a reduced row is one column
        vectors=[_tile(v) for v in vectors],
        out_dtype=templates.BOOL if entry.fields.output == "bool" else "out_dtype" if cast else "dtype",
    )


def _casts(entry: Entry) -> bool:
    """Whether a row recipe takes a ``dtype`` for its result (``softmax(dtype=)``)."""
    return bool(entry.fields.along) and "dtype" in {p.name for p in wrapper_params(entry)}


def _on_tiles(entry: Entry, steps: tuple[Apply, ...], given=frozenset()) -> tuple[Apply, ...]:
    """The steps over the kernel's tiles (``x_tile``...), in FP32 where the entry computes so."""
    rename = {n: f"{_tile(n)}_tile" for n in _tiles(entry) if n not in given}
    fp32 = entry.fields.compute == "float32" or _casts(entry)  # the whole recipe computes in FP32
    return tuple(
        Apply(a.target, dataclasses.replace(a.step, fp32=a.step.fp32 or fp32), tuple(rename.get(o, o) for o in a.operands))
        for a in steps
    )


def _how(entry: Entry) -> str:
    return entry.note or f"{entry.fields.recipe} over tiles".replace("; ", ", then ")


def _choose(entry: Entry, kernels, factory: str, spread: str = templates.SPREAD_ROWS) -> str:
    """Statements choosing the kernel variant for this call (str parameters, tensors given);
    `spread`: the kernels' last factory argument."""
    def made(name, given):
        numbers = "".join(f", _kernel_number({n}, x.dtype)" for n in _in_order(entry, given))
        return f"kernel = {name}({factory}{numbers}, {spread})\n"

    if len(kernels) == 1:
        return made(kernels[0][0], kernels[0][3])
    lines = []
    for i, (name, choice, absent, given, _) in enumerate(kernels):
        tests = [f"{p} == {v!r}" for p, v in choice] + [
            f"{p.name} is {'' if p.name in absent else 'not '}None" for p in _optional(entry)
        ] + [f"{'not ' if p.name in given else ''}isinstance({p.name}, torch.Tensor)" for p in _numeric(entry)]
        keyword = "if" if i == 0 else "elif" if i < len(kernels) - 1 else "else"
        head = "else:" if keyword == "else" else f"{keyword} {' and '.join(tests)}:"
        lines.append(f"{head}\n" + textwrap.indent(made(name, given), "    "))
    return "".join(lines)


def _accepted(entry: Entry) -> list[str]:
    """Guards: each str parameter has a value the recipe names."""
    return [f"{name} in {values!r}" for name, values in _choices(entry).items()]


def _nullable(entry: Entry) -> list[str]:
    """Constants that may be None: FP32's epsilon then (``F.rms_norm``'s eps: torch takes that of
    the dtype it computes in, FP32 for every kernel dtype)."""
    params = {p.name: p for p in wrapper_params(entry)}
    return [c for c in constants(entry) if params[c].default is None]


def _factory_constants(entry: Entry) -> list[str]:
    """The constants as the kernel factory takes them: numbers as floats for float tensors (pypto
    compares no int with them)."""
    kinds = {p.name: p.kinds for p in wrapper_params(entry)}
    named = [(c, f"{c}_value" if c in _nullable(entry) else c) for c in constants(entry)]
    return [f"_kernel_number({v}, x.dtype)" if "Number" in kinds[c] else v for c, v in named]


def _defaults(entry: Entry) -> str:
    return "".join(f"{c}_value = torch.finfo(torch.float32).eps if {c} is None else {c}\n" for c in _nullable(entry))


def _definitions(entry: Entry, kernels) -> tuple[Definition, ...]:
    """Elementwise composites: the tensors broadcast on the host, one kernel per variant."""
    params = wrapper_params(entry)
    names = [p.name for p in operands(entry)]
    whole = any(templates.whole_tiles(steps) for *_, steps in kernels)
    defined = [_kernel(entry, name, choice, steps, _tiles(entry), given=given) for name, choice, _, given, steps in kernels]
    factory = ", ".join(["_PYPTO_ALL_DTYPES[x.dtype]", "x.shape[1]", *_factory_constants(entry)])
    layout, placed = _layout(entry)
    body = (
        layout
        + f"rows, shape, order = _broadcast_rows({', '.join(_tiles(entry))})\n"
        + "x = rows[0]\n"
        + _defaults(entry)
        + f"result, out = _result_rows(shape, order, {'torch.bool' if entry.fields.output == 'bool' else 'x.dtype'}, x.device)\n"
        + _choose(entry, kernels, factory, templates.WHOLE_SPREAD_ROWS if whole else templates.SPREAD_ROWS)
        + "_launch(kernel, *rows, out)\n"
        "return result\n"
    )
    spelled = ", ".join(names)
    declared = ", ".join(f"torch.{d}" for d in entry.dtypes) + ("," if len(entry.dtypes) == 1 else "")
    numeric = [p.name for p in _numeric(entry)]
    taken = ", ".join([n for n in names if n not in numeric] + ([f"numbers=({', '.join(numeric)},)"] if numeric else []))
    positive = [f"isinstance({name}, (int, float)) and 0 < {name} < float('inf')" for name in entry.fields.positive]
    guard = " and ".join([*_accepted(entry), f"_kernel_operands(({declared}), {taken})", *positive, *placed])
    requires = ["_kernel_operands", "_broadcast_rows", "_kernel_number", *(d.name for d in defined)]
    how = _how(entry) + (". Tensors broadcast on the host" if len(names) > 1 else "") + (
        ", Python numbers are kernel constants" if numeric else "")
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), how, spelled,
        wrappers.torch_call(entry, params), f"({guard})" if " and " in guard else guard, body, tuple(requires),
    )
    if any("math." in a for *_, steps in kernels for step in steps for a in step.operands):
        defined = [dataclasses.replace(d, imports=("math",)) for d in defined]
    return (*defined, wrapper)


def _layout(entry: Entry) -> tuple[str, list[str]]:
    """The host statements laying out the recipe's tensors, and the guards they need."""
    if entry.fields.halves:
        dim = entry.fields.halves
        return f"a, b = input.chunk(2, {dim})\n", ["input.dim() > 0", f"input.shape[{dim}] % 2 == 0"]
    return "", []


def _channel_definitions(entry: Entry, kernels) -> tuple[Definition, ...]:
    """Channel composites: the input read in place as [batch * channels, rest] rows, each channel
    operand as a [channels, 1] column (:func:`walks.channel_kernel`), one kernel per set of
    optional operands given."""
    params = wrapper_params(entry)
    channels = list(entry.fields.channels)
    defined = []
    for name, choice, absent, _, steps in kernels:
        present = [c for c in channels if c not in absent]
        told = [f"{n}={v!r}" for n, v in choice] + [f"without {c}" for c in channels if c in absent]
        steps = _on_tiles(entry, steps)
        doc = (f"{entry.op} on the rows of each channel{' (' + ', '.join(told) + ')' if told else ''}"
               + (", in FP32" if any(a.step.fp32 for a in steps) else "") + f": {' + '.join(dict.fromkeys(f'pypto.{a.step.op}' for a in steps))}.")
        defined.append(walks.channel_kernel(name, doc, ", ".join(["dtype", "cols", "count", *constants(entry)]), present, steps,
                                                buffers=2 + len(present) + len(steps)))
    optional = {p.name for p in _optional(entry)}
    factory = ", ".join(["_PYPTO_DTYPES[x.dtype]", "cols", "count", *_factory_constants(entry)])
    spelled = ", ".join(["input", *channels])
    declared = ", ".join(f"torch.{d}" for d in entry.dtypes) + ("," if len(entry.dtypes) == 1 else "")
    given = ", ".join(f"{c}" if c not in optional else f"*([] if {c} is None else [{c}])" for c in channels)
    guards = [*_accepted(entry), f"_kernel_operands(({declared}), input, {given})", "input.dim() > 0"]
    for c in channels:  # torch's rule: one value per channel (dim 1), or one for all where shared
        size = f"{c}.numel() in (1, count)" if c in entry.fields.shared else f"{c}.numel() == count"
        guards.append(f"({c} is None or {c}.dim() <= 1 and {size})" if c in optional else f"{c}.dim() <= 1 and {size}")
    guards += fallback_checks(entry)
    columns = ", ".join(f"{c}" if c not in optional else f"*([] if {c} is None else [{c}])" for c in channels)
    body = (
        "cols = math.prod(input.shape[2:]) if input.dim() > 1 else input.numel()\n"
        "x = input.reshape(-1, cols).contiguous()\n"
        f"columns = [c.reshape(-1, 1) if c.numel() == count else c.reshape(1, 1).expand(count, 1).contiguous() for c in ({columns},)]\n"
        + _defaults(entry)
        + "out = torch.empty(x.shape, dtype=x.dtype, device=x.device)\n"
        + _choose(entry, kernels, factory)
        + "_launch(kernel, x, *columns, out)\n"
        "return _in_layout_of(out.reshape(input.shape), input)\n"
    )
    prologue = "count = input.shape[1] if isinstance(input, torch.Tensor) and input.dim() > 1 else 1  # channels: dim 1\n"
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), entry.note or f"{_how(entry)}, one value per channel (dim 1) broadcast along its rows",
        spelled, wrappers.torch_call(entry, params), f"({' and '.join(guards)})", body,
        ("_kernel_operands", "_kernel_number", "_in_layout_of", *(d.name for d in defined)), prologue=prologue,
    )
    return (*defined, dataclasses.replace(wrapper, imports=("math",)))


def _row_definitions(entry: Entry, kernels) -> tuple[Definition, ...]:
    """Row composites: the row moved last (a dim) or folded (a normalized shape), read in place in
tiles 32 bytes wide (_row_width) whose valid shape is the row."""
    params = wrapper_params(entry)
    names = [p.name for p in operands(entry)]
    rows = names[1:]
    defined = [_kernel(entry, name, choice, steps, ["input"], [r for r in rows if r not in absent]) for name, choice, absent, _, steps in kernels]
    casts = _casts(entry)
    out_dtype = "x.dtype if dtype is None else dtype" if casts else "x.dtype"
    factory = ", ".join(["_PYPTO_DTYPES[x.dtype]", *(["_PYPTO_DTYPES[out.dtype]"] if casts else []), "cols", "_row_width(cols, x.dtype)", *_factory_constants(entry)])
    dim = entry.param(entry.fields.along).kinds == ("int",)
    # a cast to FP32 (or to the input's dtype) is exact: the kernel makes it on chip
    cast = "input if dtype in (None, torch.float32, input.dtype) else input.to(dtype)" if casts else "input"
    guards = _accepted(entry)
    if dim:
        prologue = ""
        guards += [f"{entry.fields.along} is not None", "input.dim() > 0"]
        if casts:
            guards.append("(dtype is None or dtype in _PYPTO_DTYPES)")
        guards += ["_on_kernel_path(input)"]
        body = (
            f"moved = ({cast}).movedim({entry.fields.along}, -1)\n"
            "cols = moved.shape[-1]\n"
            "x = _as_rows(moved)\n"
        )
        shaped = f"out.reshape(moved.shape).movedim(-1, {entry.fields.along}).contiguous()"
    else:
        shape = entry.fields.along
        prologue = f"shape = ({shape},) if isinstance({shape}, int) else tuple({shape})\n"
        guards += [f"_row_operands(input, shape{''.join(', ' + r for r in rows)})"]
        body = (
            "cols = math.prod(shape)\n"
            f"x = ({cast}).reshape(-1, cols).contiguous()\n"
            + (f"rows = [r.reshape(1, cols).contiguous() for r in ({', '.join(rows)}{',' if len(rows) == 1 else ''}) if r is not None]\n" if rows else "")
        )
        shaped = "out.reshape(input.shape)"
    body += (
        _defaults(entry)
        + f"out = torch.empty(x.shape, dtype={out_dtype}, device=x.device)\n"
        + _choose(entry, kernels, factory)
        + f"_launch(kernel, x, {'*rows, ' if rows and not dim else ''}out)\n"
        f"return _in_layout_of({shaped}, input)\n"
    )
    spelled = ", ".join(names)
    requires = ["_as_rows", "_row_width", "_in_layout_of", "_kernel_number", *(d.name for d in defined), *([] if dim else ["_row_operands"])]
    along = "the dim moved last" if dim else "the normalized dims folded into rows"
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), entry.note or f"{_how(entry)}, along {along}",
        spelled, wrappers.torch_call(entry, params), f"({' and '.join(guards)})", body, tuple(requires), prologue=prologue,
    )
    extra = () if dim else (ROW_OPERANDS,)
    wrapper = dataclasses.replace(wrapper, imports=("math",)) if not dim else wrapper
    return (*defined, templates.ROW_WIDTH, *extra, wrapper)


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


def fuse(builder, entry: Entry, bound, env) -> Operand:
    """The recipe's steps in a fused region."""
    return builder.composite(entry, bound, env)


def reduced_length(entry: Entry, shape: tuple[int, ...], dim) -> int:
    """A row recipe's row: the normalized shape's (the last dim here) or ``dim``'s values."""
    along = entry.fields.along
    if not along:
        return 1
    return shape[-1] if along == "normalized_shape" else length_over(shape, dim)


def definitions(entry: Entry) -> tuple[Definition, ...]:
    return _built(entry)[1]


register(Family("composite", CompositeFields, rewrite, problem, parts=parts, fuse=fuse, accumulates="sum",
                reduced_length=reduced_length, definitions=definitions))
