"""Projections with the rotary embedding in their epilogue: q, k and v of one read of x, q's and
k's heads rotated before they are stored, as one cube kernel.

llama's attention projects x three times, views each result as [B, heads, S, D] and rotates q
and k (``apply_rotary_pos_emb``: a grouped region of its own, a group of rows for q and one for
k). Here each row tile of x ([B * S, k]: a row is a token) is read once and multiplied by every
weight on the cube (FP32 accumulation), plus its bias, rounded to x's dtype as torch's linear
rounds; on the vector cores each D-wide head of q's and k's tile then runs the RoPE region's own
tile program (its groups' steps, dtypes and rounding points as that region's kernel has them)
against the token rows' cos and sin ([B * S, D]), and v is stored as projected. The results are
the [B, heads, S, D] views of [B, S, heads * D] rows that torch's statements give. The engine
(:mod:`torch2pypto.translator.engine.siblings`) finds the pattern and hands over the programs;
the wrapper runs the statements as written where the operands do not fit, and gives torch's
gradients of them when autograd records.
"""

from __future__ import annotations

import re
import textwrap
from typing import Sequence

from torch2pypto.rules import epilogue, templates, wrappers
from torch2pypto.rules.codegen import Definition, copied
from torch2pypto.rules.tile_program import FP32, ROWS, Output, Program, torch_dtype
from torch2pypto.rules.widths import needed

RoPE_TAKES = copied("rope", "_rope_takes", first="_CUBE_CORES")
HEADS, ANGLES = "heads", "angles"  # the wrapper's parameter kinds of the heads' view shape and of cos and sin
# the kernel's own names, which a RoPE program's statements must not assign
_OWN = {"a", "a_tile", "n", "o", "t", "tiles", "blocks", "r", "i", "h", "valid", "rows", "cols", "k", "k16", "dtype", "projected", "kernel", "row_tiles", "cube_tasks", "reuse"}


class Group:
    """One rotated projection: the RoPE group's program and output, and the role of each of its
    rows operands (``x``: the projection's head, ``cos``, ``sin``)."""

    def __init__(self, program: Program, output: Output, roles: dict[str, str]) -> None:
        self.program, self.output, self.roles = program, output, roles
        self.rows = [p for p in program.params if p.kind == ROWS]

    def names(self) -> set[str]:
        """What the group's statements assign, its operands' tiles, cos and sin (kernel parameters), and its dtypes."""
        assigned = {m.group(1) for s in self.program.body for m in re.finditer(r"^\s*(\w+) = ", s, re.M)}
        angles = {p.name for p in self.rows if self.roles[p.name] != "x"}
        return assigned | {f"{p.name}_tile" for p in self.rows} | angles | set(self.program.symbols)


def fits(groups: Sequence[Group], count: int) -> bool:
    """Whether the groups name nothing the kernel names itself."""
    own = _OWN | {f"{b}{j}{s}" for j in range(count) for b in ("w", "b", "out") for s in ("", "_tile")}
    own |= {f"{b}{j}" for j in range(count) for b in ("n", "k_tiles", "n_tiles", "vec_rows", "vec_cols", "heads", "rope_rows", "rope_cols")}
    own |= {f"n{j}_16" for j in range(count)}
    return not any(g.names() & own for g in groups)


def _kernel(name: str, groups: Sequence[Group], dtypes: list[str], promoted: list[str], bias: bool) -> Definition:
    count = 3
    rotated = len(groups)
    cos, sin = (next(p.name for p in groups[0].rows if groups[0].roles[p.name] == role) for role in ("cos", "sin"))
    factory = ["dtype", "k", "n0", "n1", "n2", "rows", "cols", "blocks", "row_tiles", *dtypes, *promoted]
    prelude = "k16 = -(-k // 16) * 16  # the cube's 32-byte aligned tiles over the real k and each n\n"
    for j in range(count):
        prelude += (f"n{j}_16 = -(-n{j} // 16) * 16\nk_tiles{j}, n_tiles{j} = _cube_tiles(k16, n{j}_16, dtype, rows)\n"
                    f"vec_rows{j}, vec_cols{j} = _tile_shape(n{j}_16, rows, 3, (pypto.DT_FP32,))\n")
    for j, g in enumerate(groups):
        buffers = g.program.buffers([f"{p.name}_tile" for p in g.rows], [g.output.value.text])
        tile_dtypes = ", ".join([*dtypes, *promoted, FP32])
        prelude += "".join(s for s in dict.fromkeys(g.program.setup) if s)
        prelude += (f"rope_rows{j}, rope_cols{j} = _tile_shape(cols, rows, {buffers}, ({tile_dtypes}), split_cols=True)\n"
                    f"rope_cols{j} = -(-rope_cols{j} // 32) * 32  # tiles' last dim spans 32-byte blocks\n"
                    f"heads{j} = n{j} // cols\n")
    prelude += ("cube_tasks = row_tiles * sum(-(-n // t[0]) for n, t in ((n0_16, n_tiles0), (n1_16, n_tiles1), (n2_16, n_tiles2)))\n"
                "reuse = max(1, min(_ROPE_REUSE, cube_tasks // _CUBE_CORES))  # cube tasks of one a tile merged: as many as leave each core one\n")
    params = "a: pypto.Tensor([pypto.DYNAMIC, k], dtype),\n"
    params += "".join(f"w{j}: pypto.Tensor([n{j}, k], dtype),\n" for j in range(count))
    params += "".join(f"b{j}: pypto.Tensor([1, n{j}], dtype),\n" for j in range(count)) if bias else ""
    symbol = {p.name: groups[0].program.dtype_symbol(p) for p in groups[0].rows}
    params += "".join(f"{p}: pypto.Tensor([pypto.DYNAMIC, cols], {symbol[p]}),\n" for p in (cos, sin))
    outs = [g.output.value.dtype for g in groups] + ["dtype"] * (count - rotated)
    params += "".join(f"out{j}: pypto.Tensor([pypto.DYNAMIC, n{j}], {d}),\n" for j, d in enumerate(outs))
    body = ("o, i = t // tiles, t % tiles\nr = o * n + i * rows\nvalid = [(n - i * rows).min(rows), cols]\n"
            "a_tile = pypto.view(a, [rows, k16], [r, 0], valid_shape=[valid[0], k])\n"
            + "".join(f"{p}_tile = pypto.view({p}, [rows, cols], [r if blocks == 1 else i * rows, 0], valid_shape=valid)  # the tokens' angles\n"
                      for p in (cos, sin)))
    for j in range(count):
        body += (f"pypto.set_cube_tile_shapes([rows, rows], k_tiles{j}, n_tiles{j})\n"
                 f"w{j}_tile = pypto.view(w{j}, [n{j}_16, k16], [0, 0], valid_shape=[n{j}, k])\n"
                 f"projected = pypto.matmul(a_tile, w{j}_tile, pypto.DT_FP32, b_trans=True)\n"
                 f"pypto.set_vec_tile_shapes(vec_rows{j}, vec_cols{j})\n")
        if bias:
            body += (f"b{j}_tile = pypto.view(b{j}, [1, n{j}_16], [0, 0], valid_shape=[1, n{j}])\n"
                     f"if dtype != pypto.DT_FP32:\n    b{j}_tile = pypto.cast(b{j}_tile, pypto.DT_FP32)\n"
                     "projected = pypto.add(projected, b" + str(j) + "_tile)\n")
        rounded = "if pypto.DT_FP32 != dtype:  # rounded as torch's linear rounds\n    {0} = pypto.cast({0}, dtype)\n"
        if j >= rotated:
            body += rounded.format("projected") + f"pypto.assemble(projected, [r, 0], out{j})\n"
            continue
        g = groups[j]
        head = next(p.name for p in g.rows if g.roles[p.name] == "x")
        # each head rounded on its own: a head's RoPE waits for its columns' cube tasks only
        inner = f"{head}_tile = pypto.view(projected, [rows, cols], [0, h * cols], valid_shape=valid)\n" + rounded.format(f"{head}_tile")
        shared = {"cos": cos, "sin": sin}  # read once: the first group's tiles
        inner += "".join(f"{p.name}_tile = {shared[g.roles[p.name]]}_tile\n" for p in g.rows
                         if g.roles[p.name] != "x" and p.name != shared[g.roles[p.name]])
        inner += "".join(g.program.body) + f"pypto.assemble({g.output.value.text}, [r, h * cols], out{j})\n"
        body += (f"pypto.set_vec_tile_shapes(rope_rows{j}, rope_cols{j})\n"
                 f"for h in range(heads{j}):  # each head of the tile: the rotary embedding's steps\n" + textwrap.indent(inner, "    "))
    loop = ("n = a.shape[0] // blocks  # rows per block: a sequence whose angles all its batch shares, or all rows\n"
            "tiles = (n + rows - 1) // rows\n"
            'for t in pypto.loop(blocks * tiles, name="row_tiles", unroll_list=[1]):\n' + textwrap.indent(body, "    "))
    ops = " + ".join(dict.fromkeys(op for g in groups for op in g.program.pypto))
    doc = (f"a @ w0.T, a @ w1.T, a @ w2.T{' plus biases' if bias else ''} of one read of a's row tiles, "
           f"then {ops} on each head of the first {rotated} (the rotary embedding), one launch.")
    jit = '@pypto.frontend.jit(pass_options={"pg_skip_partition": False, "cube_l1_reuse_setting": {-1: reuse}})'
    source = templates.kernel_factory(name, ", ".join(factory), doc, prelude, textwrap.indent(params, " " * 8),
                                      textwrap.indent(loop, " " * 8), jit=jit)
    return Definition(name, source.replace("\n\n\n", "\n\n"), ("_cube_tiles", "_tile_shape", "_annotated", RoPE_TAKES.name))


def definitions(wrapper: str, where: str, params: list[str], sources: tuple[str, str], roles: tuple[str, list[tuple[str, str | None]], str, str, str],
                groups: Sequence[Group], names: dict[str, str], separate: tuple[Definition, ...]) -> tuple[Definition, ...]:
    """The kernels, the fallbacks and the wrapper. ``sources``: the statements as written (torch's
    gradients) and as they translate without this kernel (``separate``: the definitions of the
    sibling projections' wrapper, the last, which it calls: operands the kernel does not take);
    ``roles``: the parameters holding x, the projections' (weight, bias), the view's shape, cos
    and sin; ``names``: each RoPE parameter's wrapper expression of its dtype's tensor (q, k: x;
    cos, sin: theirs)."""
    x, projections, view, cos, sin = roles
    base = wrapper.removeprefix("pypto_").rpartition("_")[0]
    fallback = wrappers.region_fallback(wrapper, where, params, sources[0], "statements")
    unfused = f"_unfused_{base.removeprefix('fused_')}"
    unfused = Definition(unfused, f'def {unfused}({", ".join(params)}):\n    """{where}: the statements as they translate without the '
                                  f'epilogue."""\n' + textwrap.indent(sources[1], "    "), (separate[-1].name,))

    def spelt(text: str) -> str:
        return re.sub(r"\b(\w+)\.dtype\b", lambda m: f"{names.get(m.group(1), m.group(1))}.dtype", text)

    symbols: dict[str, str] = {}
    for g in groups:
        for s, expr in g.program.symbols.items():
            if s != FP32:
                symbols.setdefault(s, spelt(expr))
    dtypes = [s for s in symbols if not s.startswith("promoted_dtype")]
    promoted = [s for s in symbols if s.startswith("promoted_dtype")]
    biased = any(b for _, b in projections)
    kernels = [_kernel(f"{base}{'_bias' if bias else ''}_kernel", groups, dtypes, promoted, bias) for bias in ((False, True) if biased else (False,))]
    checks = [spelt(c.replace("cols", f"{cos}.shape[-1]")) for g in groups for c in needed(g.program.checks)]
    checks += [spelt(c) for g in groups for c in g.program.dtype_checks]
    pairs = ", ".join(f"({w}, {b or 'None'})" for w, b in projections)
    takes = (f"all(_epilogue_takes({x}, w, b) for w, b in projections) and "
             f"_rope_takes({x}, {cos}, {sin}, {view}, *(w.shape[0] for w, _ in projections))")
    takes = " and ".join([takes, *dict.fromkeys(checks)])
    factory = (f"_PYPTO_DTYPES[{x}.dtype], k, *(w.shape[0] for w in weights), rows, cols, blocks, row_tiles, "
               + "".join(f"_PYPTO_ALL_DTYPES[{s}], " for s in [*(symbols[d] for d in dtypes), *promoted]))
    out_dtypes = [torch_dtype(g.program, g.output.value.dtype) for g in groups] + [f"{x}.dtype"] * (3 - len(groups))
    angles = f"{cos}.reshape(-1, cols), {sin}.reshape(-1, cols)"
    launch = f"_launch({kernels[0].name}(*factory), a, *weights, {angles}, *out)\n"
    if biased:
        launch = (f"if all(b is None for _, b in projections):\n    {launch}else:\n"
                  f"    biases = [(torch.zeros(w.shape[0], dtype={x}.dtype, device={x}.device) if b is None else b).reshape(1, -1) "
                  f"for w, b in projections]\n"
                  f"    _launch({kernels[1].name}(*factory), a, *weights, *biases, {angles}, *out)\n")
    body = (f"k, cols = {x}.shape[-1], {cos}.shape[-1]\n" + wrappers.ROWS.format(x=x)
            + "weights = [_kept_contiguous(w) for w, _ in projections]\n"
            + f"blocks = {x}.shape[0] if {cos}.shape[0] != {x}.shape[0] else 1  # [1, S, D] angles: each sequence reads them\n"
            + "rows = _cube_rows(a.shape[0] // blocks)\n"
            + "row_tiles = min(blocks * -(-(a.shape[0] // blocks) // rows), _ROPE_REUSE)  # as many as set how far the kernel merges\n"
            + "".join(f"{s} = {symbols[s]}\n" for s in promoted)
            + f"factory = ({factory.rstrip(', ')})\n"
            + f"out = [torch.empty(a.shape[0], w.shape[0], dtype=d, device={x}.device) for w, d in zip(weights, ({', '.join(out_dtypes)}))]\n"
            + launch
            + f"return tuple(o.reshape(*{x}.shape[:-1], -1).view({view}).transpose(1, 2) for o in out)\n")
    signature = ", ".join(params)
    ops = " + ".join(dict.fromkeys(op for g in groups for op in g.program.pypto))
    doc = wrappers.docstring(
        f"{where} as one PyPTO kernel: 3 linears of one read of {x}, the rotary embedding of the first "
        f"{len(groups)} in their epilogue.",
        f"Every projection of one read of each row tile of {x} on the cube (FP32 accumulation), plus its bias, rounded "
        f"as torch's linear rounds; then {ops} on each head of q's and k's tiles in torch's dtypes, rounded where torch "
        f"rounds; the results are the [B, heads, S, D] views torch gives. Operands the kernel does not take (other "
        f"shapes or dtypes, off the NPU) run {unfused.name}; autograd gets the gradients of {fallback.name}.")
    source = (f"def {wrapper}({signature}):\n" + doc
              + f"    projections = [{pairs}]\n"
              f"    if not ({takes}):\n        return {unfused.name}({signature})\n"
              f"\n    def kernel_path({signature}):\n" + textwrap.indent(body, " " * 8)
              + f"\n    return _with_torch_grads(kernel_path, {fallback.name}, {signature})\n")
    requires = ("_epilogue_takes", "_rope_takes", "_cube_tiles", "_cube_operands", "_launch", "_with_torch_grads", fallback.name, unfused.name,
                *(k.name for k in kernels))
    return (*kernels, templates.CUBE_TILES, templates.CUBE_OPERANDS, epilogue.EPILOGUE_TAKES, RoPE_TAKES, *separate, fallback, unfused,
            Definition(wrapper, source, requires))
