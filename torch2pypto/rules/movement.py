"""The movement family: data copied into place, column run by column run (cat, stack, roll,
repeat_interleave, F.pad's constant mode).

``args.layout`` names the layout. The host folds each input into [rows, cols] (the dims before
the ones the op moves become rows) and computes which column runs of each input land where in
the [rows, width] output, and which output runs are filled with a constant
(:data:`PIECES`); :func:`templates.assemble_kernel` copies them with ``pypto.view`` and
``pypto.assemble``, one launch. cat and stack take a list or tuple literal of tensors (the
kernel has one parameter per tensor): a list whose length is not known at the call stays torch.
Calls torch refuses (mismatched shapes, dims out of range, mixed dtypes) and geometries of more
than :data:`MAX_PIECES` runs per input run torch, which raises or computes as it does.
"""

from __future__ import annotations

from typing import Mapping

import libcst as cst

from torch2pypto.mapping import Entry
from torch2pypto.rules import templates, wrappers
from torch2pypto.rules.calls import literal, rejection, replacement, wrapper_params
from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.site import CallSite, Converted, Unsupported

MAX_INPUTS = 32  # tensors a cat or stack kernel takes
MAX_PIECES = 64  # column runs per kernel (each is an unrolled view and assemble)

PIECES = Definition(
    "_pieces",
    f'''\
def _pieces(shape, moves):
    """How a [rows, prod(shape)] input lands in its [rows, prod(out shape)] output, as column runs:
    `moves[d]` = (out size, [(source start, count, output start), ...]) along dim d of `shape`.
    Returns the input's runs ((source col, size, output col), ...), the output's runs no input
    reaches ((output col, size), ...), and the output's width; None past {MAX_PIECES} runs."""
    sizes = [size for size, _ in moves]
    identity = [runs == [(0, n, 0)] and size == n for n, (size, runs) in zip(shape, moves)]
    inner, outer = [1] * len(shape), [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        inner[d], outer[d] = inner[d + 1] * shape[d + 1], outer[d + 1] * sizes[d + 1]
    pieces = []

    def walk(d, src, dst):
        for start, count, at in moves[d][1]:
            if count <= 0:
                continue
            if all(identity[d + 1:]):  # the dims inside are whole: one run
                pieces.append((src + start * inner[d], count * inner[d], dst + at * outer[d]))
            else:
                for j in range(count):
                    walk(d + 1, src + (start + j) * inner[d], dst + (at + j) * outer[d])
            if len(pieces) > {MAX_PIECES}:
                return

    walk(0, 0, 0)
    width = math.prod(sizes)
    fills, done = [], 0
    for src, size, dst in sorted(pieces, key=lambda p: p[2]):
        if dst > done:
            fills.append((done, dst - done))
        done = max(done, dst + size)
    if done < width:
        fills.append((done, width - done))
    if len(pieces) + len(fills) > {MAX_PIECES}:
        return None
    return tuple(pieces), tuple(fills), width
''',
    imports=("math",),
)

JOINED = Definition(
    "_joined",
    '''\
def _joined(tensors, dim, stacked):
    """Whether an assemble kernel joins `tensors` as torch.cat (`stacked`: torch.stack) along
    `dim`: tensors of one float dtype on the kernel path, shapes torch accepts; and if so their
    [rows, cols] matrices, places, the output's width and shape."""
    if not isinstance(dim, int) or not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    first = tensors[0]
    rank = first.dim() + stacked
    if not -rank <= dim < rank or any(t.dtype != first.dtype or t.dim() != first.dim() for t in tensors):
        return None
    dim %= rank
    if first.dim() == 0 or not _on_kernel_path(*tensors):
        return None
    same = [d for d in range(first.dim()) if stacked or d != dim]
    if any(t.shape[d] != first.shape[d] for t in tensors for d in same):
        return None
    rows = math.prod(first.shape[:dim])
    matrices = [t.reshape(rows, -1).contiguous() for t in tensors]
    places, at = [], 0
    for m in matrices:
        places.append(((0, m.shape[1], at),))
        at += m.shape[1]
    if stacked:
        shape = [*first.shape[:dim], len(tensors), *first.shape[dim:]]
    else:
        shape = [*first.shape[:dim], sum(t.shape[dim] for t in tensors), *first.shape[dim + 1:]]
    return matrices, tuple(places), at, shape
''',
    ("_on_kernel_path",),
    imports=("math",),
)

LAYOUTS = {
    "cat": "tensors joined along dim",
    "stack": "tensors stacked along a new dim",
    "roll": "input rolled along dims",
    "repeat_interleave": "input's slices along dim repeated",
    "pad": "input padded with a constant",
}
PARAMS = {  # the parameters each layout reads
    "cat": ("tensors", "dim"),
    "stack": ("tensors", "dim"),
    "roll": ("input", "shifts", "dims"),
    "repeat_interleave": ("input", "repeats", "dim"),
    "pad": ("input", "pad", "mode", "value"),
}


def layout(entry: Entry) -> str:
    return entry.args.get("layout", "")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    kind = layout(entry)
    if kind not in LAYOUTS:
        return f"args.layout is one of {', '.join(LAYOUTS)}, not {kind!r}"
    if set(entry.args) != {"layout"}:
        return "args: only layout"
    if entry.pypto != "assemble":
        return f"movement copies with pypto.view and pypto.assemble (pypto = \"assemble\"), not pypto.{entry.pypto}"
    names = tuple(p.name for p in wrapper_params(entry))
    if names != PARAMS[kind]:
        return f"a {kind} takes ({', '.join(PARAMS[kind])}) once rejected arguments are gone, not ({', '.join(names)})"
    if set(entry.dtypes) - {"float32", "float16", "bfloat16"}:
        return "movement kernels take float dtypes"
    return None


def wrapper_names(entry: Entry) -> tuple[str, ...]:
    """cat and stack have one wrapper per number of tensors (pypto_cat2); the others one."""
    if layout(entry) in ("cat", "stack"):
        return tuple(f"pypto_{entry.op}{n}" for n in range(1, MAX_INPUTS + 1))
    return (f"pypto_{entry.op}",)


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site)
    if rejected:
        return rejected
    entry, kind = site.entry, layout(site.entry)
    if kind in ("cat", "stack"):
        tensors = site.args["tensors"]
        if not isinstance(tensors, (cst.List, cst.Tuple)) or any(isinstance(e, cst.StarredElement) for e in tensors.elements):
            return Unsupported("the number of tensors is not known at the call (a list or tuple literal converts)")
        count = len(tensors.elements)
        if not 1 <= count <= MAX_INPUTS:
            return Unsupported(f"{count} tensors: a {kind} kernel takes 1 to {MAX_INPUTS}")
        name = f"pypto_{entry.op}{count}"
        return Converted(replacement(site, name), _join(entry, name, count), "pypto.assemble", wrapper_params(entry))
    if kind == "repeat_interleave" and site.is_tensor("repeats"):
        return Unsupported("tensor repeats: the output's size depends on the values, which a kernel's static layout cannot follow")
    if kind == "pad":
        mode = site.args.get("mode")
        if mode is not None and literal(mode) != "constant":
            return Unsupported(f"mode={literal(mode)!r}: only the constant mode is a copy and a fill")
    name = f"pypto_{entry.op}"
    return Converted(replacement(site, name), _moved(entry, name), "pypto.assemble", wrapper_params(entry))


def _join(entry: Entry, name: str, count: int) -> tuple[Definition, ...]:
    kernel = f"assemble{count}_kernel"
    stacked = layout(entry) == "stack"
    body = (
        "matrices, places, width, shape = joined\n"
        "out = torch.empty(matrices[0].shape[0], width, dtype=tensors[0].dtype, device=tensors[0].device)\n"
        f"cols = tuple(m.shape[1] for m in matrices)\n"
        f"_launch({kernel}(_PYPTO_DTYPES[out.dtype], cols, width, places), *matrices, out)\n"
        "return out.reshape(shape)\n"
    )
    params = wrapper_params(entry)
    how = (f"{LAYOUTS[layout(entry)]}: each tensor, folded to [rows, cols] at dim, is assembled into its "
           "columns of the output (pypto.view and pypto.assemble, any widths)")
    wrapper = wrappers.wrapper(
        entry, name, wrappers.signature(params), how, "*tensors", wrappers.torch_call(entry, params),
        "joined", body, ("_joined", kernel),
        prologue=f"joined = _joined(tensors, dim, {stacked}) if len(tensors) == {count} else None\n",
    )
    return templates.assemble_kernel(kernel, count), JOINED, wrapper


MOVES = {  # host code: `rows` (the folded leading dims), `shape` (the dims moved), `moves`, `result`
    "roll": '''\
def _rolled(input, shifts, dims):
    """The fold, moves and result shape of torch.roll(input, shifts, dims), or None if torch
    would refuse or compute it another way."""
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if dims is None:
        if len(shifts) != 1:
            return None
        return 1, [input.numel()], [_rolled_runs(input.numel(), shifts[0])], input.shape
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    rank = input.dim()
    if len(dims) != len(shifts) or not dims or not all(type(v) is int for v in (*dims, *shifts)):
        return None
    if any(not -rank <= d < rank for d in dims):
        return None
    by_dim = {}
    for d, s in zip(dims, shifts):
        by_dim[d % rank] = by_dim.get(d % rank, 0) + s
    first = min(by_dim)
    shape = list(input.shape[first:])
    moves = [_rolled_runs(n, by_dim.get(first + d, 0)) for d, n in enumerate(shape)]
    return math.prod(input.shape[:first]), shape, moves, input.shape


def _rolled_runs(n, shift):
    """Dim n rolled by `shift`: its last `shift` entries first."""
    shift %= n
    return n, [(n - shift, shift, 0), (0, n - shift, shift)] if shift else [(0, n, 0)]
''',
    "repeat_interleave": '''\
def _repeated(input, repeats, dim):
    """The fold, moves and result shape of torch.repeat_interleave(input, repeats, dim) for an
    int `repeats`, or None: each slice along dim is repeated `repeats` times in a row."""
    if type(repeats) is not int or repeats < 0 or dim is not None and not isinstance(dim, int):
        return None
    if dim is None:
        return input.numel(), [1], [(repeats, [(0, 1, j) for j in range(repeats)])], (input.numel() * repeats,)
    rank = max(input.dim(), 1)
    if not -rank <= dim < rank or input.dim() == 0:
        return None
    dim %= rank
    shape = list(input.shape[dim + 1:]) or [1]
    inner = math.prod(shape)
    moves = [(repeats * inner, [(0, inner, j * inner) for j in range(repeats)])]
    result = (*input.shape[:dim], input.shape[dim] * repeats, *input.shape[dim + 1:])
    return math.prod(input.shape[:dim + 1]), [inner], moves, result
''',
    "pad": '''\
def _padded(input, pad, mode, value):
    """The fold, moves and result shape of F.pad(input, pad, "constant", value), or None: pad's
    pairs, last dim first, add (or, negative, remove) entries before and after each dim."""
    if mode != "constant" or not isinstance(pad, (list, tuple)) or len(pad) % 2 or not pad:
        return None
    if not all(type(p) is int for p in pad) or len(pad) // 2 > input.dim():
        return None
    if value is not None and type(value) not in (int, float):
        return None
    k = len(pad) // 2
    shape = list(input.shape[input.dim() - k:])
    moves = []
    for d, n in enumerate(shape):
        before, after = pad[2 * (k - 1 - d)], pad[2 * (k - 1 - d) + 1]
        size = n + before + after
        if size <= 0:
            return None
        moves.append((size, [(max(0, -before), n - max(0, -before) - max(0, -after), max(0, before))]))
    result = (*input.shape[:input.dim() - k], *(size for size, _ in moves))
    return math.prod(input.shape[:input.dim() - k]), shape, moves, result
''',
}
HOSTS = {"roll": "_rolled", "repeat_interleave": "_repeated", "pad": "_padded"}


def _moved(entry: Entry, name: str) -> tuple[Definition, ...]:
    kind = layout(entry)
    host = HOSTS[kind]
    params = wrapper_params(entry)
    args = ", ".join(p.name for p in params)
    value = ", 0.0 if value is None else float(value)" if kind == "pad" else ""
    prologue = (
        f"geometry = {host}({args}) if isinstance(input, torch.Tensor) and _on_kernel_path(input) else None\n"
        "pieces = geometry and _pieces(*geometry[1:3])  # the runs, the fills, the output's width\n"
    )
    body = (
        "rows, _, _, result = geometry\n"
        "places, fills, width = pieces\n"
        "x = input.reshape(rows, -1).contiguous()\n"
        "out = torch.empty(rows, width, dtype=input.dtype, device=input.device)\n"
        f"_launch(assemble1_kernel(_PYPTO_DTYPES[x.dtype], (x.shape[1],), width, (places,), fills{value}), x, out)\n"
        "return out.reshape(result)\n"
    )
    guard = "(pieces is not None and pieces[2] > 0)"
    how = (f"{LAYOUTS[kind]}: the input, folded to [rows, cols] before the dims it moves, is assembled run by run "
           "into the output (pypto.view, pypto.assemble" + (", pypto.full for the constant)" if kind == "pad" else ")"))
    host_definition = Definition(host, MOVES[kind], ("_on_kernel_path",), imports=("math",))
    wrapper = wrappers.wrapper(
        entry, name, wrappers.signature(params), how, "input", wrappers.torch_call(entry, params), guard, body,
        (host, "_pieces", "assemble1_kernel"), prologue=prologue,
    )
    return templates.assemble_kernel("assemble1_kernel", 1), PIECES, host_definition, wrapper
