"""same-name: ``torch.<op>(input[, other])`` becomes a kernel around ``pypto.<op>``.

Unary ops map element by element; binary ops take a tensor (broadcast on the host) or a
Python number as ``other``. Ops PyPTO documents as FP32-only (``compute = "float32"``) cast
in and out inside the kernel.
"""

from __future__ import annotations

from torch2pypto.mapping import Entry
from torch2pypto.rules import codegen
from torch2pypto.rules.calls import call_args, rejection, replacement, signature, wrapper_params
from torch2pypto.rules.codegen import Definition
from torch2pypto.rules.site import CallSite, Converted, Unsupported


def rewrite(site: CallSite) -> Converted | Unsupported:
    rejected = rejection(site)
    if rejected:
        return rejected
    entry = site.entry
    wrapper = f"pypto_{entry.op}"
    return Converted(replacement(site, wrapper), definitions(entry), f"pypto.{entry.pypto}", wrapper_params(entry))


def definitions(entry: Entry) -> tuple[Definition, ...]:
    """The kernels and the wrapper for one same-name op."""
    operands = [p for p in wrapper_params(entry) if "Tensor" in p.kinds]
    if len(operands) == 1:
        return (_kernel(entry, ("x",)), _unary_wrapper(entry))
    kernels = [_kernel(entry, ("x", "other"))]
    if "Number" in operands[1].kinds:
        kernels.append(_kernel(entry, ("x",), scalar=True))
    return (*kernels, _binary_wrapper(entry))


def _api(entry: Entry) -> str:
    return entry.torch_function or entry.apis[0]


def _fp32_note(entry: Entry) -> str:
    return ", computed in FP32" if entry.compute == "float32" else ""


def _torch_call(entry: Entry) -> str:
    params = wrapper_params(entry)
    if entry.torch_function:
        return f"{entry.torch_function}({call_args(params)})"
    first, *rest = params
    return f"{first.name}.{entry.op}({call_args(tuple(rest))})"


def _kernel(entry: Entry, operands: tuple[str, ...], scalar: bool = False) -> Definition:
    name = f"{entry.op}_scalar_kernel" if scalar else f"{entry.op}_kernel"
    tiles = [f"{o}_tile" for o in operands]
    call = f"pypto.{entry.pypto}({', '.join(tiles + (['other'] if scalar else []))})"
    if entry.compute == "float32":
        body = "".join(
            f"if dtype != pypto.DT_FP32:\n    {t} = pypto.cast({t}, pypto.DT_FP32)\n" for t in tiles
        )
        body += f"result = {call}\nif dtype != pypto.DT_FP32:\n    result = pypto.cast(result, dtype)\n"
    else:
        body = f"result = {call}\n"
    other = " with a Python number as `other`" if scalar else ""
    fp32 = " (computed in FP32)" if entry.compute == "float32" else ""
    return codegen.row_kernel(
        name,
        f"pypto.{entry.pypto} on [rows, cols] tiles{other}{fp32}.",
        "dtype, cols, other" if scalar else "dtype, cols",
        {o: "dtype" for o in operands},
        "dtype",
        body,
        buffers=len(operands) + 1,
    )


def _unary_wrapper(entry: Entry) -> Definition:
    params = wrapper_params(entry)
    first = params[0].name
    source = f'''\
def pypto_{entry.op}({signature(params)}):
    """{_api(entry)} on a PyPTO kernel.

    same-name: pypto.{entry.pypto}{_fp32_note(entry)}.
    """
    if not _on_kernel_path({first}):
        return {_torch_call(entry)}
    x = _as_rows({first})
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch({entry.op}_kernel(_PYPTO_DTYPES[x.dtype], x.shape[1]), x, out)
    return out.reshape({first}.shape)
'''
    return Definition(f"pypto_{entry.op}", source, ("_on_kernel_path", "_as_rows", "_launch", f"{entry.op}_kernel"))


def _binary_wrapper(entry: Entry) -> Definition:
    params = wrapper_params(entry)
    first, second = params[0].name, params[1].name
    scalar_ok = "Number" in params[1].kinds
    scalar_branch = (
        f"""\
    if not isinstance({second}, torch.Tensor):
        if isinstance({second}, bool) or not _on_kernel_path({first}):
            return {_torch_call(entry)}
        x = _as_rows({first})
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        _launch({entry.op}_scalar_kernel(_PYPTO_DTYPES[x.dtype], x.shape[1], {second}), x, out)
        return out.reshape({first}.shape)
"""
        if scalar_ok
        else ""
    )
    source = f'''\
def pypto_{entry.op}({signature(params)}):
    """{_api(entry)} on a PyPTO kernel.

    same-name: pypto.{entry.pypto}{_fp32_note(entry)}. Operands broadcast on the host; mixed
    dtypes stay torch, which keeps torch's type promotion.
    """
{scalar_branch}    if {first}.dtype != {second}.dtype or not _on_kernel_path({first}, {second}):
        return {_torch_call(entry)}
    shape = torch.broadcast_shapes({first}.shape, {second}.shape)
    x, y = _as_rows({first}.expand(shape)), _as_rows({second}.expand(shape))
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch({entry.op}_kernel(_PYPTO_DTYPES[x.dtype], x.shape[1]), x, y, out)
    return out.reshape(shape)
'''
    requires = ["_on_kernel_path", "_as_rows", "_launch", f"{entry.op}_kernel"]
    if scalar_ok:
        requires.append(f"{entry.op}_scalar_kernel")
    return Definition(f"pypto_{entry.op}", source, tuple(requires))
