"""F.interpolate on its kernel (each image's cols, then rows, weighted sums of the points
pypto.index_select picks) beyond the table's examples: every mode and align_corners, size= and
scale_factor=, odd and non-square images up and down, 3-D and 4-D inputs, FP32/FP16/BF16, a
gradient, the taps bit for bit against torch's formulas, and the calls that run torch."""

import pytest
import torch

import torch2pypto
from helpers import load, sample, translate
from torch2pypto.runtime.resample import _resampling_taps
from torch2pypto.translator.verification.interpreter import counting

pytestmark = pytest.mark.interpreter

SOURCE = """\
import torch
import torch.nn.functional as F


def resize(x: torch.Tensor, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute=None, antialias=False):
    return F.interpolate(x, size, scale_factor, mode, align_corners, recompute, antialias)
"""
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# |ours - torch's| within an ulp of the input's largest value in the output dtype (a few in FP32):
# both sum in FP32 in orders that differ (torch's cubic taps up to 1.1 of either sign), torch's FP16
# and BF16 in part in their dtype
TOLERANCE = {torch.float32: 2**-21, torch.float16: 2**-10, torch.bfloat16: 2**-7}


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    translation = translate(SOURCE)
    assert {r.status for r in translation.records} == {"converted"}, translation.records
    return load(tmp_path_factory.mktemp("resample") / "resample_pypto.py", translation.code)


def assert_close(got, expected, x):
    tolerance = TOLERANCE[x.dtype]
    torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance * x.abs().max().item())


def resized(module, x, **kwargs):
    ran = counting()
    with torch2pypto.interpreted(module):
        got = module.resize(x, **kwargs)
    return got, ran()


CASES = [
    ((2, 3, 5, 7), dict(size=(9, 12), mode="bilinear", align_corners=False)),
    ((1, 4, 13, 11), dict(size=(6, 4), mode="bilinear", align_corners=True)),
    ((1, 2, 5, 7), dict(scale_factor=(1.5, 0.7), mode="bilinear")),
    ((1, 2, 5, 7), dict(scale_factor=2, mode="bilinear", recompute=True)),
    ((1, 3, 7, 7), dict(size=(16, 16), mode="bicubic", align_corners=False)),
    ((2, 2, 6, 9), dict(scale_factor=(1.3, 2.1), mode="bicubic", align_corners=True)),
    ((1, 2, 17, 15), dict(size=(5, 8), mode="bicubic", align_corners=False)),
    ((2, 3, 5, 7), dict(scale_factor=2, mode="nearest")),
    ((2, 3, 5, 7), dict(size=(3, 10), mode="nearest")),
    ((1, 2, 9, 6), dict(scale_factor=(0.6, 1.7), mode="nearest-exact")),
    ((2, 3, 9, 7), dict(size=(4, 3), mode="area")),
    ((2, 3, 9), dict(size=20, mode="linear", align_corners=False)),
    ((3, 2, 11), dict(scale_factor=0.5, mode="linear", align_corners=True)),
    ((2, 3, 9), dict(size=5, mode="nearest")),
    ((1, 64, 24, 24), dict(size=(37, 37), mode="bicubic", align_corners=False)),
    ((1, 2, 37, 37), dict(size=(100, 120), mode="bilinear", align_corners=False)),
]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, kwargs", CASES, ids=[f"{s}-{k}" for s, k in CASES])
def test_the_resampling_is_torchs(module, shape, kwargs, dtype):
    """One launch; torch's shape and dtype, its values within an ulp (:data:`TOLERANCE`; nearest
    ones exactly)."""
    x = (sample(*shape) * 4).to(dtype)
    got, ran = resized(module, x, **kwargs)
    assert ran == {"interpolate_kernel.kernel": 1}, ran
    expected = torch.nn.functional.interpolate(x, **{"recompute_scale_factor" if k == "recompute" else k: v for k, v in kwargs.items()})
    assert got.dtype == expected.dtype and got.shape == expected.shape and got.is_contiguous()
    if kwargs["mode"].startswith("nearest"):
        assert torch.equal(got, expected)
    else:
        assert_close(got, expected, x)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialiasing_fp32(module, mode):
    x = sample(2, 3, 17, 15)
    got, ran = resized(module, x, size=(8, 6), mode=mode, antialias=True)
    assert ran == {"interpolate_kernel.kernel": 1}, ran
    assert_close(got, torch.nn.functional.interpolate(x, size=(8, 6), mode=mode, antialias=True), x)


def _scale(size, out, scale_factor, align_corners):
    """torch's FP32 scale (area_pixel_compute_scale): (in - 1) / (out - 1) with align_corners,
    else 1 / scale_factor (in double) where one is given, else in / out."""
    if align_corners:
        return torch.tensor(float(size - 1)) / (out - 1)
    return torch.tensor(1 / scale_factor) if scale_factor else torch.tensor(float(size)) / out


def _index_and_lambda(j, scale, size, align_corners, cubic):
    """torch's source index and its fraction, in FP32 (area_pixel_compute_source_index): linear
    clamps both (guard_index_and_lambda), cubic neither (its taps are clamped)."""
    scale = scale.double()  # scale * (j + 0.5) - 0.5 rounded once, as torch's fused multiply-add does
    src = (scale * j if align_corners else scale * (j + 0.5) - 0.5).float()
    if cubic:
        return int(torch.floor(src)), src - torch.floor(src)
    src = src if align_corners else src.clamp(min=0)
    index = min(max(int(torch.floor(src)), 0), size - 1)
    return index, (src - index).clamp(0, 1)


@pytest.mark.parametrize("size, out, scale_factor, align_corners", [
    (5, 9, None, False), (7, 4, None, True), (7, 4, None, False), (5, 7, 1.5, False), (24, 37, None, False), (13, 6, None, True),
])  # fmt: skip
def test_linear_and_cubic_taps_are_torchs_formulas_bit_for_bit(size, out, scale_factor, align_corners):
    """The taps the identity gives are torch's indices and FP32 weights: linear (1 - f, f) at
    the source coordinate scale * (j + 0.5) - 0.5 clamped at 0 (align_corners: scale * j), bit
    for bit; bicubic A = -0.75 on 4 taps clamped to the border, summed where they meet."""
    scale = _scale(size, out, scale_factor, align_corners)
    a = -0.75
    near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1  # noqa: E731
    far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a  # noqa: E731
    for mode in ("bilinear", "bicubic"):
        index, weights, taps = _resampling_taps(size, out, scale_factor, mode, align_corners, False, torch.device("cpu"), False)
        index = index.view(taps, out)
        for j in range(out):
            i0, f = _index_and_lambda(j, scale, size, align_corners, mode == "bicubic")
            if mode == "bilinear":
                pairs = [(i0, 1 - f), (min(i0 + 1, size - 1), f)]
            else:
                pairs = [(min(max(i0 - 1 + k, 0), size - 1), w) for k, w in enumerate((far(f + 1), near(f), near(1 - f), far((1 - f) + 1)))]
            want = {}
            for i, w in pairs:
                want[i] = want[i] + w if i in want else w
            got = {int(i): w for i, w in zip(index[:, j], weights[:, j]) if w != 0}
            assert got.keys() == {i for i, w in want.items() if w != 0}, (mode, j)
            for i in got:  # torch's cubic kernel rounds its polynomials otherwise (vectorized): within a few ulps of 3
                assert torch.equal(got[i], want[i]) if mode == "bilinear" else abs(got[i] - want[i]) <= 2**-20, (mode, j, got, want)


def test_nearest_taps_are_torchs_floor_rule():
    for size, out in ((5, 9), (7, 3), (24, 37)):
        index, weights, taps = _resampling_taps(size, out, None, "nearest", None, False, torch.device("cpu"), False)
        scale = _scale(size, out, None, False)
        assert taps == 1 and torch.equal(weights, torch.ones(1, out))
        assert index.tolist() == [min(int(torch.floor(j * scale)), size - 1) for j in range(out)]


def test_a_gradient(module):
    """Under grad mode the kernel launches and backward is torch's."""
    x = sample(1, 3, 5, 7)
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, ran = resized(module, ours, size=(9, 4), mode="bicubic", align_corners=False)
    assert ran == {"interpolate_kernel.kernel": 1}, ran
    expected = torch.nn.functional.interpolate(theirs, size=(9, 4), mode="bicubic", align_corners=False)
    weights = sample(1, 3, 9, 4, seed=1)
    (got * weights).sum().backward()
    (expected * weights).sum().backward()
    assert_close(got, expected, x)
    assert torch.equal(ours.grad, theirs.grad)


def test_the_calls_that_run_torch(module):
    """5-D inputs, inputs that are not contiguous, images over the tile budget, integers: torch,
    no launch; FP16 antialiasing, size with scale_factor and size with recompute_scale_factor
    raise as torch does."""
    x = sample(1, 2, 5, 7)
    cases = [
        (sample(1, 2, 3, 4, 5), dict(size=(4, 5, 6), mode="trilinear")),
        (x.transpose(2, 3), dict(size=(9, 4), mode="bilinear")),
        (sample(1, 1, 100, 100), dict(size=(200, 200), mode="bilinear")),
        ((x * 10).to(torch.uint8), dict(scale_factor=2, mode="nearest")),
    ]
    for t, kwargs in cases:
        got, ran = resized(module, t, **kwargs)
        assert ran == {} and torch.equal(got, torch.nn.functional.interpolate(t, **kwargs)), kwargs
    for t, kwargs, error in [(x.half(), dict(size=(3, 3), mode="bilinear", antialias=True), NotImplementedError),
                             (x, dict(size=(3, 3), scale_factor=2.0), ValueError),
                             (x, dict(size=(3, 3), recompute=True), ValueError)]:
        with pytest.raises(error), torch2pypto.interpreted(module):
            module.resize(t, **kwargs)
