"""Sibling projections: consecutive statements that each project the same input by a linear.

llama's attention::

    query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

Each statement is an assignment whose value is its linear (a pending site of ``self.q_proj``, an
nn.Linear, or ``F.linear(x, w, b)``, of names and attributes) with methods, attributes and
subscripts after it, or as the first argument of a call of a name or an attribute (qwen3's
``self.q_norm(self.q_proj(h).view(s))``); the linears read one input (the same text), which no statement of the group
assigns before it reads it, nor any weight or bias. One statement before the group calls a
wrapper of :mod:`torch2pypto.rules.siblings`, one launch for all projections; each linear's call
becomes the name of its result, the host views after it as written (a statement that is only
``name = linear(...)`` goes: the group's call assigns its name). The linears run first in
their statements, as they did: nothing is evaluated before them there.
"""

from __future__ import annotations

import ast
import functools
import re

from torch2pypto.rules import rope, siblings
from torch2pypto.rules.fusion import name_of
from torch2pypto.rules.tile_program import ROWS, VECTOR, Param
from torch2pypto.translator.engine.linears import BIAS, WEIGHT, dotted, find_activation, find_linear, source_text, unique_name, wrapper_param
from torch2pypto.translator.engine.report import CONVERTED
from torch2pypto.translator.engine.syntax import comments, is_docstring, locals_of


def sibling_linears(finder, statements: list[ast.stmt], i: int, found) -> int:
    """How many statements from ``i`` form a group of sibling projections (0: none, else at least
    two); a group's region, edits and definitions are added to ``found``."""
    group, assigned = [], set()
    for statement in statements[i:]:
        linear = _leading_linear(finder, statement)
        if linear is None or group and source_text(finder, linear[1]["input"]) != source_text(finder, group[0][1]["input"]):
            break
        if any(_root(v) in assigned for v in linear[1].values() if v is not None):
            break  # reads what the group assigned before it
        group.append(linear)
        targets = [n for t in statement.targets for n in ast.walk(t)]
        if not all(type(n) in (ast.Name, ast.Tuple, ast.List, ast.Store) for n in targets):
            break  # assigns an attribute or an item: the last of the group
        assigned |= {n.id for n in targets if type(n) is ast.Name}
    if len(group) == 3:
        rotated = _rotated(finder, statements, i, group, found)
        if rotated:
            return rotated
    return _emit(finder, statements[i : i + len(group)], group, found) if len(group) > 1 else 0


def _leading_linear(finder, statement: ast.stmt):
    """(attempt, bound arguments, call) of the linear a statement ``t = linear(...).view(...)...``
    evaluates first, else None."""
    if type(statement) is not ast.Assign:
        return None
    node = statement.value
    while True:
        linear = find_linear(finder, node)
        if linear is not None:
            return (*linear, node)
        if type(node) is ast.Call and type(node.func) is ast.Attribute and not dotted(node.func):
            node = node.func.value  # a method of what the linear gave
        elif type(node) is ast.Call and dotted(node.func) and node.args and type(node.args[0]) is not ast.Starred and find_activation(finder, node) is None:
            node = node.args[0]  # a call of a name or an attribute (qwen3's self.q_norm(...)), no activation epilogue's: its first argument first
        elif type(node) in (ast.Attribute, ast.Subscript):
            node = node.value
        else:
            return None


def _root(node: ast.expr) -> str | None:
    while type(node) is ast.Attribute:
        node = node.value
    return node.id if type(node) is ast.Name else None


def _bare(finder, statement: ast.stmt, node: ast.expr, before: list[ast.stmt]) -> str | None:
    """The name ``statement`` assigns if it is ``name = linear(...)`` alone on its lines and no
    statement ``before`` it in the group reads that name: the group's call assigns it instead."""
    target = statement.targets[0] if len(statement.targets) == 1 else None
    if statement.value is not node or type(target) is not ast.Name:
        return None
    if any(type(n) is ast.Name and n.id == target.id for b in before for n in ast.walk(b)):
        return None
    end = finder.lines.offset(*finder.lines.span(statement)[2:])
    return target.id if finder.text[end : finder.text.find("\n", end) % (len(finder.text) + 1)].strip() == "" else None


def _emit(finder, statements: list[ast.stmt], group: list, found) -> int:
    from torch2pypto.translator.engine.regions import Region  # regions calls this module

    first_span = finder.lines.span(statements[0])
    start = finder.lines.offset(*first_span[:2])
    line = finder.text.rfind("\n", 0, start) + 1
    indent = finder.text[line:start]
    if indent.strip():
        return 0  # not the line's first statement
    params: dict[str, Param] = {}
    x = wrapper_param(finder, params, group[0][1]["input"], ROWS)
    projections = [(wrapper_param(finder, params, b["weight"], WEIGHT), wrapper_param(finder, params, b.get("bias"), BIAS)) for _, b, _ in group]
    nodes = finder.nodes(finder.function)  # walked once per function
    taken = {n.id for n in nodes if type(n) is ast.Name} | {a.arg for a in nodes if type(a) is ast.arg}
    results, edits = [], []
    for j, ((_, _, node), statement, (weight, _)) in enumerate(zip(group, statements, projections)):
        bare = _bare(finder, statement, node, statements[:j])
        if bare is not None:  # its line goes: the group's call assigns its name
            s = finder.lines.span(statement)
            own = finder.lines.offset(*s[:2])
            end = finder.text.find("\n", finder.lines.offset(*s[2:]))
            edits.append((finder.text.rfind("\n", 0, own) + 1, len(finder.text) if end < 0 else end + 1, ""))
            results.append(bare)
            continue
        results.append(unique_name(weight.removesuffix("_weight"), taken))
        taken.add(results[-1])
        s = finder.lines.span(node)
        edits.append((finder.lines.offset(*s[:2]), finder.lines.offset(*s[2:]), results[-1]))
    linears = ", ".join(f"torch.nn.functional.linear({x}, {w}, {b or 'None'})" for w, b in projections)
    torch_source = f"return {linears}\n"
    attempts = [a for a, _, _ in group]
    wrapper = name_of(finder.function.name, torch_source, len(attempts))
    where = f"{finder.function.name}'s sibling projections"
    names = [p.name for p in params.values()]
    definitions = siblings.definitions(wrapper, where, x, projections, names, torch_source)
    for a in attempts:
        a.status, a.reason, a.pypto_api = CONVERTED, "", f"{wrapper} (fused)"
        finder.pending.pop(a.span, None)
    span = (*first_span[:2], *finder.lines.span(group[-1][2])[2:])
    kernel = siblings.kernel_name(len(group), False)
    found.regions.append(Region(finder.path, span, finder.function.name, ("linear",) * len(group), wrapper, kernel,
                                tuple(params.values()), ("linear",)))
    call = f"{wrapper}({', '.join(p.source for p in params.values())})"
    found.edits.append((line, line, f"{indent}{', '.join(results)} = {call}\n"))
    found.edits.extend(edits)
    found.definitions.extend((start, d) for d in definitions)
    return len(group)


_BETWEEN = 3  # statements that may stand between the projections and the rotary embedding


def _rotated(finder, statements: list[ast.stmt], i: int, group: list, found) -> int:
    """How many statements from ``i`` are q's, k's and v's projections viewed as heads, then
    the rotary embedding of q and k by a module function whose body is that grouped region (0:
    none); if so, one call of a :mod:`torch2pypto.rules.rope` wrapper replaces them::

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = ...; value_states = ...
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

    The statements between (at most ``_BETWEEN``) only rename (``a, b = name``) what the
    projections neither read nor assign: the call stands where the rotary embedding stood. A norm
    of each of q's and k's heads, a module whose forward is a recorded region (:func:`_head_norm`),
    runs in the kernel before their rotary embedding: written around the view (qwen3's
    ``self.q_norm(self.q_proj(h).view(s)).transpose(1, 2)``) or as statements of their own between
    (gemma3's ``query_states = self.q_norm(query_states)``)."""
    views = [_heads(statement, node) for (_, _, node), statement in zip(group, statements[i : i + 3])]
    if None in views or len({v for _, v, _ in views}) != 1:
        return 0
    names, view, norms = [n for n, _, _ in views], views[0][1], [m for _, _, m in views]
    if norms[2] is not None or (norms[0] is None) != (norms[1] is None):
        return 0  # a norm of q's heads and one of k's, or none
    reads = {view, *(_root(v) for _, b, _ in group for v in b.values() if v is not None)}
    after = {}  # gemma3's norms as statements of their own: q's and k's index -> (statement, the norm)
    for j in range(i + 3, min(i + 3 + _BETWEEN + 3, len(statements))):  # renames, two norms, the rotary embedding
        statement = statements[j]
        call = _rope_call(finder, statement, names)
        if call is not None:
            break
        own = _normed(statement, names[:2])
        if own is not None and own[0] not in after and norms[0] is None:
            after[own[0]] = (statement, own[1])
            continue
        if j - i - 3 - len(after) >= _BETWEEN:
            return 0
        if type(statement) is not ast.Assign or type(statement.value) is not ast.Name or statement.value.id in names:
            return 0
        if not all(type(n) in (ast.Name, ast.Tuple, ast.Store) for t in statement.targets for n in ast.walk(t)):
            return 0
        if {n.id for t in statement.targets for n in ast.walk(t) if type(n) is ast.Name} & (set(names) | reads):
            return 0
    else:
        return 0
    helper, cos, sin = call
    if after:
        if len(after) != 2:
            return 0
        norms = [after[0][1], after[1][1], None]
    normed = [] if norms[0] is None else [_head_norm(finder, m, found) for m in norms[:2]]
    if None in normed:
        return 0
    groups = _rope_groups(finder, helper, found, [n for _, n in normed] or [None, None])
    if groups is None or {cos, sin} & (set(names) | reads) or cos == sin:
        return 0
    modules = [(m, cls) for m, (cls, _) in zip(norms, normed)]
    later = [s for s, _ in sorted(after.values(), key=lambda a: a[0].lineno)]
    return _emit_rotated(finder, statements[i : i + 3], later, statement, group, names, view, call, groups, modules, found) and j + 1 - i


def _heads(statement: ast.stmt, node: ast.expr) -> tuple[str, str, ast.expr | None] | None:
    """(target, shape, None) of ``target = <node>.view(shape).transpose(1, 2)``, (target, shape,
    the norm) of ``target = self.norm(<node>.view(shape)).transpose(1, 2)``, else None."""
    value = statement.value
    if len(statement.targets) != 1 or type(statement.targets[0]) is not ast.Name:
        return None
    if not (type(value) is ast.Call and type(value.func) is ast.Attribute and value.func.attr == "transpose" and not value.keywords
            and [type(a) is ast.Constant and a.value for a in value.args] == [1, 2]):
        return None
    inner, norm = value.func.value, None
    if (type(inner) is ast.Call and type(inner.func) is ast.Attribute and type(inner.func.value) is ast.Name and inner.func.value.id == "self"
            and len(inner.args) == 1 and not inner.keywords):
        inner, norm = inner.args[0], inner.func
    if not (type(inner) is ast.Call and type(inner.func) is ast.Attribute and inner.func.attr == "view" and inner.func.value is node
            and not inner.keywords and len(inner.args) == 1 and type(inner.args[0]) is ast.Name):
        return None
    return statement.targets[0].id, inner.args[0].id, norm


def _normed(statement: ast.stmt, names: list[str]):
    """(the index in ``names``, the norm) of ``name = self.norm(name)``, else None."""
    value = statement.value if type(statement) is ast.Assign and len(statement.targets) == 1 else None
    target = statement.targets[0] if value is not None else None
    if not (type(target) is ast.Name and target.id in names and type(value) is ast.Call and type(value.func) is ast.Attribute
            and type(value.func.value) is ast.Name and value.func.value.id == "self" and not value.keywords
            and [type(a) is ast.Name and a.id for a in value.args] == [target.id]):
        return None
    return names.index(target.id), value.func


def _head_norm(finder, func: ast.Attribute, found):
    """(the class, its :class:`rope.Norm`) of ``self.norm``, always an instance of a class of
    this module whose ``forward(self, x)`` is ``name = x.dtype`` statements, then a region of
    rows that returns its result (qwen3's RMSNorm); else None."""
    inference = finder.sites.inference
    cls = inference.held_class(func)
    forward = inference.method(cls, "forward") if cls is not None else None
    if forward is None or inference.method(cls, "__call__") is not None or cls.name in locals_of(finder.function):
        return None
    found.ahead(forward)  # its regions found, if not yet
    statements, built = found.returned.get(forward, ((), None))
    arguments = forward.args
    if built is None or arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.posonlyargs or len(arguments.args) != 2:
        return None
    x = arguments.args[1].arg
    body = forward.body[1:] if is_docstring(forward.body[0]) else forward.body
    head = body[: len(body) - len(statements)]
    if len(head) + len(statements) != len(body) or any(a is not b for a, b in zip(body[len(head):], statements)):
        return None
    dtype = ast.dump(ast.parse(f"{x}.dtype", mode="eval").body)
    if not all(type(s) is ast.Assign and len(s.targets) == 1 and type(s.targets[0]) is ast.Name and ast.dump(s.value) == dtype for s in head):
        return None
    program = built.program
    if program.narrow() or program.indices or program.modules or program.whole or program.checks or program.dtype_checks or program.aliases:
        return None
    sources = {}
    for p in program.params:
        if p.kind == ROWS and p.source == x:
            sources[p.name] = "x"
        elif p.kind in (VECTOR, "number") and re.fullmatch(r"self\.\w+", p.source):
            sources[p.name] = p.source
        elif p.kind == "dtype" and p.source in {s.targets[0].id for s in head}:
            sources[p.name] = "x"
        elif p.kind == "self":  # its fallback's (gemma3's self._norm): the module
            sources[p.name] = "self"
        else:
            return None
    if [p.kind for p in program.params if sources[p.name] == "x"].count(ROWS) != 1 or built.outputs[0].value.role != ROWS:
        return None
    return cls, rope.Norm(program, built.outputs[0], sources)


def _rope_call(finder, statement: ast.stmt, names: list[str]):
    """(the helper, cos, sin) of ``q, k = helper(q, k, cos, sin)`` (q and k: the projections'
    names), else None."""
    if type(statement) is not ast.Assign or len(statement.targets) != 1 or type(statement.targets[0]) is not ast.Tuple:
        return None
    targets, value = statement.targets[0].elts, statement.value
    if [type(t) is ast.Name and t.id for t in targets] != names[:2]:
        return None
    if type(value) is not ast.Call or type(value.func) is not ast.Name or value.keywords or len(value.args) != 4:
        return None
    if not all(type(a) is ast.Name for a in value.args) or [a.id for a in value.args[:2]] != names[:2]:
        return None
    helper = finder.helpers.get(value.func.id)
    return (helper, value.args[2].id, value.args[3].id) if type(helper) is ast.FunctionDef else None


def _rope_groups(finder, helper: ast.FunctionDef, found, norms):
    """The :class:`rope.Group` of q and of k of ``helper``, a function ``(q, k, cos, sin, d=1)``
    whose body is ``cos = cos.unsqueeze(d)``, ``sin = sin.unsqueeze(d)``, perhaps ``w =
    cos.shape[-1]`` (phi3's rotary_dim: cos and sin rotate each head's first w columns, the rest
    passes), one grouped region of a group for q (reading q, cos and sin) and one for k, and
    ``return q_embed, k_embed``, each after its ``norms`` one (None: none); else None."""
    recorded = found.grouped.get(helper)
    arguments = helper.args
    if recorded is None or arguments.vararg or arguments.kwarg or arguments.posonlyargs or arguments.kwonlyargs:
        return None
    params = [a.arg for a in arguments.args]
    if len(params) < 4 or len(arguments.defaults) < len(params) - 4:
        return None
    defaults = dict(zip(params[len(params) - len(arguments.defaults):], arguments.defaults))
    q, k, cos, sin = params[:4]
    body = helper.body[1:] if ast.get_docstring(helper) is not None else helper.body
    region, built = recorded
    width = _width(body[2], cos) if len(body) == len(region) + 4 else None
    if len(body) != len(region) + 3 + (width is not None) or any(a is not b for a, b in zip(body[2 + (width is not None) : -1], region)):
        return None
    for statement, name in zip(body[:2], (cos, sin)):
        dim = _dim(statement, name)
        if dim != 1 and not (dim in defaults and type(defaults[dim]) is ast.Constant and defaults[dim].value == 1 and dim not in params[:4]):
            return None
    returned = body[-1]
    outputs = [b.outputs for b in built.groups]
    if len(built.groups) != 2 or any(len(o) != 1 for o in outputs):
        return None
    if type(returned) is not ast.Return or ast.dump(returned.value) != ast.dump(ast.parse(f"{outputs[0][0].name}, {outputs[1][0].name}", mode="eval").body):
        return None
    groups = []
    for b, own, norm in zip(built.groups, (q, k), norms):
        program = b.program
        roles = {own: "x", cos: "cos", sin: "sin"}
        rows = [p for p in program.params if p.kind == ROWS]
        narrow = {roles.get(next(p.source for p in rows if p.name == n), "") for n in program.narrow()}
        if program.reduces or program.whole or program.modules or not program.indices <= {width} or not narrow <= {"cos", "sin"} \
                or any(w != width for w in program.narrow().values()):
            return None  # a head's columns, the angles' at the width of cos
        if any(p.kind not in (ROWS, "callee") and not (p.kind == "index" and p.source == width) for p in program.params) \
                or sorted(roles.get(p.source, "") for p in rows) != ["cos", "sin", "x"]:
            return None
        groups.append(rope.Group(program, outputs[len(groups)][0], {p.name: roles[p.source] for p in rows}, norm, width))
    return groups if rope.fits(groups, 3) else None


def _width(statement: ast.stmt, cos: str) -> str | None:
    """The name ``statement`` binds if it is ``name = cos.shape[-1]``, else None."""
    if type(statement) is ast.Assign and len(statement.targets) == 1 and type(statement.targets[0]) is ast.Name \
            and ast.dump(statement.value) == ast.dump(ast.parse(f"{cos}.shape[-1]", mode="eval").body):
        return statement.targets[0].id
    return None


def _dim(statement: ast.stmt, name: str):
    """The argument of ``name = name.unsqueeze(arg)``: a name's id or a literal's value, else None."""
    value = getattr(statement, "value", None)
    if not (type(statement) is ast.Assign and [type(t) is ast.Name and t.id for t in statement.targets] == [name]
            and type(value) is ast.Call and type(value.func) is ast.Attribute and value.func.attr == "unsqueeze"
            and type(value.func.value) is ast.Name and value.func.value.id == name and len(value.args) == 1 and not value.keywords):
        return None
    arg = value.args[0]
    return arg.id if type(arg) is ast.Name else arg.value if type(arg) is ast.Constant else None


def _alone(finder, statement: ast.stmt) -> tuple[int, int] | None:
    """The offsets of the whole lines of ``statement`` if it stands alone on them, else None."""
    s = finder.lines.span(statement)
    start, end = finder.lines.offset(*s[:2]), finder.lines.offset(*s[2:])
    line = finder.text.rfind("\n", 0, start) + 1
    stop = finder.text.find("\n", end)
    stop = len(finder.text) if stop < 0 else stop
    if finder.text[line:start].strip() or finder.text[end:stop].strip():
        return None
    return line, stop + 1


def _opens(text: str, line: int) -> bool:
    """Whether the line before the one at offset ``line`` is blank, a comment or a block's header:
    statements removed from there on take a blank line after them too (one stays above, the comment
    heads what follows, or the block starts with what follows, as it started with them)."""
    before = text[text.rfind("\n", 0, max(line - 1, 0)) + 1 : line].strip()
    if before.startswith("#"):
        return True
    said = comments(before)  # a header's own comment: ``for _ in range(n):  # ...``
    return (before[: -len(said[-1])] if said else before).rstrip().endswith(":") or before == ""


def _emit_rotated(finder, projected: list[ast.stmt], after: list[ast.stmt], rotary: ast.stmt, group: list, names: list[str], view: str, call,
                  groups, modules, found) -> bool:
    from torch2pypto.translator.engine.regions import Region, Rotation  # regions calls this module

    lines = [_alone(finder, s) for s in (*projected, *after, rotary)]
    if None in lines:
        return False
    for k in range(len(lines) - 2, 0, -1):  # removed statements with blank lines between: one removal
        if lines[k] is not None and finder.text[lines[k - 1][1] : lines[k][0]].strip() == "":
            lines[k - 1 : k + 1] = [(lines[k - 1][0], lines[k][1])]
    helper, cos, sin = call
    params: dict[str, Param] = {}
    x = wrapper_param(finder, params, group[0][1]["input"], ROWS)
    projections = [(wrapper_param(finder, params, b["weight"], WEIGHT), wrapper_param(finder, params, b.get("bias"), BIAS)) for _, b, _ in group]
    own = [p.name for p in params.values()]  # the sibling projections' parameters
    taken = set(own)
    for source, kind in ((view, rope.HEADS), (cos, rope.ANGLES), (sin, rope.ANGLES), (helper.name, "callee")):
        name = unique_name(source, taken)
        taken.add(name)
        params[source] = Param(name, kind, source)
    held = []  # each norm's (module, class) parameters
    for func, cls in modules:
        for source, kind in ((source_text(finder, func), "module"), (cls.name, "class")):
            if source not in params:
                params[source] = Param(unique_name(source.rpartition(".")[2], taken), kind, source)
                taken.add(params[source].name)
        held.append((params[source_text(finder, func)].name, params[cls.name].name))
    if taken & set(names):
        return False
    view_name, cos_name, sin_name, helper_name = (params[s].name for s in (view, cos, sin, helper.name))
    q, k, v = names
    rotated = ""
    normed = [f"{m}(" for m, _ in held] + [""] * (3 - len(held))  # each projection's heads: its norm's call, if any
    if after:  # gemma3's: statements of their own, after the views
        normed = [""] * 3
        rotated = "".join(f"{n} = {m}({n})\n" for n, (m, _) in zip(names, held))
    # the fallback: the statements as they translate without the RoPE epilogue (the sibling projections' call)
    linears = ", ".join(f"torch.nn.functional.linear({x}, {w}, {b or 'None'})" for w, b in projections)
    sibling_source = f"return {linears}\n"
    sibling = name_of(finder.function.name, sibling_source, len(group))
    separate = siblings.definitions(sibling, f"{finder.function.name}'s sibling projections", x, projections, own, sibling_source)
    taken |= set(names)
    results = []
    for w, _ in projections:
        results.append(unique_name(w.removesuffix("_weight"), taken))
        taken.add(results[-1])
    rotated += f"{q}, {k} = {helper_name}({q}, {k}, {cos_name}, {sin_name})\nreturn {q}, {k}, {v}\n"
    unfused = f"{', '.join(results)} = {sibling}({', '.join(own)})\n"
    unfused += "".join(f"{n} = {m}{r}.view({view_name}){')' if m else ''}.transpose(1, 2)\n" for n, r, m in zip(names, results, normed)) + rotated
    torch_source = "".join(f"{n} = {m}torch.nn.functional.linear({x}, {w}, {b or 'None'}).view({view_name}){')' if m else ''}.transpose(1, 2)\n"
                           for n, (w, b), m in zip(names, projections, normed)) + rotated
    attempts = [a for a, _, _ in group]
    wrapper = name_of(finder.function.name, torch_source, len(attempts), (*_made_of(groups), *params))
    where = f"{finder.function.name}'s projections and {helper.name}"
    heads = [g.norm.dtype(m, x) if g.norm else f"{x}.dtype" for g, (m, _) in zip(groups, held + [("", "")] * (2 - len(held)))]
    dtype_of = {p.name: dtype for g, dtype in zip(groups, heads) for p in g.program.params if g.roles.get(p.name) == "x"}
    dtype_of |= {p.name: f"{ {'cos': cos_name, 'sin': sin_name}[g.roles[p.name]]}.dtype" for g in groups for p in g.rows if g.roles[p.name] != "x"}
    dtype_of |= {alias: dtype_of[name] for g in groups for name, alias in g.program.aliases.items() if name in dtype_of}
    definitions = rope.definitions(wrapper, where, [p.name for p in params.values()], (torch_source, unfused),
                                   (x, projections, view_name, cos_name, sin_name), groups, dtype_of, separate, held)
    for a in attempts:
        a.status, a.reason, a.pypto_api = CONVERTED, "", f"{wrapper} (fused)"
        finder.pending.pop(a.span, None)
    span = (*finder.lines.span(projected[0])[:2], *finder.lines.span(rotary)[2:])
    base = wrapper.removeprefix("pypto_").rpartition("_")[0]
    found.regions.append(Region(finder.path, span, finder.function.name, ("linear",) * 3, wrapper, f"{base}_kernel",
                                tuple(params.values()), ("linear",), modules=tuple(held)))
    found.rotations[finder.function] = Rotation(
        functools.partial(rope.definitions, wrapper, where, [p.name for p in params.values()], (torch_source, unfused),
                          (x, projections, view_name, cos_name, sin_name), groups, dtype_of, separate, held),
        tuple(groups), source_text(finder, group[0][1]["input"]), (span[0], span[2]), wrapper)
    (first, _), (_, last) = lines[0], lines[-2]
    if _opens(finder.text, first) and finder.text[last : finder.text.find("\n", last) + 1].strip() == "":
        lines[-2] = (lines[-2][0], finder.text.find("\n", last) + 1)  # a blank line after them goes too
    for start, stop in lines[:-1]:
        found.edits.append((start, stop, ""))
    s = finder.lines.span(rotary)
    call_text = f"{wrapper}({', '.join(p.source for p in params.values())})"
    found.edits.append((finder.lines.offset(*s[:2]), finder.lines.offset(*s[2:]), f"{q}, {k}, {v} = {call_text}"))
    found.definitions.extend((lines[0][0], d) for d in definitions)
    return True


def _made_of(groups) -> tuple[str, ...]:
    """The RoPE groups' and their norms' tile programs: what the kernel computes that the
    statements, which call the helper, do not spell (:func:`name_of`)."""
    return tuple("".join(p.body) for g in groups for p in ((g.norm.program,) if g.norm else ()) + (g.program,))
