"""A row region as the prologue of a gated pair's cube kernel: llama's residual add and
post-attention RMSNorm, then its MLP.

``h = residual + h; residual = h; h = self.norm(h)`` then ``h = self.mlp(h); h = residual + h``
(the MLP's forward a gated pair and a linear, :mod:`epilogue`) runs three kernels: the region,
the gated pair and the linear with the residual add in its epilogue. Here the region's tile
steps (its program, as its own kernel composes them) run on the vector cores of the gated
kernel for each row tile it reads: the tile its result leaves is the cube's row tile of both
projections, the region's other result (the sum, the residual) is stored as in the region's
kernel. Two launches: this kernel and the linear's. The wrapper falls back to the region's and
the gated pair's own wrappers for what the kernel does not take (biases, an activation of no
gated kernel, other shapes or dtypes), and the outer wrapper to the two calls as written where
the MLP's call would run more than its class's forward.
"""

from __future__ import annotations

import dataclasses
import textwrap

from torch2pypto.rules import epilogue, gated, templates, wrappers
from torch2pypto.rules.codegen import Definition, copied, filled
from torch2pypto.rules.fusion import INLINED, FUSED_SHAPE, tuple_text
from torch2pypto.rules.kernel_ir import Assign, Do, Raw, call, items, pypto, when
from torch2pypto.rules.tile_program import (FP32, ROWS, VECTOR, Output, Program, Unfusible, row_tile_loop, row_tile_params, row_tile_steps,
                                            row_tile_stores, torch_dtype)
from torch2pypto.rules.widths import needed

CUBE_ALIGNED = copied("layout", "_cube_aligned")
GATED_WEIGHTS = copied("gated", "_gated_weights")


@dataclasses.dataclass(frozen=True)
class Region:
    """The region: its wrapper, program and outputs (``x`` the one the gated pair projects, the
    other the residual), the parameters its call passes and the torch fallback's."""

    wrapper: str
    program: Program
    outputs: tuple[Output, ...]
    x: str


@dataclasses.dataclass(frozen=True)
class Pair:
    """The gated pair the MLP's forward makes: its wrapper, its parameters (``x`` among them), the
    activation's parameter (None: a function's) and its kind if static, the weights' and biases',
    and where they are the halves of one projection's (phi3's), its weight and bias parameters."""

    wrapper: str
    params: tuple[str, ...]
    x: str
    act: str | None
    activation: str | None
    weights: tuple[str, str]
    biases: tuple[str | None, str | None]
    halves: tuple[str, str | None] | None = None


def kernel_name(region: str) -> str:
    return f"{region.removeprefix('pypto_').rpartition('_')[0]}_gated_kernel"


def definitions(name: str, where: str, region: Region, pair: Pair) -> tuple[Definition, ...]:
    """The kernel factory, the torch fallback and the wrapper ``name`` of the region as the
    prologue of the gated pair; the wrapper takes the region's parameters and the pair's but
    ``x``, and returns the gated product and the residual."""
    program = region.program
    if not program.reduces or program.narrow() or any(p.kind not in (ROWS, VECTOR, "number", "class", "module") and p.name not in program.derived
                                                       for p in program.params):
        raise Unfusible("a prologue takes a row reduction's region of rows, vectors and numbers")
    x = next(o for o in region.outputs if o.name == region.x)
    stored = [o for o in region.outputs if o is not x]
    if len(stored) != 1 or any(o.value.role != ROWS for o in region.outputs):
        raise Unfusible("a prologue stores one residual")
    names = [p.name for p in program.params]
    own = [p for p in pair.params if p != pair.x]
    if set(names) & set(own) or "activation" in names:
        raise Unfusible("the region's and the pair's parameters share a name")
    kernel = _kernel(kernel_name(region.wrapper), where, program, x, stored[0], pair.activation)
    base = name.removeprefix("pypto_").rpartition("_")[0]
    called = [p.name for p in program.params if p.name not in program.derived]
    torch_args = [p.name for p in program.params if p.name not in program.derived and p.kind != "class"]
    region_fallback = f"_torch_{region.wrapper.removeprefix('pypto_').rpartition('_')[0]}"
    pair_fallback = f"_torch_{pair.wrapper.removeprefix('pypto_').rpartition('_')[0]}"
    outputs = ", ".join(o.name for o in region.outputs)
    pair_args = ", ".join(region.x if p == pair.x else p for p in pair.params)
    fallback = Definition(f"_torch_{base}", (
        f"def _torch_{base}({', '.join([*torch_args, *own])}):\n"
        f'    """{where}: the original torch statements."""\n'
        f"    {outputs} = {region_fallback}({', '.join(torch_args)})\n"
        f"    return {pair_fallback}({pair_args}), {stored[0].name}\n"), (region_fallback, pair_fallback))
    separate = (f"{outputs} = {region.wrapper}({', '.join(called)})\n"
                f"return {pair.wrapper}({pair_args}), {stored[0].name}\n")
    (wg, wu), (bg, bu) = pair.weights, pair.biases
    activation = f'"{pair.activation}"' if pair.activation else f"_activation_kind({pair.act})"
    takes = [f"{b} is None" for b in (bg, bu) if b]
    rows = [p for p in program.params if p.kind == ROWS]
    vectors = [p for p in program.params if p.kind == VECTOR]
    numbers = [p for p in program.params if p.kind == "number"]
    fits = (f"_fused_shape(({tuple_text(p.name for p in rows)}), ({tuple_text(p.name for p in vectors)}), "
            f"numbers=({tuple_text(p.name for p in numbers)}), results=({', '.join(f'({tuple_text(p.name for p in rows)})' for _ in region.outputs)},))")
    modules = ", ".join(f"({m}, {c})" for m, c in program.modules)
    read = "".join(f"    {p} = {value}\n" for p, value in program.derived.items())
    dtype = _host(program, x.value.dtype)
    guard = " and ".join(["shape is not None", *(c.replace("cols", "shape[-1]") for c in needed(program.checks)),
                          *dict.fromkeys(program.dtype_checks), f"_gated_weights({dtype}, shape[-1], {wg}, {wu})"])
    split = ""
    if pair.halves is not None:  # views of the one weight (and bias), taken on each call: no copy
        split = f"{wg}, {wu} = _halves({pair.halves[0]})\n" + (f"{bg}, {bu} = _halves({pair.halves[1]})\n" if pair.halves[1] else "")
    body = split + "cols = shape[-1]\n"
    body += "".join(f"{p.name}_rows = _cube_aligned({p.name if len(rows) == 1 else f'{p.name}.expand(shape)'}, cols)\n" for p in rows)
    body += "".join(f"{p.name}_rows = _cube_aligned({p.name}, cols)\n" for p in vectors)
    body += "".join(f"{s} = {program.symbols[s]}\n" for s in program.symbols if s.startswith("promoted_dtype"))
    first = f"{rows[0].name}_rows"
    body += f"n = {wg}.shape[0]\n"
    body += f"out = torch.empty({first}.shape[0], n, dtype={torch_dtype(program, x.value.dtype)}, device={rows[0].name}.device)\n"
    body += f"{stored[0].name}_out = torch.empty({first}.shape[0], cols, dtype={torch_dtype(program, stored[0].value.dtype)}, device={rows[0].name}.device)\n"
    dtypes = [s for s in program.symbols if s != FP32 and not s.startswith("promoted_dtype")]
    args = [*(f"_PYPTO_ALL_DTYPES[{program.symbols[s]}]" for s in dtypes),
            *(f"_PYPTO_ALL_DTYPES[{s}]" for s in program.symbols if s.startswith("promoted_dtype")),
            "cols", f"{first}.shape[1]", *(f"float({p.name})" for p in numbers), *([] if pair.activation else ["activation"]),
            "n", f"_cube_rows({first}.shape[0])"]
    launched = [*(f"{p.name}_rows" for p in (*rows, *vectors)), f"_kept_contiguous({wg})", f"_kept_contiguous({wu})", "out", f"{stored[0].name}_out"]
    body += f"_launch({kernel.name}({', '.join(args)}), {', '.join(launched)})\n"
    body += f"return out.reshape(*shape[:-1], n), {stored[0].name}_out.reshape(shape)\n"
    signature = [*torch_args, *own]
    held = list(program.derived)
    doc = wrappers.docstring(
        f"{where} as one PyPTO kernel: {', '.join(program.ops)} on the vector cores, then the gated pair "
        f"{pair.wrapper} of its {region.x} on the cube.",
        f"Each row tile of the region's rows is read once; its {region.x} tile, rounded where torch rounds, is the cube's "
        f"row tile of both projections and {stored[0].name} is stored. A norm or a submodule whose call runs more than its "
        f"class's forward, biases, an activation of no gated kernel and operands the kernel does not take (other shapes or "
        f"dtypes, off the NPU) run the region's and the pair's own wrappers.")
    text = (
        f'def {name}({", ".join([*called, *own])}):\n' + doc
        + textwrap.indent(split, "    ") + f"    activation = {activation}\n    shape = None\n"
        f"    if {' and '.join([f'_inlined({modules})' if modules else 'True', 'activation is not None', *takes])}:\n"
        + textwrap.indent(read, "    ") + f"        shape = {fits}\n"
        + f"    if not ({guard}):\n" + textwrap.indent(separate, "        ")
        + f"\n    def kernel_path({', '.join([*signature, *held])}):\n" + textwrap.indent(body, " " * 8)
        + f"\n    return _with_held_grads(kernel_path, {fallback.name}, {', '.join(signature)}, held=({tuple_text(held)}))\n"
    )
    requires = ("_inlined", "_fused_shape", "_gated_weights", "_cube_aligned", "_cube_tiles", "_cube_operands", "_launch",
                "_with_held_grads", "_activation_kind", kernel.name, fallback.name, region.wrapper, pair.wrapper,
                *(["_halves"] if split else []))
    return (INLINED, FUSED_SHAPE, CUBE_ALIGNED, GATED_WEIGHTS, gated.ACTIVATION_KIND, templates.CUBE_TILES, templates.CUBE_OPERANDS,
            *([gated.HALVES] if split else []), kernel, fallback, Definition(name, text, requires))


def _host(program: Program, symbol: str) -> str:
    """A kernel dtype symbol's torch dtype on the host, before the kernel path binds the promoted ones."""
    return program.symbols.get(symbol) or torch_dtype(program, symbol)


def _kernel(name: str, where: str, program: Program, x: Output, stored: Output, activation: str | None) -> Definition:
    """The factory: per row tile of ``max_rows`` rows (the cube's), the region's steps on the
    vector cores over whole rows, ``stored`` assembled, ``x``'s tile the gated pair's ``a_tile``."""
    rows = [p for p in program.params if p.kind == ROWS]
    vectors = [p for p in program.params if p.kind == VECTOR]
    numbers = [p for p in program.params if p.kind == "number"]
    dtypes = [s for s in program.symbols if s != FP32 and not s.startswith("promoted_dtype")]
    promoted = [s for s in program.symbols if s.startswith("promoted_dtype")]
    factory = [*dtypes, *promoted, "cols", "width", *(p.name for p in numbers), *([] if activation else ["activation"]), "n", "max_rows"]
    if activation:
        chosen = list(gated.activation(activation, "gate"))
    else:
        chosen = [when(f'activation == "{a}"', *gated.activation(a, "gate")) for a in gated.ACTIVATIONS]
    setup, tail = templates.gated_tail(chosen, bias=False)
    buffers = program.buffers([f"{p.name}_tile" for p in rows], [o.value.text for o in (x, stored)])
    prelude = [
        Assign("dtype", x.value.dtype, "the projections': the region's result's"),
        Assign("k", "cols"),
        Assign("k16, n16", "width, -(-n // 16) * 16", "the cube's 32-byte aligned tiles over the real k (rows padded to width) and n"),
        Assign("k_tiles, n_tiles", call("_cube_tiles", "k16", "n16", "dtype", "max_rows")),
        Assign("rows, tile_cols", call("_tile_shape", "width", "max_rows", str(buffers), f"({', '.join([*dtypes, *promoted, FP32])})",
                                       whole_rows="True"), "the region's tiles"),
        Assign("vec_rows, vec_cols", call("_tile_shape", "n16", "max_rows", "4", f"({FP32},)"), "gate, up and two temporaries"),
        Assign("count", "cols", "the real cols a row reduction counts"),
        Raw("".join(s for s in dict.fromkeys(program.setup) if s)),
        *setup,
    ]
    params = [*row_tile_params(program, rows, vectors), *(templates.tensor(w, items("n", "cols"), "dtype") for w in ("wg", "wu")),
              templates.tensor("out", items("pypto.DYNAMIC", "n"), "dtype"),
              templates.tensor(f"{stored.name}_out", items("pypto.DYNAMIC", "cols"), stored.value.dtype)]  # its valid cols: contiguous as torch's
    body = [
        Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")),
        *row_tile_steps(program, rows, vectors),
        *row_tile_stores([stored]),
        Do(pypto("set_cube_tile_shapes", items("max_rows", "max_rows"), "k_tiles", "n_tiles")),
        Assign("a_tile", pypto("view", x.value.text, items("max_rows", "k16"), items("0", "0"), valid_shape="valid"),
               "the region's result: the cube's row tile"),
        *tail,
    ]
    doc = (f"{where}: {' + '.join(dict.fromkeys(program.pypto))} on the vector cores, then act(x @ wg.T) * (x @ wu.T) "
           "of its result x on the cube, per row tile, one launch.")
    text = templates.factory(name, factory, doc, prelude, params, row_tile_loop(rows[0].name, *body), jit=(templates.CUBE[0], ""))
    return Definition(name, text, ("_cube_tiles", "_tile_shape", "_annotated"))


def outer(name: str, where: str, params: list[str], module: tuple[str, str], separate: str, fused: str,
          then: str = "then its linear with the residual add in the epilogue", dropout: str | None = None) -> Definition:
    """The wrapper ``name`` of the statements: ``fused`` (the prologue's call, then the MLP's
    linear: ``then``) unless the MLP's call would run more than its class's forward, or
    ``dropout`` (an nn.Dropout between the call and the add) is not the identity, where
    ``separate`` (the region's call, then the submodule's or its call)."""
    doc = filled(f"{where} as two PyPTO kernels: the region as the prologue of {module[1]}.forward's gated pair, "
              f"{then}.", 92, subsequent_indent="    ")
    text = (f'def {name}({", ".join(params)}):\n    """{doc}"""\n'
            f"    if {epilogue.not_inlined((module,), dropout)}:\n" + textwrap.indent(separate, " " * 8) + textwrap.indent(fused, "    "))
    return Definition(name, text, ("_inlined",))
