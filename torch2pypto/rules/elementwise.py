"""The n-ary elementwise family: ``pypto.<op>`` over tensors and Python numbers.

Operands are the signature's tensor parameters, in order; a ``Tensor | Number`` operand may be
a Python number, which the kernel takes as a constant (one kernel variant per such choice).
Tensors broadcast in the kernel, each read in place from its storage (templates.ROW_BLOCKS). The entry's ``args`` name the PyPTO op's extra keyword arguments
(``{ min = "min" }``: pypto keyword = torch parameter or literal); ``output = "bool"`` gives a
bool result; ``compute = "float32"`` computes in FP32. ``bool_operands`` are bool tensors
whatever the dtype (``where``'s condition); the other operands share one of the entry's
``dtypes``, which the wrapper checks before it launches (torch's type promotion of any other mix
stays torch's). ``order`` gives the PyPTO op's operands in its own order where it differs from
the signature's; a Number parameter named there is a kernel constant (``masked_fill`` is
``where(mask, value, input)``). Numbers the dtype cannot hold run torch. ``commutative`` ops take a number first by swapping it second; a ``number_first`` entry
computes the swapped call (``sub(2, x)`` is ``rsub(x, 2)``; its wrapper, given a number first at run
time, calls the swapped entry's: ``base ** t`` of a ``base`` of no known kind; a ``commutative`` one's runs torch's
function then: ``a * t``); other number-first calls stay torch. ``inplace`` ops (``x.mul_(y)``) write the result back into the
receiver and return it; with autograd recording they run torch.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
from typing import Literal, Mapping

import libcst as cst

from torch2pypto.rules import templates, wrappers
from torch2pypto.rules.calls import is_number, number_for_tensor, rejection, replacement, wrapper_params
from torch2pypto.rules.codegen import Definition, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.steps import Apply, Step
from torch2pypto.rules.tile_program import Operand, Unfusible
from torch2pypto.schema.entry import Entry, Fields, Param, TableError, field
from torch2pypto.schema.family import Family, OperandSample, family, register


@dataclasses.dataclass(frozen=True)
class ElementwiseFields(Fields):
    """The table fields the elementwise family reads."""

    args: Mapping[str, str] = field("pypto keyword -> torch parameter or literal: extra arguments of the PyPTO op (clip bounds, decimals)", {})
    output: Literal["bool"] | None = field("bool for comparisons")
    compute: Literal["float32"] | None = field("float32 for FP32-only ops")
    commutative: bool = field("a Python number may come first; the operands are swapped (torch.mul(0.5, x))", False)
    number_first: str | None = field("the entry computing a number-first call with the operands swapped (torch.sub(2, x) is rsub(x, 2)); without it (or commutative) a number first stays torch")
    bool_operands: tuple[str, ...] = field("operands that are bool tensors whatever the dtype (where's condition, masked_fill's mask)", ())
    inplace: bool = field("a tensor method writing its result back into the receiver, which it returns (x.add_(y))", False)
    order: tuple[str, ...] = field("the PyPTO op's operands in its own order; a Number parameter there is a kernel constant (masked_fill is where(mask, value, input))", ())


OUTPUTS = {None: None, "bool": "torch.bool"}
_PYPTO_OUTPUT = {"bool": templates.BOOL}


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    """Why this family cannot carry the entry out faithfully, or None."""
    names = {p.name for p in entry.params}
    for keyword, value in entry.fields.args.items():
        if value not in names and not _is_literal(value):
            return f"args.{keyword} = {value!r} is neither a parameter nor a literal"
        if value in names and "Tensor" in entry.param(value).kinds:
            return f"args.{keyword} = {value!r} is a tensor; tensors are operands, not arguments"
    used = {p.name for p in operands(entry)} | set(entry.fields.args.values()) | set(entry.fields.order)
    for p in wrapper_params(entry):
        if p.name not in used:
            return f"parameter {p.name!r} is neither an operand, an argument of pypto.{entry.pypto} (args) nor rejected"
    for p in operands(entry):
        if set(p.kinds) - {"Tensor", "Number"}:
            return f"operand {p.name!r} takes {' | '.join(p.kinds)}: operands are tensors or numbers"
    for name in entry.fields.bool_operands:
        if name not in names or not entry.param(name).is_tensor or name in entry.reject:
            return f"bool operand {name!r} is no Tensor operand"
    if entry.fields.order:
        tensors = {p.name for p in operands(entry)}
        if len(set(entry.fields.order)) != len(entry.fields.order) or not tensors <= set(entry.fields.order):
            return f"order {list(entry.fields.order)} names each operand once"
        for name in set(entry.fields.order) - tensors:
            if name not in names or entry.param(name).kinds != ("Number",) or name in entry.reject:
                return f"order names {name!r}, which is neither an operand nor a Number parameter"
    if not shared(entry):
        return "every operand is a bool mask: nothing gives the dtype"
    if entry.fields.commutative and len(operands(entry)) != 2:
        return "only a binary op can be commutative"
    if entry.fields.number_first and (entry.fields.commutative or len(operands(entry)) != 2
                               or len(entry.parts[entry.fields.number_first].params) < 2):
        return "number_first swaps the operands of a binary op that is not commutative"
    if entry.fields.inplace and (entry.fields.output or entry.fields.commutative):
        return "an in-place op keeps the receiver's dtype and place: no output, not commutative"
    if entry.fields.inplace and any(not api.startswith("torch.Tensor.") for api in entry.apis):
        return "an in-place op is a tensor method"
    return None


def _is_literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False
    return True


def operands(entry: Entry) -> tuple[Param, ...]:
    return tuple(p for p in wrapper_params(entry) if "Tensor" in p.kinds)


def shared(entry: Entry) -> tuple[Param, ...]:
    """The operands of the kernel's dtype (all but the bool masks)."""
    return tuple(p for p in operands(entry) if p.name not in entry.fields.bool_operands)


def constants(entry: Entry) -> tuple[Param, ...]:
    """Parameters the kernel takes as factory constants (named in ``args``, or Numbers in ``order``)."""
    named = {*entry.fields.args.values(), *entry.fields.order}
    return tuple(p for p in wrapper_params(entry) if p.name in named and "Tensor" not in p.kinds)


def step(entry: Entry) -> Step:
    """The op's tile step; composites reuse it."""
    return Step(entry.pypto, tuple(entry.fields.args.items()), entry.fields.compute == "float32", entry.fields.output)


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site)
    if rejected:
        return rejected
    entry = site.entry
    first, *rest = operands(entry)
    number = number_for_tensor(site, rest)
    if number:
        return number
    call = replacement(site, f"pypto_{entry.op}")
    if all(is_number(site.args.get(p.name)) for p in shared(entry)):
        return Unsupported(f"only Python numbers as {', '.join(p.name for p in shared(entry))}: no tensor gives the dtype")
    if is_number(site.args.get(first.name)) and entry.fields.number_first and site.is_tensor(rest[0].name):
        # sub(2, x) is rsub(x, 2), for an x known to be a tensor (torch.rsub takes no number first)
        swapped = entry.parts[entry.fields.number_first]
        one, two = (p.name for p in swapped.params[:2])
        args = {**site.args, one: site.args[rest[0].name], two: site.args[first.name]}
        return family(swapped.family).rewrite(dataclasses.replace(site, entry=swapped, args=args))
    if is_number(site.args.get(first.name)):
        if not (entry.fields.commutative and not is_number(site.args.get(rest[0].name))):
            return Unsupported(f"a Python number as {first.name}: pypto.{entry.pypto} takes a tensor first")
        swapped = [call.args[1].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT),
                   call.args[0].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)]
        call = call.with_changes(args=[*swapped, *call.args[2:]])
    return Converted(call, definitions(entry), f"pypto.{entry.pypto}", wrapper_params(entry))


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    """The kernel variants and the wrapper of an elementwise op."""
    tensors = operands(entry)
    numbers = [p for p in tensors[1:] if "Number" in p.kinds]
    variants = []
    for chosen in _choices(numbers):
        if set(chosen) >= set(shared(entry)):
            continue  # no tensor gives the dtype: torch
        name = f"{entry.op}_kernel" if not chosen else f"{entry.op}_{'_'.join(p.name for p in chosen)}_number_kernel"
        variants.append((name, chosen, _kernel(entry, name, chosen)))
    how = f"pypto.{entry.pypto}" + (", computed in FP32" if entry.fields.compute == "float32" else "")
    whole = templates.whole_tiles((Apply("result", step(entry), ()),))
    swapped = entry.parts.get(entry.fields.number_first)
    called = family(swapped.family).definitions(swapped) if swapped else ()
    return (templates.ROW_BLOCKS, templates.BROADCAST_BLOCKS, *(kernel for _, _, kernel in variants), *called,
            _wrapper(entry, variants, how, whole))


def _choices(numbers: list[Param]) -> list[tuple[Param, ...]]:
    """Which number-capable operands are numbers, all-tensors first."""
    return [c for r in range(len(numbers) + 1) for c in itertools.combinations(numbers, r)]


def _kernel(entry: Entry, name: str, chosen: tuple[Param, ...]) -> Definition:
    tensors = [p.name for p in operands(entry) if p not in chosen]
    inputs = [_tile(n) for n in tensors]
    constants_ = [*(p.name for p in chosen), *(p.name for p in constants(entry))]
    tiles = {p.name: f"{_tile(p.name)}_tile" for p in operands(entry) if p not in chosen}
    args = [tiles.get(name, name) for name in entry.fields.order or [p.name for p in operands(entry)]]
    program = (Apply("result", step(entry), tuple(args)),)
    numbers = f" with {', '.join(p.name for p in chosen)} a Python number" if chosen else ""
    out = _PYPTO_OUTPUT.get(entry.fields.output, "dtype")
    return templates.row_kernel(
        name,
        f"pypto.{entry.pypto} on [rows, cols] tiles{numbers}.",
        ", ".join(["dtype", "cols", *constants_]),
        inputs,
        program,
        out_dtype=out,
        buffers=len(inputs) + 1 + len(program) - 1,
        masks=[_tile(n) for n in entry.fields.bool_operands],
        blocked=True,
    )


def _tile(name: str) -> str:
    """Kernel parameter name of an operand (``input`` reads as ``x``)."""
    return "x" if name == "input" else name


def _wrapper(entry: Entry, variants, how: str, whole: bool) -> Definition:
    params = wrapper_params(entry)
    names = [p.name for p in operands(entry)]
    numbers = {p for _, chosen, _ in variants for p in chosen}
    launch = []
    for i, (kernel, chosen, _) in enumerate(variants):
        factory = ", ".join(["_PYPTO_ALL_DTYPES[dtype]", "cols", *(_number(p) for p in (*chosen, *constants(entry))), "blocks", "heads",
                             "*maps", f"_spread_rows(n, cols{', whole=True' if whole else ''})"])
        test = " and ".join(
            f"{'not ' if p in chosen else ''}isinstance({p.name}, torch.Tensor)" for p in sorted(numbers, key=lambda p: names.index(p.name))
        )
        keyword = "if" if i == 0 else "elif" if i < len(variants) - 1 else "else"
        line = f"{keyword} {test}:" if keyword != "else" else "else:"
        launch.append(f"{line}\n    kernel = {kernel}({factory})\n" if len(variants) > 1 else f"kernel = {kernel}({factory})\n")
    body = (
        "blocks, heads, n, cols, operands, shape, order = _broadcast_blocks(" + ", ".join(names) + ")\n"
        + "(x, _), maps = operands[0], [m for _, m in operands]\n"
        + f"dtype = {_dtype(shared(entry))}\n"
        f"result, out = _result_blocks(shape, order, {OUTPUTS[entry.fields.output] or 'dtype'}, x.device)\n"
        + "".join(launch)
        + "_launch(kernel, *(w for w, _ in operands), out)\n"
        + (f"return {names[0]}.copy_(result)\n" if entry.fields.inplace else "return result\n")
    )
    spelled = ", ".join(names)
    guard = ", ".join([
        f"({', '.join(f'torch.{d}' for d in entry.dtypes)}{',' if len(entry.dtypes) == 1 else ''})",
        *(p.name for p in shared(entry) if "Number" not in p.kinds),
        *_keyword("numbers", [p.name for p in shared(entry) if "Number" in p.kinds]),
        *_keyword("bools", [p.name for p in operands(entry) if p.name in entry.fields.bool_operands]),
        *_keyword("options", [p.name for p in constants(entry)]),
    ])
    guard = f"_kernel_operands({guard})"
    requires = ["_kernel_operands", "_broadcast_blocks", *(k for k, _, _ in variants)]
    prologue = ""
    if entry.fields.number_first:  # 2 - x runs x.__rsub__(2): so does pypto_sub(2, x)
        swapped = entry.parts[entry.fields.number_first]
        first, second = names
        prologue = (f"if not isinstance({first}, torch.Tensor) and isinstance({second}, torch.Tensor):"
                    f"  # a number first: {swapped.torch_function or swapped.apis[0]}\n"
                    f"    return pypto_{swapped.op}({second}, {first})\n")
        requires.append(f"pypto_{swapped.op}")
    if any(chosen for _, chosen, _ in variants) or any("Number" in p.kinds for p in constants(entry)):
        requires.append("_kernel_number")
    if entry.fields.inplace:
        guard = f"({guard} and _in_place_ok({spelled}))"
        requires.append("_in_place_ok")
        how += ", written back into the receiver"
    if len(names) > 1:
        how += ". Tensors broadcast in the kernel, Python numbers are kernel constants; other operand mixes run torch"
    return wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), how, spelled,
        wrappers.torch_call(entry, params), guard, body, tuple(requires), prologue=prologue,
    )


def _number(param: Param) -> str:
    """A number as the kernel takes it: a float for float tensors (pypto compares no int with them)."""
    return f"_kernel_number({param.name}, dtype)" if "Number" in param.kinds else param.name


def _keyword(name: str, values: list[str]) -> list[str]:
    """``name=(a, b)`` for the guard, or nothing."""
    return [f"{name}=({', '.join(values)}{',' if len(values) == 1 else ''})"] if values else []


def _dtype(params: tuple[Param, ...]) -> str:
    """The dtype of the first of ``params`` that is a tensor (the guard saw one)."""
    first, *rest = params
    if "Number" not in first.kinds or not rest:
        return f"{first.name}.dtype"
    return f"({first.name} if isinstance({first.name}, torch.Tensor) else {rest[0].name}).dtype" if len(rest) == 1 \
        else f"({first.name}.dtype if isinstance({first.name}, torch.Tensor) else {_dtype(tuple(rest))})"


def parts(entry: Entry, entries: Mapping[str, Entry]) -> tuple[str, ...]:
    """The entry computing a number-first call with the operands swapped (``number_first``)."""
    name = entry.fields.number_first
    if name and name not in entries:
        raise TableError(f"{entry.op}: number_first names no entry: {name!r}")
    return (name,) if name else ()


def fuse(builder, entry: Entry, bound, env) -> Operand | None:
    """The call's step in a fused region, unless it writes in place or takes kernel constants."""
    if entry.fields.inplace or constants(entry):
        return None
    names = [p.name for p in operands(entry)]
    if set(bound) - set(names):
        raise Unfusible("arguments beyond the operands")
    return builder.elementwise(entry.op, [bound.get(n) for n in names], env, entry)


def operand_sample(entry: Entry, position: int, name: str) -> OperandSample:
    """Bool operands are sampled as bool tensors whatever the case's dtype."""
    return "bool" if name in entry.fields.bool_operands else "same"


def number_first(entry: Entry) -> bool:
    """A ``number_first`` entry's wrapper computes a number first as the swapped op at run time; a
    ``commutative`` one's runs torch's function, which takes a number first (``torch.mul(2, x)``
    is ``x.__rmul__(2)``)."""
    return bool(entry.fields.number_first or entry.fields.commutative)


register(Family("elementwise", ElementwiseFields, rewrite, problem, parts=parts, fuse=fuse, operand_sample=operand_sample,
                number_first=number_first, definitions=definitions))
