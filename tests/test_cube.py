"""The cube family beyond the table's examples: ``a @ b`` sites, nn.Linear modules, torch's
refusals and gradients (the generated kernel cases are in test_kernels.py)."""

import importlib.util

import pytest
import torch

import torch2pypto
from helpers import sample, statuses, translate
from torch2pypto.mapping import load_table
from torch2pypto.rules import cube as cube_rules
from torch2pypto.runtime import cube
from torch2pypto.translator.engine.translate import translate_source
from torch2pypto.translator.verification import verify
from torch2pypto.translator.verification.interpreter import counting

MATMULS = """\
import numpy as np
import torch


def f(x: torch.Tensor, y: torch.Tensor, n):
    a = np.ones((2, 2)) @ np.ones((2, 2))
    b = n @ x
    return torch.exp((x @ y) @ y.mT)  # comment kept
"""


def test_matmul_operator_on_known_tensors_is_a_site():
    assert statuses(MATMULS) == [("torch.Tensor.__matmul__", "left-alone"), ("torch.exp", "converted"),
                                 ("torch.Tensor.__matmul__", "converted"), ("torch.Tensor.__matmul__", "converted")]  # fmt: skip
    code = translate(MATMULS).code
    assert "return pypto_exp(pypto_matmul(pypto_matmul(x, y), y.mT))  # comment kept" in code
    assert "np.ones((2, 2)) @ np.ones((2, 2))" in code and "b = n @ x" in code


def test_matmul_operator_with_an_unknown_side_is_a_site_under_assume_tensors():
    assert ("torch.Tensor.__matmul__", "converted") in statuses("def f(n, m):\n    return n @ m\n" + "import torch\n", assume_tensors=True)
    assert statuses("import torch\ndef f(n, m):\n    return n @ m\n") == []


LINEAR = """\
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, bias):
        super().__init__()
        self.q_proj = nn.Linear(200, 33, bias=bias)
        self.o_proj = nn.Linear(33, 40)

    def forward(self, x):
        return self.o_proj(self.q_proj(x))
"""


def _load(tmp_path, code, name):
    path = tmp_path / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_held_linear_reads_weight_and_bias_at_run_time():
    code = translate(LINEAR).code
    assert "return pypto_linear(pypto_linear(x, self.q_proj.weight, bias=self.q_proj.bias), self.o_proj.weight, bias=self.o_proj.bias)" in code


@pytest.mark.interpreter
@pytest.mark.parametrize("bias", [True, False])
def test_held_linear_runs_its_kernels_and_matches_the_module(tmp_path, bias):
    translated = _load(tmp_path, translate(LINEAR).code, "attention_pypto")
    original = {}
    exec(compile(LINEAR, "attention.py", "exec"), original)
    torch.manual_seed(0)
    model = translated.Attention(bias).to(torch.bfloat16)
    reference = original["Attention"](bias).to(torch.bfloat16)
    reference.load_state_dict(model.state_dict())
    x = sample(2, 7, 200, dtype=torch.bfloat16)
    ran = counting()
    with torch2pypto.interpreted(translated), torch.no_grad():
        got = model(x)
    kernels = {"linear_bias_kernel.kernel": 2} if bias else {"linear_kernel.kernel": 1, "linear_bias_kernel.kernel": 1}
    assert ran() == kernels
    with torch.no_grad():
        torch.testing.assert_close(got, reference(x))


SNIPPET = "import torch\n\n\ndef f(x: torch.Tensor, y: torch.Tensor):\n    return {}\n"


@pytest.mark.interpreter
@pytest.mark.parametrize("call", ["torch.matmul(x, y)", "torch.mm(x, y)", "torch.bmm(x, y)"])
def test_operands_torch_refuses_run_torch_and_raise_its_error(tmp_path, call):
    """Mixed dtypes (matmul does not promote), mismatched k, and ranks mm/bmm refuse: torch raises."""
    module = _load(tmp_path, translate_source(SNIPPET.format(call)).code, "refused")
    cases = [(sample(7, 200), sample(200, 33, dtype=torch.bfloat16)), (sample(7, 200), sample(100, 33))]
    cases += [(sample(7, 200), sample(2, 200, 33))] if "mm" in call else []
    for x, y in cases:
        ran = counting()
        with torch2pypto.interpreted(module), pytest.raises(RuntimeError) as got:
            module.f(x, y)
        with pytest.raises(RuntimeError) as expected:
            eval(call, {"torch": torch, "x": x, "y": y})
        assert str(got.value) == str(expected.value) and ran() == {}


@pytest.mark.interpreter
def test_gradients_flow_through_matmul_and_linear(tmp_path):
    code = SNIPPET.format("torch.nn.functional.linear(x @ y, y.mT, y[0]).sum()")
    module = _load(tmp_path, translate_source(code).code, "grads")
    x, y = sample(7, 33).requires_grad_(), sample(33, 33, seed=1).requires_grad_()
    ran = counting()
    with torch2pypto.interpreted(module):
        module.f(x, y).backward()
    assert ran() == {"matmul_kernel.kernel": 1, "linear_bias_kernel.kernel": 1, "sum_kernel.kernel": 1}
    got = x.grad, y.grad
    x.grad = y.grad = None
    (torch.nn.functional.linear(x @ y, y.mT, y[0]).sum()).backward()
    torch.testing.assert_close(got, (x.grad, y.grad), rtol=1e-4, atol=1e-4)


def test_verify_samples_matmul_operands_with_matching_k():
    for call, names in [("torch.matmul(x, y)", ("input", "other")), ("torch.nn.functional.linear(x, y, w)", ("input", "weight", "bias"))]:
        translation = translate_source(SNIPPET.format(call).replace("y: torch.Tensor", "y: torch.Tensor, w: torch.Tensor"))
        entry = load_table().by_api[translation.conversions[0].record.api]
        cases = verify.cases(translation.conversions[0], "0")
        assert len(cases) == 3 * len(entry.sample.shapes)
        for case in cases:
            args = list(case.args) + list(case.kwargs.values())
            torch_call = eval(call.replace("(x, y, w)", "(*args)").replace("(x, y)", "(*args)"), {"torch": torch, "args": args})
            assert torch_call.dtype == args[0].dtype  # torch takes them: k matches


def test_cube_tiles_obey_the_l0_l1_rules_for_every_k_n_and_row_tile():
    """kernel-rules §4: 0 < L0 <= L1, L1 % L0 == 0 (a's and b's L1 k tiles alike, neither past
    k), 16-element aligned k and n tiles, within L0A/L0B/L0C/L1; rows per tile a power of two
    from 16 to 128."""
    import pypto

    from torch2pypto.rules.templates import CUBE_TILES

    namespace = {"pypto": pypto}
    exec(CUBE_TILES.source, namespace)
    tiles, rows_for = namespace["_cube_tiles"], namespace["_cube_rows"]
    assert [rows_for(m) for m in (1, 16, 17, 100, 128, 2048)] == [16, 16, 32, 128, 128, 128]
    for dtype, size in ((pypto.DT_FP32, 4), (pypto.DT_BF16, 2)):
        for rows, k, n in [(r, k, n) for r in (16, 32, 64, 128) for k in range(16, 4200, 48) for n in (16, 48, 112, 272, 11008)]:
            (k0, ka, kb), (n0, n1) = tiles(k, n, dtype, rows)
            assert all(0 < k0 <= k1 <= max(k0, k) and k1 % k0 == 0 for k1 in (ka, kb)) and k0 % 16 == 0
            assert 0 < n0 <= n1 and n1 % n0 == 0 == n0 % 16
            assert rows * k0 * size <= 64 * 1024 and k0 * n0 * size <= 64 * 1024 and rows * n0 * 4 <= 128 * 1024
            assert (rows * ka + n1 * kb) * size <= 512 * 1024


# ---- _cube_takes: the operands the cube kernel takes (runtime/cube.py)


def test_cube_takes_one_dtype_on_the_kernel_path_of_a_matching_k(launcher):
    a, b = torch.randn(2, 3, 4), torch.randn(4, 5)
    assert cube._cube_takes(a, b) and cube._cube_takes(a, b, torch.randn(5))
    assert not cube._cube_takes(a, b.half())  # torch refuses mixed dtypes
    assert not cube._cube_takes(a, torch.randn(3, 5))  # k mismatched: torch raises
    assert not cube._cube_takes(a, b, torch.randn(2, 5))  # a bias other than one value per column
    assert not cube._cube_takes(a.double(), b.double())
    assert cube._cube_takes(a, torch.randn(5, 4), transposed=True)  # linear's weight [n, k]
    assert not cube._cube_takes(a, torch.randn(1, 5, 4), transposed=True)


def test_cube_takes_equal_batches_of_the_rank_and_rows_up_to_max_dim(launcher):
    assert cube._cube_takes(torch.randn(2, 3, 4), torch.randn(2, 4, 5), rank=3)
    assert not cube._cube_takes(torch.randn(2, 3, 4), torch.randn(1, 4, 5), rank=3)  # bmm does not broadcast
    assert cube._cube_takes(torch.randn(2, 3, 4), torch.randn(1, 4, 5))  # matmul does
    assert not cube._cube_takes(torch.randn(2, 3, 4), torch.randn(3, 4, 5))
    k = cube_rules.MAX_DIM
    assert cube._cube_takes(torch.randn(1, k), torch.randn(k, 1))
    assert not cube._cube_takes(torch.randn(1, k + 1), torch.randn(k + 1, 1))
    assert cube._cube_takes(torch.randn(1, 2), torch.randn(k + 1, 2), transposed=True)  # a vocab-wide weight's n


def test_cube_takes_nothing_off_the_kernel_path():
    assert not cube._cube_takes(torch.randn(3, 4), torch.randn(4, 5))
