"""Python's operators as the tensor method calls they are (the data model, not the op table).

``a + b`` runs ``a.__add__(b)``, or ``b.__radd__(a)`` when ``a`` is no tensor; ``2 < x`` runs
``x.__gt__(2)``; ``-x`` runs ``x.__neg__()``; ``x += y`` runs ``x.__iadd__(y)``; reading ``x[i]``
runs ``x.__getitem__(i)``. The table maps those methods (``torch.Tensor.__add__``) to its entries,
as it maps every other tensor method.
"""

from __future__ import annotations

import ast
import dataclasses

import libcst as cst

_BINARY = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
    ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "matmul", ast.BitAnd: "and", ast.BitOr: "or",
    ast.BitXor: "xor", ast.LShift: "lshift", ast.RShift: "rshift",
}  # fmt: skip
_UNARY = {ast.USub: "neg", ast.Invert: "invert"}
_COMPARE = {ast.Eq: ("eq", "eq"), ast.NotEq: ("ne", "ne"), ast.Lt: ("lt", "gt"), ast.LtE: ("le", "ge"),
            ast.Gt: ("gt", "lt"), ast.GtE: ("ge", "le")}  # (method, the right operand's reflected method)
OPERATORS = (ast.BinOp, ast.UnaryOp, ast.Compare, ast.AugAssign, ast.Subscript)  # the nodes that may be operator sites


_NO_ITEM = (ast.Slice, ast.Tuple, ast.Starred)  # x[a:b], x[:, i], x[*i]: no one index


@dataclasses.dataclass(frozen=True)
class Dispatch:
    """The method an operator calls: its name, the operand it is called on and the argument
    (None for a unary operator); ``in_place``: an augmented assignment's method, which mutates
    its receiver and leaves the name bound to it."""

    method: str
    receiver: ast.expr
    argument: ast.expr | None
    in_place: bool = False


def operands(node: ast.AST) -> tuple[ast.expr, ...]:
    """An operator node's operands, in the order written; () for a node that is no tensor operator
    (``not x``, ``+x``, ``a < b < c``, ``a is b``, an item written or of slices, ``x[i] = y``, ``x[:, i]``)."""
    kind = type(node)
    if kind is ast.Subscript:
        return (node.value, node.slice) if type(node.ctx) is ast.Load and type(node.slice) not in _NO_ITEM else ()
    if kind is ast.BinOp and type(node.op) in _BINARY:
        return node.left, node.right
    if kind is ast.UnaryOp and type(node.op) in _UNARY:
        return (node.operand,)
    if kind is ast.Compare and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        return node.left, node.comparators[0]
    if kind is ast.AugAssign and type(node.op) in _BINARY:
        return _read(node.target), node.value
    return ()


def _read(target: ast.expr) -> ast.expr:
    """An augmented assignment's target as the read it first is (``x`` of ``x += y``)."""
    if type(target) not in (ast.Name, ast.Attribute):
        return target
    read = ast.Name(target.id, ast.Load()) if type(target) is ast.Name else ast.Attribute(target.value, target.attr, ast.Load())
    return ast.copy_location(read, target)


def dispatch(node: ast.AST, sides: tuple[ast.expr, ...], left_is_tensor: bool) -> Dispatch:
    """The method Python runs for an operator node on its :func:`operands` ``sides``: on the
    first, or, where that is no tensor (``left_is_tensor`` False), the second's reflected one."""
    kind = type(node)
    if kind is ast.UnaryOp:
        return Dispatch(f"__{_UNARY[type(node.op)]}__", sides[0], None)
    if kind is ast.Subscript:
        return Dispatch("__getitem__", *sides)
    left, right = sides
    if kind is ast.Compare:
        method, reflected = _COMPARE[type(node.ops[0])]
    else:
        method = reflected = _BINARY[type(node.op)]
        reflected = "r" + reflected
    if left_is_tensor:
        in_place = kind is ast.AugAssign
        return Dispatch(f"__{'i' if in_place else ''}{method}__", left, right, in_place)
    return Dispatch(f"__{reflected}__", right, left)


def cst_operands(node: cst.CSTNode, reflected: bool) -> tuple[cst.BaseExpression, list[cst.BaseExpression]]:
    """The receiver and the arguments of an operator parsed by libcst (an expression, or an
    augmented assignment's statement), as :func:`dispatch` chose them; parentheses an operand
    needed as an operand (``(a + b) * c``) but not as an argument are dropped."""
    if isinstance(node, cst.UnaryOperation):
        return _bare(node.expression), []
    if isinstance(node, cst.Subscript):
        return _bare(node.value), [_bare(node.slice[0].slice.value)]
    if isinstance(node, cst.SimpleStatementLine):
        node = node.body[0]
        left, right = node.target, node.value
    elif isinstance(node, cst.Comparison):
        left, right = node.left, node.comparisons[0].comparator
    else:
        left, right = node.left, node.right
    left, right = _bare(left), _bare(right)
    return (right, [left]) if reflected else (left, [right])


_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float, cst.BinaryOperation,
          cst.UnaryOperation, cst.Comparison, cst.BooleanOperation)  # need no parentheses as an argument


def _bare(expr: cst.BaseExpression) -> cst.BaseExpression:
    """The operand without its parentheses, where it needs none as an argument and they hold no
    line break or comment."""
    if not expr.lpar or not isinstance(expr, _ATOMS):
        return expr
    spaces = [p.whitespace_after for p in expr.lpar] + [p.whitespace_before for p in expr.rpar]
    if not all(isinstance(w, cst.SimpleWhitespace) and "\\" not in w.value for w in spaces):
        return expr
    return expr.with_changes(lpar=[], rpar=[])


def keep_layout(new: cst.Call, old: cst.CSTNode) -> cst.Call:
    """``new`` with the line breaks and comments around the old operator kept, after its first argument."""
    if isinstance(old, cst.BinaryOperation):
        operator = old.operator
    elif isinstance(old, cst.Comparison):
        operator = old.comparisons[0].operator
    else:
        return new
    before, after = operator.whitespace_before, operator.whitespace_after
    if len(new.args) < 2 or isinstance(before, cst.SimpleWhitespace) and isinstance(after, cst.SimpleWhitespace):
        return new
    comma = cst.Comma(whitespace_before=before, whitespace_after=after)
    return new.with_changes(args=[new.args[0].with_changes(comma=comma), *new.args[1:]])
