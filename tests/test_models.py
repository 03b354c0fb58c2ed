"""Real code: a tiny forward pass of six transformers models, built from their own classes with
a small random config and identical weights, matches the original under ``interpreted()`` with
kernels launched (scripts/models.py prints the same comparison with its figures)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent.parent / "scripts"))
import models  # noqa: E402

pytestmark = pytest.mark.interpreter


@pytest.mark.parametrize("model", list(models.MODELS))
def test_translated_model_forward_matches_the_original(model, tmp_path):
    result = models.compare(model, tmp_path)
    assert sum(result.kernels.values()) > 0, "the forward launched no kernel"
    assert result.max_abs_diff <= models.TOLERANCE[torch.float32], result


def test_bfloat16_forward_matches_within_bfloat16s_tolerance(tmp_path):
    result = models.compare("llama", tmp_path, torch.bfloat16)
    assert sum(result.kernels.values()) > 0 and result.max_abs_diff <= models.TOLERANCE[torch.bfloat16], result
