"""Sample inputs for an entry, from its hints: the tests and ``--verify`` draw from here.

Examples are written over :data:`torch2pypto.mapping.SAMPLE_NAMES`; :func:`values` gives each
name a value for one case (a shape and a dtype). Shapes: tail row tiles (more rows than a tile,
and fewer), a width that is no multiple of 32 bytes, rank 1 to 4.
"""

from __future__ import annotations

import math

import torch

from torch2pypto.mapping import Entry

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "bool": torch.bool,
          "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64}
_INTEGERS = {"real": (-100, 100), "positive": (1, 100), "unit": (0, 2), "small": (0, 8), "nonfinite": (-100, 100)}
# one width per run, so one compiled kernel serves every shape of a dtype
SHAPES = ((2, 3, 13, 37), (37,))
MATRIX_SHAPES = ((7, 37), (3, 5, 37), (1,), (130, 1), (3, 17), (2, 70, 64), (2, 2, 3, 300), (5, 1000))


def shapes(entry: Entry, matrix: bool = False) -> tuple[tuple[int, ...], ...]:
    """The shapes of ``x`` an entry is tried on (``matrix``: with the entry's matrix shapes)."""
    if entry.sample.shapes:
        return entry.sample.shapes + entry.sample.matrix if matrix else entry.sample.shapes
    return MATRIX_SHAPES if matrix else SHAPES


def operand_shape(entry: Entry, name: str, shape) -> tuple[int, ...]:
    """The shape of sample ``y`` or ``w`` in the case where ``x`` has ``shape``: the entry's hint
    for that case (``sample.y``), else like x (y) or x's last dim (w)."""
    hint = getattr(entry.sample, name)
    if hint and tuple(shape) in entry.sample.shapes:
        return hint[entry.sample.shapes.index(tuple(shape))]
    return tuple(shape) if name == "y" else tuple(shape[-1:])


def tensor(entry: Entry, shape, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    """A sample tensor in the entry's domain (bool: fair coin flips; integers: a range per domain)."""
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) < 0.5
    if not dtype.is_floating_point:
        low, high = _INTEGERS[entry.sample.domain]
        return torch.randint(max(low, torch.iinfo(dtype).min), high, shape, generator=generator, dtype=dtype)
    t = torch.randn(shape, generator=generator)
    if entry.sample.domain == "positive":
        t = t.abs() + 0.5
    elif entry.sample.domain == "unit":
        t = torch.sigmoid(t)
    elif entry.sample.domain == "small":
        t = torch.randint(0, 8, shape, generator=generator).float()
    elif entry.sample.domain == "nonfinite":
        special = torch.tensor([math.inf, -math.inf, math.nan])
        pick = torch.randint(0, 8, shape, generator=generator)
        t = torch.where(pick < 3, special[pick.clamp(max=2)], t)
    return t.to(dtype)


def values(entry: Entry, shape, dtype: torch.dtype, seed: int = 0) -> dict[str, object]:
    """The example names' values for one case: x of ``shape``, y alike, w a row of x (or the
    shapes the entry's hints give them), m a mask."""
    generator = torch.Generator().manual_seed(seed)
    x = tensor(entry, shape, dtype, generator)
    return {
        "x": x,
        "y": tensor(entry, operand_shape(entry, "y", shape), dtype, generator),
        "w": tensor(entry, operand_shape(entry, "w", shape), dtype, generator),
        "xs": [x],
        "dev": x.device,
        "m": torch.rand(shape, generator=generator) < 0.5,
    }
