"""The movement family: data copied into place, column run by column run (cat, stack, roll,
repeat_interleave, F.pad's constant mode, Tensor.contiguous).

``args.layout`` names the layout. cat and stack read each tensor in place, as blocks of rows of a window of its storage (a
DynamicCache's transposed key, a column slice), and :func:`walks.join_kernel` assembles them
into their rows or columns of the contiguous output. roll, repeat_interleave and pad fold the
input into [rows, cols] at the dim the op moves (the dims before it become rows) and say which
column runs of it land where in the [rows, width] output and which output runs are filled with
a constant; :func:`walks.assemble_kernel` copies them with ``pypto.view`` and ``pypto.assemble``. cat
and stack on a list or tuple literal of up to :data:`MAX_INPUTS` tensors join them in one launch
(a kernel with one parameter per tensor, ``pypto_cat3``); on any other sequence (a name, a
comprehension, a starred literal: its length is known at run time only) ``pypto_cat`` launches
kernels of :data:`ARITIES` tensors, the largest the tensors left fill, each assembling its
tensors into their columns of the one output. roll and pad launch once per dim they move
(:data:`ALONG`); repeat_interleave fills a new dim with up to 64 copies (column runs, each an
unrolled view and assemble; the runtime's ``_repeated``). ``x.contiguous()`` is a cat of one
tensor along its last dim (the runtime's ``_copied``): the same join kernel copies a tensor that is
not contiguous from its window of storage; a contiguous one is returned as is, as torch does. Calls torch refuses or promotes
(mismatched shapes, dims out of range, mixed dtypes, no list or tuple of tensors) run torch,
which raises or promotes as it does.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import libcst as cst

from torch2pypto.rules import templates, walks, wrappers
from torch2pypto.rules.calls import literal, rejection, replacement, signature_problem, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, register


@dataclasses.dataclass(frozen=True)
class MovementFields(Fields):
    """The table fields the movement family reads."""

    args: Mapping[str, str] = field("layout = cat, stack, roll, repeat_interleave or pad", {})


MAX_INPUTS = 32  # tensors a cat or stack kernel of a literal takes
ARITIES = (8, 4, 2, 1)  # the kernels a cat or stack of a run-time count launches, largest first

ALONG = copied("layout", "_moved_along")

JOINED = copied("layout", "_joined", last="_join_rows")
COPIED = copied("layout", "_copied")

LAYOUTS = {
    "cat": "tensors joined along dim",
    "stack": "tensors stacked along a new dim",
    "roll": "input rolled along dims",
    "repeat_interleave": "input's slices along dim repeated",
    "pad": "input padded with a constant",
    "contiguous": "input copied into a contiguous tensor",
}
PARAMS = {  # the parameters each layout reads
    "cat": ("tensors", "dim"),
    "stack": ("tensors", "dim"),
    "roll": ("input", "shifts", "dims"),
    "repeat_interleave": ("input", "repeats", "dim"),
    "pad": ("input", "pad", "mode", "value"),
    "contiguous": ("input",),
}


def layout(entry: Entry) -> str:
    return entry.fields.args.get("layout", "")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    kind = layout(entry)
    if kind not in LAYOUTS:
        return f"args.layout is one of {', '.join(LAYOUTS)}, not {kind!r}"
    if set(entry.fields.args) != {"layout"}:
        return "args: only layout"
    if entry.pypto != "assemble":
        return f"movement copies with pypto.view and pypto.assemble (pypto = \"assemble\"), not pypto.{entry.pypto}"
    if problem := signature_problem(entry, f"a {kind}", PARAMS[kind]):
        return problem
    if set(entry.dtypes) - {"float32", "float16", "bfloat16", *(("int64",) if kind in ("pad", "contiguous") else ())}:
        return ("movement kernels take float dtypes (a pad int64 too: _moved_along's kernel casts its FP32 fill; "
                "contiguous int64 too: the join kernel only views and assembles)")
    return None


def wrapper_names(entry: Entry) -> tuple[str, ...]:
    """cat and stack have one wrapper per number of tensors (pypto_cat2) and one for any number
    (pypto_cat); the others one."""
    if layout(entry) in ("cat", "stack"):
        return (f"pypto_{entry.op}", *(f"pypto_{entry.op}{n}" for n in range(1, MAX_INPUTS + 1)))
    return (f"pypto_{entry.op}",)


def rewrite(site: CallSite) -> Converted | Unsupported:
    entry, kind = site.entry, layout(site.entry)
    if kind == "contiguous":
        given = site.args.get("memory_format")
        if given is not None and not _contiguous_format(site, given):
            return Unsupported(entry.reject["memory_format"])
        name = f"pypto_{entry.op}"
        return Converted(replacement(site, name), _copy(entry, name), "pypto.assemble", wrapper_params(entry))
    rejected = rejection(site)
    if rejected:
        return rejected
    if kind in ("cat", "stack"):
        tensors = site.args["tensors"]
        literal_count = isinstance(tensors, (cst.List, cst.Tuple)) and not any(
            isinstance(e, cst.StarredElement) for e in tensors.elements)
        count = len(tensors.elements) if literal_count else None
        if count == 0:
            return Unsupported(f"no tensors: torch.{kind} raises")
        if count is None or count > MAX_INPUTS:
            name, definitions = f"pypto_{entry.op}", _join(entry, f"pypto_{entry.op}", count)
        else:
            name, definitions = literal_join(entry, count)
        return Converted(replacement(site, name), definitions, "pypto.assemble", wrapper_params(entry))
    if kind == "repeat_interleave" and site.is_tensor("repeats"):
        return Unsupported("tensor repeats: the output's size depends on the values, which a kernel's static layout cannot follow")
    if kind == "pad":
        mode = literal(site.args["mode"]) if "mode" in site.args else "constant"
        if mode not in ("constant", Ellipsis):  # a mode known only at run time is checked then
            return Unsupported(f"mode={mode!r}: only the constant mode is a copy and a fill")
    name = f"pypto_{entry.op}"
    return Converted(replacement(site, name), _moved(entry, name), "pypto.assemble", wrapper_params(entry))


def literal_join(entry: Entry, count: int) -> tuple[str, tuple[Definition, ...]]:
    """The wrapper joining a literal list of ``count`` tensors (at most MAX_INPUTS) in one launch,
    and its definitions."""
    name = f"pypto_{entry.op}{count}"
    return name, _join(entry, name, count)


@per_entry
def _join(entry: Entry, name: str, count: int | None) -> tuple[Definition, ...]:
    """The wrapper joining ``count`` tensors in one launch, or (count None or above MAX_INPUTS)
    any number of them in launches of ARITIES tensors each."""
    stacked = layout(entry) == "stack"
    params = wrapper_params(entry)
    literal_count = count is not None and count <= MAX_INPUTS
    body = (
        "windows, maps, rows, width, shape = joined\n"
        "out = torch.empty(rows, width, dtype=tensors[0].dtype, device=tensors[0].device)\n"
    )
    if literal_count:
        arities = (count,)
        body += (
            "widths = tuple(w.shape[1] for w in windows)\n"
            f"_launch(join{count}_kernel(_PYPTO_DTYPES[out.dtype], widths, width, maps, _join_rows(windows, maps)), *windows, out)\n"
        )
        prologue = f"joined = _joined(tensors, dim, {stacked}) if len(tensors) == {count} else None\n"
        how = "each tensor, read in place as blocks of rows of its storage, is assembled into its rows or columns of the output"
        fallback = None
    else:
        arities = ARITIES
        body += (
            f"kernels = {{{', '.join(f'{n}: join{n}_kernel' for n in ARITIES)}}}\n"
            "start = 0\n"
            "while start < len(windows):  # a launch per group of tensors, the largest kernel they fill\n"
            "    group = slice(start, start + max(n for n in kernels if n <= len(windows) - start))\n"
            "    widths = tuple(w.shape[1] for w in windows[group])\n"
            "    factory = _PYPTO_DTYPES[out.dtype], widths, width, maps[group], _join_rows(windows[group], maps[group])\n"
            "    _launch(kernels[len(widths)](*factory), *windows[group], out)\n"
            "    start = group.stop\n"
        )
        prologue = f"joined = _joined(tensors, dim, {stacked}) if isinstance(tensors, (list, tuple)) and tensors else None\n"
        how = (f"a list or tuple of any length, in launches of {', '.join(map(str, ARITIES))} tensors (the largest "
               "the tensors left fill): each tensor, read in place as blocks of rows of its storage, is assembled "
               "into its rows or columns of the one output")
        fallback = wrappers.torch_call(entry, params)  # what is no list or tuple reaches torch as it is
    body += "return out.view(shape)\n"
    how = f"{LAYOUTS[layout(entry)]}: {how} (pypto.view and pypto.assemble, any widths)"
    kernels = tuple(f"join{n}_kernel" for n in arities)
    wrapper = wrappers.wrapper(
        entry, name, wrappers.signature(params), how, "*tensors", wrappers.torch_call(entry, params),
        "joined", body, ("_joined", *kernels), prologue=prologue, fallback=fallback,
    )
    return *(walks.join_kernel(k, n) for k, n in zip(kernels, arities)), templates.ROW_BLOCKS, JOINED, wrapper


def _contiguous_format(site: CallSite, given: cst.BaseExpression) -> bool:
    """Whether ``given`` is ``torch.contiguous_format`` (the default, which the wrapper drops)."""
    torch_name = site.torch_name()
    return (isinstance(given, cst.Attribute) and given.attr.value == "contiguous_format"
            and isinstance(given.value, cst.Name) and given.value.value == torch_name)


def _copy(entry: Entry, name: str) -> tuple[Definition, ...]:
    """The wrapper of ``x.contiguous()``: a join of one tensor (join1_kernel), launched only for a
    tensor that is not contiguous and that a window of its storage holds (runtime ``_copied``)."""
    params = wrapper_params(entry)
    body = (
        "windows, maps, rows, width, shape = copied\n"
        "out = torch.empty(rows, width, dtype=input.dtype, device=input.device)\n"
        "_launch(join1_kernel(_PYPTO_ALL_DTYPES[out.dtype], (width,), width, maps, _join_rows(windows, maps)), *windows, out)\n"
        "return out.view(shape)\n"
    )
    how = (f"{LAYOUTS['contiguous']}: a tensor that is not contiguous, read in place as blocks of rows of its "
           "storage, is assembled into the rows of the output (pypto.view and pypto.assemble); a contiguous one "
           "is returned as is, and one that no window of its storage holds (x.mT) is copied by torch")
    prologue = "copied = _copied(input)\n"
    wrapper = wrappers.wrapper(
        entry, name, wrappers.signature(params), how, "input", wrappers.torch_call(entry, params), "copied", body,
        ("_copied", "join1_kernel"), prologue=prologue,
    )
    return walks.join_kernel("join1_kernel", 1), templates.ROW_BLOCKS, JOINED, COPIED, wrapper


HOSTS = {  # host code: the dims an op moves, one kernel each, or None where torch refuses or differs
    "roll": copied("layout", "_rolled"),
    "repeat_interleave": copied("layout", "_repeated"),
    "pad": copied("layout", "_padded"),
}


@per_entry
def _moved(entry: Entry, name: str) -> tuple[Definition, ...]:
    kind = layout(entry)
    host = HOSTS[kind]
    params = wrapper_params(entry)
    args = ", ".join(p.name for p in params)
    value = ", 0.0 if value is None else float(value)" if kind == "pad" else ""
    floats = all(d in ("float32", "float16", "bfloat16") for d in entry.dtypes)
    declared = "" if floats else f", dtypes=({', '.join(f'torch.{d}' for d in entry.dtypes)})"  # others run torch
    prologue = f"moved = {host.name}({args}) if isinstance(input, torch.Tensor) and _on_kernel_path(input{declared}) else None\n"
    body = (
        "x, moves, shape = moved\n"
        "for dim, size, runs in moves:  # one kernel per dim\n"
        f"    x = _moved_along(x, dim, size, runs{value})\n"
        "return x if shape is None else x.reshape(shape)\n"
    )
    how = (f"{LAYOUTS[kind]}: per dim moved, the input folded to [rows, cols] at that dim is assembled run by run "
           "into the output (pypto.view, pypto.assemble" + (", pypto.full for the constant)" if kind == "pad" else ")"))
    wrapper = wrappers.wrapper(
        entry, name, wrappers.signature(params), how, "input", wrappers.torch_call(entry, params), "moved", body,
        (host.name, "_moved_along"), prologue=prologue,
    )
    return walks.assemble_kernel("assemble1_kernel", 1), ALONG, host, wrapper


def fuse(builder, entry: Entry, bound, env):
    """torch.cat along the last dim in a fused region: the tiles joined; other moves do not fuse."""
    return builder.join(entry, bound, env) if layout(entry) == "cat" else None  # a contiguous: its own launch


register(Family("movement", MovementFields, rewrite, problem, wrapper_names, fuse=fuse))
