"""Property tests: generated modules and torch-flavoured snippets keep every translation invariant.

Strategies compose code fragments: expressions (every spelling of a torch call, nested calls,
chained methods, calls split over lines with comments), the statements around them
(comprehensions, lambdas, walrus, match, f-strings, decorators, shadowing), functions and
``nn.Module`` classes, then a module's header, imports, encoding, indentation and line endings.
Each example must translate without raising, and ``invariants.violations`` must find nothing:
valid output, idempotence, bytes kept outside converted calls, a consistent report.
"""

import atexit
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings, target
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from torch2pypto import Options, translate_source
from torch2pypto.mapping import load_table
from torch2pypto.translator.engine import emit
from torch2pypto.translator.oracle.invariants import violations

_HOME = tempfile.mkdtemp(prefix="torch2pypto-hypothesis-")  # hypothesis caches; keep the repo clean
atexit.register(shutil.rmtree, _HOME, True)
set_hypothesis_home_dir(_HOME)

BOM = b"\xef\xbb\xbf"
KERNELS = [None, "._pypto_kernels"]
SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.target, Phase.shrink],  # no explain: its tracing is slow
    suppress_health_check=list(HealthCheck),
)

# --- expressions ---------------------------------------------------------------------------------

# operands: primaries, so a method call can follow any of them
LEAVES = ["x", "h", "v", "x[0]", "h.T", "self.weight", "torch.ones(3)", "xs[n]", "café", "(n * 2)"]
# (function, arguments): "{}" is where the nested expression goes
FUNCTIONS = [
    ("torch.rsqrt", ["{}"]), ("torch.exp", ["{}"]), ("T.exp", ["{}"]), ("r", ["{}"]), ("rsqrt", ["{}"]),
    ("F.relu", ["{}"]), ("torch.nn.functional.relu", ["input={}", "inplace=False"]), ("torch.tanh", ["{}"]),
    ("torch.mean", ["{}", "-1", "keepdim=True"]), ("torch.sum", ["{}", "dim=(0, 1)"]), ("torch.pow", ["{}", "2"]),
    ("torch.add", ["{}", "x", "alpha=2"]), ("torch.matmul", ["{}", "h"]), ("torch.exp", ["*{}"]),
    ("torch.maximum", ["other={}", "input=x"]), ("max", ["{} for v in xs"]), ("torch.sqrt", ["{}"]),
    ("torch.negative", ["{}"]), ("torch.div", ["{}", "x", "rounding_mode=None"]), ("torch.sub", ["{}", "1.5"]),
    ("torch.permute", ["{}", "(1, 0)"]), ("torch.argmax", ["{}", "dim=-1"]), ("F.tanh", ["{}"]), ("torch.erf", ["{}"]),
]  # fmt: skip
METHODS = [
    ("float", []), ("half", []), ("pow", ["2"]), ("mean", ["-1", "keepdim=True"]), ("to", ["torch.float32"]),
    ("to", ["T.bfloat16"]), ("to", ["dtype=torch.float16"]), ("type_as", ["x"]), ("type", ["torch.bfloat16"]),
    ("sum", ["-1"]), ("rsqrt", []), ("abs", []), ("view", ["-1"]), ("argmax", ["-1"]), ("double", []),
    ("exp", ["3"]), ("to", ["device"]), ("to", ["x.dtype"]), ("bfloat16", []), ("sqrt", []), ("neg", []),
    ("reciprocal", []), ("log", []), ("sin", []), ("cos", []), ("permute", ["1", "0"]), ("add", ["x"]),
    ("sub", ["1.5"]), ("mul", ["x"]), ("div", ["x", "rounding_mode=None"]), ("minimum", ["h"]), ("to", ["x"]),
]  # fmt: skip
WRAPPERS = ["({} + {})", "(-{} * 2)", "{}[..., :2]", "({} if n else {})", "(lambda v: {})(x)", "[*{}][0]", "{}.T"]
COMMENTS = [
    "# c", "# torch.exp(x) in a comment", "# {braces} 'quotes' \"double\"", "# café λ ☃", "# \u2028\x0c\x85",
]  # fmt: skip
LAYOUTS = ["flat", "split", "commented", "hanging"]


def arguments(args: list[str], layout: str, comment: str) -> str:
    """An argument list in parentheses, on one line or several."""
    if layout == "commented":
        return f"(  {comment}\n" + "".join(f"    {a},  {comment}\n" for a in args) + ")"
    if layout == "flat" or not args:
        return f"({', '.join(args)})"
    if layout == "split":
        return "(\n" + "".join(f"    {a},\n" for a in args) + ")"
    return f"({args[0]},\n" + "".join(f"      {a},\n" for a in args[1:]) + "      )"  # hanging


def function_call(function: tuple[str, list[str]], inner: str, layout: str, comment: str) -> str:
    name, args = function
    if args[0].endswith(" for v in xs"):  # a lone generator expression needs no parentheses
        layout = "flat"
    return name + arguments([a.format(inner) for a in args], layout, comment)


def method_call(receiver: str, method: tuple[str, list[str]], layout: str, comment: str) -> str:
    name, args = method
    if layout == "backslash":
        return f"{receiver} \\\n    .{name}({', '.join(args)})"
    return f"{receiver}.{name}{arguments(args, layout, comment)}"


def expressions(multiline: bool) -> st.SearchStrategy[str]:
    """Torch-flavoured expressions; single-line ones (for f-strings) have no quotes or comments."""
    layouts = st.sampled_from(LAYOUTS if multiline else ["flat"])
    method_layouts = st.sampled_from(LAYOUTS + ["backslash"] if multiline else ["flat"])
    comments = st.sampled_from(COMMENTS)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.builds(function_call, st.sampled_from(FUNCTIONS), inner, layouts, comments),
            st.builds(method_call, inner, st.sampled_from(METHODS), method_layouts, comments),
            st.builds(lambda wrapper, a, b: wrapper.format(a, b), st.sampled_from(WRAPPERS), inner, inner),
        )

    return st.recursive(st.sampled_from(LEAVES), extend, max_leaves=5)


EXPR, INLINE = expressions(multiline=True), expressions(multiline=False)

# --- statements: lists of (depth, text); text spans lines only inside brackets -------------------


def block(header: str, body: list, *clauses: tuple[str, list]) -> list:
    lines = [(0, header)] + [(d + 1, t) for d, t in body]
    for clause, clause_body in clauses:
        lines += [(0, clause)] + [(d + 1, t) for d, t in clause_body]
    return lines


def fstring(a: str, b: str) -> str:
    return "s = f'{{{{torch.exp(x)}}}} {" + a + "!r:>{n}} {" + b + "=} {{}}'"


def match(subject: str, *bodies: list) -> list:
    patterns = ["case [w, *rest]:", "case {'k': w} if w is not None:", "case Model(weight=_) | None:", "case _:"]
    cases = [block(p, b) for p, b in zip(patterns, bodies)]
    return block(f"match {subject}:", sum(cases, []))


SIMPLE = st.one_of(
    st.builds("y = {}".format, EXPR),
    st.builds("return {}".format, EXPR),
    st.builds("y = {}  {}".format, EXPR, st.sampled_from(COMMENTS)),
    st.builds("ys = [{} for v in xs if v is not None]".format, EXPR),
    st.builds("ys = [(w := {}) for v in xs]".format, EXPR),
    st.builds("d = {{k: {} for k, v in pairs}}".format, EXPR),
    st.builds("ys = [torch.exp(v) for torch in xs] + [{}]".format, EXPR),
    st.builds("g = lambda v, w=None: {}".format, EXPR),
    st.builds("g = lambda v, torch=None: torch.exp(v) + {}".format, EXPR),
    st.builds(fstring, INLINE, INLINE),
    st.builds("x, h = {}, {}".format, EXPR, EXPR),
    st.builds("y: torch.Tensor = {}".format, EXPR),
    st.builds("y += {}".format, EXPR),
    st.builds("a = {}; b = {}".format, INLINE, INLINE),
    st.builds("assert {} is not None, 'torch.exp(x) {{}}'".format, EXPR),
    st.builds("print({}, sep='')".format, EXPR),
    st.builds("café = {}".format, EXPR),
    st.builds("s = 'naïve ☃ {{}}'; λ = {}".format, INLINE),
    st.builds("h = (y := {}) + y".format, EXPR),
    st.builds("y = g(key={}, other=x[..., {}])".format, EXPR, INLINE),
    st.sampled_from(["pass", "torch = None", '"""torch.rsqrt(x) in a docstring."""', "xs = [*xs, x]", "del y"]),
).map(lambda text: [(0, text)])
DECORATORS = [
    "@torch.no_grad()", "@functools.lru_cache(maxsize=None)", "@torch.compile(\n    fullgraph=True,  # c\n)", "@r",
    "@functools.partial(print, torch.exp(torch.ones(1)).float())",
]  # fmt: skip


def compound(body: st.SearchStrategy[list]) -> st.SearchStrategy[list]:
    """Statements with bodies, each body drawn from ``body``."""
    otherwise = st.one_of(st.none(), body).map(lambda b: [("else:", b)] if b else [])
    return st.one_of(
        st.builds(lambda e, b, o: block(f"if (n := {e}) is not None:", b, *o), EXPR, body, otherwise),
        st.builds(lambda b, o: block("for v in xs:", b, *o), body, otherwise),
        st.builds(lambda e, b: block(f"while {e} is None:", b), EXPR, body),
        st.builds(lambda w, b: block(w, b), st.sampled_from(["with torch.no_grad(), open(p) as fh:",
                                                              "with (torch.no_grad() as g, open(p)):"]), body),
        st.builds(lambda b, e, f: block("try:", b, ("except (ValueError, TypeError) as exc:", e), ("finally:", f)),
                  body, body, body),
        st.builds(match, EXPR, body, body, body, body),
        st.builds(lambda d, b: [(0, d)] + block("def inner(v: torch.Tensor, w=x.float()) -> torch.Tensor:", b),
                  st.sampled_from(DECORATORS), body),
        st.builds(lambda b: block("def rsqrt(v):", [(0, "return v")]) + b, body),  # shadows torch's rsqrt
    )  # fmt: skip


def joined(statements: st.SearchStrategy[list]) -> st.SearchStrategy[list]:
    return st.lists(statements, min_size=1, max_size=3).map(lambda parts: sum(parts, []))


BODIES = st.recursive(joined(SIMPLE), lambda inner: joined(st.one_of(SIMPLE, compound(inner))), max_leaves=6)

# --- module items --------------------------------------------------------------------------------

PARAMETERS = [
    "x: torch.Tensor, h: torch.Tensor, xs=(), n=1",
    "x: T.Tensor, h: 'T.Tensor', xs=(), *, n=1",
    "x: Tensor, h: Tensor | None = None, /, *xs, n=1, **kw",
    "x, torch, xs=(), n=1",  # a parameter shadows the module
    "x, h, xs, n",
    "x: torch.Tensor, h=torch.ones(2).float(), *, n: 'torch.Tensor' = torch.exp(torch.ones(1)), xs=()",
]


def function(decorators: list[str], name: str, parameters: str, body: list, asynchronous: bool) -> list:
    head = f"{'async ' if asynchronous else ''}def {name}({parameters}):"
    awaited = [(0, "y = await asyncio.sleep(0, torch.exp(x))")] if asynchronous else []
    return [(0, d) for d in decorators] + block(head, awaited + body)


def module_class(base: str, forward: list, helper: list) -> list:
    init = block(
        "def __init__(self, n):",
        [(0, "super().__init__()"), (0, "self.weight = nn.Parameter(torch.ones(n))"),
         (0, "self.register_buffer('scale', torch.ones(n))")],
    )  # fmt: skip
    methods = init + block("def forward(self, x, h=None):", forward) + [(0, "@torch.no_grad()")]
    methods += block("def _helper(self, v):", helper)
    return block(f"class Model({base}):", [(0, '"""A model."""'), (0, "scale = torch.ones(1).float()")] + methods)


ITEMS = st.one_of(
    st.builds(function, st.lists(st.sampled_from(DECORATORS), max_size=2), st.sampled_from(["f", "forward", "λ_f"]),
              st.sampled_from(PARAMETERS), BODIES, st.booleans()),
    st.builds(module_class, st.sampled_from(["nn.Module", "torch.nn.Module", "T.nn.Module", "object"]), BODIES, BODIES),
    st.builds(lambda e: [(0, f"CONSTANT = {e}")], EXPR),
    st.just(block("if __name__ == '__main__':", [(0, "print(torch.exp(torch.ones(2)).float())")])),
    st.just(block("try:", [(0, "import torch_npu")], ("except ImportError:", [(0, "torch_npu = None")]))),
    st.just(block("def local_import(x):", [(0, "import torch"), (0, "return torch.exp(x).float()")])),
    st.just([(0, "def one_line(x: torch.Tensor): return x.float().exp()")]),
)  # fmt: skip
IMPORTS = [
    "import torch", "import torch as T", "from torch import rsqrt as r", "import torch.nn.functional as F",
    "from torch import nn", "from torch import Tensor", "import functools", "import asyncio", "from torch import rsqrt",
    "import torch, math", "from torch import (\n    exp,  # c\n    rsqrt as r,\n)", "from torch import *",
]  # fmt: skip


def render(lines: list, unit: str) -> list[str]:
    """Physical lines, each indented by its depth (continuation lines too)."""
    return [unit * depth + part for depth, text in lines for part in text.split("\n")]


# --- whole modules: header, imports, items; then indentation, spacing, line endings, encoding ------

LATIN1 = str.maketrans({"λ": "ñ", "☃": "¤", "\u2028": "\x85"})  # what a latin-1 file holds instead


@st.composite
def modules(draw, kernels_module: str | None = None) -> str | bytes:
    encoding = draw(st.sampled_from(["str", "utf-8", "utf-8-sig", "latin-1"]))
    header = ["#!/usr/bin/env python"] if draw(st.booleans()) else []
    if encoding == "latin-1":
        header.append(draw(st.sampled_from(["# -*- coding: latin-1 -*-", "# vim: set fileencoding=iso-8859-1 :"])))
    elif draw(st.booleans()):
        header.append("# -*- coding: utf-8 -*-")
    header += draw(st.lists(st.sampled_from(["# Copyright (c) café", "\x0c", "# \u2028 sep"]), max_size=2))
    if draw(st.booleans()):
        header.append('"""A generated module; torch.exp(x) in its docstring."""')
    if draw(st.booleans()):
        header.append("from __future__ import annotations")
    imports = draw(st.lists(st.sampled_from(IMPORTS), unique=True, max_size=5))
    unit = draw(st.sampled_from(["    ", "  ", "\t"]))
    gaps = st.lists(st.sampled_from(["", "\x0c", "   "]), max_size=2)
    chunks = [draw(gaps) + render(item, unit) for item in draw(st.lists(ITEMS, min_size=1, max_size=3))]
    if draw(st.booleans()):  # an import after other statements
        chunks.insert(1, ["import torch.nn.functional as F"])
    lines = header + "\n".join(imports).split("\n") + sum(chunks, [])
    spaces = draw(st.lists(st.sampled_from(["", "", " ", "\t "]), min_size=len(lines), max_size=len(lines)))
    lines = [line if line.endswith("\\") else line + space for line, space in zip(lines, spaces)]
    newline = draw(st.sampled_from(["\n", "\r\n", "\r", "mixed"]))
    ends = draw(st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=len(lines), max_size=len(lines)))
    ends = ends if newline == "mixed" else [newline] * len(lines)
    if draw(st.booleans()):
        ends[-1] = ""  # no final newline
    text = "".join(line + end for line, end in zip(lines, ends))
    if encoding == "str":
        return text
    if encoding == "latin-1":
        return text.translate(LATIN1).encode("latin-1")
    return (BOM if encoding == "utf-8-sig" else b"") + text.encode("utf-8")


@st.composite
def snippets(draw, kernels_module: str | None = None) -> str:
    """One function or nn.Module class under ``import torch``: small, plainly formatted."""
    item = draw(st.one_of(
        st.builds(function, st.just([]), st.just("f"), st.just(PARAMETERS[0]), BODIES, st.just(False)),
        st.builds(module_class, st.just("nn.Module"), BODIES, BODIES),
    ))  # fmt: skip
    return "import torch\nfrom torch import nn\n\n\n" + "\n".join(render(item, "    ")) + "\n"


OPTIONS = st.builds(
    Options,
    assume_tensors=st.booleans(),
    select=st.sampled_from([frozenset(), frozenset({"to", "same-name"}), frozenset({"composite", "torch.Tensor.to"})]),
    ignore=st.sampled_from([frozenset(), frozenset({"torch.rsqrt"}), frozenset({"mean", "unmapped"})]),
)


def check(source: str | bytes, options: Options, kernels_module: str | None) -> int:
    """Assert the invariants on the translation of ``source``; the number of converted calls."""
    compile(source, "generated.py", "exec", dont_inherit=True)  # the generator made valid Python
    translation = translate_source(source, "generated.py", options, kernels_module=kernels_module)
    assert violations(translation, options=options, kernels_module=kernels_module, source=source) == []
    if isinstance(source, bytes):
        written = translation.code.encode(translation.encoding)
        assert written.startswith(BOM) == source.startswith(BOM)
        assert translation.changed or written == source
    return sum(r.status == "converted" for r in translation.records)


def run_property(sources, max_examples: int) -> list[int]:
    """``check`` over kernel modes, ``sources(kernels_module)`` and options; converted calls per example."""
    counts = []
    cases = st.sampled_from(KERNELS).flatmap(lambda kernels: st.tuples(st.just(kernels), sources(kernels)))

    @settings(max_examples=max_examples, **SETTINGS)
    @given(cases, OPTIONS)
    def property_(case, options):
        kernels_module, source = case
        counts.append(check(source, options, kernels_module))
        event("converts calls" if counts[-1] else "converts nothing")
        target(float(counts[-1]), label="converted calls")

    property_()
    return counts


def test_generated_modules_keep_the_invariants():
    counts = run_property(modules, max_examples=250)
    assert sum(c > 0 for c in counts) >= len(counts) // 4, "the generator rarely makes calls that convert"


def test_generated_snippets_keep_the_invariants():
    counts = run_property(snippets, max_examples=300)
    assert sum(c > 0 for c in counts) >= len(counts) // 4, "the generator rarely makes calls that convert"


@st.composite
def edited_translations(draw, kernels_module: str | None = None) -> str:
    """A generated module, translated, then edited: more code after the generated section."""
    once = translate_source(draw(snippets()), "generated.py", kernels_module=kernels_module).code
    return once + "\n\n" + "\n".join(render(draw(ITEMS), "    ")) + "\n"


def test_translated_then_edited_modules_keep_the_invariants():
    run_property(edited_translations, max_examples=100)


def test_a_generated_module_converts_its_calls():
    """The building blocks with fixed choices: a class and a function whose calls convert."""
    nested = function_call(FUNCTIONS[0], function_call(FUNCTIONS[1], "x", "commented", "# c"), "split", "")
    chained = method_call(method_call("x", METHODS[0], "flat", ""), METHODS[2], "backslash", "")
    chained = method_call(chained, METHODS[3], "hanging", "")
    model = module_class("nn.Module", [(0, f"y = {nested}"), (0, f"return {chained}")], [(0, "return v.float()")])
    helper = function([], "f", PARAMETERS[0], [(0, "return h.to(torch.float32)")], False)
    source = "import torch\nfrom torch import nn\n\n\n" + "\n".join(render(model + helper, "\t")) + "\n"
    for kernels_module in KERNELS:
        assert check(source, Options(), kernels_module) >= 5


# Engine bugs the generators found, in minimal form (all fixed; each must keep the invariants).
FOUND = {
    # A converted call needs torch, so `import torch` was added; translating again, the
    # unresolved `torch.exp` then resolved and converted: not idempotent (both kernel modes).
    "adding import torch changes what torch.exp means": "import torch as T\ny = torch.exp(T.ones(2).float())\n",
    # Kernels module mode added `import torch` when a rewritten call's text mentioned "torch."
    # (here an untouched argument), with the same effect.
    "import torch added for an argument's text": "import torch as T\ny = T.exp(torch.exp(x))\n",
    # No leading imports: the section (or the kernels import) went above line 1...
    "shebang moved": "#!/usr/bin/env python\nx = 1\nimport torch\ny = torch.exp(x)\n",
    # ... and above a PEP 263 declaration: the written bytes no longer decoded.
    "encoding declaration moved": b"# -*- coding: latin-1 -*-\nx = '\xe9'\nimport torch\ny = torch.exp(x)\n",
    # The import block ended in a lone CR and the file's first newline was LF: the section's
    # separator turned that CR into a CRLF (a changed line ending, one blank line less).
    "a lone CR before the section joined its newline": "import torch\nimport asyncio\ry = torch.exp(x)\n",
    # CR-only line endings and a latin-1 declaration: tokenize.detect_encoding read the whole
    # file as its first line and failed to decode it as UTF-8 (LookupError); CPython compiles it.
    "CR-only latin-1 file": b"# -*- coding: latin-1 -*-\rimport torch\ry = torch.exp(x)  # \xe9\r",
    # The section's marker lines inside a string literal were taken for an existing section:
    # the kernels went into the string (invalid output).
    "section markers in a string": f'import torch\ny = torch.exp(x)\nDOC = """\n{emit.BEGIN}\n{emit.END}\n"""\n',
    # Around a self-referencing assignment a memoised inference answer depended on which call
    # asked first: the first run left line 2's call out and converted line 3's; the second run,
    # with line 3 rewritten, converted line 2's (with assume_tensors; not idempotent).
    "inference order around n = (n * 2).sin()": "def f(n=1):\n    n = (n * 2).sin()\n    y = (n * 2).sin()\n",
    # emit found the section's lines with str.splitlines, which also breaks at a form feed (and
    # \x0b, \x1c-\x1e, \x85, \u2028, \u2029), unlike Python: a marker in a string below two
    # form feed lines crashed translation (IndexError)...
    "form feeds above a marker in a string": f'import torch\n\x0c\n\x0c\ny = torch.exp(x)\nNOTE = """\n{emit.BEGIN}\n"""\n',
    # ... and a form feed above an existing section put a new call's kernels outside it.
    "form feed above the section": translate_source("\x0c\nimport torch\ny = torch.exp(x)\n").code + "z = torch.rsqrt(y)\n",
    # A str source's encoding was reported as UTF-8 whatever its PEP 263 line said, so writing
    # code.encode(encoding) under "coding: latin-1" garbled it.
    "str source declaring latin-1": "# -*- coding: latin-1 -*-\nimport torch\ns = 'café'\ny = torch.exp(x)\n",
}


@pytest.mark.parametrize("kernels_module", KERNELS)
@pytest.mark.parametrize("name", sorted(FOUND))
def test_found_by_the_generators(name, kernels_module):
    assert check(FOUND[name], Options(assume_tensors=True), kernels_module) > 0


# --- binary entries with Python numbers: number-first and number-only operands -------------------

BINARY = sorted(op for op, e in load_table().entries.items()
                if e.family == "elementwise" and sum("Tensor" in p.kinds for p in e.params if p.name not in e.reject) == 2)
NUMBERS = st.one_of(st.integers(-3, 3), st.floats(-2, 2, allow_nan=False).map(lambda f: round(f, 2)), st.booleans())
OPERAND = st.one_of(NUMBERS.map(repr), st.sampled_from(["x", "y", "w", "x.half()", "s"]))


@st.composite
def binary_calls(draw, op):
    entry = load_table().entries[op]
    first, second = draw(OPERAND), draw(OPERAND)
    if draw(st.booleans()) and entry.torch_function:
        return f"{entry.torch_function}({first}, {second})"
    return f"({first}).{entry.apis[-1].rsplit('.', 1)[1]}({second})"


@pytest.mark.parametrize("op", BINARY)
def test_binary_entries_take_numbers_first_or_only_as_torch_does(op):
    """Translated, a call with a number first, second or only behaves as torch: no crash, the
    same result or the same exception (numbers given at run time through ``s``)."""
    import torch

    x, y, w = torch.rand(3, 5) + 0.5, torch.rand(3, 5) + 0.5, torch.rand(5) + 0.5

    def outcome(code, s, launcher):
        namespace = {}
        try:
            exec(compile(code, "binary.py", "exec"), namespace)
            namespace["PYPTO_LAUNCHER"] = launcher if "PYPTO_LAUNCHER" in namespace else None
            return namespace["f"](x, y, w, s)
        except Exception as exc:  # torch's own errors (a number receiver, two numbers) must match
            return type(exc)

    @settings(max_examples=40, **SETTINGS)
    @given(binary_calls(op), NUMBERS)
    def property_(call, s):
        code = f"import torch\n\n\ndef f(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, s):\n    return {call}\n"
        translated = translate_source(code, "binary.py").code
        expected = outcome(code, s, None)

        def refuse(kernel, *tensors):  # a kernel case is test_kernels' job; here only the fallbacks
            raise LookupError("kernel path")

        for launcher in (None, refuse):
            got = outcome(translated, s, launcher)
            if got is LookupError:
                continue
            if isinstance(expected, torch.Tensor):
                assert isinstance(got, torch.Tensor) and got.dtype == expected.dtype, (call, s, got)
                torch.testing.assert_close(got, expected, equal_nan=True)
            else:
                assert got == expected, (call, s, got, expected)

    property_()
