"""How close a kernel's result must come to torch's: one policy for the generated kernel tests,
``translate --verify`` and ``scripts/models.py``.

An entry's (atol, rtol) for a dtype start from torch.testing.assert_close's defaults (exact for
integers and bool), or from the entry's own ``tolerance`` in ops.toml. A kernel that sums n
values (a reduction, a scan, a row recipe, matmul's K) adds them in another order than torch,
whose results then differ by up to n units of FP32 rounding: atol grows to n * eps, and rtol as
well, as the sum's size is the values' (each family says what it accumulates and over how
many values; a product of n values moves its relative error alike). A fused region rounds once per op, and
the next ops carry that: :func:`region_tolerance`.
"""

from __future__ import annotations

import torch

from torch2pypto.schema.family import family

# assert_close's defaults, by dtype: about one unit in the last place for the half types
BASE = {torch.float32: (1e-5, 1.3e-6), torch.float16: (1e-5, 1e-3), torch.bfloat16: (1e-5, 1.6e-2)}
# a region: each op may round its dtype's last bit apart from torch's, and the next ops carry it
REGION = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}
# A whole model's FP32 tolerance (scripts/models.py: its logits, loss and gradients): the
# kernels compute in FP32 like torch but reduce in another order, so FP32 logits (|logit| < ~2
# there) may differ by some hundred units in the last place after two layers.
MODEL_TOLERANCE = 1e-4

# Low precision (bfloat16: 8 bits of mantissa) departs from FP32 in every op, and a kernel that
# rounds once where torch rounds twice, or sums in another order, lands an element near a tie
# on the other bf16 neighbour; later layers grow such a flip as they grow torch's own rounding.
# An absolute tolerance cannot tell that from a wrong rounding. The FP32 forward of the same
# weights can: a translated forward must stay within MODEL_FACTOR times the original's own
# distance from it (largest and root-mean-square), and pick the reference's token wherever the
# reference's choice leads by more than twice the distance the check allows. A kernel rounding
# toward zero instead of to nearest doubles the distance of its results (up to one ulp instead
# of half of one), and the logits are one kernel's results; grown near-tie flips stayed below
# the original's own distance (RoBERTa 0.45 of it, T5 0.8).
MODEL_FACTOR = 1.5

_EPS = torch.finfo(torch.float32).eps  # the kernels accumulate in FP32


def tolerance(entry, dtype: torch.dtype, shape=(), dim: int | tuple[int, ...] | None = None) -> tuple[float, float]:
    """(atol, rtol) for ``entry``'s kernel on inputs of ``dtype`` whose first tensor has ``shape``,
    reducing ``dim`` where the call gives it (its family's ``reduced_length``)."""
    override = entry.tolerance.get(str(dtype).removeprefix("torch."))
    atol, rtol = override or BASE.get(dtype, (0.0, 0.0))
    if not dtype.is_floating_point:
        return atol, rtol
    kind = family(entry.family, entry.op).accumulates if entry.family else None
    grown = (family(entry.family).reduced_length(entry, tuple(shape), dim) if kind and shape else 1) * _EPS
    if kind == "sum":
        return max(atol, grown), max(rtol, grown)
    return (atol, max(rtol, grown)) if kind == "product" else (atol, rtol)


def equal_nan(entry) -> bool:
    """Whether NaN compares equal to NaN: on the entry's non-finite samples (inf - inf is NaN in
    both), where a float result may well be NaN."""
    return entry.sample.domain == "nonfinite"


def region_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) of a fused region's (or a whole model's) result in ``dtype``."""
    return REGION.get(dtype, (0.0, 0.0))
