"""The op table's entries: the fields every entry has, whatever its family.

A family's own fields are a :class:`Fields` dataclass of the family's in ``fields``, validated
against its annotations when the table loads. This module imports nothing of the package: the
loader (mapping) and the families (rules) both build on it.
"""

from __future__ import annotations

import ast
import collections.abc
import dataclasses
import types
import typing
from types import MappingProxyType
from typing import Any, Literal, Mapping

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
KINDS = ("Tensor", "Tensors", "Number", "Dims", "DType", "Device", "bool", "int", "str", "object")
DTYPES = ("float32", "float16", "bfloat16", "float64", "bool", "uint8", "int8", "int16", "int32", "int64")
DOMAINS = ("real", "positive", "unit", "small", "nonfinite", "distinct")
INDEX_SAMPLES = ("", "row", "like", "unique", "any", "target", "offsets")  # sample.index: how an index tensor `i` is shaped
_NO_DEFAULT = object()


class TableError(ValueError):
    """The op table is malformed; the message names the entry and the problem."""


@dataclasses.dataclass(frozen=True)
class Fields:
    """The fields of an entry that its family reads; each family subclasses it as a frozen
    dataclass whose annotations are the fields' types (bool, int, str, Literal[...], tuple[str,
    ...], Mapping[str, str], or one of them | None) and whose field comments document them."""

    @classmethod
    def load(cls, op: str, raw: Mapping[str, Any]) -> Fields:
        """The fields of ``raw`` (TOML values), each checked against its annotation."""
        hints = typing.get_type_hints(cls)
        return cls(**{name: _typed(op, name, hints[name], value) for name, value in raw.items()})


def field(doc: str, default: Any = None) -> Any:
    """A family field: its default (``{}``: an empty table) and the sentence docs/table.md gives it."""
    if default == {}:
        return dataclasses.field(default_factory=lambda: MappingProxyType({}), metadata={"doc": doc})
    return dataclasses.field(default=default, metadata={"doc": doc})


def _typed(op: str, name: str, hint: Any, value: Any) -> Any:
    """``value`` as the annotation ``hint`` holds it (tuples, read-only mappings), or TableError."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        for option in (a for a in args if a is not type(None)):
            try:
                return _typed(op, name, option, value)
            except TableError:
                pass
    elif origin is Literal:
        if value in args:
            return value
    elif origin is tuple and isinstance(value, list):
        return tuple(_typed(op, f"{name}[{i}]", args[0], v) for i, v in enumerate(value))
    elif origin in (Mapping, collections.abc.Mapping) and isinstance(value, dict):
        return MappingProxyType({_typed(op, f"{name} key", args[0], k): _typed(op, f"{name}.{k}", args[1], v) for k, v in value.items()})
    elif origin is None and isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    raise TableError(f"{op}: {name} is {describe(hint)}, not {value!r}")


def describe(hint: Any) -> str:
    """An annotation in the table's words: ``"float32"``, ``a list of str``, ``a table of str``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in args if a is not type(None))
    if origin is Literal:
        return " or ".join(f'"{a}"' if isinstance(a, str) else repr(a) for a in args)
    if origin is tuple:
        return f"a list of {_PLURALS.get(args[0], describe(args[0]))}"
    if origin in (Mapping, collections.abc.Mapping):
        return f"a table of {_PLURALS.get(args[1], describe(args[1]))}"
    return {bool: "true or false", int: "an int", str: "a string"}.get(hint, hint.__name__)


_PLURALS = {str: "strings", int: "ints"}


@dataclasses.dataclass(frozen=True)
class Param:
    """One torch parameter: name, kinds it accepts, default, and how it may be passed."""

    name: str
    kinds: tuple[str, ...]
    default: Any = _NO_DEFAULT
    keyword_only: bool = False
    variadic: bool = False
    positional_only: bool = False  # before a ``/`` (einsum's equation and operands: torch takes *args)

    @property
    def required(self) -> bool:
        return self.default is _NO_DEFAULT and not self.variadic

    @property
    def by_position(self) -> bool:
        """Whether a wrapper's call passes it by position: required, and not keyword-only."""
        return self.required and not self.keyword_only

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
    ``any`` a 2-D index of x's rows (embedding), ``target`` x's shape without dim (a loss's
    class per row), ``offsets`` int32 ends of GROUPS runs of x's rows, one of them empty
    (grouped_mm's offs: y and w then stack GROUPS matrices).
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
    """One op of the table: the fields every family shares, and in ``fields`` its family's own
    (docs/table.md lists them all)."""

    op: str
    category: str
    apis: tuple[str, ...]
    params: tuple[Param, ...]
    family: str | None = None
    pypto: str = ""
    dtypes: tuple[str, ...] = ()
    tensor_forms: Mapping[str, str] = dataclasses.field(default_factory=dict)  # "min,max" -> the entry computing the call when those are tensors
    forms: Mapping[str, str] = dataclasses.field(default_factory=dict)  # "rounding_mode" -> the entry computing the call when it is passed
    torch: str | None = None  # a tensor form's torch function, which it falls back to (it has no apis of its own)
    reject: Mapping[str, str] = dataclasses.field(default_factory=dict)
    fallback: Mapping[str, str] = dataclasses.field(default_factory=dict)  # parameter -> why a non-default value runs torch
    torch_only: tuple[str, ...] = ()  # parameters the kernel ignores: they reach torch's fallback and gradient
    forward: str | None = None  # the parameter a module's call binds to its forward, which the torch path runs instead
    omitted: Mapping[str, str] = dataclasses.field(default_factory=dict)  # required parameter -> why leaving it out stays torch
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)  # keyword torch also takes -> parameter
    reason: str | None = None
    note: str | None = None
    modules: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
    examples: Examples = Examples()
    sample: Sample = Sample()
    parts: Mapping[str, "Entry"] = dataclasses.field(default_factory=dict)  # entries a recipe calls
    tolerance: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)  # dtype -> (atol, rtol): mapping.tolerance
    fields: Fields = Fields()  # the fields its family reads (its Fields subclass)

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    @property
    def torch_function(self) -> str | None:
        """The torch function spelling (for fallbacks), or None for method-only ops."""
        return self.torch or next((a for a in self.apis if not a.startswith("torch.Tensor.")), None)


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
    params = [Param(a.arg, _kinds(op, a), d, positional_only=a in args.posonlyargs) for a, d in zip(positional, defaults)]
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


