"""A linear and the elementwise op that consumes its result, as one cube kernel with a vector epilogue.

``self.q_proj(h) * self.scaling`` (a scale), ``self.dense(h) + residual`` (a residual add),
``self.o_proj(a) - t`` and ``/ n``: the kernel multiplies row tiles by the transposed weight on
the cube (FP32 accumulation), adds the bias, rounds to the input's dtype where torch's linear
rounds its result, and applies the op to a Python number or to a row tile of a tensor of the
result's shape in the vector epilogue, rounded once at the store as torch rounds the op. The
engine (:mod:`torch2pypto.translator.engine.epilogues`) finds the pattern; operands the kernel
does not take (a tensor that broadcasts or is not contiguous, another dtype, other numbers) run
the expression as written.
"""

from __future__ import annotations

from torch2pypto.rules import gated, templates, wrappers
from torch2pypto.rules.codegen import Definition, copied, filled
from torch2pypto.rules.fusion import INLINED
from torch2pypto.schema.entry import Entry
from torch2pypto.rules.steps import Apply, Step

FP32 = templates.FP32
TENSOR, NUMBER = "tensor", "number"  # what the op's other operand is


def kernels(op: str, kinds: tuple[str, ...]) -> tuple[Definition, ...]:
    """The kernel factories of ``linear(a, w[, bias]) <op> other`` for each kind of other."""
    product = Apply("result", Step("matmul", (("b_trans", "transposed"),)), ("a_tile", "b_tile", FP32))
    found = []
    for kind in kinds:
        for bias in (False, True):
            other = "other_tile" if kind == TENSOR else "other"
            epilogue = [Apply("result", Step("add"), ("result", "bias_tile"))] if bias else []
            epilogue.append(Apply("result", Step(op), ("result", other)))
            doc = (f"pypto.matmul of [rows, k] row tiles by the transposed weight [n, k] in FP32{', plus the bias' if bias else ''}, "
                   f"rounded as torch's linear rounds, then pypto.{op} of {'a row tile of other' if kind == TENSOR else 'the number other'}.")
            found.append(templates.cube_kernel(
                kernel_name(op, kind, bias), doc, product, epilogue, batched=False, bias=bias,
                others=("other",) if kind == TENSOR else (), constants=("other",) if kind == NUMBER else (), rounded=True,
            ))
    return tuple(found)


def kernel_name(op: str, kind: str, bias: bool) -> str:
    return f"linear_{op}_{kind}{'_bias' if bias else ''}_kernel"


EPILOGUE_TAKES = copied("epilogue", "_epilogue_takes")


def definitions(wrapper: str, where: str, op: str, kinds: tuple[str, ...], params: list[str], torch_source: str,
                roles: tuple[str, str, str | None, str]) -> tuple[Definition, ...]:
    """The kernels, the torch fallback and the wrapper of one linear epilogue; ``roles``: the
    parameters holding x, the weight, the bias (None: the linear has none) and the other operand."""
    fallback = wrappers.region_fallback(wrapper, where, params, torch_source)
    x, w, b, other = roles
    factory = f"_PYPTO_DTYPES[{x}.dtype], _PYPTO_DTYPES[{x}.dtype], k, n, _cube_rows(a.shape[0]), True"
    operands = f"a, _kept_contiguous({w}), " + (f"*([] if {b} is None else [{b}.reshape(1, n)]), " if b else "")

    def launch(kind: str) -> str:
        names = kernel_name(op, kind, True) if b else None
        kernel = kernel_name(op, kind, False)
        pick = f"({names} if {b} is not None else {kernel})" if b else kernel
        if kind == TENSOR:
            return f"_launch({pick}({factory}), {operands}{other}.view(-1, n), out)\n"
        return f"_launch({pick}({factory}, float({other})), {operands}out)\n"

    if len(kinds) == 2:
        launched = f"if isinstance({other}, torch.Tensor):\n    {launch(TENSOR)}else:\n    {launch(NUMBER)}"
    else:
        launched = launch(kinds[0])
    built = kernels(op, kinds)
    source = wrappers.region_wrapper(
        wrapper, params, f"{where} as one PyPTO kernel: linear, then pypto.{op} in its epilogue.",
        "The product on the cube (FP32 accumulation) plus the bias, rounded where torch's linear rounds it, "
        "then the op in the vector epilogue.",
        f"_epilogue_takes({x}, {w}, {b or 'None'}, {other})", fallback, wrappers.region_rows(x, w, launched),
        ("_epilogue_takes", "_cube_tiles", "_cube_operands", *(d.name for d in built)),
        refused="a tensor other than one of the result's shape and dtype, off the NPU",
    )
    return (*built, templates.CUBE_TILES, templates.CUBE_OPERANDS, EPILOGUE_TAKES, fallback, source)


def activation_kernels(names) -> tuple[Definition, ...]:
    """The kernel factories of ``act(linear(a, w[, bias]))`` for each activation of ``names``."""
    product = Apply("result", Step("matmul", (("b_trans", "transposed"),)), ("a_tile", "b_tile", FP32))
    return tuple(
        templates.cube_kernel(
            activation_kernel(name, bias),
            f"pypto.matmul of [rows, k] row tiles by the transposed weight [n, k] in FP32{', plus the bias' if bias else ''}, "
            f"rounded as torch's linear rounds, then {name} in FP32.",
            product, [Apply("result", Step("add"), ("result", "bias_tile"))] if bias else [], batched=False, bias=bias,
            rounded=True, tail=gated.activation(name, "result"),
        )
        for name in names for bias in (False, True)
    )


def activation_kernel(name: str, bias: bool) -> str:
    return f"linear_{name}{'_bias' if bias else ''}_kernel"


def activation_definitions(wrapper: str, where: str, kind: str | None, act: str | None, params: list[str], torch_source: str,
                           roles: tuple[str, str, str | None], linear: Entry) -> tuple[Definition, ...]:
    """The kernels, the torch fallback and the wrapper of ``act(linear(x, w, b))``: ``kind`` the
    activation if known statically, else the parameter ``act`` holds the module, whose kind the
    wrapper reads at run time (an activation of no kernel: the linear's own kernel, then ``act``)."""
    fallback = wrappers.region_fallback(wrapper, where, params, torch_source)
    x, w, b = roles
    prologue, pick, run_time, needs = gated.chosen(
        kind, act, activation_kernel, "no kernel computes it in its epilogue: the linear's own kernel, then it",
        f"{act}(pypto_{linear.op}({x}, {w}, bias={b or 'None'}))", linear,
    )
    factory = f"(_PYPTO_DTYPES[{x}.dtype], _PYPTO_DTYPES[{x}.dtype], k, n, _cube_rows(a.shape[0]), True)"
    launch = f"_launch(kernel{factory}, a, _kept_contiguous({w}), out)\n"
    if b:
        launch = f"if {b} is None:\n    {launch}else:\n    _launch(biased{factory}, a, _kept_contiguous({w}), {b}.reshape(1, n), out)\n"
    built = activation_kernels((kind,) if kind else tuple(gated.ACTIVATIONS))
    source = wrappers.region_wrapper(
        wrapper, params, f"{where} as one PyPTO kernel: linear, then {kind or act} in its epilogue.",
        "The product on the cube (FP32 accumulation) plus the bias, rounded where torch's linear rounds it, "
        "then the activation in the vector epilogue.",
        f"_epilogue_takes({x}, {w}, {b or 'None'})", fallback, wrappers.region_rows(x, w, launch, pick),
        ("_epilogue_takes", "_cube_tiles", "_cube_operands", *(d.name for d in built), *needs), after=prologue,
    )
    return (*built, templates.CUBE_TILES, templates.CUBE_OPERANDS, EPILOGUE_TAKES, *run_time, fallback, source)


def submodule_definitions(wrapper: str, where: str, params: list[str], torch_source: str, roles: tuple[str, str, str, str],
                          inner: str, linear: tuple[str, str | None], linear_first: bool, needs: tuple[str, ...],
                          dropout: str | None = None) -> tuple[Definition, ...]:
    """A residual add in the linear a submodule's forward returns (``out = residual + self.mlp(x)``):
    the wrapper runs ``inner`` (the forward's value the linear takes: its parameter, or its gated
    pair's call, ``needs``), then the linear with the add in its epilogue (:func:`definitions`),
    unless the call would run more than that class's forward (``_inlined``), where it runs
    ``torch_source``. ``roles``: the parameters holding x, the residual, the submodule and its
    class; ``linear``: the weight and bias as the wrapper reads them from the submodule;
    ``dropout``: an nn.Dropout between the call and the add (phi3's), which the wrapper sees
    through where it is the identity (:func:`not_inlined`), else it runs ``torch_source``."""
    x, residual, module, cls = roles
    fallback = wrappers.region_fallback(wrapper, where, [x, residual, module, *([dropout] if dropout else [])], torch_source)
    epilogue = f"{wrapper.rpartition('_')[0]}_epilogue_1sites"
    names = ("x", "weight", "bias" if linear[1] else None, "residual")
    linear_call = f"torch.nn.functional.linear(x, weight, {names[2] or 'None'})"
    inner_source = f"return {linear_call} + residual\n" if linear_first else f"return residual + {linear_call}\n"
    built = definitions(epilogue, f"{where} (its epilogue)", "add", (TENSOR, NUMBER), [n for n in names if n], inner_source, names)
    doc = filled(f"{where} as one PyPTO kernel: {cls}.forward inlined, its linear with x + y in the epilogue.", 92,
                 subsequent_indent="    ")
    more = filled(
        f"What the forward computes before its linear runs as there (its gated pair's kernel); the linear's product on "
        f"the cube, rounded where torch's linear rounds it, then pypto.add of {residual} in the vector epilogue "
        f"({epilogue}). A submodule whose call runs more than its class's forward runs {fallback.name}.",
        92, initial_indent="    ", subsequent_indent="    ")
    weight, bias = linear
    source = (
        f'def {wrapper}({", ".join(params)}):\n    """{doc}\n\n{more}\n    """\n'
        f"    if {not_inlined(((module, cls),), dropout)}:\n"
        f"        return {fallback.name}({x}, {residual}, {module}{', ' + dropout if dropout else ''})\n"
        f"    return {epilogue}({inner}, {weight}, {', '.join([bias] if bias else [])}{', ' if bias else ''}{residual})\n"
    )
    return (*built, INLINED, fallback, Definition(wrapper, source, ("_inlined", fallback.name, epilogue, *needs)))


def not_inlined(modules: tuple[tuple[str, str], ...], dropout: str | None) -> str:
    """The run-time test that the fused path may not run: calling some (module, cls) would run more
    than cls.forward (``_inlined``), or ``dropout`` (an nn.Dropout, if any) is not the identity
    (in training with p > 0; in eval or with p == 0 torch returns its input, drawing no random
    numbers)."""
    pairs = ", ".join(f"({m}, {c})" for m, c in (*modules, *([(dropout, "torch.nn.Dropout")] if dropout else [])))
    return f"not _inlined({pairs})" + (f" or {dropout}.training and {dropout}.p != 0" if dropout else "")
