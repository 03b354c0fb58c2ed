"""``translate --verify``: run each converted call site's and fused region's kernel in the CPU interpreter.

One case per call site (or region), kernel dtype and sample shape; the kernel's result is
compared with the wrapper's torch path (the original op, or the region's original statements)
by the isolated worker of :mod:`isolated`.
"""

from __future__ import annotations

import ast
import collections
import copy
import itertools
import math

import libcst as cst
import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from torch2pypto.mapping import installed, load_table, samples
from torch2pypto.mapping.tolerance import equal_nan, region_tolerance, tolerance
from torch2pypto.rules import rope
from torch2pypto.rules.calls import literal, source_of
from torch2pypto.rules.tile_program import ROWS, VECTOR
from torch2pypto.schema import operators
from torch2pypto.schema.family import family
from torch2pypto.translator.engine.binding import BindError, ast_args, bind, cst_args
from torch2pypto.translator.engine.linears import BACK_BIAS, BACK_WEIGHT, BIAS, MODULE, OTHER, SQUARE_WEIGHT, WEIGHT
from torch2pypto.translator.engine.regions import Region
from torch2pypto.translator.engine.inference import DTYPE_NAMES
from torch2pypto.translator.engine.transform import Conversion
from torch2pypto.translator.engine.translate import Translation
from torch2pypto.translator.verification.isolated import NOT_EXERCISED, Built, Case, Function, Instance, Outcome, verify

_NUMBERS = {"Number": 0.5, "int": 1, "Dims": -1, "bool": False}  # non-literal arguments of these kinds


def cases(conversion: Conversion, key: str, seed: int = 0) -> list[Case]:
    """Cases exercising one converted call on every kernel dtype and its entry's sample shapes.

    Inputs come from the entry's sample hints (:mod:`torch2pypto.mapping.samples`): the first
    tensor has the case's shape, other tensor operands match it, a cast's ``other`` has another
    dtype. Each case's label is ``key`` (unique per call site), its dtype and its shape; it is
    compared within the entry's tolerance (:mod:`torch2pypto.mapping.tolerance`). A ``module``
    known at run time only (an activation registry's) is each of the family's module samples, on
    the first sample shape (the label names its class).
    """
    record = conversion.record
    bound = bind(conversion.params, cst_args(conversion.call), rest=True)
    for param in conversion.params:  # a call with *args passes these at run time: sampled as written ones
        if param.required and param.name not in bound:
            bound[param.name] = cst.Name(param.name)
    wrapper = source_of(conversion.call.func)
    table = load_table()
    entry = table.by_wrapper.get(wrapper) or table.by_api[record.api]  # clamp(x, min=t): its tensor form's
    modules = family(entry.family).module_samples(entry)
    arguments = {name: source_of(node) for name, node in bound.items() if isinstance(node, cst.CSTNode)}
    launching = [d for d in entry.dtypes if d in samples.DTYPES and family(entry.family).launches(entry, d, arguments)]
    kernel_dtypes = [samples.DTYPES[d] for d in launching]  # those the call as written launches on
    names, given = _sample_names(entry), _example_arguments(entry)
    equation = literal(bound[entry.params[0].name]) if entry.params[0].kinds == ("str",) else None
    dims = literal(bound["dim"]) if "dim" in bound else None  # the call's dim if it is a literal
    dim = dims if type(dims) is int else None  # an index's
    dims = dims if dim is not None or isinstance(dims, tuple) and all(type(d) is int for d in dims) else None
    result = []
    for i, dtype in enumerate(kernel_dtypes):
        other = kernel_dtypes[(i + 1) % len(kernel_dtypes)]
        shapes_tried = _equation_shapes(equation) if isinstance(equation, str) else samples.shapes(entry)[:1] if modules else samples.shapes(entry)
        shapes_tried = [s for s in shapes_tried if _has_dims(s, dims)] or shapes_tried  # the call's dim exists
        for shapes, module in itertools.product(shapes_tried, modules or [None]):
            shape, operands = (shapes[0], list(shapes)) if isinstance(equation, str) else (shapes, [])
            generator = torch.Generator().manual_seed(seed)
            args, kwargs, sampled_names = [], {}, {}
            for param in conversion.params:
                if param.name not in bound:
                    continue
                if param.name == "module" and module is not None:
                    args.append(copy.deepcopy(module).to(dtype))
                    continue
                sampled = family(entry.family).operand_sample(entry, len(args), param.name)
                tensor_dtype = {"same": dtype, "other": other, "bool": torch.bool}[sampled]
                name = names.get(param.name)
                param_shape = samples.operand_shape(entry, name, shape, dim) if name in ("y", "w") else shape
                if "Tensor" in param.kinds and operands:  # an einsum operand: the equation's sizes
                    param_shape = operands.pop(0)
                unknown = literal(bound[param.name]) is Ellipsis and "Tensor" not in param.kinds
                if name == "i":  # an index in range along the call's dim
                    value = samples.index(entry, shape, generator, dim)
                elif param.name in entry.fallback and unknown:
                    value = param.default  # known at run time only: the value the kernel takes (sdpa's dropout_p)
                elif param.name == entry.forward:
                    value = param.default  # a module's forward, which only the torch path runs
                elif unknown and param.name in given and given[param.name][1] <= set(sampled_names):
                    # known at run time only: what the table's example passes (conv's stride=y.shape[2:])
                    value = eval(given[param.name][0], {"torch": torch, **sampled_names})  # noqa: S307 (the table's own example)
                elif unknown and not param.required and param.default is not None:
                    value = param.default  # known at run time only (an nn module's attribute): its default
                elif (literal(bound[param.name]) is Ellipsis and not param.required and param.default is None
                      and not name and any(param.name in attrs for attrs in entry.modules.values())):
                    value = None  # a module's optional tensor the examples never pass (a loss's class weights): its default
                elif "DType" in param.kinds and arguments.get(param.name) == f"{arguments.get(entry.params[0].name)}.dtype":
                    value = dtype  # x.dtype, of the input
                elif unknown and "object" in param.kinds and sampled == "other":
                    value = other  # a dtype carrier known at run time only (x.to(dev_or_dtype)): the dtype, which launches
                else:
                    value = _value(entry, param.kinds, bound[param.name], param_shape, tensor_dtype, other, generator)
                    if unknown and "Number" in param.kinds and not dtype.is_floating_point:
                        value = _NUMBERS["int"]  # an integer tensor's bound: an int keeps its dtype, as its kernel needs
                if name:
                    sampled_names[name] = value
                if param.by_position:
                    args.append(value)
                else:
                    kwargs[param.name] = value
            label = f"{key} {dtype_name(dtype)} {list(shape)}" + (f" {type(module).__name__}" if module is not None else "")
            result.append(Case(label, wrapper, tuple(args), kwargs, tolerance(entry, dtype, shape, dims), equal_nan(entry)))
    return result


FUSED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # what a fused wrapper hands its kernel
_GATED_N = 33  # a gated pair's projection width in the samples: no multiple of 16
_GATED = {
    WEIGHT: lambda entry, shape, dtype, generator: samples.tensor(entry, (_GATED_N, shape[-1]), dtype, generator) / shape[-1] ** 0.5,
    BIAS: lambda entry, shape, dtype, generator: samples.tensor(entry, (_GATED_N,), dtype, generator),
    MODULE: lambda entry, shape, dtype, generator: torch.nn.SiLU(),
    OTHER: lambda entry, shape, dtype, generator: samples.tensor(entry, (*shape[:-1], _GATED_N), dtype, generator),
    # the linear a submodule's forward returns, back to the rows' width (from a gated pair's, or from it)
    BACK_WEIGHT: lambda entry, shape, dtype, generator: samples.tensor(entry, (shape[-1], _GATED_N), dtype, generator) / _GATED_N ** 0.5,
    SQUARE_WEIGHT: lambda entry, shape, dtype, generator: samples.tensor(entry, (shape[-1], shape[-1]), dtype, generator) / shape[-1] ** 0.5,
    BACK_BIAS: lambda entry, shape, dtype, generator: samples.tensor(entry, (shape[-1],), dtype, generator),
}
_DOMAINS = ("positive", "unit", "nonfinite")  # a region samples in the first of these an entry of it has


def region_cases(region: Region, key: str, seed: int = 0) -> list[Case]:
    """Cases exercising a fused region's kernel on every float dtype and the sample shapes.

    Rows operands have the case's shape, vectors its last dim, all of its dtype, in the value
    domain of the region's entries (the narrowest their sample hints name); Python numbers are
    0.5, dtypes the case's; ``self`` an :class:`Instance` of the region's class holding the
    operands read from it; a ``callee`` the module's function of its name. A region of last-dim
    slices takes rows of 64 (37 would not align its slices: it would run torch). No cases if the
    fallback reads ``self`` of no class the module names.
    Compared within :func:`region_tolerance`, as tests/test_fusion.py compares them.
    """
    entry = _sampled(region)
    if any(p.kind == "self" for p in region.params) and region.owner is None:
        return []
    if any(p.kind == rope.ANGLES for p in region.params):
        return _rope_cases(region, key, entry, seed)
    result = []
    sliced = any(op in ("x[..., a:b]", "cat") for op in region.ops)  # rows of 64: halves on 32-byte blocks (RoPE)
    for dtype in FUSED_DTYPES:
        for shape in (tuple(s[:-1] + (64,)) if sliced else s for s in samples.SHAPES if len(s) >= region.rank):
            args = _operands(region, entry, shape, dtype, torch.Generator().manual_seed(seed))
            params, args = _submodules(region, args) if region.derived else (region.params, args)
            if region.owner is not None:
                attrs = tuple((p.source.removeprefix("self."), i) for i, p in enumerate(params) if p.source.startswith("self."))
                args = [Instance(region.owner, attrs) if p.kind == "self" else a for p, a in zip(params, args)]
            label = f"{key} {dtype_name(dtype)} {list(shape)}"
            result.append(Case(label, region.wrapper, tuple(args), {}, region_tolerance(dtype), equal_nan(entry)))
    return result


def _operands(region: Region, entry, shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator) -> list:
    """A sample of each of the region's parameters over rows of ``shape`` (a module's: None,
    :func:`_submodules` makes it)."""
    args = []
    for param in region.params:
        if param.kind in (ROWS, VECTOR, "like"):
            args.append(samples.tensor(entry, shape if param.kind != VECTOR else shape[-1:], dtype, generator))
        elif param.kind in _GATED:  # a gated pair's or epilogue's linear weights [n, k], biases [n], activation, other operand
            args.append(_GATED[param.kind](entry, shape, dtype, generator))
        else:
            args.append(Function(param.source) if param.kind in ("callee", "class") else {"number": 0.5, "dtype": dtype}.get(param.kind))
    return args


def _sampled(region: Region):
    """The entry whose sample hints a region's cases follow: the first of its entries in the
    narrowest value domain of :data:`_DOMAINS`, else its first."""
    entries = [load_table().entries[op] for op in region.entries]
    return next((e for d in _DOMAINS for e in entries if e.sample.domain == d), entries[0])


def _rope_cases(region: Region, key: str, entry, seed: int) -> list[Case]:
    """Cases of the projections with RoPE in their epilogue (rules.rope): x [B, S, 37] (decode and
    an odd S), q 4 heads and k, v 2 of a head_dim of 32 (or one weight of all, phi3's qkv_proj,
    sliced there), angles [B, S, 32]; a head's norm (qwen3's q_norm) its class built over the head_dim."""
    return [Case(f"{key} {dtype_name(dtype)} {[batch, seq, 37]}", region.wrapper, args, {}, region_tolerance(dtype), equal_nan(entry))
            for dtype, batch, seq, args in _rope_arguments(region, entry, seed)]


def _rope_arguments(region: Region, entry, seed: int):
    """(dtype, batch, seq, the arguments) of each of :func:`_rope_cases`'s cases."""
    for dtype in FUSED_DTYPES:
        for batch, seq in ((1, 1), (2, 7)):
            generator = torch.Generator().manual_seed(seed)
            widths, bounds = iter((128, 64, 64)), iter((128, 192))
            args = []
            for param in region.params:
                if param.kind == ROWS:
                    args.append(samples.tensor(entry, (batch, seq, 37), dtype, generator))
                elif param.kind in (WEIGHT, rope.QKV):  # q's, k's and v's, or one weight of all three (sliced at the bounds)
                    args.append(samples.tensor(entry, (next(widths) if param.kind == WEIGHT else 256, 37), dtype, generator) / 37 ** 0.5)
                elif param.kind == rope.BOUND:
                    args.append(next(bounds))
                elif param.kind == BIAS:
                    args.append(samples.tensor(entry, (args[-1].shape[0],), dtype, generator))
                elif param.kind == rope.HEADS:
                    args.append((batch, seq, -1, 32))
                elif param.kind == rope.ANGLES:
                    args.append(samples.tensor(entry, (batch, seq, 32), dtype, generator))
                elif param.kind == MODULE:  # a head's norm: its class built over the head_dim
                    args.append(Built(dict(region.modules)[param.name], (32,), str(dtype).removeprefix("torch."), seed))
                else:
                    args.append(Function(param.source))
            yield dtype, batch, seq, args


def deferred_cases(region: Region, rotation: Region, key: str, seed: int = 0) -> list[Case]:
    """Cases of a region deferred into a projections kernel's prologue (engine.deferrals): the
    function the projections' wrapper hands the deferred call to, called as the wrapper calls it.
    Its arguments are :func:`_rope_cases`'s, x a tensor of NaNs (the kernel reads its shape and
    dtype, no value of it: one read would show); its keywords the region's operands, sampled as
    :func:`region_cases` samples them over x's shape. Its own kernel must launch: its fallback (the
    region's kernel, then the projections') proves nothing of it."""
    entry, deferral = _sampled(region), region.deferred
    keywords = dict(deferral.keywords)
    x = next(i for i, p in enumerate(rotation.params) if p.kind == ROWS)
    result = []
    for dtype, batch, seq, args in _rope_arguments(rotation, _sampled(rotation), seed):
        args[x] = torch.full((batch, seq, 37), math.nan, dtype=dtype)
        operands = _operands(region, entry, (batch, seq, 37), dtype, torch.Generator().manual_seed(seed + 1))
        value = dict(zip((p.name for p in region.params), operands))
        value |= {p.name: a for p, a in zip(*_submodules(region, operands)) if p.kind == MODULE}
        kwargs = {keywords[name]: a for name, a in value.items()}
        label = f"{key} {dtype_name(dtype)} {[batch, seq, 37]}"
        result.append(Case(label, deferral.function, tuple(args), kwargs, region_tolerance(dtype), equal_nan(entry), kernels=deferral.kernels))
    return result


def _submodules(region: Region, args: list) -> tuple[list, list]:
    """The parameters and arguments of a region that inlines submodules: each an :class:`Instance`
    of its class holding the values of the attributes the wrapper reads from it, which are none."""
    value = {p.name: a for p, a in zip(region.params, args)}
    derived = dict(region.derived)
    sources = {p.name: p.source for p in region.params}
    modules = {
        module: Instance(sources[cls], (), tuple((read.partition(".")[2], value[name]) for name, read in derived.items()
                                                if read.partition(".")[0] == module))
        for module, cls in region.modules
    }
    kept = [(p, modules.get(p.name, a)) for p, a in zip(region.params, args) if p.name not in derived]
    return [p for p, _ in kept], [a for _, a in kept]


def _sample_names(entry) -> dict[str, str]:
    """The sample name (x, y, w) each parameter takes in the entry's first example (if any)."""
    if not entry.examples.convert:
        return {}
    call = ast.parse(entry.examples.convert[0], mode="eval").body
    if sides := operators.operands(call):  # an operator's example (x[i]): its receiver and argument
        how = operators.dispatch(call, sides, isinstance(sides[0], ast.Name))
        operands = (how.receiver,) if how.argument is None else (how.receiver, how.argument)
        return {p.name: o.id for p, o in zip(entry.params, operands) if isinstance(o, ast.Name)}
    if not isinstance(call, ast.Call):
        return {}
    func = call.func
    method = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("x", "y")
    try:
        bound = bind(entry.params, ast_args(call), func.value if method else None)
    except BindError:
        return {}
    return {param: value.id for param, value in bound.items() if isinstance(value, ast.Name)}


def _example_arguments(entry) -> dict[str, tuple[str, set[str]]]:
    """The expressions of sample names the entry's first example passes (conv's ``stride=y.shape[2:]``),
    with the names they read (none for a registry entry, which has no examples)."""
    if not entry.examples.convert:
        return {}
    call = ast.parse(entry.examples.convert[0], mode="eval").body
    if not isinstance(call, ast.Call) or isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) in ("x", "y"):
        return {}
    try:
        bound = bind(entry.params, ast_args(call))
    except BindError:
        return {}
    reads = {param: {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} for param, value in bound.items()}
    return {param: (ast.unparse(value), reads[param]) for param, value in bound.items()
            if not isinstance(value, ast.Name) and reads[param] and reads[param] <= {"x", "y", "w"}}


_EQUATION_SIZES = ((7, 5, 3, 37, 2, 6, 4, 9), (130, 3, 2, 20, 5, 4, 6, 3))  # odd sizes, two row tiles


def _equation_shapes(equation: str) -> list[tuple[tuple[int, ...], ...]]:
    """The operands' shapes of an einsum equation, one case per size set: each index its size, an
    ellipsis two batch dims (2, 3)."""
    terms = equation.replace(" ", "").partition("->")[0].split(",")
    letters = sorted({c for t in terms for c in t if c != "."})
    cases = []
    for sizes in _EQUATION_SIZES:
        size = {c: sizes[i % len(sizes)] for i, c in enumerate(letters)}
        cases.append(tuple(((2, 3) if "..." in t else ()) + tuple(size[c] for c in t.replace(".", "")) for t in terms))
    return cases


def _has_dims(shape: tuple[int, ...], dims: int | tuple[int, ...] | None) -> bool:
    """Whether a sample of ``shape`` has the call's literal ``dims`` (a dim of 1 needs two)."""
    wanted = () if dims is None else (dims,) if type(dims) is int else dims
    return all(-len(shape) <= d < len(shape) for d in wanted)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _value(entry, kinds, expr, shape, dtype, other, generator):
    value = literal(expr)
    if "DType" in kinds:
        name = source_of(expr).rsplit(".", 1)[-1]
        return getattr(torch, DTYPE_NAMES[name]) if name in DTYPE_NAMES else other
    if "Device" in kinds:
        return None if value is None else torch.device("cpu")
    if value is not Ellipsis:
        return value
    if "Tensor" in kinds and "int" in kinds:
        return 2  # repeats: Tensor | int: a converted call passes the int (a known tensor stays torch)
    if "Tensor" in kinds:
        return samples.tensor(entry, shape, dtype, generator)
    if "Tensors" in kinds:  # cat, stack: a list literal's number of tensors, else the samples' list length
        elements = getattr(expr, "elements", None)
        fixed = elements is not None and not any(isinstance(e, cst.StarredElement) for e in elements)
        return [samples.tensor(entry, shape, dtype, generator) for _ in range(len(elements) if fixed else samples.LIST_LENGTH)]
    return _NUMBERS.get(kinds[0], 0.5)


def verify_translation(translation: Translation, console: Console, section: str) -> bool:
    """Verify every converted call site and fused region; print a row per site and region (its
    worst case: dtype, max abs error, share of its tolerance used) and a line per failed case;
    True if all match (a region whose kernel never ran is not ok)."""
    by_site = {str(i): cases(c, str(i)) for i, c in enumerate(translation.conversions)}
    by_site |= {f"r{i}": region_cases(r, f"r{i}") for i, r in enumerate(translation.regions)}
    deferred = _deferred(translation.regions)
    by_site |= {f"d{i}": deferred_cases(r, rotation, f"d{i}") for i, (r, rotation) in deferred.items()}
    if not by_site:
        console.print("nothing to verify: no call site was converted")
        return True
    wrong = _wrong_entries(translation)
    for line in wrong:
        console.print(f"table entry disagrees with the installed torch or pypto: {line}", markup=False, soft_wrap=True)
    outcomes = verify(section, [case for site_cases in by_site.values() for case in site_cases], whole=translation.code, path=translation.path)
    results = collections.defaultdict(list)
    for outcome in outcomes:
        results[outcome.label.split(" ", 1)[0]].append(outcome)
    table = Table()
    for column in ("line:col", "torch API", "cases", "worst", "max abs", "of tol", "result"):  # worst: its dtype
        table.add_column(column, justify="right" if column in ("cases", "max abs", "of tol") else "left",
                         overflow="fold", no_wrap=column == "torch API")
    rows = [(str(i), f"{c.record.line}:{c.record.column}", c.record.api) for i, c in enumerate(translation.conversions)]
    rows += [(f"r{i}", f"{r.span[0]}:{r.span[1] + 1}", f"fused region, {len(r.ops)} ops") for i, r in enumerate(translation.regions)]
    rows += [(f"d{i}", f"{r.span[0]}:{r.span[1] + 1}", "fused region, in its projections' prologue") for i, (r, _) in deferred.items()]
    ok, failures = True, collections.defaultdict(list)
    for site, where, api in rows:
        site_ok = bool(results[site]) and all(o.ok for o in results[site])
        ok &= site_ok
        table.add_row(where, escape(api), str(len(results[site])), *_worst(results[site]), _verdict(results[site]))
        for o in results[site]:
            if not o.ok:
                failures[where, api, _kind(o), o.error].append(o.label.split(" ", 1)[1])
        if not results[site]:  # a region whose fallback needs an instance of a class the module does not name
            failures[where, api, "not exercised", "no instance of its self's class can be made"].append("")
    # the title names the file: a path is not wrapped (a table title would be, at the table's width)
    console.print(f"{translation.path}: CPU interpreter vs torch", markup=False, soft_wrap=True)
    console.print(table)
    for (where, api, kind, error), which in failures.items():  # whole numbers and reasons, never cut
        more = f" (and {len(which) - 1} more cases)" if len(which) > 1 else ""
        said = error if str(error).startswith(f"{kind}:") else f"{kind}: {error}"  # a not-exercised reason says so itself
        console.print(f"{where} {api} {which[0]}".rstrip() + f"{more}: {said}", markup=False, soft_wrap=True, highlight=False)
    return ok and not wrong


def _deferred(regions: list[Region]) -> dict[int, tuple[Region, Region]]:
    """The regions deferred into a projections kernel's prologue, by index, each with the region of
    those projections (a region of the same module: its wrapper's)."""
    by_wrapper = {r.wrapper: r for r in regions}
    return {i: (r, by_wrapper[r.deferred.projections]) for i, r in enumerate(regions)
            if r.deferred is not None and r.deferred.projections in by_wrapper}


def _wrong_entries(translation: Translation) -> list[str]:
    """What the checks against torch and pypto find wrong in the entries the translation uses."""
    table = load_table()
    used = {table.by_api[c.record.api].op for c in translation.conversions if c.record.api in table.by_api}
    return installed.problems(table, used | {op for r in translation.regions for op in r.entries})


def _worst(outcomes: list[Outcome]) -> list[str]:
    """The dtype, max abs error and share of its tolerance of the case that used most of it."""
    compared = [o for o in outcomes if o.used is not None]
    if not compared:
        return ["-", "-", "-"]
    worst = max(compared, key=lambda o: o.used)
    return [worst.label.split(" ")[1], f"{worst.max_abs:.3g}", f"{worst.used:.0%}" if worst.used < math.inf else "inf"]


def _kind(outcome: Outcome) -> str:
    """What went wrong in a failed case: a result outside its tolerance, a case whose wrapper took
    its torch path, or an error (a kernel that failed to compile or run, a crash)."""
    if outcome.error is not None and outcome.error.startswith(NOT_EXERCISED.partition(":")[0]):
        return "not exercised"
    return "MISMATCH" if outcome.max_abs is not None else "error"


def _verdict(outcomes: list[Outcome]) -> str:
    kinds = {_kind(o) for o in outcomes if not o.ok} if outcomes else {"not exercised"}
    if not kinds:
        return "[green]ok[/]"
    if kinds != {"not exercised"}:
        return " and ".join(f"[red]{k}[/]" for k in ("error", "MISMATCH") if k in kinds)
    return "[yellow]not exercised[/]" + ("" if all(not o.ok for o in outcomes) else " (some cases)")
