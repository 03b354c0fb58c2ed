"""The op table: its validator rejects malformed entries, families refuse what they cannot
honour, and a new op of a known family is one entry whose tests appear by themselves."""

import pytest
import torch

from table_cases import call_shapes, converting, kernel_cases, staying
from torch2pypto.mapping import CATEGORIES, FAMILIES, TableError, build_table, load_table
from torch2pypto.rules import FAMILIES as RULES
from torch2pypto.translator.engine.translate import translate_source

TABLE = load_table()


def test_categories_are_the_manuals_and_families_have_rules():
    assert {e.category for e in TABLE.entries.values()} == set(CATEGORIES)
    assert set(RULES) <= set(FAMILIES)
    assert {e.family for e in TABLE.entries.values() if e.family} <= set(RULES)


def test_rmsnorm_family_is_covered():
    family = ["to", "float", "half", "bfloat16", "double", "type", "type_as", "pow", "mean", "sum",
              "rsqrt", "sqrt", "exp", "neg", "abs", "add", "sub", "mul", "div"]  # fmt: skip
    assert set(family) <= set(TABLE.entries)


def test_signature_binds_kinds_defaults_and_keyword_only():
    mean = TABLE.entries["mean"]
    assert [p.name for p in mean.params] == ["input", "dim", "keepdim", "dtype"]
    assert mean.param("keepdim").default is False
    assert mean.param("dtype").keyword_only
    assert mean.param("input").is_tensor and mean.param("input").required


GOOD = {"category": "same-name", "family": "elementwise", "apis": ["torch.exp"], "signature": "(input: Tensor)",
        "pypto": "exp", "examples": {"convert": ["torch.exp(x)"]}}  # fmt: skip


@pytest.mark.parametrize(
    "change, message",
    [
        ({"category": "renamed"}, "unknown category"),
        ({"family": "same-name"}, "names its kernel family"),
        ({"signature": "(input: Tensor"}, "not a parameter list"),
        ({"signature": "(input: Matrix)"}, "unknown kind"),
        ({"signature": "(n: int)"}, "first parameter must be the input Tensor"),
        ({"apis": ["numpy.exp"]}, "not a torch name"),
        ({"reject": {"alpha": "no"}}, "unknown parameter"),
        ({"dtypes": ["float8"]}, "unknown dtype"),
        ({"colour": "blue"}, "unknown field"),
        ({"category": "unsupported", "family": None, "pypto": ""}, "needs a reason"),
        ({"category": "unsupported", "reason": "no"}, "has no kernel family"),
        ({"pypto": ""}, "names its pypto API"),
        ({"examples": {}}, "at least one example that converts"),
        ({"examples": {"convert": ["torch.exp(x"]}}, "is not an expression"),
        ({"sample": {"domain": "complex"}}, "sample domain"),
    ],
)
def test_validator_rejects(change, message):
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(TableError, match=message):
        build_table({"exp": body})


def test_an_api_belongs_to_one_entry():
    with pytest.raises(TableError, match="claimed by both"):
        build_table({"exp": GOOD, "exp2": GOOD})


CLAMP = {**GOOD, "apis": ["torch.clamp"], "pypto": "clip", "examples": {"convert": ["torch.clamp(x, -1, 1)"]},
         "signature": "(input: Tensor, min: Number = None, max: Number = None)"}  # fmt: skip
AMAX = {"category": "same-name-different-params", "family": "reduction", "apis": ["torch.amax"], "pypto": "amax",
        "signature": "(input: Tensor, dim: Dims = (), keepdim: bool = False)",
        "examples": {"convert": ["torch.amax(x, -1)"]}}  # fmt: skip


@pytest.mark.parametrize(
    "op, body, message",
    [
        ("clamp", CLAMP, "clamp: elementwise family: parameter 'min' is neither an operand, an argument of pypto.clip"),
        ("clamp", {**CLAMP, "args": {"min": "lower"}}, "args.min = 'lower' is neither a parameter nor a literal"),
        ("amax", {**AMAX, "pypto": "argmax"}, "amax: reduction family: no padding identity known for pypto.argmax"),
        ("amax", {**AMAX, "signature": "(input: Tensor, dim: Dims = (), correction: int = 1)"},
         "parameter 'correction' is none of"),
        ("mean", {**AMAX, "pypto": "amax", "average": True}, "average divides a sum"),
        ("silu", {**GOOD, "category": "composite", "family": "composite", "recipe": "mul(input, sigmoid(input))"},
         "is no elementwise entry of the table"),
        ("half", {**GOOD, "family": "cast", "pypto": "cast"}, "no target dtype"),
        ("exp", {**GOOD, "commutative": True}, "only a binary op can be commutative"),
    ],
)
def test_an_entry_its_family_cannot_honour_is_refused_when_the_table_loads(op, body, message):
    with pytest.raises(TableError, match=message):
        build_table({op: body})


def test_clamp_bounds_and_amax_reducer_reach_the_kernel():
    table = build_table({"clamp": {**CLAMP, "args": {"min": "min", "max": "max"}}, "amax": AMAX})
    code = translate_source("import torch\nx = torch.ones(3)\ny = torch.clamp(x, -1, 1)\nz = torch.amax(x, -1)\n",
                            table=table).code
    assert "pypto.clip(x_tile, min=min, max=max)" in code and "def clamp_kernel(dtype, cols, min, max):" in code
    assert "pypto.amax(x_tile, dim=-1, keepdim=True)" in code and "-math.inf)" in code and "pypto.sum" not in code


EXPM1 = {"category": "same-name", "family": "elementwise", "apis": ["torch.expm1", "torch.Tensor.expm1"],
         "signature": "(input: Tensor, *, out: Tensor = None)", "pypto": "expm1",
         "dtypes": ["float32", "float16", "bfloat16"], "reject": {"out": "out= writes into a caller's tensor"},
         "examples": {"convert": ["torch.expm1(x)", "x.expm1()"], "stay": {"torch.expm1(x, out=y)": "out="}}}  # fmt: skip


def test_a_new_op_is_one_entry_and_its_tests_appear():
    table = build_table({"expm1": EXPM1})
    code = translate_source("import torch\ny = torch.expm1(torch.ones(3))\n", table=table).code
    assert "def pypto_expm1(input):" in code and "pypto.expm1(x_tile)" in code
    assert converting(table) == [("expm1", "torch.expm1(x)"), ("expm1", "x.expm1()")]
    assert staying(table) == [("expm1", "torch.expm1(x, out=y)", "out=")]
    assert call_shapes(table.entries["expm1"]) == {
        "positional": "torch.expm1(x)", "keyword": "torch.expm1(input=x)",
        "shuffled": "torch.expm1(input=x)", "defaults": "torch.expm1(x)"}  # fmt: skip
    cases = kernel_cases(table)
    assert [(e.op, call, dtype) for e, call, dtype, _ in cases] == [
        ("expm1", "torch.expm1(x)", dtype) for dtype in (torch.float32, torch.float16, torch.bfloat16)
    ] + [("expm1", "x.expm1()", torch.float32)]
