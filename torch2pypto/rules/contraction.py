"""The contraction family: ``torch.einsum`` of two operands as permutes and one cube matmul.

The equation (a literal, parsed when translating and again, cached, at run time) sorts each index
into batch (both operands and the result), m (the first operand and the result), n (the second and
the result) and k (both operands, summed). Each operand is permuted to [batch, m, k] / [batch, k,
n] and its m, n and k dims folded (views where the layout allows: the cube reads a transposed
operand in place; else the copy any matmul operand of that layout gets), the ``via`` entry's
matmul runs, and the result's dims are unfolded and permuted into the equation's order: a view,
as torch's own einsum returns. An ellipsis leading every term is more batch dims, broadcast as
torch does. Equations that are no single matmul stay torch with the reason: an index summed
within one operand, a repeated index (a diagonal), an ellipsis elsewhere, one or three operands.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from torch2pypto.rules import cube
from torch2pypto.rules.calls import literal, replacement, via_parts, wrapper_params
from torch2pypto.rules.codegen import Definition, copied, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.runtime.contraction import _einsum_plan
from torch2pypto.schema.entry import Entry, Fields, field
from torch2pypto.schema.family import Family, register


@dataclasses.dataclass(frozen=True)
class ContractionFields(Fields):
    """The table fields the contraction family reads."""

    via: str | None = field("the cube entry whose wrapper computes the folded matmul (matmul)")


PLAN = copied("contraction", "_einsum_plan")


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if [(p.name, p.kinds) for p in entry.params[:3]] != [("equation", ("str",)), ("a", ("Tensor",)), ("b", ("Tensor",))] \
            or len(entry.params) != 4 or not entry.params[3].variadic:
        return "a contraction's signature is (equation: str, a: Tensor, b: Tensor, *operands): three operands stay torch"
    via = entries.get(entry.fields.via or "")
    if via is None or via.family != "cube" or via.fields.rank or via.fields.args:
        return "via names the cube entry of torch.matmul's semantics (no rank, no args)"
    return None


def _check(equation: str) -> str | None:
    """Why the equation is no single matmul, by the helper translations carry."""
    return _einsum_plan(equation)


def rewrite(site: CallSite) -> Converted | Unsupported:
    equation = literal(site.args["equation"])
    if not isinstance(equation, str):
        return Unsupported("an equation known at run time only: einsum's is parsed when translating")
    why = _check(equation)
    if why is not None:
        return Unsupported(why)
    entry = site.entry
    return Converted(replacement(site, f"pypto_{entry.op}"), definitions(entry), f"pypto.{entry.pypto}", wrapper_params(entry))


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    via = entry.parts[entry.fields.via]
    wrapper = f'''\
def pypto_{entry.op}(equation, a, b):
    """torch.einsum on a PyPTO kernel.

    {entry.category}: the equation's batch, m, k and n indices as permutes and folds (views where
    the layout allows) around one pypto.matmul (pypto_{via.op}), its result unfolded and permuted
    into the equation's order. Equations of no single matmul, and operands not on the kernel path,
    run torch.einsum.
    """
    plan = _einsum_plan(equation, a.dim(), b.dim()) if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) else ""
    if isinstance(plan, str) or not _on_kernel_path(a, b):
        return torch.einsum(equation, a, b)
    a_order, b_order, ell_a, ell_b, batch, m, k, out_order = plan
    left, right = a.permute(a_order), b.permute(b_order)
    lead_a, lead_b = ell_a + batch, ell_b + batch
    m_shape, k_shape = left.shape[lead_a:lead_a + m], left.shape[lead_a + m:]
    n_shape = right.shape[lead_b + k:]
    if right.shape[lead_b:lead_b + k] != k_shape:  # a summed dim of size 1 that broadcasts
        return torch.einsum(equation, a, b)
    product = pypto_{via.op}(left.reshape(*left.shape[:lead_a], math.prod(m_shape), math.prod(k_shape)),
                           right.reshape(*right.shape[:lead_b], math.prod(k_shape), math.prod(n_shape)))
    return product.reshape(*product.shape[:-2], *m_shape, *n_shape).permute(out_order)
'''
    return (*cube.definitions(via), PLAN,
            Definition(f"pypto_{entry.op}", wrapper, ("_einsum_plan", "_on_kernel_path", f"pypto_{via.op}"), imports=("math",)))


register(Family("contraction", ContractionFields, rewrite, problem, parts=via_parts, accumulates="sum",
                reduced_length=lambda entry, shape, dim: math.prod(shape)))  # at most all of a's values
