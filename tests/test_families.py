"""The family contract: one registry below the loader and the rules, typed fields per family,
and each family's valid and invalid entry fixtures (tests/families/<family>.toml)."""

import ast
import pathlib
import tomllib

import pytest

from torch2pypto.mapping import TableError, build_table, load_table
from torch2pypto.schema.family import FAMILIES

ROOT = pathlib.Path(__file__).parent.parent
PACKAGE = ROOT / "torch2pypto"
FIXTURES = pathlib.Path(__file__).parent / "families"


def _imports(path: pathlib.Path) -> set[str]:
    """The torch2pypto modules a file imports at run time (not for type checking only)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            node.body = []
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n for n in names if n.startswith("torch2pypto")}


def test_the_schema_imports_neither_the_loader_nor_the_rules_and_the_rules_not_the_loader():
    for path in (PACKAGE / "schema").glob("*.py"):
        assert {n for n in _imports(path) if not n.startswith("torch2pypto.schema")} == set(), path.name
    for path in (PACKAGE / "rules").glob("*.py"):
        assert not {n for n in _imports(path) if n.startswith("torch2pypto.mapping")}, path.name


def test_every_entry_holds_its_familys_fields():
    for entry in load_table().entries.values():
        expected = FAMILIES[entry.family].fields if entry.family else type(entry.fields)
        assert type(entry.fields) is expected, entry.op


def _fixtures(name: str) -> dict:
    return tomllib.loads((FIXTURES / f"{name}.toml").read_text())


def _cases():
    for name in sorted(FAMILIES):
        for case, body in _fixtures(name).get("invalid", {}).items():
            yield pytest.param(name, case, body, id=f"{name}: {case}")


def test_each_family_has_valid_and_invalid_fixtures():
    assert sorted(p.stem for p in FIXTURES.glob("*.toml")) == sorted(FAMILIES)
    for name in FAMILIES:
        fixtures = _fixtures(name)
        assert fixtures.get("valid") and fixtures.get("invalid"), name
        assert {e.get("family") for e in fixtures["valid"].values()} >= {name}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_valid_fixtures_load(name):
    build_table(_fixtures(name)["valid"])


@pytest.mark.parametrize("name, case, body", _cases())
def test_invalid_fixture_fails_to_load_with_its_message(name, case, body):
    """An invalid fixture loads beside its family's valid ones (so that it may name them) under its
    ``op`` (the case's name otherwise) and fails with ``error`` in the message."""
    body = dict(body)
    error, op = body.pop("error"), body.pop("op", case)
    valid = {k: v for k, v in _fixtures(name)["valid"].items() if k != op}
    with pytest.raises(TableError) as raised:
        build_table({**valid, op: body})
    assert error in str(raised.value)
