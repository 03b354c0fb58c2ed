"""Shortcuts of the translator's speed work give what the long way gives."""

import ast
import copy

import pytest

from torch2pypto.mapping import load_table
from torch2pypto.rules import conv, cube, movement, reduction
from torch2pypto.rules.tile_program import FP32, ROWS, Program
from torch2pypto.translator.engine import syntax, transform
from torch2pypto.translator.engine.transform import Options
from torch2pypto.translator.engine.translate import translate_source

_OPTIONS = [Options(), Options(fuse=False)]


@pytest.mark.parametrize("text", [
    "x", "self.w", "x[0]", "x < 2", "a and b", "f(x)", "set()", "set(x)", "2", "-2.5", "+3", "(1, 2.0)", "[1]",
    "{1: 2}", "{1}", "1 + 2j", "1 + 2", "x + 1j", "1 - x", "not 1", "~1", "...", "None", "'s'", "b'b'", "x if y else z",
    "lambda: 1", "(x := 1)", "f'{x}'", "1 * 2", "[*x]",
])
def test_literal_agrees_with_literal_eval(text):
    node = ast.parse(text, mode="eval").body
    try:
        expected = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        expected = "failed"
    assert syntax.literal_of(node, failed="failed") == expected


_MODULES = [
    "import torch\n\ndef f(x):\n    dt = torch.float32\n    return torch.softmax(x, dim=-1, dtype=dt) * 2\n",
    "import torch\n\ndef f(x, dt):\n    return torch.softmax(x, dim=-1, dtype=dt) * 2\n",
    "import torch\n\ndef f(x, a: float):\n    return torch.sigmoid(x), a * 2, 2 * x\n",
    "import torch\n\ndef f(x, y):\n    return torch.sigmoid(x), y * 2, 2 * y\n",
    "import torch\n\ndef f(x):\n    y = x.float()\n    return y * 2, 2 * x\n",
    "import torch\n\ndef f(a, b: float):\n    a = torch.relu(a)\n    return a * b\n",
    "import torch\n\ndef f(a: float, b):\n    b = torch.relu(b)\n    return a * b\n",
]


@pytest.mark.parametrize("options", _OPTIONS)
def test_outcomes_shared_across_modules_change_nothing(options):
    """A module translated after others that spell the same calls (their facts, their operands'
    sides differing) is translated as it is alone."""
    alone = []
    for source in _MODULES:
        transform._OUTCOMES.clear()
        alone.append(translate_source(source, options=options).code)
    transform._OUTCOMES.clear()
    for _ in range(2):
        assert [translate_source(source, options=options).code for source in _MODULES] == alone
        assert [translate_source(source, options=options).code for source in reversed(_MODULES)] == alone[::-1]


def test_literal_of_long_chains():
    """A long operator chain is checked part by part in linear time, and agrees with literal_eval."""
    for text in ("1" + " + 1" * 300, "x" + " + 1" * 300, "1" + " + 1" * 300 + " + x", "-(" * 50 + "2" + ")" * 50):
        node = ast.parse(text, mode="eval").body
        try:
            expected = ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            expected = "failed"
        assert syntax.literal_of(node, failed="failed") == expected


def test_definitions_built_once_per_entry_and_arguments():
    """A family's kernels and wrapper, built once per entry (and per other argument), are those
    built afresh; other arguments get their own."""
    entries = load_table().entries
    for module, op in ((cube, "linear"), (conv, "conv2d"), (reduction, "sum")):
        entry = entries[op]
        assert module.definitions(entry) is module.definitions(entry)
        assert module.definitions(entry) == module.definitions.__wrapped__(entry)
    cat = entries["cat"]
    two, three = movement._join(cat, "pypto_cat2", 2), movement._join(cat, "pypto_cat3", 3)
    assert two is movement._join(cat, "pypto_cat2", 2) and two != three
    assert three == movement._join.__wrapped__(cat, "pypto_cat3", 3)


def test_program_snapshot_is_a_deep_copy_in_effect():
    """A snapshot holds what the program held when it was taken, whatever the program does after."""
    program = Program()
    program.cast(program.tensor(program.param("x", ROWS, "x")), FP32)
    before = copy.deepcopy(program)
    kept = program.snapshot()
    program.cast(program.tensor(program.param("y", ROWS, "y")), FP32)
    program.ops.append("add")
    program.aliases["y"] = "x"
    assert vars(kept) == vars(before) and vars(program) != vars(before)
