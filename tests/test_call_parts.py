"""call_parts.parse: the tree libcst parses, assembled from shared parts where it can; call_text: what libcst prints for a call of them."""

import ast
from pathlib import Path

import libcst as cst
import pytest

import torch2pypto.translator.engine.regions as regions_module
from torch2pypto.translator.engine.call_parts import call_text, parse
from torch2pypto.translator.engine.translate import _Lines

TEXTS = [
    "f()", "f( )", "f (x)", "f(a, )", "f(a ,b ,  )", "f(*a, ** k)", "f(a = 1, b=-2)", "x.y (  a  ,  b  ,  )",
    "(a)(b)", "f(a)(b)", "a[1, 2](x, y)", "a.b (c) . d (e)", "x.transpose(1, 2).contiguous()",
    "f(x.y.z, x(1).y, (a).b, x[0].y, [a, b].index(c), {1: 2}.get(x), g(x)(y))",
    "f(True, None, x.None, not(x), -g(x), a*g(y), x if y else g(z))",
    "not(x).y(z)", "1.5.hex()", "f(x for x in y)", "sum(x for x in y, )", "f(a,,b)", "f(lambda a, b: a)",
    "f(x := 1)", "f('a, b', c)", "f(a,\n  b)", "f(a,  # why\n  b)", "f(a, \\\n b)", "f(\ta)",
    "a * b", "a   //   2", "a**b", "x.sum(-1) > 0", "a != b.c(d)", "-x", "- x.y", "~m", "(a + b) @ c", "x * y.z",
    "1.0 / x", "x[i] + 1", "a * -1", "a<-b", "--x", "a < b < c", "a + b * c", "x * 1e-5", "a if b else c", "not x",
    "f(x * y.z, -x.y, a == b, 2 * f(x), f(x) * 2)",
    "x[0]", "x.shape[-1]", "x[:, None]", "x[..., 0]", "x[:, :, 1::2].cos()", "x[a:b, ::2, :-1]", "x [1]", "x[ 1 ]",
    "x[a , b]", "x[a,]", "x[a, ]", "x[a : b]", "x[*a]", "x[a:b:c:d]", "x[]", "x[(1)]", "x(a)[b](c).d[e:f]",
    "(a)", "((a))", "( a )", "(a + b)", "(f(x)).sum", "(x for x in y)", "()", "( )", "(a]", "f(a]",
    "(a, b)", "(a,)", "(a,b)", "(a , b)", "( a, b )", "(a, b, )", "(*a, b)", "[a, b]", "[a]", "[]", "[a, *b]",
    "[x for x in y]", "{a: b}.get(a)", "{a, b}", "0", "00", "01", "1.", "1.5", "1e-5", "1_000", "x * -1", "a == -100",
    "a ** -b", "a - - b", "-a * -b", "a *- b", "True", "None.x", "x.None", "x.True", "True(x)", "not(x).y",
    "f('a, b', c)", "f(\"a(\", 'b]')", "x == 'a'", "'a' + x", "f(\"a\" \"b\")", "f(f'{x}')", "f(rb'x')",
    "f('''a''')", "f('it''s')", "'a'.join(x)", "f(\"a#b\")", "torch.einsum(\"bhwc,hkc->bhwk\", q, k)", "f('", "f(\"a)",
    "f((a), (b).c, (d.e),  # whole\n g.h)", "f(\n    a,\n    b,\n)", "f(\n    a, dim=\n    -1\n)", "f(a,  \n\n  \n    b\n)", "f(\n)", "f(a\n, b)", "f(*\nargs)", "(a\n    // b)",
    "a ==\n -1", "x[\n1]", "(\n a)", "(\n a, b)", "[a,\n b]", "f(a,\r\n b)", "f(a,\r b)", "f(a,\tb)", "a\nb", "\na", "a\n",
]


def _same(text):
    try:
        expected = cst.parse_expression(f"({text})")
    except Exception as exc:  # noqa: BLE001 - raising alike is the contract
        with pytest.raises(type(exc)):
            parse(text)
        return
    assert parse(text).deep_equals(expected), text


@pytest.mark.parametrize("text", TEXTS)
def test_parse_builds_libcsts_tree(text):
    _same(text)


def test_parse_builds_libcsts_tree_for_every_expression_of_a_module():
    source = Path(regions_module.__file__).read_text()
    lines = _Lines(source)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.expr) and not isinstance(node, ast.Starred):
            line, column, end_line, end_column = lines.span(node)
            _same(source[lines.offset(line, column):lines.offset(end_line, end_column)])


def test_parse_shares_the_parts_of_plain_calls_and_operators():
    assert parse("torch.rsqrt(hidden_states)").args[0].value is parse("torch.exp(hidden_states)").args[0].value
    assert parse("torch.rsqrt(hidden_states)").func.value is parse("torch.exp(hidden_states)").func.value
    assert parse("hidden_states * 2").left is parse("torch.exp(hidden_states)").args[0].value


def test_parse_shares_subscripts_tuples_lists_numbers_and_strings():
    call = parse("f(x[:, None], (a, b), [a, b], -1, 'a')")
    assert call.args[0].value is parse("x[:, None] * 2").left
    assert call.args[1].value is parse("g((a, b))").args[0].value
    assert call.args[2].value is parse("g([a, b])").args[0].value
    assert call.args[3].value is parse("g(-1)").args[0].value
    assert call.args[4].value is parse("x == 'a'").comparisons[0].comparator


def _printed_alike(text, newline="\n"):
    try:
        call = parse(text)
    except Exception:  # noqa: BLE001 - parse raises as libcst does: nothing to print
        return
    if isinstance(call, cst.Call):
        code = cst.Module([], default_newline=newline).code_for_node
        renamed = cst.Call(cst.Name("g"), [*call.args, cst.Arg(call.func, keyword=cst.Name("k"))])  # parts in new nodes
        for new in (call, renamed, cst.Call(cst.Attribute(call.func, cst.Name("y")), [cst.Arg(call), *call.args])):
            assert call_text(new, code) == code(new.with_changes(lpar=(), rpar=())), text


@pytest.mark.parametrize("text", TEXTS)
def test_call_text_is_what_libcst_prints(text):
    _printed_alike(text, "\r\n" if "\r\n" in text else "\r" if "\r" in text else "\n")


def test_call_text_is_what_libcst_prints_for_every_call_of_a_module():
    source = Path(regions_module.__file__).read_text()
    lines = _Lines(source)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            line, column, end_line, end_column = lines.span(node)
            _printed_alike(source[lines.offset(line, column):lines.offset(end_line, end_column)])
