"""The cube family: ``pypto.matmul`` on the cube unit, accumulated in FP32 (matmul, mm, bmm, linear, addmm).

The first two tensor parameters are multiplied; a third (linear's bias) is added to every row.
``args = { b_trans = "True" }``: the second is given transposed ([n, k], linear's weight).
``args = { bias = "input" }``: the bias is that parameter, the first (addmm's input), and the
other two are multiplied; a bias of one value per column takes the kernel, other shapes run
torch. Number parameters (addmm's beta, alpha) are ``fallback``: the kernel takes their defaults.
``rank``: the rank torch requires of both operands, batch dims equal (mm 2, bmm 3). The host
broadcasts batch dims as torch's matmul does and folds them into rows
(:data:`templates.CUBE_OPERANDS`), reading the operands in place (a transposed one through its
row-major base); kernels walk a dynamic M in row tiles, K and N static and of any size. Calls
torch refuses (mixed dtypes, mismatched K, other ranks) run torch, which raises as it does.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Mapping

from torch2pypto.rules import templates, wrappers
from torch2pypto.rules.calls import fallback, fallback_checks, wrapped, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.rules.steps import Apply, Step
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, register


@dataclasses.dataclass(frozen=True)
class CubeFields(Fields):
    """The table fields the cube family reads."""

    args: Mapping[str, str] = field("b_trans = \"True\": a transposed weight (linear); bias = the first parameter when it is the bias (addmm's input)", {})
    rank: Literal[2, 3] | None = field("the operands' rank: 2 (mm) or 3 (bmm)")


FP32 = templates.FP32
MAX_DIM = 65535  # the longest ND row a matmul input may have (runtime.cube._cube_takes's bound)

CUBE_TAKES = copied("cube", "_cube_takes")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    params = _tensors(entry)
    for p in wrapper_params(entry):
        if "Tensor" not in p.kinds and p.name not in entry.fallback:
            return f"parameter {p.name!r} is no tensor and neither rejected nor fallback"
    if len(params) not in (2, 3) or not all(p.required for p in params[:2]):
        return "a cube op multiplies two required tensors and may add a third (bias)"
    if entry.pypto != "matmul":
        return f"the cube's op is pypto.matmul, not pypto.{entry.pypto}"
    if set(entry.fields.args) - {"b_trans", "bias"} or entry.fields.args.get("b_trans", "False") not in ("True", "False"):
        return 'args: only b_trans = "True" or "False", and bias'
    transposed = _transposed(entry)
    first = "bias" in entry.fields.args
    if first and (entry.fields.args["bias"] != entry.params[0].name or transposed or len(params) != 3):
        return "bias names the first parameter, added to the product of the other two (not transposed)"
    if len(params) == 3 and not first and (params[2].default is not None or not transposed):
        return "a bias (default None) is added to a product with a transposed weight (linear)"
    if entry.fields.rank and transposed:
        return "rank (2 or 3) is the operands' rank of matmul-like ops, not of linear"
    return None


def _tensors(entry: Entry) -> tuple:
    """The product's two operands, then the bias if any (addmm's first parameter last)."""
    tensors = tuple(p for p in wrapper_params(entry) if "Tensor" in p.kinds)
    return (*tensors[1:], tensors[0]) if "bias" in entry.fields.args else tensors


def _transposed(entry: Entry) -> bool:
    return entry.fields.args.get("b_trans") == "True"


def rewrite(site: CallSite) -> Converted | Unsupported:
    return fallback(site) or wrapped(site, definitions)


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    """The kernels (one right matrix, a stack of them; with a bias) and the wrapper of a cube op."""
    transposed = _transposed(entry)
    product = Apply("result", Step("matmul", (("b_trans", "transposed"),)), ("a_tile", "b_tile", FP32))
    what = "the transposed weight [n, k]" if transposed else "b [k, n] (transposed: read from its transpose [n, k])"
    variants = [(f"{entry.op}_kernel", False, False)]
    if len(_tensors(entry)) == 3 and not "bias" in entry.fields.args:
        variants.append((f"{entry.op}_bias_kernel", False, True))
    if not transposed and entry.fields.rank != 2:
        variants.append((f"{entry.op}_stacked_kernel", True, False))
    if "bias" in entry.fields.args:  # addmm: always a bias, one right matrix or a stack (baddbmm)
        variants = [(n.replace("_kernel", "_bias_kernel"), batched, True) for n, batched, _ in variants]
    kernels = []
    for name, batched, bias in variants:
        doc = (f"pypto.matmul of [rows, k] row tiles by {'one of a stack of ' if batched else ''}{what}, "
               f"accumulated in FP32{', plus the bias' if bias else ''}.")
        epilogue = [Apply("result", Step("add"), ("result", "bias_tile"))] if bias else []
        kernels.append(templates.cube_kernel(name, doc, product, epilogue, batched=batched, bias=bias))
    return (*kernels, templates.CUBE_TILES, templates.CUBE_OPERANDS, CUBE_TAKES, _wrapper(entry, [v[0] for v in variants]))


def _wrapper(entry: Entry, kernels: list[str]) -> Definition:
    params = wrapper_params(entry)
    a, b, *bias = (p.name for p in _tensors(entry))
    transposed = _transposed(entry)
    takes = [a, b, *(f"bias={n}" for n in bias), *([f"rank={entry.fields.rank}"] if entry.fields.rank else []),
             *(["transposed=True"] if transposed else [])]
    first = "bias" in entry.fields.args
    factory = "(_PYPTO_DTYPES[a.dtype], _PYPTO_DTYPES[out.dtype], a.shape[1], n, rows, transposed)"
    if transposed:  # linear: [..., k] by one weight [n, k]
        body = (f"a, b, _, _, transposed = _cube_operands({a}.reshape(-1, {a}.shape[-1]), {b}, transposed=True)\n"
                f"n = {b}.shape[0]\n")
        launch = f"_launch({kernels[0]}{factory}, a, b, out)\n"
        if bias:
            launch = (f"if {bias[0]} is None:\n    {launch}else:\n"
                      f"    _launch({kernels[1]}{factory}, a, b, _kept_contiguous({bias[0]}).reshape(1, n), out)\n")
        result = f"out.reshape(*{a}.shape[:-1], n)"
        how = "pypto.matmul of the input's rows by the transposed weight, accumulated in FP32"
    else:  # a 1-D operand is a row (a) or a column (b), its dim dropped from the result
        body = (f"a, b, batch, stacked, transposed = _cube_operands({a}[None] if {a}.dim() == 1 else {a},\n"
                f"                                                  {b}[:, None] if {b}.dim() == 1 else {b})\n"
                f"n = {b}.shape[-1] if {b}.dim() > 1 else 1\n")
        kernel = f"({kernels[1]} if stacked else {kernels[0]})" if len(kernels) > 1 else kernels[0]
        launch = f"kernel = {kernel}{factory}\n_launch(kernel, a, b, out)\n"
        if first:  # addmm's bias: one value per column
            launch = launch.replace("a, b, out", f"a, b, _kept_contiguous({bias[0]}).reshape(1, n), out")
        result = f"out.reshape([*batch, *{a}.shape[-2:-1], *{b}.shape[1:][-1:]])"  # [] for a dot of 1-D operands
        how = "pypto.matmul of row tiles, accumulated in FP32"
    m = "a.shape[0] // math.prod(batch) if stacked else a.shape[0]" if not transposed else "a.shape[0]"
    body += (f"rows = _cube_rows({m})\n"
             f"out = torch.empty(a.shape[0], n, dtype={a}.dtype, device={a}.device)\n{launch}return {result}\n")
    how += (". Batch dims broadcast and fold into rows on the host; the operands are read in place, K and N of "
            "any size. Operands torch refuses (mixed dtypes, mismatched shapes) run torch")
    if first:
        how += f"; so does a bias ({bias[0]}) of another shape than [n]" + "".join(
            f", {p} other than {entry.param(p).default}" for p in entry.fallback)
    guard = " and ".join([f"_cube_takes({', '.join(takes)})", *fallback_checks(entry)])
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), how, ", ".join(p.name for p in params if "Tensor" in p.kinds),
        wrappers.torch_call(entry, params), f"({guard})" if entry.fallback else guard, body,
        ("_cube_takes", "_cube_operands", "_cube_tiles", *kernels),
    )
    return dataclasses.replace(wrapper, imports=("math",))


def reduced_length(entry: Entry, shape: tuple[int, ...], dim) -> int:
    """A matmul's K: its input's last dim."""
    return shape[-1]


register(Family("cube", CubeFields, rewrite, problem, accumulates="sum", reduced_length=reduced_length))
