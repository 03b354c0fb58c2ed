"""Which bindings reach a read (engine/flow.py): each case marks the read with ``seen(x)`` and
lists the lines of the bindings that may reach it (0: the parameter)."""

import ast
import textwrap

import pytest

from torch2pypto.translator.engine.scopes import ModuleIndex

CASES = [
    # straight line: the nearest assignment kills the ones before it
    ("x = 1\nx = 2\nseen(x)", [2]),
    ("x = x + 1\nseen(x)", [1]),
    ("seen(x)\nx = 1", [0]),  # only the parameter came before
    ("x = f(seen(x))", [0]),  # an assignment binds after its value
    ("a, x = f()\nseen(x)", [1]),
    ("x: int = 1\nx = 2\nseen(x)", [2]),
    ("x = 1\nx += 2\nseen(x)", [2]),  # an augmented assignment's value (x + 2) reads what came before
    ("x = 1\nx: int\nseen(x)", [1, 2]),  # a bare annotation binds nothing: what came before reaches
    ("x = 1\nif c:\n    x += 2\n    seen(x)", [3]),  # in an enclosing block too
    ("for x in r:\n    x += 1\n    seen(x)", [2]),
    ("x += 1\nseen(x)", [1]),
    # after an if: what ends each branch; a branch that binds nothing passes on what came before
    ("x = 1\nif c:\n    x = 2\nseen(x)", [1, 3]),
    ("if c:\n    x = 2\nelse:\n    x = 3\nseen(x)", [2, 4]),
    ("x = 1\nif c:\n    x = 2\n    x = 3\nelif d:\n    x = 5\nseen(x)", [1, 4, 6]),
    ("x = 1\nx = 2\nif c:\n    if d:\n        x = 5\n    else:\n        x = 7\nseen(x)", [2, 5, 7]),
    ("if c:\n    x = 2\nseen(x)", [0, 2]),  # the parameter passes through
    ("x = 1\nif c:\n    raise E\nseen(x)", [1]),
    ("x = 1\nif c:\n    x: int\nseen(x)", [1, 3]),
    # conditional bindings before the read: every binding
    ("x = 1\nif c:\n    for i in r:\n        x = 4\nseen(x)", [0, 1, 4]),
    ("x = 1\nif c:\n    x = 3\nelse:\n    try:\n        x = 6\n    except E:\n        pass\nseen(x)", [0, 1, 3, 6]),
    ("try:\n    x = 1\nexcept E:\n    pass\nseen(x)", [0, 2]),
    # a read in a branch sees what comes before it on its way, not the other branch or what follows
    ("if c:\n    x = 2\n    seen(x)\nelse:\n    x = 3", [2]),
    ("x = 1\nif c:\n    seen(x)\n    x = 2", [1]),
    ("x = 1\nwith m():\n    seen(x)\n    x = 2", [1]),
    ("x = 1\ntry:\n    seen(x)\n    x = 2\nexcept E:\n    x = 3", [1]),
    ("x = 1\ntry:\n    x = 2\nexcept E:\n    seen(x)", [0, 1, 3]),
    ("with m() as x:\n    seen(x)", [0, 1]),
    # loops: a binding later in the body reaches the next pass
    ("x = 1\nfor i in r:\n    seen(x)\n    x = 2", [0, 1, 4]),
    ("x = 1\nwhile c:\n    seen(x)\n    x = 2", [0, 1, 4]),
    ("x = 1\nwhile seen(x):\n    x = 2", [0, 1, 3]),
    ("x = 1\nfor i in r:\n    x = 2\n    seen(x)", [3]),
    ("for x in r:\n    seen(x)\n    x = 2", [1]),  # the target is bound again before each pass
    ("x = 1\nfor x in seen(x):\n    pass", [1]),
    ("x = 1\nfor x in r:\n    pass\nseen(x)", [0, 1, 2]),
    # comprehensions run in place; lambdas, generators and nested functions later
    ("x = 1\ny = [seen(x) for i in r]\nx = 2", [1]),
    ("x = 1\ng = lambda: seen(x)\nx = 2", [0, 1, 3]),
    ("x = 1\ng = (seen(x) for i in r)\nx = 2", [0, 1, 3]),
    ("x = 1\ndef g():\n    return seen(x)\nx = 2", [0, 1, 4]),
    # a walrus binds inside an expression: every binding
    ("x = 1\nif (x := 2):\n    pass\nseen(x)", [0, 1, 2]),
]


def reached(body: str) -> list[int]:
    code = "def f(x):\n" + textwrap.indent(body, "    ") + "\n"
    tree = ast.parse(code)
    index = ModuleIndex(tree)
    read = next(n.args[0] for n in ast.walk(tree) if type(n) is ast.Call and getattr(n.func, "id", "") == "seen")
    return sorted(b.node.lineno - 1 if b.kind != "parameter" else 0 for b in index.bindings(read))


@pytest.mark.parametrize("body, expected", CASES, ids=[c[0].replace("\n", "; ") for c in CASES])
def test_the_bindings_that_reach_a_read(body, expected):
    assert reached(body) == expected
