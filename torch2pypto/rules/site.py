"""What a rule receives (a bound call site) and what it returns."""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import libcst as cst

from torch2pypto.rules.codegen import Definition
from torch2pypto.schema.entry import Entry, Param


@dataclasses.dataclass(frozen=True)
class CallSite:
    """A torch call bound to its table entry.

    ``args`` maps torch parameter names to the argument expressions the user passed (defaults
    are absent). ``static_dtype(param)`` names the dtype that argument statically is
    (``"float32"``), ``"?"`` for a dtype of unknown value (``x.dtype``), or None when it is not
    known to be a dtype at all; ``torch_name()`` is how the module reaches the torch package at
    this site (None where no name does); ``is_tensor(param)``: that argument is known to be a
    tensor. ``rest``: for a call with ``*args``/``**kwargs`` (of a family that takes the rest),
    its arguments as written, which the wrapper takes as they are; ``args`` holds those that
    bind statically. ``built``: for an nn module's call, the arguments its constructions pass: the
    one value they all give (a literal, else an :class:`Expression`) or ``...``; keywords by the
    parameter that reads that attribute (``padding=1``), else by the keyword (``kernel_size=1``),
    positional arguments by their index; an argument none passes is absent.
    """

    entry: Entry
    args: Mapping[str, cst.BaseExpression]
    static_dtype: Callable[[str], str | None]
    torch_name: Callable[[], str | None]
    is_tensor: Callable[[str], bool] = lambda _: False
    rest: tuple[cst.Arg, ...] = ()
    built: Mapping[str | int, object] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Expression:
    """A module construction's argument that is no literal, by its source text (``config.patch_size``)."""

    text: str


@dataclasses.dataclass(frozen=True)
class Converted:
    """The replacement call, the wrapper's parameters, and the definitions it needs."""

    call: cst.Call
    definitions: tuple[Definition, ...]
    pypto_api: str
    params: tuple[Param, ...]


@dataclasses.dataclass(frozen=True)
class Unsupported:
    """The call stays torch, for this reason; ``host``: as host-side work (a creation), not an op
    a kernel could take."""

    reason: str
    host: bool = False
