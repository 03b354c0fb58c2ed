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
