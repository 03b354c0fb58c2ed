"""How an einsum of two operands is one matmul."""

import functools


@functools.cache
def _einsum_plan(equation, a_rank=None, b_rank=None):
    """How `torch.einsum(equation, a, b)` is one matmul, or why it is none (a str). The plan:
    (a's permutation to [ellipsis, batch, m, k], b's to [ellipsis, batch, k, n], a's and b's
    ellipsis dims, the batch, m and k counts, and the permutation of the matmul's [ellipsis,
    batch, m, n] into the equation's result). Without ranks (when translating) only the
    equation is checked."""
    left, comma, right = equation.replace(" ", "").partition("->")[0].partition(",")
    output = equation.replace(" ", "").partition("->")[2]
    if not comma or "," in right:
        return "einsum of one or of more than two operands: no single matmul"
    if "->" not in equation:  # implicit: the indices appearing once, alphabetically
        named = (left + right).replace(".", "")
        output = ("..." if "..." in left + right else "") + "".join(sorted(c for c in set(named) if named.count(c) == 1))
    terms = (left, right, output)
    if any(t.count(".") for t in terms) and not all(t.startswith("...") and t.count(".") == 3 for t in terms):
        return "an ellipsis that does not lead every term: not batch dims of one matmul"
    left, right, output = (t.replace(".", "") for t in terms)
    if any(len(set(t)) != len(t) for t in (left, right, output)) or not set(output) <= set(left + right):
        return "an index repeated in one term (a diagonal), or a result index of no operand: no matmul"
    alone = sorted((set(left) ^ set(right)) - set(output))
    if alone:
        return f"index {alone[0]!r} is summed within one operand: a reduction before the contraction"
    batch = [c for c in output if c in left and c in right]
    m, n = [c for c in output if c in left and c not in right], [c for c in output if c in right and c not in left]
    k = [c for c in left if c in right and c not in output]
    if a_rank is None:
        return None
    ell_a, ell_b = a_rank - len(left), b_rank - len(right)
    if min(ell_a, ell_b) < 0 or "..." not in terms[0] and (ell_a or ell_b):
        return "operands of other ranks than the equation names"
    a_order = [*range(ell_a), *(ell_a + left.index(c) for c in [*batch, *m, *k])]
    b_order = [*range(ell_b), *(ell_b + right.index(c) for c in [*batch, *k, *n])]
    ell = max(ell_a, ell_b)
    product = [*batch, *m, *n]  # the matmul's named dims, after the ellipsis
    out_order = [*range(ell), *(ell + product.index(c) for c in output)]
    return a_order, b_order, ell_a, ell_b, len(batch), len(m), len(k), out_order
