"""Source templates for the generated code: the shared prelude and the row-tiled kernel.

Every kernel sees its tensors as ``[rows, cols]`` matrices (the host wrapper folds leading
dims), with a dynamic row axis walked by ``pypto.loop`` in tiles of ``rows`` rows:
``pypto.view(..., valid_shape=...)`` cuts the tail tile, ``pypto.assemble`` writes it back.
Kernels are built by ``functools.cache``'d factories, one compiled kernel per dtype/width.
"""

from __future__ import annotations

import dataclasses
import textwrap


@dataclasses.dataclass(frozen=True)
class Definition:
    """A named top-level block of generated source and the definitions it uses."""

    name: str
    source: str
    requires: tuple[str, ...] = ()
    imports: tuple[str, ...] = ()


IMPORTS = ("functools", "pypto", "torch")  # what every generated section imports

PRELUDE = (
    Definition(
        "PYPTO_LAUNCHER",
        """\
# Kernels launch on NPU tensors. Elsewhere each wrapper computes the original torch expression,
# unless torch2pypto.interpreted() has set PYPTO_LAUNCHER to run them on PyPTO's CPU interpreter.
PYPTO_LAUNCHER = None
_PYPTO_DTYPES = {torch.float32: pypto.DT_FP32, torch.float16: pypto.DT_FP16, torch.bfloat16: pypto.DT_BF16}
_UB_BYTES = 192 * 1024  # unified buffer of one AI vector core
_TILE_BYTES = 32 * 1024  # target FP32 tile size; tune per kernel if profiling says so
""",
    ),
    Definition(
        "_on_kernel_path",
        '''\
def _on_kernel_path(*tensors):
    """Whether a kernel runs: non-empty tensors of PyPTO dtypes, on an NPU or under a launcher."""
    if not all(t.dtype in _PYPTO_DTYPES and t.numel() for t in tensors):
        return False
    return PYPTO_LAUNCHER is not None or all(t.device.type == "npu" for t in tensors)
''',
        ("PYPTO_LAUNCHER",),
    ),
    Definition(
        "_launch",
        '''\
def _launch(kernel, *tensors):
    """Launch `kernel` once on `tensors` (inputs, then outputs)."""
    if PYPTO_LAUNCHER is None:
        kernel(*tensors)
    else:
        PYPTO_LAUNCHER(kernel, *tensors)
''',
        ("PYPTO_LAUNCHER",),
    ),
    Definition(
        "_as_rows",
        '''\
def _as_rows(t):
    """`t` as a contiguous [rows, cols] matrix: leading dims fold into the dynamic row axis."""
    return t.reshape(-1, t.shape[-1] if t.dim() else 1).contiguous()
''',
    ),
    Definition(
        "_annotated",
        '''\
def _annotated(namespace):
    """Evaluate a kernel's annotations in `namespace`: PyPTO reads them as objects, and a module
    with `from __future__ import annotations` leaves them as strings."""
    def evaluate(kernel):
        kernel.__annotations__ = {
            name: eval(note, kernel.__globals__, namespace) if isinstance(note, str) else note
            for name, note in kernel.__annotations__.items()
        }
        return kernel
    return evaluate
''',
    ),
    Definition(
        "_tile_shape",
        '''\
def _tile_shape(cols, buffers):
    """Vector tile [rows, tile_cols] whose FP32 copies (`buffers` of them) fit the unified buffer."""
    tile_cols = min(cols, _UB_BYTES // (4 * buffers))
    rows = min(64, _TILE_BYTES // (4 * tile_cols), _UB_BYTES // (4 * buffers * tile_cols))
    return max(rows, 1), tile_cols
''',
        ("PYPTO_LAUNCHER",),
    ),
)
PRELUDE_NAMES = tuple(d.name for d in PRELUDE)


def row_kernel(
    name: str,
    doc: str,
    factory_params: str,
    inputs: dict[str, str],
    out_dtype: str,
    body: str,
    *,
    out_cols: str = "cols",
    buffers: int = 2,
    setup: str = "",
) -> Definition:
    """A kernel factory over row tiles.

    ``inputs`` maps each tensor parameter to its dtype expression; inside ``body`` each is
    available as ``<name>_tile`` (the current ``[rows, cols]`` view) and ``body`` assigns the
    tile's result to ``result``. ``setup`` runs in the factory, before the kernel is built.
    """
    params = "".join(
        f"        {arg}: pypto.Tensor([pypto.DYNAMIC, cols], {dtype}),\n"
        for arg, dtype in inputs.items()
    )
    views = "".join(
        f"            {arg}_tile = pypto.view({arg}, [rows, cols], [r, 0], valid_shape=valid)\n"
        for arg in inputs
    )
    first = next(iter(inputs))
    source = f'''\
@functools.cache
def {name}({factory_params}):
    """{doc}"""
    rows, tile_cols = _tile_shape(cols, buffers={buffers})
{textwrap.indent(setup, " " * 4)}
    @pypto.frontend.jit()
    @_annotated(locals())
    def kernel(
{params}        out: pypto.Tensor([pypto.DYNAMIC, {out_cols}], {out_dtype}),
    ):
        n = {first}.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_tiles", unroll_list=[1]):
            r = i * rows
            valid = [(n - r).min(rows), cols]
            pypto.set_vec_tile_shapes(rows, tile_cols)
{views}{textwrap.indent(body, " " * 12)}            pypto.assemble(result, [r, 0], out)

    return kernel
'''
    return Definition(name, source, ("_tile_shape", "_annotated"))


def cast(var: str, src: str, dst: str) -> tuple[str, str]:
    """Factory setup and kernel statements casting ``var`` from dtype ``src`` to ``dst``.

    ``src``/``dst`` name factory parameters. BF16 and FP16 have no direct cast in PyPTO and go
    through FP32; a cast to the same dtype is skipped when the kernel is parsed.
    """
    setup = f"{var}_via_fp32 = {{{src}, {dst}}} == {{pypto.DT_BF16, pypto.DT_FP16}}\n"
    body = (
        f"if {var}_via_fp32:\n"
        f"    {var} = pypto.cast({var}, pypto.DT_FP32)\n"
        f"if {src} != {dst}:\n"
        f"    {var} = pypto.cast({var}, {dst})\n"
    )
    return setup, body
