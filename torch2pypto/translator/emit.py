"""Place generated definitions in the module: one marked section after the imports.

A module translated before already has the section; only definitions it lacks are added (hand
tuning of existing kernels survives), so translating the output again changes nothing.
"""

from __future__ import annotations

import re
import sys
from typing import Iterable

import libcst as cst

from torch2pypto.rules.codegen import IMPORTS, PRELUDE, Definition

BEGIN = "# ---- torch2pypto: PyPTO kernels and host wrappers for the torch calls in this file ----"
END = "# ---- end of torch2pypto kernels ----"
_DEFINED = re.compile(r"^(?:def\s+(\w+)|(\w+)\s*=)", re.MULTILINE)


def section_lines(code: str) -> range:
    """1-based line numbers of an existing generated section (empty range if none)."""
    lines = code.splitlines()
    try:
        begin = lines.index(BEGIN)
    except ValueError:
        return range(0)
    end = lines.index(END, begin) if END in lines[begin:] else len(lines) - 1
    return range(begin + 1, end + 2)


def standalone(code: str) -> str:
    """The generated section of translated ``code`` as a module of its own.

    The section imports what it needs except what the file already imported at the top level
    (``import torch``); those imports come first.
    """
    lines = section_lines(code)
    section = "".join(code.splitlines(keepends=True)[lines.start - 1 : lines.stop - 1])
    module = cst.parse_module(code)
    needed = _module_imports(module) & (set(IMPORTS) | sys.stdlib_module_names)
    return "".join(f"import {m}\n" for m in sorted(needed)) + section


def ordered(definitions: Iterable[Definition]) -> list[Definition]:
    """Unique definitions, each after the ones it requires."""
    definitions = list(definitions)
    known = {d.name: d for d in (*PRELUDE, *definitions)}
    result: dict[str, Definition] = {}

    def add(name: str) -> None:
        if name in result:
            return
        for required in known[name].requires:
            add(required)
        result[name] = known[name]

    for d in definitions:
        add(d.name)
    prelude = [d for d in PRELUDE if d.name in result]
    return prelude + [d for d in result.values() if d not in prelude]


def insert(module: cst.Module, definitions: list[Definition]) -> str:
    """The module's code with ``definitions`` in its generated section (created if missing)."""
    code = module.code
    newline = module.default_newline
    lines = section_lines(code)
    existing = _defined_names(code, lines)
    new = [d for d in definitions if d.name not in existing]
    if not new:
        return code
    imports = _imports_needed(module, new, existing).replace("\n", newline)
    body = (newline * 3).join(d.source.rstrip("\n").replace("\n", newline) for d in new)
    if lines:
        return _extend(code, lines, imports, body, newline)
    head = f"{BEGIN}{newline}{imports}{newline}{newline}{newline}" if imports else f"{BEGIN}{newline}"
    section = f"{head}{body}{newline * 3}{END}{newline}"
    prefix = module.with_changes(body=module.body[: _import_block_end(module)], footer=()).code
    separator = newline * 2 if prefix.strip() else ""
    return prefix + separator + section + code[len(prefix) :]


def _extend(code: str, lines: range, imports: str, body: str, newline: str) -> str:
    parts = code.splitlines(keepends=True)
    begin, end = lines.start - 1, lines.stop - 2
    if parts[end].rstrip("\r\n") == END:
        parts.insert(end, f"{body}{newline * 3}")
    else:
        parts.append(f"{newline}{newline}{body}{newline * 3}{END}{newline}")
    if imports:
        parts.insert(begin + 1, imports + newline)
    return "".join(parts)


def _defined_names(code: str, lines: range) -> set[str]:
    if not lines:
        return set()
    text = "\n".join(code.splitlines()[lines.start - 1 : lines.stop - 1])
    return {a or b for a, b in _DEFINED.findall(text)} | set(re.findall(r"^import (\w+)$", text, re.M))


def _imports_needed(module: cst.Module, new: list[Definition], existing: set[str]) -> str:
    wanted = set(IMPORTS).union(*(d.imports for d in new)) if new else set()
    have = existing | _module_imports(module)
    missing = sorted(wanted - have, key=lambda m: (m not in sys.stdlib_module_names, m))
    stdlib = [f"import {m}" for m in missing if m in sys.stdlib_module_names]
    other = [f"import {m}" for m in missing if m not in sys.stdlib_module_names]
    return "\n".join(stdlib + ([""] if stdlib and other else []) + other)


def _module_imports(module: cst.Module) -> set[str]:
    """Modules imported under their own name at the top level (``import torch``)."""
    names = set()
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Import):
                    names |= {a.evaluated_name for a in small.names if a.asname is None}
    return names


def _import_block_end(module: cst.Module) -> int:
    """Index after the leading docstring and import statements."""
    end = 0
    for i, statement in enumerate(module.body):
        if not isinstance(statement, cst.SimpleStatementLine):
            break
        small = statement.body
        docstring = i == 0 and len(small) == 1 and isinstance(small[0], cst.Expr) and isinstance(small[0].value, cst.SimpleString)
        if not (docstring or all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in small)):
            break
        end = i + 1
    return end
