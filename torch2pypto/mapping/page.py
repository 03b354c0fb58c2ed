"""docs/table.md: the op table's fields per family, written from the families' Fields dataclasses.

``python -m torch2pypto.mapping.page`` rewrites the page; tests/test_families.py fails when it is
stale, so the page cannot drift from the schemas it documents.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import typing

import torch2pypto.mapping  # noqa: F401  (loads the families, which register themselves)
from torch2pypto.schema.entry import describe
from torch2pypto.schema.family import FAMILIES, Family

PATH = pathlib.Path(__file__).parent.parent.parent / "docs" / "table.md"
HEADER = """\
# The op table's fields per family

Written by `python -m torch2pypto.mapping.page` from each family's fields dataclass (the `Fields`
class of its module in torch2pypto/rules/); tests/test_families.py fails when this page is
stale. An entry of torch2pypto/mapping/ops.toml gives the fields every entry has (described in
that file's header) and those of its `family` below; a field of another family fails to load,
and so does a value of the wrong type. Valid and invalid entries of each family are in
tests/families/.
"""


def page() -> str:
    """The page's text, families by name."""
    return HEADER + "".join(_section(FAMILIES[name]) for name in sorted(FAMILIES))


def _section(family: Family) -> str:
    module = sys.modules[family.rewrite.__module__]
    summary = (module.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    text = f"\n## {family.name}\n\n{summary} (`{module.__name__}`)\n\n"
    fields = dataclasses.fields(family.fields)
    if not fields:
        return text + "No fields of its own.\n"
    hints = typing.get_type_hints(family.fields)
    rows = [f"| `{f.name}` | {describe(hints[f.name])} | {_default(f)} | {f.metadata['doc']} |\n" for f in fields]
    return text + "| field | value | default | meaning |\n|---|---|---|---|\n" + "".join(rows)


def _default(field: dataclasses.Field) -> str:
    """The default in TOML's words: none (absent), false, [] or {}."""
    if field.default_factory is not dataclasses.MISSING:
        return "{}"
    return {None: "none", False: "false", (): "[]"}.get(field.default, f"`{field.default!r}`")


if __name__ == "__main__":
    PATH.write_text(page(), encoding="utf-8")
