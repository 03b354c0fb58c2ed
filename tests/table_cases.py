"""Test cases generated from the op table: its examples, their call shapes, sample inputs."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util

import torch

from torch2pypto.mapping import SAMPLE_NAMES, Entry, Table, load_table
from torch2pypto.mapping import samples
from torch2pypto.schema.family import family

TABLE = load_table()


def snippet(call: str) -> str:
    """A module whose function ``f`` returns ``call``; tensors are annotated so methods resolve."""
    params = ", ".join(f"{n}: torch.Tensor" if n in ("x", "y", "w", "m", "i") else n for n in SAMPLE_NAMES)
    return f"import torch\n\n\ndef f({params}):\n    return {call}\n"


def converting(table: Table = TABLE) -> list[tuple[str, str]]:
    return [(op, call) for op, e in table.entries.items() for call in e.examples.convert]


def staying(table: Table = TABLE) -> list[tuple[str, str, str]]:
    return [(op, call, reason) for op, e in table.entries.items() for call, reason in e.examples.stay.items()]


def call_shapes(entry: Entry) -> dict[str, str]:
    """The four call shapes of the entry's first function example: all positional, all keyword,
    keywords shuffled, defaults omitted (the method form where there is no function)."""
    if not entry.apis:
        return {}  # a tensor form: its calls are its parent entry's
    call = ast.parse(entry.examples.convert[0], mode="eval").body
    if not isinstance(call, ast.Call) or call.keywords and any(k.arg is None for k in call.keywords):
        return {}  # an operator (x[i]) has one spelling
    func = ast.unparse(call.func)
    method = func.startswith(("x.", "y."))
    params = [p for p in entry.params if not p.variadic]
    args = ([call.func.value] if method else []) + list(call.args)
    if len(args) > len(params) or any(p.name.startswith("arg") or p.positional_only for p in params):
        return {}  # positional placeholders (Tensor.to; einsum's): its overloads' or examples cover it
    bound = {p.name: ast.unparse(a) for p, a in zip(params, args)}
    bound.update({k.arg: ast.unparse(k.value) for k in call.keywords})
    order = [p for p in params if p.name in bound]
    name = entry.torch_function or func
    receiver = bound[params[0].name]

    def spell(parts: list[str]) -> str:
        if entry.torch_function:
            return f"{name}({', '.join(parts)})"
        return f"{receiver}.{name.rsplit('.', 1)[1]}({', '.join(parts[1:])})"

    def in_place(given: list) -> list[str]:  # positional up to the first parameter left out, then keywords
        gap = next((i for i, p in enumerate(params) if p not in given or p.keyword_only), len(params))
        return [bound[p.name] if params.index(p) < gap else f"{p.name}={bound[p.name]}" for p in given]

    positional = in_place(order)
    keyword = [f"{p.name}={bound[p.name]}" for p in order]
    if not entry.torch_function:
        keyword = [receiver] + keyword[1:]
    shuffled = keyword[:1] + keyword[1:][::-1] if not entry.torch_function else keyword[::-1]
    omitted = in_place([p for p in order if p.required or _literal(bound[p.name]) != p.default])
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


def inputs(entry: Entry, shape, dtype: torch.dtype, seed: int = 0, call: str | None = None) -> dict[str, object]:
    return samples.values(entry, shape, dtype, seed, call_dim(entry, call))


def call_arguments(entry: Entry, call: str) -> dict[str, str]:
    """An example call's arguments, parameter -> source (a method's self binds the first, an
    operator's operands bind in their order)."""
    node = ast.parse(call, mode="eval").body
    if not isinstance(node, ast.Call):
        operands = [n for n in ast.iter_child_nodes(node) if isinstance(n, ast.expr)]
        return {p.name: ast.unparse(v) for p, v in zip(entry.params, operands)}
    method = isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) in SAMPLE_NAMES
    values = ([node.func.value] if method else []) + list(node.args)
    bound = {p.name: v for p, v in zip(entry.params, values)} | {k.arg: k.value for k in node.keywords}
    return {name: ast.unparse(value) for name, value in bound.items()}


def call_dim(entry: Entry, call: str | None) -> int | None:
    """The int literal an example passes as ``dim`` (where its index ``i`` points), else None."""
    if call is None or "dim" not in {p.name for p in entry.params}:
        return None
    dim = _literal(call_arguments(entry, call).get("dim", "None"))
    return dim if type(dim) is int else None


def dtypes(entry: Entry) -> list[torch.dtype]:
    return [samples.DTYPES[d] for d in entry.dtypes if d in samples.DTYPES]


def kernel_cases(table=TABLE, matrix=False):
    """(entry, call, dtype, shapes) per case: a case runs one call on one dtype over its shapes."""
    cases = []
    for op, entry in table.entries.items():
        if not entry.family:
            continue
        for i, call in enumerate(entry.examples.convert):
            for dtype in dtypes(entry) if i == 0 or matrix else dtypes(entry)[:1]:
                if not family(entry.family).launches(entry, str(dtype).removeprefix("torch."), call_arguments(entry, call)):
                    continue  # the wrapper runs torch, by design (tests/test_integer_inputs.py checks it)
                shapes = samples.shapes(entry, matrix) if i == 0 or matrix else samples.shapes(entry)[:1]
                cases.append((entry, call, dtype, shapes))
    return cases


def nonfinite_cases(table=TABLE):
    """(entry, call, dtype, shapes): each float entry's first example on FP32 samples with inf,
    -inf and NaN mixed in (whose results torch defines), on its first sample shape. Not the
    sorting entries (sample domain "distinct": ties may take other indices; rows of NaN and
    infinities: tests/test_indexing.py); nor a cast into an integer (torch leaves inf and NaN
    undefined there); nor an entry of no examples (ACT2FN's: tests/test_activation.py); nor one
    whose torch result at an infinity depends on the CPU (:data:`CPU_DEPENDENT`)."""
    return [(dataclasses.replace(e, sample=dataclasses.replace(e.sample, domain="nonfinite")), e.examples.convert[0],
             torch.float32, samples.shapes(e)[:1])
            for e in table.entries.values()
            if e.family and e.examples.convert and "float32" in e.dtypes and e.sample.domain not in ("nonfinite", "distinct")
            and getattr(e.fields, "target", None) not in ("int64", "int32") and e.op not in CPU_DEPENDENT]


# entries whose torch result at inf or -inf differs between CPUs, so no kernel can match it on all
CPU_DEPENDENT = {"gelu": "torch's exact gelu(inf) is inf with its AVX2 kernels (an AMD EPYC) and was NaN, as the kernel's, where this passed before"}
