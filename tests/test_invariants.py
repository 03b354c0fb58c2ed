"""The invariant checker: silent on real translations, loud on each kind of planted violation."""

import dataclasses
from pathlib import Path

import pytest

from torch2pypto import translate_source
from torch2pypto.translator.engine import emit
from torch2pypto.translator.engine.report import CONVERTED
from torch2pypto.translator.engine.transform import Options
from torch2pypto.translator.engine.translate import Translation
from torch2pypto.translator.oracle.invariants import violations

SAMPLES = sorted((Path(__file__).parent.parent / "samples").glob("*.py"))
KERNELS = "._pypto_kernels"
PER_CALL = Options(fuse=False)  # one kernel per call: the planted violations below are per call


LLAMA = (SAMPLES[0].parent / "llama_rmsnorm.py").read_text().replace("dtype\n", "dtype  # kept as is\n", 1)


def llama(options: Options = PER_CALL) -> Translation:
    return translate_source(LLAMA, "llama.py", options)


@pytest.mark.parametrize("options", [Options(), PER_CALL], ids=["fused", "per-call"])
@pytest.mark.parametrize("kernels_module", [None, KERNELS])
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_real_translations_have_no_violations(path, kernels_module, options):
    data = path.read_bytes()
    translation = translate_source(data, path.name, options, kernels_module=kernels_module)
    assert violations(translation, options=options, kernels_module=kernels_module, source=data) == []


ALIGNMENT = {
    "repeated lines": (
        "import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n    def forward(self, x):\n"
        "        y = x \\\n            .to(torch.float32)\n        return y\n\n    def g(self, v):\n"
        "        y = x \\\n            .to(torch.float32)\n        return y\n"
    ),
    "unchanged lines inside a call": (
        "import torch\ndef f(x: torch.Tensor):\n    y = torch.nn.functional.relu(input=torch.pow(x,\n"
        "          2,\n          ),\n          inplace=False,\n          )\n"
    ),
    "two calls on a line": "import torch\ndef f(x: torch.Tensor):\n    return x.float() or (x).half()  # ok\n",
    "a call's first line, unchanged, inside the new call": (
        "import torch\ny = f(\n    torch.maximum(  # c\n).type_as(\n    x,\n),\n)\n"
    ),
}


@pytest.mark.parametrize("name", sorted(ALIGNMENT))
def test_diff_alignment_finds_no_false_violations(name):
    translation = translate_source(ALIGNMENT[name])
    assert translation.changed
    assert violations(translation) == []


MARKERS_IN_STRINGS = [
    f'import torch\ny = torch.exp(x)\nDOC = """\n{emit.BEGIN}\n{emit.END}\n"""\n',
    f'import torch\ny = torch.exp(x)\nDOC = """\n{emit.BEGIN}\n"""\n',
    f'import torch\nDOC = """\n{emit.BEGIN}\n"""\ny = torch.exp(x)\n',
]


@pytest.mark.parametrize("kernels_module", [None, KERNELS])
@pytest.mark.parametrize("source", MARKERS_IN_STRINGS)
def test_section_markers_in_strings_are_text(source, kernels_module):
    once = translate_source(source, kernels_module=kernels_module)
    assert violations(once, kernels_module=kernels_module) == []
    twice = translate_source(once.code + "z = torch.rsqrt(y)\n", kernels_module=kernels_module)
    assert violations(twice, kernels_module=kernels_module) == []


def test_text_between_two_calls_on_a_line_is_checked():
    translation = translate_source(ALIGNMENT["two calls on a line"], options=PER_CALL)
    tampered = dataclasses.replace(translation, code=translation.code.replace("float32) or pypto", "float32) and pypto"))
    assert any(OUTSIDE in p for p in violations(tampered, options=PER_CALL))


def test_reads_of_transformers_mask_builders_are_rewrites_not_changed_text():
    """engine.masks reads create_causal_mask through pypto_causal_mask: calls the report does not
    list as sites, whose text the diff takes as the builder's own (a second run's input too)."""
    from test_masks import SOURCE as MASKS

    once = translate_source(MASKS)
    assert "pypto_causal_mask(create_causal_mask," in once.code and "pypto_causal_mask_maker(" in once.code
    assert violations(once) == []
    assert violations(translate_source(once.code)) == []
    planted = dataclasses.replace(once, code=once.code.replace("pypto_causal_mask(create_causal_mask,", "pypto_causal_mask(create_causal_mask, 1,"))
    assert any("outside converted calls" in v for v in violations(planted))


def test_a_multiline_kernels_import_counts_as_added():
    source = "import torch\n\n\ndef f(x: torch.Tensor):\n    return torch.exp(x)\n"
    real = translate_source(source, kernels_module=KERNELS)
    (record,) = real.records
    code = (
        "import torch\nfrom ._pypto_kernels import (\n    pypto_exp,\n)\n\n\n"
        "def f(x: torch.Tensor):\n    return pypto_exp(x)\n"
    )
    fake = Translation(real.path, source, code, "utf-8", (record,), real.conversions)
    assert violations(fake, kernels_module=KERNELS) == []


def retouch(old: str, new: str):
    """Replace the last ``old`` in the output (after the generated section)."""
    return lambda t: dataclasses.replace(t, code=new.join(t.code.rsplit(old, 1)))


OUTSIDE = "text outside converted calls changed"
TAMPERED = {
    "docstring outside any call": (retouch('"""RMSNorm as', '"""RMS norm as'), OUTSIDE),
    "comment outside any call": (retouch("# kept as is", "# kept"), OUTSIDE),
    "blank line inserted": (retouch("super().__init__()\n", "super().__init__()\n\n"), "inserted outside"),
    "blank line removed": (retouch("\n\n    def extra_repr", "\n    def extra_repr"), OUTSIDE),
    "blank line between calls": (retouch("float32)\n", "float32)\n\n"), OUTSIDE),
    "statement inserted": (retouch("super().__init__()\n", "super().__init__()\n        pass\n"), "inserted outside"),
    "broken line": (retouch("keepdim=True)\n", "keepdim=True\n"), "not valid Python"),
    "text before a call": (retouch("variance = pypto_mean", "varianc = pypto_mean"), OUTSIDE),
    "line ending after a call": (retouch("keepdim=True)\n", "keepdim=True)\r\n"), OUTSIDE),
    "non-idempotent": (retouch("cast(hidden_states, input", "cast(torch.exp(hidden_states), input"), "not idempotent"),
    "undefined wrapper": (retouch("pypto_rsqrt(pypto_add(variance", "pypto_sqrt(pypto_add(variance"), "no definition or import"),
    "dropped record": (lambda t: dataclasses.replace(t, records=(*t.records[:-2], t.records[-1])), OUTSIDE),  # the outer x * y
    "records out of order": (lambda t: dataclasses.replace(t, records=t.records[::-1]), "not in source order"),
    "other path": (lambda t: dataclasses.replace(t, path="other.py"), "other paths"),
    "unknown status": (
        lambda t: dataclasses.replace(t, records=(status(t.records[0], "maybe"), *t.records[1:])),
        "unknown statuses",
    ),
    "converted but unchanged": (
        lambda t: dataclasses.replace(t, records=(status(t.records[0], CONVERTED), *t.records[1:])),
        "converted call is unchanged",
    ),
}


def status(record, value):
    return dataclasses.replace(record, status=value)


@pytest.mark.parametrize("name", sorted(TAMPERED))
def test_planted_violations_are_caught(name):
    tamper, message = TAMPERED[name]
    translation = llama()
    tampered = tamper(translation)
    assert tampered != translation, "the tamper did not apply"
    found = violations(tampered, options=PER_CALL)
    assert any(message in problem for problem in found), found


FUSED_TAMPERED = {
    "text before the region": (retouch("input_dtype = hidden_states.dtype", "input_dtype = hidden_states.dtype + 0"), OUTSIDE),
    "undefined fused wrapper": (retouch("return pypto_fused_forward", "return pypto_fused_other"), "no definition or import"),
    "region back to torch": (retouch("return pypto_fused_forward", "return torch.exp(hidden_states) or pypto_fused_forward"), "not idempotent"),
}


@pytest.mark.parametrize("name", sorted(FUSED_TAMPERED))
def test_planted_violations_in_fused_regions_are_caught(name):
    tamper, message = FUSED_TAMPERED[name]
    translation = llama(Options())
    assert translation.regions
    tampered = tamper(translation)
    assert tampered != translation, "the tamper did not apply"
    assert any(message in problem for problem in violations(tampered)), violations(tampered)


HEADS = {
    "shebang": ("#!/usr/bin/env python\n", "shebang"),
    "cookie": ("# -*- coding: utf-8 -*-\n", "encoding declaration"),
    "docstring": ('"""Doc."""\n', "docstring"),
}


@pytest.mark.parametrize("head", sorted(HEADS))
def test_nothing_may_go_above_the_module_head(head):
    text, message = HEADS[head]
    translation = translate_source(text + "import torch\ny = torch.exp(torch.ones(2))\n")
    assert violations(translation) == []
    above = dataclasses.replace(translation, code="import math\n" + translation.code)
    assert any(message in p for p in violations(above))


def test_a_changed_existing_section_is_caught():
    once = llama().code
    twice = translate_source(once + "\ndef g(x: torch.Tensor):\n    return torch.exp(x)\n", "llama.py", PER_CALL)
    assert violations(twice, options=PER_CALL) == []
    tampered = dataclasses.replace(twice, code=twice.code.replace("_UB_BYTES = 192", "_UB_BYTES = 96"))
    assert any("existing generated section" in p for p in violations(tampered))


def test_a_translation_that_lost_input_bytes_is_caught():
    translation = llama()
    assert any("not the input text" in p for p in violations(translation, source=LLAMA + "# trailing\n"))


def test_an_unencodable_output_is_caught():
    source = "# -*- coding: latin-1 -*-\nimport torch\ny = torch.exp(torch.ones(2))\n"
    translation = translate_source(source.encode("latin-1"))
    tampered = dataclasses.replace(translation, code=translation.code.replace("# ---- end", "# \u2014 end"))
    assert any("cannot be written in its encoding" in p for p in violations(tampered))


@pytest.mark.parametrize("kernels_module", [None, KERNELS])
def test_a_wrappers_result_is_what_its_torch_call_gave(kernels_module):
    """A second run decides as the first: `r` stays a tensor once `torch.roll` is `pypto_roll`, so
    repeat_interleave with tensor repeats stays torch (corpus: granite_docling, seamless_m4t)."""
    source = (
        "import torch\n\n\ndef f(x: torch.Tensor):\n"
        "    r = torch.roll(x, 1)\n"
        "    return torch.repeat_interleave(x, r.view(-1), dim=0)\n"
    )
    once = translate_source(source, kernels_module=kernels_module)
    assert "pypto_roll(x, 1)" in once.code and "torch.repeat_interleave(x, r.view(-1)" in once.code
    assert translate_source(once.code, kernels_module=kernels_module).code == once.code


def test_a_tensor_forms_call_stands_for_its_sites_torch_call():
    """torch.max(a, b) of tensors runs a maximum kernel, but its wrapper still stands for torch.max
    (not torch.maximum), so a second run reads `n` as the first did (corpus: layoutlmv2, umt5)."""
    source = (
        "import torch\n\n\ndef f(rp, flag):\n"
        "    if flag:\n        n = torch.abs(rp)\n"
        "    else:\n        n = torch.max(-rp, torch.zeros_like(rp))\n"
        "    return n.float()\n"
    )
    once = translate_source(source, options=Options(fuse=False))
    assert "pypto_max_tensors(-rp, torch.zeros_like(rp))" in once.code
    assert translate_source(once.code, options=Options(fuse=False)).code == once.code
