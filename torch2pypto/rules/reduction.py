"""The row reduction family: a reducer over any dims, keepdim, an output dtype.

The host moves the reduced dims last and pads the rows to 32 bytes with the reducer's identity
(:data:`templates.REDUCTION_ROWS`); the kernel reads the real cols of each row (``count``) and
reduces them. ``compute = "float32"`` accumulates in FP32 (``pypto.sum`` takes FP32 only).

The entry's ``pypto`` names the reducer, ``output`` what it gives:

- ``sum``, ``amax``, ``amin``: that PyPTO reduction; ``average`` divides the sum by the count
  (mean); ``args.p`` (sum) makes it the p-norm ``sum(|x|^p)^(1/p)``, and for p = inf / -inf
  the amax / amin of ``|x|`` (a kernel each, chosen on the host by p's value).
- ``var``: two passes, ``sum((x - mean)^2) / (count - correction)`` (``pypto.var`` breaks on a
  partial row tile); ``args.correction`` and ``args.unbiased`` name torch's parameters and
  ``args.then = "sqrt"`` takes the root (std).
- ``amax+sub+exp+sum+log+add`` (:data:`LOGSUMEXP`, logsumexp): ``m + log(sum(exp(x - m)))``,
  ``m`` the row's amax, 0 where it is not finite (an all ``-inf`` row gives ``-inf``, one
  holding ``inf`` gives ``inf``), as torch.
- ``output = "bool"`` with ``amin`` / ``amax``: all / any, the reducer over ``x != 0``.
- ``output = "int64"`` with ``amax`` / ``amin``: argmax / argmin, the first index holding the
  extreme (NaN counts as the extreme, as in torch); ``args.indices`` names the dim parameter
  whose presence makes the call return (values, indices) (``torch.max(x, dim)``), while without
  it the call gives the values.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal, Mapping

from torch2pypto.rules import templates, wrappers
from torch2pypto.rules.calls import literal, rejection, replacement, wrapper_params
from torch2pypto.rules.codegen import Definition, per_entry
from torch2pypto.rules.kernel_ir import Assign, Do, call, items, loop, pypto
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.steps import Apply, Step
from torch2pypto.rules.tile_program import Operand
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, length_over, register


@dataclasses.dataclass(frozen=True)
class ReductionFields(Fields):
    """The table fields the reduction family reads."""

    args: Mapping[str, str] = field("p = the p-norm's parameter (sum; inf / -inf: amax / amin of |x|); correction / unbiased = var's; then = \"sqrt\" (std); indices = \"dim\": torch.max's (values, indices)", {})
    compute: Literal["float32"] | None = field("float32 accumulates in FP32")
    average: bool = field("divide by the count (mean)", False)
    output: Literal["bool", "int64"] | None = field("bool: all / any of x != 0 (amin / amax); int64: argmax / argmin (amax / amin)")


# reducer -> the value its padding holds, which never changes the result (var's two passes read
# the real cols only, whatever the pad holds)
IDENTITIES = {
    None: {"sum": "0.0", "amax": "-math.inf", "amin": "math.inf", "var": "0.0", "amax+sub+exp+sum+log+add": "-math.inf"},
    "bool": {"amin": "1.0", "amax": "0.0"},  # all: pads are true; any: pads are false
    "int64": {"amax": "-math.inf", "amin": "math.inf"},  # argmax / argmin: pads never win
}
OUT_DTYPES = {"bool": ("torch.bool", "pypto.DT_BOOL"), "int64": ("torch.int64", "pypto.DT_INT64")}
PARAMS = ("input", "dim", "keepdim", "dtype")  # the input may have another name (linalg.vector_norm: x)
ARGS = {"p": "sum", "correction": "var", "unbiased": "var", "then": "var", "indices": "amax amin"}
THEN = ("sqrt",)
LOGSUMEXP = "amax+sub+exp+sum+log+add"  # the reducer of logsumexp, several PyPTO ops
MAX_INDEX = 2**24  # indices are computed in FP32, exact up to here


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    reducers = IDENTITIES[entry.fields.output]
    if entry.pypto not in reducers:
        return f"no padding identity known for pypto.{entry.pypto} (reducers{_for(entry)}: {', '.join(reducers)})"
    if entry.fields.average and entry.pypto != "sum":
        return "average divides a sum by the count; it needs pypto.sum"
    names = {p.name for p in entry.params}
    for keyword, value in entry.fields.args.items():
        if keyword not in ARGS or entry.pypto not in ARGS[keyword].split() or (keyword == "indices") != (entry.fields.output == "int64"):
            return f"args.{keyword} means nothing to a{_for(entry)} pypto.{entry.pypto} reduction"
        if keyword == "then" and value not in THEN:
            return f"args.then = {value!r}: the reduced result may take {', '.join(THEN)}"
        if keyword not in ("then",) and value not in names:
            return f"args.{keyword} = {value!r} is no parameter"
    used = {entry.params[0].name, *PARAMS[1:]} | {v for k, v in entry.fields.args.items() if k != "then"}
    for p in wrapper_params(entry):
        if p.name not in used:
            return f"parameter {p.name!r} is none of {', '.join(sorted(used))} and not rejected"
    if "dim" not in names:
        return "a reduction takes a dim parameter"
    if entry.fields.output and "dtype" in names:
        return f"a {entry.fields.output} result takes no dtype="
    return None


def _for(entry: Entry) -> str:
    return f" of {entry.fields.output} results" if entry.fields.output else ""


def step(reducer: str, fp32: bool = False) -> Step:
    """The tile step reducing each row of a tile to [rows, 1]: composite recipes reuse it."""
    return Step(reducer, (("dim", "-1"), ("keepdim", "True")), fp32)


NORMS = {"inf": "amax", "neg_inf": "amin"}  # p-norms of infinite p: the reducer over |x|


def program(entry: Entry, norm: str | None = None) -> tuple[Apply, ...]:
    """The reducer's steps over ``x_tile`` (real cols: ``count``); the last is the result.
    ``norm``: a p-norm's infinite p (:data:`NORMS`)."""
    fp32 = entry.fields.compute == "float32"
    if norm:
        return (Apply("t0", Step("abs"), ("x_tile",)), Apply("result", step(NORMS[norm], fp32), ("t0",)))
    reduce = step(entry.pypto, fp32)
    if entry.fields.output == "bool":  # all / any: reduce the truth of x != 0 as 1.0 / 0.0
        return (Apply("t0", Step("ne", result="bool"), ("x_tile", "0.0")),
                Apply("t1", Step("where"), ("t0", "1.0", "0.0")),
                Apply("t2", reduce, ("t1",)),
                Apply("result", Step("ne", result="bool"), ("t2", "0.0")))
    if entry.fields.output == "int64":  # the first index of the extreme; a NaN is the extreme
        return (Apply("t0", reduce, ("x_tile",)),
                Apply("t1", Step("eq", result="bool"), ("x_tile", "t0")),
                Apply("t2", Step("where"), ("t1", "index_tile", "count * 1.0")),
                Apply("t3", Step("ne", result="bool"), ("x_tile", "x_tile")),
                Apply("t4", Step("where"), ("t3", "index_tile", "t2")),
                Apply("result", step("amin", fp32), ("t4",)))
    if entry.pypto == "var":
        then = entry.fields.args.get("then")
        total = step("sum", True)
        steps = [Apply("t0", total, ("x_tile",)),
                 Apply("t1", Step("mul"), ("t0", "1.0 / count")),
                 Apply("t2", Step("sub"), ("x_tile", "t1")),
                 Apply("t3", Step("mul"), ("t2", "t2")),
                 Apply("t4", total, ("t3",)),
                 Apply("result" if not then else "t5", Step("mul"), ("t4", "1.0 / (count - correction)"))]
        return (*steps, *([Apply("result", Step(then), ("t5",))] if then else []))
    if entry.pypto == LOGSUMEXP:  # numerically stable: the row's finite max taken out first
        return (Apply("t0", step("amax", True), ("x_tile",)),
                Apply("t1", Step("isfinite", result="bool"), ("t0",)),
                Apply("t2", Step("where"), ("t1", "t0", "0.0")),
                Apply("t3", Step("sub"), ("x_tile", "t2")),
                Apply("t4", Step("exp"), ("t3",)),
                Apply("t5", step("sum", True), ("t4",)),
                Apply("t6", Step("log"), ("t5",)),
                Apply("result", Step("add"), ("t6", "t2")))
    if "p" in entry.fields.args:  # the p-norm
        return (Apply("t0", Step("abs"), ("x_tile",)),
                Apply("t1", Step("pow"), ("t0", "p")),
                Apply("t2", reduce, ("t1",)),
                Apply("result", Step("pow"), ("t2", "1.0 / p")))
    if entry.fields.average:
        return (Apply("t0", reduce, ("x_tile",)), Apply("result", Step("mul"), ("t0", "1.0 / count")))
    return (Apply("result", reduce, ("x_tile",)),)


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site)
    if rejected:
        return rejected
    entry = site.entry
    dim = site.args.get("dim")
    if "indices" in entry.fields.args and dim is not None and type(literal(dim)) is not int:
        known = "is a tensor" if site.is_tensor("dim") else "is not an int literal, so the call may be"
        return Unsupported(f"the second argument {known} {_api(entry)}(input, other), the elementwise "
                           f"{entry.pypto[1:]}imum (torch.{entry.pypto[1:]}imum)")
    if dim is not None and type(literal(dim)) is bool:
        return Unsupported(f"a bool as dim: {_api(entry)}(input, unbiased) is an overload this wrapper does not take")
    power = literal(site.args[entry.fields.args["p"]]) if entry.fields.args.get("p") in site.args else Ellipsis
    if power is not Ellipsis and power != "fro" and not (type(power) in (int, float) and (0 < power or power == -math.inf)):
        return Unsupported(f"{entry.fields.args['p']}={power!r}: the kernel takes 'fro', p > 0, inf and -inf")
    if "indices" in entry.fields.args and entry.fields.args["indices"] not in site.args:
        if set(site.args) - {entry.params[0].name}:
            return Unsupported(f"{', '.join(sorted(set(site.args) - {'input'}))} without {entry.fields.args['indices']}")
        return Converted(replacement(site, f"pypto_{entry.op}_values"), definitions(entry, values=True),
                         f"pypto.{entry.pypto}", wrapper_params(entry)[:1])
    return Converted(replacement(site, f"pypto_{entry.op}"), definitions(entry), _how(entry), wrapper_params(entry))


def _api(entry: Entry) -> str:
    return entry.torch_function or entry.apis[0]


def _how(entry: Entry) -> str:
    return " + ".join(dict.fromkeys(f"pypto.{a.step.op}" for a in program(entry)))


@per_entry
def definitions(entry: Entry, values: bool = False) -> tuple[Definition, ...]:
    """The kernel and the wrapper; ``values``: an index entry's call without dim, which gives the
    extreme's value (``torch.max(x)``)."""
    params = wrapper_params(entry)
    names = {p.name for p in params}
    first = params[0].name
    name = f"{entry.op}_values" if values else entry.op
    if values:
        entry = dataclasses.replace(entry, fields=dataclasses.replace(entry.fields, output=None, args={}))  # torch.max(x): the amax
    steps = program(entry)
    index = entry.fields.output == "int64"
    pair = "indices" in entry.fields.args  # (values, indices), the values being the reduction's first step
    constants = [c for c in ("correction", "p") if c in entry.fields.args]
    fp32 = ", accumulated in FP32" if entry.fields.compute == "float32" else ""
    kernel = templates.row_kernel(
        f"{name}_kernel",
        f"The {_what(entry)} of each row of [rows, cols] tiles (count real cols){fp32}.",
        ", ".join(["dtype", "out_dtype", "cols", "count", *constants]),
        ["x"],
        steps,
        out_dtype="out_dtype",
        out_cols="1",
        buffers=4 + index,
        valid_cols="count",
        row_inputs=("index",) if index else (),
        also=(("values", steps[0].target),) if pair else (),
    )
    torch_dtype, pypto_dtype = OUT_DTYPES.get(entry.fields.output, (None, None))
    out_dtype = torch_dtype or (f"{first}.dtype if dtype is None else dtype" if "dtype" in names else f"{first}.dtype")
    dim, keepdim = ("dim", "keepdim" if "keepdim" in names else "False") if not values else ("None", "False")
    guard = [f"_on_kernel_path({first})"] if torch_dtype else ["out_dtype in _PYPTO_DTYPES", f"_on_kernel_path({first})"]
    prologue = f"out_dtype = {out_dtype}\n"
    factory = ["_PYPTO_DTYPES[x.dtype]", pypto_dtype or "_PYPTO_DTYPES[out_dtype]", "x.shape[1]", "count"]
    requires = ["_reduction_rows", f"{name}_kernel"]
    torch_params = params
    if "correction" in entry.fields.args:
        correction, unbiased = entry.fields.args["correction"], entry.fields.args.get("unbiased")
        if unbiased:  # torch's older spelling: the torch call passes the correction it means
            prologue += (f"if {unbiased} is not None and {correction} is not None:\n"
                         f"    raise TypeError(\"{_api(entry)}() takes {unbiased}= or {correction}=, not both\")\n"
                         f"{correction} = (1 if {unbiased} is None or {unbiased} else 0) if {correction} is None else {correction}\n")
            torch_params = tuple(p for p in params if p.name != unbiased)
        else:
            prologue += f"{correction} = 1 if {correction} is None else {correction}\n"
        guard.append(f"_reduced_count({first}, dim) > {correction}")
        factory.append(correction)
    kernels = ()
    launched = f"kernel = {name}_kernel({', '.join([*factory, *(['power'] if 'p' in entry.fields.args else []), templates.SPREAD_ROWS])})\n"
    identity = _identity(entry)
    if "p" in entry.fields.args:
        p = entry.fields.args["p"]
        fro = f'2 if {p} == "fro" else ' if entry.param(p).default == "fro" else ""
        prologue += f"power = {fro}{p}\n"
        guard.append("type(power) in (int, float) and (0 < power or power == -math.inf)")
        kernels = tuple(_norm_kernel(entry, name, norm) for norm in NORMS)
        launched = (f"if power == math.inf:\n    kernel = {name}_inf_kernel({', '.join([*factory, templates.SPREAD_ROWS])})\n"
                    f"elif power == -math.inf:\n    kernel = {name}_neg_inf_kernel({', '.join([*factory, templates.SPREAD_ROWS])})\n"
                    f"else:\n    {launched}")
        identity = f"math.inf if power == -math.inf else {identity}"
        requires += [k.name for k in kernels]
    launch, result = "x, out", "out.reshape(shape)"
    if index:
        guard.append(f"_reduced_count({first}, dim) <= {MAX_INDEX}")
        launch = "x, torch.arange(x.shape[1], dtype=torch.float32, device=x.device).reshape(1, -1), out"
    if pair:  # autograd records through torch: the kernel gives two results, _TorchGradient one
        guard.append(f"not (torch.is_grad_enabled() and {first}.requires_grad)")
        launch = launch.replace(", out", ", values, out")
        result = f"torch.return_types.{entry.op}((values.reshape(shape), out.reshape(shape)))"
    body = (
        f"x, count, shape = _reduction_rows({first}, {dim}, {keepdim}, {identity})\n"
        + (f"values = torch.empty(x.shape[0], 1, dtype={first}.dtype, device=x.device)\n" if pair else "")
        + "out = torch.empty(x.shape[0], 1, dtype=out_dtype, device=x.device)\n"
        + launched
        + f"_launch(kernel, {launch})\n"
        f"return {result}\n"
    )
    how = f"{_how(entry)} over the reduced dims moved last{fp32}"
    if _sums_runs(entry):  # one middle dim: the input read in place, its runs added
        body = (f"runs = _reduced_runs({first}, {dim}, {keepdim})\n"
                "if runs is not None:\n"
                "    x, count, inner, shape = runs\n"
                "    out = torch.empty(x.shape[0], inner, dtype=out_dtype, device=x.device)\n"
                f"    _launch({name}_runs_kernel(_PYPTO_DTYPES[x.dtype], _PYPTO_DTYPES[out_dtype], count, inner, _spread_rows(x.shape[0], inner)), x, out)\n"
                "    return out.reshape(shape)\n" + body)
        requires += ["_reduced_runs", f"{name}_runs_kernel"]
        kernels += (_runs_kernel(f"{name}_runs_kernel"),)
        how += "; over one middle dim, the input's runs along it added in place"
    call_params = params[:1] if values else params
    wrapper = wrappers.wrapper(
        entry, f"pypto_{name}", wrappers.signature(call_params), how, first,
        wrappers.torch_call(entry, torch_params[:1] if values else torch_params), f"({' and '.join(guard)})", body,
        tuple(requires), prologue=prologue,
    )
    return kernel, *kernels, templates.REDUCTION_ROWS, *([templates.REDUCED_RUNS] if _sums_runs(entry) else []), wrapper


def _sums_runs(entry: Entry) -> bool:
    """Whether the entry is a plain sum, which over one middle dim adds that dim's runs in place."""
    fields = entry.fields
    return entry.pypto == "sum" and not fields.args and not fields.average and fields.output is None


def _runs_kernel(name: str) -> Definition:
    """The kernel factory of a sum over a middle dim: rows of [rows, runs * inner] tiles, their
    runs of inner columns added in order, in FP32."""
    setup, store = templates.casting("result", templates.FP32, "out_dtype")

    def run(j: str) -> Assign:
        return Assign("run" if j != "0" else "result", pypto("view", "x", items("rows", "inner"), items("r", f"{j} * inner"),
                                                              valid_shape=items("(n - r).min(rows)", "inner")))

    body = [
        Assign("r", "i * rows"),
        Do(pypto("set_vec_tile_shapes", "rows", "tile_cols")),
        run("0"),
        templates.to_fp32(["result"]),
        loop("j", "range(1, runs)", run("j"), templates.to_fp32(["run"]), Assign("result", pypto("add", "result", "run")), comment="unrolled"),
        *store,
        Do(pypto("assemble", "result", items("r", "0"), "out")),
    ]
    loops = [Assign("n", "x.shape[0]"), templates.row_tiles("n", *body)]
    prelude = [Assign("rows, tile_cols", call("_tile_shape", "inner", "max_rows", "4", templates.tile_dtypes("dtype", "out_dtype", templates.FP32))), *setup]
    params = [templates.tensor("x", items("pypto.DYNAMIC", "runs * inner"), "dtype"), templates.tensor("out", items("pypto.DYNAMIC", "inner"), "out_dtype")]
    doc = "The sum of the runs of inner columns of each row of [rows, runs * inner] tiles, added in order in FP32."
    return Definition(name, templates.factory(name, ["dtype, out_dtype, runs, inner, max_rows"], doc, prelude, params, loops), ("_tile_shape", "_annotated"))


def _norm_kernel(entry: Entry, name: str, norm: str) -> Definition:
    """The kernel of a p-norm of infinite p: the amax / amin of |x| along each row."""
    fp32 = ", in FP32" if entry.fields.compute == "float32" else ""
    return templates.row_kernel(
        f"{name}_{norm}_kernel",
        f"The pypto.{NORMS[norm]} of |x| of each row of [rows, cols] tiles (count real cols){fp32}: the p-norm of p = {norm.replace('neg_', '-')}.",
        "dtype, out_dtype, cols, count",
        ["x"],
        program(entry, norm),
        out_dtype="out_dtype",
        out_cols="1",
        buffers=4,
        valid_cols="count",
    )


def _identity(entry: Entry) -> str:
    return IDENTITIES[entry.fields.output][entry.pypto]


def _what(entry: Entry) -> str:
    if entry.fields.output == "bool":
        return {"amin": "all-nonzero test", "amax": "any-nonzero test"}[entry.pypto]
    if entry.fields.output == "int64":
        extreme = f"{entry.pypto[1:]}imum"
        return f"{extreme} and its first index" if "indices" in entry.fields.args else f"first index of the {extreme}"
    if entry.pypto == LOGSUMEXP:
        return "log of the sum of exponentials"
    if entry.pypto == "var":
        return "standard deviation" if entry.fields.args.get("then") else "variance"
    if "p" in entry.fields.args:
        return "p-norm"
    return "mean" if entry.fields.average else f"pypto.{entry.pypto}"


def fuse(builder, entry: Entry, bound, env) -> Operand:
    """A plain row reduction in a fused region (along dim=-1, keepdim=True)."""
    return builder.reduce(entry, bound, env)


register(Family("reduction", ReductionFields, rewrite, problem, fuse=fuse, accumulates="sum",
                reduced_length=lambda entry, shape, dim: length_over(shape, dim)))
