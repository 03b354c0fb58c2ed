"""Generated from the table: every mapped entry's kernels, run in PyPTO's CPU interpreter
against torch, on every dtype the entry declares and odd shapes (tail row tiles, a width that is
no multiple of 32 bytes, rank 1 to 4). Each case must launch a kernel: a case that fell back to
torch fails. The default run tries each entry's first example on the shapes of
``samples.SHAPES`` (one width, so one compiled kernel per dtype) and its other examples once;
``-m matrix`` runs every example on every dtype and ``samples.MATRIX_SHAPES``, and each float
entry's first example on non-finite samples. Results compare within the entry's tolerance
(torch2pypto/mapping/tolerance.py), NaN equal to NaN on non-finite samples.
"""

import pathlib
import tomllib

import pytest
import torch

import torch2pypto
from table_cases import TABLE, call_dim, inputs, kernel_cases, load, nonfinite_cases, snippet
from torch2pypto import translate_source
from torch2pypto.mapping import build_table
from torch2pypto.mapping.tolerance import equal_nan, tolerance
from torch2pypto.translator.verification import interpreter

pytestmark = pytest.mark.interpreter
FIXTURES = pathlib.Path(__file__).with_name("families")


def ids(cases):
    return [f"{call}-{str(dtype).removeprefix('torch.')}" for _, call, dtype, _ in cases]


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """The translated module of each example, imported once; (translated, original) per call."""
    folder = tmp_path_factory.mktemp("generated")
    cache = {}

    def get(call, table):
        if (call, id(table)) not in cache:
            code = snippet(call)
            translation = translate_source(code, "snippet.py", table=table)
            assert {r.status for r in translation.records} == {"converted"}, translation.records
            name = f"case{len(cache)}"
            (folder / f"{name}.py").write_text(translation.code)
            (folder / f"{name}_torch.py").write_text(code)
            cache[call, id(table)] = load(folder / f"{name}.py"), load(folder / f"{name}_torch.py")
        return cache[call, id(table)]

    return get


def run_case(modules, entry, call, dtype, shapes, table=TABLE):
    translated, original = modules(call, table)
    for shape in shapes:
        torch_inputs, kernel_inputs = inputs(entry, shape, dtype, call=call), inputs(entry, shape, dtype, call=call)  # in-place ops write
        try:
            expected = original.f(**torch_inputs)
        except (RuntimeError, IndexError, TypeError) as exc:  # not defined on this shape: raise as torch
            with pytest.raises(type(exc)), torch2pypto.interpreted(translated):
                translated.f(**kernel_inputs)
            continue
        launched = interpreter.counting()
        with torch2pypto.interpreted(translated):
            got = translated.f(**kernel_inputs)
        if expected is torch_inputs["x"] and not getattr(entry.fields, "inplace", False):  # a no-op cast returns its input: no kernel
            assert got is kernel_inputs["x"]
            continue
        assert sum(launched().values()) > 0, f"{call} on {dtype} {shape}: no kernel launched (torch fallback)"
        assert type(got) is type(expected)
        atol, rtol = tolerance(entry, dtype, shape, call_dim(entry, call))
        for g, e in zip(*((got, expected) if isinstance(expected, tuple) else ((got,), (expected,)))):
            assert g.dtype == e.dtype and g.shape == e.shape and g.device == e.device
            torch.testing.assert_close(g, e, atol=atol, rtol=rtol, equal_nan=equal_nan(entry),
                                       msg=lambda m: f"{call} on {dtype} {shape}: {m}")
        for name, value in kernel_inputs.items():
            assert (got is value) == (expected is torch_inputs[name]), f"{call}: aliasing of {name} differs"
            if isinstance(value, torch.Tensor):
                torch.testing.assert_close(value, torch_inputs[name], equal_nan=True)  # nonfinite samples


CASES = kernel_cases()


@pytest.mark.parametrize("entry, call, dtype, shapes", CASES, ids=ids(CASES))
def test_kernel_matches_torch(modules, entry, call, dtype, shapes):
    run_case(modules, entry, call, dtype, shapes)


MATRIX = kernel_cases(matrix=True)


@pytest.mark.matrix
@pytest.mark.parametrize("entry, call, dtype, shapes", MATRIX, ids=ids(MATRIX))
def test_kernel_matrix(modules, entry, call, dtype, shapes):
    run_case(modules, entry, call, dtype, shapes)


NONFINITE = nonfinite_cases()


@pytest.mark.matrix
@pytest.mark.parametrize("entry, call, dtype, shapes", NONFINITE, ids=ids(NONFINITE))
def test_kernel_matches_torch_on_nonfinite_samples(modules, entry, call, dtype, shapes):
    run_case(modules, entry, call, dtype, shapes)


# pypto.log1p(inf) is NaN (issue 20): the log1p entry takes log(x) where x is not finite, and
# atanh, whose recipe calls log1p, gives torch's +-inf at +-1 (2x / (1 - x) is inf at 1).
inf, nan = float("inf"), float("nan")
EDGES = {
    "log1p": [inf, -inf, nan, -1.0, -2.0, -1.5, 0.0, -0.0, 1e-8, -1e-7, 1e-3, -0.999, 5.0, 1e30],
    "atanh": [1.0, -1.0, 0.0, 1e-8, -1e-7, 0.5, -0.9, 1.5, -2.0, inf, -inf, nan],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", EDGES)
def test_log1p_and_atanh_match_torch_at_the_edges_of_their_domains(modules, op, dtype):
    entry = TABLE.entries[op]
    call = entry.examples.convert[0]
    translated, original = modules(call, TABLE)
    for shape in ((3, len(EDGES[op])), (len(EDGES[op]),)):  # a tail row tile, rank 1
        names = {**inputs(entry, shape, dtype), "x": torch.tensor(EDGES[op]).repeat(shape[0] if len(shape) > 1 else 1).reshape(shape).to(dtype)}
        launched = interpreter.counting()
        with torch2pypto.interpreted(translated):
            got = translated.f(**names)
        assert sum(launched().values()) == 1, f"{call} on {dtype}: no kernel launched (torch fallback)"
        expected = original.f(**names)
        # values near 0 within a few FP32 ulps (log(1 + x) would give 0 for 1e-8: pypto.log1p keeps log1p accurate)
        torch.testing.assert_close(got, expected, equal_nan=True, atol=0, rtol=2e-6 if dtype == torch.float32 else 1e-2)


# Each family's valid fixtures (tests/families/<family>.toml: entries as a contributor adds an op
# of a known family, one entry each) make kernels that match torch, as the table's entries do.
FIXTURE_TABLES = {p.stem: build_table(tomllib.loads(p.read_text())["valid"]) for p in sorted(FIXTURES.glob("*.toml"))}
FAMILY_CASES = [(name, *case) for name, table in FIXTURE_TABLES.items() for case in kernel_cases(table)]


@pytest.mark.parametrize("family, entry, call, dtype, shapes", FAMILY_CASES,
                         ids=[f"{family}: {i}" for family, i in zip([c[0] for c in FAMILY_CASES], ids([c[1:] for c in FAMILY_CASES]))])
def test_every_familys_valid_fixtures_make_kernels_that_match_torch(modules, family, entry, call, dtype, shapes):
    run_case(modules, entry, call, dtype, shapes, FIXTURE_TABLES[family])
