"""The op table: loads ops.toml into validated, immutable entries.

The fields every entry has are :class:`Entry`'s; the others go to the ``fields`` dataclass of the
entry's family (torch2pypto.schema.family), which checks their types; then the family says
whether it can honour the entry, and the examples must call their own entry
(:mod:`torch2pypto.mapping.examples`). Checks that need torch and pypto are
:mod:`torch2pypto.mapping.installed`'s.

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

import torch2pypto.rules  # noqa: F401  (the families register themselves)
from torch2pypto.mapping import examples
from torch2pypto.schema.entry import (  # the entry types, also imported from here
    CATEGORIES,
    DOMAINS,
    DTYPES,
    HOST_SIDE,
    INDEX_SAMPLES,
    SAMPLE_NAMES,
    Entry,
    Examples,
    Fields,
    Param,
    Sample,
    TableError,
    parse_signature,
)
from torch2pypto.schema.family import family

_FIELDS = frozenset(f.name for f in dataclasses.fields(Entry)) - {"op", "params", "parts", "fields"} | {"signature"}


@dataclasses.dataclass(frozen=True)
class Table:
    """Entries by op name, by every torch API spelling they cover, by the nn modules whose calls they
    are and by the generated wrappers whose calls are their converted sites."""

    entries: Mapping[str, Entry]
    by_api: Mapping[str, Entry]
    methods: frozenset[str]
    by_module: Mapping[str, Entry] = dataclasses.field(default_factory=dict)  # torch.nn class -> its entry
    by_wrapper: Mapping[str, Entry] = dataclasses.field(default_factory=dict)  # pypto_rsqrt -> rsqrt
    plus: Mapping[str, Entry] = dataclasses.field(default_factory=dict)  # arange -> arange_plus: call + k in one (Family.offsets)

    def method(self, name: str) -> Entry | None:
        return self.by_api.get(f"torch.Tensor.{name}")


def _entry(op: str, raw: dict[str, Any]) -> Entry:
    """An entry from its TOML table: the common fields are Entry's, the others its family's."""
    for required in ("category", "apis", "signature"):
        if required not in raw:
            raise TableError(f"{op}: missing field {required!r}")
    kind = family(raw["family"], op).fields if raw.get("family") is not None else Fields
    own = {k: v for k, v in raw.items() if k not in _FIELDS}
    extra = set(own) - {f.name for f in dataclasses.fields(kind)}
    if extra:
        raise TableError(f"{op}: unknown field(s) {sorted(extra)}" + (f" for the {raw['family']} family" if kind is not Fields else ""))
    raw = {k: v for k, v in raw.items() if k in _FIELDS}
    params = parse_signature(op, raw.pop("signature"))
    entry = Entry(
        op=op,
        params=params,
        apis=tuple(raw.pop("apis")),
        dtypes=tuple(raw.pop("dtypes", ())),
        reject=MappingProxyType(dict(raw.pop("reject", {}))),
        fallback=MappingProxyType(dict(raw.pop("fallback", {}))),
        torch_only=tuple(raw.pop("torch_only", ())),
        omitted=MappingProxyType(dict(raw.pop("omitted", {}))),
        tensor_forms=MappingProxyType(dict(raw.pop("tensor_forms", {}))),
        forms=MappingProxyType(dict(raw.pop("forms", {}))),
        aliases=MappingProxyType(dict(raw.pop("aliases", {}))),
        modules=MappingProxyType({m: MappingProxyType(dict(a)) for m, a in raw.pop("modules", {}).items()}),
        examples=_examples(op, raw.pop("examples", {})),
        sample=_sample(op, raw.pop("sample", {})),
        tolerance=_tolerance(op, raw.pop("tolerance", {})),
        fields=kind.load(op, own),
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


def _tolerance(op: str, raw: dict[str, Any]) -> Mapping[str, tuple[float, float]]:
    """``tolerance = { bfloat16 = [atol, rtol] }``: the entry's own base tolerance for those dtypes."""
    for dtype, pair in raw.items():
        if dtype not in DTYPES or not (isinstance(pair, list) and len(pair) == 2 and all(
                isinstance(v, (int, float)) and v >= 0 for v in pair)):
            raise TableError(f"{op}: tolerance maps dtypes to [atol, rtol], not {dtype!r} = {pair!r}")
    return MappingProxyType({dtype: tuple(pair) for dtype, pair in raw.items()})


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
    if kernel:
        family(entry.family, op)
    if not kernel and entry.family:
        raise TableError(f"{op}: an {entry.category} op has no kernel family")
    registry = _registry_only(entry)
    if kernel and not entry.examples.convert and not registry:
        raise TableError(f"{op}: a mapped op gives at least one example that converts")
    inputs = entry.params[1:] if entry.params and entry.params[0].kinds == ("str",) else entry.params  # einsum's equation
    if entry.category != HOST_SIDE and not (kernel and family(entry.family, op).creates) and (not inputs or inputs[0].kinds not in (("Tensor",), ("Tensors",))):
        raise TableError(f"{op}: the first parameter must be the input Tensor (or Tensors: a list of them), "
                         "after the str spelling the op (einsum's equation) if any, unless its family creates tensors")
    held_only = not kernel and bool(entry.modules) and not entry.torch  # a torch.nn class left as torch with its reason
    if (bool(entry.torch) == bool(entry.apis) and not registry and not held_only) or entry.torch and not entry.torch.startswith("torch."):
        raise TableError(f"{op}: an entry has apis, or is a tensor form naming the torch function it falls back to (torch),"
                         " or the modules of an activation registry, or of a torch.nn class it leaves as torch, only")
    for api in entry.apis:
        if not api.startswith("torch."):
            raise TableError(f"{op}: API {api!r} is not a torch name")
    names = {p.name for p in entry.params}
    for field in ("reject", "fallback", "torch_only"):
        for arg in getattr(entry, field):
            if arg not in names:
                raise TableError(f"{op}: {field} names unknown parameter {arg!r}")
    if entry.forward is not None and (entry.forward not in names or entry.param(entry.forward).default is not None
                                      or entry.param(entry.forward).is_tensor or not entry.modules):
        raise TableError(f"{op}: forward names a parameter of default None, no tensor, that the entry's modules bind")
    for arg in entry.omitted:
        if arg not in names or not entry.param(arg).required:
            raise TableError(f"{op}: omitted names {arg!r}, which is no required parameter")
    _check_aliases(entry, names)
    _check_modules(entry, names)
    for dtype in entry.dtypes:
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


def _registry_only(entry: Entry) -> bool:
    """An entry of no torch API whose modules are those of transformers' activation registries
    (torch.toml's module.activation_registries: ``ACT2FN[name]``, the name known at run time);
    no call over the sample names builds one, so it has no examples: its family's tests run it."""
    from torch2pypto.mapping.facts import load_facts  # facts imports this module

    registries = load_facts().module_activation_registries
    return not entry.apis and not entry.torch and bool(entry.modules) and set(entry.modules) <= registries


def _check_modules(entry: Entry, names: set[str]) -> None:
    """``modules``: torch.nn class (or an activation registry) -> {parameter: attribute, "" the
    module itself}; the input stays the call's own."""
    registry = _registry_only(entry)
    for module, attributes in entry.modules.items():
        if not (module.startswith("torch.nn.") or registry) or not isinstance(attributes, Mapping):
            raise TableError(f"{entry.op}: modules maps torch.nn classes to {{parameter = attribute}}, not {module!r}")
        for param, attribute in attributes.items():
            if param not in names or param == entry.params[0].name:
                raise TableError(f"{entry.op}: module {module} binds {param!r}, not a parameter after the input")
            if not (isinstance(attribute, str) and (attribute.isidentifier() or attribute == "")):
                raise TableError(f"{entry.op}: module {module} reads {param!r} from {attribute!r}, not an attribute name")


def build_table(raw: Mapping[str, Any]) -> Table:
    """Validate raw TOML data into a Table; API spellings must be unique across entries."""
    entries = {op: _entry(op, body) for op, body in raw.items()}
    entries = _with_parts(entries)
    entries = {op: _with_tensor_forms(entry, entries) for op, entry in entries.items()}
    for entry in entries.values():
        _honoured(entry, entries)
    examples.check(entries)
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
    return Table(MappingProxyType(entries), MappingProxyType(by_api), methods, MappingProxyType(by_module), by_wrapper,
                 MappingProxyType(_plus(entries)))


def _plus(entries: Mapping[str, Entry]) -> dict[str, Entry]:
    """The entry computing each entry's call plus a number in one: one of a family with ``offsets``
    (Family.offsets), by its ``via``; one per entry."""
    plus: dict[str, Entry] = {}
    for entry in entries.values():
        if entry.family and family(entry.family).offsets is not None:
            if entry.fields.via in plus:
                raise TableError(f"{entry.fields.via} plus a number is both {plus[entry.fields.via].op} and {entry.op}")
            plus[entry.fields.via] = entry
    return plus


def _by_wrapper(entries: Mapping[str, Entry]) -> dict[str, Entry]:
    """Each generated wrapper's entry, as its family names it; a wrapper stands for one entry."""
    by_wrapper: dict[str, Entry] = {}
    for entry in entries.values():
        for name in family(entry.family).wrapper_names(entry) if entry.family else ():
            if name in by_wrapper:
                raise TableError(f"wrapper {name} stands for both {by_wrapper[name].op} and {entry.op}")
            by_wrapper[name] = entry
    return by_wrapper


def _with_parts(entries: Mapping[str, Entry]) -> dict[str, Entry]:
    """The entries, each with the entries its family says it calls attached (theirs attached too)."""
    done: dict[str, Entry] = {}

    def attach(op: str, calling: tuple[str, ...]) -> Entry:
        if op in calling:
            raise TableError(f"{op}: calls itself through {' -> '.join((*calling, op))}")
        if op not in done:
            entry = entries[op]
            names = family(entry.family).parts(entry, entries) if entry.family else ()
            parts = {name: attach(name, (*calling, op)) for name in names}
            done[op] = dataclasses.replace(entry, parts=MappingProxyType(parts)) if parts else entry
        return done[op]

    return {op: attach(op, ()) for op in entries}


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
    for name, op in entry.forms.items():
        target = entries.get(op)
        if name not in {p.name for p in entry.params[1:]} or name not in entry.reject:
            raise TableError(f"{entry.op}: forms key {name!r} is no rejected parameter after the input (the entry itself cannot take it)")
        if target is None or target.family is None or target.apis or [p.name for p in target.params] != [p.name for p in entry.params]:
            raise TableError(f"{entry.op}: forms names {op!r}, which is no mapped entry without apis of the same parameters")
        parts[op] = target
    return dataclasses.replace(entry, parts=MappingProxyType(parts)) if entry.tensor_forms or entry.forms else entry


def _honoured(entry: Entry, entries: Mapping[str, Entry]) -> None:
    """Refuse an entry its kernel family cannot carry out faithfully (nothing is dropped silently)."""
    if entry.family is None:
        return
    kind = family(entry.family)
    problem = kind.problem(entry, entries)
    if kind.takes_rest and entry.reject:
        problem = "a call's *args/**kwargs pass through to its wrapper, which therefore takes torch's whole signature: no reject"
    if problem:
        raise TableError(f"{entry.op}: {entry.family} family: {problem}")


@functools.cache
def load_table() -> Table:
    """The built-in table (torch2pypto/mapping/ops.toml)."""
    text = resources.files(__package__).joinpath("ops.toml").read_text(encoding="utf-8")
    return build_table(tomllib.loads(text))
