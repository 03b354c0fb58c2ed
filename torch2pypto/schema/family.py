"""The kernel family contract and the one registry of families.

A family is one module of torch2pypto/rules that ends with ``register(Family(...))``: its name
in the table, the dataclass of the fields it reads, and its hooks. Every hook is declared here,
with its default; nothing is looked up by name. The table loader (mapping) and the engine both
find a family through :func:`family`; this module imports only the entry types, so neither
mapping nor rules sit below the other through it.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping

from torch2pypto.schema.entry import Entry, Fields, TableError

if TYPE_CHECKING:
    from torch2pypto.rules.site import CallSite, Converted, Unsupported

OperandSample = Literal["same", "other", "bool"]


def _no_problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    return None


def _own_wrapper(entry: Entry) -> tuple[str, ...]:
    return (f"pypto_{entry.op}",)


def _no_parts(entry: Entry, entries: Mapping[str, Entry]) -> tuple[str, ...]:
    return ()


def _unfusible(builder: Any, entry: Entry, bound: Mapping[str, Any], env: Any) -> Any:
    return None


def _same_dtype(entry: Entry, position: int, name: str) -> OperandSample:
    return "same"


def _never(entry: Entry) -> bool:
    return False


def _no_definitions(entry: Entry) -> tuple:
    return ()


def _no_modules(entry: Entry) -> tuple:
    return ()


def _one_value(entry: Entry, shape: tuple[int, ...], dim: Any) -> int:
    return 1


def is_float_literal(source: str) -> bool:
    """Whether an argument's source is a float number (``-0.5``, ``1e-6``)."""
    try:
        return type(ast.literal_eval(source)) is float
    except (ValueError, SyntaxError):
        return False


def is_float_dtype(dtype: str) -> bool:
    """Whether a table dtype name (``bfloat16``, ``int32``) is a floating-point one."""
    return dtype.startswith(("float", "bfloat"))


def keeps_integers(entry: Entry, dtype: str, arguments: Mapping[str, str]) -> bool:
    """Whether a call with these arguments (parameter -> source) launches on ``dtype`` tensors: torch
    promotes an integer tensor with a float number to float, and the wrapper runs torch for that."""
    return is_float_dtype(dtype) or not any(map(is_float_literal, arguments.values()))


def length_over(shape: tuple[int, ...], dim: int | tuple[int, ...] | None) -> int:
    """How many values of ``shape`` lie along ``dim`` (None, or dims it does not have: all)."""
    dims = (dim,) if isinstance(dim, int) else dim
    if dims is None or not all(-len(shape) <= d < len(shape) for d in dims):
        return math.prod(shape)
    return math.prod(shape[d] for d in dims)


@dataclasses.dataclass(frozen=True)
class Family:
    """How one family makes code for its entries.

    ``rewrite``: a bound call site -> Converted (the replacement call and its definitions) or
    Unsupported (why it stays torch). ``problem``: why the family cannot honour an entry, or None
    (checked when the table loads). ``wrapper_names``: the generated wrappers whose calls are
    converted sites of an entry. ``parts``: the op names of the entries an entry calls (a recipe's
    steps, the swapped form of a number-first call); the loader attaches them. ``fuse``: the entry's tile steps in a fused
    region (engine/lowering.py's Built, the entry, its bound ast arguments, the region's values),
    or None if it does not fuse. ``operand_sample``: the dtype a sampled tensor operand (after the
    input, at ``position``) gets in the tests and --verify: the case's (same), another float
    dtype (other: a cast's dtype carrier) or bool. ``accumulates``: what one result element
    gathers over ``reduced_length`` values of an input of that shape reduced along the call's
    ``dim`` ("sum", "product" or None), which widens its tolerance (mapping.tolerance).
    ``takes_rest``: its wrappers take torch's whole signature and a ``**kwargs`` they hand to
    torch, so a call with ``*args``/``**kwargs`` converts: the rule sees what binds statically,
    the call's arguments pass through as written, and the wrapper checks the rest at run time
    (its entries reject nothing, so that Python binds the wrapper's parameters as torch's).
    ``number_first``: whether the entry's wrapper takes a Python number as its first operand at run
    time (computing the swapped op), so that an operator whose left operand may be a number or a
    tensor (``base ** t``) is decided: torch's function of both (``torch.pow(base, t)``) is what
    Python runs either way. ``definitions``: an entry's kernels and wrapper, for the wrappers of
    other entries that call it. ``module_samples``: modules that an entry's ``module`` parameter
    (an activation registry's module, known at run time) takes in --verify, one per op.
    ``creates``: its entries make a tensor from Python numbers (arange): no input tensor.
    ``launches``: whether a call with these arguments (parameter -> source) launches the kernel on
    input tensors of a dtype the entry declares, rather than taking the wrapper's torch path by
    design; the tests and --verify sample only those dtypes. ``offsets``: for a family whose entries
    compute their ``via`` entry's call plus a number in one (``torch.arange(n) + k``), whether the
    call and the added value (ast nodes) of a ``call + k`` may be one of theirs; None otherwise.
    """

    name: str
    fields: type[Fields]
    rewrite: Callable[[CallSite], Converted | Unsupported]
    problem: Callable[[Entry, Mapping[str, Entry]], str | None] = _no_problem
    wrapper_names: Callable[[Entry], tuple[str, ...]] = _own_wrapper
    parts: Callable[[Entry, Mapping[str, Entry]], tuple[str, ...]] = _no_parts
    fuse: Callable[[Any, Entry, Mapping[str, Any], Any], Any] = _unfusible
    operand_sample: Callable[[Entry, int, str], OperandSample] = _same_dtype
    accumulates: Literal["sum", "product"] | None = None
    reduced_length: Callable[[Entry, tuple[int, ...], Any], int] = _one_value
    takes_rest: bool = False
    number_first: Callable[[Entry], bool] = _never
    definitions: Callable[[Entry], tuple] = _no_definitions
    module_samples: Callable[[Entry], tuple] = _no_modules
    creates: bool = False
    launches: Callable[[Entry, str, Mapping[str, str]], bool] = keeps_integers
    offsets: Callable[[Any, Any], bool] | None = None


FAMILIES: dict[str, Family] = {}  # name -> family, filled by register()


def register(new: Family) -> Family:
    """Add a family to the registry (once per name)."""
    if new.name in FAMILIES:
        raise ValueError(f"family {new.name!r} is registered twice")
    FAMILIES[new.name] = new
    return new


def family(name: str | None, op: str = "") -> Family:
    """The registered family of that name; a TableError naming ``op`` if there is none."""
    if name not in FAMILIES:
        raise TableError(f"{op}: a mapped op names its kernel family ({', '.join(FAMILIES)}), not {name!r}")
    return FAMILIES[name]


def never_fuses(name: str | None) -> bool:
    """Whether no entry of the family ``name`` fuses whatever its arguments: no family (None), or
    one without a ``fuse`` hook of its own (lowering's call finds None for each of its entries)."""
    return name is None or family(name).fuse is _unfusible
