"""The runtime's own helpers, tested as the functions they are (no code generated): the copier
that puts their source into translations, launching, tiles, gradients and the cast wrappers. The
layout and operand helpers are in test_runtime_layout.py and test_runtime_operands.py; each
family's `_takes` check is with that family's tests."""

import ast
import importlib
import pkgutil

import pypto
import pytest
import torch

from helpers import factory
import torch2pypto.rules
from torch2pypto.rules import codegen
from torch2pypto.runtime import casting, grad, launch, tiles


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


def test_a_synthetic_module_copies_its_blocks_with_their_needs(monkeypatch, tmp_path):
    (tmp_path / "synthetic.py").write_text(
        "import functools\nimport math\n\nimport torch\n\nfrom torch2pypto.runtime.launch import _UB_BYTES\n\n\n"
        "# a note for this module alone\n\n"
        "# the first block's comment\n_LIMIT = 4\n\n\n"
        "@functools.cache\ndef _first(x):\n    return math.prod(x) * _LIMIT * _UB_BYTES\n\n\n"
        "def _second(t):\n    def inner():\n        return _first(t.shape)\n    return torch.tensor(inner())\n\n\n"
        "def _broken():\n    return _nowhere\n"
    )
    monkeypatch.setattr(codegen, "_RUNTIME_DIR", tmp_path)
    monkeypatch.setattr(codegen, "_COPIED", dict(codegen._COPIED))
    first = codegen.copied("synthetic", "_first", "_LIMIT")
    assert first.source.startswith("# the first block's comment\n_LIMIT = 4\n\n\n@functools.cache\n")
    assert first.requires == ("PYPTO_LAUNCHER",) and first.imports == ("math",)  # functools: every section's
    second = codegen.copied("synthetic", "_second")
    assert second.requires == ("_first",) and second.imports == ()
    with pytest.raises(ValueError, match="_broken uses _nowhere, which runtime module synthetic neither defines"):
        codegen.copied("synthetic", "_broken")


def test_every_runtime_statement_is_copied_by_one_definition():
    """No dead code in the runtime package: each top-level name is some definition's (the
    families copy theirs when they load, as do the engine's fusions)."""
    for module in pkgutil.iter_modules(torch2pypto.rules.__path__):  # every family and the engine's fusions' kernels
        importlib.import_module(f"torch2pypto.rules.{module.name}")
    for path in sorted(codegen._RUNTIME_DIR.glob("[!_]*.py")):
        if path.stem == "generated":  # stubs: their source is built per translation
            continue
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


def test_inlined_only_where_the_call_runs_exactly_the_class_forward():
    class Norm(torch.nn.Module):
        def forward(self, x):
            return x

    class Sub(Norm):
        pass

    norm = Norm()
    assert launch._inlined((norm, Norm))
    assert not launch._inlined((Sub(), Norm))  # a subclass may compute otherwise
    own = Norm()
    own.forward = lambda x: x + 1  # a forward of the instance
    assert not launch._inlined((norm, Norm), (own, Norm))
    handle = norm.register_forward_hook(lambda *args: None)
    assert not launch._inlined((norm, Norm))
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda *args: None)  # a global hook
    try:
        assert not launch._inlined((norm, Norm))
    finally:
        handle.remove()
    assert launch._inlined((norm, Norm))


def test_annotated_evaluates_string_annotations_in_the_namespace():
    def kernel(x: "Shape", y: int):  # noqa: F821
        return x

    evaluated = launch._annotated({"Shape": tuple})(kernel)
    assert evaluated is kernel and kernel.__annotations__ == {"x": tuple, "y": int}


# ---- tiles


def test_spread_rows_spreads_a_launch_over_the_cores_in_tiles_of_at_least_min_tile():
    assert tiles._spread_rows(4096, 128) == 64  # capped at 64
    assert tiles._spread_rows(1024, 4096) == 32  # 32 tiles
    assert tiles._spread_rows(100, 1024) == 4  # at least _MIN_TILE elements (3 rows would spread 32 tiles)
    assert tiles._spread_rows(3, 128) == 4  # n's next power of two
    assert tiles._spread_rows(3, 128, whole=True) == 2  # a whole tile lies within the rows


@pytest.mark.parametrize("cols, max_rows, buffers, dtypes, options, shape", [
    (128, 64, 2, (pypto.DT_FP32,), {}, (64, 128)),
    (100_000, 64, 2, (pypto.DT_FP32,), {}, (4, 8192)),  # a wide row: column tiles of at most _WIDEST_TILE
    (20_000, 64, 2, (pypto.DT_FP32,), {"whole_rows": True}, (1, 20_000)),  # fits the UB whole
    (4096, 64, 2, (pypto.DT_BF16,), {}, (8, 4096)),  # BF16: at most _BF16_ROW_TILE elements a row tile
    (4096, 64, 2, (pypto.DT_FP16,), {}, (16, 4096)),  # FP16: half the bytes
    (4096, 64, 2, (pypto.DT_FP32,), {"split_cols": True}, (64, 512)),  # max_rows rows of _WIDE_TILE cols
    (4096, 64, 2, (pypto.DT_FP16, pypto.DT_INT64), {}, (4, 4096)),  # the widest dtype counts
])
def test_tile_shape(cols, max_rows, buffers, dtypes, options, shape):
    rows, tile_cols = tiles._tile_shape(cols, max_rows, buffers, dtypes, **options)
    assert (rows, tile_cols) == shape
    size = 8 if pypto.DT_INT64 in dtypes else 2 if dtypes == (pypto.DT_FP16,) else 4
    assert rows * tile_cols * size * buffers <= tiles._TILE_BUDGET or options.get("whole_rows")


def test_cube_rows_and_tiles_fit_the_cube_buffers():
    assert [tiles._cube_rows(m) for m in (1, 64, 100, 1000)] == [16, 64, 128, 128]
    # a's row tile, the smaller operand in L1, takes the L1 b's leaves: fewer, larger GM copies
    assert tiles._cube_tiles(4096, 4096, pypto.DT_BF16, 128) == ([128, 1024, 512], [256, 256])
    assert tiles._cube_tiles(4096, 11008, pypto.DT_BF16, 64) == ([128, 2048, 512], [256, 256])
    assert tiles._cube_tiles(4096, 11008, pypto.DT_BF16, 16) == ([128, 4096, 512], [256, 256])  # up to k
    assert tiles._cube_tiles(512, 128, pypto.DT_BF16, 512) == ([64, 384, 384], [64, 128])  # b's n tile the smaller
    assert tiles._cube_tiles(4096, 4096, pypto.DT_FP32, 128) == ([64, 320, 320], [256, 256])  # L0B, then L1
    assert tiles._cube_tiles(16, 32, pypto.DT_FP16, 16) == ([16, 16, 16], [32, 32])


# ---- grad: a kernel's result carries torch's gradient


def kernel_exp(x, scale=1.0):
    """A stand-in for a kernel path: the value computed outside autograd."""
    with torch.no_grad():
        return torch.exp(x) * scale


def test_with_torch_grad_without_autograd_is_the_kernel_path():
    x = torch.randn(3)
    assert torch.equal(grad._with_torch_grad(kernel_exp, torch.exp, x), torch.exp(x))
    with torch.no_grad():
        result = grad._with_torch_grad(kernel_exp, torch.exp, x.requires_grad_())
    assert result.grad_fn is None


def test_with_torch_grad_gives_torchs_gradient_of_each_tensor_that_wants_one():
    x, w = torch.randn(3, requires_grad=True), torch.randn(3)
    result = grad._with_torch_grad(lambda x, w, s: kernel_exp(x) * w * s, lambda x, w, s: torch.exp(x) * w * s, x, w, 2.0)
    assert torch.allclose(result, torch.exp(x) * w * 2)
    result.sum().backward()
    assert torch.allclose(x.grad, torch.exp(x.detach()) * w * 2) and w.grad is None


def test_with_torch_grads_gives_torchs_gradients_of_the_results_that_reach_the_loss():
    """Several results (a grouped region's): each input's gradient from the results the loss reads;
    an input that only an unread result reads gets none, as in torch."""
    x, y = torch.randn(3, requires_grad=True), torch.randn(4, requires_grad=True)

    def kernel_path(x, y):
        return kernel_exp(x), kernel_exp(y, 2.0)

    a, b = grad._with_torch_grads(kernel_path, lambda x, y: (torch.exp(x), torch.exp(y) * 2), x, y)
    assert torch.allclose(a, torch.exp(x)) and torch.allclose(b, torch.exp(y) * 2)
    (a.sum() * 3).backward()
    assert torch.allclose(x.grad, torch.exp(x.detach()) * 3) and y.grad is None
    a, b = grad._with_torch_grads(kernel_path, lambda x, y: (torch.exp(x), torch.exp(y) * 2), x, y)
    (a.sum() + b.sum()).backward()
    assert torch.allclose(y.grad, torch.exp(y.detach()) * 2)
    with torch.no_grad():
        assert all(r.grad_fn is None for r in grad._with_torch_grads(kernel_path, None, x, y))


@pytest.mark.parametrize("tied", [False, True], ids=["two weights", "one weight held twice"])
def test_with_held_grads_gives_the_submodules_weights_torchs_gradient_once(tied):
    """A region inlining two scaling submodules: its torch path calls them (reading their weights),
    its kernel path takes the weights held; each weight and the input get torch's gradient (a
    weight held twice once, not twice), the result used twice."""
    first, second = torch.nn.Linear(3, 3, bias=False), torch.nn.Linear(3, 3, bias=False)
    if tied:
        second.weight = first.weight
    x = torch.randn(2, 3, requires_grad=True)

    def torch_path(x, first, second):
        h = first(x)
        return second(h), h

    def kernel_path(x, first, second, w1, w2):
        h = x @ w1.T
        return h @ w2.T, h

    expected = torch_path(x, first, second)
    ((expected[0] * expected[1]).sum() + expected[0].sum()).backward()
    wanted = [x.grad, *(p.grad for p in {id(p): p for p in (first.weight, second.weight)}.values())]
    x.grad = first.weight.grad = second.weight.grad = None
    got = grad._with_held_grads(kernel_path, torch_path, x, first, second, held=(first.weight, second.weight))
    for g, e in zip(got, expected):
        assert torch.allclose(g, e) and g.grad_fn is not None
    ((got[0] * got[1]).sum() + got[0].sum()).backward()
    for g, e in zip([x.grad, *(p.grad for p in {id(p): p for p in (first.weight, second.weight)}.values())], wanted):
        torch.testing.assert_close(g, e)
    with torch.no_grad():
        assert all(r.grad_fn is None for r in grad._with_held_grads(kernel_path, None, x, first, second, held=(first.weight, second.weight)))


def test_a_result_sharing_an_inputs_storage_is_a_copy():
    x = torch.randn(3, requires_grad=True)
    result = grad._TorchGradient.apply(lambda x: x.detach(), lambda x: x * 1, x)
    assert result.untyped_storage().data_ptr() != x.untyped_storage().data_ptr() and torch.equal(result, x)
    result.mul_(2)  # the Function's own tensor: changed in place as torch's result may be


# ---- wrappers around a generated kernel factory: a stand-in factory computes in torch (conftest's `running`)


TORCH_DTYPES = {v: k for k, v in launch._PYPTO_DTYPES.items()}


def test_a_helper_requires_the_generated_factory_it_imports():
    from torch2pypto.rules import casting as rule
    from torch2pypto.rules import movement

    assert "cast_kernel" in rule.CAST.requires and "assemble1_kernel" in movement.ALONG.requires


def test_pypto_cast_launches_once_in_the_inputs_layout(running, monkeypatch):
    monkeypatch.setattr(casting, "cast_kernel", factory(lambda args, x, out: out.copy_(x.to(TORCH_DTYPES[args[1]]))))
    x = torch.randn(5, 3).mT  # transposed: read and written in place in that layout
    y = casting.pypto_cast(x, torch.float16)
    assert y.dtype == torch.float16 and y.stride() == x.stride() and torch.equal(y, x.half())
    assert running == [(launch._PYPTO_DTYPES[torch.float32], launch._PYPTO_DTYPES[torch.float16], 3, tiles._spread_rows(5, 3))]  # its [5, 3] base
    assert casting.pypto_cast(x, torch.float32) is x and len(running) == 1  # torch returns the input itself
    assert torch.equal(casting.pypto_cast(x, torch.float64), x.double()) and len(running) == 1  # no kernel dtype


def test_pypto_cast_carries_torchs_gradient_and_its_forms_reach_it(running, monkeypatch):
    monkeypatch.setattr(casting, "cast_kernel", factory(lambda args, x, out: out.copy_(x.to(TORCH_DTYPES[args[1]]))))
    x = torch.randn(4, 3, requires_grad=True)
    y = casting.pypto_to(x, torch.bfloat16)
    y.float().sum().backward()
    assert y.dtype == torch.bfloat16 and torch.equal(x.grad, torch.ones(4, 3)) and len(running) == 1
    assert casting.pypto_type_as(x.detach(), torch.ones(1).half()).dtype == torch.float16
    assert casting.pypto_to(x.detach(), torch.ones(1).half()).dtype == torch.float16
    assert casting.pypto_to(x.detach(), "cpu").dtype == torch.float32 and len(running) == 3
