"""A row region as the epilogue of a linear: gemma3's post-feedforward RMSNorm and residual add
after its MLP's down projection.

``h = self.mlp(h); h = self.post_feedforward_layernorm(h); h = residual + h`` (the MLP's forward
a gated pair and a linear, the pair run as the prologue of the region before it, :mod:`prologue`)
runs the linear's kernel, then the region's. Here each row tile of the linear's input is
multiplied by the whole weight on the cube (FP32 accumulation) and rounded where torch's linear
rounds its result; that tile, whole rows of the result, is the region's operand, and the region's
tile steps (its program, as its own kernel composes them: the norm's row reduction over the
tile's rows) run on the vector cores before its results are stored. One launch for two. The
wrapper runs the linear's and the region's own wrappers where the kernel does not take the
operands (a bias, other shapes or dtypes, off the NPU, a norm whose call runs more than its
class's forward), and gives torch's gradients of the statements when autograd records.
"""

from __future__ import annotations

import re
import textwrap

from torch2pypto.rules import epilogue, templates, wrappers
from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.fusion import INLINED, FUSED_SHAPE, tuple_text
from torch2pypto.rules.kernel_ir import Assign, Do, Raw, call, items, pypto, when
from torch2pypto.rules.prologue import CUBE_ALIGNED
from torch2pypto.rules.tile_program import (FP32, ROWS, VECTOR, Output, Program, Unfusible, row_tile_loop, row_tile_params, row_tile_steps,
                                            row_tile_stores, torch_dtype)
from torch2pypto.rules.widths import needed

_OWN = {"a", "w", "a_tile", "w_tile", "projected", "m", "i", "r", "valid", "rows", "tile_cols", "k", "k16", "n", "width", "cols", "count",
        "k_tiles", "n_tiles", "dtype", "max_rows", "kernel"}  # the kernel's own names


def kernel_name(region: str) -> str:
    return f"{region.removeprefix('pypto_').rpartition('_')[0]}_linear_kernel"


def definitions(name: str, where: str, region: str, program: Program, outputs: tuple[Output, ...], x: str,
                linear: str) -> tuple[Definition, ...]:
    """The kernel factory, the torch fallback and the wrapper ``name`` of the region (its wrapper
    ``region``, program and outputs) as the epilogue of a linear whose result is its rows operand
    ``x``; ``linear``: the linear's own wrapper (``pypto_linear``). The wrapper takes the linear's
    input, weight and bias, then the region's parameters but ``x``, and returns the region's results."""
    params = {p.name: p for p in program.params}
    if x not in params or params[x].kind != ROWS or x in program.derived or program.narrow() or program.indices or program.whole \
            or program.aliases or any(p.kind not in (ROWS, VECTOR, "number", "class", "module") and p.name not in program.derived
                                      for p in program.params):
        raise Unfusible("a linear's epilogue takes a region of its result's rows, rows, vectors and numbers")
    if any(o.value.role != ROWS for o in outputs):
        raise Unfusible("a linear's epilogue stores rows")
    called = [p.name for p in program.params if p.name not in program.derived]
    taken = set(called) | set(program.derived) | {o.name for o in outputs}
    inp, weight, bias = (_free(f"linear_{n}", taken) for n in ("input", "weight", "bias"))
    own = [n for n in called if n != x]
    torch_args = [p.name for p in program.params if p.name not in program.derived and p.kind != "class"]
    base = name.removeprefix("pypto_").rpartition("_")[0]
    region_fallback = f"_torch_{region.removeprefix('pypto_').rpartition('_')[0]}"
    signature = [inp, weight, bias, *(n for n in torch_args if n != x)]  # the class parameters only the guard reads
    fallback = Definition(f"_torch_{base}", (
        f"def _torch_{base}({', '.join(signature)}):\n"
        f'    """{where}: the original torch statements."""\n'
        f"    {x} = torch.nn.functional.linear({inp}, {weight}, {bias})\n"
        f"    return {region_fallback}({', '.join(torch_args)})\n"), (region_fallback,))
    kernel = _kernel(kernel_name(region), where, program, x, outputs)
    rows = [p for p in program.params if p.kind == ROWS]
    vectors = [p for p in program.params if p.kind == VECTOR]
    numbers = [p for p in program.params if p.kind == "number"]
    modules = ", ".join(f"({m}, {c})" for m, c in program.modules)
    read = "".join(f"{p} = {value}\n" for p, value in program.derived.items())
    results = ", ".join(f"({tuple_text(p.name for p in rows)})" for _ in outputs)
    guard = " and ".join(["shape is not None", f"shape == {x}.shape", *(c.replace("cols", "shape[-1]") for c in needed(program.checks)),
                          *dict.fromkeys(program.dtype_checks)])
    stand_in = (f"{x} = {inp}.new_empty(()).expand(*{inp}.shape[:-1], {weight}.shape[0])  # the linear's result as the region "
                "reads it: its shape, dtype and device\n")
    takes = [*([f"_inlined({modules})"] if modules else []), f"{bias} is None", f"_epilogue_takes({inp}, {weight}, None)"]
    separate = (f"{x} = {linear}({inp}, {weight}, bias={bias})\n"
                f"return {region}({', '.join(called)})\n")

    def host(text: str) -> str:  # a dtype of x read from the linear's input, the result's dtype
        return re.sub(rf"\b{x}\.dtype\b", f"{inp}.dtype", text)

    body = f"n, k = {weight}.shape\na = {inp}.reshape(-1, k).contiguous()  # leading dims fold into rows: a view of a contiguous input\n"
    body += f"shape = (*{inp}.shape[:-1], n)\n"
    body += "".join(f"{p.name}_rows = _cube_aligned({p.name}.expand(shape), n)\n" for p in rows if p.name != x)
    body += "".join(f"{p.name}_rows = _cube_aligned({p.name}, n)\n" for p in vectors)
    body += "".join(f"{s} = {host(program.symbols[s])}\n" for s in program.symbols if s.startswith("promoted_dtype"))
    body += "".join(f"{o.name}_out = torch.empty(a.shape[0], n, dtype={host(torch_dtype(program, o.value.dtype))}, device={inp}.device)\n"
                    for o in outputs)
    dtypes = [s for s in program.symbols if s != FP32 and not s.startswith("promoted_dtype")]
    args = [f"_PYPTO_DTYPES[{inp}.dtype]", *(f"_PYPTO_ALL_DTYPES[{host(program.symbols[s])}]" for s in dtypes),
            *(f"_PYPTO_ALL_DTYPES[{s}]" for s in program.symbols if s.startswith("promoted_dtype")),
            "k", "n", *(f"float({p.name})" for p in numbers), "_cube_rows(a.shape[0])"]
    launched = ["a", f"_kept_contiguous({weight})", *(f"{p.name}_rows" for p in (*rows, *vectors) if p.name != x),
                *(f"{o.name}_out" for o in outputs)]
    body += f"_launch({kernel.name}({', '.join(args)}), {', '.join(launched)})\n"
    body += f"return {', '.join(f'{o.name}_out.reshape(shape)' for o in outputs)}\n"
    held = list(program.derived)
    doc = wrappers.docstring(
        f"{where} as one PyPTO kernel: a linear, then {', '.join(program.ops)} of its result in the epilogue.",
        f"Each row tile of {inp} is multiplied by the whole {weight} on the cube (FP32 accumulation) and rounded where "
        f"torch's linear rounds; then {' + '.join(dict.fromkeys(program.pypto))} on its whole rows on the vector cores, "
        f"rounded where torch rounds. A bias, a norm or a submodule whose call runs more than its class's forward and "
        f"operands the kernel does not take (other shapes or dtypes, off the NPU) run {linear} and {region}.")
    text = (
        f"def {name}({', '.join([inp, weight, bias, *own])}):\n" + doc + "    shape = None\n"
        f"    if {' and '.join(takes)}:\n" + textwrap.indent(read + stand_in, " " * 8)
        + f"        shape = _fused_shape(({tuple_text(p.name for p in rows)}), ({tuple_text(p.name for p in vectors)}), "
        f"numbers=({tuple_text(p.name for p in numbers)}), results=({results},))\n"
        + f"    if not ({guard}):\n" + textwrap.indent(separate, " " * 8)
        + f"\n    def kernel_path({', '.join([*signature, *held])}):\n" + textwrap.indent(body, " " * 8)
        + f"\n    return _with_held_grads(kernel_path, {fallback.name}, {', '.join(signature)}, held=({tuple_text(held)}))\n")
    requires = ("_inlined", "_fused_shape", "_epilogue_takes", "_cube_aligned", "_cube_tiles", "_cube_operands", "_launch",
                "_with_held_grads", kernel.name, fallback.name, region, linear)
    return (INLINED, FUSED_SHAPE, CUBE_ALIGNED, epilogue.EPILOGUE_TAKES, templates.CUBE_TILES, templates.CUBE_OPERANDS, kernel, fallback,
            Definition(name, text, requires))


def _free(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name


def _kernel(name: str, where: str, program: Program, x: str, outputs: tuple[Output, ...]) -> Definition:
    """The factory: per row tile of ``max_rows`` rows (the cube's), a's tile times the whole
    weight on the cube, rounded, as the region's ``x`` tile; the region's steps on the vector cores
    over whole rows; its outputs assembled."""
    rows = [p for p in program.params if p.kind == ROWS and p.name != x]
    vectors = [p for p in program.params if p.kind == VECTOR]
    numbers = [p for p in program.params if p.kind == "number"]
    if {*(p.name for p in program.params), *(f"{p.name}_tile" for p in program.params)} & _OWN:
        raise Unfusible("the region names what the kernel names")
    dtypes = [s for s in program.symbols if s != FP32 and not s.startswith("promoted_dtype")]
    promoted = [s for s in program.symbols if s.startswith("promoted_dtype")]
    factory = ["dtype", *dtypes, *promoted, "k", "n", *(p.name for p in numbers), "max_rows"]
    buffers = program.buffers([f"{p.name}_tile" for p in program.params if p.kind == ROWS], [o.value.text for o in outputs])
    prelude = [
        Assign("k16, width", "-(-k // 16) * 16, -(-n // 16) * 16", "the cube's 32-byte aligned tiles over the real k and n"),
        Assign("k_tiles, n_tiles", call("_cube_tiles", "k16", "width", "dtype", "max_rows")),
        Assign("rows, tile_cols", call("_tile_shape", "width", "max_rows", str(buffers), f"({', '.join([*dtypes, *promoted, FP32])})",
                                       whole_rows="True"), "the region's tiles"),
        Assign("cols", "n", "the region's real cols"),
        Assign("count", "cols", "the real cols a row reduction counts"),
        Raw("".join(s for s in dict.fromkeys(program.setup) if s)),
    ]
    params = [templates.tensor("a", items("pypto.DYNAMIC", "k"), "dtype"), templates.tensor("w", items("n", "k"), "dtype"),
              *row_tile_params(program, rows, vectors),
              *(templates.tensor(f"{o.name}_out", items("pypto.DYNAMIC", "cols"), o.value.dtype) for o in outputs)]
    body = [
        Do(pypto("set_cube_tile_shapes", items("max_rows", "max_rows"), "k_tiles", "n_tiles")),
        Assign("a_tile", pypto("view", "a", items("max_rows", "k16"), items("r", "0"), valid_shape=items("valid[0]", "k"))),
        Assign("w_tile", pypto("view", "w", items("width", "k16"), items("0", "0"), valid_shape=items("n", "k"))),
        Assign("projected", pypto("matmul", "a_tile", "w_tile", FP32, b_trans="True")),
        Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")),
        Assign(f"{x}_tile", pypto("view", "projected", items("max_rows", "width"), items("0", "0"), valid_shape="valid"),
               "the linear's result: the region's rows"),
        when(f"dtype != {FP32}", Assign(f"{x}_tile", pypto("cast", f"{x}_tile", "dtype")), comment="rounded as torch's linear rounds"),
        *row_tile_steps(program, rows, vectors),
        *row_tile_stores(outputs),
    ]
    doc = (f"{where}: a @ w.T on the cube, rounded to a's dtype, then {' + '.join(dict.fromkeys(program.pypto))} of it on the "
           "vector cores, per row tile of whole rows, one launch.")
    text = templates.factory(name, factory, doc, prelude, params, row_tile_loop("a", *body), jit=(templates.CUBE[0], ""))
    return Definition(name, text, ("_cube_tiles", "_tile_shape", "_annotated"))
