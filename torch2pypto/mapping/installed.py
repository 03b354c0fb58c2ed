"""The table against the installed torch and pypto (issue: a wrong entry must not load quietly).

Checks what only the packages know: every PyPTO op an entry names exists, every torch API
resolves, the defaults of a signature are torch's where torch exposes one
(``inspect.signature``), an integer dtype is declared only where torch keeps integers (no
float-only op), and a recipe computes what its torch op does (a wrong constant shows). Translating
needs neither package, so this does not run when the table loads; the test suite runs it
(tests/test_families.py), ``--verify`` checks the entries a translation uses, and anyone may
check the whole table: ``python -m torch2pypto.mapping.installed``.
"""

from __future__ import annotations

import ast
import inspect
import math
import types
from typing import Any, Callable, Iterable

from torch2pypto.mapping import Entry, Table, load_table, samples

PLUGIN_APIS = {"torch.Tensor.npu"}  # added by torch_npu, which a CPU build has not
INTEGERS = ("uint8", "int8", "int16", "int32", "int64")
REDUCERS = {"sum": "sum", "amax": "amax", "amin": "amin"}  # a recipe's row reductions
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}  # a recipe in float64 against torch (erf's approximation: 1.5e-7)


def problems(table: Table, ops: Iterable[str] | None = None) -> list[str]:
    """Every disagreement between the table's entries (``ops``: these only) and the installed
    packages, one line each."""
    import pypto
    import torch

    found = []
    for entry in (table.entries[op] for op in (table.entries if ops is None else sorted(ops))):
        for check in (_pypto_ops, _torch_apis, _defaults, _integer_dtypes, _recipe):
            found += [f"{entry.op}: {p}" for p in check(entry, torch, pypto)]
    return found


def _pypto_ops(entry: Entry, torch, pypto) -> list[str]:
    """The ops ``pypto`` names (``amax+sub+exp``: each step's) and a recipe calls (``pypto.log1p``) exist in pypto."""
    named = [*(entry.pypto.split("+") if entry.pypto else ()), *_raw_ops(entry)]
    return [f"pypto.{name} does not exist in pypto" for name in dict.fromkeys(named) if not hasattr(pypto, name)]


def _raw_ops(entry: Entry) -> list[str]:
    """The PyPTO ops a composite's recipe calls itself (``pypto.log1p(x)``)."""
    recipe = getattr(entry.fields, "recipe", None)
    return [n.func.attr for n in ast.walk(ast.parse(recipe)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and ast.unparse(n.func.value) == "pypto"] if recipe else []


def resolve(torch, api: str) -> Any:
    """The torch object an API spelling names (AttributeError if none)."""
    obj = torch
    for part in api.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _torch_apis(entry: Entry, torch, pypto) -> list[str]:
    found = []
    for api in (*entry.apis, *filter(None, [entry.torch]), *(m for m in entry.modules if m.startswith("torch."))):
        try:
            resolve(torch, api)
        except AttributeError:
            if api not in PLUGIN_APIS:
                found.append(f"{api} does not exist in torch {torch.__version__}")
    return found


def _defaults(entry: Entry, torch, pypto) -> list[str]:
    """Each default equals torch's where torch's function has a Python signature."""
    found = []
    for api in (*entry.apis, *filter(None, [entry.torch])):
        try:
            signature = inspect.signature(resolve(torch, api))
        except (AttributeError, TypeError, ValueError):  # a builtin without a signature
            continue
        for param in entry.params:
            theirs = signature.parameters.get(param.name)
            if param.required or theirs is None or theirs.default is inspect.Parameter.empty:
                continue
            if param.default != theirs.default or type(param.default) is not type(theirs.default):
                found.append(f"{param.name} defaults to {param.default!r}, {api}'s to {theirs.default!r}")
    return found


def _first_example(entry: Entry, torch, dtype) -> tuple[str, Any]:
    """The entry's first converting example and torch's result of it on samples of ``dtype``."""
    call = entry.examples.convert[0]
    values = samples.values(entry, samples.shapes(entry)[0], dtype)
    result = eval(call, {"torch": torch, **values})  # noqa: S307 (the table's own example)
    return call, result[0] if isinstance(result, tuple) else result


def _integer_dtypes(entry: Entry, torch, pypto) -> list[str]:
    """An integer dtype is declared only on an op whose torch result keeps integers (or bool), or on
    a cast (its result is of its target dtype, whatever the input's)."""
    found = []
    if entry.pypto == "cast":
        return found
    for name in (d for d in entry.dtypes if d in INTEGERS and entry.examples.convert):
        try:
            call, result = _first_example(entry, torch, getattr(torch, name))
        except Exception as exc:  # noqa: BLE001 (torch refuses the dtype: that is the finding)
            found.append(f"dtypes has {name}, which torch refuses in {entry.examples.convert[0]}: {exc}")
            continue
        if isinstance(result, torch.Tensor) and result.dtype.is_floating_point:
            found.append(f"dtypes has {name}, but {call} gives {result.dtype} for it in torch: a float-only op")
    return found


def _recipe(entry: Entry, torch, pypto) -> list[str]:
    """A recipe over its first example's arguments, in float64 (bool and integer recipes: their first
    dtype), against torch's result of it.

    Recipes of whole tensors, or rows along the last dim (``along``), are computed; halves and
    per-channel operands (host layouts) are not checked here.
    """
    fields = entry.fields
    if entry.family != "composite" or fields.halves or fields.channels:
        return []
    masks = entry.dtypes and all(d in (*INTEGERS, "bool") for d in entry.dtypes)
    exact = getattr(torch, entry.dtypes[0]) if masks else torch.float64
    call, truth = _first_example(entry, torch, exact)
    arguments = _arguments(entry, call, torch, exact)
    if fields.along and not _last(arguments.get(fields.along), arguments[entry.params[0].name]):
        return []
    computed = _run(entry, arguments, torch)
    if computed.shape != truth.shape or not torch.allclose(computed.to(truth.dtype), truth, equal_nan=True, **TOLERANCE):
        worst = (computed.to(torch.float64) - truth.to(torch.float64)).abs().nan_to_num().max().item()
        return [f"recipe computes {call} {worst:.3g} away from torch: a wrong constant or step?"]
    return []


def _arguments(entry: Entry, call: str, torch, dtype) -> dict[str, Any]:
    """The example's arguments on samples of ``dtype`` bound to the entry's parameters, defaults applied."""
    node = ast.parse(call, mode="eval").body
    values = samples.values(entry, samples.shapes(entry)[0], dtype)
    value: Callable[[ast.expr], Any] = lambda e: eval(compile(ast.Expression(e), call, "eval"), {"torch": torch, **values})  # noqa: E731, S307
    args = [value(a) for a in node.args]
    if not ast.unparse(node.func).startswith("torch."):  # a method: the receiver is the input
        args.insert(0, value(node.func.value))
    kwargs = {entry.aliases.get(k.arg, k.arg): value(k.value) for k in node.keywords}
    parameters = [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY if p.keyword_only else inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    default=inspect.Parameter.empty if p.required else p.default) for p in entry.params]
    bound = inspect.Signature(parameters).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _last(along: Any, input: Any) -> bool:
    """Whether a row recipe's row is the input's last dim (a dim of -1, or its size as the shape)."""
    return along in (-1, input.dim() - 1) or tuple(along or ()) == tuple(input.shape[-1:])


def _run(entry: Entry, arguments: dict[str, Any], torch) -> Any:
    """The recipe computed with torch: each step by its entry's torch function, a missing optional
    operand dropping the step, row reductions along the last dim."""
    first = arguments[entry.params[0].name]

    def step(function):
        def apply(*operands):
            if any(o is None for o in operands):
                return next(o for o in operands if o is not None)
            return function(*(o if isinstance(o, torch.Tensor) else torch.tensor(o, dtype=first.dtype) for o in operands))
        return apply

    names = {op: step(resolve(torch, part.torch_function)) for op, part in entry.parts.items()}
    names |= {name: step(lambda t, r=reducer: getattr(t, r)(-1, keepdim=True)) for name, reducer in REDUCERS.items()}
    tree = ast.parse(entry.fields.recipe)
    raw = types.SimpleNamespace(**{op: step(getattr(torch, op)) for op in _raw_ops(entry)})  # pypto.log1p: torch.log1p
    scope = {**arguments, **names, "cols": first.shape[-1], "math": math, "pypto": raw}
    exec(compile(ast.Module(tree.body[:-1], []), entry.op, "exec"), scope)  # noqa: S102 (the table's own recipe)
    return eval(compile(ast.Expression(tree.body[-1].value), entry.op, "eval"), scope)  # noqa: S307


if __name__ == "__main__":
    for line in problems(load_table()):
        print(line)
