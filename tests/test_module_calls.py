"""Calls of nn modules held in attributes: ``self.act(x)`` with ``self.act = nn.ReLU()`` is the module's op."""

import importlib.util

import pytest
import torch

import torch2pypto
from helpers import sample, statuses, translate
from torch2pypto import Options, translate_source
from torch2pypto.mapping import TableError, build_table, load_table
from torch2pypto.translator.verification.interpreter import counting

MLP = """\
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.1)

    def build(self):
        self.gate = torch.nn.ReLU(inplace=True)

    def forward(self, x):
        return self.drop(self.gate(self.act(x)))
"""


def test_a_held_module_call_resolves_to_its_op_and_reports_the_module_class():
    assert statuses(MLP) == [("torch.nn.Dropout", "host-side"), ("torch.nn.ReLU", "unsupported"), ("torch.nn.ReLU", "converted")]
    code = translate(MLP).code
    assert "return self.drop(self.gate(pypto_relu(x)))" in code  # the bare nn.ReLU(): attributes at their defaults


def test_module_arguments_bind_to_the_modules_attributes():
    """nn.ReLU(inplace=True) reads inplace=self.gate.inplace, which the relu entry rejects; nothing dropped."""
    record = next(r for r in translate(MLP).records if r.status == "unsupported")
    assert record.reason == "in-place relu has no kernel form: PyPTO writes to an output"


def test_attribute_parameters_are_read_at_run_time():
    raw = _raw_table()
    raw["sum"]["modules"] = {"torch.nn.Softmax": {"dim": "dim"}}  # a stand-in: sum has a dim to read
    source = "from torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        self.f = nn.Softmax(dim=-1)\n    def forward(self, x):\n        return self.f(x)\n"
    code = translate_source(source, table=build_table(raw)).code
    assert "return pypto_sum(x, dim=self.f.dim)" in code


@pytest.mark.parametrize(
    "code",
    [
        "from torch import nn\nACT2FN = {}\nclass M(nn.Module):\n    def __init__(self):\n        self.act = ACT2FN['relu']\n    def forward(self, x):\n        return self.act(x)\n",
        "from torch import nn\nclass M(nn.Module):\n    def __init__(self, a):\n        self.act = nn.ReLU() if a else nn.GELU()\n    def forward(self, x):\n        return self.act(x)\n",
        "from torch import nn\nclass M(nn.Module):\n    def __init__(self, a):\n        self.act = nn.ReLU()\n    def swap(self):\n        self.act = nn.Identity()\n    def forward(self, x):\n        return self.act(x)\n",
        "from torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        self.proj = nn.Linear(4, 4)\n    def forward(self, x):\n        return self.proj(x)\n",
    ],
    ids=["ACT2FN", "either of two", "reassigned", "not in the table"],
)
def test_attributes_not_always_one_mapped_module_stay_unresolved(code):
    assert statuses(code) == []
    assert translate(code).code == code


@pytest.mark.parametrize(
    "modules, message",
    [
        ({"SiLU": {}}, "torch.nn classes"),
        ({"torch.nn.ReLU": {"input": "x"}}, "not a parameter after the input"),
        ({"torch.nn.ReLU": {"alpha": "alpha"}}, "not a parameter after the input"),
        ({"torch.nn.ReLU": {"inplace": "in place"}}, "not an attribute name"),
    ],
)
def test_bad_modules_fields_are_refused_when_the_table_loads(modules, message):
    raw = _raw_table()
    raw["relu"]["modules"] = modules
    with pytest.raises(TableError, match=message):
        build_table(raw)


def test_a_module_class_belongs_to_one_entry():
    raw = _raw_table()
    raw["exp"]["modules"] = {"torch.nn.ReLU": {}}
    with pytest.raises(TableError, match="torch.nn.ReLU is claimed by both"):
        build_table(raw)


@pytest.mark.interpreter
def test_a_held_relu_runs_its_kernel_and_matches_the_module(tmp_path):
    path = tmp_path / "mlp_pypto.py"
    path.write_text(translate(MLP).code)
    spec = importlib.util.spec_from_file_location("mlp_pypto", path)
    translated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(translated)
    original = {}
    exec(compile(MLP, "mlp.py", "exec"), original)
    x = sample(5, 3, 40)
    model, reference = translated.MLP().eval(), original["MLP"]().eval()
    model.build(), reference.build()
    ran = counting()
    with torch2pypto.interpreted(translated):
        got = model(x)
    assert ran() == {"relu_kernel.kernel": 1}
    torch.testing.assert_close(got, reference(x))


def _raw_table():
    import tomllib
    from importlib import resources

    return tomllib.loads(resources.files("torch2pypto.mapping").joinpath("ops.toml").read_text())
