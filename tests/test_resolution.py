"""Name resolution: every spelling of a torch call is found; only tensor receivers are rewritten."""

import pytest

from helpers import statuses, translate

C, U, A = "converted", "unsupported", "left-alone"


@pytest.mark.parametrize(
    "code",
    [
        "import torch\ny = torch.rsqrt(x)\n",
        "import torch as T\ny = T.rsqrt(x)\n",
        "from torch import rsqrt\ny = rsqrt(x)\n",
        "from torch import rsqrt as r\ny = r(x)\n",
        "import torch.nn.functional as F\ny = F.relu(x)\n",
        "from torch.nn import functional as F\ny = F.relu(x)\n",
        "import torch\ny = torch.nn.functional.relu(x)\n",
    ],
)
def test_function_spellings(code):
    assert [s for _, s in statuses(code)] == [C]
    assert "pypto_" in translate(code).code


def test_shadowed_torch_is_not_torch():
    code = "import torch as T\ndef f(x, torch):\n    return torch.rsqrt(x)\n"
    assert ("torch.rsqrt", "converted") not in statuses(code)  # at most an ambiguous method call
    assert translate(code).code == code


def test_local_named_like_a_torch_function_is_not_torch():
    code = "from torch import exp\ndef f(x):\n    exp = lambda v: v\n    return exp(x)\n"
    assert statuses(code) == []


@pytest.mark.parametrize(
    "code",
    [
        "import torch\ndef f(x: torch.Tensor):\n    return x.float()\n",
        "from torch import Tensor\ndef f(x: Tensor):\n    return x.float()\n",
        "from typing import Optional\nimport torch\ndef f(x: Optional[torch.Tensor]):\n    return x.float()\n",
        "import torch\ndef f(x: torch.Tensor | None):\n    return x.float()\n",
        "import torch\ny = torch.ones(3).float()\n",
        "import torch\ny = torch.ones(3)\nz = y.float()\n",
        "import torch\ndef f(x: torch.Tensor):\n    y = x.view(-1) * 2\n    return y[0].float()\n",
        "import torch\ndef f(x: torch.Tensor):\n    x = x.float()\n    return x.half()\n",
        "import torch\ndef f(x: torch.Tensor):\n    return x.type(torch.float16).float()\n",
    ],
)
def test_known_tensor_receivers(code):
    methods = [s for api, s in statuses(code) if api.startswith("torch.Tensor.")]
    assert C in methods and all(s in (C, "host-side") for s in methods)  # views are host-side


MODULE = """\
import torch
from torch import nn

class Norm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.register_buffer("scale", torch.ones(n))
        self.name = "norm"
        self.layer = nn.Linear(n, n)

    def _helper(self, h):
        return h.float()

    def forward(self, x, flag=False):
        y = self._helper(x.exp()) + self.weight.float() + self.scale.abs()
        return self.name.upper(), y.type_as(x)
"""


def test_module_parameters_buffers_forward_args_and_helpers():
    found = statuses(MODULE)
    assert ("torch.Tensor.type_as", C) in found
    assert sorted(api for api, s in found if s == C) == [
        "torch.Tensor.__add__", "torch.Tensor.__add__", "torch.Tensor.abs", "torch.Tensor.exp", "torch.Tensor.float",
        "torch.Tensor.float", "torch.Tensor.type_as",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "code",
    [
        "def f(s: str):\n    return s.float()\n",
        "def f(items: list):\n    return items.abs()\n",
        "import numpy as np\ndef f():\n    a = np.ones(3)\n    return a.abs()\n",
        "import numpy as np\ny = np.abs(x)\n",
        "class Box:\n    pass\ndef f(b: Box):\n    return b.float()\n",
        "def f():\n    s = 'x'\n    return s.float()\n",
    ],
)
def test_non_tensor_receivers_are_never_touched(code):
    assert statuses(code) == []
    assert translate(code, assume_tensors=True).code == code


def test_ambiguous_receivers_are_reported_and_left_alone():
    code = "def f(x):\n    return x.float()\n"
    assert statuses(code) == [("torch.Tensor.float", A)]
    assert translate(code).code == code


def test_assume_tensors_converts_ambiguous_receivers():
    code = "import torch\ndef f(x):\n    return x.float()\n"
    assert statuses(code, assume_tensors=True) == [("torch.Tensor.float", C)]
    assert "pypto_cast(x, torch.float32)" in translate(code, assume_tensors=True).code


def test_helper_called_with_non_tensor_keeps_its_parameter_ambiguous():
    code = MODULE.replace("self._helper(x.exp())", "self._helper(x.exp()) + self._helper(1)")
    found = statuses(code)
    assert ("torch.Tensor.float", A) in found


def test_torch_ops_outside_the_table_are_reported():
    assert statuses("import torch\ny = torch.linalg.det(a)\n") == [("torch.linalg.det", U)]
    assert statuses("import torch\nwith torch.no_grad():\n    pass\n") == []


H = "host-side"


@pytest.mark.parametrize(
    "code, api",
    [
        ("def f(x: torch.Tensor):\n    return x.view(2, -1)\n", "torch.Tensor.view"),
        ("def f(x: torch.Tensor):\n    return x.permute(0, 2, 1)\n", "torch.Tensor.permute"),
        ("def f(x: torch.Tensor):\n    return torch.transpose(x, 1, 2)\n", "torch.transpose"),
        ("def f(x: torch.Tensor):\n    return x.unsqueeze(-1).squeeze(-1)\n", "torch.Tensor.unsqueeze"),
        ("def f(x: torch.Tensor):\n    return x.flatten(1).t()\n", "torch.Tensor.flatten"),
        ("y = torch.zeros(3, dtype=torch.float16)\n", "torch.zeros"),
        ("y = torch.full((3,), 8)\n", "torch.full"),
        ("def f(x: torch.Tensor):\n    return torch.ones_like(x)\n", "torch.ones_like"),
        ("def f(x: torch.Tensor):\n    return x.cuda()\n", "torch.Tensor.cuda"),
        ("def f(x: torch.Tensor):\n    return x.to('npu:0')\n", "torch.Tensor.to"),
        ("def f(x: torch.Tensor, y: torch.Tensor):\n    return x.to(y.device, non_blocking=True)\n", "torch.Tensor.to"),
        ("def f(x: torch.Tensor):\n    return x.to(device=torch.device('cpu'))\n", "torch.Tensor.to"),
        ("def f(x: torch.Tensor):\n    d = torch.device('cuda')\n    return x.to(d)\n", "torch.Tensor.to"),
        ("import torch.nn.functional as F\ndef f(x: torch.Tensor):\n    return F.dropout(x, 0.1, True)\n", "torch.nn.functional.dropout"),
    ],
)
def test_host_side_ops_get_their_own_status_and_stay_byte_for_byte(code, api):
    code = "import torch\n" + code
    assert (api, H) in statuses(code)
    assert all(s == H for _, s in statuses(code))
    assert translate(code).code == code


def test_a_device_move_is_host_side_only_when_every_argument_names_a_device():
    cast = "import torch\ndef f(x: torch.Tensor, y: torch.Tensor):\n    return x.to(torch.float16), x.to(y.device, torch.float16)\n"
    assert H not in {s for _, s in statuses(cast)}
    assert statuses(cast)[0] == ("torch.Tensor.to", C)


def test_host_side_methods_on_unknown_receivers_are_host_side():
    """Issue 20 item 10: no kernel whatever the receiver is, so not ambiguous (which lowered the rate)."""
    assert statuses("def f(x):\n    return x.view(-1)\n") == [("torch.Tensor.view", H)]
