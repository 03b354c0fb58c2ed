"""Calls of nn modules held in attributes: ``self.act(x)`` with ``self.act = nn.ReLU()`` is the module's op."""

import importlib.util

import pytest
import torch

import torch2pypto
from helpers import sample, statuses, translate
from torch2pypto import translate_source
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
    source = "from torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        self.f = nn.Softmax(dim=-1)\n    def forward(self, x):\n        return self.f(x)\n"
    code = translate_source(source).code
    assert "return pypto_softmax(x, dim=self.f.dim)" in code


@pytest.mark.parametrize(
    "code",
    [
        "from torch import nn\nACT2FN = {}\nclass M(nn.Module):\n    def __init__(self):\n        self.act = ACT2FN['relu']\n    def forward(self, x):\n        return self.act(x)\n",
        "from torch import nn\nclass M(nn.Module):\n    def __init__(self, a):\n        self.act = nn.ReLU() if a else nn.GELU()\n    def forward(self, x):\n        return self.act(x)\n",
        "from torch import nn\nclass M(nn.Module):\n    def __init__(self, a):\n        self.act = nn.ReLU()\n    def swap(self):\n        self.act = nn.Identity()\n    def forward(self, x):\n        return self.act(x)\n",
    ],
    ids=["ACT2FN", "either of two", "reassigned"],
)
def test_attributes_not_always_one_mapped_module_stay_unresolved(code):
    assert statuses(code) == []
    assert translate(code).code == code


def test_a_held_module_not_in_the_table_is_a_site_left_as_torch():
    code = "from torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        self.norm = nn.LSTM(4, 4)\n    def forward(self, x):\n        return self.norm(x)\n"
    assert [(r.api, r.status, r.reason) for r in translate(code).records] == [("torch.nn.LSTM", "unsupported", "not in the mapping table")]
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


def test_only_an_entry_left_as_torch_may_name_modules_without_apis():
    raw = _raw_table()
    assert not raw["sequential"]["apis"] and build_table(raw).by_module["torch.nn.Sequential"].op == "sequential"
    raw["relu"]["apis"] = []
    with pytest.raises(TableError, match="an entry has apis"):
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


# Every module class the table maps, built as a model would build it: (construction, entry).
HELD = [
    ("nn.ReLU()", "relu"), ("nn.Dropout(0.1)", "dropout"), ("nn.SiLU()", "silu"), ("nn.Sigmoid()", "sigmoid"),
    ("nn.Tanh()", "tanh"), ("nn.GELU()", "gelu"), ("nn.GELU(approximate='tanh')", "gelu"),
    ("nn.Softplus()", "softplus"), ("nn.Mish()", "mish"), ("nn.ELU()", "elu"),
    ("nn.Hardtanh()", "hardtanh"), ("nn.ReLU6()", "relu6"), ("nn.LeakyReLU()", "leaky_relu"),
    ("nn.Softmax(dim=-1)", "softmax"), ("nn.Softmax(1)", "softmax"), ("nn.LogSoftmax(dim=0)", "log_softmax"),
    ("nn.LayerNorm(40)", "layer_norm"), ("nn.LayerNorm([3, 40], elementwise_affine=False)", "layer_norm"),
    ("nn.LayerNorm(40, bias=False)", "layer_norm"), ("nn.RMSNorm(40)", "rms_norm"), ("nn.RMSNorm([3, 40], eps=1e-6)", "rms_norm"),
    ("nn.Linear(40, 7)", "linear"), ("nn.LogSigmoid()", "logsigmoid"), ("nn.Softplus(beta=2.0, threshold=1.0)", "softplus"),
    ("nn.GLU()", "glu"), ("nn.PReLU()", "prelu"), ("nn.PReLU(3)", "prelu"),
    ("nn.Conv1d(3, 7, 1)", "conv1d"), ("nn.Conv1d(3, 7, kernel_size=4, stride=4, bias=False)", "conv1d"),
    ("nn.Conv1d(3, 3, kernel_size=4, groups=3, padding=3)", "conv1d"), ("nn.Conv1d(3, 5, kernel_size=3, padding=1)", "conv1d"),
    ("nn.Conv2d(5, 6, 1)", "conv2d"), ("nn.Conv2d(5, 6, kernel_size=(1, 4), stride=(1, 4))", "conv2d"),
    ("nn.Conv1d(3, 5, kernel_size=3, stride=2, padding=1)", "conv1d"), ("nn.Conv2d(5, 6, 3, stride=(1, 3), padding=1, dilation=(1, 2))", "conv2d"),
    ("nn.AdaptiveAvgPool2d(1)", "adaptive_avg_pool2d"), ("nn.AdaptiveAvgPool2d((1, 1))", "adaptive_avg_pool2d"),
    ("nn.Hardswish()", "hardswish"), ("nn.Hardsigmoid()", "hardsigmoid"),
    ("nn.Upsample(scale_factor=2)", "interpolate"), ("nn.Upsample(size=57, mode='linear', align_corners=True)", "interpolate"),
    ("nn.Flatten(1)", "flatten"), ("nn.Unflatten(2, (4, 10))", "unflatten"),
]  # fmt: skip
HOST_SIDE = {"dropout", "flatten", "unflatten"}  # views and identities: no kernel
HELD_SOURCE = """\
import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = {}

    def forward(self, x):
        return self.layer(x)
"""


@pytest.mark.parametrize("construction, reason", [("nn.ELU(alpha=0.5)", "in-place elu"), ("nn.Hardtanh(-0.5, 2.0)", "in-place hardtanh")])
def test_a_module_built_with_arguments_reads_a_rejected_attribute_and_stays_torch(construction, reason):
    """nn.ELU(alpha=0.5) binds inplace=self.layer.inplace too, unknown when translating: torch, with the reason."""
    (record,) = translate(HELD_SOURCE.format(construction)).records
    assert record.status == "unsupported" and reason in record.reason


LEFT = [  # held modules the table leaves as torch, the arguments of their call, and their reason
    ("nn.Sequential(nn.ReLU())", "x", "a container"), ("nn.MultiheadAttention(4, 2)", "x, x, x", "multi_head_attention_forward"),
    ("nn.MultiheadAttention(4, 2)", "query=x, key=x, value=x", "multi_head_attention_forward"),  # forward's own names (mask2former)
    ("nn.ConvTranspose2d(4, 4, 2)", "x", "a transposed convolution"), ("nn.Conv3d(4, 4, 1)", "x", "a 3-D convolution"),
]


@pytest.mark.parametrize("construction, args, reason", LEFT)
def test_a_held_module_the_table_leaves_as_torch_says_why(construction, args, reason):
    source = HELD_SOURCE.format(construction).replace("self.layer(x)", f"self.layer({args})")
    translation = translate(source)
    (record,) = translation.records
    assert record.status == "unsupported" and reason in record.reason, record
    assert translation.code == source


def test_every_module_class_of_the_table_is_tried():
    # test_indexing.py: its input is indices; test_activation.py: a module chosen by its class at run time
    tried_elsewhere = {"torch.nn.Embedding", "transformers.activations.ACT2FN"}
    tried_elsewhere |= {"torch.nn.CrossEntropyLoss"}  # test_loss.py: its target is class indices
    tried_elsewhere |= {"torch.nn.MSELoss", "torch.nn.BCEWithLogitsLoss"}  # test_loss.py: a call of two tensors
    tried_elsewhere |= {"torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d", "torch.nn.GroupNorm"}  # test_norms.py
    tried = {f"torch.nn.{c.split('(')[0].removeprefix('nn.')}" for c, *_ in [*HELD, *LEFT]}
    assert tried | tried_elsewhere == set(load_table().by_module)


@pytest.mark.parametrize("construction", [c for c, op in HELD if op in HOST_SIDE])
def test_a_held_host_side_module_is_a_site_left_as_written(construction):
    source = HELD_SOURCE.format(construction)
    translation = translate(source)
    assert [r.status for r in translation.records] == ["host-side"] and translation.code == source


@pytest.mark.interpreter
@pytest.mark.parametrize("construction, op", [h for h in HELD if h[1] not in HOST_SIDE], ids=[c for c, op in HELD if op not in HOST_SIDE])
def test_a_held_module_runs_its_kernel_and_matches_the_module_with_its_gradient(tmp_path, construction, op):
    source = HELD_SOURCE.format(construction)
    translation = translate(source)
    assert [r.status for r in translation.records] == ["converted"], translation.records
    path = tmp_path / "held_pypto.py"
    path.write_text(translation.code)
    spec = importlib.util.spec_from_file_location("held_pypto", path)
    translated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(translated)
    original = {}
    exec(compile(source, "held.py", "exec"), original)
    reference = original["M"]()
    with torch.no_grad():
        for p in reference.parameters():
            p.copy_(sample(*p.shape, seed=1))
    model = translated.M()
    model.load_state_dict(reference.state_dict())
    x, y = sample(5, 3, 40).requires_grad_(), sample(5, 3, 40).requires_grad_()
    ran = counting()
    with torch2pypto.interpreted(translated):
        got = model(x)
    assert sum(ran().values()) == 1, ran()
    expected = reference(y)
    torch.testing.assert_close(got, expected)
    got.sum().backward(), expected.sum().backward()
    torch.testing.assert_close(x.grad, y.grad)
    for mine, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(mine.grad, theirs.grad)


LOCAL = "import torch\nfrom torch import nn\nfrom torch.nn import CrossEntropyLoss, MSELoss\n\n\ndef f(x, t, c):\n"


@pytest.mark.parametrize(
    "body, expected",
    [
        ("    loss_fct = CrossEntropyLoss()\n    return loss_fct(x, t)\n", "return pypto_cross_entropy(x, t)"),
        ("    loss_fct = nn.CrossEntropyLoss(ignore_index=0)\n    return loss_fct(x, t)\n",
         "return pypto_cross_entropy(x, t, weight=loss_fct.weight, ignore_index=loss_fct.ignore_index, reduction=loss_fct.reduction, label_smoothing=loss_fct.label_smoothing)"),
        ("    loss_fct = MSELoss()\n    loss_fct = CrossEntropyLoss()\n    return loss_fct(x, t)\n", "return pypto_cross_entropy(x, t)"),  # the binding that reaches
        ("    if c:\n        loss_fct = CrossEntropyLoss()\n        return loss_fct(x, t)\n    loss_fct = MSELoss()\n", "return pypto_cross_entropy(x, t)"),
        ("    if c:\n        loss_fct = CrossEntropyLoss()\n    else:\n        loss_fct = CrossEntropyLoss()\n    return loss_fct(x, t)\n", "return pypto_cross_entropy(x, t)"),
    ],
    ids=["bare", "with arguments", "rebound before", "in its branch", "same class in each branch"],
)
def test_a_module_in_a_local_name_is_a_site_of_its_class(body, expected):
    translation = translate(LOCAL + body)
    assert [(r.api, r.status) for r in translation.records] == [("torch.nn.CrossEntropyLoss", "converted")]
    assert expected in translation.code


@pytest.mark.parametrize(
    "body",
    [
        "    if c:\n        loss_fct = CrossEntropyLoss()\n    else:\n        loss_fct = MSELoss()\n    return loss_fct(x, t)\n",
        "    loss_fct = CrossEntropyLoss()\n    if c:\n        loss_fct = MSELoss()\n    return loss_fct(x, t)\n",
        "    loss_fct = CrossEntropyLoss()\n    loss_fct.ignore_index = 3\n    return loss_fct(x, t)\n",
        "    loss_fct = CrossEntropyLoss()\n    g(loss_fct)\n    return loss_fct(x, t)\n",
        "    loss_fct = CrossEntropyLoss()\n    return (lambda: loss_fct(x, t))()\n",
        "    for loss_fct in (CrossEntropyLoss(), MSELoss()):\n        return loss_fct(x, t)\n",
        "    loss_fct = CrossEntropyLoss() if c else MSELoss()\n    return loss_fct(x, t)\n",
        "    loss_fct = nn.functional.softmax(x)\n    return loss_fct(x, t)\n",
        "    return c(x, t)\n",
    ],
    ids=["another class in a branch", "rebound in a branch", "attribute set", "passed on", "in a lambda",
         "a loop's target", "either of two", "no class", "a parameter"],
)
def test_a_local_name_not_provably_one_module_is_no_module_site(body):
    code = LOCAL + body
    line = next(i for i, text in enumerate(code.splitlines(), 1) if "(x, t)" in text)
    assert [r.api for r in translate(code).records if r.line == line] == []
