"""Tile shapes: vector tiles within the unified buffer, cube tiles within L0 and L1."""

import pypto

from torch2pypto.runtime.launch import _UB_BYTES

# Vector tiles, from PyPTO's cost model (scripts/tiles.py sweeps them). Under _VECTOR_PASSES a row
# tile is one task however many column tiles it holds, and a launch costs about its task count
# times a fixed cost once the vector cores are busy. So a launch splits into _SPREAD_TILES row
# tiles (fewer leave cores idle) unless a tile would hold under _MIN_TILE elements (more tasks
# then cost more than they spread), and its column tiles are as wide as the unified buffer
# takes, at least _WIDE_TILE columns (narrower ones cost more per element). A BF16 input's row
# tile holds at most _BF16_ROW_TILE elements: PyPTO keeps its FP32 copy whole.
_VECTOR_PASSES = {"pg_skip_partition": True}  # PyPTO's own partition makes each column tile a task
_TILE_BUDGET = 256 * 1024  # bytes of a tile's live copies (PyPTO reuses the buffers of dead ones)
_SPREAD_TILES = 32
_MIN_TILE = 4096
_WIDE_TILE = 512
_BF16_ROW_TILE = 32 * 1024
# the widest column tile of a row wider than a tile: wider ones fail in 0.2.0 (F7A001 idx <
# size_: a softmax over 53248 cols in 16384-wide tiles, a cast in 32768-wide ones); 8192 passed
# up to 256k
_WIDEST_TILE = 8192


def _spread_rows(n, cols, tiles=_SPREAD_TILES, whole=False):
    """The most rows a tile of a launch over n x cols has: n / `tiles` but at least _MIN_TILE
    elements, a power of two up to 64 and n's next (kernels are built once per value); `whole`
    (a kernel that reads whole tiles only): at most n, so that a tile lies within the rows."""
    rows = max(1, max(n * cols // tiles, _MIN_TILE) // cols)
    return min(64, 1 << (rows.bit_length() - 1), 1 << ((n.bit_length() - 1) if whole else (n - 1).bit_length()))


def _tile_shape(cols, max_rows, buffers, dtypes, whole_rows=False, split_cols=False):
    """Vector tile [rows, tile_cols] of a kernel with `buffers` live tiles in the widest of
    `dtypes` (the input's first; BF16 counts as FP32: PyPTO computes it in FP32) within
    _TILE_BUDGET: rows a power of two up to `max_rows` (_spread_rows); tile_cols the whole row
    while it fits, a power of two up to _WIDEST_TILE if not; `whole_rows`: the whole row also
    while `buffers` FP32 copies of it fit the unified buffer (a wider row takes column tiles:
    PyPTO reduces and broadcasts across them); `split_cols` (elementwise kernels): a power of
    two that leaves max_rows rows, but at least _WIDE_TILE."""
    size = max(2 if d == pypto.DT_FP16 else 8 if d == pypto.DT_INT64 else 4 for d in dtypes)
    if dtypes[0] == pypto.DT_BF16:
        max_rows = min(max_rows, 1 << (max(1, _BF16_ROW_TILE // cols).bit_length() - 1))
    elements = _TILE_BUDGET // (size * buffers)
    widest = 1 << (elements.bit_length() - 1)
    tile_cols = cols if cols <= widest or whole_rows and (cols + 7) * 4 * buffers <= _UB_BYTES else min(widest, _WIDEST_TILE)
    if split_cols:
        tile_cols = min(tile_cols, 1 << (max(_WIDE_TILE, elements // max_rows).bit_length() - 1))
    rows = max(1, elements // tile_cols)
    return min(max_rows, 1 << (rows.bit_length() - 1)), tile_cols


# A2/A3 AI cube core buffers, and the cube tiles a kernel starts from: the best of
# scripts/kernels.py's sweep at transformer shapes
_L0A_BYTES, _L0B_BYTES, _L0C_BYTES, _L1_BYTES = 64 * 1024, 64 * 1024, 128 * 1024, 512 * 1024
_CUBE_ROWS, _CUBE_K, _CUBE_N = (16, 128), (128, 512), (256, 256)


def _cube_rows(m):
    """Rows per tile for m rows: a power of two in _CUBE_ROWS' range (decode's m=1 takes 16,
    prefill 128); m stays dynamic in each kernel, which compiles once per row tile."""
    return min(_CUBE_ROWS[1], max(_CUBE_ROWS[0], 1 << (m - 1).bit_length()))


def _cube_tiles(k, n, dtype, rows):
    """The k tiles [L0, a's L1, b's L1] and n tiles [L0, L1] of a [rows, k] x [k, n] product (k
    and n multiples of 16): the defaults cut to k and n, L0 shrunk in 16s to fit L0A/L0B/L0C, L1
    a multiple of L0 within L1. The operand with fewer rows in L1 (a's row tile, or b's n tile)
    then takes the L1 the other leaves, in multiples of its k tile up to k: PyPTO copies each L1
    tile from GM one after another at a fixed cost besides its bytes (in its cost model about
    1400 cycles + bytes / 96 per copy, the cube kernels' bound), so fewer, larger copies win."""
    size = 4 if dtype == pypto.DT_FP32 else 2
    k0, n0 = min(_CUBE_K[0], k), min(_CUBE_N[0], n)
    while n0 > 16 and rows * n0 * 4 > _L0C_BYTES:
        n0 = max(16, n0 // 32 * 16)
    while k0 > 16 and (rows * k0 * size > _L0A_BYTES or k0 * n0 * size > _L0B_BYTES):
        k0 = max(16, k0 // 32 * 16)
    k1, n1 = k0 * max(1, min(_CUBE_K[1], k) // k0), n0 * max(1, min(_CUBE_N[1], n) // n0)
    while k1 > k0 and (rows + n1) * k1 * size > _L1_BYTES:
        k1 -= k0
    small, large = sorted((rows, n1))
    wide = k1 * max(1, min(k // k1, (_L1_BYTES // size - large * k1) // (small * k1)))
    return [k0, wide, k1] if rows <= n1 else [k0, k1, wide], [n0, n1]
