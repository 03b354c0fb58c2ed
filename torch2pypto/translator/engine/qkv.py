"""One projection sliced into q, k and v, with the rotary embedding of q and k: phi3's attention::

    qkv = self.qkv_proj(hidden_states)
    query_pos = self.config.num_attention_heads * self.head_dim
    query_states = qkv[..., :query_pos]
    key_states = qkv[..., query_pos : query_pos + self.num_key_value_heads * self.head_dim]
    value_states = qkv[..., query_pos + self.num_key_value_heads * self.head_dim :]
    query_states = query_states.view(hidden_shape).transpose(1, 2)
    key_states = ...; value_states = ...
    cos, sin = position_embeddings
    query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

Slicing a linear's result along its last dim is the linear of the weight's rows (and the bias's)
sliced alike: views, no copy. So the statements are llama's three projections and RoPE
(:func:`siblings._rotated`), and run the same kernel of :mod:`torch2pypto.rules.rope`, its weights
the slices of the one (rotating each head's first columns only where the helper does, phi3's
partial rotary). Statements of the host between the linear and the slices that read no tensor of
the pattern (``query_pos = ...``) stay; the linear's, the slices' and the views' go, and one call
stands where the rotary embedding stood, passing the slices' bounds as written. The slices are
``qkv[..., :a]``, ``qkv[..., a:b]``, ``qkv[..., b:]``, each name then viewed as heads in place;
``qkv`` is read nowhere else.
"""

from __future__ import annotations

import ast
import functools

from torch2pypto.rules import cube, rope
from torch2pypto.rules.fusion import name_of
from torch2pypto.rules.tile_program import ROWS, Param
from torch2pypto.translator.engine.linears import BIAS, find_linear, source_text, unique_name, wrapper_param
from torch2pypto.translator.engine.report import CONVERTED
from torch2pypto.translator.engine.siblings import _BETWEEN, _alone, _made_of, _opens, _root, _rope_call, _rope_groups

_HOST = 2  # host statements that may stand between the linear and the slices


def sliced_rope(finder, statements: list[ast.stmt], i: int, found) -> int:
    """How many statements from ``i`` are the pattern (0: none); if so, its call replaces them."""
    first = statements[i]
    if type(first) is not ast.Assign or len(first.targets) != 1 or type(first.targets[0]) is not ast.Name:
        return 0
    linear = find_linear(finder, first.value)
    if linear is None:
        return 0
    qkv = first.targets[0].id
    reads = {_root(v) for v in linear[1].values() if v is not None} - {None}
    j, host = i + 1, []
    while j < len(statements) and len(host) <= _HOST and _slice(statements[j], qkv) is None:
        s = statements[j]
        if type(s) is not ast.Assign or any(type(n) is ast.Name and n.id == qkv for n in ast.walk(s)) \
                or not all(type(t) is ast.Name and t.id not in reads | {qkv} for t in s.targets):
            return 0
        host.append(s)
        j += 1
    if j + 6 > len(statements) or len(host) > _HOST:
        return 0
    slices = [_slice(s, qkv) for s in statements[j : j + 3]]
    if None in slices:
        return 0
    names = [n for n, _, _ in slices]
    (_, none, a), (_, a2, b), (_, b2, none2) = slices
    if none is not None or none2 is not None or None in (a, b) or len(set(names)) != 3 \
            or source_text(finder, a) != source_text(finder, a2) or source_text(finder, b) != source_text(finder, b2):
        return 0
    views = [_viewed(s, n) for s, n in zip(statements[j + 3 : j + 6], names)]
    if None in views or len(set(views)) != 1 or {views[0], qkv} & set(names):
        return 0
    if sum(1 for n in finder.loads_of.get(qkv, ())) != 3 or qkv in finder.declared or set(names) & finder.declared:
        return 0  # qkv read elsewhere
    bounds = {n.id for e in (a, b) for n in ast.walk(e) if type(n) is ast.Name}
    k = j + 6
    for k in range(j + 6, min(j + 6 + _BETWEEN + 1, len(statements))):
        call = _rope_call(finder, statements[k], names)
        if call is not None:
            break
        s = statements[k]
        if not (type(s) is ast.Assign and type(s.value) is ast.Name and s.value.id not in names
                and all(type(n) in (ast.Name, ast.Tuple, ast.Store) for t in s.targets for n in ast.walk(t))):
            return 0
        if {n.id for t in s.targets for n in ast.walk(t) if type(n) is ast.Name} & (set(names) | bounds | reads | {views[0]}):
            return 0
    else:
        return 0
    if call is None:
        return 0
    helper, cos, sin = call
    groups = _rope_groups(finder, helper, found, [None, None])
    if groups is None or {cos, sin} & (set(names) | reads | {qkv}) or cos == sin:
        return 0
    removed = [first, *statements[j : j + 6]]
    return k + 1 - i if _emit(finder, removed, statements[k], linear, (a, b), views[0], names, call, groups, found) else 0


def _slice(statement: ast.stmt, qkv: str):
    """(target, lower, upper) of ``target = qkv[..., lower:upper]`` (either bound None), else None."""
    if type(statement) is not ast.Assign or len(statement.targets) != 1 or type(statement.targets[0]) is not ast.Name:
        return None
    value = statement.value
    if not (type(value) is ast.Subscript and type(value.value) is ast.Name and value.value.id == qkv and type(value.slice) is ast.Tuple):
        return None
    parts = value.slice.elts
    if len(parts) != 2 or not (type(parts[0]) is ast.Constant and parts[0].value is Ellipsis) or type(parts[1]) is not ast.Slice or parts[1].step:
        return None
    return statement.targets[0].id, parts[1].lower, parts[1].upper


def _viewed(statement: ast.stmt, name: str) -> str | None:
    """The shape's name of ``name = name.view(shape).transpose(1, 2)``, else None."""
    value = statement.value if type(statement) is ast.Assign and len(statement.targets) == 1 else None
    if value is None or not (type(statement.targets[0]) is ast.Name and statement.targets[0].id == name):
        return None
    if not (type(value) is ast.Call and type(value.func) is ast.Attribute and value.func.attr == "transpose" and not value.keywords
            and [type(x) is ast.Constant and x.value for x in value.args] == [1, 2]):
        return None
    inner = value.func.value
    if not (type(inner) is ast.Call and type(inner.func) is ast.Attribute and inner.func.attr == "view" and type(inner.func.value) is ast.Name
            and inner.func.value.id == name and len(inner.args) == 1 and type(inner.args[0]) is ast.Name and not inner.keywords):
        return None
    return inner.args[0].id


def _emit(finder, removed: list[ast.stmt], rotary: ast.stmt, linear, bounds, view: str, names: list[str], call, groups, found) -> bool:
    from torch2pypto.translator.engine.regions import Region, Rotation  # regions calls this module

    lines = [_alone(finder, s) for s in removed]
    if None in lines or _alone(finder, rotary) is None:
        return False
    attempt, bound = linear
    helper, cos, sin = call
    params: dict[str, Param] = {}
    x = wrapper_param(finder, params, bound["input"], ROWS)
    weight = wrapper_param(finder, params, bound["weight"], rope.QKV)
    bias = wrapper_param(finder, params, bound.get("bias"), BIAS)
    taken = {p.name for p in params.values()}
    for source, kind, base in ((source_text(finder, bounds[0]), rope.BOUND, "start"), (source_text(finder, bounds[1]), rope.BOUND, "stop"),
                               (view, rope.HEADS, view), (cos, rope.ANGLES, cos), (sin, rope.ANGLES, sin), (helper.name, "callee", helper.name)):
        if source in params:
            return False
        params[source] = Param(unique_name(base, taken | set(names)), kind, source)
        taken.add(params[source].name)
    start, stop, view_name, cos_name, sin_name, helper_name = (params[s].name for s in (*(source_text(finder, b) for b in bounds), view, cos, sin, helper.name))
    q, k, v = names
    tail = "".join(f"{n} = {n}.view({view_name}).transpose(1, 2)\n" for n in names)
    tail += f"{q}, {k} = {helper_name}({q}, {k}, {cos_name}, {sin_name})\nreturn {q}, {k}, {v}\n"
    slices = f"{q}, {k}, {v} = qkv[..., :{start}], qkv[..., {start}:{stop}], qkv[..., {stop}:]\n"
    torch_source = f"qkv = torch.nn.functional.linear({x}, {weight}, {bias or 'None'})\n" + slices + tail
    entry = attempt.resolved.entry
    unfused = f"qkv = pypto_{entry.op}({x}, {weight}, bias={bias or 'None'})\n" + slices + tail
    wrapper = name_of(finder.function.name, torch_source, 1, (*_made_of(groups), *params))
    where = f"{finder.function.name}'s sliced projection and {helper.name}"
    dtype_of = {p.name: f"{x}.dtype" for g in groups for p in g.program.params if g.roles.get(p.name) == "x"}
    dtype_of |= {p.name: f"{ {'cos': cos_name, 'sin': sin_name}[g.roles[p.name]]}.dtype" for g in groups for p in g.rows if g.roles[p.name] != "x"}
    dtype_of |= {alias: dtype_of[name] for g in groups for name, alias in g.program.aliases.items() if name in dtype_of}
    projections = [(f"projections[{j}][0]", f"projections[{j}][1]" if bias else None) for j in range(3)]
    definitions = rope.definitions(wrapper, where, [p.name for p in params.values()], (torch_source, unfused),
                                   (x, projections, view_name, cos_name, sin_name), groups, dtype_of, cube.definitions(entry),
                                   sliced=f"_qkv_slices({weight}, {bias or 'None'}, {start}, {stop})")
    attempt.status, attempt.reason, attempt.pypto_api = CONVERTED, "", f"{wrapper} (fused)"
    finder.pending.pop(attempt.span, None)
    span = (*finder.lines.span(removed[0])[:2], *finder.lines.span(rotary)[2:])
    base = wrapper.removeprefix("pypto_").rpartition("_")[0]
    found.regions.append(Region(finder.path, span, finder.function.name, ("linear",), wrapper, f"{base}_kernel", tuple(params.values()), ("linear",)))
    found.rotations[finder.function] = Rotation(
        functools.partial(rope.definitions, wrapper, where, [p.name for p in params.values()], (torch_source, unfused),
                          (x, projections, view_name, cos_name, sin_name), groups, dtype_of, cube.definitions(entry),
                          sliced=f"_qkv_slices({weight}, {bias or 'None'}, {start}, {stop})"),
        tuple(groups), source_text(finder, bound["input"]), (span[0], span[2]), wrapper)
    for begin, end in _merged(finder.text, lines):
        found.edits.append((begin, end, ""))
    s = finder.lines.span(rotary)
    found.edits.append((finder.lines.offset(*s[:2]), finder.lines.offset(*s[2:]),
                        f"{q}, {k}, {v} = {wrapper}({', '.join(p.source for p in params.values())})"))
    found.definitions.extend((lines[0][0], d) for d in definitions)
    return True


def _merged(text: str, lines: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The removed lines' spans, those with only blank lines between as one; a span after a blank
    line or a comment takes the blank line after it (one stays, or the comment heads what follows)."""
    merged = [lines[0]]
    for begin, end in lines[1:]:
        if text[merged[-1][1] : begin].strip() == "":
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((begin, end))
    result = []
    for begin, end in merged:
        after = text.find("\n", end)
        if begin and _opens(text, begin) and after >= 0 and text[end:after].strip() == "":
            end = after + 1
        result.append((begin, end))
    return result
