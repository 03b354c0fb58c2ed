"""The composite family's code (:mod:`torch2pypto.rules.composite`): a kernel per recipe variant
and the wrapper choosing one, for elementwise recipes (tensors broadcast on the host), channel
recipes and row recipes.
"""

from __future__ import annotations

import ast
import dataclasses
import textwrap

from torch2pypto.rules import templates, walks, wrappers
from torch2pypto.rules.calls import fallback_checks, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.recipe import constants, number_operands, operands, optional_operands, program, stages, str_choices, tensor_names, variants
from torch2pypto.rules.steps import Apply
from torch2pypto.schema.entry import Entry


ROW_OPERANDS = copied("operands", "_row_operands")


@per_entry
def built(entry: Entry) -> tuple[str, tuple[Definition, ...]]:
    """The entry's PyPTO ops, and its kernels and wrapper."""
    kernels = [(_kernel_name(entry, c, a, g), c, a, g, program(entry, entry.parts, c, a)) for c, a, g in variants(entry)]
    pypto = " + ".join(dict.fromkeys(f"pypto.{a.step.op}" for *_, steps in kernels for a in steps))
    if entry.fields.groups:
        return pypto, _group_definitions(entry, kernels)
    if entry.fields.channels:
        return pypto, _channel_definitions(entry, kernels)
    return pypto, _row_definitions(entry, kernels) if entry.fields.along else _definitions(entry, kernels)


def _kernel_name(entry: Entry, choice, absent, given=frozenset()) -> str:
    parts = [v for name, v in choice if v != entry.param(name).default]
    parts += [p.name for p in optional_operands(entry) if p.name not in absent]
    parts += [*_in_order(entry, given), "number"] if given else []
    return "_".join([entry.op, *parts, "kernel"])


def _in_order(entry: Entry, given) -> list[str]:
    """The operands given as Python numbers, in signature order."""
    return [p.name for p in number_operands(entry) if p.name in given]


def _tile(name: str) -> str:
    return "x" if name == "input" else name


def _kernel(
    entry: Entry, name: str, choice, steps: tuple[Apply, ...], inputs: list[str], vectors: list[str] = (), given=frozenset(),
    blocked: bool = False,
) -> Definition:
    """The kernel of one variant; the operands ``given`` as Python numbers are its constants;
    ``blocked``: the inputs read in place (templates.ROW_BLOCKS)."""
    inputs = [i for i in inputs if i not in given]
    steps = _on_tiles(entry, steps, given)
    row = bool(entry.fields.along or entry.fields.groups)
    numbers = _in_order(entry, given)
    cast = _casts(entry) or bool(entry.fields.groups)  # a grouped recipe's rows: FP32 for its channel kernel
    told = [f"{n}={v!r}" for n, v in choice] + [f"with {v}" for v in vectors] + [f"{n} a Python number" for n in numbers]
    return templates.row_kernel(
        name,
        f"{entry.op} on [rows, cols] tiles{' (' + ', '.join(told) + ')' if told else ''}"
        + (", in FP32" if any(a.step.fp32 for a in steps) else "") + f": {' + '.join(dict.fromkeys(f'pypto.{a.step.op}' for a in steps))}.",
        ", ".join(["dtype", *(["out_dtype"] if cast else []), "cols", *(["width"] if row else []), *_constants_of(entry, steps), *numbers]),
        [_tile(i) for i in inputs],
        steps,
        buffers=len(inputs) + len(vectors) + sum(not a.step.reduces for a in steps),  # a reduced row is one column
        vectors=[_tile(v) for v in vectors],
        out_dtype=templates.BOOL if entry.fields.output == "bool" else "out_dtype" if cast else "dtype",
        blocked=blocked,
    )


def _casts(entry: Entry) -> bool:
    """Whether a row recipe takes a ``dtype`` for its result (``softmax(dtype=)``)."""
    return bool(entry.fields.along) and "dtype" in {p.name for p in wrapper_params(entry)}


def _on_tiles(entry: Entry, steps: tuple[Apply, ...], given=frozenset()) -> tuple[Apply, ...]:
    """The steps over the kernel's tiles (``x_tile``...), in FP32 where the entry computes so."""
    rename = {n: f"{_tile(n)}_tile" for n in tensor_names(entry) if n not in given}
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
            f"{p.name} is {'' if p.name in absent else 'not '}None" for p in optional_operands(entry)
        ] + [f"{'not ' if p.name in given else ''}isinstance({p.name}, torch.Tensor)" for p in number_operands(entry)]
        keyword = "if" if i == 0 else "elif" if i < len(kernels) - 1 else "else"
        head = "else:" if keyword == "else" else f"{keyword} {' and '.join(tests)}:"
        lines.append(f"{head}\n" + textwrap.indent(made(name, given), "    "))
    return "".join(lines)


def _accepted(entry: Entry) -> list[str]:
    """Guards: each str parameter has a value the recipe names."""
    return [f"{name} in {values!r}" for name, values in str_choices(entry).items()]


def _nullable(entry: Entry) -> list[str]:
    """Constants that may be None: FP32's epsilon then (``F.rms_norm``'s eps: torch takes that of
    the dtype it computes in, FP32 for every kernel dtype)."""
    params = {p.name: p for p in wrapper_params(entry)}
    return [c for c in constants(entry) if params[c].default is None]


def _constants_of(entry: Entry, steps: tuple[Apply, ...]) -> list[str]:
    """The constants ``steps`` use (a grouped recipe's kernels use some each); all of them, in
    signature order, for a recipe of one kernel per variant."""
    if not entry.fields.groups:
        return list(constants(entry))
    named = {n.id for a in steps for o in a.operands for n in ast.walk(ast.parse(o, mode="eval")) if isinstance(n, ast.Name)}
    return [c for c in constants(entry) if c in named]


def _factory_constants(entry: Entry, steps: tuple[Apply, ...] = ()) -> list[str]:
    """The constants (those ``steps`` use, for a grouped recipe) as the kernel factory takes them:
    numbers as floats for float tensors (pypto compares no int with them)."""
    kinds = {p.name: p.kinds for p in wrapper_params(entry)}
    named = [(c, f"{c}_value" if c in _nullable(entry) else c) for c in _constants_of(entry, steps)]
    return [f"_kernel_number({v}, x.dtype)" if "Number" in kinds[c] else v for c, v in named]


def _defaults(entry: Entry) -> str:
    return "".join(f"{c}_value = torch.finfo(torch.float32).eps if {c} is None else {c}\n" for c in _nullable(entry))


def _definitions(entry: Entry, kernels) -> tuple[Definition, ...]:
    """Elementwise composites: the tensors broadcast in the kernel, each read in place from its
    storage (templates.ROW_BLOCKS), or, for a recipe that reduces or of halves, broadcast on the
    host; one kernel per variant."""
    params = wrapper_params(entry)
    names = [p.name for p in operands(entry)]
    whole = any(templates.whole_tiles(steps) for *_, steps in kernels)
    blocked = not entry.fields.halves and not any(templates.reduces(steps) for *_, steps in kernels)
    defined = [_kernel(entry, name, choice, steps, tensor_names(entry), given=given, blocked=blocked) for name, choice, _, given, steps in kernels]
    layout, placed = _layout(entry)
    dtype = "torch.bool" if entry.fields.output == "bool" else "x.dtype"
    if blocked:
        factory = ", ".join(["_PYPTO_ALL_DTYPES[x.dtype]", "cols", *_factory_constants(entry)])
        spread = f"blocks, heads, *maps, _spread_rows(n, cols{', whole=True' if whole else ''})"
        body = (
            f"blocks, heads, n, cols, operands, shape, order = _broadcast_blocks({', '.join(tensor_names(entry))})\n"
            + "(x, _), maps = operands[0], [m for _, m in operands]\n"
            + _defaults(entry)
            + f"result, out = _result_blocks(shape, order, {dtype}, x.device)\n"
            + _choose(entry, kernels, factory, spread)
            + "_launch(kernel, *(w for w, _ in operands), out)\n"
            "return result\n"
        )
    else:
        factory = ", ".join(["_PYPTO_ALL_DTYPES[x.dtype]", "x.shape[1]", *_factory_constants(entry)])
        body = (
            layout
            + f"rows, shape, order = _broadcast_rows({', '.join(tensor_names(entry))})\n"
            + "x = rows[0]\n"
            + _defaults(entry)
            + f"result, out = _result_rows(shape, order, {dtype}, x.device)\n"
            + _choose(entry, kernels, factory, templates.WHOLE_SPREAD_ROWS if whole else templates.SPREAD_ROWS)
            + "_launch(kernel, *rows, out)\n"
            "return result\n"
        )
    spelled = ", ".join(names)
    declared = ", ".join(f"torch.{d}" for d in entry.dtypes) + ("," if len(entry.dtypes) == 1 else "")
    numeric = [p.name for p in number_operands(entry)]
    taken = ", ".join([n for n in names if n not in numeric] + ([f"numbers=({', '.join(numeric)},)"] if numeric else []))
    positive = [f"isinstance({name}, (int, float)) and 0 < {name} < float('inf')" for name in entry.fields.positive]
    guard = " and ".join([*_accepted(entry), f"_kernel_operands(({declared}), {taken})", *positive, *placed])
    requires = ["_kernel_operands", "_broadcast_blocks" if blocked else "_broadcast_rows", "_kernel_number", *(d.name for d in defined)]
    how = _how(entry) + (". Tensors broadcast on the host" if len(names) > 1 else "") + (
        ", Python numbers are kernel constants" if numeric else "")
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), how, spelled,
        wrappers.torch_call(entry, params), f"({guard})" if " and " in guard else guard, body, tuple(requires),
    )
    if any("math." in a for *_, steps in kernels for step in steps for a in step.operands):
        defined = [dataclasses.replace(d, imports=("math",)) for d in defined]
    return (*((templates.ROW_BLOCKS, templates.BROADCAST_BLOCKS) if blocked else ()), *defined, wrapper)


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
    defined = _channel_kernels(entry, kernels)
    factory = ", ".join(["_PYPTO_DTYPES[x.dtype]", "cols", "count", *_factory_constants(entry)])
    body = (
        "cols = math.prod(input.shape[2:]) if input.dim() > 1 else input.numel()\n"
        "x = input.reshape(-1, cols).contiguous()\n"
        + _columns(entry)
        + _defaults(entry)
        + "out = torch.empty(x.shape, dtype=x.dtype, device=x.device)\n"
        + _choose(entry, kernels, factory)
        + "_launch(kernel, x, *columns, out)\n"
        "return _in_layout_of(out.reshape(input.shape), input)\n"
    )
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), entry.note or f"{_how(entry)}, one value per channel (dim 1) broadcast along its rows",
        ", ".join(["input", *entry.fields.channels]), wrappers.torch_call(entry, params), f"({' and '.join(_channel_guards(entry))})", body,
        ("_kernel_operands", "_kernel_number", "_in_layout_of", *(d.name for d in defined)), prologue=CHANNEL_COUNT,
    )
    return (*defined, dataclasses.replace(wrapper, imports=("math",)))


CHANNEL_COUNT = "count = input.shape[1] if isinstance(input, torch.Tensor) and input.dim() > 1 else 1  # channels: dim 1\n"


def _channel_kernels(entry: Entry, kernels, in_dtype: str = "dtype") -> list[Definition]:
    """A channel kernel per variant (:func:`walks.channel_kernel`), over ``x`` of ``in_dtype``."""
    channels = list(entry.fields.channels)
    named = _constants_of(entry, tuple(a for *_, steps in kernels for a in steps))  # one factory signature for all
    defined = []
    for name, choice, absent, _, steps in kernels:
        present = [c for c in channels if c not in absent]
        told = [f"{n}={v!r}" for n, v in choice] + [f"without {c}" for c in channels if c in absent]
        steps = _on_tiles(entry, steps)
        doc = (f"{entry.op} on the rows of each channel{' (' + ', '.join(told) + ')' if told else ''}"
               + (", in FP32" if any(a.step.fp32 for a in steps) else "") + f": {' + '.join(dict.fromkeys(f'pypto.{a.step.op}' for a in steps))}.")
        defined.append(walks.channel_kernel(name, doc, ", ".join(["dtype", "cols", "count", *named]), present, steps,
                                            buffers=2 + len(present) + len(steps), in_dtype=in_dtype))
    return defined


def _given(entry: Entry) -> str:
    """The channel operands given, as the arguments of a call (an optional one where not None)."""
    optional = {p.name for p in optional_operands(entry)}
    return ", ".join(f"{c}" if c not in optional else f"*([] if {c} is None else [{c}])" for c in entry.fields.channels)


def _columns(entry: Entry) -> str:
    """The statement making ``columns``: each channel operand given as a [count, 1] column."""
    return (f"columns = [c.reshape(-1, 1) if c.numel() == count else c.reshape(1, 1).expand(count, 1).contiguous() "
            f"for c in ({_given(entry)},)]\n")


def _channel_guards(entry: Entry, rank: int = 1) -> list[str]:
    """A channel recipe's guards: its operands' dtypes and devices, an input of at least ``rank``
    dims, channel operands of torch's sizes, fallback parameters at their defaults."""
    optional = {p.name for p in optional_operands(entry)}
    declared = ", ".join(f"torch.{d}" for d in entry.dtypes) + ("," if len(entry.dtypes) == 1 else "")
    guards = [*_accepted(entry), f"_kernel_operands(({declared}), input, {_given(entry)})", f"input.dim() > {rank - 1}"]
    for c in entry.fields.channels:  # torch's rule: one value per channel (dim 1), or one for all where shared
        size = f"{c}.numel() in (1, count)" if c in entry.fields.shared else f"{c}.numel() == count"
        guards.append(f"({c} is None or {c}.dim() <= 1 and {size})" if c in optional else f"{c}.dim() <= 1 and {size}")
    return guards + fallback_checks(entry)


def _group_definitions(entry: Entry, kernels) -> tuple[Definition, ...]:
    """Grouped composites (:func:`recipe.stages`): a contiguous input read in place as [batch *
    groups, rest] rows, a group's channels and positions each, normalized by one row kernel (every
    variant's rows are the same steps: the variants differ in channel operands); then, where
    channel operands are given, their steps in a channel kernel over the rows' FP32 result as
    [batch * channels, positions] rows, which rounds once to the input's dtype."""
    params = wrapper_params(entry)
    groups = entry.fields.groups
    rows = stages(entry, kernels[0][-1])[0]
    applied = [(name, choice, absent, given, stages(entry, steps)[1]) for name, choice, absent, given, steps in kernels]
    applied = [k for k in applied if k[-1]]
    row_kernel = _kernel(entry, f"{entry.op}_kernel", (), rows, ["input"])
    defined = [row_kernel, *_channel_kernels(entry, applied, in_dtype=templates.FP32)]
    factory = ", ".join(["_PYPTO_DTYPES[x.dtype]", "_PYPTO_DTYPES[normed.dtype]", "x.shape[1]", "_row_width(x.shape[1], x.dtype)",
                         *_factory_constants(entry, rows), templates.SPREAD_ROWS])
    body = (
        "cols = math.prod(input.shape[2:])\n"
        f"x = input.view(-1, count // {groups} * cols)  # a row per group: its channels' positions\n"
        + _columns(entry)
        + _defaults(entry)
        + "normed = torch.empty(x.shape, dtype=torch.float32 if columns else x.dtype, device=x.device)\n"
        f"_launch({row_kernel.name}({factory}), x, normed)\n"
        "if not columns:\n"
        "    return normed.view(input.shape)\n"
        "normed = normed.view(-1, cols)\n"
        "out = torch.empty(normed.shape, dtype=x.dtype, device=x.device)\n"
        + _choose(entry, applied, ", ".join(["_PYPTO_DTYPES[x.dtype]", "cols", "count", *_factory_constants(entry, tuple(a for *_, steps in applied for a in steps))]),
                  "_spread_rows(*normed.shape)")
        + "_launch(kernel, normed, *columns, out)\n"
        "return out.view(input.shape)\n"
    )
    # a non-contiguous input runs torch: its rows would be a copy, and torch's result keeps some layouts (channels last)
    guards = [*_channel_guards(entry, rank=2), "input.is_contiguous()", f"type({groups}) is int and {groups} > 0 and count % {groups} == 0"]
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), entry.note or f"{_how(entry)}, over groups of channels",
        ", ".join(["input", *entry.fields.channels]), wrappers.torch_call(entry, params), f"({' and '.join(guards)})", body,
        ("_kernel_operands", "_kernel_number", "_row_width", *(d.name for d in defined)), prologue=CHANNEL_COUNT,
    )
    return (*defined, templates.ROW_WIDTH, dataclasses.replace(wrapper, imports=("math",)))


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
        + (f"return {shaped}\n" if entry.fields.contiguous else f"return _in_layout_of({shaped}, input)\n")
    )
    spelled = ", ".join(names)
    requires = ["_as_rows", "_row_width", *([] if entry.fields.contiguous else ["_in_layout_of"]), "_kernel_number", *(d.name for d in defined), *([] if dim else ["_row_operands"])]
    along = "the dim moved last" if dim else "the normalized dims folded into rows"
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), entry.note or f"{_how(entry)}, along {along}",
        spelled, wrappers.torch_call(entry, params), f"({' and '.join(guards)})", body, tuple(requires), prologue=prologue,
    )
    extra = () if dim else (ROW_OPERANDS,)
    wrapper = dataclasses.replace(wrapper, imports=("math",)) if not dim else wrapper
    return (*defined, templates.ROW_WIDTH, *extra, wrapper)
