"""Bind a call's arguments to a torch signature, as Python would.

Works on libcst and ast calls alike: :func:`cst_args` and :func:`ast_args` turn either into
``(keyword, starred, value)`` triples; :func:`cst_held` and :func:`ast_held` add what an nn
module's call (``self.act(x)``) reads from its module (``approximate=self.act.approximate``, or the module itself).
"""

from __future__ import annotations

import ast
from typing import Mapping, Sequence, TypeVar

import libcst as cst

from torch2pypto.mapping import Param
from torch2pypto.translator.engine.identity import ByIdentity

T = TypeVar("T")
Arg = tuple[str | None, bool, T]  # keyword (None: positional), starred (*a / **k), value


class BindError(ValueError):
    """The arguments do not fit the signature; the message says how (``missing``: the required
    parameter left out, if that is why)."""

    def __init__(self, message: str, missing: str | None = None) -> None:
        super().__init__(message)
        self.missing = missing


def cst_args(call: cst.Call) -> list[Arg]:
    return [(a.keyword.value if a.keyword else None, bool(a.star), a.value) for a in call.args]


def ast_args(call: ast.Call) -> list[Arg]:
    positional = [(None, type(a) is ast.Starred, a) for a in call.args]
    return positional + [(k.arg, k.arg is None, k.value) for k in call.keywords]


def ast_held(call: ast.Call, held: Sequence[tuple[str, str]] | None) -> list[Arg]:
    """``param=<module>.<attribute>`` keywords for what an nn module's call reads from the module
    (an attribute ``""``: the module itself); the module of ``super().forward(x)`` is ``self``."""
    module = ast.Name("self", ast.Load()) if _super_forward(call.func, ast.Attribute, ast.Call) else call.func
    return [(p, False, ast.Attribute(module, a, ast.Load()) if a else module) for p, a in held or ()]


def cst_held(call: cst.Call, held: Sequence[tuple[str, str]] | None) -> list[Arg]:
    module = cst.Name("self") if _super_forward(call.func, cst.Attribute, cst.Call) else call.func
    return [(p, False, cst.Attribute(module, cst.Name(a)) if a else module) for p, a in held or ()]


def _super_forward(func, attribute: type, call: type) -> bool:
    """Whether ``func`` is ``super().forward`` (a module's call through its base class's forward)."""
    return type(func) is attribute and isinstance(func.value, call) and getattr(func.value.func, "value", getattr(func.value.func, "id", None)) == "super"


def bind(
    params: tuple[Param, ...],
    args: Sequence[Arg],
    receiver: T | None = None,
    aliases: Mapping[str, str] = {},
    rest: bool = False,
) -> dict[str, T]:
    """Map parameter names to argument expressions; a method's receiver binds the first one.

    ``aliases`` maps keywords torch also takes to their parameters (``axis`` -> ``dim``).
    ``rest``: a call with ``*args``/``**kwargs`` binds what it can statically, the positional
    arguments before the first starred one and the keywords written out; any parameter left may
    come from the starred ones at run time, so none is missing.
    """
    starred = any(star for _, star, _ in args)
    if starred and not rest:
        raise BindError("*args/**kwargs cannot be bound statically")
    bound: dict[str, T] = {}
    positional, names, required = _signature(params)
    positional = list(positional)
    if receiver is not None:
        bound[positional[0].name] = receiver
        positional = positional[1:]
    first_star = next((i for i, (_, star, _) in enumerate(args) if star), len(args))
    values = [value for keyword, _, value in args[:first_star] if keyword is None]
    for value in values:
        if not positional:
            raise BindError(f"too many positional arguments ({len(values)})")
        param = positional.pop(0)
        if param.variadic:
            raise BindError(f"variadic *{param.name} is not mapped")
        bound[param.name] = value
    for written, _, value in args:
        if written is None:
            continue
        keyword = aliases.get(written, written)
        if keyword not in names:
            raise BindError(f"unexpected keyword argument {written!r}")
        if keyword in bound:
            spelt = f" (as {written}=)" if written != keyword else ""
            raise BindError(f"argument {keyword!r} given twice{spelt}")
        bound[keyword] = value
    missing = [name for name in required if name not in bound]
    if missing and not starred:
        raise BindError(f"missing argument {missing[0]!r}", missing[0])
    return bound


_SIGNATURES = ByIdentity()  # a params tuple -> what _signature found
_MAX_SIGNATURES = 1024  # a wrapper's params may be built per conversion: the cache starts over past this


def _signature(params: tuple[Param, ...]) -> tuple[tuple[Param, ...], frozenset[str], tuple[str, ...]]:
    """The positional parameters, the keyword names and the required names of ``params``, in
    order: found once per tuple (an entry's, bound at each of its sites; Params are frozen)."""
    known = _SIGNATURES.get(params)
    if known is not None:
        return known
    found = (
        tuple(p for p in params if not p.keyword_only),
        frozenset(p.name for p in params if not p.variadic and not p.positional_only),
        tuple(p.name for p in params if p.required),
    )
    if type(params) is tuple:  # a list could change: not kept
        if len(_SIGNATURES) >= _MAX_SIGNATURES:
            _SIGNATURES.clear()
        _SIGNATURES[params] = found
    return found
