"""Inference rules beyond annotations: calls, unpacking, iteration, comparisons, call sites.

Each rule has cases where it makes a receiver a tensor (the method converts) and cases where it
must not: a value that may not be a tensor stays ambiguous, one known not to be is not touched.
"""

import ast

import pytest

from helpers import statuses, translate
from torch2pypto.mapping import load_table
from torch2pypto.translator.engine.inference import TENSOR, UNKNOWN, Inference
from torch2pypto.translator.engine.scopes import ModuleIndex

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
    # Lazy returns a tensor or None: a method call on it is a tensor's; a Sequential returns what
    # its last module does (a Linear's tensor); LSTM and act unknown
    assert fates(MODULES) == [C, C, C, C, C, C, A, A]


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
        ("def f(a: torch.Tensor, b):\n    return (a == b).exp(), (0 < a < 1).exp(), (a == 'x').exp()\n", [C, A, C]),
        # the left side's operator answers first: a tensor's compares or gives a bool (torch gives up);
        # an unknown left side may be a numpy array, whose == gives an array
        ("def f(a: torch.Tensor, b):\n    return (a < b).exp(), (b == a).exp(), (b < a).exp()\n", [C, A, A]),
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


def test_static_methods_take_what_their_calls_pass_and_class_methods_say_nothing():
    # s's x is h, its y a list (no tensor: no record); c's first parameter is the class
    code = """\
class M(nn.Module):
    @staticmethod
    def s(x, y):
        return x.exp(), y.exp()

    @classmethod
    def c(cls, x):
        return x.exp()

    def forward(self, h):
        return self.s(h, [1]), self.c(h)
"""
    assert fates(code) == [C, A]


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
    assert [s for api, s in statuses(code) if api == "torch.Tensor.to"] == [C, C]
    assert "return pypto_to(a, m), pypto_cast_like(a, a if c else a)" in translate(code).code  # m's kind: at run time


@pytest.mark.parametrize(
    "code, expected",
    [
        # the elements of tuple annotations, the items of list ones, through Optional and | None
        ("def f(pe: tuple[torch.Tensor, torch.Tensor]):\n    c, s = pe\n    return c.exp(), pe[1].exp()\n", [C, C]),
        ("def f(xs: list[torch.Tensor], o: Optional[Tuple[torch.Tensor, int]]):\n    a, n = o\n    for x in xs:\n        x.exp()\n    return a.exp(), n.exp()\n", [C, C]),
        ("def f(t: tuple[torch.Tensor, ...] | None):\n    a, *b = t\n    return a.exp(), t[3].exp(), b.exp()\n", [C, C]),
        ("def f(pe: tuple[torch.Tensor, Box]):\n    c, s = pe\n    return s.exp()\n", []),  # declared a Box
        ("def f(d: dict[str, torch.Tensor], xs: Sequence):\n    a, b = xs\n    return a.exp()\n", [A]),
        # an item at any index is any item's (a slice of a list is a list)
        ("def f(xs: list[torch.Tensor], ns: list[int], ys: list, i):\n    return xs[i].exp(), ns[i].exp(), ys[i].exp(), xs[1:].exp()\n", [C, A]),
        # *args is a tuple; its annotation is its items'
        ("def f(*xs: torch.Tensor):\n    a, b = xs\n    return xs.exp(), a.exp(), xs[0].exp()\n", [C, C]),
        # return annotations of functions of the module
        ("def g(x) -> torch.Tensor:\n    return foo(x)\ndef h(x) -> tuple[torch.Tensor, torch.Tensor]:\n    return foo(x)\n"
         "def f(y):\n    a, b = h(y)\n    return g(y).exp(), a.exp()\n", [C, C]),
        ("def g(x) -> Box:\n    return x\ndef f(y):\n    return g(y).exp()\n", []),
        # a string is read as typing.get_type_hints reads it: at module level
        ("def g(x) -> 'torch.Tensor':\n    return foo(x)\ndef f(y):\n    return g(y).exp()\n", [C]),
        ("def g(x) -> 'tuple[torch.Tensor, Box]':\n    return foo(x)\ndef f(y):\n    a, b = g(y)\n    return a.exp(), b.exp()\n", [C]),
        ("def g(x) -> 'torch.Tensor +':\n    return foo(x)\ndef f(y):\n    return g(y).exp()\n", [A]),  # no annotation
        # methods of a class an annotation declares (Box here; see test_hierarchy for other files)
        ("class Pair:\n    def both(self) -> tuple[torch.Tensor, torch.Tensor]:\n        return foo()\n    def one(self) -> torch.Tensor:\n        return foo()\n"
         "def f(p: Pair | None, q):\n    a, b = p.both()\n    c, d = q.both()\n    return a.exp(), p.one().exp(), c.exp(), p.other().exp()\n", [C, C, A, A]),
    ],
)
def test_annotations_declare_parts_and_results(code, expected):
    assert fates("from typing import Optional, Tuple, Sequence\nclass Box:\n    pass\n" + code) == expected


CONFIGS = """\
class M(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def forward(self, ids):
        pad = self.config.pad_token_id
        return ((ids == pad).exp(), (ids != self.config.text_config.eos).exp(), (ids < self.config.x).exp(),
                (ids == ids.shape[-1]).exp(), (ids == len(ids) - 1).exp(), self.config.text_config.n.exp(), pad.exp())
"""


def test_config_values_are_plain_and_a_tensor_compared_with_one_is_a_tensor_receiver():
    # == with a plain value is a tensor or False (None == tensor); False has no tensor method
    assert fates(CONFIGS) == [C, C, C, C, C]


@pytest.mark.parametrize(
    "code, expected",
    [
        # the plain value on the left, whose == answers first (a tensor on the left answers for any right side)
        ("def f(a: torch.Tensor, config: torch.Tensor):\n    return (config.x == a).exp()\n", [A]),  # a tensor's attribute
        ("def f(a: torch.Tensor, b, config):\n    return (b.config == a).exp(), (config.x == a).exp()\n", [A, C]),
        ("class M(nn.Module):\n    def __init__(self, t: torch.Tensor):\n        super().__init__()\n        self.config = t\n"
         "    def forward(self, ids):\n        return (self.config.x == ids).exp()\n", [A]),  # self.config holds a tensor here
        ("def f(a: torch.Tensor, b: int):\n    return (b == a).exp(), ((b, 1) == a).exp()\n", [A, A]),  # unknown int, a tuple
        ("def f(a: torch.Tensor, config):\n    a = a.float()\n    return (config.x == a).exp(), (a < config.x < 2).exp()\n", [C, A]),
    ],
)
def test_what_is_not_taken_as_a_config_value(code, expected):
    assert fates(code) == expected


@pytest.mark.parametrize(
    "code, expected",
    [
        # straight-line code: a read sees the assignment before it, not its own
        ("def f(n=1):\n    n = (n * 2).exp()\n    return n.exp()\n", [A]),  # an int's exp: unknown
        # a name read in its own assignments round a loop: the kind found without those reads, if they agree
        ("def f(a: torch.Tensor):\n    t = a.float()\n    for _ in range(2):\n        d = t.sum() + 1e-20\n        t = t / d\n    return t.exp()\n", [C]),
        ("def f(n=1):\n    for _ in range(2):\n        n = (n * 2).exp()\n    return n.exp()\n", [A, A]),  # an int, then unknown
        ("def f(n=1):\n    for _ in range(2):\n        n = n + 1\n    return n.exp()\n", []),
    ],
)
def test_self_referencing_assignments(code, expected):
    assert fates(code) == expected


# names that each read themselves, in a chain: `a = x.exp(); a = a * 2; b = a.exp(); b = b * 2; ...`
CHAIN = "def f(x: torch.Tensor):\n" + "".join(f"    {n} = {p}.exp()\n    {n} = {n} * 2\n" for p, n in zip("xabcdefghijk", "abcdefghijkl"))


GPT2_BLOCK = """\
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(4)

    def forward(self, h: tuple[torch.Tensor] | None, e: torch.Tensor | None = None):
        r = h
        h = self.ln(h) + r
        if e is not None:
            r = h
            h = r.exp()
        r = h
        return r.exp()
"""


@pytest.mark.parametrize(
    "code, expected",
    [
        (GPT2_BLOCK, [C, C]),
        # the parameter's tuple annotation reaches the read past an `if` that binds h in one branch
        (GPT2_BLOCK.replace("        h = self.ln(h) + r\n", ""), [A]),  # r = h in the branch: a tuple
        (GPT2_BLOCK.replace("        if e is not None:\n            r = h\n            h = r.exp()\n",
                            "        if e is not None:\n            h = [h]\n"), [A]),
    ],
    ids=["every branch ends in a tensor", "the parameter passes through", "a list in a branch"],
)
def test_a_read_after_an_if_sees_what_ends_its_branches(code, expected):
    # GPT-2's block: `hidden_states: tuple[torch.Tensor] | None` (a tensor in fact) is rebound to a
    # tensor before the cross-attention `if`; the residual read after it is that tensor
    assert fates(code) == expected


def test_self_referencing_names_in_a_chain_of_any_length():
    # nllb_moe: the checks of assumed kinds had a budget per question, so the far end of a chain
    # was unknown; translated again, the converted calls (wrappers) cost nothing and it converted
    assert fates(CHAIN) == [C] * 12
    once = translate(HEAD + CHAIN, fuse=False).code
    assert translate(once, fuse=False).code == once


def test_answers_do_not_depend_on_the_questions_asked_before():
    code = HEAD + CHAIN + "def g(n=1, t: torch.Tensor = None):\n    for _ in t:\n        n = (n * 2).exp()\n        t = t / (t.sum() + n)\n    return t, n\n"
    tree = ast.parse(code)
    names = [n for n in ast.walk(tree) if type(n) is ast.Name and type(n.ctx) is ast.Load]
    asked = [Inference(ModuleIndex(tree), load_table().methods) for _ in range(2)]
    forward = [asked[0].kind(n) for n in names]
    assert forward == [asked[1].kind(n) for n in reversed(names)][::-1]
    assert forward.count(TENSOR) == 28 and forward.count(UNKNOWN) == 3  # x, a..l (twice each), t (4 reads); n (3)


def test_a_chain_of_names_deeper_than_the_stack_is_answered_from_its_far_end():
    chain = "".join(f"    a{i + 1} = a{i}\n" for i in range(300))
    assert fates(f"def f(a0: torch.Tensor):\n{chain}    return a300.exp()\n") == [C]


LAYERS = """\
class M(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.emb = nn.Embedding(n, 4)
        self.proj = nn.Linear(4, 4, bias=False)
        self.either = nn.Linear(4, 4) if n else Box()
        self.act = nn.SiLU()
        self.mask = nn.Parameter(torch.zeros(4)) if n else None

    def forward(self, h):
        return self.emb.weight.exp(), self.proj.bias.exp(), self.either.weight.exp(), self.act.weight.exp(), self.mask.exp()
"""


def test_weights_and_biases_of_torch_layers_are_parameters_or_none():
    # Linear(bias=False).bias is None: a method call on it raises, so it is a tensor's there;
    # an attribute that may hold another class stays ambiguous (SiLU has no weight: it raises);
    # an attribute holding a parameter or None is a tensor receiver as a name would be
    assert fates("class Box:\n    pass\n" + LAYERS) == [C, C, A, C, C]


@pytest.mark.parametrize(
    "code, expected",
    [
        ("def f(a: torch.Tensor, b: torch.Tensor):\n    q, k = [x.float() for x in (a, b)]\n    return q.exp(), k.exp()\n", [C, C]),
        ("def f(a: torch.Tensor, n):\n    for g in (x * 2 for x in a.unbind(0)):\n        g.exp()\n    return [y for y in n][0].exp()\n", [C, A]),
        ("def f(xs):\n    q, k = [x for x in xs]\n    return q.exp()\n", [A]),
    ],
)
def test_items_of_comprehensions_are_their_element(code, expected):
    assert fates(code) == expected


def test_a_comparison_with_a_self_referencing_side_waits_for_the_assumption():
    # higgs_audio_v2: `m = m & (m.cumsum(-1) > n)` with n a non-tensor in the second translation
    # (a wrapper's result) was decided on that side alone, not on what m is assumed: not idempotent
    code = "def f(m: torch.Tensor | None, n):\n    v = m.cumsum(-1) > n\n    m = m & v\n    return m.exp()\n"
    assert fates(code) == [C]


LISTS = """\
from transformers.activations import ACT2FN, get_activation

class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.act = ACT2FN[config.hidden_act]
        self.gelu = get_activation("gelu")

    def forward(self, x):
        return self.gelu(self.act(x)) * 2

class Pair(nn.Module):
    def forward(self, x):
        return x, x

class Model(nn.Module):
    def __init__(self, config, other):
        super().__init__()
        self.layers = nn.ModuleList([Layer(config) for _ in range(3)])
        self.pairs = nn.ModuleList([Pair(), Pair()])
        self.grown = nn.ModuleList([Layer(config)])
        self.grown.append(other)
        self.act = ACT2FN[config.hidden_act]

    def forward(self, h, n):
        for layer in self.layers[:n]:
            h = layer(h)
        for i, each in enumerate(self.layers):
            g = each(h)
        for grown in self.grown:
            u = grown(h)
        for pair in self.pairs:
            a, b = pair(h)
            o = pair(h)[0]
        return (h.exp(), g.exp(), u.exp(), self.layers[0](h).exp(), a.exp(), o.exp(), self.act(n).exp(),
                ACT2FN["gelu"](h).exp(), ACT2FN["linear"](h.shape).exp(), self.norm(h))
"""


def test_calls_of_module_list_items_and_activations():
    # a module list's items are what built them, unless it is changed in place (grown); an
    # activation returns a tensor for a tensor, its argument as it is otherwise (LinearActivation)
    assert fates(LISTS) == [C, C, A, C, C, C, C, C, A]
    assert [s for api, s in statuses(HEAD + LISTS) if api == "torch.Tensor.norm"] == []  # self is a module


OUTPUTS = """\
from dataclasses import dataclass
from transformers.utils.generic import ModelOutput, can_return_tuple
from transformers.utils.output_capturing import capture_outputs

@dataclass
class Out(ModelOutput):
    last_hidden_state: torch.Tensor | None = None
    past_key_values: object = None
    logits: torch.Tensor | None = None

class Plain:
    pass

class Inner(nn.Module):
    @capture_outputs
    def forward(self, x):
        return Out(last_hidden_state=x * 2, past_key_values=self.cache)

class Other(nn.Module):
    def forward(self, x):
        return Plain(last_hidden_state=x)

class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Inner()
        self.other = Other()

    @can_return_tuple
    def forward(self, x):
        outputs = self.model(x)
        h = outputs.last_hidden_state
        return (h.exp(), outputs.logits.exp(), outputs.past_key_values.exp(), self.model(x).last_hidden_state.exp(),
                self.other(x).last_hidden_state.exp())
"""


def test_fields_of_the_model_outputs_a_module_returns():
    # Out(last_hidden_state=...) holds what it was built with (logits, not passed, is None: no
    # call on it is a tensor's); a field capture_outputs may replace, and a class that is no
    # model output, say nothing
    assert fates(OUTPUTS) == [C, A, C, A]


def test_an_unpacking_path_that_grows_round_a_loop_is_unknown():
    # corpus bark: `for x in xs: xs = x` asks for ever deeper items (xs's items' items...); each
    # question was new, so answering the deepest first never ended
    code = "def f(a: torch.Tensor, xs):\n    for x in xs:\n        xs = x\n    return x.exp(), a.exp()\n"
    assert fates(code) == [A, C]


@pytest.mark.parametrize(
    "declared, wrapper",
    [
        ("dtype: torch.dtype", "pypto_cast"),  # corpus falcon: build_alibi_tensor(..., dtype: torch.dtype)
        ('dtype: "torch.dtype"', "pypto_cast"),
        ("dtype: torch.dtype = torch.float16", "pypto_cast"),  # what a caller passes, not the default
        ("dtype", "pypto_to"),  # a device or a tensor, for all we know: pypto_to looks at run time
        ("dtype: torch.dtype | None", "pypto_to"),  # None moves nothing and casts nothing
        ("*dtype: torch.dtype", "pypto_to"),  # a tuple of dtypes
    ],
)
def test_a_parameter_declared_a_dtype_is_one(declared, wrapper):
    code = f"def f(x: torch.Tensor, {declared}):\n    return x.to(dtype)\n"
    assert statuses(HEAD + code, fuse=False) == [("torch.Tensor.to", "converted")]
    assert f"return {wrapper}(x, dtype)" in translate(HEAD + code, fuse=False).code
