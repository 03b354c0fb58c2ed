"""Inference rules beyond annotations: calls, unpacking, iteration, comparisons, call sites.

Each rule has cases where it makes a receiver a tensor (the method converts) and cases where it
must not: a value that may not be a tensor stays ambiguous, one known not to be is not touched.
"""

import pytest

from helpers import statuses

C, A = "converted", "left-alone"

HEAD = "import torch\nfrom torch import nn\n"


def fates(code: str) -> list[str]:
    """The status of each ``.exp()`` call, in order (absent: known not to be a tensor)."""
    return [s for api, s in statuses(HEAD + code) if api == "torch.Tensor.exp"]


MODULES = """\
class MLP(nn.Module):
    def forward(self, x):
        return x * 2

class Pair(nn.Module):
    def forward(self, x):
        return x, x

class Lazy(nn.Module):
    def forward(self, x):
        if x.dim():
            return x

class M(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.mlp = MLP()
        self.pair = Pair()
        self.lazy = Lazy()
        self.seq = nn.Sequential(nn.Linear(4, 4))
        self.lstm = nn.LSTM(4, 4)
        self.act = act
        self.either = nn.GELU() if act else nn.ReLU()

    def forward(self, h):
        a, b = self.pair(h)
        return (self.proj(h).exp(), self.mlp(h).exp(), self.either(h).exp(), a.exp(),
                self.lazy(h).exp(), self.seq(h).exp(), self.lstm(h).exp(), self.act(h).exp())
"""


def test_calls_of_held_modules():
    # Lazy returns a tensor or None: a method call on it is a tensor's; Sequential, LSTM, act unknown
    assert fates(MODULES) == [C, C, C, C, C, A, A, A]


FUNCTIONS = """\
def rotate(q, k):
    return q * 2, k * 2

def maybe(x):
    if x.dim():
        return x

def gen(x):
    yield x

def recurse(x, n):
    return x if n == 0 else recurse(x, n - 1)

@torch.no_grad()
def quiet(x):
    return x

def decorated(x):
    return x

decorated = staticmethod(decorated)

def f(a: torch.Tensor, b: torch.Tensor):
    q, k = rotate(a, b)
    return (k.exp(), maybe(a).exp(), gen(a).exp(), recurse(a, 3).exp(), quiet(a).exp(),
            decorated(a).exp())
"""


def test_results_of_functions_of_the_module():
    # maybe() may return None (a tensor's method then); a generator is no tensor; decorated is rebound
    assert fates(FUNCTIONS) == [C, C, C, C, A]


def test_instances_of_classes_of_the_module_are_not_tensors():
    code = "class Box:\n    def exp(self):\n        return 1\nclass Sub(torch.Tensor):\n    pass\ndef f():\n    return Box().exp(), Sub().exp()\n"
    assert fates(code) == [A]  # Box() is known not to be a tensor; a Tensor subclass's instance is unknown


@pytest.mark.parametrize(
    "code, expected",
    [
        ("def f(a: torch.Tensor, b):\n    q, k = a.float(), b\n    return q.exp(), k.exp()\n", [C, A]),
        ("def f(a: torch.Tensor):\n    q, k = a.chunk(2, -1)\n    return q.exp(), k.exp()\n", [C, C]),
        ("def f(a: torch.Tensor):\n    v, i = torch.topk(a, 2)\n    return v.exp()\n", [C]),
        ("def f(a: torch.Tensor):\n    return a.split(2)[0].exp(), a.split(2)[-1].exp()\n", [C, C]),
        ("def f(a: torch.Tensor):\n    return a.split(2)[0:1].exp()\n", []),  # a tuple
        ("def f(a: torch.Tensor):\n    first, *rest = a.unbind(0)\n    return first.exp(), rest.exp()\n", [C]),
        ("def f(a: torch.Tensor, b):\n    (x, y), z = (a, b), a\n    return x.exp(), y.exp(), z.exp()\n", [C, A, C]),
        ("def f(pairs):\n    a, b = pairs\n    return a.exp()\n", [A]),
        ("def f(a: torch.Tensor):\n    r, c = a.shape\n    return r.exp()\n", [A]),
        ("def f(a: torch.Tensor):\n    x, y = a\n    return x.exp()\n", [C]),  # rows of a tensor
    ],
)
def test_unpacking(code, expected):
    assert fates(code) == expected


@pytest.mark.parametrize(
    "code, expected",
    [
        ("def f(a: torch.Tensor):\n    for r in a.unbind(0):\n        r.exp()\n", [C]),
        ("def f(a: torch.Tensor):\n    for r in a:\n        r.exp()\n", [C]),
        ("def f(xs):\n    for r in xs:\n        r.exp()\n", [A]),
        ("def f(a: torch.Tensor, b: torch.Tensor):\n    for x, y in zip(a, b):\n        x.exp()\n", [C]),
        ("def f(a: torch.Tensor, b):\n    for x, y in zip(a, b):\n        y.exp()\n", [A]),
        ("def f(a: torch.Tensor):\n    for i, r in enumerate(a):\n        r.exp(), i.exp()\n", [C]),
        ("def f(a: torch.Tensor):\n    return [r.exp() for r in a.chunk(4)]\n", [C]),
        ("def f(a: torch.Tensor, b):\n    for r in (a, b):\n        r.exp()\n", [A]),
        ("def f(a: torch.Tensor):\n    for r in (a, a * 2):\n        r.exp()\n", [C]),
    ],
)
def test_iteration(code, expected):
    assert fates(code) == expected


@pytest.mark.parametrize(
    "code, expected",
    [
        ("def f(a: torch.Tensor):\n    return (a == 0).exp(), (a > a).exp(), (-1.5 < a).exp()\n", [C, C, C]),
        ("def f(a: torch.Tensor):\n    return (a is None).exp(), (a in []).exp()\n", []),
        ("def f(a: torch.Tensor, b):\n    return (a == b).exp(), (0 < a < 1).exp(), (a == 'x').exp()\n", [A, A, A]),
        ("def f(b, c):\n    return (b == c).exp()\n", [A]),
        ("def f(a: torch.Tensor, b):\n    return (a or b).exp(), (a and a * 2).exp()\n", [A, C]),
    ],
)
def test_comparisons_and_boolean_operators(code, expected):
    assert fates(code) == expected


@pytest.mark.parametrize(
    "code, expected",
    [
        ("def h(x, y):\n    return x.exp() + y.exp()\ndef f(a: torch.Tensor):\n    return h(a, 1)\n", [C]),  # y is an int
        ("def h(x):\n    return x.exp()\ndef f(a: torch.Tensor):\n    return h(a) + h(x=a * 2)\n", [C]),
        ("def h(x):\n    return x.exp()\ndef f(a: torch.Tensor, b):\n    return h(a) + h(b)\n", [A]),
        ("def h(x):\n    return x.exp()\ndef f(a: torch.Tensor):\n    g = h\n    return h(a)\n", [A]),  # escapes
        ("def h(x):\n    return x.exp()\ndef f(a: torch.Tensor, xs):\n    return h(a) + h(*xs)\n", [A]),
        ("def h(x=None):\n    return x.exp()\ndef f(a: torch.Tensor):\n    return h(a) + h()\n", [C]),  # or None
        ("def h(x=None):\n    return x.exp()\ndef f(a: torch.Tensor):\n    return h(a) + h([1])\n", [A]),
        ("def h(x):\n    return x.exp()\n__all__ = ['h']\ndef f(a: torch.Tensor):\n    return h(a)\n", [A]),
        ("def h(x):\n    return x.exp()\n", [A]),  # no call seen
        ("import functools\n@functools.cache\ndef h(x):\n    return x.exp()\ndef f(a: torch.Tensor):\n    return h(a)\n", [A]),
    ],
)
def test_function_parameters_from_their_calls(code, expected):
    assert fates(code) == expected


def test_static_and_class_methods_do_not_bind_self():
    code = """\
class M(nn.Module):
    @staticmethod
    def s(x, y):
        return y.exp()

    def forward(self, h):
        return self.s(h, [1])
"""
    assert fates(code) == [A]


def test_self_attributes_stored_by_unpacking_or_loops_are_not_taken_from_other_stores():
    code = """\
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(2))

    def reset(self, pair):
        self.w, self.b = pair

    def forward(self, h):
        for self.v in h:
            pass
        return self.w.exp(), self.v.exp()
"""
    assert fates(code) == [A, A]


def test_legacy_tensor_classes_in_annotations():
    assert fates("def f(a: torch.LongTensor, b: torch.BoolTensor | None):\n    return a.exp(), b.exp()\n") == [C, C]


@pytest.mark.parametrize(
    "code, expected",
    [
        ("def f(a: torch.Tensor, c):\n    m = a if c else None\n    return m.exp(), m[0].exp(), (m * 2).exp()\n", [C, C, C]),
        ("def f(a: torch.Tensor, c):\n    m = None\n    if c:\n        m = a.float()\n    return m.exp()\n", [C]),
        ("def f(a: torch.Tensor, c):\n    m = a if c else None\n    return (m == 0).exp()\n", [A]),  # None == 0 is False
        ("def f(c):\n    m = None\n    return m.exp()\n", []),
        ("def f(b, c):\n    m = b if c else None\n    return m.exp()\n", [A]),
    ],
)
def test_a_tensor_or_none_receiver_is_a_tensor_receiver(code, expected):
    assert fates(code) == expected


def test_a_tensor_or_none_argument_is_not_a_tensor_argument():
    code = HEAD + "def f(a: torch.Tensor, c):\n    m = a if c else None\n    return a.to(m), a.to(a if c else a)\n"
    assert [s for api, s in statuses(code) if api == "torch.Tensor.to"] == ["unsupported", C]
