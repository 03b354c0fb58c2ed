"""The kernel IR's printer: each node's spelling, nesting, and a factory's frame."""

import ast

import pytest

from torch2pypto.rules import kernel_ir as ir
from torch2pypto.rules.steps import Apply, Step, render, statements


def test_expressions_spell_calls_lists_and_keywords_in_order():
    view = ir.pypto("view", "x", ir.items("rows", "cols"), ir.items("r", "0"), valid_shape="valid", name='"v"')
    assert ir.expression(view) == 'pypto.view(x, [rows, cols], [r, 0], valid_shape=valid, name="v")'
    assert ir.expression(ir.call("f")) == "f()"
    assert ir.expression(ir.items()) == "[]"
    assert ir.expression(ir.pypto("cast", ir.pypto("cast", "t", "dtype"), "pypto.DT_FP32")) == "pypto.cast(pypto.cast(t, dtype), pypto.DT_FP32)"


def test_statements_nest_by_four_spaces_with_comments():
    tree = ir.loop(
        "i", ir.pypto("loop", "n", name='"row_tiles"'),
        ir.Assign("r", "i * rows", "a comment"),
        ir.If("r > 0", (ir.Do(ir.pypto("assemble", "t", ir.items("r", "0"), "out")),), (ir.Comment("nothing"),), "tail"),
        comment="loop",
    )
    assert ir.source(tree, 1) == (
        '    for i in pypto.loop(n, name="row_tiles"):  # loop\n'
        "        r = i * rows  # a comment\n"
        "        if r > 0:  # tail\n"
        "            pypto.assemble(t, [r, 0], out)\n"
        "        else:\n"
        "            # nothing\n"
    )


def test_raw_text_is_indented_but_its_blank_lines_are_not():
    assert ir.source([ir.Raw("a = 1\n\nif a:\n    b = 2\n")], 2) == "        a = 1\n\n        if a:\n            b = 2\n"
    assert ir.source(ir.Raw(""), 3) == ""


def test_a_factory_prints_its_frame_and_parses():
    factory = ir.Factory(
        "f_kernel", ("dtype", "cols"), "The doc.", (ir.Assign("rows", "8"),), ir.pypto("frontend.jit"),
        (ir.Param("x", ir.pypto("Tensor", ir.items("pypto.DYNAMIC", "cols"), "dtype")), ir.Param("out", "T")),
        (ir.Assign("n", "x.shape[0]"),), "why",
    )
    text = ir.source(factory)
    assert text == (
        "@functools.cache\n"
        "def f_kernel(dtype, cols):\n"
        '    """The doc."""\n'
        "    rows = 8\n"
        "\n"
        "    @pypto.frontend.jit()  # why\n"
        "    @_annotated(locals())\n"
        "    def kernel(\n"
        "        x: pypto.Tensor([pypto.DYNAMIC, cols], dtype),\n"
        "        out: T,\n"
        "    ):\n"
        "        n = x.shape[0]\n"
        "\n"
        "    return kernel\n"
    )
    ast.parse(text)


def test_other_objects_are_refused():
    with pytest.raises(TypeError, match="not a kernel IR node"):
        ir.source(["x = 1\n"])


def test_steps_print_through_the_ir():
    program = [Apply("m", Step("amax", (("dim", "-1"), ("keepdim", "True"))), ("x_tile",)), Apply("y", Step("sub"), ("x_tile", "m"))]
    assert render(program) == "m = pypto.amax(x_tile, dim=-1, keepdim=True)\ny = pypto.sub(x_tile, m)\n"
    assert ir.source(statements(program)) == render(program)


def test_casts_go_through_fp32_between_bf16_and_fp16_only():
    from torch2pypto.rules.templates import FP32, casting

    assert casting("t", "dtype", "dtype") == ((), ())
    setup, store = casting("t", FP32, "out_dtype")
    assert setup == () and ir.source(store) == "if pypto.DT_FP32 != out_dtype:\n    t = pypto.cast(t, out_dtype)\n"
    setup, store = casting("t", "dtype", "out_dtype")
    assert ir.source(setup) == "t_via_fp32 = {dtype, out_dtype} == {pypto.DT_BF16, pypto.DT_FP16}\n"
    assert ir.source(store) == (
        "if t_via_fp32:\n    t = pypto.cast(t, pypto.DT_FP32)\n"
        "if dtype != out_dtype:\n    t = pypto.cast(t, out_dtype)\n"
    )


def test_an_else_takes_its_own_comment():
    tree = ir.If("a", (ir.Assign("b", "1"),), (ir.Assign("b", "2"),), "if", "else")
    assert ir.source(tree) == "if a:  # if\n    b = 1\nelse:  # else\n    b = 2\n"


def test_continuation_lines_of_an_expression_are_indented_with_its_statement():
    tree = ir.when("x", ir.Assign("y", "(a\n     + b)", "sum"))
    assert ir.source(tree, 1) == "    if x:\n        y = (a\n             + b)  # sum\n"


def test_a_call_of_lines_aligns_its_arguments_after_the_parenthesis():
    view = ir.pypto("view", "o", ir.items("t", "d"))
    wrapped = ir.Call("pypto.div", (view, ir.pypto("view", "l")), lines=True)
    assert ir.source(ir.Assign("result", wrapped), 1) == (
        "    result = pypto.div(pypto.view(o, [t, d]),\n"
        "                       pypto.view(l))\n"
    )
    # nested: aligned where the inner call starts, after the arguments before it
    outer = ir.call("f", "a", ir.Call("g", ("b", "c"), (("k", "d"),), lines=True))
    assert ir.expression(outer) == "f(a, g(b,\n       c,\n       k=d))"
    ast.parse(ir.source(ir.Do(outer)))


def test_blocked_templates_print_their_walk():
    from torch2pypto.rules import templates

    walk = templates.block_walk("out", [*templates.block_views(["x"], False), *templates.block_assembles([("x_tile", "out")])], False)
    text = ir.source(walk, 2)
    assert "        else:  # one row for the block's rows (a broadcast): read once, spread on chip\n" in text
    assert "                x_tile = pypto.expand_clone(x_tile, [rows, cols], valid_shape=valid)\n" in text
    assert "pypto.expand_clone(x_tile, [rows, cols])\n" in ir.source(templates.block_views(["x"], True))
    ast.parse(ir.source(templates.block_maps(["x", "y"])))


def test_an_activation_is_statements_on_the_tile_it_is_given():
    from torch2pypto.rules import gated

    silu = ir.source(gated.activation("silu", "result"))
    assert silu == "result = pypto.div(result, pypto.add(pypto.exp(pypto.mul(result, -1.0)), 1.0))  # silu: x * sigmoid(x)\n"
    gelu = ir.source(gated.activation("gelu", "gate"), 1)
    assert gelu.endswith("    gate = pypto.sub(pypto.relu(gate), pypto.mul(pypto.mul(size, 0.5), erfc))  # gelu\n")
    assert gelu.count("poly = ") == 4 and "result" not in gelu
    for name in gated.ACTIVATIONS:
        ast.parse(ir.source(gated.activation(name, "x")))


def test_row_tile_steps_print_the_loop_the_region_kernels_share():
    """fused_kernel's, prologue's and region_epilogue's row-tile loop: r and valid per tile of
    max_rows (none for whole tiles), the loads of rows and vectors, the program, the stores."""
    from torch2pypto.rules.tile_program import Operand, Output, Param, Program, row_tile_loop, row_tile_steps, row_tile_stores

    program = Program()
    program.body.append("y = pypto.mul(x_tile, w_tile)\n")
    rows, vectors = [Param("x", "rows", "x")], [Param("w", "vector", "w")]
    loop = row_tile_loop("x", *row_tile_steps(program, rows, vectors), *row_tile_stores([Output("y", Operand("y", "rows", "dtype"))]))
    assert ir.source(loop) == (
        "m = x.shape[0]\n"
        'for i in pypto.loop((m + max_rows - 1) // max_rows, name="row_tiles", unroll_list=[1]):\n'
        "    r = i * max_rows\n"
        "    valid = [(m - r).min(max_rows), cols]\n"
        "    x_tile = pypto.view(x, [max_rows, width], [r, 0], valid_shape=valid)\n"
        "    w_tile = pypto.view(w, [1, width], [0, 0], valid_shape=[1, cols])\n"
        "    y = pypto.mul(x_tile, w_tile)\n"
        "    pypto.assemble(y, [r, 0], y_out)\n"
    )
    whole = ir.source(row_tile_loop("x", *row_tile_steps(program, rows, [], whole=True), count="n", whole=True, comment="why"))
    assert "    r = (n - rows).min(i * rows)  # a whole tile: the last one overlaps its predecessor\n" in whole
    assert "x_tile = pypto.view(x, [max_rows, width], [r, 0])\n" in whole and "valid" not in whole
    assert '"row_tiles", unroll_list=[1]):  # why\n' in whole
