"""The conv family beyond the table's examples: which module forms convert (decided from their
constructions), an input read in place (channels-last: transposed) or gathered once (patches),
the depthwise conv1d's kernel (Mamba's causal conv, conformers' depthwise conv), the strided and
dilated kernels of shifted reads (downsampling), and nn.ConvNd's padding_mode kept on the torch path."""

import pytest
import torch

import torch2pypto
from helpers import load, sample, translate
from torch2pypto.rules import cube as cube_rules
from torch2pypto.runtime import conv
from torch2pypto.translator.verification import interpreter
from torch2pypto.translator.verification.hostops import host_ops

MODULES = """\
import torch
from torch import nn


class M(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.pointwise = nn.Conv1d(6, 7, kernel_size=1)
        self.patches = nn.Conv2d(3, 20, kernel_size=4, stride=4)
        self.patches_of_config = nn.Conv2d(3, 20, kernel_size=config.patch, stride=config.patch)
        self.padded = nn.Conv1d(6, 6, kernel_size=3, padding=1)
        self.overlapping = nn.Conv1d(6, 6, kernel_size=3)
        self.depthwise = nn.Conv1d(6, 6, kernel_size=4, groups=6, padding=3)
        self.reflected = nn.Conv1d(6, 6, kernel_size=3, padding=config.pad, padding_mode="reflect")
        self.dilated = nn.Conv2d(3, 3, kernel_size=2, stride=2, dilation=2)
        self.of_config = nn.Conv1d(6, 6, kernel_size=config.kernel, padding=config.pad, padding_mode=config.mode)
        self.image = nn.Conv2d(3, 5, kernel_size=3, padding=config.pad)
        self.downsampled = nn.Conv2d(3, 5, kernel_size=3, stride=2, padding=1)

    def forward(self, x, image):
        return (self.pointwise(x), self.patches(image), self.patches_of_config(image), self.of_config(x), self.padded(x),
                self.overlapping(x), self.depthwise(x), self.reflected(x), self.dilated(image), self.image(image),
                self.downsampled(image))
"""


def test_module_forms_convert_or_stay_torch_by_their_construction():
    records = translate(MODULES).records
    got = [(r.status, r.reason or "") for r in records]
    # padded, overlapping and depthwise conv1d forms convert (the shifted reads), a padding known at run time too;
    # so does a padded conv2d (nn.Conv2d passes its own padding: the wrapper reads it at run time), strided and dilated ones
    assert [s for s, _ in got] == ["converted"] * 7 + ["unsupported"] + ["converted"] * 3, got
    assert got[7][1].startswith("padding_mode= other than zeros")
    code = translate(MODULES).code
    assert code.count("pypto_conv2d_strided(image, self.dilated.weight") == code.count("pypto_conv2d_strided(image, self.downsampled.weight") == 1
    assert "pypto_conv2d(image, self.patches.weight" in code  # a patch embedding: the contraction's wrapper


GROUPED = """\
import torch
from torch import nn


class M(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.mamba = nn.Conv1d(in_channels=config.size, out_channels=config.size, bias=config.use_bias,
                               kernel_size=config.kernel, groups=config.size, padding=config.kernel - 1)
        self.conformer = nn.Conv1d(config.size, config.size, config.kernel, stride=1, padding=0, groups=config.size)
        self.same = nn.Conv1d(8, 8, 4, padding="same", groups=8, bias=False)
        self.positional = nn.Conv1d(config.size, config.size, kernel_size=5, padding=2, groups=config.groups)
        self.grouped = nn.Conv1d(16, 16, 3, groups=8)
        self.dilated = nn.Conv1d(8, 8, 3, dilation=2, groups=8)
        self.wide = nn.Conv1d(8, 8, 3, padding=3, groups=8)
        self.strided = nn.Conv1d(8, 8, 3, stride=2, groups=8)
        self.image = nn.Conv2d(8, 8, 3, padding=1, groups=8)

    def forward(self, x, y, image):
        return (self.mamba(x)[..., : x.shape[-1]], self.conformer(x), self.same(y), self.positional(x), self.grouped(x),
                self.dilated(y), self.wide(y), self.strided(y), self.image(image))
"""


def test_a_grouped_conv1d_converts_where_its_construction_shows_one_filter_per_channel():
    got = [(r.status, r.reason or "") for r in translate(GROUPED).records]
    assert [s for s, _ in got[:3]] == ["converted"] * 3, got
    reasons = [reason for status, reason in got[3:] if status == "unsupported"]
    assert len(reasons) == 3 and got[8][0] == "converted", got  # the depthwise conv2d, the dilated and strided ones too
    assert reasons[0].startswith("groups=config.groups of in_channels=config.size: a conv1d other than a contraction runs")
    assert reasons[1].startswith("groups=8 of in_channels=16:")
    assert reasons[2].startswith("padding=3 of kernel_size=3: a conv1d other than a contraction runs on the kernels of "
                                 "shifted reads only with zero padding of at most dilation * (kernel_size - 1)")


def test_a_conv2d_construction_pads_each_dim_at_most_its_kernel_minus_1():
    code = ("import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.a = nn.Conv2d(3, 4, (3, 1), padding=1)\n        self.b = nn.Conv2d(3, 4, 3, padding=(1, 3))\n"
            "        self.c = nn.Conv2d(3, 4, 3, padding=(1, 2))\n        self.d = nn.Conv2d(3, 4, (1, 7), padding=(0, 3))\n\n"
            "    def forward(self, x):\n        return self.a(x), self.b(x), self.c(x), self.d(x)\n")
    a, b, c, d = translate(code).records
    assert a.reason.startswith("padding=1 of kernel_size=(3, 1): a conv2d other than a contraction")  # 1 zero column of 1 tap
    assert b.reason.startswith("padding=(1, 3) of kernel_size=3:")
    assert c.status == d.status == "converted"
    code = code.replace("(3, 1), padding=1)", "(3, 1), padding=1, dilation=(1, 2))").replace("3, padding=(1, 3))", "3, padding=(1, 3), dilation=2)")
    a, b, _, _ = translate(code).records
    assert a.reason.startswith("padding=1 of kernel_size=(3, 1) and dilation=(1, 2):")  # still no tap in the zero column
    assert b.status == "converted"  # dilated: 3 zeros reach 4 columns


PROGRAM = """\
import torch
import torch.nn.functional as F


def conv1d(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor):
    return F.conv1d(x, w, b)


def patches(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, stride):
    return F.conv2d(x, w, b, stride=stride)


def depthwise(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, padding):
    return F.conv1d(x, w, b, padding=padding, groups=w.shape[0])


def padded(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, padding):
    return F.conv1d(x, w, b, padding=padding)


def image(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, padding):
    return F.conv2d(x, w, b, padding=padding)


def depthwise_image(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, padding):
    # ConvNeXt's Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
    return F.conv2d(x, w, b, padding=padding, groups=w.shape[0])


def causal(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor):
    # Mamba's conv1d: kernel - 1 zeros on both sides, the sequence's own length kept
    return F.conv1d(x, w, b, padding=w.shape[-1] - 1, groups=x.shape[1])[..., : x.shape[-1]]


def strided(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, stride, padding, dilation):
    # an audio encoder's Conv1d(kernel_size=3, stride=2, padding=1), a vocoder's downsampling stride=ratio
    return F.conv1d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=1 if w.shape[1] > 1 else w.shape[0])


def strided_image(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, stride, padding, dilation):
    # ResNet's Conv2d(3, stride=2, padding=1), MobileNet's depthwise stride-2 blocks
    return F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=1 if w.shape[1] > 1 else w.shape[0])
"""


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conv")
    code = PROGRAM
    translation = translate(code)
    assert {r.status for r in translation.records} == {"converted"}, translation.records
    return load(folder / "conv_pypto.py", translation.code), load(folder / "conv.py", code)


def launched_ops(modules, name, *args, tolerance=None):
    """(launches, the aten ops run outside them) of translated ``name``, checked against torch's result."""
    translated, original = modules
    expected = getattr(original, name)(*args)
    launched = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(translated), host_ops(translated) as ops:
        got = getattr(translated, name)(*args)
    atol, rtol = tolerance or ((1e-5, 1e-5) if got.dtype == torch.float32 else (1e-2, 1.6e-2))
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
    assert got.stride() == expected.stride()  # contiguous where torch is: a slice of it (Mamba) where not
    return sum(launched().values()), dict(ops)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_pointwise_conv_reads_its_input_in_place_in_either_layout(modules, dtype):
    w, b = sample(9, 40, 1, dtype=dtype, seed=1), sample(9, dtype=dtype, seed=2)
    assert launched_ops(modules, "conv1d", sample(3, 40, 37, dtype=dtype), w, b) == (1, {})
    channels_last = sample(3, 37, 40, dtype=dtype).transpose(1, 2)  # mamba's and audio models' conv(x.transpose(1, 2))
    assert launched_ops(modules, "conv1d", channels_last, w, b) == (1, {})


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_patch_embedding_gathers_its_patches_once(modules, dtype):
    # ViT: Conv2d(3, hidden, kernel_size=patch, stride=patch); 30 x 33 pixels leave a tail torch drops
    image, w, b = sample(2, 3, 30, 33, dtype=dtype), sample(40, 3, 8, 8, dtype=dtype, seed=1), sample(40, dtype=dtype, seed=2)
    launches, ops = launched_ops(modules, "patches", image, w, b, 8)
    assert launches == 1 and ops == {"clone": 1}  # docs/host-copies.md: patches into columns


TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("images, channels, length, taps, padding", [
    (2, 5, 37, 3, 1),  # a conformer's k // 2
    (3, 7, 11, 4, "same"),  # an even kernel: the odd zero column on the right
    (1, 6, 2, 5, 2),  # a sequence shorter than the kernel: every output column an edge
])
def test_a_depthwise_conv1d_sums_shifted_reads_of_each_channel(modules, dtype, images, channels, length, taps, padding):
    x, w = sample(images, channels, length, dtype=dtype), sample(channels, 1, taps, dtype=dtype, seed=1)
    b = sample(channels, dtype=dtype, seed=2)
    assert launched_ops(modules, "depthwise", x, w, b, padding, tolerance=TOLERANCE[dtype]) == (1, {})


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mambas_causal_conv_launches_on_either_layout(modules, dtype):
    # 130 channels: three channel tiles of 64 rows per image, the last of 2 valid rows
    w, b = sample(130, 1, 4, dtype=dtype, seed=1), sample(130, dtype=dtype, seed=2)
    assert launched_ops(modules, "causal", sample(2, 130, 45, dtype=dtype), w, b, tolerance=TOLERANCE[dtype]) == (1, {})
    channels_last = sample(2, 45, 130, dtype=dtype).transpose(1, 2)  # in_proj(x).transpose(1, 2): copied first
    assert launched_ops(modules, "causal", channels_last, w, b, tolerance=TOLERANCE[dtype]) == (1, {"clone": 1})


@pytest.mark.interpreter
def test_a_depthwise_conv1d_of_no_bias_or_no_batch_launches(modules):
    w = sample(9, 1, 3, seed=1)
    assert launched_ops(modules, "depthwise", sample(9, 1100, seed=3), w, None, 2) == (1, {})  # three column tiles of 512
    assert launched_ops(modules, "depthwise", sample(2, 9, 19), w, None, 0) == (1, {})  # no edge columns


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("images, channels, length, out, taps, padding", [
    (2, 5, 37, 7, 3, 1),  # xcodec's Conv1d(kernel_size=3, padding=1)
    (3, 6, 11, 33, 4, "same"),  # three row tiles of 16 output channels
    (1, 4, 2, 9, 5, 2),  # a sequence shorter than the kernel: every output column an edge
])
def test_an_ungrouped_conv1d_adds_a_matmul_per_tap(modules, dtype, images, channels, length, out, taps, padding):
    x, w = sample(images, channels, length, dtype=dtype), sample(out, channels, taps, dtype=dtype, seed=1)
    b = sample(out, dtype=dtype, seed=2)
    launches, ops = launched_ops(modules, "padded", x, w, b, padding, tolerance=TOLERANCE[dtype])
    assert launches == 1 and ops == {"clone": 1}  # the weight's taps, made once per weight (docs/host-copies.md)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("images, channels, size, out, taps, padding", [
    (2, 5, (7, 9), 7, (3, 3), 1),  # the zoo's Conv2d(3, padding=1): odd height and width, channels no multiple of 16
    (1, 3, (6, 11), 20, (5, 5), 2),  # a padding of kernel // 2, two rows and columns at each edge
    (3, 4, (5, 8), 9, (4, 2), "same"),  # even kernels: the odd zero row and column after
    (2, 6, (4, 5), 17, (3, 3), 0),  # unpadded, two row tiles of 16 output channels: no edges
])
def test_an_ungrouped_conv2d_adds_a_matmul_per_tap_and_output_row(modules, dtype, images, channels, size, out, taps, padding):
    x, w = sample(images, channels, *size, dtype=dtype), sample(out, channels, *taps, dtype=dtype, seed=1)
    b = sample(out, dtype=dtype, seed=2) if images != 3 else None
    launches, ops = launched_ops(modules, "image", x, w, b, padding, tolerance=TOLERANCE[dtype])
    assert launches == 1 and ops == {"clone": 1}  # the weight's taps, made once per weight (docs/host-copies.md)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("images, channels, size, taps, padding", [
    (2, 5, (7, 9), (3, 3), 1),  # odd height and width
    (1, 70, (9, 10), (7, 7), 3),  # ConvNeXt's 7 x 7: two channel tiles of 64, three edge rows and columns a side
    (3, 4, (5, 8), (2, 4), "same"),  # even kernels: the odd zero row and column after
])
def test_a_depthwise_conv2d_sums_shifted_reads_of_each_channel(modules, dtype, images, channels, size, taps, padding):
    x, w = sample(images, channels, *size, dtype=dtype), sample(channels, 1, *taps, dtype=dtype, seed=1)
    b = sample(channels, dtype=dtype, seed=2) if images != 3 else None
    assert launched_ops(modules, "depthwise_image", x, w, b, padding, tolerance=TOLERANCE[dtype]) == (1, {})


@pytest.mark.interpreter
def test_an_ungrouped_conv1d_of_long_rows_takes_column_tiles_and_keeps_its_weights_copy(modules):
    x, w = sample(9, 600), sample(20, 9, 3, seed=1)
    assert launched_ops(modules, "padded", x, w, None, 0) == (1, {"clone": 1})  # no edges; three column tiles of 256
    assert launched_ops(modules, "padded", x[None], w, None, 2) == (1, {})  # the taps' copy kept on w


@pytest.mark.interpreter
@pytest.mark.parametrize("name, shapes, args", [
    ("causal", [(2, 5, 13), (5, 1, 4), (5,)], ()),  # depthwise conv1d
    ("image", [(2, 3, 5, 7), (4, 3, 3, 3), (4,)], (1,)),  # ungrouped conv2d, padding 1
])
def test_a_shifted_conv_in_grad_mode_launches_and_carries_torchs_gradient(modules, name, shapes, args):
    translated, original = modules
    tensors = [sample(*shape, seed=seed) for shape, seed in zip(shapes, (3, 1, 2))]
    ours, theirs = [t.clone().requires_grad_() for t in tensors], [t.clone().requires_grad_() for t in tensors]
    launched = interpreter.counting()
    with torch2pypto.interpreted(translated):
        got = getattr(translated, name)(*ours, *args)
    assert sum(launched().values()) == 1
    expected = getattr(original, name)(*theirs, *args)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    grad = sample(*expected.shape, seed=4)
    got.backward(grad)
    expected.backward(grad)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name, images, channels, size, out, taps, stride, padding, dilation", [
    ("strided", 2, 5, (37,), 7, (3,), 2, 1, 1),  # ungrouped: every other column picked
    ("strided", 1, 6, (40,), 6, (4,), 3, 2, 2),  # depthwise, dilated: a column reads every other input column
    ("strided_image", 2, 5, (9, 11), 7, (3, 3), 2, 1, 1),  # ResNet's downsampling 3 x 3
    ("strided_image", 1, 6, (13, 10), 6, (3, 3), (3, 2), (2, 1), (2, 1)),  # depthwise: strides, zeros and dilations per dim
    ("strided_image", 3, 4, (8, 7), 5, (1, 1), 2, 0, 1),  # a 1 x 1 kernel of stride 2 (a ResNet shortcut): no edges
])
def test_a_strided_or_dilated_conv_picks_its_columns_in_place(modules, dtype, name, images, channels, size, out, taps, stride, padding, dilation):
    depthwise = out == channels
    x = sample(images, channels, *size, dtype=dtype)
    w = sample(out, 1 if depthwise else channels, *taps, dtype=dtype, seed=1)
    b = sample(out, dtype=dtype, seed=2) if images != 3 else None
    launches, ops = launched_ops(modules, name, x, w, b, stride, padding, dilation, tolerance=TOLERANCE[dtype])
    assert ops.pop("arange", 0) <= 1  # the columns picked, made once per shape (the dtypes share them)
    copies = {} if depthwise or taps == (1, 1) else {"clone": 1}  # a 1 x 1 kernel's taps: a view of the weight
    assert launches == 1 and ops == copies  # no copy of the input; the weight's taps once


@pytest.mark.interpreter
def test_a_strided_conv_of_long_rows_takes_several_column_tiles(modules):
    x, w = sample(2, 4, 700), sample(4, 1, 5, seed=1)
    assert launched_ops(modules, "strided", x, w, None, 2, 4, 1) == (1, {"arange": 1})  # 352 columns in tiles of 256 (512 read)
    assert launched_ops(modules, "strided", x, w, None, 2, 4, 1) == (1, {})  # the picks kept
    x, w = sample(1, 3, 5, 400), sample(8, 3, 3, 3, seed=1)
    assert launched_ops(modules, "strided_image", x, w, None, 3, 1, 1)[0] == 1  # 134 columns in tiles of 80


@pytest.mark.interpreter
@pytest.mark.parametrize("name, shapes, args", [
    ("strided", [(2, 5, 13), (5, 1, 3), (5,)], (2, 1, 1)),  # depthwise conv1d, stride 2
    ("strided_image", [(2, 3, 7, 8), (4, 3, 3, 3), (4,)], (2, 1, 2)),  # ungrouped conv2d, stride 2, dilation 2
])
def test_a_strided_conv_in_grad_mode_launches_and_carries_torchs_gradient(modules, name, shapes, args):
    test_a_shifted_conv_in_grad_mode_launches_and_carries_torchs_gradient(modules, name, shapes, args)


@pytest.mark.interpreter
def test_forms_the_kernel_does_not_compute_run_torch_as_the_module_does(tmp_path):
    code = MODULES
    translated = load(tmp_path / "modules_pypto.py", translate(code).code)
    original = load(tmp_path / "modules.py", code)
    config = type("Config", (), {"patch": 5, "pad": 1, "kernel": 3, "mode": "circular"})()  # of_config runs torch
    torch.manual_seed(0)
    reference = original.M(config)
    model = translated.M(config)
    model.load_state_dict(reference.state_dict())
    x, image = sample(2, 6, 11), sample(2, 3, 20, 23, seed=1)
    launched = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(translated):
        got = model(x, image)
        expected = reference(x, image)
    assert sum(launched().values()) == 9  # pointwise, patches (twice), padded, overlapping, depthwise, dilated, image, downsampled
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


@pytest.mark.interpreter
@pytest.mark.parametrize("padding, padding_mode", [(1, "circular"), ("same", "reflect"), ((2,), "replicate")])
def test_a_padding_mode_known_at_run_time_pads_as_the_module_does(tmp_path, padding, padding_mode):
    translated = load(tmp_path / "modules_pypto.py", translate(MODULES).code)
    torch.manual_seed(0)
    reference = torch.nn.Conv1d(6, 4, kernel_size=3, padding=padding, padding_mode=padding_mode)
    x = sample(2, 6, 11)
    launched = interpreter.counting()
    with torch.no_grad(), torch2pypto.interpreted(translated):
        got = translated.pypto_conv1d(x, reference.weight, reference.bias, reference.stride, reference.padding,
                                      reference.dilation, reference.groups, padding_mode=reference.padding_mode)
    assert sum(launched().values()) == 0  # padded: torch, as nn.Conv1d computes it
    torch.testing.assert_close(got, reference(x))


def test_a_functions_conv_groups_stride_and_dilation_of_no_literal_are_checked_at_run_time():
    code = ("import torch.nn.functional as F\n\n\ndef f(x, w, b, hidden_size, stride):\n"
            "    return F.conv1d(x, w, b, padding=0, groups=hidden_size), F.conv1d(x, w, b, stride=stride), F.conv2d(x, w, padding='valid'),"
            " F.conv2d(x, w, groups=hidden_size, stride=stride), F.conv1d(x, w, groups=hidden_size, dilation=stride),"
            " F.conv1d(x, w, stride=stride, groups=hidden_size), F.conv1d(x, w, stride=(1,), dilation=1)\n")
    records = translate(code).records
    assert {r.status for r in records} == {"converted"}  # groups, stride, dilation: against the weight at run time
    calls = translate(code).code.rsplit("def f", 1)[1]
    assert calls.count("pypto_conv1d(") == 2 and calls.count("pypto_conv2d(") == 1  # stride 1 where given or not: the plain wrapper
    assert calls.count("pypto_conv1d_strided(") == 3 and calls.count("pypto_conv2d_strided(") == 1


# ---- the conv helpers (runtime/conv.py)


def test_conv_takes_a_stride_of_the_kernel_unpadded_undilated_ungrouped(launcher):
    x, w, bias = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 2, 2), torch.randn(4)
    assert conv._conv_takes(x, w, bias, (2, 2), 0, 1, 1, 2) and conv._conv_takes(x[0], w, None, 2, "valid", 1, 1, 2)
    assert not conv._conv_takes(x, w.half(), None, 2, 0, 1, 1, 2)  # mixed dtypes: torch raises
    assert not conv._conv_takes(x, w, None, 1, 0, 1, 1, 2)  # overlapping windows
    assert not conv._conv_takes(x, w, None, 2, 1, 1, 1, 2) and not conv._conv_takes(x, w, None, 2, "same", 1, 1, 2)
    assert not conv._conv_takes(x, w, None, 2, 0, 2, 1, 2) and not conv._conv_takes(x, w, None, 2, 0, 1, 3, 2)
    assert not conv._conv_takes(x, torch.randn(4, 5, 2, 2), None, 2, 0, 1, 1, 2)  # channels mismatched
    assert not conv._conv_takes(torch.randn(1, 3, 1, 8), w, None, 2, 0, 1, 1, 2)  # no whole window
    assert not conv._conv_takes(x, w, torch.randn(3), 2, 0, 1, 1, 2)
    assert not conv._conv_takes(x, w, bias, 2, 0, 1, 1, 1)  # a 2-D weight for conv1d


def test_conv_takes_positions_up_to_max_dim(launcher):
    n = cube_rules.MAX_DIM
    assert conv._conv_takes(torch.randn(1, 1, n), torch.randn(1, 1, 1), None, 1, 0, 1, 1, 1)
    assert not conv._conv_takes(torch.randn(1, 1, n + 1), torch.randn(1, 1, 1), None, 1, 0, 1, 1, 1)


def test_conv_takes_nothing_off_the_kernel_path():
    assert not conv._conv_takes(torch.randn(2, 3, 8), torch.randn(4, 3, 1), None, 1, 0, 1, 1, 1)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", [1, "same", "valid"])
def test_conv_torch_pads_as_nn_conv_does(mode, padding):
    layer = torch.nn.Conv2d(3, 4, 3, padding=padding, padding_mode=mode)
    x = torch.randn(2, 3, 7, 6)
    out = conv._conv_torch(torch.nn.functional.conv2d, x, layer.weight, layer.bias, 1, padding, 1, 1, mode)
    torch.testing.assert_close(out, layer(x))


def test_conv_columns_read_a_pointwise_input_in_place_and_gather_patches():
    x = torch.randn(2, 3, 5)
    cols, positions, transposed = conv._conv_columns(x, (1,))
    assert cols.shape == (6, 5) and positions == [5] and not transposed and cols.data_ptr() == x.data_ptr()
    last = torch.randn(2, 5, 3).transpose(1, 2)  # channels-last
    cols, positions, transposed = conv._conv_columns(last, (1,))
    assert cols.shape == (10, 3) and transposed and cols.data_ptr() == last.data_ptr()
    image, w = torch.randn(2, 3, 9, 8), torch.randn(4, 3, 2, 2)
    cols, positions, transposed = conv._conv_columns(image, (2, 2))
    assert positions == [4, 4] and cols.shape == (2 * 12, 16) and not transposed
    out = torch.stack([w.reshape(4, -1) @ c for c in cols.reshape(2, 12, 16)]).reshape(2, 4, 4, 4)
    torch.testing.assert_close(out, torch.nn.functional.conv2d(image, w, stride=2))


def test_conv_shifted_takes_stride_and_dilation_1_ungrouped_or_one_filter_per_channel(launcher):
    x, w, bias = torch.randn(2, 6, 9), torch.randn(6, 1, 4), torch.randn(6)
    assert conv._conv_shifted(x, w, bias, 1, 3, 1, 6, 1) == (3, 12)  # mamba: 9 + 2 * 3 - 4 + 1
    assert conv._conv_shifted(x[0], w, None, (1,), "same", (1,), 6, 1) == (1, 9)  # the odd zero on the right
    assert conv._conv_shifted(x, w, None, 1, "valid", 1, 6, 1) == (0, 6)
    assert conv._conv_shifted(x, torch.randn(7, 6, 3), torch.randn(7), 1, 1, 1, 1, 1) == (1, 9)  # ungrouped
    assert conv._conv_shifted(x, w, None, 1, 4, 1, 6, 1) is None  # zeros wider than the kernel
    assert conv._conv_shifted(x, w, None, 2, 1, 1, 6, 1) is None and conv._conv_shifted(x, w, None, 1, 1, 2, 6, 1) is None
    assert conv._conv_shifted(x, w, None, 1, 1, 1, 3, 1) is None  # groups of two channels
    assert conv._conv_shifted(x, torch.randn(6, 2, 4), None, 1, 1, 1, 6, 1) is None
    assert conv._conv_shifted(x, torch.randn(7, 5, 3), None, 1, 1, 1, 1, 1) is None  # channels mismatched
    assert conv._conv_shifted(torch.randn(2, 6, 2), w, None, 1, 0, 1, 6, 1) is None  # no whole window: torch raises
    empty = torch.randn(2, 6, 0)  # zeros around no input: torch raises, the kernels take no empty tensor
    assert conv._conv_shifted(empty, w, None, 1, 3, 1, 6, 1) is None and conv._conv_strided(empty, w, None, 1, 3, 1, 6, 1) is None
    with pytest.raises(RuntimeError, match="zero batch or zero channel"):
        torch.nn.functional.conv1d(empty, w, None, 1, 3, 1, 6)
    assert conv._conv_shifted(x, w, bias.half(), 1, 1, 1, 6, 1) is None
    assert conv._conv_shifted(x, w, None, 1, (1, 1), 1, 6, 1) is None
    image, dense = torch.randn(2, 3, 7, 9), torch.randn(4, 3, 3, 2)
    assert conv._conv_shifted(image, dense, None, 1, 1, 1, 1, 2) == (1, 7, 1, 10)  # (top, height, left, width)
    assert conv._conv_shifted(image[0], dense, None, (1, 1), (2, 0), 1, 1, 2) == (2, 9, 0, 8)
    assert conv._conv_shifted(image, dense, None, 1, "same", 1, 1, 2) == (1, 7, 0, 9)  # the odd zero column after
    assert conv._conv_shifted(image, dense, None, 1, (1, 2), 1, 1, 2) is None  # zeros wider than the kernel's 2 columns
    assert conv._conv_shifted(image, dense, None, (1, 2), 1, 1, 1, 2) is None  # strided columns
    assert conv._conv_shifted(image, torch.randn(3, 1, 3, 3), None, 1, 1, 1, 3, 2) == (1, 7, 1, 9)  # depthwise
    assert conv._conv_shifted(torch.randn(2, 4, 7, 9), torch.randn(4, 2, 3, 3), None, 1, 1, 1, 2, 2) is None  # two groups
    assert conv._conv_shifted(image, dense, None, 1, 1, 1, 1, 1) is None  # a conv1d of a 2-D kernel


def test_conv_strided_takes_any_stride_and_dilation_where_every_output_reads_a_tap(launcher):
    x, w = torch.randn(2, 6, 9), torch.randn(6, 1, 4)
    assert conv._conv_strided(x, w, None, 1, 3, 1, 6, 1) == (3, 12, 1, 1)  # stride 1 as _conv_shifted's, flattened
    assert conv._conv_strided(x, w, None, 2, 1, 1, 6, 1) == (1, 4, 2, 1)  # (9 + 2 - 3 - 1) // 2 + 1
    assert conv._conv_strided(x, w, None, (3,), 6, 2, 6, 1) == (6, 5, 3, 2)  # dilated: 6 zeros reach 7 columns
    assert conv._conv_strided(x, w, None, 1, "same", 2, 6, 1) == (3, 9, 1, 2)  # 'same' spreads d * (k - 1) zeros
    assert conv._conv_strided(x, w, None, 2, "same", 1, 6, 1) is None  # torch refuses 'same' of a stride
    assert conv._conv_strided(x, w, None, 2, 4, 1, 6, 1) is None  # a column of zeros only
    assert conv._conv_strided(x, w, None, 0, 0, 1, 6, 1) is None and conv._conv_strided(x, w, None, 1, 0, 0, 6, 1) is None
    assert conv._conv_strided(x, w, None, 1, 0, 10, 6, 1) is None  # no whole window
    assert conv._conv_strided(torch.randn(1, 6, 2), torch.randn(6, 1, 2), None, 1, 3, 3, 6, 1) is None  # taps miss the row
    image, dense = torch.randn(2, 3, 7, 9), torch.randn(4, 3, 3, 2)
    assert conv._conv_strided(image, dense, None, (2, 3), (1, 0), (1, 2), 1, 2) == (1, 4, 2, 1, 0, 3, 3, 2)
    assert conv._conv_strided(image, torch.randn(4, 2, 3, 3), None, 2, 1, 1, 1, 2) is None  # channels mismatched


def test_conv_picks_are_a_rows_columns_at_the_stride_made_once_per_shape():
    picks = conv._conv_picks(20, 3, torch.device("cpu"))
    assert picks.dtype == torch.int32 and picks.tolist() == list(range(0, 96, 3))  # 32 columns: two tiles of 16
    assert conv._conv_picks(20, 3, torch.device("cpu")) is picks


def test_conv_taps_keeps_the_weights_tap_matrices_until_it_changes():
    w = torch.randn(4, 3, 2)
    taps = conv._conv_taps(w)
    torch.testing.assert_close(taps, torch.cat([w[:, :, 0], w[:, :, 1]]))
    image = torch.randn(4, 3, 2, 3)  # conv2d: tap (h, k) at rows (h * 3 + k) * 4
    torch.testing.assert_close(conv._conv_taps(image)[20:24], image[:, :, 1, 2])
    assert conv._conv_taps(w) is taps
    with torch.no_grad():
        w.mul_(2)
    torch.testing.assert_close(conv._conv_taps(w), 2 * taps)
