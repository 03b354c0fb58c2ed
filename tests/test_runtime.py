"""The runtime helpers that generated code carries, tested as the functions they are (no code
generated), and the copier that puts their source into translations."""

import ast

import pytest
import torch

from torch2pypto.rules import codegen
from torch2pypto.runtime import launch


@pytest.fixture
def launcher(monkeypatch):
    """A recording PYPTO_LAUNCHER on the runtime module (as torch2pypto.interpreted() sets one)."""
    calls = []
    monkeypatch.setattr(launch, "PYPTO_LAUNCHER", lambda kernel, *tensors: calls.append((kernel, tensors)))
    return calls


# ---- the copier


def test_a_block_is_its_statements_with_the_comment_above():
    block = next(d for d in codegen.PRELUDE if d.name == "PYPTO_LAUNCHER")
    assert block.source.startswith("# Kernels launch on NPU tensors.")
    assert block.source.rstrip().endswith("_UB_BYTES = 192 * 1024  # unified buffer of one AI vector core")
    assert "import" not in block.source  # the module's imports stay behind


def test_requires_are_the_blocks_of_the_runtime_names_used():
    blocks = {d.name: d for d in codegen.PRELUDE}
    assert blocks["_on_kernel_path"].requires == ("PYPTO_LAUNCHER",)  # PYPTO_LAUNCHER and _PYPTO_DTYPES
    assert blocks["_launch"].requires == ("PYPTO_LAUNCHER",)
    assert blocks["_annotated"].requires == ()  # eval is a builtin


def test_a_block_copied_twice_or_before_what_it_uses_is_refused(monkeypatch):
    monkeypatch.setattr(codegen, "_COPIED", {})
    with pytest.raises(ValueError, match="uses PYPTO_LAUNCHER"):
        codegen.copied("launch", "_launch")
    codegen.copied("launch", "PYPTO_LAUNCHER", last="_UB_BYTES")
    with pytest.raises(ValueError, match="copied by both"):
        codegen.copied("launch", "_UB_BYTES")


def test_every_runtime_statement_is_copied_by_one_definition():
    """No dead code in the runtime package: each top-level name is some definition's (the
    families copy theirs when they load)."""
    import torch2pypto.rules  # noqa: F401  (registers every family)

    for path in sorted(codegen._RUNTIME_DIR.glob("[!_]*.py")):
        module = codegen._module(path.stem)
        assert set(module.defines) <= set(codegen._COPIED), path.name
        ast.parse(path.read_text())


# ---- launch


def test_on_kernel_path_needs_an_npu_or_a_launcher(launcher):
    x = torch.ones(2, 3)
    assert launch._on_kernel_path(x, x.half(), x.bfloat16())
    assert not launch._on_kernel_path(x, torch.ones(0))  # nothing to compute
    assert not launch._on_kernel_path(x.double())  # float dtypes only by default
    assert not launch._on_kernel_path(x.long())
    assert launch._on_kernel_path(x.long(), dtypes=(torch.int64,))


def test_off_an_npu_without_a_launcher_torch_runs():
    assert launch.PYPTO_LAUNCHER is None
    assert not launch._on_kernel_path(torch.ones(2, 3))


def test_launch_calls_the_kernel_or_the_launcher(launcher, monkeypatch):
    x, out, ran = torch.ones(2), torch.empty(2), []
    launch._launch(ran.append, x)
    assert launcher == [(ran.append, (x,))] and ran == []
    monkeypatch.setattr(launch, "PYPTO_LAUNCHER", None)
    launch._launch(lambda a, b: ran.append((a, b)), x, out)
    assert ran == [(x, out)]


def test_annotated_evaluates_string_annotations_in_the_namespace():
    def kernel(x: "Shape", y: int):  # noqa: F821
        return x

    evaluated = launch._annotated({"Shape": tuple})(kernel)
    assert evaluated is kernel and kernel.__annotations__ == {"x": tuple, "y": int}
