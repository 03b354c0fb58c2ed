"""A large module is parsed a chunk at a time (issue 11 item 10): the chunks' trees are the whole
module's, and the translation is the one made from the whole tree. Progress within a file is
reported call site by call site."""

import ast
import collections
import io
from pathlib import Path

import pytest
from rich.console import Console

from torch2pypto.translator.engine import chunks, scopes
from torch2pypto.translator.engine.translate import translate_source
from torch2pypto.translator.run import runner
from torch2pypto.translator.run.runner import Job, Work

SAMPLES = Path(__file__).parent.parent / "samples"

TRICKY = '''\
"""Docstring with code at column 0:
def not_a_function():
    pass
"""
import torch
from torch import rsqrt as r


@decorator(
    "a ) string",
)
def f(x: torch.Tensor):
    s = 'it\\'s (' + "[" + r"\\\\" + f"{x!r}("
    return r(x) + torch.exp(x)  # a comment with a quote ' and a bracket (


if torch.cuda.is_available():
    dev = "cuda"
else:
    dev = "cpu"
value = (1,
2)
line = 1 + \\
2
text = b"""
class Inside:
"""


class Norm(torch.nn.Module):
    def forward(self, h):
        return h.float() * helper(h)


class Later(Norm):
    def forward(self, h):
        return h.to(torch.float16)


def helper(h: torch.Tensor) -> torch.Tensor:
    return h.pow(2).mean(-1, keepdim=True)
'''


def whole_dump(text):
    return ast.dump(ast.parse(text), include_attributes=True)


@pytest.mark.parametrize("every", [1, 2, 3, 7])
def test_chunks_parse_to_the_whole_modules_tree(every):
    cut = chunks.cut(TRICKY, every)
    assert cut is not None and len(cut) > 3
    body = [s for chunk in cut for s in chunks.tree(TRICKY, chunk, "t.py").body]
    assert ast.dump(ast.Module(body, []), include_attributes=True) == whole_dump(TRICKY)
    firsts = [first for first, _, _ in cut]
    lines = TRICKY.splitlines()
    assert all(lines[i - 1][:1] not in " #)e" and lines[i - 1] != "def f(x: torch.Tensor):" for i in firsts[1:])  # never inside, after a decorator or at else


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_a_module_of_at_most_every_lines_is_parsed_whole(newline):
    text = "x = 1\n" * 4
    for every, parted in ((4, False), (3, True)):
        for body in (text, text.rstrip("\n")):  # 4 lines, ending in a line break or not
            assert (chunks.cut(body.replace("\n", newline), every) is not None) is parted


def translations(text, monkeypatch, every=3, **kwargs):
    whole = translate_source(text, "t.py", **kwargs)
    monkeypatch.setattr(chunks, "CHUNK_LINES", every)
    assert chunks.cut(text) is not None
    parted = translate_source(text, "t.py", **kwargs)
    return whole, parted


SOURCES = [TRICKY, *(p.read_text() for p in sorted(SAMPLES.glob("*.py")))]


@pytest.mark.parametrize("kernels_module", [None, "._pypto_kernels"])
@pytest.mark.parametrize("text", SOURCES, ids=["tricky", *(p.stem for p in sorted(SAMPLES.glob("*.py")))])
def test_a_module_translated_in_chunks_is_translated_as_a_whole(text, kernels_module, monkeypatch):
    whole, parted = translations(text, monkeypatch, kernels_module=kernels_module)
    assert parted.code == whole.code
    assert parted.records == whole.records and parted.definitions == whole.definitions
    assert [c.record for c in parted.conversions] == [c.record for c in whole.conversions]
    assert any(r.status == "converted" for r in whole.records)


def test_names_bound_in_other_chunks_resolve_as_in_the_whole_module(monkeypatch):
    # helper's parameter is a tensor by its annotation, Later is a module through Norm, r is torch.rsqrt:
    # each is bound in another chunk than the call it decides
    whole, parted = translations(TRICKY, monkeypatch)
    statuses = [(r.api, r.status) for r in parted.records]
    assert ("torch.rsqrt", "converted") in statuses and ("torch.Tensor.to", "converted") in statuses
    assert ("torch.Tensor.float", "converted") in statuses and ("torch.Tensor.mean", "converted") in statuses


def test_a_module_level_bindings_list_is_scanned_once_for_every_chunk(monkeypatch):
    # torch's list, bound in one chunk and read in many: the imports among it found once per module
    asking, scanned = set(), []
    imports, found = scopes.ModuleIndex.imports, scopes._imports

    def torch(bindings):
        return [b.qualified for b in bindings] == ["torch"]

    def asked(index, bindings):
        if torch(bindings):
            asking.add(index)
        return imports(index, bindings)

    def scan(bindings):
        if torch(bindings):
            scanned.append(bindings)
        return found(bindings)

    monkeypatch.setattr(scopes.ModuleIndex, "imports", asked)
    monkeypatch.setattr(scopes, "_imports", scan)
    monkeypatch.setattr(chunks, "CHUNK_LINES", 3)
    translate_source(TRICKY, "t.py")
    assert len(asking) > 1 and len(scanned) == 1


def test_a_syntax_error_in_a_chunk_is_the_whole_modules(monkeypatch):
    text = TRICKY + "\n\ndef broken(:\n    pass\n"
    with pytest.raises(SyntaxError) as whole:
        translate_source(text, "t.py")
    monkeypatch.setattr(chunks, "CHUNK_LINES", 3)
    with pytest.raises(SyntaxError) as parted:
        translate_source(text, "t.py")
    assert (parted.value.msg, parted.value.lineno) == (whole.value.msg, whole.value.lineno)


def test_progress_is_reported_call_site_by_call_site(tmp_path):
    body = "".join(f"def f{i}(x: torch.Tensor):\n    return torch.rsqrt(x), x.float()\n\n\n" for i in range(50))  # a tuple: no region
    source = tmp_path / "big.py"
    source.write_text("import torch\n\n\n" + body)
    shares = []
    translation = translate_source(source.read_text(), str(source), progress=shares.append)
    converted = sum(r.status == "converted" for r in translation.records)
    assert converted == 100 and len(shares) == 100  # one report per outermost call rewritten
    assert shares == sorted(shares) and 0 < shares[0] and shares[-1] <= 1

    class Bar(runner._ProgressBar):
        seen: list = []

        def within(self, job, share):
            self.seen.append((job, share))

    original = runner._ProgressBar
    runner._ProgressBar = Bar
    try:
        runner.run([Job(source, str(source))], Work(runner.Options()), workers=1)
    finally:
        runner._ProgressBar = original
    assert len(Bar.seen) == 100 and {job for job, _ in Bar.seen} == {0}


FREE_TORCH = "from torch import Tensor\n\n\ndef f(x: Tensor):\n    return x.float()\n\n\ndef g(y):\n    return y\n"


@pytest.mark.parametrize("text", [FREE_TORCH, FREE_TORCH.replace("return y", "return torch")])
def test_a_torch_name_read_in_another_chunk_decides_as_in_the_whole_module(text, monkeypatch):
    # x.float() spells torch.float32 with a torch the module does not import: an added import
    # gives it meaning, unless the module reads a name torch already (in another chunk)
    whole, parted = translations(text, monkeypatch)
    assert (parted.code, parted.records) == (whole.code, whole.records)
    assert ("import torch" in whole.code) == ("return torch" not in text)


ROPE = '''\
import torch


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rope(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    return (q * cos) + (rotate_half(q) * sin)


def later(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    return (q * cos) + (rotate_half(q) * sin) * 2
'''


@pytest.mark.parametrize("every", [3, 10], ids=["apart", "rope beside it"])
@pytest.mark.parametrize("kernels_module", [None, "._pypto_kernels"])
def test_a_module_function_inlined_from_another_part_as_from_the_whole(kernels_module, every, monkeypatch):
    """Fusion inlines rotate_half into regions of other parts as into the whole module's (its part
    is read again, with its own call sites), and into its own part's. Its return is annotated: a
    call's kind from a body in another part is not inferred (so an operator on it would be
    ambiguous there, not here)."""
    whole, parted = translations(ROPE, monkeypatch, every, kernels_module=kernels_module)
    assert [r.ops[:5] for r in whole.regions] == [("x * y", "x[..., a:b]", "x[..., a:b]", "neg", "cat")] * 2
    assert parted.code == whole.code and parted.regions == whole.regions and parted.records == whole.records


def test_a_part_inlines_its_own_module_functions_without_reading_itself_again(monkeypatch):
    """rope beside rotate_half takes it from its own part's tree; only later's part reads
    rotate_half's part again: each part is parsed once to be outlined and once to be
    translated, rotate_half's once more."""
    parsed = collections.Counter()
    tree = chunks.tree

    def counted(text, chunk, path):
        parsed[chunk[0]] += 1
        return tree(text, chunk, path)

    monkeypatch.setattr(chunks, "tree", counted)
    whole, parted = translations(ROPE, monkeypatch, 10)
    assert parted.code == whole.code and len(parted.regions) == 2
    assert parsed == {1: 3, 14: 2}


@pytest.mark.parametrize("terminal", [True, False])
def test_the_progress_bar_shows_on_a_terminal_once_a_run_takes_a_while(terminal):
    console = Console(file=io.StringIO(), force_terminal=terminal)
    with runner._ProgressBar(console, [10, 20]) as bar:
        bar.advance(0)
        assert bar.progress is None  # not yet: most runs end first
        bar.start -= runner._ProgressBar.DELAY
        bar.within(1, 0.5)
        assert (bar.progress is not None) is terminal
