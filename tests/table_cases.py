"""Test cases generated from the op table: its examples, their call shapes, sample inputs."""

from __future__ import annotations

import ast
import importlib.util

import torch

from torch2pypto.mapping import SAMPLE_NAMES, Entry, Table, load_table
from torch2pypto.mapping import samples

TABLE = load_table()


def snippet(call: str) -> str:
    """A module whose function ``f`` returns ``call``; tensors are annotated so methods resolve."""
    params = ", ".join(f"{n}: torch.Tensor" if n in ("x", "y", "w", "m") else n for n in SAMPLE_NAMES)
    return f"import torch\n\n\ndef f({params}):\n    return {call}\n"


def converting(table: Table = TABLE) -> list[tuple[str, str]]:
    return [(op, call) for op, e in table.entries.items() for call in e.examples.convert]


def staying(table: Table = TABLE) -> list[tuple[str, str, str]]:
    return [(op, call, reason) for op, e in table.entries.items() for call, reason in e.examples.stay.items()]


def call_shapes(entry: Entry) -> dict[str, str]:
    """The four call shapes of the entry's first function example: all positional, all keyword,
    keywords shuffled, defaults omitted (the method form where there is no function)."""
    call = ast.parse(entry.examples.convert[0], mode="eval").body
    func = ast.unparse(call.func)
    if not isinstance(call, ast.Call) or call.keywords and any(k.arg is None for k in call.keywords):
        return {}
    method = func.startswith(("x.", "y."))
    params = [p for p in entry.params if not p.variadic]
    args = ([call.func.value] if method else []) + list(call.args)
    if len(args) > len(params) or any(p.name.startswith("arg") for p in params):
        return {}  # positional placeholders (Tensor.to): its overloads' examples cover it
    bound = {p.name: ast.unparse(a) for p, a in zip(params, args)}
    bound.update({k.arg: ast.unparse(k.value) for k in call.keywords})
    order = [p for p in params if p.name in bound]
    name = entry.torch_function or func
    receiver = bound[params[0].name]

    def spell(parts: list[str]) -> str:
        if entry.torch_function:
            return f"{name}({', '.join(parts)})"
        return f"{receiver}.{name.rsplit('.', 1)[1]}({', '.join(parts[1:])})"

    positional = [bound[p.name] if not p.keyword_only else f"{p.name}={bound[p.name]}" for p in order]
    keyword = [f"{p.name}={bound[p.name]}" for p in order]
    if not entry.torch_function:
        keyword = [receiver] + keyword[1:]
    shuffled = keyword[:1] + keyword[1:][::-1] if not entry.torch_function else keyword[::-1]
    omitted = [bound[p.name] if not p.keyword_only else f"{p.name}={bound[p.name]}" for p in order
               if p.required or _literal(bound[p.name]) != p.default]
    return {"positional": spell(positional), "keyword": spell(keyword), "shuffled": spell(shuffled),
            "defaults": spell(omitted) if entry.torch_function else spell([receiver] + omitted[1:])}


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except ValueError:
        return Ellipsis


def load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs(entry: Entry, shape, dtype: torch.dtype, seed: int = 0) -> dict[str, object]:
    return samples.values(entry, shape, dtype, seed)


def tolerance(entry: Entry, dtype: torch.dtype) -> dict[str, float]:
    """assert_close's tolerances: its defaults, but a cube kernel sums k FP32 products in tile
    order, not torch's, so FP32 results differ by a few ulps of the sum."""
    return {"rtol": 1e-4, "atol": 1e-4} if entry.family == "cube" and dtype == torch.float32 else {}


def dtypes(entry: Entry) -> list[torch.dtype]:
    return [samples.DTYPES[d] for d in entry.dtypes if d in samples.DTYPES]


def _takes_floats(call: str) -> bool:
    """Whether an example call passes a float literal (``torch.clip(x, -0.5, 0.5)``)."""
    return any(isinstance(node, ast.Constant) and isinstance(node.value, float) for node in ast.walk(ast.parse(call)))


def kernel_cases(table=TABLE, matrix=False):
    """(entry, call, dtype, shapes) per case: a case runs one call on one dtype over its shapes."""
    cases = []
    for op, entry in table.entries.items():
        if not entry.family:
            continue
        for i, call in enumerate(entry.examples.convert):
            for dtype in dtypes(entry) if i == 0 or matrix else dtypes(entry)[:1]:
                if _takes_floats(call) and not dtype.is_floating_point:
                    continue  # torch promotes an integer tensor with a float number: the wrapper runs torch, by design
                shapes = samples.shapes(entry, matrix) if i == 0 or matrix else samples.shapes(entry)[:1]
                cases.append((entry, call, dtype, shapes))
    return cases
