"""Paired joins: two torch.cat along one dim, written one after the other, as one launch.

A DynamicCache's update joins the cached keys and values with the step's::

    self.keys = torch.cat([self.keys, key_states], dim=-2)
    self.values = torch.cat([self.values, value_states], dim=-2)

two launches of a join kernel per decoder layer and step. Here one kernel of two outputs
(:func:`walks.join_kernel`) makes both: each tensor read in place from a window of its storage
(the runtime's ``_joined``: a transposed key, a column slice), each result a contiguous tensor of
its own, as torch.cat's is. The engine (:mod:`torch2pypto.translator.engine.joins`) finds the
pattern; this module makes the kernel, the torch fallback (the joins as written) and the wrapper,
whose results carry torch's gradients of the joins. Joins the kernel cannot take together (a
cache of floats and one of int ids, with no common dtype) run the single joins' wrapper each,
which launches its own kernel where it can: pairing never leaves a join to torch that had one.
"""

from __future__ import annotations

from torch2pypto.rules import movement, walks, wrappers
from torch2pypto.rules.codegen import Definition, copied
from torch2pypto.schema.entry import Entry

LAUNCH_JOINS = copied("layout", "_launch_joins")


def kernel_name(count: int) -> str:
    """The kernel of two joins of ``count`` tensors each."""
    return f"join{count}_pair_kernel"


def definitions(wrapper: str, where: str, entry: Entry, joins: list[list[str]], dim: int, params: list[str],
                torch_source: str) -> tuple[Definition, ...]:
    """The kernel, the torch fallback and the wrapper of ``joins`` (each a list of the wrapper's
    parameter names, as many in each) along ``dim``, and the single joins' wrapper of ``entry``
    (torch.cat's), which runs each join where the kernel does not take both."""
    fallback = wrappers.region_fallback(wrapper, where, params, torch_source, "joins")
    count, kernel = len(joins[0]), kernel_name(len(joins[0]))
    apart, single = movement.literal_join(entry, count)
    signature = ", ".join(params)
    groups = ", ".join(f"({', '.join(j)})" for j in joins)
    each = ", ".join(f"{apart}([{', '.join(j)}], dim={dim})" for j in joins)
    doc = wrappers.docstring(
        f"{where} as one PyPTO kernel: {len(joins)} torch.cat of {count} tensors along dim {dim}.",
        "Each tensor, read in place as blocks of rows of its storage, is assembled into its rows or columns of its "
        "join's own contiguous output (pypto.view and pypto.assemble, any widths); the results carry torch's gradients. "
        f"Joins the kernel does not take together (of two dtypes, off the NPU) run {apart} each.",
    )
    source = (
        f"def {wrapper}({signature}):\n{doc}"
        f"    joined = [_joined(tensors, {dim}, False) for tensors in ({groups})]\n"
        f"    if not (all(joined) and {' == '.join(f'{j[0]}.dtype' for j in joins)}):\n"
        f"        return {each}\n"
        f"\n    def kernel_path({signature}):\n        return _launch_joins({kernel}, joined)\n"
        f"\n    return _with_torch_grads(kernel_path, {fallback.name}, {signature})\n"
    )
    requires = (*wrappers.PRELUDE_NEEDS, fallback.name, apart, kernel, "_joined", "_launch_joins", "_with_torch_grads")
    return (*single, walks.join_kernel(kernel, count, len(joins)), LAUNCH_JOINS, fallback, Definition(wrapper, source, requires))
