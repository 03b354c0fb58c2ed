"""The one_hot family: F.one_hot of int64 class indices, pypto.one_hot in row tiles.

The host flattens the indices; the kernel (:func:`walks.one_hot_kernel`) writes [n,
classes] int64 rows, as torch does. Indices outside [0, num_classes) make torch raise, so the
wrapper checks their range first (torch reads it too) and leaves such calls to torch;
``num_classes=-1`` is the largest index + 1, as in torch. Classes too many for one tile row in
the unified buffer run torch.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from torch2pypto.rules import walks, wrappers
from torch2pypto.rules.calls import signature_problem, wrapped, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.schema.entry import Entry, Fields
from torch2pypto.schema.family import Family, register


@dataclasses.dataclass(frozen=True)
class OneHotFields(Fields):
    """The onehot family reads no fields of its own."""


CLASSES = copied("operands", "_one_hot_classes")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if entry.pypto != "one_hot":
        return "a one_hot is pypto.one_hot"
    if problem := signature_problem(entry, "a one_hot", ("input", "num_classes")):
        return problem
    if tuple(entry.dtypes) != ("int64",):
        return "one_hot takes int64 indices (torch's LongTensor)"
    return None


def rewrite(site: CallSite) -> Converted | Unsupported:
    return wrapped(site, definitions)


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    kernel = f"{entry.op}_kernel"
    body = (
        "x = input.reshape(-1).contiguous()\n"
        "out = torch.empty(x.shape[0], classes, dtype=torch.int64, device=x.device)\n"
        f"_launch({kernel}(_PYPTO_ALL_DTYPES[x.dtype], classes), x, out)\n"
        "return out.reshape(*input.shape, classes)\n"
    )
    params = wrapper_params(entry)
    how = "pypto.one_hot of the flattened indices in row tiles, int64 out; indices out of range run torch, which raises"
    wrapper = wrappers.wrapper(
        entry, f"pypto_{entry.op}", wrappers.signature(params), how, "input", wrappers.torch_call(entry, params),
        "classes is not None", body, (kernel, "_one_hot_classes"),
        prologue="classes = _one_hot_classes(input, num_classes)\n",
    )
    doc = "pypto.one_hot of [rows] index tiles into [rows, classes] int64 rows."
    return walks.one_hot_kernel(kernel, doc), CLASSES, wrapper


register(Family("one_hot", OneHotFields, rewrite, problem))
