"""scopes.walk: the engine's one tree walk must visit what ast.walk visits, in its order (the
order of a class's stored values and of fused regions' leaves follows it)."""

import ast
from pathlib import Path

import torch2pypto.translator.engine.regions as regions_module
from torch2pypto.translator.engine.scopes import walk


_SYMBOLS = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def test_walk_visits_ast_walks_nodes_in_its_order():
    """All of ast.walk's nodes but contexts and operator symbols (a node's ctx and op say them)."""
    source = Path(regions_module.__file__).read_text() + "\nmatch x:\n    case [a, *rest] if a: pass\n    case {'k': v, **kw}: pass\n"
    tree = ast.parse(source)
    assert walk(tree) == [n for n in ast.walk(tree) if not isinstance(n, _SYMBOLS)]
    statement = tree.body[-1]
    assert walk(statement) == [n for n in ast.walk(statement) if not isinstance(n, _SYMBOLS)]
