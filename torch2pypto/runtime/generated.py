"""The kernel factories a translation generates beside the helpers that call them.

Their source is built per entry (:mod:`torch2pypto.rules.templates`), so here they are stubs: a
runtime module imports a factory from here, and :func:`torch2pypto.rules.codegen.copied` makes
a helper that calls it require the generated definition of that name. Unit tests put stand-ins
in the importing module.
"""


def cast_kernel(dtype, out_dtype, cols, max_rows):
    """The cast kernel's factory (casting.CAST_KERNEL, a templates.row_kernel)."""
    raise NotImplementedError("generated per translation")


def assemble1_kernel(dtype, cols, width, places, fills=(), value=0.0):
    """The factory of an assemble kernel of one input (walks.assemble_kernel)."""
    raise NotImplementedError("generated per translation")


def index_bounds_kernel(index_dtype, rows):
    """The factory of the kernel bounding an index, tile by tile (walks.INDEX_BOUNDS)."""
    raise NotImplementedError("generated per translation")
