"""The conv family: ``F.conv1d`` / ``F.conv2d`` (and ``nn.Conv1d`` / ``nn.Conv2d``) as one
``pypto.matmul`` per batch, accumulated in FP32.

A convolution whose stride equals its kernel size, unpadded, undilated and ungrouped, is a
contraction: output [o, p] of one image is the weight [o, c * taps] times the image's patches
[c * taps, p], one column per output position. A kernel of one tap (pointwise: ``kernel_size=1``)
reads the image in place as that [c, positions] matrix, or as its transpose where the input is
channels-last (``x.transpose(1, 2)`` fed to a ``Conv1d``); a patch embedding (ViT's
``Conv2d(stride=patch)``) gathers its non-overlapping patches into columns on the host first, a
copy of the input's size (docs/host-copies.md). A conv of stride 1 and zero padding up to
kernel - 1 runs on the kernels of shifted reads (:mod:`shifted`): ungrouped a matmul per tap
(conv2d: per output row), depthwise (``groups`` = channels: Mamba's causal conv, conformers',
ConvNeXt's) on the vector cores. A call whose stride or dilation may be other than 1 (ResNet's
downsampling, an audio encoder's ``stride=config.conv_stride[i]``) calls ``pypto_<op>_strided``,
whose kernels of shifted reads take any stride and dilation with zero padding up to dilation *
(kernel - 1), so that the stride-1 wrapper and its kernels stay as they are. Every other form
(other groups, wider zero padding) runs torch, as nn.ConvNd does for its ``padding_mode``. ``dims``: the
convolution's spatial rank (1 or 2)."""

from __future__ import annotations

import dataclasses
import math
import textwrap
from typing import Literal, Mapping

from torch2pypto.rules import templates, wrappers
from torch2pypto.rules.calls import fallback, rejection, replacement, source_of, static_value, wrapped, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.shifted import dense_kernel, depthwise_kernel
from torch2pypto.rules.kernel_ir import Assign, Do, Stmt, call, items, loop, pypto
from torch2pypto.rules.site import CallSite, Converted, Expression, Unsupported
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, register

FP32 = templates.FP32
PARAMS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups", "padding_mode")


@dataclasses.dataclass(frozen=True)
class ConvFields(Fields):
    """The table fields the conv family reads."""

    dims: Literal[1, 2] = field("the convolution's spatial rank: 1 (conv1d) or 2 (conv2d)", 1)


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if tuple(p.name for p in entry.params) != PARAMS:
        return f"a conv op's parameters are {', '.join(PARAMS)} (padding_mode: nn.ConvNd's, keyword-only)"
    if entry.pypto != "matmul":
        return f"the conv's op is pypto.matmul, not pypto.{entry.pypto}"
    if set(entry.fallback) != {"padding_mode"}:
        return "fallback: padding_mode only (the wrapper checks the other forms at run time)"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    if fallback(site) or _static_form(site) or not _strided(site):
        return fallback(site) or _static_form(site) or wrapped(site, definitions)
    entry = site.entry
    return rejection(site) or Converted(replacement(site, f"pypto_{entry.op}_strided"), strided_definitions(entry),
                                        f"pypto.{entry.pypto}", wrapper_params(entry))


_FORMS = {"padding": (0, "valid"), "dilation": (1,), "groups": (1,)}
CONSTRUCTOR = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias", "padding_mode")
_WINDOWS = ("a conv of overlapping, spread or grouped windows is no contraction of the input (kernel: stride = kernel "
            "size, no padding, dilation or groups)")
_SHIFTED = ("a conv{dims}d other than a contraction runs on the kernels of shifted reads only with zero padding of at "
            "most dilation * (kernel_size - 1), and groups 1 or one filter per channel (groups = in_channels = out_channels)")


def _static_form(site: CallSite) -> Unsupported | None:
    """Why a call stays torch whose padding, dilation or groups are other than the kernel takes, or
    not known when translating (the weight's kernel size and the stride are checked at run time);
    an nn.ConvNd's call also unless its construction shows a form the kernel computes (a kernel
    size of 1 with a stride of 1, or a stride given as the kernel size is: a patch embedding).
    A call the contraction does not compute may be the shifted reads' (:func:`_shifted_form`)."""
    built = {CONSTRUCTOR[k] if isinstance(k, int) and k < len(CONSTRUCTOR) else k: v for k, v in site.built.items()}
    given = {name: _given(site, built, name) for name in ("stride", *_FORMS)}
    dims = site.entry.fields.dims
    if given["groups"] not in (Ellipsis, 1):
        return _shifted_form(built, given, dims)
    return _contraction_form(built, given) and _shifted_form(built, given, dims)


def _contraction_form(built: Mapping[str, object], given: Mapping[str, object]) -> Unsupported | None:
    """Why a call is no contraction the kernel computes (see :func:`_static_form`)."""
    for name, takes in _FORMS.items():
        value = given[name]
        if isinstance(value, Expression):
            return Unsupported(f"{name}={value.text}: known at run time only; {_WINDOWS}")
        if value is not Ellipsis and value not in takes and not (isinstance(value, tuple) and set(value) <= set(takes)):
            return Unsupported(f"{name}={value!r}: {_WINDOWS}")
    if not built or "kernel_size" not in built or built["kernel_size"] is Ellipsis:
        return None  # a function's call, or constructions that differ: the wrapper checks at run time
    taps, stride = built["kernel_size"], built.get("stride", 1)
    if _same(taps, 1) and _same(stride, 1) or _same(stride, taps):
        return None
    unknown = "not known to be one size when translating; " if isinstance(stride, Expression) or isinstance(taps, Expression) else ""
    return Unsupported(f"stride={_shown(stride)} of kernel_size={_shown(taps)}: {unknown}{_WINDOWS}")


def _strided(site: CallSite) -> bool:
    """Whether a call's stride or dilation may be other than 1 (``pypto_<op>_strided`` computes it):
    given so, known at run time only or by constructions that differ, unless a construction shows a
    patch embedding (a stride given as the kernel size is, unpadded and undilated)."""
    built = {CONSTRUCTOR[k] if isinstance(k, int) and k < len(CONSTRUCTOR) else k: v for k, v in site.built.items()}
    stride, dilation, padding = (_given(site, built, name) if name in built or not built and name in site.args else default
                                 for name, default in (("stride", 1), ("dilation", 1), ("padding", 0)))
    unpadded = padding == "valid" or _same(padding, 0)
    if built and "stride" in built and _same(stride, built.get("kernel_size", Ellipsis)) and _same(dilation, 1) and unpadded:
        return False
    return not (_same(stride, 1) and _same(dilation, 1))


def _given(site: CallSite, built: Mapping[str, object], name: str) -> object:
    """Argument ``name`` as the call or the module's constructions give it: a literal, an
    :class:`Expression` known at run time only, or ``...`` (not given, or constructions that differ)."""
    value = built.get(name, Ellipsis) if name in built else static_value(site, name)
    if value is Ellipsis and not built and name in site.args:  # a function's argument of no literal
        value = Expression(source_of(site.args[name]).strip())
    return value


def _shifted_form(built: Mapping[str, object], given: Mapping[str, object], dims: int) -> Unsupported | None:
    """Why a conv stays torch on the kernels of shifted reads too: a grouped construction whose
    channels are not its groups, a stride or dilation below 1, a padding wider than the kernel and
    its dilation allow. Groups, strides, dilations and padding known at run time only, and a
    function's groups, the wrapper checks against the weight."""
    reason = _SHIFTED.format(dims=dims)
    groups = given["groups"]
    for channels in ("in_channels", "out_channels") if groups not in (Ellipsis, 1) else ():
        if built and built.get(channels, Ellipsis) != groups:
            return Unsupported(f"groups={_shown(groups)} of {channels}={_shown(built.get(channels, Ellipsis))}: {reason}")
    for name in ("stride", "dilation"):
        value = given[name]
        if any(isinstance(v, int) and v < 1 for v in (value if isinstance(value, tuple) else (value,))):
            return Unsupported(f"{name}={value!r}: {reason}")
    padding, taps, dilation = given["padding"], built.get("kernel_size", Ellipsis), given["dilation"]
    pads, sizes, spreads = ((v if isinstance(v, tuple) else (v,)) for v in (padding, taps, 1 if dilation is Ellipsis else dilation))
    per_dim = (values * dims if len(values) == 1 else values for values in (pads, sizes, spreads))
    for pad, size, spread in zip(*per_dim):
        reach = spread * (size - 1) if isinstance(size, int) and isinstance(spread, int) else None
        if isinstance(pad, int) and (pad < 0 or reach is not None and pad > reach):
            shown = "" if spread == 1 else f" and dilation={_shown(dilation)}"
            return Unsupported(f"padding={padding!r} of kernel_size={_shown(taps)}{shown}: {reason}")
    return None


def _shown(value: object) -> str:
    """A conv argument as a reason shows it: its source, its literal, ``...`` where constructions differ."""
    return value.text if isinstance(value, Expression) else "..." if value is Ellipsis else repr(value)


def _same(stride: object, taps: object) -> bool:
    """Whether a stride and a kernel size, each an int, a tuple or one expression, are one size."""
    if isinstance(stride, Expression) or isinstance(taps, Expression):
        return stride == taps
    a, b = (tuple(v) if isinstance(v, (tuple, list)) else (v,) for v in (stride, taps))
    return (a * len(b) if len(a) == 1 else a) == (b * len(a) if len(b) == 1 else b)


def kernel(entry: Entry, bias: bool) -> Definition:
    """A factory ``name(dtype, out_dtype, k, n, rows, transposed)``: per image, the weight [o, k]
    (row tiles of a dynamic o) times the image's columns [k, n] (``transposed``: stored as
    [n, k]), plus one bias value per row."""
    name = f"{entry.op}{'_bias' if bias else ''}_kernel"
    setup, store = templates.casting("result", FP32, "out_dtype")
    params = [templates.tensor("a", items("pypto.DYNAMIC", "k"), "dtype"), templates.tensor("b", items("pypto.DYNAMIC", "b_valid[1]"), "dtype")]
    valid_rows = "(m - i * rows).min(rows)"
    body: list[Stmt] = [
        Do(pypto("set_cube_tile_shapes", items("rows", "rows"), "k_tiles", "n_tiles")),
        Assign("a_tile", pypto("view", "a", items("rows", "k16"), items("i * rows", "0"), valid_shape=items(valid_rows, "k"))),
        Assign("b_tile", pypto("view", "b", "b_tile_shape", items("j * b_valid[0]", "0"), valid_shape="b_valid")),
        Assign("result", pypto("matmul", "a_tile", "b_tile", FP32, b_trans="transposed")),
        Do(pypto("set_vec_tile_shapes", "vec_rows", "vec_cols")),
    ]
    if bias:
        params.append(templates.tensor("bias", items("pypto.DYNAMIC", "1"), "dtype"))
        body += [
            Assign("bias_tile", pypto("view", "bias", items("rows", "1"), items("i * rows", "0"), valid_shape=items(valid_rows, "1"))),
            templates.to_fp32(["bias_tile"]),
            Assign("result", pypto("add", "result", "bias_tile"), "one value per output channel, along the row"),
        ]
    body += [*store, Do(pypto("assemble", "result", items("j * m + i * rows", "0"), "out"))]
    params.append(templates.tensor("out", items("pypto.DYNAMIC", "n"), "out_dtype"))
    loops = [
        Assign("m", "a.shape[0]", "output channels"),
        loop("j", pypto("loop", "b.shape[0] // b_valid[0]", name='"images"'), templates.row_tiles("m", *body)),
    ]
    prelude = [
        Assign("k16, n16", "-(-k // 16) * 16, -(-n // 16) * 16", "the cube's 32-byte aligned tiles over the real k and n"),
        Assign("b_valid", "[n, k] if transposed else [k, n]", "one image's columns"),
        Assign("b_tile_shape", "[n16, k16] if transposed else [k16, n16]"),
        Assign("k_tiles, n_tiles", call("_cube_tiles", "k16", "n16", "dtype", "rows")),
        Assign("vec_rows, vec_cols", call("_tile_shape", "n16", "rows", "3", "(pypto.DT_FP32,)")),
        *setup,
    ]
    doc = (f"Per image, pypto.matmul of the weight's [rows, k] row tiles by the image's columns [k, n], accumulated "
           f"in FP32{', plus the bias of each output channel' if bias else ''}.")
    text = templates.factory(name, ["dtype, out_dtype, k, n, rows, transposed"], doc, prelude, params, loops, templates.CUBE)
    return Definition(name, text, ("_cube_tiles", "_tile_shape", "_annotated"))


CONV_TORCH = copied("conv", "_conv_torch")
CONV_TAKES = copied("conv", "_conv_takes", first="_conv_tensors")
CONV_COLUMNS = copied("conv", "_conv_columns")
CONV_SHIFTED = copied("conv", "_conv_shifted", last="_conv_strided")
CONV_PICKS = copied("conv", "_conv_picks")


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    """The kernels (with and without a bias) and the wrapper of a conv op, and its kernels of
    shifted reads (rules/shifted.py): depthwise and ungrouped."""
    dims = entry.fields.dims
    shifted = tuple(make(entry.op, bias, dims) for make in (depthwise_kernel, dense_kernel) for bias in (False, True))
    return (kernel(entry, False), kernel(entry, True), *shifted, CONV_SHIFTED, templates.CUBE_TILES, templates.CUBE_OPERANDS,
            CONV_TORCH, CONV_TAKES, CONV_COLUMNS, _wrapper(entry))


@per_entry
def strided_definitions(entry: Entry) -> tuple[Definition, ...]:
    """The definitions of a call whose stride or dilation may be other than 1: the wrapper
    ``pypto_<op>_strided``, whose kernels of shifted reads take any stride and dilation."""
    dims = entry.fields.dims
    shifted = tuple(make(entry.op, bias, dims, True) for make in (depthwise_kernel, dense_kernel) for bias in (False, True))
    return (kernel(entry, False), kernel(entry, True), *shifted, CONV_SHIFTED, CONV_PICKS, templates.CUBE_TILES,
            templates.CUBE_OPERANDS, CONV_TORCH, CONV_TAKES, CONV_COLUMNS, _wrapper(entry, True))


def _wrapper(entry: Entry, strided: bool = False) -> Definition:
    params = wrapper_params(entry)
    dims, op = entry.fields.dims, entry.op
    factory = "(_PYPTO_DTYPES[cols.dtype], _PYPTO_DTYPES[cols.dtype], w.shape[1], math.prod(positions), rows, transposed)"
    contraction = ("cols, positions, transposed = _conv_columns(batched, weight.shape[2:])\n"
                   "rows = _cube_rows(w.shape[0])\n"
                   "out = torch.empty(batched.shape[0] * w.shape[0], math.prod(positions), dtype=input.dtype, device=input.device)\n"
                   f"if bias is None:\n    _launch({op}_kernel{factory}, w, cols, out)\n"
                   f"else:\n    _launch({op}_bias_kernel{factory}, w, cols, _kept_contiguous(bias).reshape(-1, 1), out)\n")
    args = "input, weight, bias, stride, padding, dilation, groups"
    takes = f"_conv_takes({args}, {dims})"
    how = ("per image, pypto.matmul of the weight [out channels, channels * taps] by the image's columns, accumulated "
           "in FP32, the bias added per output channel; a pointwise kernel reads the input in place (channels-last: "
           "transposed), patches of a stride equal to the kernel are gathered on the host")
    kernels: tuple[str, ...] = (f"{op}_kernel", f"{op}_bias_kernel")
    shifted, shifted_kernels = _shifted_path(op, dims, args, strided)
    contraction = shifted + "else:\n" + textwrap.indent(contraction, "    ")
    takes = f"({takes} or _conv_{'strided' if strided else 'shifted'}({args}, {dims}) is not None)"
    how += (f"; a conv of {'any stride and dilation' if strided else 'stride 1'} and zero padding (depthwise, groups = channels, or ungrouped) sums its taps' reads "
            "of the input shifted by the tap, times the tap's weight (depthwise: each channel's, on the vector "
            "cores; ungrouped: a pypto.matmul per tap) in FP32, the padding's zeros never read")
    if strided:
        how += "; a strided row's columns picked in place by pypto.index_select"
    kernels += shifted_kernels
    body = (f"batched = input if input.dim() == {dims + 2} else input[None]\n"
            "w = _kept_contiguous(weight).reshape(weight.shape[0], -1)\n"
            f"{contraction}"
            "out = out.reshape(batched.shape[0], weight.shape[0], *positions)\n"
            f"return out if input.dim() == {dims + 2} else out[0]\n")
    how += f". Other padding, {'' if strided else 'dilation, '}groups{'' if strided else ' or strides'}, and padding_mode, run torch"
    torch_call = (f"_conv_torch({entry.torch_function}, input, weight, bias, stride, padding, dilation, groups, "
                  "padding_mode)")
    guard = f"{takes} and padding_mode == \"zeros\""
    wrapper = wrappers.wrapper(
        entry, f"pypto_{op}{'_strided' if strided else ''}", wrappers.signature(params), how, "input, weight, bias", torch_call, f"({guard})",
        body, ("_conv_torch", "_conv_takes", "_conv_columns", "_cube_operands", "_cube_tiles", *kernels),
    )
    return dataclasses.replace(wrapper, imports=("math",))


def _shifted_path(op: str, dims: int, args: str, strided: bool = False) -> tuple[str, tuple[str, ...]]:
    """The wrapper's launch of the kernels of shifted reads where ``_conv_shifted`` takes the call
    (``strided``: ``_conv_strided``, its columns picked by ``_conv_picks``), and the names it needs."""
    sizes = ("batched.shape[1], x.shape[1], weight.shape[2], left, width" if dims == 1
             else "batched.shape[1], *batched.shape[2:], *weight.shape[2:], top, left, height, width")
    if strided:
        sizes = "batched.shape[1], *batched.shape[2:], *weight.shape[2:], *shifted"
    shape = f"(_PYPTO_DTYPES[x.dtype], {sizes})"
    kind = "_strided" if strided else ""
    picks = "_conv_picks(width, shifted[-2], x.device), " if strided else ""
    launches = ("if groups != 1:  # one filter per channel: each channel's row times its taps\n"
                f"    if bias is None:\n        _launch({op}_depthwise{kind}_kernel{shape}, x, w, {picks}out)\n"
                f"    else:\n        _launch({op}_depthwise_bias{kind}_kernel{shape}, x, w, _kept_contiguous(bias).reshape(-1, 1), {picks}out)\n"
                "else:  # ungrouped: a matmul per tap\n"
                f"    factory = (_PYPTO_DTYPES[x.dtype], {sizes}, _cube_rows(weight.shape[0]))\n"
                f"    if bias is None:\n        _launch({op}_taps{kind}_kernel(*factory), _conv_taps(weight), x, {picks}out)\n"
                f"    else:\n        _launch({op}_taps_bias{kind}_kernel(*factory), _conv_taps(weight), x, _kept_contiguous(bias).reshape(-1, 1), {picks}out)")
    outs, plane = ("left, width", "width") if dims == 1 else ("top, height, left, width", "height * width")
    if strided:
        outs = "left, width, _, _" if dims == 1 else "top, height, _, _, left, width, _, _"
    check = "_conv_strided" if strided else "_conv_shifted"
    text = (f"shifted = None if _conv_takes({args}, {dims}) else {check}({args}, {dims})\n"
            + ("if shifted is not None:  # zero padding, any stride and dilation: the kernels of shifted reads\n" if strided else
               "if shifted is not None:  # stride 1, zero padding: the kernels of shifted reads\n") +
            f"    {outs} = shifted\n"
            f"    positions = [{plane.replace(' * ', ', ')}]\n"
            f"    x = batched.contiguous().reshape(-1, {'batched.shape[-1]' if dims == 1 else 'batched.shape[-2] * batched.shape[-1]'})\n"
            f"    out = torch.empty(batched.shape[0] * weight.shape[0], {plane}, dtype=input.dtype, device=input.device)\n"
            + textwrap.indent(launches, "    ") + "\n")
    names = tuple(f"{op}_{form}{bias}{kind}_kernel" for form in ("depthwise", "taps") for bias in ("", "_bias"))
    return text, names + ("_conv_shifted", *(("_conv_picks",) if strided else ()))


def reduced_length(entry: Entry, shape: tuple[int, ...], dim) -> int:
    """A conv's K: the weight's channels times taps (the sample hint's weight; else the input's channels)."""
    shapes = [tuple(s) for s in entry.sample.shapes]
    if tuple(shape) in shapes and entry.sample.y:
        return math.prod(entry.sample.y[shapes.index(tuple(shape))][1:])
    return shape[1] if len(shape) > 1 else 1


def wrapper_names(entry: Entry) -> tuple[str, ...]:
    """A conv's wrappers: ``pypto_<op>`` and ``pypto_<op>_strided``."""
    return f"pypto_{entry.op}", f"pypto_{entry.op}_strided"


register(Family("conv", ConvFields, rewrite, problem, wrapper_names=wrapper_names, accumulates="sum", reduced_length=reduced_length))
