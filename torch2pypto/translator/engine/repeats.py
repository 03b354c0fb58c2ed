"""GQA's repeated key and value heads read in place by the attention kernel.

transformers repeats the kv heads (``key = repeat_kv(key, n)``: an expand, then a reshape that
copies) where a mask keeps torch's sdpa from its ``enable_gqa`` path. Where such a name is the key or
value of a converted sdpa call of the same function, the repeat is deferred: the call becomes
``pypto_repeat_kv(repeat_kv, key, n)`` (the kv heads, marked) and the attention wrapper reads each kv
head for its group of query heads (the run-time check: both key and value deferred by the query's
group, else the repeat runs). Every other read of the name after it, but its shape's other dims,
device and dtype, reads ``pypto_repeated(key)``: the repeat, made there once, as before. A function
whose repeat sits in a loop, whose name is changed in place or declared global, or whose reads to
change lie in a call already rewritten, keeps its copies.
"""

from __future__ import annotations

import ast

from torch2pypto.translator.engine.scopes import children, walk
from torch2pypto.translator.engine.syntax import FUNCTIONS

SDPA = "torch.nn.functional.scaled_dot_product_attention"
NAMES = ("pypto_repeat_kv", "pypto_repeated")
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_HEAD_DIMS = (1, -3)  # of a 4-D [batch, heads, s, d] tensor, the one the repeat changes
# transformers' repeat_kv, the body it is recognised by (its docstring aside)
_REPEAT_KV = ast.parse('''
def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)
''').body[0]
_REPEAT_KV_DUMP = ast.dump(_REPEAT_KV)


def defer(tree: ast.Module, lines, conversions, edits) -> list[tuple[int, int, str]]:
    """The edits that defer the repeats of ``tree`` read by converted sdpa calls (``conversions``:
    (attempt, ...) of the calls converted, whose wrapper brings pypto_repeat_kv; ``edits``: (start,
    end, new) made already, which these must not overlap)."""
    sdpa = {a.span for a, *_ in conversions if a.resolved.api == SDPA}
    repeats = {s.name for s in tree.body if isinstance(s, ast.FunctionDef) and _is_repeat_kv(s)} if sdpa else set()
    if not repeats or not sdpa:
        return []
    made, taken = [], [(s, e) for s, e, _ in edits]
    for function in (n for n in walk(tree) if isinstance(n, FUNCTIONS)):
        found = _function(function, repeats, sdpa, lines)
        spans = [(lines.offset(*sp[:2]), lines.offset(*sp[2:]), new) for sp, new in found]
        if spans and not any(s < e2 and s2 < e for s, e, _ in spans for s2, e2 in taken):
            made += spans
    return made


def _is_repeat_kv(function: ast.FunctionDef) -> bool:
    """Whether ``function`` is transformers' repeat_kv (any docstring and annotations)."""
    body = function.body[1:] if ast.get_docstring(function) is not None else function.body
    args = function.args
    if len(body) != len(_REPEAT_KV.body) or len(args.args) != len(_REPEAT_KV.args.args):
        return False  # told apart without dumping the function
    plain = ast.arguments(args.posonlyargs, [ast.arg(a.arg) for a in args.args], args.vararg, args.kwonlyargs,
                          args.kw_defaults, args.kwarg, args.defaults)
    return ast.dump(ast.FunctionDef(_REPEAT_KV.name, plain, body, [], None, None)) == _REPEAT_KV_DUMP


def _function(function, repeats: set[str], sdpa: set, lines) -> list[tuple[tuple, str]]:
    """The edits (span, new text) that defer ``function``'s own repeats, or none."""
    calls = [c for c in _own(function) if isinstance(c, ast.Call) and lines.span(c) in sdpa]
    kv = {id(a): a.id for c in calls for a in _key_value(c) if isinstance(a, ast.Name)}
    if not kv:
        return []  # no sdpa call of its own reads a name: its nodes' parents left unfound
    parents = {id(c): p for p in walk(function) for c in children(p)}
    edits = []
    for statement in (s for s in _own(function) if _repeat(s, repeats) and s.targets[0].id in kv.values()):
        name = statement.targets[0].id
        if _in_loop(statement, parents, function) or _unsafe(function, name):
            return []
        call = statement.value
        args = ", ".join(ast.get_source_segment(lines.text, a) for a in call.args)
        edits.append((lines.span(call), f"pypto_repeat_kv({call.func.id}, {args})"))
        after = (n for n in walk(function) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load))
        for node in (n for n in after if (n.lineno, n.col_offset) > (statement.end_lineno, statement.end_col_offset)):
            if id(node) not in kv and not _same_heads(node, parents):
                edits.append((lines.span(node), f"pypto_repeated({name})"))
    return sorted(set(edits))


def _own(function):
    """The nodes of ``function`` outside the functions and classes it defines."""
    stack = children(function)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
            stack.extend(children(node))


def _key_value(call: ast.Call) -> list[ast.expr]:
    """The key and value arguments of an sdpa call."""
    found = list(call.args[1:3])
    found += [k.value for k in call.keywords if k.arg in ("key", "value")]
    return found


def _repeat(statement: ast.stmt, repeats: set[str]) -> bool:
    """``name = repeat_kv(name, n)``."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)):
        return False
    call = statement.value
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in repeats and len(call.args) == 2
            and not call.keywords and isinstance(call.args[0], ast.Name) and call.args[0].id == statement.targets[0].id)


def _in_loop(node: ast.AST, parents: dict, function) -> bool:
    while node is not function:
        node = parents[id(node)]
        if isinstance(node, _LOOPS):
            return True
    return False


def _unsafe(function, name: str) -> bool:
    """Whether ``name`` is declared global or nonlocal, deleted, changed in place (``name += x``)
    or read by a function or class ``function`` defines (which may run at any time)."""
    own = {id(n) for n in _own(function)}
    for node in walk(function):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return True
        if isinstance(node, ast.Name) and node.id == name and (isinstance(node.ctx, ast.Del) or id(node) not in own):
            return True
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return True
    return False


def _same_heads(node: ast.Name, parents: dict) -> bool:
    """A read the repeat leaves as it is: ``name.device``, ``name.dtype``, ``name.shape[i]`` of
    another dim than the heads'."""
    attr = parents.get(id(node))
    if not isinstance(attr, ast.Attribute) or attr.value is not node:
        return False
    if attr.attr in ("device", "dtype"):
        return True
    index = parents.get(id(attr))
    if attr.attr != "shape" or not isinstance(index, ast.Subscript) or index.value is not attr:
        return False
    i, sign = index.slice, 1
    if isinstance(i, ast.UnaryOp) and isinstance(i.op, ast.USub):
        i, sign = i.operand, -1
    return isinstance(i, ast.Constant) and type(i.value) is int and -4 <= sign * i.value < 4 and sign * i.value not in _HEAD_DIMS
