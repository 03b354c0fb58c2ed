"""Helpers every family shares: literals, rejected arguments and the rewritten call."""

from __future__ import annotations

import ast
import dataclasses
from typing import Mapping

import libcst as cst

from torch2pypto.rules.site import CallSite, Converted, Expression, Unsupported
from torch2pypto.schema.entry import Entry, Param, TableError

_EMPTY = cst.Module([])
_EQUAL = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))


def source_of(node: cst.CSTNode) -> str:
    """The source text of a node."""
    return _EMPTY.code_for_node(node)


# expressions no literal is written as (``ast.literal_eval`` refuses them whatever they hold)
_NO_LITERAL = (
    cst.Attribute, cst.Subscript, cst.Comparison, cst.BooleanOperation, cst.Lambda, cst.IfExp, cst.GeneratorExp,
    cst.ListComp, cst.SetComp, cst.DictComp, cst.Await, cst.Yield, cst.NamedExpr, cst.FormattedString,
)


def literal(node: cst.BaseExpression) -> object:
    """The value of a literal expression, or ``Ellipsis`` when it is not a literal (told by its
    node where it can be: an argument's source is generated only where it may be a literal)."""
    kind = type(node)
    if (
        isinstance(node, _NO_LITERAL)
        or kind is cst.Name and node.value not in ("True", "False", "None")
        or kind is cst.Call and not (type(node.func) is cst.Name and node.func.value == "set" and not node.args)
        or kind is cst.BinaryOperation and type(node.operator) not in (cst.Add, cst.Subtract)
    ):
        return Ellipsis
    try:
        return ast.literal_eval(source_of(node).strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return Ellipsis


def is_number(node: cst.BaseExpression | None) -> bool:
    """Whether the expression is a Python number literal (``2``, ``-0.5``; not a bool)."""
    return node is not None and type(literal(node)) in (int, float)


def number_for_tensor(site: CallSite, params) -> Unsupported | None:
    """Why the call stays torch when it passes a Python number (or bool) for one of ``params``
    that takes only a tensor (``m & True``: the kernel would never launch)."""
    for p in params:
        if p.kinds == ("Tensor",) and type(literal(site.args.get(p.name, cst.Name("_")))) in (bool, int, float):
            return Unsupported(f"a Python number as {p.name}: the kernel takes a tensor there")
    return None


def rejection(site: CallSite) -> Unsupported | None:
    """The reason the call stays torch, if it passes a rejected argument other than its default."""
    for name, reason in site.entry.reject.items():
        given = site.args.get(name)
        if given is not None and literal(given) != site.entry.param(name).default:
            return Unsupported(reason)
    return None


def static_value(site: CallSite, name: str) -> object:
    """The value of the argument for parameter ``name`` where it is known when translating: a
    literal passed, or one every construction of the called nn module sets; else ``Ellipsis``."""
    given = site.args.get(name)
    value = Ellipsis if given is None else literal(given)
    built = site.built.get(name, Ellipsis)
    return (Ellipsis if isinstance(built, Expression) else built) if value is Ellipsis else value


def fallback(site: CallSite) -> Unsupported | None:
    """The reason the call stays torch, if it passes a literal other than its default for a
    ``fallback`` parameter (a value known at run time only, the wrapper checks); an nn module's
    construction may give that literal (``nn.Embedding(..., max_norm=1.0)``)."""
    for name, reason in site.entry.fallback.items():
        value = static_value(site, name)
        if value is not Ellipsis and value != site.entry.param(name).default:
            return Unsupported(reason)
    return None


def in_tensor_form(site: CallSite) -> CallSite:
    """The site as its entry's tensor form computes it, where the arguments that form names are
    the call's only ones after the input and are known tensors (``torch.clamp(x, min=t)`` is
    ``maximum(x, t)``), or by its ``forms`` entry where the call passes that parameter other than
    at its default (``torch.div(x, y, rounding_mode='floor')``); otherwise the site as it is."""
    entry = site.entry
    for name, op in entry.forms.items():
        if name in site.args and literal(site.args[name]) != entry.param(name).default:
            return dataclasses.replace(site, entry=entry.parts[op])
    given = [p.name for p in entry.params[1:] if p.name in site.args]
    form = entry.tensor_forms.get(",".join(given))
    if form is None or site.rest or not all(site.is_tensor(name) for name in given):
        return site
    target = entry.parts[form]
    operands = [p.name for p in target.params if p.kinds == ("Tensor",) and p.required]
    values = [site.args[entry.params[0].name], *(site.args[name] for name in given)]
    return dataclasses.replace(site, entry=target, args=dict(zip(operands, values)))


def convert(site: CallSite, definitions) -> Converted | Unsupported:
    """The call as ``pypto_<op>(...)`` with ``definitions(entry)``, unless a rejected or a
    literal ``fallback`` argument keeps it torch."""
    refused = rejection(site) or fallback(site)
    if refused:
        return refused
    entry = site.entry
    return Converted(replacement(site, f"pypto_{entry.op}"), definitions(entry), f"pypto.{entry.pypto}", wrapper_params(entry))


def fallback_checks(entry: Entry) -> list[str]:
    """The wrapper's run-time tests that each ``fallback`` parameter is at its default."""
    spelt = {None: "{} is None", False: "not {}", True: "{}"}
    return [(spelt[d] if d is None or type(d) is bool or d == 0 else "{} == " + repr(d)).format(p)  # 1 is no True here
            for p, d in ((p, entry.param(p).default) for p in entry.fallback)]


def wrapper_params(entry: Entry) -> tuple[Param, ...]:
    """The parameters a wrapper takes: the torch signature minus rejected arguments."""
    return tuple(p for p in entry.params if p.name not in entry.reject)


def signature_problem(entry: Entry, family: str, names: tuple[str, ...]) -> str | None:
    """Why ``entry``'s wrapper parameters are not exactly ``names``, the ones ``family`` computes with."""
    given = tuple(p.name for p in wrapper_params(entry))
    if given != names:
        return f"{family} takes ({', '.join(names)}) besides rejected arguments, not ({', '.join(given)})"
    return None


def replacement(site: CallSite, wrapper: str, params: tuple[Param, ...] | None = None) -> cst.Call:
    """``wrapper(<required args>, <optional and keyword-only args as keywords>)`` for this call site.

    Rejected arguments only get here at their default, so they are dropped. A call with
    ``*args``/``**kwargs`` passes its arguments on as written (``site.rest``).
    """
    if site.rest:
        return cst.Call(cst.Name(wrapper), site.rest)
    args: list[cst.Arg] = []
    for p in wrapper_params(site.entry) if params is None else params:
        value = site.args.get(p.name)
        if value is None:
            continue
        args.append(cst.Arg(value) if p.by_position else cst.Arg(value, keyword=cst.Name(p.name), equal=_EQUAL))
    return cst.Call(cst.Name(wrapper), args)


def dtype_expr(site: CallSite, dtype: str) -> cst.BaseExpression | None:
    """``torch.<dtype>`` spelt with the name that reaches torch at this site, if any."""
    torch_name = site.torch_name()
    return None if torch_name is None else cst.Attribute(cst.Name(torch_name), cst.Name(dtype))


def wrapped(site: CallSite, definitions, params: tuple[Param, ...] | None = None) -> Converted | Unsupported:
    """The call as ``pypto_<op>(...)`` (its arguments passed as :func:`replacement` passes
    ``params``), with ``definitions(entry)``: the kernel and wrapper of the entry, whose ``pypto``
    names the API; unless a rejected argument keeps it torch."""
    rejected = rejection(site)
    if rejected:
        return rejected
    entry = site.entry
    api = f"pypto.{entry.pypto}"
    return Converted(replacement(site, f"pypto_{entry.op}", params), definitions(entry), api, wrapper_params(entry))


def via_parts(entry: Entry, entries: Mapping[str, Entry]) -> tuple[str, ...]:
    """The entry named by the entry's ``via`` field, whose wrapper its own calls (a family's ``parts``)."""
    if entry.fields.via not in entries:
        raise TableError(f"{entry.op}: via names no entry: {entry.fields.via!r}")
    return (entry.fields.via,)
