"""The offset family: ``torch.arange(n) + k`` of a k of no known tensor kind is the range moved by
k (the real models number their positions so): a Python int launches the arange kernel alone, with
no torch op left; any other k is added by torch as written; other sums stay the add they are."""

import pytest
import torch

import torch2pypto
from helpers import load, translate
from torch2pypto import translate_source
from torch2pypto.translator.engine.transform import Options
from torch2pypto.translator.verification.hostops import host_ops
from torch2pypto.translator.verification.interpreter import counting

pytestmark = pytest.mark.interpreter

CODE = """import torch


def positions(inputs_embeds: torch.Tensor, past_seen_tokens: int):
    return torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens


def moved(start, end, step, offset):
    return torch.arange(start, end, step) + offset


def by_end(n, k):
    return torch.arange(end=n) + k
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    translation = translate(CODE)
    assert {r.status for r in translation.records} == {"converted"}, translation.records
    assert [r.pypto_api for r in translation.records if r.api == "torch.Tensor.__add__"] == ["pypto.arange"] * 3
    assert "past_seen_tokens" in translation.code and "+" not in translation.code.split("def positions")[1].split("\n\n")[0]
    assert translate(translation.code).code == translation.code  # a second run changes nothing
    return load(tmp_path_factory.mktemp("offset") / "offset.py", translation.code)


@pytest.mark.parametrize("n, k", [(1, 0), (13, 5), (1025, 1), (7, -3)])
def test_a_python_int_moves_the_range_one_launch_and_no_torch_op(made, n, k):
    embeds = torch.zeros(2, n)
    launched = counting()
    with torch2pypto.interpreted(made), host_ops(made) as left:
        got = made.positions(embeds, k)
    assert launched() == {"arange_kernel.kernel": 1}, launched()
    assert not left, left
    expected = torch.arange(n) + k
    assert got.dtype == expected.dtype and torch.equal(got, expected)


@pytest.mark.parametrize("start, end, step, offset", [(3, 40, 3, 2), (20, -5, -2, 7), (0, 10, 4, -10), (5, 6, 1, 2**20)])
def test_a_stepped_range_moves_exactly(made, start, end, step, offset):
    launched = counting()
    with torch2pypto.interpreted(made):
        got = made.moved(start, end, step, offset)
    assert sum(launched().values()) == 1
    expected = torch.arange(start, end, step) + offset
    assert got.dtype == expected.dtype and torch.equal(got, expected)


def test_a_lone_end_given_by_keyword_moves_as_arange_of_it(made):
    launched = counting()
    with torch2pypto.interpreted(made):
        got = made.by_end(6, 4)
    assert sum(launched().values()) == 1 and torch.equal(got, torch.arange(6) + 4)


@pytest.mark.parametrize("offset", [torch.tensor(3), torch.tensor([1.5]), 2.5, True, torch.tensor(2, dtype=torch.int32)],
                         ids=["int64 scalar", "float vector", "float", "bool", "int32 scalar"])
def test_an_offset_of_another_kind_is_added_by_torch_as_written(made, offset):
    expected = torch.arange(5) + offset
    with torch2pypto.interpreted(made):
        got = made.by_end(5, offset)
    assert got.dtype == expected.dtype and got.shape == expected.shape and torch.equal(got, expected)


@pytest.mark.parametrize("total", [
    "torch.arange(x.shape[0]) + 0.5", "torch.arange(x.shape[0], dtype=torch.int64) + 1", "2 + torch.arange(x.shape[0])",
    "torch.arange(x.shape[0]) + x", "torch.arange(0.5, 3) + 1", "torch.arange(*x.shape[:1]) + 1",
])
def test_other_sums_stay_the_add_they_are(total):
    """A float, a dtype, a number first (Python runs its __add__ first), a tensor added, a float
    range or starred arguments: the range is no moved int64 one, or may not be."""
    code = translate(f"import torch\n\n\ndef f(x: torch.Tensor):\n    return {total}\n").code
    assert "pypto_arange_plus" not in code and "return pypto_add(" in code, code


@pytest.mark.parametrize("options, line", [
    (Options(ignore=frozenset({"arange"})), "return pypto_add(torch.arange(x.shape[0]), k)"),
    (Options(select=frozenset({"add"})), "return pypto_add(torch.arange(x.shape[0]), k)"),
    (Options(ignore=frozenset({"arange_plus"})), "return pypto_add(pypto_arange(x.shape[0]), k)"),
    (Options(select=frozenset({"arange", "arange_plus"})), "return pypto_arange_plus(x.shape[0], offset=k)"),
], ids=["ignore arange", "select add", "ignore arange_plus", "select both"])
def test_the_moved_range_stands_for_the_range_too_and_needs_both_selected(options, line):
    code = translate_source("import torch\n\n\ndef f(x: torch.Tensor, k: int):\n    return torch.arange(x.shape[0]) + k\n", "m.py", options).code
    assert code.splitlines()[-1].strip() == line, code
