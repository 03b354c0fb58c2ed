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
computes the whole recipe in FP32. A row recipe's result takes the input's strides, as an
elementwise op's does (normalize), unless ``contiguous``: torch's own kernel writes softmax and
the norms contiguous whatever the input's strides.

Host layouts for elementwise recipes: ``halves = "dim"`` makes the input's two halves along that
dim the recipe's operands ``a`` and ``b`` (glu; an odd size runs torch, which raises);
``channels = ["weight"]`` names operands holding one value per channel, dim 1 of the input: the
input is read in place as [batch * channels, rest] rows and each such operand as a [channels, 1]
column broadcast along them (:func:`walks.channel_kernel`; prelu, eval-mode batch_norm). One
of ``shared`` may also hold one value for all channels (prelu's single weight); a channel operand
that may be None (batch_norm's weight) drops its step, as a row recipe's does.

``groups`` names the int parameter splitting dim 1 into that many groups (group_norm's
num_groups): the recipe's reductions run over each group's channels and the positions after
dim 1, the input read in place as [batch * groups, rest] rows (a row kernel, as a row recipe's),
and its steps from the first on a channel operand on apply those to the rows' result, held in
FP32, in a channel kernel (:func:`recipe.stages`): two launches, one where no channel operand
is given.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal, Mapping

from torch2pypto.rules import templates
from torch2pypto.rules.calls import fallback, number_for_tensor, rejection, replacement, wrapper_params
from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.recipe import RecipeError, constants, number_operands, operands, parts, program, stages, str_choices, variants
from torch2pypto.rules.recipe_kernels import built
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.tile_program import Operand
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, length_over, register


@dataclasses.dataclass(frozen=True)
class CompositeFields(Fields):
    """The table fields the composite family reads."""

    recipe: str | None = field("other entries' steps (a composite's inlined) or PyPTO ops (pypto.log1p), as Python: assignments, then the result (\"mul(input, sigmoid(input))\")")
    along: str | None = field("the parameter naming the row a row recipe reduces: a dim (int: moved last) or a normalized shape (Dims: trailing dims folded into the row)")
    halves: str | None = field("a dim whose two halves of the input are the operands a and b (glu)")
    groups: str | None = field("the int parameter splitting dim 1 into groups whose channels and positions the reductions run over (group_norm's num_groups); the steps on channel operands follow in a channel kernel")
    channels: tuple[str, ...] = field("operands of one value per channel (dim 1), read as [channels, 1] columns broadcast along the rows of each channel (prelu's weight, batch_norm's statistics)", ())
    shared: tuple[str, ...] = field("channel operands that may also hold one value for all channels (prelu's single weight); others hold one per channel", ())
    compute: Literal["float32"] | None = field("float32 computes the recipe in FP32")
    contiguous: bool = field("a row recipe's result is contiguous whatever the input's strides, as torch's own kernel writes it (softmax, layer_norm); otherwise it takes the input's layout, as an elementwise op's (normalize)", False)
    output: Literal["bool"] | None = field("bool for a recipe ending in a comparison")
    positive: tuple[str, ...] = field("Number constants the kernel takes only above zero (rpow's base, whose math.log it takes); other values run torch", ())


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
    used = {p.name for p in tensors} | set(constants(entry)) | set(str_choices(entry))
    if entry.fields.halves:
        if entry.fields.along or entry.fields.halves not in {p.name for p in entry.params} or entry.param(entry.fields.halves).kinds != ("int",):
            return f"halves = {entry.fields.halves!r} names an int parameter (the dim split in two) of an elementwise recipe"
        if len(tensors) != 1:
            return "a recipe over halves takes one tensor"
        used.add(entry.fields.halves)
    for name in entry.fields.channels:
        if entry.fields.along or entry.fields.halves or name not in {p.name for p in tensors[1:]} or name in {p.name for p in number_operands(entry)}:
            return f"channels names {name!r}, which is no tensor operand after the input of an elementwise recipe"
    if entry.fields.channels and {p.name for p in tensors[1:]} != set(entry.fields.channels):
        return "a recipe over channels takes the input and channel operands only"
    if entry.fields.groups:
        if entry.fields.along or entry.fields.halves or entry.fields.groups not in {p.name for p in entry.params} or entry.param(entry.fields.groups).kinds != ("int",):
            return f"groups = {entry.fields.groups!r} names an int parameter (the groups of dim 1) of a recipe of no row (along) nor halves"
        if not entry.fields.channels or any(entry.param(c).default is not None for c in entry.fields.channels):
            return "a grouped recipe applies optional channel operands (channels) to its rows' result"
        if entry.fields.compute != "float32":
            return "a grouped recipe computes in FP32 (compute = 'float32'): its rows' result reaches the channel kernel in FP32"
        try:
            rows = {stages(entry, steps)[0] for steps in programs}
        except RecipeError as exc:
            return f"recipe {entry.fields.recipe!r}: {exc}"
        if len(rows) > 1:
            return "a grouped recipe's steps before its first on a channel operand are the same whichever channel operands are given: one row kernel serves all"
        used.add(entry.fields.groups)
    if (entry.fields.channels or entry.fields.groups) and any(templates.whole_tiles(p) for p in programs):
        return f"a recipe over channels or groups cannot use ops that read whole tiles ({', '.join(sorted(templates.WHOLE_TILE_OPS))})"
    if entry.fields.contiguous and not entry.fields.along:
        return "contiguous is a row recipe's (along): other recipes' results take the input's layout"
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
    elif any(templates.reduces(p) for p in programs) and not entry.fields.groups:
        return "a recipe that reduces along the row names its row (along) or its groups (groups)"
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
    if entry.fields.along and (number_operands(entry) or entry.fields.output):
        return "a row recipe's operands are tensors, and its result has the input's dtype"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site) or fallback(site) or number_for_tensor(site, site.entry.params[1:])
    if rejected:
        return rejected
    entry = site.entry
    pypto, definitions = built(entry)
    return Converted(replacement(site, f"pypto_{entry.op}"), definitions, pypto, wrapper_params(entry))


def fuse(builder, entry: Entry, bound, env) -> Operand:
    """The recipe's steps in a fused region."""
    return builder.composite(entry, bound, env)


def reduced_length(entry: Entry, shape: tuple[int, ...], dim) -> int:
    """A row recipe's row: the normalized shape's (the last dim here) or ``dim``'s values; a
    grouped recipe's at most all values after dim 0 (one group)."""
    if entry.fields.groups:
        return math.prod(shape[1:])
    along = entry.fields.along
    if not along:
        return 1
    return shape[-1] if along == "normalized_shape" else length_over(shape, dim)


def definitions(entry: Entry) -> tuple[Definition, ...]:
    return built(entry)[1]


register(Family("composite", CompositeFields, rewrite, problem, parts=parts, fuse=fuse, accumulates="sum",
                reduced_length=reduced_length, definitions=definitions))
