"""Projections with the rotary embedding in their epilogue: q, k and v of one read of x, q's and
k's heads rotated before they are stored, as one cube kernel.

llama's attention projects x three times, views each result as [B, heads, S, D] and rotates q
and k (``apply_rotary_pos_emb``: a grouped region of its own, a group of rows for q and one for
k). Here each row tile of x ([B * S, k]: a row is a token) is read once and multiplied by every
weight on the cube (FP32 accumulation), plus its bias, rounded to x's dtype as torch's linear
rounds; on the vector cores each D-wide head of q's and k's tile then runs the RoPE region's own
tile program (its groups' steps, dtypes and rounding points as that region's kernel has them)
against the token rows' cos and sin ([B * S, D]), and v is stored as projected. Where qwen3 and
gemma3 norm each head first (``self.q_norm``, ``self.k_norm``), the head runs its norm class's
forward's region program before (:class:`Norm`: its gamma, [1, D], read once a row tile). The results are
the [B, heads, S, D] views of [B, S, heads * D] rows that torch's statements give. The engine
(:mod:`torch2pypto.translator.engine.siblings`) finds the pattern and hands over the programs;
the wrapper runs the statements as written where the operands do not fit, and gives torch's
gradients of them when autograd records. Where x is a region's result deferred into the kernel
(llama's input RMSNorm: :mod:`torch2pypto.translator.engine.deferrals`), the wrapper hands its
call over: another kernel computes that region's program on each row tile of its operands first
(:class:`Prologue`), its result the cube's a tile.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from typing import Sequence

from torch2pypto.rules import epilogue, templates, wrappers
from torch2pypto.rules.codegen import Definition, copied
from torch2pypto.rules.fusion import INLINED, tuple_text
from torch2pypto.rules.kernel_ir import Assign, Do, If, Raw, Stmt, call, items, loop, pypto, when
from torch2pypto.rules.prologue import CUBE_ALIGNED
from torch2pypto.rules.tile_program import FP32, ROWS, VECTOR, Output, Program, Unfusible, torch_dtype
from torch2pypto.rules.widths import needed

RoPE_TAKES = copied("rope", "_rope_takes", first="_CUBE_CORES")
NORMS_TAKE = copied("rope", "_norms_take")
HEAD_DIM = copied("rope", "_head_dim")
QKV_SLICES = copied("rope", "_qkv_slices")
DEFERRED = copied("rope", "_deferred")
DEFERRED_PROLOGUE = copied("rope", "_deferred_prologue")
HEADS, ANGLES = "heads", "angles"  # the wrapper's parameter kinds of the heads' view shape and of cos and sin
QKV, BOUND = "qkv", "bound"  # of one projection's weight that q, k and v slice (phi3's qkv_proj), and of the slices' bounds
# the kernel's own names, which a RoPE program's statements must not assign
_OWN = {"a", "a_tile", "n", "o", "t", "tiles", "blocks", "r", "i", "h", "valid", "rows", "cols", "k", "k16", "dtype", "projected", "kernel", "row_tiles", "cube_tasks", "reuse"}


_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")


def _assigned(statements: Sequence[str]) -> set[str]:
    """The names a program's statements (its body, its setup) assign."""
    return {m.group(1) for s in statements for m in re.finditer(r"^\s*(\w+) = ", s, re.M)}


def _held(program: Program) -> set[str]:
    """The names a kernel holds once for a program composed into it: its parameters, their
    tiles, what its setup assigns and its dtypes."""
    return {*(p.name for p in program.params), *(f"{p.name}_tile" for p in program.params), *_assigned(program.setup),
            *(s for s in program.symbols if s != FP32)}


def _renamed(text: str, names: dict[str, str]) -> str:
    """``text`` with each of ``names`` as the kernel holds it."""
    return _NAME.sub(lambda m: names.get(m.group(0), m.group(0)), text)


class Norm:
    """A norm of each head before its rotary embedding (qwen3's ``self.q_norm``): the program and
    output of its class's forward's region, and each parameter's source there (the head: ``x``;
    ``self.weight``, ``self.variance_epsilon``: the module's; a dtype: the head's)."""

    def __init__(self, program: Program, output: Output, sources: dict[str, str]) -> None:
        self.program, self.output, self.sources = program, output, sources
        self.head = next(p for p in program.params if sources[p.name] == "x")
        self.vectors = [p for p in program.params if p.kind == VECTOR]
        self.numbers = [p for p in program.params if p.kind == "number"]

    def kernel(self, j: int) -> dict[str, str]:
        """The program's names the kernel holds once per norm (its parameters, their tiles, its
        dtypes and setup), each prefixed as the ``j``-th group's."""
        return {n: f"norm{j}_{n}" for n in _held(self.program)}

    def text(self, j: int, text: str) -> str:
        """``text`` of the program with its names as the ``j``-th group's kernel holds them."""
        return _renamed(text, self.kernel(j))

    def host(self, module: str, x: str, expression: str) -> str:
        """A host expression of the program's parameters as the wrapper reads them: from
        ``module`` (the norm) and ``x`` (the projections' input, the heads' dtype)."""
        read = {p.name: (x if p.kind == ROWS else f"{x}.dtype" if p.kind == "dtype" else module + self.sources[p.name].removeprefix("self"))
                for p in self.program.params}
        return _NAME.sub(lambda m: read.get(m.group(0), m.group(0)), expression)

    def symbols(self, j: int, module: str, x: str) -> dict[str, str]:
        """The kernel's dtype symbols of the norm and their host expressions."""
        names = self.kernel(j)
        return {names[s]: self.host(module, x, e) for s, e in self.program.symbols.items() if s != FP32}

    def dtype(self, module: str, x: str) -> str:
        """The host expression of the norm's result's dtype."""
        symbol = self.output.value.dtype
        return self.host(module, x, self.program.symbols.get(symbol) or torch_dtype(self.program, symbol))


class Prologue:
    """A row region before the projections, computed in the kernel's prologue from its operands
    (llama's input RMSNorm, deferred into its attention's projections): its program and result,
    its names in the kernel prefixed ``prologue_`` (its parameters, their tiles, its setup's, its
    dtypes and ``count``, the real cols its row reduction counts: x's ``k``)."""

    def __init__(self, program: Program, output: Output) -> None:
        self.program, self.output = program, output
        self.rows = [p for p in program.params if p.kind == ROWS]
        self.vectors = [p for p in program.params if p.kind == VECTOR]
        self.numbers = [p for p in program.params if p.kind == "number"]
        self.names = {n: f"prologue_{n}" for n in (*_held(program), "count")}
        if not program.reduces or program.narrow() or len(self.rows) != 1 or output.value.role != ROWS \
                or any(p.kind not in (ROWS, VECTOR, "number", "dtype", "class", "module") for p in program.params):
            raise Unfusible("a projections' prologue is a row reduction's region of one rows operand, vectors and numbers")

    def text(self, text: str) -> str:
        """``text`` of the program with its names as the kernel holds them."""
        return _renamed(text, self.names)

    def assigned(self) -> set[str]:
        """What the program's statements assign (in the kernel, before the projections)."""
        return _assigned(self.program.body)

    def symbols(self) -> list[str]:
        """The kernel's dtype symbols of the region, as the factory takes them."""
        return [self.names[s] for s in self.program.symbols if s != FP32]


class Group:
    """One rotated projection: the RoPE group's program and output, the role of each of its rows
    operands (``x``: the projection's head, ``cos``, ``sin``), the norm of each head before it
    (None: none), and the name of the angles' width where it rotates a head's first columns only
    (phi3's ``rotary_dim = cos.shape[-1]``; None: the whole head)."""

    def __init__(self, program: Program, output: Output, roles: dict[str, str], norm: Norm | None = None, width: str | None = None) -> None:
        self.program, self.output, self.roles, self.norm, self.width = program, output, roles, norm, width
        self.rows = [p for p in program.params if p.kind == ROWS]

    def names(self) -> set[str]:
        """What the group's statements assign, its operands' tiles, cos and sin (kernel parameters), and its dtypes."""
        assigned = _assigned(self.program.body)
        return assigned | self.held()

    def held(self) -> set[str]:
        """The names the kernel holds across a head's steps: the operands' tiles, cos and sin, the
        dtypes and the setup's, the norm's."""
        angles = {p.name for p in self.rows if self.roles[p.name] != "x"}
        setup = _assigned(self.program.setup)
        return {f"{p.name}_tile" for p in self.rows} | angles | set(self.program.symbols) | setup

    def normed(self) -> set[str]:
        """What the norm's statements assign: they run before the RoPE group's, which may reuse them."""
        return _assigned(self.norm.program.body) if self.norm else set()


def fits(groups: Sequence[Group], count: int, prologue: Prologue | None = None) -> bool:
    """Whether the groups (and the ``prologue``, which also reads none of the kernel's row tile
    names) name nothing the kernel names itself."""
    own = _OWN | {f"{b}{j}{s}" for j in range(count) for b in ("w", "b", "out") for s in ("", "_tile")}
    own |= {f"{b}{j}" for j in range(count) for b in ("n", "k_tiles", "n_tiles", "vec_rows", "vec_cols", "heads", "rope_rows", "rope_cols")}
    own |= {f"n{j}_16" for j in range(count)} | {"count"}
    normed = set().union(*(g.norm.kernel(j).values() for j, g in enumerate(groups) if g.norm))
    held = set().union(*(g.held() for g in groups)) | normed
    if prologue and (prologue.assigned() & (own | held | set(prologue.names.values()))
                     or set(_NAME.findall(prologue.text("".join(prologue.program.body)))) & (own - prologue.assigned())):
        return False
    return not any(g.names() & (own | normed) or g.normed() & (own | held) for g in groups)


def _kernel(name: str, groups: Sequence[Group], dtypes: list[str], promoted: list[str], numbers: list[str], bias: bool,
            prologue: Prologue | None = None) -> Definition:
    """The factory; with a ``prologue``, ``a``'s row tiles are its region's result, computed from
    its operands' row tiles ([rows, width]: x's rows padded to the cube's k16) on the vector cores."""
    count = 3
    rotated = len(groups)
    cos, sin = (next(p.name for p in groups[0].rows if groups[0].roles[p.name] == role) for role in ("cos", "sin"))
    norms = [(j, g.norm) for j, g in enumerate(groups) if g.norm]
    width = groups[0].width or "cols"  # the angles' (a head's rotated columns)
    factory = ["dtype", "k", "n0", "n1", "n2", "rows", "cols", *([width] if groups[0].width else []), "blocks", "row_tiles", *dtypes, *promoted, *numbers]
    prelude: list[Stmt] = [Assign("k16", "-(-k // 16) * 16", "the cube's 32-byte aligned tiles over the real k and each n"),
                           *([Assign("count", "cols", "the real cols a norm's row reduction counts: a head's")] if norms else [])]
    if prologue:
        region = prologue.program
        factory += [*prologue.symbols(), "width", *(prologue.names[p.name] for p in prologue.numbers)]
        buffers = region.buffers([f"{p.name}_tile" for p in prologue.rows], [prologue.output.value.text])
        tile_dtypes = ", ".join([*prologue.symbols(), FP32])
        prelude += [Raw(prologue.text("".join(s for s in dict.fromkeys(region.setup) if s))),
                    Assign("prologue_count", "k", "the real cols the prologue's row reduction counts: x's"),
                    Assign("prologue_rows, prologue_cols", call("_tile_shape", "width", "rows", str(buffers), f"({tile_dtypes})", whole_rows="True"),
                           "the prologue's tiles: whole rows")]
    for j in range(count):
        prelude += [Assign(f"n{j}_16", f"-(-n{j} // 16) * 16"), Assign(f"k_tiles{j}, n_tiles{j}", call("_cube_tiles", "k16", f"n{j}_16", "dtype", "rows")),
                    Assign(f"vec_rows{j}, vec_cols{j}", call("_tile_shape", f"n{j}_16", "rows", "3", f"({FP32},)"))]
    for j, g in enumerate(groups):
        buffers = g.program.buffers([f"{p.name}_tile" for p in g.rows], [g.output.value.text])
        tile_dtypes = ", ".join([*dtypes, *promoted, FP32])
        prelude.append(Raw("".join(s for s in dict.fromkeys(g.program.setup) if s)))
        shape = "split_cols"
        if g.norm:  # its row reduction's tiles span whole heads
            norm = g.norm.program
            buffers = max(buffers, norm.buffers([f"{g.norm.head.name}_tile"], [g.norm.output.value.text]))
            prelude.append(Raw("".join(g.norm.text(j, s) for s in dict.fromkeys(norm.setup) if s)))
            shape = "whole_rows"
        prelude += [Assign(f"rope_rows{j}, rope_cols{j}", call("_tile_shape", "cols", "rows", str(buffers), f"({tile_dtypes})", **{shape: "True"})),
                    Assign(f"rope_cols{j}", f"-(-rope_cols{j} // 32) * 32", "tiles' last dim spans 32-byte blocks"),
                    Assign(f"heads{j}", f"n{j} // cols")]
    prelude += [Assign("cube_tasks", "row_tiles * sum(-(-n // t[0]) for n, t in ((n0_16, n_tiles0), (n1_16, n_tiles1), (n2_16, n_tiles2)))"),
                Assign("reuse", "max(1, min(_ROPE_REUSE, cube_tasks // _CUBE_CORES))", "cube tasks of one a tile merged: as many as leave each core one")]
    symbol = {p.name: groups[0].program.dtype_symbol(p) for p in groups[0].rows}
    vectors = [(norm.text(j, p.name), norm.text(j, norm.program.dtype_symbol(p))) for j, norm in norms for p in norm.vectors]
    outs = [g.output.value.dtype for g in groups] + ["dtype"] * (count - rotated)
    first = prologue.names[prologue.rows[0].name] if prologue else "a"
    inputs = [*(templates.tensor(prologue.names[p.name], items("pypto.DYNAMIC", "width"), prologue.names[prologue.program.dtype_symbol(p)])
                for p in prologue.rows),
              *(templates.tensor(prologue.names[p.name], items("1", "width"), prologue.names[prologue.program.dtype_symbol(p)])
                for p in prologue.vectors)] if prologue else [templates.tensor("a", items("pypto.DYNAMIC", "k"), "dtype")]
    params = [*inputs,
              *(templates.tensor(f"w{j}", items(f"n{j}", "k"), "dtype") for j in range(count)),
              *(templates.tensor(f"b{j}", items("1", f"n{j}"), "dtype") for j in range(count) if bias),
              *(templates.tensor(p, items("pypto.DYNAMIC", width), symbol[p]) for p in (cos, sin)),
              *(templates.tensor(v, items("1", "cols"), d) for v, d in vectors),
              *(templates.tensor(f"out{j}", items("pypto.DYNAMIC", f"n{j}"), d) for j, d in enumerate(outs))]
    a_tile = [Assign("a_tile", pypto("view", "a", items("rows", "k16"), items("r", "0"), valid_shape=items("valid[0]", "k")))]
    if prologue:  # its region's steps on the tile's rows, their result the cube's a tile
        a_tile = [Do(pypto("set_vec_tile_shapes", "prologue_rows", "prologue_cols")),
                  *(Assign(prologue.names[f"{p.name}_tile"], pypto("view", prologue.names[p.name], items("rows", "width"), items("r", "0"),
                                                                   valid_shape=items("valid[0]", "k"))) for p in prologue.rows),
                  *(Assign(prologue.names[f"{p.name}_tile"], pypto("view", prologue.names[p.name], items("1", "width"), items("0", "0"),
                                                                   valid_shape=items("1", "k"))) for p in prologue.vectors),
                  Raw(prologue.text("".join(prologue.program.body))),
                  Assign("a_tile", pypto("view", prologue.text(prologue.output.value.text), items("rows", "k16"), items("0", "0"),
                                         valid_shape=items("valid[0]", "k")), "the prologue's result: the cube's row tile")]
    body: list[Stmt] = [
        Assign("o, i", "t // tiles, t % tiles"), Assign("r", "o * n + i * rows"), Assign("valid", "[(n - i * rows).min(rows), cols]"),
        *a_tile,
        *(Assign(f"{p}_tile", pypto("view", p, items("rows", width), items("r if blocks == 1 else i * rows", "0"),
                                    valid_shape="valid" if width == "cols" else items("valid[0]", width)), "the tokens' angles") for p in (cos, sin)),
        *(Assign(f"{v}_tile", pypto("view", v, items("1", "cols"), items("0", "0"), valid_shape=items("1", "cols")), "a norm's, every head's")
          for v, _ in vectors),
    ]
    for j in range(count):
        body += [Do(pypto("set_cube_tile_shapes", items("rows", "rows"), f"k_tiles{j}", f"n_tiles{j}")),
                 Assign(f"w{j}_tile", pypto("view", f"w{j}", items(f"n{j}_16", "k16"), items("0", "0"), valid_shape=items(f"n{j}", "k"))),
                 Assign("projected", pypto("matmul", "a_tile", f"w{j}_tile", FP32, b_trans="True")),
                 Do(pypto("set_vec_tile_shapes", f"vec_rows{j}", f"vec_cols{j}"))]
        if bias:
            body += [Assign(f"b{j}_tile", pypto("view", f"b{j}", items("1", f"n{j}_16"), items("0", "0"), valid_shape=items("1", f"n{j}"))),
                     templates.to_fp32([f"b{j}_tile"]), Assign("projected", pypto("add", "projected", f"b{j}_tile"))]
        if j >= rotated:
            body += [_rounded("projected"), Do(pypto("assemble", "projected", items("r", "0"), f"out{j}"))]
            continue
        g = groups[j]
        head = next(p.name for p in g.rows if g.roles[p.name] == "x")
        # each head rounded on its own: a head's RoPE waits for its columns' cube tasks only
        tile = g.norm.text(j, f"{g.norm.head.name}_tile") if g.norm else f"{head}_tile"
        inner = [Assign(tile, pypto("view", "projected", items("rows", "cols"), items("0", "h * cols"), valid_shape="valid")), _rounded(tile)]
        if g.norm:  # the head's norm, its result the rotary embedding's head
            inner += [Raw("".join(g.norm.text(j, s) for s in g.norm.program.body)), Assign(f"{head}_tile", g.norm.text(j, g.norm.output.value.text))]
        shared = {"cos": cos, "sin": sin}  # read once: the first group's tiles
        inner += [Assign(f"{p.name}_tile", f"{shared[g.roles[p.name]]}_tile") for p in g.rows
                  if g.roles[p.name] != "x" and p.name != shared[g.roles[p.name]]]
        inner += [Raw("".join(g.program.body)), Do(pypto("assemble", g.output.value.text, items("r", "h * cols"), f"out{j}"))]
        body += [Do(pypto("set_vec_tile_shapes", f"rope_rows{j}", f"rope_cols{j}")),
                 loop("h", f"range(heads{j})", *inner, comment="each head of the tile: the rotary embedding's steps")]
    walk = [Assign("n", f"{first}.shape[0] // blocks", "rows per block: a sequence whose angles all its batch shares, or all rows"),
            Assign("tiles", "(n + rows - 1) // rows"),
            loop("t", pypto("loop", "blocks * tiles", name='"row_tiles"', unroll_list=items("1")), *body)]
    ops = " + ".join(dict.fromkeys(op for g in groups for op in (*(g.norm.program.pypto if g.norm else ()), *g.program.pypto)))
    doc = (f"{'the prologue ' + ' + '.join(dict.fromkeys(prologue.program.pypto)) + ' of its operands, its result a; ' if prologue else ''}"
           f"a @ w0.T, a @ w1.T, a @ w2.T{' plus biases' if bias else ''} of one read of a's row tiles, "
           f"then {ops} on each head of the first {rotated} ({'its norm, then ' if norms else ''}the rotary embedding), one launch.")
    jit = pypto("frontend.jit", pass_options='{"pg_skip_partition": False, "cube_l1_reuse_setting": {-1: reuse}}')
    source = templates.factory(name, factory, doc, prelude, params, walk, jit=(jit, ""))
    return Definition(name, source, ("_cube_tiles", "_tile_shape", "_annotated", RoPE_TAKES.name))


def _rounded(tile: str) -> If:
    """An FP32 projection's ``tile`` rounded to the kernel's dtype, as torch's linear rounds."""
    return when(f"{FP32} != dtype", Assign(tile, pypto("cast", tile, "dtype")), comment="rounded as torch's linear rounds")


@dataclasses.dataclass(frozen=True)
class Deferred:
    """A region deferred into the kernel as its prologue: the function ``name`` that the wrapper
    hands its call to (its operands keywords, named as the kernel names them), the region's own
    wrapper and the parameters its call passes, in order (run where the kernel does not take them)."""

    name: str
    where: str
    prologue: Prologue
    region: str
    called: tuple[str, ...]


def definitions(wrapper: str, where: str, params: list[str], sources: tuple[str, str], roles: tuple[str, list[tuple[str, str | None]], str, str, str],
                groups: Sequence[Group], names: dict[str, str], separate: tuple[Definition, ...],
                modules: Sequence[tuple[str, str]] = (), sliced: str | None = None, deferred: Deferred | None = None) -> tuple[Definition, ...]:
    """The kernels, the fallbacks and the wrapper. ``sources``: the statements as written (torch's
    gradients) and as they translate without this kernel (``separate``: the definitions of the
    sibling projections' wrapper, the last, which it calls: operands the kernel does not take);
    ``roles``: the parameters holding x, the projections' (weight, bias), the view's shape, cos
    and sin; ``names``: each RoPE parameter's wrapper expression of its dtype (q, k: x's, or their
    norm's result's; cos, sin: theirs); ``modules``: the (norm, its class) parameters of the
    groups with a norm, in order; ``sliced``: the host expression of the three (weight, bias) pairs
    where q, k and v are slices of one projection (phi3's qkv_proj: :func:`_qkv_slices`'s call).
    With ``deferred``, the kernels that compute its region in their prologue and the function that
    launches them, in place of the wrapper's (:func:`_prologued`)."""
    x, projections, view, cos, sin = roles
    width = groups[0].width  # the angles' width where they rotate a head's first columns only
    base = wrapper.removeprefix("pypto_").rpartition("_")[0]
    fallback = wrappers.region_fallback(wrapper, where, params, sources[0], "statements")
    unfused = f"_unfused_{base.removeprefix('fused_')}"
    unfused = Definition(unfused, f'def {unfused}({", ".join(params)}):\n    """{where}: the statements as they translate without the '
                                  f'epilogue."""\n' + textwrap.indent(sources[1], "    "), (separate[-1].name,))

    def spelt(text: str) -> str:
        return re.sub(r"\b(\w+)\.dtype\b", lambda m: names.get(m.group(1), m.group(0)), text)

    symbols: dict[str, str] = {}
    for g in groups:
        for s, expr in g.program.symbols.items():
            if s != FP32:
                symbols.setdefault(s, spelt(expr))
    normed = [(j, g.norm, module) for (j, g), module in zip([(j, g) for j, g in enumerate(groups) if g.norm], modules)]
    read = {}  # the norms' vectors (their wrapper's names) and numbers by their kernel names: what the wrapper reads from the modules
    for j, norm, (module, _) in normed:
        symbols |= norm.symbols(j, module, x)
        read |= {norm.text(j, p.name): norm.host(module, x, p.name) for p in (*norm.vectors, *norm.numbers)}
    vectors = [n for j, norm, _ in normed for n in (norm.text(j, p.name) for p in norm.vectors)]
    numbers = [n for j, norm, _ in normed for n in (norm.text(j, p.name) for p in norm.numbers)]
    dtypes = [s for s in symbols if not s.startswith("promoted_dtype")]
    promoted = [s for s in symbols if s.startswith("promoted_dtype")]
    biased = any(b for _, b in projections)
    if deferred and not fits(groups, 3, deferred.prologue):
        raise Unfusible("the prologue's region names what the kernel names")
    kernel_base = deferred.name.removeprefix("pypto_").rpartition("_")[0] if deferred else base
    kernels = [_kernel(f"{kernel_base}{'_bias' if bias else ''}_kernel", groups, dtypes, promoted, numbers, bias, deferred and deferred.prologue)
               for bias in ((False, True) if biased else (False,))]
    checks = [spelt(c if width else c.replace("cols", f"{cos}.shape[-1]")) for g in groups for c in needed(g.program.checks)]
    checks += [spelt(c) for g in groups for c in g.program.dtype_checks]
    pairs = ", ".join(f"({w}, {b or 'None'})" for w, b in projections)
    takes = (f"{'len(projections) == 3 and ' if sliced else ''}all(_epilogue_takes({x}, w, b) for w, b in projections) and "
             f"_rope_takes({x}, {cos}, {sin}, {view}, *(w.shape[0] for w, _ in projections){', partial=True' if width else ''})")
    if normed:  # each norm module runs its class's forward, its vectors and numbers ones the kernel takes
        takes = (f"_inlined({', '.join(f'({m}, {c})' for _, _, (m, c) in normed)}) and {takes} and "
                 f"_norms_take({'cols' if width else f'{cos}.shape[-1]'}, ({tuple_text(read[v] for v in vectors)}), ({tuple_text(read[n] for n in numbers)}))")
    takes = " and ".join([takes, *dict.fromkeys(checks)])
    factory = (f"_PYPTO_DTYPES[{x}.dtype], k, *(w.shape[0] for w in weights), rows, cols, {width + ', ' if width else ''}blocks, row_tiles, "
               + "".join(f"_PYPTO_ALL_DTYPES[{s}], " for s in [*(symbols[d] for d in dtypes), *promoted])
               + "".join(f"float({read[n]}), " for n in numbers))
    out_dtypes = [torch_dtype(g.program, g.output.value.dtype) for g in groups] + [f"{x}.dtype"] * (3 - len(groups))
    angles = ", ".join([f"{cos}.reshape(-1, {width or 'cols'}), {sin}.reshape(-1, {width or 'cols'})", *(f"{v}.reshape(1, cols)" for v in vectors)])
    a, rows_of = "a", wrappers.ROWS.format(x=x)
    if deferred:  # the region's operands, x's rows padded to the cube's k16, in place of x's
        region = deferred.prologue
        inputs = [region.names[p.name] for p in (*region.rows, *region.vectors)]
        a, rows_of = f"{inputs[0]}_rows", "".join(f"{n}_rows = _cube_aligned({n}, k)\n" for n in inputs)
        factory += "".join(f"_PYPTO_ALL_DTYPES[{region.text(region.program.symbols.get(s) or torch_dtype(region.program, s))}], "
                           for s in region.program.symbols if s != FP32)
        factory += f"{a}.shape[1], " + "".join(f"float({region.names[p.name]}), " for p in region.numbers)
    operands = ", ".join(f"{n}_rows" for n in inputs) if deferred else "a"
    launch = f"_launch({kernels[0].name}(*factory), {operands}, *weights, {angles}, *out)\n"
    if biased:
        launch = (f"if all(b is None for _, b in projections):\n    {launch}else:\n"
                  f"    biases = [(torch.zeros(w.shape[0], dtype={x}.dtype, device={x}.device) if b is None else b).reshape(1, -1) "
                  f"for w, b in projections]\n"
                  f"    _launch({kernels[1].name}(*factory), {operands}, *weights, *biases, {angles}, *out)\n")
    body = ((f"k = {x}.shape[-1]\n" if width else f"k, cols = {x}.shape[-1], {cos}.shape[-1]\n") + rows_of
            + "weights = [_kept_contiguous(w) for w, _ in projections]\n"
            + f"blocks = {x}.shape[0] if {cos}.shape[0] != {x}.shape[0] else 1  # [1, S, D] angles: each sequence reads them\n"
            + f"rows = _cube_rows({a}.shape[0] // blocks)\n"
            + f"row_tiles = min(blocks * -(-({a}.shape[0] // blocks) // rows), _ROPE_REUSE)  # as many as set how far the kernel merges\n"
            + "".join(f"{s} = {symbols[s]}\n" for s in promoted)
            + f"factory = ({factory.rstrip(', ')})\n"
            + f"out = [torch.empty({a}.shape[0], w.shape[0], dtype=d, device={x}.device) for w, d in zip(weights, ({', '.join(out_dtypes)}))]\n"
            + launch
            + f"return tuple(o.reshape(*{x}.shape[:-1], -1).view({view}).transpose(1, 2) for o in out)\n")
    partial = (f"    {width} = {cos}.shape[-1] if isinstance({cos}, torch.Tensor) else 0  # the angles' width: each head's rotated columns\n"
               f"    cols = _head_dim({x}, {view}, projections)  # a head's\n") if width else ""
    signature = ", ".join(params)
    grads = f"_with_torch_grads(kernel_path, {fallback.name}, {signature})"
    if normed:  # the fallback reads the norms' vectors from their modules: the kernel path takes them, held
        grads = f"_with_held_grads(kernel_path, {fallback.name}, {signature}, held=({tuple_text(read[v] for v in vectors)}))"
    ops = " + ".join(dict.fromkeys(op for g in groups for op in (*(g.norm.program.pypto if g.norm else ()), *g.program.pypto)))
    doc = wrappers.docstring(
        f"{where} as one PyPTO kernel: 3 linears of one read of {x}, the {'norms and the ' if normed else ''}rotary "
        f"embedding of the first {len(groups)} in their epilogue.",
        f"Every projection of one read of each row tile of {x} on the cube (FP32 accumulation), plus its bias, rounded "
        f"as torch's linear rounds; then {ops} on each head of q's and k's tiles in torch's dtypes, rounded where torch "
        f"rounds; the results are the [B, heads, S, D] views torch gives. Operands the kernel does not take (other "
        f"shapes or dtypes, off the NPU{', a norm whose call runs more than its class forward' if normed else ''}) run {unfused.name}; autograd gets the gradients of {fallback.name}.")
    if deferred:
        return _prologued(wrapper, deferred, kernels, signature, f"    projections = {sliced or f'[{pairs}]'}\n" + partial, takes,
                          "".join(f"{v} = {read[v]}\n" for v in vectors) + body, normed, bool(width), bool(sliced))
    hook = (f"    if (deferred := _deferred_prologue({x})) is not None:  # a region before, deferred into this kernel's prologue\n"
            f"        return deferred({signature})\n")
    source = (f"def {wrapper}({signature}):\n" + doc + hook
              + f"    projections = {sliced or f'[{pairs}]'}\n" + partial
              + f"    if not ({takes}):\n        return {unfused.name}({signature})\n"
              f"\n    def kernel_path({', '.join([*params, *vectors])}):\n" + textwrap.indent(body, " " * 8)
              + f"\n    return {grads}\n")
    requires = ("_deferred_prologue", "_epilogue_takes", "_rope_takes", "_cube_tiles", "_cube_operands", "_launch", grads.partition("(")[0],
                fallback.name, unfused.name,
                *(["_inlined", "_norms_take"] if normed else []), *(["_head_dim"] if width else []), *(["_qkv_slices"] if sliced else []),
                *(k.name for k in kernels))
    return (*kernels, templates.CUBE_TILES, templates.CUBE_OPERANDS, epilogue.EPILOGUE_TAKES, RoPE_TAKES, DEFERRED_PROLOGUE,
            *([INLINED, NORMS_TAKE] if normed else []),
            *([HEAD_DIM] if width else []), *([QKV_SLICES] if sliced else []),
            *separate, fallback, unfused, Definition(wrapper, source, requires))


def _prologued(wrapper: str, deferred: Deferred, kernels: list[Definition], signature: str, head: str, takes: str, body: str, normed,
               partial: bool, sliced: bool) -> tuple[Definition, ...]:
    """The kernels and the function ``deferred.name`` that the wrapper hands its call to where x is
    the deferred region's result: it takes the wrapper's parameters, then the region's operands
    as keywords, and launches the kernel that computes the region in its prologue; operands it does
    not take run the region's wrapper, then ``wrapper`` on its result. Only grad mode off defers."""
    region = deferred.prologue
    x = signature.split(", ")[0]
    keywords = [region.names[p.name] for p in region.program.params]
    called = ", ".join(region.names.get(n, n) for n in deferred.called)
    doc = wrappers.docstring(
        f"{deferred.where} as one PyPTO kernel: the region, deferred, in the prologue of {wrapper}'s.",
        f"Each row tile of the region's operands is read once; its result, rounded where torch rounds, is the cube's row tile "
        f"of every projection, and {x} holds no values (the region's result, deferred). Operands the kernel does not take run "
        f"the region's own wrapper, then {wrapper}.")
    source = (f"def {deferred.name}({signature}, *, {', '.join(keywords)}):\n" + doc + head
              + f"    if not ({takes}):\n        {x} = {deferred.region}({called})\n        return {wrapper}({signature})\n"
              + textwrap.indent(body, "    "))
    requires = ("_epilogue_takes", "_rope_takes", "_cube_tiles", "_cube_operands", "_cube_aligned", "_launch", deferred.region, wrapper,
                *(["_inlined", "_norms_take"] if normed else []), *(["_head_dim"] if partial else []), *(["_qkv_slices"] if sliced else []),
                *(k.name for k in kernels))
    return (*kernels, CUBE_ALIGNED, Definition(deferred.name, source, requires))
