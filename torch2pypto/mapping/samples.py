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


def operand_shape(entry: Entry, name: str, shape, dim: int | None = None) -> tuple[int, ...]:
    """The shape of sample ``y`` or ``w`` in the case where ``x`` has ``shape``: the entry's hint
    for that case (``sample.y``), else like x (y) or x's last dim (w); with an index hint, y is
    what the index scatters or adds (``dim``: the call's, default the hint's)."""
    hint = getattr(entry.sample, name)
    if hint and tuple(shape) in entry.sample.shapes:
        return hint[entry.sample.shapes.index(tuple(shape))]
    if name == "y" and entry.sample.index in ("row", "unique"):
        return index_shape(entry, shape, dim) if entry.sample.index == "unique" else _along(shape, dim, entry, INDEX_LENGTH)
    return tuple(shape) if name == "y" else tuple(shape[-1:])


INDEX_LENGTH = 5  # indices along the dim: more than some sample sizes, fewer than others
GROUPS = 4  # runs of rows that offsets cut


def _along(shape, dim: int | None, entry: Entry, size: int) -> tuple[int, ...]:
    """``shape`` with its ``dim`` (the hint's if None) of ``size``; as is if it has no such dim."""
    dim = entry.sample.dim if dim is None else dim
    if not -len(shape) <= dim < len(shape):
        return tuple(shape)
    return tuple(size if d == dim % len(shape) else n for d, n in enumerate(shape))


def index_shape(entry: Entry, shape, dim: int | None = None) -> tuple[int, ...]:
    """The shape of the sample index ``i`` into x of ``shape`` (see :class:`Sample`)."""
    kind, dim = entry.sample.index, entry.sample.dim if dim is None else dim
    if kind == "offsets":
        return (GROUPS,)
    if kind == "any":
        return (2, INDEX_LENGTH)
    if kind == "row":
        return (INDEX_LENGTH,)
    if kind == "target":
        return tuple(n for d, n in enumerate(shape) if d != dim % len(shape))
    size = shape[dim] if -len(shape) <= dim < len(shape) else 1
    return _along(shape, dim, entry, min(size, INDEX_LENGTH) if kind == "unique" else INDEX_LENGTH)


def index(entry: Entry, shape, generator: torch.Generator, dim: int | None = None) -> torch.Tensor:
    """An int64 index into x of ``shape`` along ``dim`` (the hint's if None), in range (zeros
    where x has no such dim: torch raises there); ``unique``: no index twice along dim;
    ``offsets``: the int32 ends of GROUPS runs of that dim."""
    dim = entry.sample.dim if dim is None else dim
    count = shape[dim] if -len(shape) <= dim < len(shape) else 0
    if entry.sample.index == "offsets":  # sorted cuts, the second run empty
        cuts = torch.randint(0, count + 1, (GROUPS - 1,), generator=generator).sort().values
        return torch.cat([cuts[:1], cuts[:1], cuts[2:], torch.tensor([count])]).to(torch.int32)
    target = index_shape(entry, shape, dim)
    if not count:
        return torch.zeros(target, dtype=torch.int64)
    if entry.sample.index != "unique":
        return torch.randint(0, count, target, generator=generator)
    moved = torch.Size(target[:dim % len(shape)] + target[dim % len(shape) + 1:] + target[dim % len(shape):][:1])
    rows = [torch.randperm(count, generator=generator)[:moved[-1]] for _ in range(moved[:-1].numel())]
    return torch.stack(rows).reshape(moved).movedim(-1, dim % len(shape)).contiguous()


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
    elif entry.sample.domain == "distinct":  # consecutive bit patterns from 1.0 up, signs mixed
        codes = {torch.float32: (torch.int32, 0x3F800000), torch.float16: (torch.int16, 0x3C00),
                 torch.bfloat16: (torch.int16, 0x3F80)}[dtype]
        n = math.prod(shape)
        bits = (torch.randperm(n, generator=generator) + codes[1]).to(codes[0])
        signs = torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0)
        return (bits.view(dtype).float() * signs).to(dtype).reshape(shape)
    elif entry.sample.domain == "nonfinite":
        special = torch.tensor([math.inf, -math.inf, math.nan])
        pick = torch.randint(0, 8, shape, generator=generator)
        t = torch.where(pick < 3, special[pick.clamp(max=2)], t)
    return t.to(dtype)


LIST_LENGTH = 7  # xs, a list of a length the call does not show: cat's launches of 4, 2 and 1 tensors


def values(entry: Entry, shape, dtype: torch.dtype, seed: int = 0, dim: int | None = None) -> dict[str, object]:
    """The example names' values for one case: x of ``shape``, y alike, w a row of x (or the
    shapes the entry's hints give them), xs x and more tensors of its shape (:data:`LIST_LENGTH`
    in all), m a mask, i an index along ``dim`` (the call's; None: the hint's)."""
    generator = torch.Generator().manual_seed(seed)
    x = tensor(entry, shape, dtype, generator)
    named = {
        "x": x,
        "y": tensor(entry, operand_shape(entry, "y", shape, dim), dtype, generator),
        "w": tensor(entry, operand_shape(entry, "w", shape), dtype, generator),
        "dev": x.device,
        "m": torch.rand(shape, generator=generator) < 0.5,
        "i": index(entry, shape, generator, dim),
    }
    return {**named, "xs": [x, *(tensor(entry, shape, dtype, generator) for _ in range(LIST_LENGTH - 1))]}
