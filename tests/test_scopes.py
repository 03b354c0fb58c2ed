"""scopes.walk: the engine's one tree walk must visit what ast.walk visits, in its order (the
order of a class's stored values and of fused regions' leaves follows it)."""

import ast
from pathlib import Path

import torch2pypto.translator.engine.regions as regions_module
from torch2pypto.translator.engine.scopes import walk


def test_walk_visits_ast_walks_nodes_in_its_order():
    source = Path(regions_module.__file__).read_text() + "\nmatch x:\n    case [a, *rest] if a: pass\n    case {'k': v, **kw}: pass\n"
    tree = ast.parse(source)
    assert walk(tree) == list(ast.walk(tree))
    statement = tree.body[-1]
    assert walk(statement) == list(ast.walk(statement))
