"""The host wrapper template every family fills in.

A wrapper takes the torch signature, runs the original torch expression wherever a kernel
cannot (not on an NPU nor under the interpreter, dtypes or operands the kernel does not take),
and otherwise launches the kernel through ``_with_torch_grad``, so that a result computed by a
kernel still carries torch's gradient.
"""

from __future__ import annotations

import textwrap

from torch2pypto.rules.codegen import Definition, filled
from torch2pypto.schema.entry import Entry, Param

PRELUDE_NEEDS = ("_on_kernel_path", "_launch", "_with_torch_grad")


def wrapper(
    entry: Entry,
    name: str,
    params: str,
    how: str,
    operands: str,
    torch_call: str,
    guard: str,
    kernel_path: str,
    requires: tuple[str, ...],
    prologue: str = "",
    fallback: str | None = None,
    launched: str | None = None,
) -> Definition:
    """``def name(params)``: torch on ``torch_call`` unless ``guard``, else ``kernel_path``.

    ``operands`` are the arguments autograd sees (the tensors, and numbers in their places);
    ``kernel_path`` is the body of a function of them returning the kernel's result;
    ``fallback`` what the wrapper returns unless ``guard`` (default: torch_path on the operands);
    ``launched`` what it returns otherwise (default: kernel_path through ``_with_torch_grad``).
    """
    source = f'''\
def {name}({params}):
    """{api(entry)} on a PyPTO kernel.

    {filled(f"{entry.category}: {how}.", 92, subsequent_indent="    ")}
    """
{textwrap.indent(prologue, "    ")}
    def torch_path({operands}):
        return {torch_call}

    if not {guard}:
        return {fallback or f"torch_path({operands})"}

    def kernel_path({operands}):
{textwrap.indent(kernel_path, " " * 8)}
    return {launched or f"_with_torch_grad(kernel_path, torch_path, {operands})"}
'''
    return Definition(name, source.replace("\n\n\n", "\n\n"), (*PRELUDE_NEEDS, *requires))


def api(entry: Entry) -> str:
    """How the docstring names the torch op (a module-only entry: its module)."""
    return entry.torch_function or (*entry.apis, *entry.modules)[0]


def dtypes_tuple(entry: Entry) -> str:
    """The entry's dtypes as a tuple of torch dtypes, as a guard spells them."""
    return f"({', '.join(f'torch.{d}' for d in entry.dtypes)}{',' if len(entry.dtypes) == 1 else ''})"


def torch_call(entry: Entry, params: tuple[Param, ...], unless_none: tuple[str, ...] = (), rest: bool = False) -> str:
    """The torch expression a wrapper falls back to, passing ``params`` by their names; those
    ``unless_none`` names only when not None (torch refuses ``scatter(..., reduce=None)``);
    ``rest``: and the wrapper's ``**kwargs``, keywords its kernel does not know, which torch
    takes or refuses as it would (Family.takes_rest)."""
    call = _torch_call(entry, params, unless_none)
    return f"{call[:-1]}, **kwargs)" if rest else call


def _torch_call(entry: Entry, params: tuple[Param, ...], unless_none: tuple[str, ...]) -> str:
    if entry.forward:  # a module's call: its own forward, which keeps its state as torch does
        others = tuple(p for p in params if p.name != entry.forward)
        return f"{entry.forward}({params[0].name}) if {entry.forward} is not None else {_function_call(entry, others, unless_none)}"
    return _function_call(entry, params, unless_none)


def _function_call(entry: Entry, params: tuple[Param, ...], unless_none: tuple[str, ...]) -> str:
    first, *rest = params
    if entry.torch:  # a tensor form: its parameters are its parent's by name (clamp's max)
        return f"{entry.torch}({', '.join([first.name, *(f'{p.name}={p.name}' for p in rest)])})"
    if entry.torch_function:
        return f"{entry.torch_function}({call_args(params, unless_none)})"
    return f"{first.name}.{entry.apis[0].rsplit('.', 1)[1]}({call_args(tuple(rest), unless_none)})"


def signature(params: tuple[Param, ...], rest: bool = False) -> str:
    """Parameter list text for a wrapper, mirroring torch's defaults and keyword-only marker;
    ``rest``: and ``**kwargs``, the keywords the wrapper hands to torch (see :func:`torch_call`)."""
    parts: list[str] = []
    for p in params:
        if p.keyword_only and "*" not in parts:
            parts.append("*")
        parts.append(p.name if p.required else f"{p.name}={p.default!r}")
    return ", ".join([*parts, *(["**kwargs"] if rest else [])])


def call_args(params: tuple[Param, ...], unless_none: tuple[str, ...] = ()) -> str:
    """Argument text passing a wrapper's parameters on to torch under the same names (those
    ``unless_none`` names as keywords only when not None)."""
    given = [p.name if p.required else f"{p.name}={p.name}" for p in params if p.name not in unless_none]
    given += [f"**({{}} if {n} is None else {{{n!r}: {n}}})" for n in unless_none if n in {p.name for p in params}]
    return ", ".join(given)


def region_fallback(wrapper: str, where: str, params: list[str], torch_source: str, what: str = "expression") -> Definition:
    """``_torch_<region>``: a fused region's original torch statements (``torch_source``) over
    its wrapper's parameters, which the wrapper runs where its kernel does not."""
    name = f"_torch_{wrapper.removeprefix('pypto_').rpartition('_')[0]}"
    source = f'def {name}({", ".join(params)}):\n    """{where}: the original torch {what}."""\n' + textwrap.indent(torch_source, "    ")
    return Definition(name, source)


ROWS = "a = {x}.reshape(-1, k).contiguous()  # leading dims fold into rows: a view of a contiguous x\n"


def region_rows(x: str, weight: str, launch: str, pick: str = "") -> str:
    """The kernel path of a cube region of one result: ``x``'s rows [rows, k] against ``weight``
    [n, k] into ``out`` [rows, n] (``launch``, after ``pick``), returned in x's leading dims."""
    return (
        f"n, k = {weight}.shape\n" + ROWS.format(x=x)
        + pick + f"out = torch.empty(a.shape[0], n, dtype={x}.dtype, device={x}.device)\n"
        + launch + f"return out.reshape(*{x}.shape[:-1], n)\n"
    )


def region_wrapper(
    name: str,
    params: list[str],
    summary: str,
    detail: str,
    takes: str,
    fallback: Definition,
    kernel_path: str,
    requires: tuple[str, ...],
    refused: str = "other shapes or dtypes, off the NPU",
    before: str = "",
    after: str = "",
    returns: str | None = None,
) -> Definition:
    """``def name(params)``, the wrapper of a fused region: ``fallback`` (:func:`region_fallback`)
    unless ``takes``, else ``kernel_path`` with ``fallback``'s gradient; ``requires``: the
    definitions it needs besides those.

    The docstring says ``summary`` ("<where> as one PyPTO kernel: ..."), then ``detail`` and which
    operands (``refused``) run the fallback. ``before`` and ``after``: statements before and after
    the guard; ``returns``: the statements ending the wrapper instead of the kernel path (several
    results, each with a gradient of its own).
    """
    signature = ", ".join(params)
    ending = returns if returns is not None else (
        f"\ndef kernel_path({signature}):\n" + textwrap.indent(kernel_path, "    ")
        + f"\nreturn _with_torch_grad(kernel_path, {fallback.name}, {signature})\n"
    )
    source = (
        f"def {name}({signature}):\n" + docstring(summary, f"{detail} Operands the kernel does not take ({refused}) run {fallback.name}.")
        + textwrap.indent(before, "    ")
        + f"    if not {takes}:\n        return {fallback.name}({signature})\n"
        + textwrap.indent(after + ending, "    ")
    )
    return Definition(name, source, (*PRELUDE_NEEDS, fallback.name, *requires))


def docstring(summary: str, detail: str) -> str:
    """A wrapper's docstring in its def: ``summary`` filled to 92 columns, then the paragraph ``detail``."""
    doc = filled(summary, 92, subsequent_indent="    ")
    more = filled(detail, 92, initial_indent="    ", subsequent_indent="    ")
    return f'    """{doc}\n\n{more}\n    """\n'
