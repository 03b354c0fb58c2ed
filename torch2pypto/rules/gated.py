"""The gated pair of an MLP, ``act(linear(x, wg, bg)) * linear(x, wu, bu)``, as one cube kernel.

llama's ``self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))`` (and its kin) runs
two linears, an activation and a product. Here one kernel reads each row tile of x once,
multiplies it by both weights on the cube (FP32 accumulation) and applies the activation and the
product in the vector epilogue, as PyPTO's fused_swiglu does; it rounds where torch rounds (each
projection and the activation to x's dtype), so its values are torch's. The engine
(:mod:`torch2pypto.translator.engine.epilogues`) finds the pattern; this module makes the kernel,
the torch fallback (the expression as written) and the wrapper. An activation module known only
at run time (``ACT2FN[config.hidden_act]``) is passed to the wrapper, which launches the kernel
for the activations of :data:`ACTIVATIONS`; for any other it runs each projection as one linear
kernel and the activation and the product as written.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from torch2pypto.rules import cube, templates, wrappers
from torch2pypto.rules.codegen import Definition, copied
from torch2pypto.rules.kernel_ir import Assign, Stmt, pypto
from torch2pypto.schema.entry import Entry

FP32 = templates.FP32
def _silu(x: str) -> tuple[Stmt, ...]:
    return (Assign(x, pypto("div", x, pypto("add", pypto("exp", pypto("mul", x, "-1.0")), "1.0")), "silu: x * sigmoid(x)"),)


def _gelu_tanh(x: str) -> tuple[Stmt, ...]:
    """x * sigmoid(2u) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3)."""
    return (
        Assign("inner", pypto("add", x, pypto("mul", pypto("mul", pypto("mul", x, x), x), "0.044715"))),
        Assign(x, pypto("div", x, pypto("add", pypto("exp", pypto("mul", "inner", "-1.5957691216057308")), "1.0")), "gelu, tanh form"),
    )


def _gelu(x: str) -> tuple[Stmt, ...]:
    """Exact gelu as the table's gelu: relu(x) - |x|/2 erfc(|x|/sqrt 2), erfc by Abramowitz-Stegun 7.1.26."""
    horner = (Assign("poly", pypto("add", pypto("mul", "t", "poly"), c)) for c in ("1.421413741", "-0.284496736", "0.254829592"))
    return (
        Assign("size", pypto("abs", x)),
        Assign("t", pypto("reciprocal", pypto("add", pypto("mul", "size", "0.2316418882663604"), "1.0"))),
        Assign("poly", pypto("add", pypto("mul", "t", "1.061405429"), "-1.453152027")),
        *horner,
        Assign("erfc", pypto("mul", pypto("mul", "t", "poly"), pypto("exp", pypto("mul", pypto("mul", x, x), "-0.5")))),
        Assign(x, pypto("sub", pypto("relu", x), pypto("mul", pypto("mul", "size", "0.5"), "erfc")), "gelu"),
    )


# activation -> its FP32 statements on a tile (the kernel's epilogue). silu is x / (1 + exp(-x)):
# pypto.sigmoid builds a full-size constant and breaks on the partial row tile a cube kernel's last
# tile is; gelu(approximate='tanh') is gelu_tanh
ACTIVATIONS: dict[str, Callable[[str], tuple[Stmt, ...]]] = {"silu": _silu, "gelu_tanh": _gelu_tanh, "gelu": _gelu}


def activation(name: str, tile: str) -> tuple[Stmt, ...]:
    """The FP32 statements of activation ``name`` on the tile ``tile``."""
    return ACTIVATIONS[name](tile)


# the table ops (a function call's entry) that compute each activation
FUNCTIONS = {"silu": "silu"}
# the table ops of the nn modules whose calls may compute one (nn.GELU: by its approximate, at run time)
MODULE_OPS = frozenset({"silu", "gelu"})


def kernel_name(name: str, bias: bool) -> str:
    return f"gated_{name}{'_bias' if bias else ''}_kernel"


def kernels(names=tuple(ACTIVATIONS)) -> tuple[Definition, ...]:
    """Per activation of ``names``, the kernel factory without biases and with them."""
    return tuple(
        templates.gated_kernel(
            kernel_name(name, bias),
            f"{name}(a @ wg.T{' + bg' if bias else ''}) * (a @ wu.T{' + bu' if bias else ''}): both projections of one read of a's row tiles.",
            activation(name, "gate"), bias=bias,
        )
        for name in ACTIVATIONS if name in names for bias in (False, True)
    )


ACTIVATION_KIND = copied("gated", "_activation_kind")


def chosen(kind: str | None, act: str | None, kernel: Callable[[str, bool], str], why: str, otherwise: str,
           linear: Entry) -> tuple[str, str, tuple[Definition, ...], tuple[str, ...]]:
    """How a wrapper picks its kernels (``kernel, biased``, named by ``kernel(activation, bias)``):
    for the activation ``kind`` known statically, or for the kind of the module in parameter ``act``
    at run time, returning ``otherwise`` (``why``) for a module of no kernel. Returns the statements
    after the guard, the pick, and the definitions and names this needs (``linear``'s wrapper
    among them: ``otherwise`` projects with it)."""
    if kind is not None:
        return "", f"kernel, biased = {kernel(kind, False)}, {kernel(kind, True)}\n", (), ()
    pairs = ", ".join(f'"{name}": ({kernel(name, False)}, {kernel(name, True)})' for name in ACTIVATIONS)
    prologue = f"activation = _activation_kind({act})\nif activation is None:  # {why}\n    return {otherwise}\n"
    return (prologue, f"kernel, biased = {{{pairs}}}[activation]\n", (ACTIVATION_KIND, *cube.definitions(linear)),
            ("_activation_kind", f"pypto_{linear.op}"))


GATED_TAKES = copied("gated", "_gated_takes")


HALVES = copied("gated", "_halves")


@dataclasses.dataclass(frozen=True)
class Gated:
    """A gated pair found in the code: the wrapper's parameters by role (``act``: the activation
    module's, None for a function's), their sources, and the activation's name if known statically."""

    act: str | None  # the parameter holding the activation module
    x: str
    weights: tuple[str, str]  # gate's, up's
    biases: tuple[str | None, str | None]  # None: the linear has none
    activation: str | None  # static (a function's), else chosen at run time from the module
    halves: tuple[str, str | None] | None = None  # one projection's weight and bias, chunked in two: weights and biases are their halves


def definitions(wrapper: str, where: str, gated: Gated, params: list[str], torch_source: str, linear: Entry) -> tuple[Definition, ...]:
    """The kernels, the torch fallback (``torch_source``: the expression's statements over
    ``params``) and the wrapper of one gated pair; given an activation known at run time only, also
    ``linear``'s wrapper, which projects on the cube for an activation of no gated kernel."""
    fallback = wrappers.region_fallback(wrapper, where, params, torch_source, "statements" if gated.halves else "expression")
    (wg, wu), (bg, bu) = gated.weights, gated.biases
    split, halves = "", ()
    if gated.halves is not None:  # the halves are views of the one weight (and bias), taken on each call: no copy
        weight, bias = gated.halves
        split = f"{wg}, {wu} = _halves({weight})\n" + (f"{bg}, {bu} = _halves({bias})\n" if bias else "")
        halves = (HALVES,)
    x = gated.x
    bias_args = [bg or "None", bu or "None"]
    first, second = (f"pypto_{linear.op}({x}, {w}, bias={b or 'None'})" for w, b in zip(gated.weights, gated.biases))
    prologue, pick, run_time, needs = chosen(
        gated.activation, gated.act, kernel_name, "no gated kernel computes it: each projection one cube kernel",
        f"{gated.act}({first}) * {second}", linear,
    )
    factory = f"(_PYPTO_DTYPES[{x}.dtype], k, n, _cube_rows(a.shape[0]))"
    weights = f"_kept_contiguous({wg}), _kept_contiguous({wu})"
    launch = f"_launch(kernel{factory}, a, {weights}, out)\n"
    if bg or bu:
        launch = (f"if {bias_args[0]} is None:\n    {launch}else:\n"
                  f"    _launch(biased{factory}, a, {weights}, {bias_args[0]}.reshape(1, n), {bias_args[1]}.reshape(1, n), out)\n")
    built = kernels((gated.activation,) if gated.activation else tuple(ACTIVATIONS))
    ops = f"linear, chunk, {gated.activation or gated.act}, x * y" if halves else f"linear, {gated.activation or gated.act}, linear, x * y"
    reads = "Both projections" + (" (the halves of the one weight, views of it)" if halves else "") + " of one read of each row tile of x"
    source = wrappers.region_wrapper(
        wrapper, params, f"{where} as one PyPTO kernel: {ops}.",
        f"{reads} on the cube (pypto.matmul, FP32 accumulation); "
        "the activation and the product in the vector epilogue, rounded where torch rounds.",
        f"_gated_takes({x}, {wg}, {bias_args[0]}, {wu}, {bias_args[1]})", fallback, split + wrappers.region_rows(x, wg, launch, pick),
        ("_gated_takes", "_cube_tiles", "_cube_operands", *(k.name for k in built), *needs, *(h.name for h in halves)),
        before=split, after=prologue,
    )
    return (*built, templates.CUBE_TILES, templates.CUBE_OPERANDS, GATED_TAKES, *halves, *run_time, fallback, source)
