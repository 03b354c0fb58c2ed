"""Count the aten ops torch runs on the host outside kernel launches.

A translated module's wrappers should hand their operands to the kernel as they are: every
aten op they run around a launch (a pad, a contiguous copy, an expanded batch) is one more
device op that reads and writes a whole tensor. ``host_ops`` counts them, views and
allocations left out, the work the interpreter does inside a launch excluded; ``host_work``
also sums the bytes they write.
"""

from __future__ import annotations

import collections
import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# ops that only allocate: the outputs a wrapper hands a kernel
ALLOCATIONS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})
VIEWS = frozenset({"_unsafe_view"})  # aliases its input, as the ops torch tags as views do


class HostWork(TorchDispatchMode):
    """Counts aten ops, and the bytes of the tensors they return, by op name while not paused,
    views, allocations and ops on no tensor (dtype promotion) left out."""

    def __init__(self):
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.written: collections.Counter[str] = collections.Counter()  # bytes of the outputs
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        result = func(*args, **(kwargs or {}))
        if not self.paused and not func.is_view and name not in ALLOCATIONS | VIEWS:
            if any(isinstance(t, torch.Tensor) for t in tree_leaves((args, kwargs, result))):
                self.ops[name] += 1
                self.written[name] += sum(t.numel() * t.element_size() for t in tree_leaves(result)
                                          if isinstance(t, torch.Tensor))
        return result


@contextlib.contextmanager
def host_ops(*modules):
    """Inside the block, count the aten ops run outside the kernel launches of `modules` (translated
    modules under ``interpreted()``, whose ``PYPTO_LAUNCHER`` is set); yields the Counter by op name."""
    with host_work(*modules) as work:
        yield work.ops


@contextlib.contextmanager
def host_work(*modules):
    """As ``host_ops``, but yields the :class:`HostWork`: ops and bytes written by op name."""
    counter = HostWork()
    saved = [(module, module.PYPTO_LAUNCHER) for module in modules]

    def paused(launch):
        def run(kernel, *args):
            counter.paused += 1
            try:
                launch(kernel, *args)
            finally:
                counter.paused -= 1
        return run

    try:
        for module, launch in saved:
            module.PYPTO_LAUNCHER = paused(launch)
        with counter:
            yield counter
    finally:
        for module, launch in reversed(saved):
            module.PYPTO_LAUNCHER = launch
