"""scripts/layer.py's helpers at tiny sizes, no cost-model run: the cube peak it names, the stage and
FLOPs it gives each launch of a translated module, its layer floor and its report."""

import torch

import layer
import models
from torch2pypto import translate_source

BLOCK = """\
import torch
from torch import nn


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64, bias=False)

    def forward(self, x):
        return rotate_half(self.proj(x))
"""


def test_cube_peak_is_the_a2a3_cube_at_the_cost_models_clock():
    peak, how = layer.cube_peak()
    assert peak == 24 * 16 * 16 * 16 * 2 * 1800  # FLOPs per µs: 353.9 TFLOPS
    assert "24 cube cores" in how and "A2A3.ini" in how


def test_launches_are_labelled_with_their_submodule_and_helper_and_counted(tmp_path, monkeypatch):
    module = models.import_written("layer_bench_block", translate_source(BLOCK, "block.py").code, tmp_path / "block.py")
    monkeypatch.setattr(layer, "sim_time", lambda kernel, *tensors: (1.5, 3))  # no cost-model run
    block = module.Block().to(torch.bfloat16)
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    launches, left = layer.recorded((module,), block, lambda: block(x))
    linear, *rope = launches
    assert (linear.stage, linear.block) == ("proj", "proj")  # the submodule whose weight it reads
    assert rope and {(r.stage, r.block) for r in rope} == {("layer.rope", "layer.rope")}  # in rotate_half
    assert linear.flops == 2 * 5 * 64 * 64 and linear.us == 1.5 and linear.tasks == 3
    assert linear.bytes == (5 * 64 + 64 * 64 + 5 * 64) * 2
    assert all(r.flops == 0 for r in rope)
    assert isinstance(left, dict)


def test_layer_floor_reads_the_weights_once_and_report_prints(capsys):
    peak, _ = layer.cube_peak()
    floor, how = layer.layer_floor(layer.LLAMA_7B, 64, 10**9, peak)
    weights = (4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096) * 2
    assert floor == (weights + 2 * 64 * 4096 * 2 + 2 * 64 * 128 * 2) / layer.HBM_BYTES_PER_US
    fused = [layer.Launch("mlp.gate_proj+mlp.up_proj", "mlp", "k", 10.0, 4, 1000, 2 * 10**6)]
    per_op = [layer.Launch("mlp.gate_proj", "mlp", "k", 8.0, 4, 800, 10**6),
              layer.Launch("mlp.up_proj", "mlp", "k", 8.0, 4, 800, 10**6)]
    layer.report(64, "sdpa", layer.LLAMA_7B, (fused, {}), (per_op, {"mul": (1, 2**20)}), peak)
    out = capsys.readouterr().out
    assert "1.60x" in out and "mul x1 (1.0 MiB)" in out
