"""The pattern vocabulary the cube-region searches share (:mod:`epilogues`, :mod:`siblings`): a
pending linear site of names and attributes, an activation a kernel computes, and the wrapper
parameters passing a region's operands, one per source text, each in its role.
"""

from __future__ import annotations

import ast

from torch2pypto.mapping.facts import load_facts
from torch2pypto.rules import gated
from torch2pypto.rules.tile_program import Param
from torch2pypto.translator.engine.binding import BindError, ast_args, ast_held, bind

FACTS = load_facts()
_REGISTRIES = FACTS.module_activation_registries | FACTS.module_activation_factories
# names the wrapper uses itself
RESERVED = frozenset({"a", "n", "k", "out", "kernel", "biased", "activation", "kernel_path", "joined", "torch", "pypto", "math", "functools"})
# the parameter kinds of gated and epilogue wrappers besides rows and numbers: a linear's weight and
# bias, an activation module, an epilogue's other operand (a number or a tensor, known at run time)
WEIGHT, BIAS, MODULE, OTHER = "weight", "bias", "module", "other"
# a linear a submodule's forward returns, read from the submodule (epilogues.submodule_epilogue):
# its weight from a gated pair's width back to the rows' width, or the rows' width to itself; its bias
BACK_WEIGHT, SQUARE_WEIGHT, BACK_BIAS = "back weight", "square weight", "back bias"


def unique_name(base: str, taken: set[str]) -> str:
    """``base``, numbered if ``taken`` or the wrapper's own names (:data:`RESERVED`) hold it."""
    name, k = base, 1
    while name in taken or name in RESERVED:
        name, k = f"{base}_{k}", k + 1
    return name


def find_activation(finder, node: ast.expr):
    """(attempt, kind) if ``node`` is a call of one argument of an activation: a table function a
    kernel computes (kind its name) or a module (kind None: read at run time)."""
    if type(node) is not ast.Call or len(node.args) != 1 or node.keywords or type(node.args[0]) is ast.Starred:
        return None
    act = finder.at.get(finder.lines.span(node))
    if act is None:
        return None
    found = act.resolved
    if found.api in _REGISTRIES and dotted(node.func):  # ACT2FN[config.hidden_act]: decided or not
        return act, None
    if act.status or found.entry is None:
        return None
    if found.held is None and found.entry.op in gated.FUNCTIONS:
        return act, gated.FUNCTIONS[found.entry.op]
    if found.held is not None and found.entry.op in gated.MODULE_OPS and dotted(node.func):
        return act, None
    return None


def wrapper_param(finder, params: dict, node: ast.expr | None, role: str) -> str | None:
    """The wrapper parameter passing ``node`` (one per source text), None for no value."""
    if node is None or type(node) is ast.Constant and node.value is None:
        return None
    source = source_text(finder, node)
    if source not in params:
        taken = {p.name for p in params.values()}
        params[source] = Param(_name(node, taken) if dotted(node) else unique_name("other", taken), role, source)
    return params[source].name


def pending_call(finder, node: ast.expr, op: str):
    """(attempt, bound arguments) of a pending site of table entry ``op`` called as a function or
    a module (not a tensor's method), else None."""
    if type(node) is not ast.Call:
        return None
    attempt = finder.pending.get(finder.lines.span(node))
    entry = attempt.resolved.entry if attempt is not None else None
    if entry is None or entry.op != op or attempt.resolved.method:
        return None
    try:
        return attempt, bind(entry.params, ast_args(node) + ast_held(node, attempt.resolved.held), None, entry.aliases)
    except BindError:
        return None


def find_linear(finder, node: ast.expr):
    """(attempt, bound arguments) of a pending linear site whose operands are names or attributes."""
    found = pending_call(finder, node, "linear")
    if found is None:
        return None
    attempt, bound = found
    if not all(dotted(v) or type(v) is ast.Constant and v.value is None for v in bound.values()) or type(bound["input"]) is ast.Constant:
        return None
    return attempt, bound


def source_text(finder, node: ast.expr) -> str:
    """The source of ``node`` as written."""
    if not hasattr(node, "lineno"):  # a held module's attribute (binding.ast_held): module.attribute
        return f"{source_text(finder, node.value)}.{node.attr}"
    span = finder.lines.span(node)
    return finder.text[finder.lines.offset(*span[:2]) : finder.lines.offset(*span[2:])]


def _name(node: ast.expr, taken: set[str]) -> str:
    """A parameter name from a leaf's source: ``self.gate_proj.weight`` -> gate_proj_weight."""
    parts = []
    while type(node) is ast.Attribute:
        parts.insert(0, node.attr)
        node = node.value
    if type(node) is ast.Name and node.id != "self":
        parts.insert(0, node.id)
    base = "_".join(parts[-2:]) if len(parts) > 1 and parts[-1] in (WEIGHT, BIAS) else parts[-1] if parts else "arg"
    return unique_name(base if base.isidentifier() and not base.startswith("_") else "arg", taken)


def dotted(node: ast.expr) -> bool:
    """A name or an attribute of one (no call, no subscript): read twice, it gives the same value."""
    if not hasattr(node, "lineno") and type(node) is ast.Attribute:
        return dotted(node.value)
    while type(node) is ast.Attribute:
        node = node.value
    return type(node) is ast.Name
