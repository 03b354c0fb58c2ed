"""Generated definitions and the prelude every generated section shares.

Kernel templates live in :mod:`templates`, host wrappers in :mod:`wrappers`; the host helpers
are real functions in :mod:`torch2pypto.runtime`, whose source :func:`copied` reads (translating
imports neither torch nor pypto).
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import symtable
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Definition:
    """A named top-level block of generated source and the definitions it uses."""

    name: str
    source: str
    requires: tuple[str, ...] = ()
    imports: tuple[str, ...] = ()


@functools.lru_cache(maxsize=4096)
def filled(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "") -> str:
    """``textwrap.fill(text, width, ...)``, once per process: a region's docstrings recur in every
    copy of it. The key is every argument the text depends on."""
    return textwrap.fill(text, width, initial_indent=initial_indent, subsequent_indent=subsequent_indent)


def per_entry(build: Callable[..., T]) -> Callable[..., T]:
    """``build(entry, *args, **kwargs)``, computed once per table entry and arguments (hashable): an entry's
    kernels and wrapper depend on no call site, and building them for every call was a tenth of a
    translation. Entries are keyed by identity (they hold mappings, so they do not hash)."""
    built: dict[tuple, tuple[object, T]] = {}

    @functools.wraps(build)
    def once(entry, *args, **kwargs):
        key = (id(entry), args, tuple(kwargs.items()))
        hit = built.get(key)
        if hit is None or hit[0] is not entry:
            hit = built[key] = (entry, build(entry, *args, **kwargs))
        return hit[1]

    return once


IMPORTS = ("functools", "pypto", "torch")  # what every generated section imports
RUNTIME = "torch2pypto.runtime"
GENERATED = f"{RUNTIME}.generated"  # stubs of the kernel factories runtime helpers call
_RUNTIME_DIR = Path(__file__).resolve().parent.parent / "runtime"
_BUILTINS = frozenset(dir(builtins))
_COPIED: dict[str, str] = {}  # a runtime top-level name -> the definition that copies it


@dataclasses.dataclass(frozen=True)
class _Module:
    """A runtime module as text: its lines, top-level statements and names."""

    lines: list[str]
    statements: list[ast.stmt]
    defines: dict[str, int]  # top-level name -> index of the statement binding it
    imports: frozenset[str]  # modules bound by ``import m``
    runtime: frozenset[str]  # names imported from other runtime modules
    generated: frozenset[str]  # names imported from GENERATED: definitions generated per translation


@functools.cache
def _module(name: str) -> _Module:
    text = (_RUNTIME_DIR / f"{name}.py").read_text()
    tree = ast.parse(text)
    defines, imports, runtime, generated = {}, set(), set(), set()
    for i, statement in enumerate(tree.body):
        if isinstance(statement, ast.Import):
            imports.update(a.asname or a.name for a in statement.names)
        elif isinstance(statement, ast.ImportFrom):
            names = {a.asname or a.name for a in statement.names}
            if statement.module == GENERATED:
                generated |= names
            elif (statement.module or "").startswith(RUNTIME):
                runtime |= names
        else:
            defines.update(dict.fromkeys(_bound(statement), i))
    return _Module(text.splitlines(keepends=True), tree.body, defines, frozenset(imports), frozenset(runtime), frozenset(generated))


def _bound(statement: ast.stmt) -> list[str]:
    if isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
        return [statement.name]
    targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
    return [n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)]


def _global_names(table: symtable.SymbolTable) -> Iterator[str]:
    """The global names a block's statements and the functions in them use (a symbol table is
    ten times quicker than walking the syntax tree)."""
    top = table.get_type() == "module"
    yield from (s.get_name() for s in table.get_symbols() if s.is_referenced() and (top or s.is_global()))
    for child in table.get_children():
        yield from _global_names(child)


def copied(module: str, name: str, first: str | None = None, last: str | None = None) -> Definition:
    """Definition ``name`` copied from runtime ``module``: the source of its top-level statements
    from the one binding ``first`` through the one binding ``last`` (both default to ``name``),
    with the comment lines right above them. It requires the definitions that copy the other
    runtime names it uses (copied before it) and the generated ones it imports from GENERATED,
    and imports the modules it uses beyond IMPORTS."""
    m = _module(module)
    start, stop = m.defines[first or name], m.defines[last or name]
    statements = m.statements[start : stop + 1]
    begin = min(getattr(s, "decorator_list", None) and s.decorator_list[0].lineno or s.lineno for s in statements) - 1
    while begin and m.lines[begin - 1].startswith("#"):
        begin -= 1
    source = "".join(m.lines[begin : statements[-1].end_lineno])
    defined = {n for s in statements for n in _bound(s)}
    requires, imports = [], []
    for n in dict.fromkeys(n for n in _global_names(symtable.symtable(source, module, "exec")) if n not in defined):
        if n in m.imports:
            imports += [n] if n not in IMPORTS else []
        elif n in m.generated:  # a kernel factory generated beside it, of that name
            requires.append(n)
        elif n in m.defines or n in m.runtime:
            if n not in _COPIED:
                raise ValueError(f"{name} uses {n}: copy the runtime block that defines it first")
            requires.append(_COPIED[n])
        elif n not in _BUILTINS:
            raise ValueError(f"{name} uses {n}, which runtime module {module} neither defines nor imports")
    for n in defined:
        if _COPIED.setdefault(n, name) != name:
            raise ValueError(f"{n} is copied by both {_COPIED[n]} and {name}")
    return Definition(name, source, tuple(dict.fromkeys(requires)), tuple(imports))


PRELUDE = (
    copied("launch", "PYPTO_LAUNCHER", last="_UB_BYTES"),
    copied("launch", "_on_kernel_path"),
    copied("launch", "_launch"),
    copied("layout", "_as_rows"),
    copied("layout", "_padded_cols"),
    copied("layout", "_row_window"),
    copied("launch", "_annotated"),
    copied("tiles", "_tile_shape", "_VECTOR_PASSES"),
    copied("operands", "_kernel_operands"),
    copied("operands", "_kernel_number"),
    copied("layout", "_dense_order"),
    copied("layout", "_broadcast_rows", last="_result_rows"),
    copied("layout", "_in_layout_of"),
    copied("layout", "_in_place_ok"),
    copied("grad", "_TorchGradient"),
    copied("grad", "_with_torch_grad"),
    copied("grad", "_SelectedGradient"),
    copied("grad", "_with_selected_grad"),
    copied("grad", "_TorchGradients"),
    copied("grad", "_with_torch_grads"),
    copied("grad", "_HeldGradients"),
    copied("grad", "_with_held_grads"),
)
