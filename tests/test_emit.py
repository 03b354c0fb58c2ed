"""Output contract: valid Python, bytes kept outside rewritten calls, imports once, idempotent."""

import difflib
import re

import libcst as cst
import pytest

from helpers import translate
from torch2pypto.rules.codegen import PRELUDE, Definition
from torch2pypto.translator.engine.emit import line_starts, ordered

SOURCE = '''\
#!/usr/bin/env python
"""A module docstring."""
from __future__ import division

import torch  # the only import


def f(x: torch.Tensor):
    # a comment before
    y = torch.exp(  # a comment inside
        x
    )
    return   y.float()  # odd spacing stays
'''


def test_only_rewritten_calls_and_the_section_change():
    out = translate(SOURCE, fuse=False).code
    cst.parse_module(out)
    removed = [l for l in difflib.ndiff(SOURCE.splitlines(), out.splitlines()) if l.startswith("- ")]
    assert removed == ["-     y = torch.exp(  # a comment inside", "-     return   y.float()  # odd spacing stays"]
    assert "    return   pypto_cast(y, torch.float32)  # odd spacing stays" in out
    assert "# a comment inside" in out


def test_section_sits_after_the_imports_and_imports_are_added_once():
    out = translate(SOURCE).code
    assert out.index("import torch  # the only import") < out.index("# ---- torch2pypto")
    assert out.count("import torch\n") == 0 and out.count("import pypto") == 1
    assert out.startswith("#!/usr/bin/env python\n")


def test_second_run_changes_nothing():
    once = translate(SOURCE).code
    assert translate(once).code == once


def test_a_fused_region_keeps_its_comments_above_its_call():
    out = translate(SOURCE).code
    assert "    # a comment before\n    # a comment inside\n    return pypto_fused_f_" in out
    assert out.endswith(")  # odd spacing stays\n")


def test_a_new_call_extends_the_existing_section_and_keeps_hand_edits():
    once = translate(SOURCE, fuse=False).code.replace("_TILE_BUDGET = 256 * 1024", "_TILE_BUDGET = 128 * 1024")
    twice = translate(once + "\n\ndef g(x: torch.Tensor):\n    return torch.rsqrt(x)\n", fuse=False).code
    assert "_TILE_BUDGET = 128 * 1024" in twice
    assert twice.count("def pypto_cast(") == 1 and twice.count("def pypto_rsqrt(") == 1
    assert translate(twice, fuse=False).code == twice


def test_crlf_line_endings_are_kept():
    source = SOURCE.replace("\n", "\r\n")
    out = translate(source).code
    assert "\n" not in out.replace("\r\n", "")
    assert translate(out).code == out


def test_encoding_cookie_round_trips():
    source = "# -*- coding: latin-1 -*-\nimport torch\ns = 'caf\xe9'\ny = torch.exp(torch.ones(2))\n"
    t = translate(source.encode("latin-1"))
    assert t.encoding in ("latin-1", "iso-8859-1")
    assert "caf\xe9" in t.code and "pypto_exp" in t.code


@pytest.mark.parametrize("source", ["", "x = 1\n", "import torch\n", "'''doc'''\n"])
def test_modules_without_conversions_are_untouched(source):
    assert translate(source).code == source


def test_module_without_imports_gets_the_section_at_the_top():
    out = translate("from torch import exp\ny = exp(z)\n").code
    assert re.match(r"from torch import exp\n\n\n# ---- torch2pypto", out)


def test_ordered_puts_the_prelude_first_and_each_definition_after_what_it_requires():
    assert len({d.name for d in PRELUDE}) == len(PRELUDE)  # ordered tells the prelude's definitions by name
    first = PRELUDE[0]
    b = Definition("b", "b = 1\n", requires=(first.name,))
    a = Definition("a", "a = b\n", requires=("b",))
    prelude = ordered([first])
    assert prelude[-1] is first and all(d in PRELUDE for d in prelude)
    assert ordered([a, b, a]) == [*prelude, b, a]
    assert ordered([Definition(first.name, first.source, first.requires, first.imports)]) == prelude  # equal: the prelude's
    changed = Definition(first.name, first.source + "# tuned\n", first.requires, first.imports)
    assert ordered([changed]) == [*prelude, changed]


@pytest.mark.parametrize("text", ["", "a", "a\n", "a\nb", "a\n\nb\n", "a\r\nb\rc\n", "\r\r\n\n", "x\ry"])
def test_line_starts_of_the_first_lines_are_a_prefix_of_all_of_them(text):
    every = line_starts(text)
    assert every == [0, *(m.end() for m in re.finditer(r"\r\n|\r|\n", text))]
    for count in range(1, len(every) + 3):
        assert line_starts(text, count) == every[:count]
