"""The op table: loads ops.toml into validated, immutable entries.

>>> table = load_table()
>>> table.by_api["torch.Tensor.type_as"].category, table.by_api["torch.Tensor.type_as"].family
('difference', 'cast')
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import tomllib
from importlib import resources
from types import MappingProxyType
from typing import Any, Mapping

CATEGORIES = (
    "same-name",
    "same-name-different-params",
    "pure-rename",
    "difference",
    "composite",
    "unsupported",
    "host-side",
)
HOST_SIDE = "host-side"  # no kernel by design: views, shape ops, creation, device moves, dropout
FAMILIES = ("elementwise", "cast", "reduction", "scan", "composite", "cube", "movement", "triangle", "one_hot", "indexing", "sorting", "attention")  # how code is made (rules/)
KINDS = ("Tensor", "Tensors", "Number", "Dims", "DType", "Device", "bool", "int", "str", "object")
DTYPES = ("float32", "float16", "bfloat16", "float64", "bool", "uint8", "int8", "int16", "int32", "int64")
DOMAINS = ("real", "positive", "unit", "small", "nonfinite", "distinct")
INDEX_SAMPLES = ("", "row", "like", "unique", "any")  # sample.index: how an index tensor `i` is shaped
_NO_DEFAULT = object()


class TableError(ValueError):
    """The op table is malformed; the message names the entry and the problem."""


@dataclasses.dataclass(frozen=True)
class Param:
    """One torch parameter: name, kinds it accepts, default, and how it may be passed."""

    name: str
    kinds: tuple[str, ...]
    default: Any = _NO_DEFAULT
    keyword_only: bool = False
    variadic: bool = False

    @property
    def required(self) -> bool:
        return self.default is _NO_DEFAULT and not self.variadic

    @property
    def is_tensor(self) -> bool:
        return self.kinds == ("Tensor",)


@dataclasses.dataclass(frozen=True)
class Examples:
    """Calls that convert, and calls that stay torch with (part of) the reason they give.

    Written over the names of :data:`SAMPLE_NAMES`; the tests are generated from them.
    """

    convert: tuple[str, ...] = ()
    stay: Mapping[str, str] = dataclasses.field(default_factory=dict)


SAMPLE_NAMES = {
    "x": "the input: a float tensor of the case's shape and dtype",
    "y": "a second tensor like x",
    "w": "a tensor of x's last dim (a broadcast row)",
    "xs": "a list of tensors like x, x first (star-args)",
    "dev": "x's device",
    "m": "a bool tensor of x's shape (a mask)",
    "i": "an int64 index tensor into x along sample.dim, shaped as sample.index says",
}


@dataclasses.dataclass(frozen=True)
class Sample:
    """How to sample inputs for an entry's tests and --verify: value domain and shapes.

    ``domain``: real, positive (> 0: rsqrt, log), unit (in (0, 1)), small (integers in [0, 8):
    shift amounts) or nonfinite (real with inf, -inf and nan mixed in); ``shapes``: the shapes of
    ``x`` if the op needs particular ones (else the generated shapes: tail tiles, unaligned
    widths, rank 1 to 4); ``y`` and ``w``: the shapes of those names, one per shape of ``x``
    (matmul operands whose k matches); ``matrix``: more shapes of ``x`` that ``-m matrix`` adds.
    ``distinct``: no two values of a row alike (sorting, whose order of ties is unspecified).
    ``index``: the index ``i`` into x along ``dim``: ``row`` 1-D
    (index_select, index_add: y then is x with that dim's size the index's), ``like`` x's rank
    (gather), ``unique`` x's rank, no index twice along dim (scatter: y is the index's shape),
    ``any`` a 2-D index of x's rows (embedding).
    """

    domain: str = "real"
    shapes: tuple[tuple[int, ...], ...] = ()
    matrix: tuple[tuple[int, ...], ...] = ()
    y: tuple[tuple[int, ...], ...] = ()
    w: tuple[tuple[int, ...], ...] = ()
    index: str = ""
    dim: int = 0


@dataclasses.dataclass(frozen=True)
class Entry:
    """One op of the table (see the header of ops.toml for the fields)."""

    op: str
    category: str
    apis: tuple[str, ...]
    params: tuple[Param, ...]
    family: str | None = None
    pypto: str = ""
    args: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dtypes: tuple[str, ...] = ()
    compute: str | None = None
    output: str | None = None
    target: str | None = None
    commutative: bool = False
    inplace: bool = False
    bool_operands: tuple[str, ...] = ()
    order: tuple[str, ...] = ()  # the PyPTO op's operands in its own order (masked_fill: where(mask, value, input))
    average: bool = False
    rank: int | None = None
    recipe: str | None = None
    number_first: str | None = None  # the entry computing op(number, x) as itself with the operands swapped
    tensor_forms: Mapping[str, str] = dataclasses.field(default_factory=dict)  # "min,max" -> the entry computing the call when those are tensors
    torch: str | None = None  # a tensor form's torch function, which it falls back to (it has no apis of its own)
    along: str | None = None  # a composite's row: the dim (int) or normalized shape (Dims) it reduces
    halves: str | None = None  # a composite's dim whose two halves are its operands a and b (glu)
    channels: tuple[str, ...] = ()  # a composite's operands holding one value per channel (dim 1: prelu's weight)
    overloads: tuple[str, ...] = ()
    reject: Mapping[str, str] = dataclasses.field(default_factory=dict)
    fallback: Mapping[str, str] = dataclasses.field(default_factory=dict)  # parameter -> why a non-default value runs torch
    torch_only: tuple[str, ...] = ()  # parameters the kernel ignores: they reach torch's fallback and gradient
    omitted: Mapping[str, str] = dataclasses.field(default_factory=dict)  # required parameter -> why leaving it out stays torch
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)  # keyword torch also takes -> parameter
    reason: str | None = None
    note: str | None = None
    modules: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
    examples: Examples = Examples()
    sample: Sample = Sample()
    parts: Mapping[str, "Entry"] = dataclasses.field(default_factory=dict)  # entries a recipe calls

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    @property
    def torch_function(self) -> str | None:
        """The torch function spelling (for fallbacks), or None for method-only ops."""
        return self.torch or next((a for a in self.apis if not a.startswith("torch.Tensor.")), None)


@dataclasses.dataclass(frozen=True)
class Table:
    """Entries by op name, by every torch API spelling they cover, by the nn modules whose calls they
    are and by the generated wrappers whose calls are their converted sites."""

    entries: Mapping[str, Entry]
    by_api: Mapping[str, Entry]
    methods: frozenset[str]
    by_module: Mapping[str, Entry] = dataclasses.field(default_factory=dict)  # torch.nn class -> its entry
    by_wrapper: Mapping[str, Entry] = dataclasses.field(default_factory=dict)  # pypto_rsqrt -> rsqrt

    def method(self, name: str) -> Entry | None:
        return self.by_api.get(f"torch.Tensor.{name}")


def parse_signature(op: str, text: str) -> tuple[Param, ...]:
    """Parse a signature written as a Python parameter list, e.g. ``(input: Tensor, *, dim: int = 0)``."""
    try:
        args = ast.parse(f"def _{text}: pass").body[0].args  # type: ignore[attr-defined]
    except SyntaxError as exc:
        raise TableError(f"{op}: signature {text!r} is not a parameter list") from exc
    positional = [*args.posonlyargs, *args.args]
    defaults = [_NO_DEFAULT] * (len(positional) - len(args.defaults)) + [
        ast.literal_eval(d) for d in args.defaults
    ]
    params = [Param(a.arg, _kinds(op, a), d) for a, d in zip(positional, defaults)]
    if args.vararg:
        params.append(Param(args.vararg.arg, ("object",), variadic=True))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        default = _NO_DEFAULT if d is None else ast.literal_eval(d)
        params.append(Param(a.arg, _kinds(op, a), default, keyword_only=True))
    return tuple(params)


def _kinds(op: str, arg: ast.arg) -> tuple[str, ...]:
    if arg.annotation is None:
        return ("object",)
    kinds = tuple(k.strip() for k in ast.unparse(arg.annotation).split("|"))
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise TableError(f"{op}: parameter {arg.arg!r} has unknown kind(s) {unknown}")
    return kinds


def _entry(op: str, raw: dict[str, Any]) -> Entry:
    fields = {f.name for f in dataclasses.fields(Entry)} - {"op", "params", "parts"} | {"signature"}
    extra = set(raw) - fields
    if extra:
        raise TableError(f"{op}: unknown field(s) {sorted(extra)}")
    for required in ("category", "apis", "signature"):
        if required not in raw:
            raise TableError(f"{op}: missing field {required!r}")
    raw = dict(raw)
    params = parse_signature(op, raw.pop("signature"))
    entry = Entry(
        op=op,
        params=params,
        apis=tuple(raw.pop("apis")),
        dtypes=tuple(raw.pop("dtypes", ())),
        bool_operands=tuple(raw.pop("bool_operands", ())),
        order=tuple(raw.pop("order", ())),
        channels=tuple(raw.pop("channels", ())),
        args=MappingProxyType(dict(raw.pop("args", {}))),
        overloads=tuple(raw.pop("overloads", ())),
        reject=MappingProxyType(dict(raw.pop("reject", {}))),
        fallback=MappingProxyType(dict(raw.pop("fallback", {}))),
        torch_only=tuple(raw.pop("torch_only", ())),
        omitted=MappingProxyType(dict(raw.pop("omitted", {}))),
        tensor_forms=MappingProxyType(dict(raw.pop("tensor_forms", {}))),
        aliases=MappingProxyType(dict(raw.pop("aliases", {}))),
        modules=MappingProxyType({m: MappingProxyType(dict(a)) for m, a in raw.pop("modules", {}).items()}),
        examples=_examples(op, raw.pop("examples", {})),
        sample=_sample(op, raw.pop("sample", {})),
        **raw,
    )
    _check(entry)
    return entry


def _examples(op: str, raw: dict[str, Any]) -> Examples:
    extra = set(raw) - {"convert", "stay"}
    if extra:
        raise TableError(f"{op}: unknown example field(s) {sorted(extra)}")
    examples = Examples(tuple(raw.get("convert", ())), MappingProxyType(dict(raw.get("stay", {}))))
    for call in (*examples.convert, *examples.stay):
        try:
            ast.parse(call, mode="eval")
        except SyntaxError as exc:
            raise TableError(f"{op}: example {call!r} is not an expression") from exc
    return examples


def _sample(op: str, raw: dict[str, Any]) -> Sample:
    extra = set(raw) - {"domain", "shapes", "y", "w", "matrix", "index", "dim"}
    if extra:
        raise TableError(f"{op}: unknown sample field(s) {sorted(extra)}")
    shapes = {name: tuple(tuple(s) for s in raw.get(name, ())) for name in ("shapes", "y", "w", "matrix")}
    if shapes["matrix"] and not shapes["shapes"]:
        raise TableError(f"{op}: sample.matrix adds to sample.shapes, which it needs")
    sample = Sample(raw.get("domain", "real"), **shapes, index=raw.get("index", ""), dim=raw.get("dim", 0))
    if sample.index not in INDEX_SAMPLES:
        raise TableError(f"{op}: sample index is one of {', '.join(INDEX_SAMPLES[1:])}, not {sample.index!r}")
    for name in ("y", "w"):
        if shapes[name] and len(shapes[name]) != len(sample.shapes):
            raise TableError(f"{op}: sample.{name} gives one shape per shape of x ({len(sample.shapes)})")
    if sample.domain not in DOMAINS:
        raise TableError(f"{op}: sample domain is one of {', '.join(DOMAINS)}, not {sample.domain!r}")
    return sample


def _check(entry: Entry) -> None:
    op = entry.op
    if entry.category not in CATEGORIES:
        raise TableError(f"{op}: unknown category {entry.category!r}")
    if entry.category in ("unsupported", HOST_SIDE) and not entry.reason:
        raise TableError(f"{op}: an {entry.category} op needs a reason")
    if entry.category not in ("unsupported", HOST_SIDE) and not entry.pypto:
        raise TableError(f"{op}: a mapped op names its pypto API")
    kernel = entry.category not in ("unsupported", HOST_SIDE)
    if kernel and entry.family not in FAMILIES:
        raise TableError(f"{op}: a mapped op names its kernel family ({', '.join(FAMILIES)}), not {entry.family!r}")
    if not kernel and entry.family:
        raise TableError(f"{op}: an {entry.category} op has no kernel family")
    if kernel and not entry.examples.convert:
        raise TableError(f"{op}: a mapped op gives at least one example that converts")
    if entry.category != HOST_SIDE and (not entry.params or entry.params[0].kinds not in (("Tensor",), ("Tensors",))):
        raise TableError(f"{op}: the first parameter must be the input Tensor (or Tensors: a list of them)")
    if bool(entry.torch) == bool(entry.apis) or entry.torch and not entry.torch.startswith("torch."):
        raise TableError(f"{op}: an entry has apis, or is a tensor form naming the torch function it falls back to (torch)")
    for api in entry.apis:
        if not api.startswith("torch."):
            raise TableError(f"{op}: API {api!r} is not a torch name")
    names = {p.name for p in entry.params}
    for field in ("reject", "fallback", "torch_only"):
        for arg in getattr(entry, field):
            if arg not in names:
                raise TableError(f"{op}: {field} names unknown parameter {arg!r}")
    for arg in entry.omitted:
        if arg not in names or not entry.param(arg).required:
            raise TableError(f"{op}: omitted names {arg!r}, which is no required parameter")
    _check_aliases(entry, names)
    _check_modules(entry, names)
    for dtype in (*entry.dtypes, *filter(None, [entry.compute, entry.target, entry.output])):
        if dtype not in DTYPES:
            raise TableError(f"{op}: unknown dtype {dtype!r}")


def _check_aliases(entry: Entry, names: set[str]) -> None:
    """``aliases``: keyword -> parameter, for the other spellings torch accepts (``axis`` for ``dim``)."""
    for alias, param in entry.aliases.items():
        if not alias.isidentifier():
            raise TableError(f"{entry.op}: alias {alias!r} is not a keyword name")
        if alias in names:
            raise TableError(f"{entry.op}: alias {alias!r} is itself a parameter")
        if param not in names or entry.param(param).variadic:
            raise TableError(f"{entry.op}: alias {alias!r} names unknown parameter {param!r}")


def _check_modules(entry: Entry, names: set[str]) -> None:
    """``modules``: torch.nn class -> {parameter: attribute}; the input stays the call's own."""
    for module, attributes in entry.modules.items():
        if not module.startswith("torch.nn.") or not isinstance(attributes, Mapping):
            raise TableError(f"{entry.op}: modules maps torch.nn classes to {{parameter = attribute}}, not {module!r}")
        for param, attribute in attributes.items():
            if param not in names or param == entry.params[0].name:
                raise TableError(f"{entry.op}: module {module} binds {param!r}, not a parameter after the input")
            if not (isinstance(attribute, str) and attribute.isidentifier()):
                raise TableError(f"{entry.op}: module {module} reads {param!r} from {attribute!r}, not an attribute name")


def build_table(raw: Mapping[str, Any]) -> Table:
    """Validate raw TOML data into a Table; API spellings must be unique across entries."""
    entries = {op: _entry(op, body) for op, body in raw.items()}
    entries = {op: _with_parts(entry, entries) for op, entry in entries.items()}
    entries = {op: _with_number_first(entry, entries) for op, entry in entries.items()}
    entries = {op: _with_tensor_forms(entry, entries) for op, entry in entries.items()}
    for entry in entries.values():
        _honoured(entry, entries)
    by_api: dict[str, Entry] = {}
    for entry in entries.values():
        for api in entry.apis:
            if api in by_api:
                raise TableError(f"{api} is claimed by both {by_api[api].op} and {entry.op}")
            by_api[api] = entry
    by_module: dict[str, Entry] = {}
    for entry in entries.values():
        for module in entry.modules:
            if module in by_module or module in by_api:
                raise TableError(f"{module} is claimed by both {(by_module.get(module) or by_api[module]).op} and {entry.op}")
            by_module[module] = entry
    methods = frozenset(a.rsplit(".", 1)[1] for a in by_api if a.startswith("torch.Tensor."))
    by_wrapper = MappingProxyType(_by_wrapper(entries))
    return Table(MappingProxyType(entries), MappingProxyType(by_api), methods, MappingProxyType(by_module), by_wrapper)


def _by_wrapper(entries: Mapping[str, Entry]) -> dict[str, Entry]:
    """Each generated wrapper's entry, as its family names it; a wrapper stands for one entry."""
    from torch2pypto.rules import wrapper_names  # the families name their wrappers

    by_wrapper: dict[str, Entry] = {}
    for entry in entries.values():
        for name in wrapper_names(entry) if entry.family else ():
            if name in by_wrapper:
                raise TableError(f"wrapper {name} stands for both {by_wrapper[name].op} and {entry.op}")
            by_wrapper[name] = entry
    return by_wrapper


def _with_parts(entry: Entry, entries: Mapping[str, Entry]) -> Entry:
    """The entry with the entries its recipe calls (by op name) attached."""
    if not entry.recipe:
        return entry
    try:
        tree = ast.parse(entry.recipe)
    except SyntaxError as exc:
        raise TableError(f"{entry.op}: recipe {entry.recipe!r} is not Python statements") from exc
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    parts = {op: entries[op] for op in sorted(called) if op in entries}
    return dataclasses.replace(entry, parts=MappingProxyType(parts))


def _with_number_first(entry: Entry, entries: Mapping[str, Entry]) -> Entry:
    """The entry with its ``number_first`` entry (which computes ``op(number, x)``) attached."""
    if not entry.number_first:
        return entry
    if entry.number_first not in entries:
        raise TableError(f"{entry.op}: number_first names no entry: {entry.number_first!r}")
    parts = {**entry.parts, entry.number_first: entries[entry.number_first]}
    return dataclasses.replace(entry, parts=MappingProxyType(parts))


def _with_tensor_forms(entry: Entry, entries: Mapping[str, Entry]) -> Entry:
    """The entry with the entries of its ``tensor_forms`` attached: ``{ "min,max" = "clamp_tensors" }``
    computes ``clamp(x, t, u)`` as ``clamp_tensors(x, t, u)``, its tensor operands in that order."""
    parts = dict(entry.parts)
    for form, op in entry.tensor_forms.items():
        names = form.split(",")
        after = [p.name for p in entry.params[1:]]
        if not set(names) <= set(after) or names != sorted(set(names), key=after.index):
            raise TableError(f"{entry.op}: tensor_forms key {form!r} names parameters after the input, each once, in signature order")
        target = entries.get(op)
        if target is None or target.family is None:
            raise TableError(f"{entry.op}: tensor_forms names no mapped entry: {op!r}")
        tensors = [p for p in target.params if p.kinds == ("Tensor",) and p.required]
        if len(tensors) != 1 + len(names):
            raise TableError(f"{entry.op}: tensor form {op} takes {len(tensors)} tensor operand(s), not the input and {form!r}")
        parts[op] = target
    return dataclasses.replace(entry, parts=MappingProxyType(parts)) if entry.tensor_forms else entry


def _honoured(entry: Entry, entries: Mapping[str, Entry]) -> None:
    """Refuse an entry its kernel family cannot carry out faithfully (nothing is dropped silently)."""
    if entry.family is None:
        return
    from torch2pypto.rules import FAMILIES as KERNEL_FAMILIES  # they know what they can honour

    problem = KERNEL_FAMILIES[entry.family].problem(entry, entries)
    if problem:
        raise TableError(f"{entry.op}: {entry.family} family: {problem}")


@functools.cache
def load_table() -> Table:
    """The built-in table (torch2pypto/mapping/ops.toml)."""
    text = resources.files(__package__).joinpath("ops.toml").read_text(encoding="utf-8")
    return build_table(tomllib.loads(text))
