"""A module with ``from __future__ import annotations`` translates into one file whose kernels run
(issue 8 item 8): PyPTO reads a kernel's annotations as objects, the future import makes them strings."""

import pytest
import torch

import torch2pypto
from helpers import sample, translate
from table_cases import load
from torch2pypto.translator.verification.interpreter import counting

pytestmark = pytest.mark.interpreter

SOURCE = '''\
"""A module that postpones its annotations."""
from __future__ import annotations

import torch


def norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    h = x.to(torch.float32)
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).type_as(x)
'''


@pytest.mark.parametrize("fuse", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernels_of_a_module_with_postponed_annotations_run(tmp_path, dtype, fuse):
    translation = translate(SOURCE, fuse=fuse)
    assert {r.status for r in translation.records} == {"converted"}
    assert translation.code.startswith('"""A module that postpones its annotations."""\nfrom __future__ import annotations\n')
    (tmp_path / "postponed.py").write_text(translation.code)
    module = load(tmp_path / "postponed.py")
    x = sample(7, 40, dtype=dtype)
    launched = counting()
    with torch2pypto.interpreted(module):
        got = module.norm(x)
    if fuse:  # the whole body is one region: one fused kernel
        assert [k for k in launched() if k.startswith("fused_norm_")] and sum(launched().values()) == 1
    else:
        assert {"pow_exponent_number_kernel.kernel", "mean_kernel.kernel", "rsqrt_kernel.kernel"} <= set(launched())
    h = x.float()
    torch.testing.assert_close(got, (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x))
