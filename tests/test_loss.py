"""F.cross_entropy and nn.CrossEntropyLoss of class indices in kernels (rules/loss.py): each row's
logsumexp(row) - row[target] in one launch, its sum or mean over the rows not ignored in a second,
against torch, in FP32 and BF16, odd row counts, unaligned and vocab-wide rows, ignored rows (some,
all), every reduction, and torch's gradient."""

import pytest
import torch
import torch.nn.functional as F

import torch2pypto
from helpers import load, sample, translate
from torch2pypto.translator.verification import interpreter
from torch2pypto.translator.verification.hostops import host_ops

pytestmark = pytest.mark.interpreter

SOURCE = """\
import torch
import torch.nn.functional as F


def cross_entropy(x, t, reduction: str = "mean", ignore_index: int = -100):
    return F.cross_entropy(x, t, ignore_index=ignore_index, reduction=reduction)


def smoothed(x, t):
    return F.cross_entropy(x, t, label_smoothing=0.1)


def shifted(labels, fill: int = -100):
    labels = F.pad(labels, (0, 1), value=fill)
    return labels[..., 1:]


class Loss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, t):
        return self.loss(x, t)


def local(scores, labels):  # BERT's heads: a loss module held in a local name
    loss_fct = torch.nn.CrossEntropyLoss()
    return loss_fct(scores, labels)


def local_summed(x, t):
    loss_fct = torch.nn.CrossEntropyLoss(ignore_index=0, reduction="sum")
    return loss_fct(x, t)


class Summed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = torch.nn.CrossEntropyLoss(ignore_index=0, reduction="sum")

    def forward(self, x, t):
        return self.loss(x, t)
"""


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    translation = translate(SOURCE)
    assert {r.status for r in translation.records} == {"converted"}, translation.records
    return load(tmp_path_factory.mktemp("loss") / "translated.py", translation.code)


def targets(rows, classes, ignored=(), seed=1):
    t = torch.randint(0, classes, (rows,), generator=torch.Generator().manual_seed(seed))
    t[list(ignored)] = -100
    return t


def launched(module, name, *args, launches):
    """``module.name(*args)`` on the interpreter, which launches ``launches`` kernels."""
    count = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(module):
        got = getattr(module, name)(*args)
    assert sum(count().values()) == launches, dict(count())
    return got


CASES = [(7, 37, (1, 4)), (13, 1000, (0,)), (13, 37, ()), (7, 37, tuple(range(7)))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("rows, classes, ignored", CASES, ids=["some-ignored", "vocab-1000", "none-ignored", "all-ignored"])
def test_cross_entropy(translated, dtype, reduction, rows, classes, ignored):
    x, t = sample(rows, classes, dtype=dtype), targets(rows, classes, ignored)
    got = launched(translated, "cross_entropy", x, t, reduction, launches=1 if reduction == "none" else 2)
    expected = F.cross_entropy(x, t, reduction=reduction)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=tolerance, equal_nan=True)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_the_wrapper_runs_no_torch_op(translated, reduction):
    """Logits of odd rows and an unaligned vocab and int64 targets are read in place: no host op."""
    x, t = sample(13, 37), targets(13, 37, (2,))
    with torch.no_grad(), torch2pypto.interpreted(translated), host_ops(translated) as ops:
        got = translated.cross_entropy(x, t, reduction)
    assert dict(ops) == {}
    torch.testing.assert_close(got, F.cross_entropy(x, t, reduction=reduction))


def test_a_target_that_is_no_class_gives_nan(translated):
    """torch raises on it; the kernel cannot, and marks the row NaN rather than a wrong loss."""
    x, t = sample(7, 37), targets(7, 37)
    t[3] = 37
    got = launched(translated, "cross_entropy", x, t, "none", launches=1)
    assert got[3].isnan() and not got[[0, 1, 2, 4, 5, 6]].isnan().any()


def test_other_ignore_index(translated):
    x, t = sample(7, 37), targets(7, 37)
    t[2] = 5
    got = launched(translated, "cross_entropy", x, t, "mean", 5, launches=2)
    torch.testing.assert_close(got, F.cross_entropy(x, t, ignore_index=5))


def test_module(translated):
    x, t = sample(13, 37), targets(13, 37, (3,))
    count = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(translated):
        got = translated.Loss()(x, t)
    assert sum(count().values()) == 2, dict(count())
    torch.testing.assert_close(got, torch.nn.CrossEntropyLoss()(x, t))


def test_module_with_arguments(translated):
    x, t = sample(13, 37), targets(13, 37)
    t[:4] = 0
    count = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(translated):
        got = translated.Summed()(x, t)
    assert sum(count().values()) == 2, dict(count())
    torch.testing.assert_close(got, torch.nn.CrossEntropyLoss(ignore_index=0, reduction="sum")(x, t))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_a_module_in_a_local_name(translated, dtype):
    scores, labels = sample(15, 37, dtype=dtype), targets(15, 37, (4,))
    got = launched(translated, "local", scores, labels, launches=2)
    torch.testing.assert_close(got, torch.nn.CrossEntropyLoss()(scores, labels))
    x, t = sample(13, 37, dtype=dtype), targets(13, 37)
    t[:4] = 0
    got = launched(translated, "local_summed", x, t, launches=2)
    torch.testing.assert_close(got, torch.nn.CrossEntropyLoss(ignore_index=0, reduction="sum")(x, t))


def test_causal_labels_shift_in_a_kernel(translated):
    """transformers' ForCausalLMLoss pads int64 labels with ignore_index: pypto moves int64 data, the
    fill passes through FP32 (exact to 2^24; a larger one runs torch)."""
    labels = targets(2 * 7, 1000).reshape(2, 7)
    got = launched(translated, "shifted", labels, launches=1)
    assert torch.equal(got, F.pad(labels, (0, 1), value=-100)[..., 1:])
    assert torch.equal(launched(translated, "shifted", labels, 2**25, launches=0), F.pad(labels, (0, 1), value=2**25)[..., 1:])


def test_at_vocab_width(translated):
    x, t = sample(2, 151936), targets(2, 151936)
    got = launched(translated, "cross_entropy", x, t, "mean", launches=2)
    torch.testing.assert_close(got, F.cross_entropy(x, t), atol=1e-5, rtol=1e-5)


def test_label_smoothing_runs_torch(translated):
    x, t = sample(7, 37), targets(7, 37)
    got = launched(translated, "smoothed", x, t, launches=0)
    torch.testing.assert_close(got, F.cross_entropy(x, t, label_smoothing=0.1))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradient(translated, reduction):
    x, t = sample(7, 37), targets(7, 37, (2,))
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    count = interpreter.counting()
    with torch2pypto.interpreted(translated):
        got = translated.cross_entropy(ours, t, reduction)
    assert sum(count().values()) == (1 if reduction == "none" else 2), dict(count())
    expected = F.cross_entropy(theirs, t, reduction=reduction)
    torch.testing.assert_close(got, expected)
    weights = torch.randn(expected.shape, generator=torch.Generator().manual_seed(3))
    (got * weights).sum().backward()
    (expected * weights).sum().backward()
    torch.testing.assert_close(ours.grad, theirs.grad)


ELEMENTWISE = """\
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn import BCEWithLogitsLoss, MSELoss


def mse(x, y, reduction: str = "mean"):
    return F.mse_loss(x, y, reduction=reduction)


def bce(x, y, reduction: str = "mean"):
    return F.binary_cross_entropy_with_logits(x, y, reduction=reduction)


def bce_weighted(x, y, w):
    return F.binary_cross_entropy_with_logits(x, y, pos_weight=w)


def regression(logits, labels):  # transformers' heads: a loss module held in a local name
    loss_fct = MSELoss()
    return loss_fct(logits.squeeze(), labels.squeeze())


def multi_label(logits, labels):
    loss_fct = BCEWithLogitsLoss(reduction="sum")
    return loss_fct(logits, labels)


class Held(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = nn.BCEWithLogitsLoss()

    def forward(self, x, y):
        return self.loss(x, y)


class HeldSquared(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = nn.MSELoss(reduction="none")

    def forward(self, x, y):
        return self.loss(x, y)
"""


@pytest.fixture(scope="module")
def elementwise(tmp_path_factory):
    translation = translate(ELEMENTWISE)
    assert {r.status for r in translation.records} == {"converted", "host-side"}, translation.records  # squeeze: a view
    return load(tmp_path_factory.mktemp("losses") / "translated.py", translation.code)


def pair(rows, cols, dtype, seed=1):
    """Logits or predictions and targets: probabilities in [0, 1] (BCE's; any values for MSE)."""
    x = (torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * 4).to(dtype)
    return x, torch.rand(rows, cols, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)


LOSSES = {"mse": F.mse_loss, "bce": F.binary_cross_entropy_with_logits}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(7, 37), (13, 1000), (37,), (3, 5, 7)], ids=str)
@pytest.mark.parametrize("loss", LOSSES)
def test_elementwise_loss(elementwise, loss, dtype, reduction, shape):
    x, y = pair(int(torch.tensor(shape[:-1]).prod()), shape[-1], dtype)
    x, y = x.reshape(shape), y.reshape(shape)
    got = launched(elementwise, loss, x, y, reduction, launches=1 if reduction == "none" else 2)
    expected = LOSSES[loss](x, y, reduction=reduction)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if loss == "bce" and dtype == torch.bfloat16:
        # torch's BF16 rounds each of its 7 steps to BF16 ((1 - y) * x cancels against max(-x, 0));
        # the kernel rounds once, so it is held to torch's FP32 result in BF16
        expected = LOSSES[loss](x.float(), y.float(), reduction=reduction).to(dtype)
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=tolerance)


def test_bce_of_large_logits(elementwise):
    """log1p(exp(-|x|)) keeps |x| of 100 finite, and exact where exp(-|x|) is tiny."""
    x = torch.tensor([[100.0, -100.0, 30.0, -30.0, 0.0, 1e-3, -17.0]])
    y = torch.tensor([[1.0, 0.0, 0.0, 1.0, 0.5, 1.0, 0.25]])
    got = launched(elementwise, "bce", x, y, "none", launches=1)
    torch.testing.assert_close(got, F.binary_cross_entropy_with_logits(x, y, reduction="none"), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("loss", LOSSES)
def test_elementwise_wrapper_runs_no_torch_op(elementwise, loss):
    x, y = pair(13, 37, torch.float32)
    with torch.no_grad(), torch2pypto.interpreted(elementwise), host_ops(elementwise) as ops:
        got = getattr(elementwise, loss)(x, y)
    assert dict(ops) == {}
    torch.testing.assert_close(got, LOSSES[loss](x, y))


def test_elementwise_modules(elementwise):
    logits, labels = pair(15, 1, torch.bfloat16)
    got = launched(elementwise, "regression", logits, labels, launches=2)
    torch.testing.assert_close(got, F.mse_loss(logits.squeeze(), labels.squeeze()), atol=2e-2, rtol=2e-2)
    x, y = pair(13, 37, torch.float32)
    got = launched(elementwise, "multi_label", x, y, launches=2)
    torch.testing.assert_close(got, F.binary_cross_entropy_with_logits(x, y, reduction="sum"))
    count = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(elementwise):
        got = elementwise.Held()(x, y)
    assert sum(count().values()) == 2, dict(count())
    torch.testing.assert_close(got, F.binary_cross_entropy_with_logits(x, y))
    count = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(elementwise):
        got = elementwise.HeldSquared()(x, y)
    assert sum(count().values()) == 1, dict(count())
    torch.testing.assert_close(got, F.mse_loss(x, y, reduction="none"))


def test_what_the_kernels_do_not_take_runs_torch(elementwise):
    x, y = pair(7, 37, torch.float32)
    w = torch.rand(37) + 0.5
    got = launched(elementwise, "bce_weighted", x, y, w, launches=0)
    torch.testing.assert_close(got, F.binary_cross_entropy_with_logits(x, y, pos_weight=w))
    with pytest.warns(UserWarning):  # torch broadcasts a target of another shape, and warns
        got = launched(elementwise, "mse", x, y[:1], launches=0)
    torch.testing.assert_close(got, F.mse_loss(x, y[:1].expand_as(x)))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("loss", LOSSES)
def test_elementwise_gradient(elementwise, loss, reduction):
    x, y = pair(7, 37, torch.float32)
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    target_ours, target_theirs = y.clone().requires_grad_(), y.clone().requires_grad_()
    count = interpreter.counting()
    with torch2pypto.interpreted(elementwise):
        got = getattr(elementwise, loss)(ours, target_ours, reduction)
    assert sum(count().values()) == (1 if reduction == "none" else 2), dict(count())
    expected = LOSSES[loss](theirs, target_theirs, reduction=reduction)
    torch.testing.assert_close(got, expected)
    weights = torch.randn(expected.shape, generator=torch.Generator().manual_seed(3))
    (got * weights).sum().backward()
    (expected * weights).sum().backward()
    torch.testing.assert_close(ours.grad, theirs.grad)
    torch.testing.assert_close(target_ours.grad, target_theirs.grad)
