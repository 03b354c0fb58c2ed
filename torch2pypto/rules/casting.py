"""The cast family: ``x.to(dtype)``, ``x.float()``, ``x.type_as(other)``... become ``pypto.cast``.

The target dtype is the entry's ``target`` (``x.float()``), its ``dtype`` parameter, or its
``other`` tensor's dtype (``type_as``). An entry with ``overloads`` (``Tensor.to``) binds its
positional placeholders ``arg1``... to the overload the call's arguments select: ``(dtype,
...)``, ``(device, dtype, ...)`` or ``(other, ...)``; a lone argument of a kind known at run time
only (``x.to(target)``) goes to ``pypto_to``, which picks the overload there. The device part of
a call stays torch (a move is no kernel); the dtype part is the cast.

Targets are floats, int64 and int32 (``x.long()``) and bool (``x.to(torch.bool)``). The wrapper
launches by the input's dtype at run time where runtime/casts.py lists the pair (an exact chain of
A2/A3 casts: a bool read as its bytes, a float truncated toward zero, a bool as ``x != 0``) and
runs torch's cast for any other; :func:`launches` tells the tests and --verify the same.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal, Mapping

import libcst as cst

from torch2pypto.rules import templates
from torch2pypto.rules.calls import dtype_expr, literal, rejection, replacement, source_of
from torch2pypto.rules.codegen import copied
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.tile_program import Operand
from torch2pypto.schema.entry import Entry, Fields, field, parse_signature
from torch2pypto.schema.family import Family, OperandSample, register


@dataclasses.dataclass(frozen=True)
class CastFields(Fields):
    """The table fields the casting family reads."""

    target: Literal["float32", "float16", "bfloat16", "int64", "int32"] | None = field("the dtype a cast without a dtype parameter makes (x.float())")
    overloads: tuple[str, ...] = field("the torch overloads, as parameter lists (Tensor.to)", ())


CAST_KERNEL = templates.row_kernel(
    "cast_kernel", "pypto.cast of [rows, cols] tiles from `dtype` to `out_dtype`.",
    "dtype, out_dtype, cols", ["x"], (), out_dtype="out_dtype", routed=True,
)
ROUTE = copied("casting", "_cast_route")
CASTS = copied("casts", "_CASTS", first="_FLOATS")
CAST = copied("casting", "pypto_cast")
LIKE = copied("casting", "pypto_cast_like")
TYPE_AS = copied("casting", "pypto_type_as")
TO = copied("casting", "pypto_to")
PARAMS = {
    "pypto_cast": parse_signature("pypto_cast", "(input: Tensor, dtype: DType, device: Device = None, non_blocking: bool = False)"),
    "pypto_cast_like": parse_signature("pypto_cast_like", "(input: Tensor, other: Tensor, non_blocking: bool = False)"),
    "pypto_type_as": parse_signature("pypto_type_as", "(input: Tensor, other: Tensor)"),
    "pypto_to": parse_signature("pypto_to", "(input: Tensor, arg: object, non_blocking: bool = False)"),
}
KERNEL = (ROUTE, CAST_KERNEL, CASTS, CAST)
WRAPPERS = {"pypto_cast": KERNEL, "pypto_cast_like": (*KERNEL, LIKE), "pypto_type_as": (*KERNEL, TYPE_AS), "pypto_to": (*KERNEL, LIKE, TO)}
OVERLOAD_KINDS = {"dtype", "device", "other", "non_blocking", "copy", "memory_format"}


def wrapper_names(entry: Entry) -> tuple[str, ...]:
    """The wrappers whose calls are sites of ``entry`` (their docstrings name its API): Tensor.to's
    three and type_as's. ``x.float()`` and the other casts call pypto_cast, Tensor.to's."""
    if entry.fields.overloads:
        return ("pypto_cast", "pypto_cast_like", "pypto_to")
    return ("pypto_type_as",) if any(p.name == "other" for p in entry.params) else ()


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    names = {p.name for p in entry.params}
    if entry.pypto != "cast":
        return f"a cast is pypto.cast, not pypto.{entry.pypto}"
    if entry.fields.overloads:
        for text in entry.fields.overloads:
            unknown = {p.name for p in parse_signature(entry.op, text)} - OVERLOAD_KINDS
            if unknown:
                return f"overload {text} has parameters {sorted(unknown)} a cast cannot take"
        return None
    if not (entry.fields.target or "dtype" in names or "other" in names):
        return "no target dtype: give target, a dtype parameter or an other tensor"
    known = {"input", "dtype", "other", "non_blocking"}
    for p in entry.params:
        if p.name not in known and p.name not in entry.reject:
            return f"parameter {p.name!r} is neither a cast's (dtype, other, non_blocking) nor rejected"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site)
    if rejected:
        return rejected
    entry = site.entry
    if entry.fields.overloads:
        return _overloaded(site)
    if "other" in site.args:
        return _converted(replacement(site, "pypto_type_as", PARAMS["pypto_type_as"]), "pypto_type_as")
    if entry.fields.target:
        target = dtype_expr(site, entry.fields.target)
        if target is None:
            return Unsupported("no name reaches the torch module here to spell the target dtype")
        return _cast(site, entry.fields.target, target, {})
    if "dtype" not in site.args:
        return Unsupported(f".{entry.op}() without a dtype is not a cast")
    return _cast(site, site.static_dtype("dtype"), site.args["dtype"], {})


def _overloaded(site: CallSite) -> Converted | Unsupported:
    """``Tensor.to``: bind the call to the overload its arguments select, as torch does."""
    positional = [site.args[n] for n in ("arg1", "arg2", "arg3", "arg4") if n in site.args]
    names = ["arg1", "arg2", "arg3", "arg4"][: len(positional)]
    keywords = {k: v for k, v in site.args.items() if k not in names and k != "input"}
    if "other" in keywords or (names and site.is_tensor("arg1")):
        chosen = "other"
    elif names and site.static_dtype("arg1") is not None:
        chosen = "dtype"
    elif len(names) > 1 or {"dtype", "device"} & set(keywords) or (names and isinstance(literal(positional[0]), str)):
        chosen = "device"
    elif names:
        return _unknown(site, positional[0], keywords)
    else:
        return Unsupported(".to() without a dtype is not a cast")
    overload = next(o for o in site.entry.fields.overloads if o.startswith(f"({chosen}"))
    params = parse_signature(site.entry.op, overload)
    if len(positional) > len(params):
        return Unsupported(f".to({chosen}, ...) takes at most {len(params)} positional arguments")
    bound = dict(keywords)
    statics = dict(zip((p.name for p in params), names))
    for p, value in zip(params, positional):
        if p.name in bound:
            return Unsupported(f".to({chosen}, ...): argument {p.name!r} given twice")
        bound[p.name] = value
    for name, reason in site.entry.reject.items():
        value = bound.get(name)
        if value is not None and source_of(value) not in ("False", "None"):
            return Unsupported(reason)
    extras = {k: bound[k] for k in ("non_blocking",) if k in bound}
    if chosen == "other":
        if "dtype" in keywords or "device" in keywords:
            return Unsupported(".to(other) takes no dtype= or device=")
        return _converted(_call("pypto_cast_like", [bound["other"]], extras, site), "pypto_cast_like")
    if "dtype" not in bound:
        return Unsupported(".to(device) only moves memory: there is no dtype to cast to")
    static = site.static_dtype(statics["dtype"]) if "dtype" in statics else site.static_dtype("dtype")
    if "device" in bound:
        extras = {"device": bound["device"], **extras}
    return _cast(site, static, bound["dtype"], extras)


def _unknown(site: CallSite, arg: cst.BaseExpression, keywords) -> Converted | Unsupported:
    """``x.to(arg)``, arg's kind known at run time only: pypto_to casts a dtype (or a tensor's)
    on the kernel and moves to a device in torch."""
    if set(keywords) - {"non_blocking", *site.entry.reject}:
        return Unsupported(f".to(arg) with {', '.join(sorted(keywords))}: arg is not known to be a dtype or a tensor")
    for name, reason in site.entry.reject.items():
        if name in keywords and source_of(keywords[name]) not in ("False", "None"):
            return Unsupported(reason)
    extras = {k: keywords[k] for k in ("non_blocking",) if k in keywords}
    return _converted(_call("pypto_to", [arg], extras, site), "pypto_to")


def _cast(site: CallSite, dtype_name: str | None, target: cst.BaseExpression, extras) -> Converted | Unsupported:
    entry = site.entry
    if dtype_name is None:
        return Unsupported(f"the dtype of .{entry.op}() is not known to be a dtype (a device or tensor is not a cast)")
    if dtype_name != "?" and dtype_name not in entry.dtypes:
        return Unsupported(f"cast to {dtype_name}: PyPTO kernels here handle {', '.join(entry.dtypes)}")
    return _converted(_call("pypto_cast", [target], extras, site), "pypto_cast")


def _call(wrapper: str, positional, keywords, site: CallSite) -> cst.Call:
    args = [cst.Arg(site.args["input"]), *(cst.Arg(v) for v in positional)]
    equal = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
    args += [cst.Arg(v, keyword=cst.Name(k), equal=equal) for k, v in keywords.items()]
    return cst.Call(cst.Name(wrapper), args)


def _converted(call: cst.Call, wrapper: str) -> Converted:
    return Converted(call, WRAPPERS[wrapper], "pypto.cast", PARAMS[wrapper])


def fuse(builder, entry: Entry, bound, env) -> Operand:
    """A cast in a fused region: a conversion of the region's value."""
    return builder.cast(entry, bound, env)


def launches(entry: Entry, dtype: str, arguments: Mapping[str, str]) -> bool:
    """Whether a cast of a ``dtype`` input launches: to a target the call names (or the entry's),
    where runtime/casts.py's _CASTS makes it from ``dtype`` (to its own dtype, none: torch returns
    the input); to a dtype known at run time only (a tensor's), from a float dtype, which every
    float target takes. torch is imported here, by the checks that ask, so that translating
    never loads it."""
    import torch

    from torch2pypto.runtime.casts import _CASTS

    spelt = [_NAMED.fullmatch(v) for v in arguments.values()]
    named = [d for m in spelt if m and isinstance(d := getattr(torch, m.group(1) or m.group(2), None), torch.dtype)]
    target = getattr(torch, entry.fields.target) if entry.fields.target else named[0] if named else None
    source = getattr(torch, dtype)
    if target is None:
        return source.is_floating_point
    return target != source and target in _CASTS.get(source, ())


_NAMED = re.compile(r"torch\.(\w+)|getattr\(torch, ['\"](\w+)['\"]\)")


def operand_sample(entry: Entry, position: int, name: str) -> OperandSample:
    """A tensor after the input (type_as's other) carries another dtype: the one cast to."""
    return "other" if position else "same"


register(Family("cast", CastFields, rewrite, problem, wrapper_names, fuse=fuse, operand_sample=operand_sample, launches=launches))
