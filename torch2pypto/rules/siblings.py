"""Sibling projections: linears of one input, ``self.q_proj(h)``, ``self.k_proj(h)``,
``self.v_proj(h)``, as one cube kernel.

An attention's query, key and value projections read the same rows three times, in three
launches. Here one kernel reads each row tile of x once and multiplies it by every weight on the
cube (FP32 accumulation), each projection its own N (GQA's k and v narrower than q), adds its bias
and rounds once to x's dtype, as torch's linear rounds. The engine
(:mod:`torch2pypto.translator.engine.siblings`) finds the pattern; this module makes the kernels,
the torch fallback (the projections as written) and the wrapper, which returns one tensor per
projection, each with torch's gradient of its linear.
"""

from __future__ import annotations

import textwrap

from torch2pypto.rules import epilogue, templates, wrappers
from torch2pypto.rules.codegen import Definition


def kernel_name(count: int, bias: bool) -> str:
    return f"linears_{count}{'_bias' if bias else ''}_kernel"


def definitions(wrapper: str, where: str, x: str, projections: list[tuple[str, str | None]], params: list[str],
                torch_source: str) -> tuple[Definition, ...]:
    """The kernels, the torch fallback and the wrapper of the projections ``(weight, bias)`` of
    ``x`` (parameter names; a bias None: that linear has none)."""
    fallback = wrappers.region_fallback(wrapper, where, params, torch_source, "projections")
    count = len(projections)
    pairs = ", ".join(f"({w}, {b or 'None'})" for w, b in projections)
    biased = any(b for _, b in projections)
    launch = f"_launch({kernel_name(count, False)}(*factory), a, *weights, *out)\n"
    if biased:  # a projection without one adds zeros
        launch = (f"if all(b is None for _, b in projections):\n    {launch}else:\n"
                  f"    biases = [(torch.zeros(w.shape[0], dtype={x}.dtype, device={x}.device) if b is None else b).reshape(1, -1) "
                  f"for w, b in projections]\n"
                  f"    _launch({kernel_name(count, True)}(*factory), a, *weights, *biases, *out)\n")
    body = (
        f"k = {x}.shape[-1]\n" + wrappers.ROWS.format(x=x)
        + "weights = [_kept_contiguous(w) for w, _ in projections]\n"
        f"factory = (_PYPTO_DTYPES[{x}.dtype], k, *(w.shape[0] for w in weights), _cube_rows(a.shape[0]))\n"
        f"out = [torch.empty(a.shape[0], w.shape[0], dtype={x}.dtype, device={x}.device) for w in weights]\n"
        + launch
    )
    returns = (  # each result with torch's gradient of its own linear
        "with torch.no_grad():\n" + textwrap.indent(body, "    ")
        + f"shape = {x}.shape[:-1]\n"
        "return tuple(\n"
        f"    _with_torch_grad(lambda *_, o=o: o.reshape(*shape, -1), torch.nn.functional.linear, {x}, w, b)\n"
        "    for o, (w, b) in zip(out, projections)\n"
        ")\n"
    )
    built = tuple(templates.linears_kernel(kernel_name(count, bias), count, bias=bias) for bias in ((False, True) if biased else (False,)))
    source = wrappers.region_wrapper(
        wrapper, params, f"{where} as one PyPTO kernel: {count} linears of one read of {x}.",
        f"Every projection of one read of each row tile of {x} on the cube (FP32 accumulation), each its own N, "
        "plus its bias, rounded once as torch's linear rounds; each result carries torch's gradient of its linear.",
        f"all(_epilogue_takes({x}, w, b) for w, b in projections)", fallback, "",
        ("_epilogue_takes", "_cube_tiles", "_cube_operands", *(d.name for d in built)),
        before=f"projections = [{pairs}]\n", returns=returns,
    )
    return (*built, templates.CUBE_TILES, templates.CUBE_OPERANDS, epilogue.EPILOGUE_TAKES, fallback, source)
