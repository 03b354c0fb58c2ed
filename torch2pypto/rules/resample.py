"""The resample family: ``F.interpolate`` of a 3-D or 4-D input, each image one tile.

Resampling is separable: along each spatial dim, output point j is a weighted sum of a few
source points (1 nearest, 2 linear, 4 bicubic, more antialiased or by area), the same for every
image. The host gets each dim's taps and weights once per shape from torch's own op on an
identity (:data:`RESAMPLING`, weights exactly torch's); the kernel picks an image's cols by
pypto.index_select and sums them weighted in FP32, then its rows likewise
(:func:`walks.resampled_kernel`), one launch. 5-D inputs, trilinear, inputs that are not
contiguous and images over a tile's budget run torch.
"""

from __future__ import annotations

from typing import Mapping

from torch2pypto.rules import walks, wrappers
from torch2pypto.rules.calls import literal, rejection, replacement, signature_problem, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.schema.entry import Entry, Fields
from torch2pypto.schema.family import Family, is_float_dtype, register

PARAMS = ("input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias")
RESAMPLED_TILE = copied("resample", "_resampled_tile")
RESAMPLING = copied("resample", "_resampling_taps")
RESAMPLED = copied("resample", "_resampled", first="_RESAMPLED_MODES")
# modes no kernel here resamples, and why
TORCH_MODES = {"trilinear": "trilinear resamples the three dims of a 5-D input, the kernel two"}


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if entry.pypto != "index_select":
        return "a resampling picks source points with pypto.index_select"
    if problem := signature_problem(entry, "a resampling", PARAMS):
        return problem
    if not all(map(is_float_dtype, entry.dtypes)):
        return "a resampling weighs float inputs (torch resamples no integers)"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site)
    if rejected:
        return rejected
    mode = literal(site.args["mode"]) if "mode" in site.args else site.entry.param("mode").default
    if mode in TORCH_MODES:
        return Unsupported(TORCH_MODES[mode])
    entry = site.entry
    return Converted(replacement(site, f"pypto_{entry.op}"), definitions(entry), "pypto.index_select", wrapper_params(entry))


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    kernel = walks.resampled_kernel(
        f"{entry.op}_kernel", "Each [h, w] image resampled: its cols, then its rows, weighted sums of the points pypto.index_select picks, in FP32.")
    params = wrapper_params(entry)
    body = (
        "(rows, row_weights, row_taps), (cols, col_weights, col_taps) = taps\n"
        "h, w, out_h, out_w = input.shape[-2] if input.dim() == 4 else 1, input.shape[-1], row_weights.shape[0], col_weights.shape[1]\n"
        "shape = (*input.shape[:2], out_h, out_w) if input.dim() == 4 else (*input.shape[:2], out_w)\n"
        "out = torch.empty(shape, dtype=input.dtype, device=input.device)\n"
        f"kernel = {entry.op}_kernel(_PYPTO_DTYPES[input.dtype], h, w, out_h, out_w, row_taps, col_taps)\n"
        "_launch(kernel, input.view(-1, w), cols, col_weights, rows, row_weights, out.view(-1, out_w))\n"
        "return out\n"
    )
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params),
        "each image's cols, then rows, weighted sums of the source points pypto.index_select picks, by torch's weights",
        "input", wrappers.torch_call(entry, params), "taps", body, ("_resampled", f"{entry.op}_kernel"),
        prologue=f"taps = _on_kernel_path(input, dtypes={wrappers.dtypes_tuple(entry)}) and _resampled(\n"
                 "    input, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)\n",
    )
    return RESAMPLED_TILE, RESAMPLING, RESAMPLED, kernel, wrapper


register(Family("resample", Fields, rewrite, problem))
