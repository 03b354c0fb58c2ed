"""The op table: its validator rejects malformed entries, and the built-in table is sound."""

import pytest

from torch2pypto.mapping import CATEGORIES, TableError, build_table, load_table
from torch2pypto.rules import RULES, composite

TABLE = load_table()


def test_every_category_has_a_rule_and_an_entry():
    assert set(RULES) == set(CATEGORIES)
    assert {e.category for e in TABLE.entries.values()} == set(CATEGORIES)


def test_rmsnorm_family_is_covered():
    family = ["to", "float", "half", "bfloat16", "double", "type", "type_as", "pow", "mean", "sum",
              "rsqrt", "sqrt", "exp", "neg", "abs", "add", "sub", "mul", "div"]  # fmt: skip
    assert set(family) <= set(TABLE.entries)


def test_every_composite_has_a_recipe():
    composites = {op for op, e in TABLE.entries.items() if e.category == "composite"}
    assert composites <= set(composite.RECIPES)


def test_signature_binds_kinds_defaults_and_keyword_only():
    mean = TABLE.entries["mean"]
    assert [p.name for p in mean.params] == ["input", "dim", "keepdim", "dtype"]
    assert mean.param("keepdim").default is False
    assert mean.param("dtype").keyword_only
    assert mean.param("input").is_tensor and mean.param("input").required


GOOD = {"category": "same-name", "apis": ["torch.exp"], "signature": "(input: Tensor)", "pypto": "exp"}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"category": "renamed"}, "unknown category"),
        ({"signature": "(input: Tensor"}, "not a parameter list"),
        ({"signature": "(input: Matrix)"}, "unknown kind"),
        ({"signature": "(n: int)"}, "first parameter must be the input Tensor"),
        ({"apis": ["numpy.exp"]}, "not a torch name"),
        ({"reject": {"alpha": "no"}}, "unknown parameter"),
        ({"dtypes": ["float8"]}, "unknown dtype"),
        ({"colour": "blue"}, "unknown field"),
        ({"category": "unsupported", "pypto": ""}, "needs a reason"),
        ({"pypto": ""}, "names its pypto API"),
    ],
)
def test_validator_rejects(change, message):
    with pytest.raises(TableError, match=message):
        build_table({"exp": {**GOOD, **change}})


def test_an_api_belongs_to_one_entry():
    with pytest.raises(TableError, match="claimed by both"):
        build_table({"exp": GOOD, "exp2": GOOD})


def test_a_same_name_op_is_one_entry_and_no_python():
    table = build_table({"expm1": {**GOOD, "apis": ["torch.expm1", "torch.Tensor.expm1"], "pypto": "expm1"}})
    from torch2pypto.translator.translate import translate_source

    code = translate_source("import torch\ny = torch.expm1(torch.ones(3))\n", table=table).code
    assert "def pypto_expm1(input):" in code and "pypto.expm1(x_tile)" in code
