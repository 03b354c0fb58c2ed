"""The op table: its validator rejects malformed entries, families refuse what they cannot
honour, and a new op of a known family is one entry whose tests appear by themselves."""

import math
import re
from pathlib import Path

import pytest
import torch

from table_cases import call_shapes, converting, kernel_cases, staying
from torch2pypto.mapping import CATEGORIES, TableError, build_table, load_table
from torch2pypto.rules import reduction
from torch2pypto.schema.family import FAMILIES
from torch2pypto.translator.engine.translate import translate_source

TABLE = load_table()


def test_categories_are_the_manuals_and_families_are_registered():
    assert {e.category for e in TABLE.entries.values()} == set(CATEGORIES)
    assert {e.family for e in TABLE.entries.values() if e.family} == set(FAMILIES)
    assert all(f.name == name for name, f in FAMILIES.items())


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
        ({"omitted": {"out": "no"}}, "omitted names 'out', which is no required parameter"),
        ({"dtypes": ["float8"]}, "unknown dtype"),
        ({"colour": "blue"}, "unknown field"),
        ({"category": "unsupported", "family": None, "pypto": ""}, "needs a reason"),
        ({"category": "unsupported", "reason": "no"}, "has no kernel family"),
        ({"pypto": ""}, "names its pypto API"),
        ({"examples": {}}, "at least one example that converts"),
        ({"examples": {"convert": ["torch.exp(x"]}}, "is not an expression"),
        ({"sample": {"domain": "complex"}}, "sample domain"),
        ({"aliases": {"axis": "dim"}}, "alias 'axis' names unknown parameter 'dim'"),
        ({"aliases": {"input": "input"}}, "alias 'input' is itself a parameter"),
        ({"aliases": {"two words": "input"}}, "alias 'two words' is not a keyword name"),
        ({"torch": "torch.exp"}, "is a tensor form naming the torch function"),
        ({"apis": [], "torch": None}, "is a tensor form naming the torch function"),
        ({"tensor_forms": {"other": "exp"}}, "names parameters after the input"),
        ({"signature": "(input: Tensor, a: Number, b: Number)", "args": {"a": "a", "b": "b"}, "tensor_forms": {"b,a": "exp"}},
         "each once, in signature order"),
        ({"signature": "(input: Tensor, other: Number)", "args": {"other": "other"}, "tensor_forms": {"other": "log"}},
         "names no mapped entry: 'log'"),
        ({"signature": "(input: Tensor, other: Number)", "args": {"other": "other"}, "tensor_forms": {"other": "exp"}},
         r"takes 1 tensor operand\(s\), not the input and 'other'"),
        ({"forms": {"other": "exp"}}, "forms key 'other' is no rejected parameter"),
        ({"signature": "(input: Tensor, out: Tensor = None)", "reject": {"out": "no"}, "forms": {"out": "exp"}},
         "forms names 'exp', which is no mapped entry without apis"),
        ({"signature": "(input: Tensor, forward: object = None)", "torch_only": ["forward"], "forward": "forward"},
         "forward names a parameter of default None, no tensor, that the entry's modules bind"),
        ({"forward": "forward"}, "forward names a parameter"),
    ],
)
def test_validator_rejects(change, message):
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(TableError, match=message):
        build_table({"exp": body})


def test_an_api_belongs_to_one_entry():
    with pytest.raises(TableError, match="claimed by both"):
        build_table({"exp": GOOD, "exp2": GOOD})


NUMPY_SPELLINGS = {"axis": "dim", "keepdims": "keepdim"}  # torch's argument parser: numpy_compatibility_arg_names


def _parsed_by_torch(api: str) -> bool:
    """Whether torch's C++ argument parser takes the calls of ``api`` (a builtin function or a
    Tensor method of C), which takes the numpy spellings; a Python function (F.softmax,
    Tensor.split) or an nn module raises on them."""
    owner, _, name = api.rpartition(".")
    try:
        found = getattr(eval(owner, {"torch": torch}), name)
    except AttributeError:
        return False
    return isinstance(found, (type(torch.exp), type(torch.Tensor.exp)))


def test_an_entry_takes_axis_and_keepdims_where_torch_takes_them_for_every_api():
    """``torch.argmax(x, axis=1)`` and ``x.max(dim=-1, keepdims=True)`` are torch calls (wav2vec2,
    mra): an entry whose every API torch's parser takes aliases the numpy spellings of its dim
    and keepdim, and an entry with any other API does not (F.softmax(x, axis=1) raises in torch)."""
    assert _parsed_by_torch("torch.argmax") and _parsed_by_torch("torch.Tensor.max")
    assert not _parsed_by_torch("torch.nn.functional.softmax") and not _parsed_by_torch("torch.Tensor.split")
    wrong = {}
    for op, entry in TABLE.entries.items():
        parsed = bool(entry.apis) and all(_parsed_by_torch(api) for api in entry.apis)
        params = {p.name for p in entry.params}
        expected = {alias: p for alias, p in NUMPY_SPELLINGS.items() if parsed and p in params}
        given = {alias: p for alias, p in entry.aliases.items() if alias in NUMPY_SPELLINGS}
        if given != expected:
            wrong[op] = f"aliases {given}, torch takes {expected}"
    assert not wrong, wrong


CLAMP = {**GOOD, "apis": ["torch.clamp"], "pypto": "clip", "examples": {"convert": ["torch.clamp(x, -1, 1)"]},
         "signature": "(input: Tensor, min: Number = None, max: Number = None)"}  # fmt: skip
AMAX = {"category": "same-name-different-params", "family": "reduction", "apis": ["torch.amax"], "pypto": "amax",
        "signature": "(input: Tensor, dim: Dims = (), keepdim: bool = False)",
        "examples": {"convert": ["torch.amax(x, -1)"]}}  # fmt: skip


def test_clamp_bounds_and_amax_reducer_reach_the_kernel():
    table = build_table({"clamp": {**CLAMP, "args": {"min": "min", "max": "max"}}, "amax": AMAX})
    code = translate_source("import torch\nx = torch.ones(3)\ny = torch.clamp(x, -1, 1)\nz = torch.amax(x, -1)\n",
                            table=table).code
    assert "pypto.clip(x_tile, min=min, max=max)" in code and "def clamp_kernel(dtype, cols, min, max, blocks, heads, x_map, max_rows):" in code
    assert "pypto.amax(x_tile, dim=-1, keepdim=True)" in code and "-math.inf)" in code and "pypto.sum" not in code


# what each reducer pads rows with, and torch's reduction it must leave unchanged
PADDED = {(None, "sum"): torch.sum, (None, "amax"): torch.amax, (None, "amin"): torch.amin,
          (None, reduction.LOGSUMEXP): lambda row: torch.logsumexp(row, 0),
          ("bool", "amin"): torch.all, ("bool", "amax"): torch.any,
          ("int64", "amax"): torch.argmax, ("int64", "amin"): torch.argmin}  # fmt: skip


@pytest.mark.parametrize("output, reducer", [(o, r) for o, rs in reduction.IDENTITIES.items() for r in rs])
def test_a_reducers_padding_never_changes_its_result(output, reducer):
    """Rows are padded to 32 bytes with the reducer's identity (kernels also read only the real
    cols): appending it leaves torch's reduction unchanged. var reads the real cols only."""
    if reducer == "var":
        assert (output, reducer) not in PADDED
        return
    identity = eval(reduction.IDENTITIES[output][reducer], {"math": math})
    rows = (torch.randn(37, generator=torch.Generator().manual_seed(0)), torch.tensor([0.0, 1.0, -2.0]), torch.tensor([1.0, 1.0]), torch.zeros(3))
    for row in (r.double() for r in rows):  # float64: a sum's rounding does not depend on how torch blocks it
        padded = torch.cat([row, torch.full((11,), identity, dtype=row.dtype)])
        torch.testing.assert_close(PADDED[output, reducer](padded), PADDED[output, reducer](row), rtol=0, atol=1e-6)


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


def _with(op, body):
    import tomllib
    from importlib import resources

    raw = tomllib.loads(resources.files("torch2pypto.mapping").joinpath("ops.toml").read_text())
    return {**raw, op: body}


ROW = {**GOOD, "category": "composite", "family": "composite", "apis": ["torch.special.softmax"], "pypto": "softmax",
       "signature": "(input: Tensor, dim: int = -1)", "recipe": "e = exp(sub(input, amax(input))); div(e, sum(e))",
       "along": "dim", "examples": {"convert": ["torch.special.softmax(x, -1)"]}}  # fmt: skip


@pytest.mark.parametrize(
    "change, message",
    [
        ({"along": None}, "a recipe that reduces along the row names its row (along)"),
        ({"along": "input"}, "is a dim (int) or a normalized shape (Dims), not Tensor"),
        ({"along": "axis"}, "along = 'axis' is no parameter"),
        ({"signature": "(input: Tensor, dim: int = -1, scale: Number = 1.0)"}, "parameter 'scale' is neither an operand"),
        ({"signature": "(input: Tensor, dim: int = -1, other: Tensor = None)"}, "a recipe along a dim takes one tensor"),
        ({"recipe": "mul(input, sigmoid(sum(input)))"}, "a row recipe cannot use ops that read whole tiles"),
        ({"recipe": "exp(input) if dim == 'a' else input"}, "is no comparison of a str parameter"),
        ({"recipe": "e = exp(input)"}, "ends with its result expression"),
        ({"recipe": "e = exp(input); input"}, "the result is no step's"),
        ({"recipe": "exp(sub(input, amin(input, -1)))"}, "amin takes 1 operand"),
        ({"recipe": "exp(input, input)"}, "exp takes 1 operand"),
        ({"recipe": "exp(mul(input, other))", "along": None, "signature": "(input: Tensor, dim: int = -1, other: Tensor = None)"},
         "optional tensors are rows of a normalized shape"),
        ({"recipe": "mul(mul(input, weight), other)", "along": None, "channels": ["weight"],
          "signature": "(input: Tensor, other: Tensor, dim: int = -1, weight: Tensor = None)"},
         "a recipe over channels takes the input and channel operands only"),
        ({"recipe": "mul(input, weight)", "along": None, "channels": ["weight"], "shared": ["other"],
          "signature": "(input: Tensor, weight: Tensor, dim: int = -1)"}, "shared names channel operands"),
    ],
)
def test_a_composite_recipe_its_family_cannot_honour_is_refused_when_the_table_loads(change, message):
    body = {k: v for k, v in {**ROW, **change}.items() if v is not None}
    with pytest.raises(TableError, match=re.escape(message)):
        build_table(_with("special_softmax", body))


def test_a_recipe_branch_not_taken_adds_no_steps_and_an_absent_weight_drops_its_step():
    table = load_table()
    from torch2pypto.rules import recipe

    gelu, norm = table.entries["gelu"], table.entries["rms_norm"]
    tanh = recipe.program(gelu, gelu.parts, (("approximate", "tanh"),))
    assert "relu" not in {a.step.op for a in tanh} and "abs" not in {a.step.op for a in tanh}
    bare = recipe.program(norm, norm.parts, (), frozenset({"weight"}))
    weighted = recipe.program(norm, norm.parts)
    assert len(weighted) == len(bare) + 1 and weighted[-1].operands[1] == "weight"


def test_the_tables_comments_cite_files_that_exist():
    """A path of the package, docs, tests or scripts, or a Markdown page, cited in ops.toml's or
    torch.toml's comments names a file or folder of the repository (not design.md, which docs/ has not)."""
    root = Path(__file__).parent.parent
    for name in ("ops.toml", "torch.toml"):
        comments = "\n".join(line.partition("#")[2] for line in (root / "torch2pypto/mapping" / name).read_text().splitlines())
        cited = re.findall(r"\b(?:torch2pypto|docs|tests|scripts)/[\w./]*|[\w./]+\.md\b", comments)
        assert cited, name
        missing = [c for c in cited if not any((base / c.rstrip(".")).exists() for base in (root, root / "docs"))]
        assert not missing, f"{name} cites {missing}"
