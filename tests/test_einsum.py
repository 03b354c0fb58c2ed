"""torch.einsum as one cube matmul, on the zoo's own equations: each launches one kernel, matches
torch (values, shape, gradient), and reads operands in place where their layout is a matmul's."""

import math

import pytest
import torch

import torch2pypto
from helpers import load, sample, translate
from torch2pypto.runtime import contraction
from torch2pypto.translator.verification import interpreter
from torch2pypto.translator.verification.hostops import host_ops

# (equation, a's shape, b's shape) from transformers' models
ZOO = [
    ("bnqd,bnkd->bnqk", (2, 3, 7, 40), (2, 3, 9, 40)),  # scores: q @ k.mT
    ("ibh,hnd->ibnd", (7, 2, 48), (48, 3, 16)),  # xlnet's projections
    ("bhwc,wkc->bhwk", (2, 5, 6, 24), (6, 6, 24)),  # sam's relative positions, a batch of w
    ("bclhn,bcshn->bclsh", (2, 3, 5, 2, 16), (2, 3, 5, 2, 16)),  # mamba2's chunked scan
    ("bd,dn->bn", (130, 37), (37, 20)),  # two row tiles
    ("...pd,...qd->...pq", (2, 3, 7, 40), (3, 9, 40)),  # a broadcast ellipsis
    ("bsj,j->bs", (2, 7, 37), (37,)),  # a matrix-vector product
    ("bij,bjk->bik", (1, 5, 3), (4, 3, 6)),  # a batch of one that broadcasts
]

SOURCE = '''\
import torch


def contract(equation: str, a: torch.Tensor, b: torch.Tensor):
    return torch.einsum(equation, a, b)
'''


def program(equation):
    return SOURCE.replace("torch.einsum(equation, a, b)", f"torch.einsum({equation!r}, a, b)")


@pytest.mark.parametrize("equation, a_shape, b_shape", ZOO, ids=[e for e, _, _ in ZOO])
def test_a_zoo_equation_converts(equation, a_shape, b_shape):
    assert [r.status for r in translate(program(equation)).records] == ["converted"]


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("equation, a_shape, b_shape", ZOO, ids=[e for e, _, _ in ZOO])
def test_a_zoo_equation_is_one_matmul_with_torchs_result_and_gradient(tmp_path, equation, a_shape, b_shape, dtype):
    translated = load(tmp_path / "contract_pypto.py", translate(program(equation)).code)
    a, b = sample(*a_shape, dtype=dtype).requires_grad_(), sample(*b_shape, dtype=dtype, seed=1).requires_grad_()
    a_ref, b_ref = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    launched = interpreter.counting()
    with torch2pypto.interpreted(translated):
        got = translated.contract(equation, a, b)
    assert sum(launched().values()) == 1
    expected = torch.einsum(equation, a_ref, b_ref)
    tolerance = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(got, expected, **tolerance)
    got.sum().backward(), expected.sum().backward()
    torch.testing.assert_close(a.grad, a_ref.grad, **tolerance)
    torch.testing.assert_close(b.grad, b_ref.grad, **tolerance)


@pytest.mark.interpreter
def test_operands_in_a_matmuls_layout_are_read_in_place(tmp_path):
    equation = "bnqd,bnkd->bnqk"
    translated = load(tmp_path / "contract_pypto.py", translate(program(equation)).code)
    q, k = sample(2, 3, 7, 40), sample(2, 3, 9, 40, seed=1)
    with torch.no_grad(), torch2pypto.interpreted(translated), host_ops(translated) as ops:
        translated.contract(equation, q, k)
    assert dict(ops) == {}  # k is read transposed by the cube, q as its rows


@pytest.mark.parametrize("equation, reason", [
    ("bij,bjk->bi", "summed within one operand"),
    ("bii,bij->bij", "diagonal"),
    ("bi...,bij->bij", "ellipsis"),
])  # fmt: skip
def test_equations_of_no_single_matmul_stay_torch_with_the_reason(equation, reason):
    (record,) = translate(program(equation)).records
    assert record.status == "unsupported" and reason in record.reason


def test_an_equation_known_at_run_time_only_stays_torch():
    (record,) = translate(SOURCE).records
    assert record.status == "unsupported" and "parsed when translating" in record.reason


# ---- _einsum_plan: an equation as permutes and one matmul (runtime/contraction.py)


@pytest.mark.parametrize("equation, a_shape, b_shape", [
    ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)), ("ij,kj->ik", (3, 4), (5, 4)), ("bhqd,bhkd->bhqk", (2, 3, 4, 5), (2, 3, 6, 5)),
    ("...ij,...jk->...ik", (2, 3, 4, 5), (3, 5, 6)), ("ij,jk", (3, 4), (4, 5)), ("bij,jk->kib", (2, 3, 4), (4, 5)),
], ids=str)
def test_einsum_plan_is_permutes_and_one_matmul(equation, a_shape, b_shape):
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    a_order, b_order, ell_a, ell_b, batch, m, k, out_order = contraction._einsum_plan(equation, a.dim(), b.dim())
    left, right = a.permute(a_order), b.permute(b_order)
    lead_a, lead_b = ell_a + batch, ell_b + batch
    product = left.reshape(*left.shape[:lead_a], -1, math.prod(left.shape[lead_a + m:])) @ right.reshape(
        *right.shape[:lead_b], math.prod(right.shape[lead_b:lead_b + k]), -1)
    m_shape, n_shape = left.shape[lead_a:lead_a + m], right.shape[lead_b + k:]
    batch_shape = torch.broadcast_shapes(left.shape[:lead_a], right.shape[:lead_b])
    out = product.reshape(*batch_shape, *m_shape, *n_shape).permute(out_order)
    torch.testing.assert_close(out, torch.einsum(equation, a, b))


@pytest.mark.parametrize("equation, why", [
    ("ij->ji", "one or of more than two operands"), ("ij,jk,kl->il", "one or of more than two operands"),
    ("i...j,jk->ik", "an ellipsis that does not lead"), ("ii,ij->ij", "a diagonal"), ("ij,jk->iz", "a diagonal"),
    ("ij,kl->ik", "summed within one operand"),
])
def test_einsum_plan_says_why_an_equation_is_no_matmul(equation, why):
    assert why in contraction._einsum_plan(equation)


def test_einsum_plan_checks_the_ranks_when_given():
    assert contraction._einsum_plan("ij,jk->ik") is None  # when translating: the equation only
    assert "other ranks" in contraction._einsum_plan("ij,jk->ik", 3, 2)
    assert "other ranks" in contraction._einsum_plan("...ij,...jk->...ik", 1, 2)  # fewer dims than named
