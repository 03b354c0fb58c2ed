"""Examples call their own entry, over the sample names only (checked when the table loads).

An example converting ``torch.max(x, y)`` under the entry of torch.amax would test another
op's kernel; one naming ``z`` would raise NameError in every generated test. Calls that stay
torch may name other values on purpose (``torch.max(x, a)``: ``a`` of no known kind).
"""

from __future__ import annotations

import ast
import builtins
from typing import Mapping

from torch2pypto.schema import operators
from torch2pypto.schema.entry import SAMPLE_NAMES, Entry, TableError

_KNOWN = {*SAMPLE_NAMES, "torch", *dir(builtins)}


def check(entries: Mapping[str, Entry]) -> None:
    """Raise TableError for an example calling an API that is not its entry's (or, for a tensor
    form, an entry's that computes tensor calls as it), or converting over an unknown name."""
    forms: dict[str, set[str]] = {}
    for entry in entries.values():
        for op in (*entry.tensor_forms.values(), *entry.forms.values()):
            forms.setdefault(op, set()).update(entry.apis)
    for entry in entries.values():
        own = {*entry.apis, *forms.get(entry.op, ()), *filter(None, [entry.torch])}
        for call in (*entry.examples.convert, *entry.examples.stay):
            api = called(ast.parse(call, mode="eval").body)
            if api not in own:
                raise TableError(f"{entry.op}: example {call!r} calls {api or 'no torch API'}, not this entry ({', '.join(sorted(own))})")
        for call in entry.examples.convert:
            unknown = {n.id for n in ast.walk(ast.parse(call)) if isinstance(n, ast.Name)} - _KNOWN
            if unknown:
                raise TableError(f"{entry.op}: example {call!r} names {', '.join(sorted(unknown))}, no sample ({', '.join(SAMPLE_NAMES)})")


def called(node: ast.expr) -> str | None:
    """The torch API an example calls: ``torch.nn.functional.silu``, ``torch.Tensor.max`` for a
    method of a tensor, the method an operator runs (``torch.Tensor.__matmul__`` for ``x @ y``,
    ``torch.Tensor.__rsub__`` for ``2 - x``: a number is no tensor); None if none."""
    sides = operators.operands(node)
    if sides:
        return f"torch.Tensor.{operators.dispatch(node, sides, not isinstance(sides[0], ast.Constant)).method}"
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    dotted = ast.unparse(node.func)
    return dotted if dotted.startswith("torch.") else f"torch.Tensor.{node.func.attr}"
