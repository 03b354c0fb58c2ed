"""Generated from the table's examples: each converts or stays torch with its reason, and the
four call shapes bind as torch binds them.

The translated snippet runs on CPU, where each wrapper takes its torch path with the arguments
it was given: equal results (values, dtype, shape, device, aliasing) prove the call was rewritten
with the right binding. The kernels themselves run in the interpreter in test_kernels.py.
"""

import pytest
import torch

from helpers import run, translate
from table_cases import TABLE, call_shapes, converting, dtypes, inputs, snippet, staying


def same(got, expected, names):
    assert type(got) is type(expected)
    if isinstance(expected, tuple):  # torch.max(x, dim): (values, indices)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            same(g, e, names)
        return
    assert got.dtype == expected.dtype and got.shape == expected.shape and got.device == expected.device
    torch.testing.assert_close(got, expected, equal_nan=True)  # nonfinite samples: NaN where torch gives NaN
    for name, value in names.items():
        if isinstance(value, torch.Tensor):
            assert (got is value) == (expected is value), f"aliasing of {name} differs"


def outermost(translation):
    """The record of the snippet's returned call (it starts the return expression)."""
    return next(r for r in translation.records if (r.line, r.column) == (5, 12))


def check_runs_like_torch(op, code, translated, call=None):
    entry = TABLE.entries[op]
    shape = entry.sample.shapes[0] if entry.sample.shapes else (3, 5, 37)
    names = inputs(entry, shape, (dtypes(entry) or [torch.float32])[0], call=call)
    expected = run(code)["f"](**names)
    got = run(translated)["f"](**names)
    same(got, expected, names)


@pytest.mark.parametrize("op, call", converting(), ids=[c for _, c in converting()])
def test_example_converts(op, call):
    code = snippet(call)
    translation = translate(code)
    assert {r.status for r in translation.records} == {"converted"}, translation.records
    called = TABLE.by_api[outermost(translation).api]
    plus = TABLE.plus.get(called.op)  # torch.arange(n) + k: the entry computing arange's call plus k
    assert op in (called.op, *called.tensor_forms.values(), *called.forms.values(), plus and plus.op)  # clamp(x, min=t): clamp's tensor form
    check_runs_like_torch(op, code, translation.code, call)


@pytest.mark.parametrize("op, call, reason", staying(), ids=[c for _, c, _ in staying()])
def test_example_stays_torch_with_its_reason(op, call, reason):
    code = snippet(call)
    translation = translate(code)
    assert translation.code == code
    record = outermost(translation)
    assert record.api in TABLE.entries[op].apis and record.status in ("unsupported", "host-side")
    assert reason in record.reason


SHAPES = [(op, shape, call) for op, e in TABLE.entries.items() if e.family for shape, call in call_shapes(e).items()]


@pytest.mark.parametrize("op, shape, call", SHAPES, ids=[f"{op}-{shape}" for op, shape, _ in SHAPES])
def test_call_shape_binds_like_torch(op, shape, call):
    code = snippet(call)
    translation = translate(code)
    assert {r.status for r in translation.records} == {"converted"}, translation.records
    check_runs_like_torch(op, code, translation.code, call)


@pytest.mark.parametrize(
    "call, misleading",
    [
        ("x.to(device=dev)", "missing argument 'dtype'"),
        ("x.to(dev, dtype=torch.float16)", "given twice"),
        ("x.to(dev, torch.float16)", "non_blocking"),
        ("x.to(dev, torch.float64)", "non_blocking"),
    ],
)
def test_to_reasons_name_what_the_user_wrote(call, misleading):
    """Issue 11.8: Tensor.to's overloads bind as torch binds them; no reason names an argument
    the call does not have."""
    record = outermost(translate(snippet(call)))
    assert misleading not in record.reason
    expected = "host-side" if "device=dev)" in call else "unsupported" if "float64" in call else "converted"
    assert record.status == expected


@pytest.mark.parametrize(
    "call", ["x.sum(axis=1)", "x.sum(-1, keepdims=True)", "torch.mean(x, axis=(0, -1), keepdims=True)", "x.mean(axis=0)"]
)
def test_numpy_style_aliases_bind_as_torch_binds_them(call):
    """Issue 11.8: torch takes axis= and keepdims= for dim= and keepdim= of its reductions; the
    table's aliases bind them, so they convert (they were 'unexpected keyword argument')."""
    code = snippet(call)
    translation = translate(code)
    assert {r.status for r in translation.records} == {"converted"}, translation.records
    assert "axis=" not in translation.code and "keepdims=" not in translation.code
    check_runs_like_torch("sum" if "sum" in call else "mean", code, translation.code)


def test_an_alias_and_its_parameter_together_name_the_alias():
    record = outermost(translate(snippet("x.sum(1, axis=0)")))
    assert record.status == "unsupported" and "'dim'" in record.reason and "axis=" in record.reason
