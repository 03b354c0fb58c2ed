"""The family contract: one registry below the loader and the rules, typed fields per family,
and each family's valid and invalid entry fixtures (tests/families/<family>.toml)."""

import ast
import pathlib
import tomllib

import pytest

from torch2pypto.mapping import TableError, build_table, installed, load_table, page
from torch2pypto.schema.family import FAMILIES, never_fuses

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


def test_never_fuses_names_the_families_without_a_fuse_hook():
    load_table()  # the rules register the families
    assert never_fuses(None)
    assert {name for name in FAMILIES if not never_fuses(name)} == {"cast", "composite", "elementwise", "movement", "reduction"}


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
def test_valid_fixtures_load_and_agree_with_torch_and_pypto(name):
    table = build_table(_fixtures(name)["valid"])
    pytest.importorskip("pypto")
    assert installed.problems(table) == []


@pytest.mark.parametrize("name, case, body", _cases())
def test_invalid_fixture_fails_to_load_with_its_message(name, case, body):
    """An invalid fixture loads beside its family's valid ones (so that it may name them) under its
    ``op`` (the case's name otherwise) and fails with ``error`` in the message; one marked
    ``installed`` loads, and the checks against torch and pypto report ``error``."""
    body = dict(body)
    error, op, against_packages = body.pop("error"), body.pop("op", case), body.pop("installed", False)
    valid = {k: v for k, v in _fixtures(name)["valid"].items() if k != op}
    if against_packages:
        pytest.importorskip("pypto")
        assert any(error in p for p in installed.problems(build_table({**valid, op: body}))), error
        return
    with pytest.raises(TableError) as raised:
        build_table({**valid, op: body})
    assert error in str(raised.value)


def test_the_table_agrees_with_the_installed_torch_and_pypto():
    pytest.importorskip("pypto")
    assert installed.problems(load_table()) == []


def test_the_fields_page_is_current():
    """docs/table.md is written from the schemas: python -m torch2pypto.mapping.page rewrites it."""
    assert page.PATH.read_text(encoding="utf-8") == page.page()


def test_verify_reports_a_used_entry_that_disagrees_with_torch_or_pypto(monkeypatch):
    """--verify checks the entries its translation uses (here exp, its pypto op misspelt)."""
    pytest.importorskip("pypto")
    from torch2pypto.translator.engine.translate import translate_source
    from torch2pypto.translator.verification import verify

    raw = _fixtures("elementwise")["valid"]
    wrong = build_table({**raw, "exp": {**raw["exp"], "pypto": "expm11"}})
    monkeypatch.setattr(verify, "load_table", lambda: wrong)
    translation = translate_source("import torch\n\n\ndef f(x: torch.Tensor):\n    return torch.exp(x)\n", table=wrong)
    assert verify._wrong_entries(translation) == ["exp: pypto.expm11 does not exist in pypto"]
