"""Bind a call's arguments to a torch signature, as Python would."""

from __future__ import annotations

import libcst as cst

from torch2pypto.mapping import Param


class BindError(ValueError):
    """The arguments do not fit the signature; the message says how."""


def bind(
    params: tuple[Param, ...], args: tuple[cst.Arg, ...], receiver: cst.BaseExpression | None = None
) -> dict[str, cst.BaseExpression]:
    """Map parameter names to argument expressions; a method's receiver binds the first one."""
    if any(a.star for a in args):
        raise BindError("*args/**kwargs cannot be bound statically")
    bound: dict[str, cst.BaseExpression] = {}
    positional = [p for p in params if not p.keyword_only]
    if receiver is not None:
        bound[positional[0].name] = receiver
        positional = positional[1:]
    values = [a.value for a in args if a.keyword is None]
    for value in values:
        if not positional:
            raise BindError(f"too many positional arguments ({len(values)})")
        param = positional[0]
        if param.variadic:
            raise BindError(f"variadic *{param.name} is not mapped")
        bound[param.name] = value
        positional.pop(0)
    names = {p.name for p in params if not p.variadic}
    for a in args:
        if a.keyword is None:
            continue
        name = a.keyword.value
        if name not in names:
            raise BindError(f"unexpected keyword argument {name!r}")
        if name in bound:
            raise BindError(f"argument {name!r} given twice")
        bound[name] = a.value
    missing = [p.name for p in params if p.required and p.name not in bound]
    if missing:
        raise BindError(f"missing argument {missing[0]!r}")
    return bound
