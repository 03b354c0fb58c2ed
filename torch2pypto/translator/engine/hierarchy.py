"""What other files declare, found by reading (never importing) them: which classes are
``nn.Module``s, what methods and functions return, what class fields and annotated names hold.

A name imported (``from ...modeling_utils import PreTrainedModel``) is looked up in the file the
import names: relative imports up to the package's root, absolute ones of the file's own top
package found on disk beside it, even when those files are not part of the run. Each file read
is parsed once per process and reduced to a summary: its classes' bases, methods' return
annotations and annotated fields, its functions' return annotations, its annotated names and its
imports. Classes whose files are not on disk can be named as module bases (``module-bases``), by
their absolute dotted name.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import os
from pathlib import Path
from typing import Callable

from torch2pypto.mapping.facts import load_facts

_MODULE_CLASSES = load_facts().module_classes
_BUILTINS = frozenset(dir(builtins))
_MAX_HOPS = 50  # classes followed for one question before giving up (not a module)


@dataclasses.dataclass(frozen=True)
class _Summary:
    """A file reduced to what questions about its names need."""

    classes: dict[str, tuple[str, ...]]  # class -> its bases as dotted source text
    returns: dict[str, dict[str, ast.expr]]  # class -> method -> its return annotation
    fields: dict[str, dict[str, ast.expr]]  # class -> field annotated in its body -> the annotation
    functions: dict[str, ast.expr]  # function -> its return annotation
    annotations: dict[str, ast.expr]  # annotated name (X: T = ...) -> its annotation
    imports: dict[str, str]  # name -> qualified name it imports (relative ones keep their dots)
    stars: tuple[str, ...]  # modules of `from M import *`


Declared = tuple[ast.expr, Callable[[ast.expr], set[str]]]  # an annotation, with what its names import where written


def _answered(question):
    """A question of :class:`Hierarchy` answered once per instance (one file's translation): each
    answer stats the files it follows, and a module asks the same names again and again."""

    @functools.wraps(question)
    def answered(self, *args):
        key = (question.__name__, *args)
        if key not in self._answers:
            self._answers[key] = question(self, *args)
        return self._answers[key]

    return answered


class Hierarchy:
    """Answers for the names one file imports: is this class an nn.Module, what does it declare."""

    def __init__(self, path: str | os.PathLike | None, module_bases: frozenset[str] = frozenset()) -> None:
        """``path``: the file whose imports are asked about (None or not a file: no other file is read)."""
        file = Path(path).resolve() if path and os.path.isfile(path) else None
        self._file = file
        self._modules = _MODULE_CLASSES | module_bases
        self._known: dict[tuple[frozenset, Path | None, str], bool] = {}
        self._answers: dict[tuple, object] = {}
        self._located: dict[tuple[Path | None, str], tuple[Path, str] | None] = {}
        self._summaries: dict[Path, _Summary | None] = {}

    @_answered
    def is_module(self, qualified: str) -> bool:
        """Whether the class ``qualified`` (as this file imports it) derives from ``nn.Module``."""
        return self._qualified(self._file, qualified, set(), self._modules)

    @_answered
    def derives(self, qualified: str, roots: frozenset[str]) -> bool:
        """Whether the class ``qualified`` (as this file imports it) is or derives from one of ``roots``
        (absolute dotted names)."""
        return self._qualified(self._file, qualified, set(), roots)

    @_answered
    def method_returns(self, qualified: str, method: str) -> Declared | None:
        """The return annotation of ``method`` of the class ``qualified`` (as this file imports it)
        or of its bases, read in the file that defines it, with what its names there import."""
        target = self._locate(self._file, qualified)
        return self._member(*target, "returns", method, set()) if target else None

    @_answered
    def field(self, qualified: str, name: str) -> Declared | None:
        """The annotation of the field ``name`` that the class ``qualified`` (as this file imports
        it) or one of its bases declares in its body (``pooler_output: torch.FloatTensor | None``)."""
        target = self._locate(self._file, qualified)
        return self._member(*target, "fields", name, set()) if target else None

    @_answered
    def function_returns(self, qualified: str) -> Declared | None:
        """The return annotation of the function ``qualified`` (as this file imports it; an
        undecorated one), read in the file that defines it."""
        return self._declared(qualified, "functions")

    @_answered
    def declared(self, qualified: str) -> Declared | None:
        """The annotation of the module-level name ``qualified`` (``ALL_ATTENTION_FUNCTIONS:
        AttentionInterface = ...``), read in the file that defines it."""
        return self._declared(qualified, "annotations")

    def _declared(self, qualified: str, field: str) -> Declared | None:
        target = self._locate(self._file, qualified)
        found = self._defining(target, set()) if target else None
        if found is None:
            return None
        file, summary, name = found
        annotation = getattr(summary, field).get(name)
        return (annotation, functools.partial(_names_in, file, summary)) if annotation is not None else None

    def _member(self, file: Path, name: str, field: str, member: str, seen: set) -> Declared | None:
        """What the class ``name`` of ``file`` or one of its bases declares of ``member`` in its
        summary's ``field`` (method returns, field annotations)."""
        found = self._defining((file, name), seen)
        if found is None or found[2] not in found[1].classes:
            return None
        file, summary, name = found
        found = getattr(summary, field)[name].get(member)
        if found is not None:
            return found, functools.partial(_names_in, file, summary)
        for base in summary.classes[name]:
            head, dot, rest = base.partition(".")
            if head in summary.imports:
                target = self._locate(file, summary.imports[head] + dot + rest)
            else:
                target = (file, head) if not rest else None
            found = self._member(*target, field, member, seen) if target else None
            if found is not None:
                return found
        return None

    @_answered
    def absolute(self, qualified: str) -> str:
        """The absolute dotted name of a name this file imports (``...utils.X`` -> ``transformers.utils.X``)."""
        return (_absolute(self._file, qualified) if qualified.startswith(".") else None) or qualified

    # --- following names across files ----------------------------------------------------

    def _qualified(self, file: Path | None, qualified: str, seen: set, roots: frozenset) -> bool:
        if qualified in roots or _absolute(file, qualified) in roots:
            return True
        target = self._locate(file, qualified)
        return target is not None and self._class(*target, seen, roots)

    def _class(self, file: Path, name: str, seen: set, roots: frozenset) -> bool:
        key = (roots, file, name)
        if key in self._known:
            return self._known[key]
        if key in seen or len(seen) > _MAX_HOPS:
            return False
        seen.add(key)
        summary = self._summary(file)
        if summary is None:
            answer = False
        elif name in summary.classes:
            answer = any(self._base(file, summary, base, seen, roots) for base in summary.classes[name])
        elif name in summary.imports:
            answer = self._qualified(file, summary.imports[name], seen, roots)
        else:
            answer = any(self._qualified(file, f"{m}.{name}" if not m.endswith(".") else m + name, seen, roots) for m in summary.stars)
        self._known[key] = answer
        return answer

    def _base(self, file: Path, summary: _Summary, base: str, seen: set, roots: frozenset) -> bool:
        head, dot, rest = base.partition(".")
        if head in summary.imports:
            return self._qualified(file, summary.imports[head] + dot + rest, seen, roots)
        if not rest and head in summary.classes:
            return self._class(file, head, seen, roots)
        return False

    def _defining(self, target: tuple[Path, str] | None, seen: set) -> tuple[Path, _Summary, str] | None:
        """The file that defines the name ``target`` names in its file (following re-exports), that
        file's summary, and the name there."""
        while target is not None:
            file, name = target
            summary = self._summary(file)
            if summary is None or target in seen or len(seen) > _MAX_HOPS:
                return None
            seen.add(target)
            if name not in summary.imports:
                return file, summary, name
            target = self._locate(file, summary.imports[name])
        return None

    # --- the disk, read once per translation --------------------------------------------

    def _locate(self, file: Path | None, qualified: str) -> tuple[Path, str] | None:
        key = (file, qualified)
        if key not in self._located:
            self._located[key] = _locate(file, qualified)
        return self._located[key]

    def _summary(self, file: Path) -> _Summary | None:
        if file not in self._summaries:
            self._summaries[file] = _summary(file)
        return self._summaries[file]


@functools.lru_cache(maxsize=4096)
def _package_root(file: Path) -> Path | None:
    """The outermost folder of the file's package (each folder up to it has an ``__init__.py``),
    found once per process and file (its parent, a new path, is slow to hash)."""
    return _root_of(file.parent)


@functools.lru_cache(maxsize=4096)
def _root_of(folder: Path) -> Path | None:
    """The outermost package folder at or above ``folder``, found once per process (every name
    a file imports asks it, a stat per folder up to the root)."""
    root = None
    while (folder / "__init__.py").is_file():
        root = folder
        if folder.parent == folder:
            break
        folder = folder.parent
    return root


def _split(file: Path | None, qualified: str) -> tuple[Path, list[str]] | None:
    """The folder an import's dotted name starts from, and the name's parts after it."""
    if file is None:
        return None
    stripped = qualified.lstrip(".")
    level = len(qualified) - len(stripped)
    parts = stripped.split(".") if stripped else []
    root = _package_root(file)
    if root is None:
        return None
    if level:
        folder = file.parent
        for _ in range(level - 1):
            if folder == root:
                return None  # beyond the top-level package
            folder = folder.parent
        return folder, parts
    if parts and parts[0] == root.name:
        return root.parent, parts
    return None


@functools.lru_cache(maxsize=4096)
def _absolute(file: Path | None, qualified: str) -> str | None:
    """The absolute dotted name of a name ``file`` imports, found once per process (its package root is)."""
    found = _split(file, qualified)
    if found is None:
        return None
    folder, parts = found
    root = _package_root(file)
    package = folder.relative_to(root.parent).parts if folder != root.parent else ()
    return ".".join((*package, *parts))


def _locate(file: Path | None, qualified: str) -> tuple[Path, str] | None:
    """The file defining (or re-exporting) the class ``qualified`` names, and the class's name there."""
    found = _split(file, qualified)
    if found is None:
        return None
    folder, parts = found
    if len(parts) == 1:  # from . import X: X in the package itself
        module = folder / "__init__.py"
        return (module, parts[0]) if module.is_file() else None
    module = folder.joinpath(*parts[:-1])
    for candidate in (module.with_name(module.name + ".py"), module / "__init__.py"):
        if candidate.is_file():
            return candidate, parts[-1]
    return None


def _summary(file: Path) -> _Summary | None:
    """The classes and imports of a file, read once per process and version (None: unreadable)."""
    try:
        stat = file.stat()
    except OSError:
        return None
    return _read(file, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _read(file: Path, mtime_ns: int, size: int) -> _Summary | None:
    try:
        tree = ast.parse(file.read_bytes(), str(file))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    classes: dict[str, tuple[str, ...]] = {}
    returns: dict[str, dict[str, ast.expr]] = {}
    fields: dict[str, dict[str, ast.expr]] = {}
    functions: dict[str, ast.expr] = {}
    annotations: dict[str, ast.expr] = {}
    imports: dict[str, str] = {}
    stars: list[str] = []
    statements = tree.body[::-1]
    while statements:
        node = statements.pop()
        if isinstance(node, ast.ClassDef):
            classes[node.name] = tuple(ast.unparse(b) for b in node.bases if _dotted(b))
            returns[node.name] = {
                f.name: f.returns
                for f in node.body
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.returns is not None and not f.decorator_list
            }
            fields[node.name] = {
                f.target.id: f.annotation for f in node.body if isinstance(f, ast.AnnAssign) and type(f.target) is ast.Name
            }
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.returns is not None and not node.decorator_list:
                functions[node.name] = node.returns
        elif isinstance(node, ast.AnnAssign) and type(node.target) is ast.Name:
            annotations[node.target.id] = node.annotation
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    stars.append(module)
                else:
                    imports[alias.asname or alias.name] = (module if module.endswith(".") else module + ".") + alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imports[alias.asname or alias.name.partition(".")[0]] = alias.name if alias.asname else alias.name.partition(".")[0]
        elif isinstance(node, (ast.If, ast.Try)):  # if TYPE_CHECKING: / try: import ... except
            statements += reversed([*node.body, *getattr(node, "handlers", ()), *node.orelse])
        elif isinstance(node, ast.ExceptHandler):
            statements += reversed(node.body)
    return _Summary(classes, returns, fields, functions, annotations, imports, tuple(stars))


def _names_in(file: Path, summary: _Summary, expr: ast.expr) -> set[str]:
    """The qualified names a dotted expression of ``file`` has through its imports (absolute where
    the file is in a package; builtins as ``builtins.<name>``)."""
    parts: list[str] = []
    while type(expr) is ast.Attribute:
        parts.append(expr.attr)
        expr = expr.value
    if type(expr) is not ast.Name:
        return set()
    suffix = "".join("." + p for p in reversed(parts))
    imported = summary.imports.get(expr.id)
    if imported is None:
        if expr.id in summary.classes:  # a class of the file itself
            module = _absolute(file, ".") if file.name == "__init__.py" else _absolute(file, "." + file.stem)
            return {f"{module}.{expr.id}{suffix}"} if module else set()
        return {f"builtins.{expr.id}{suffix}"} if expr.id in _BUILTINS else set()
    absolute = _absolute(file, imported) if imported.startswith(".") else None
    return {(absolute or imported) + suffix}


def _dotted(node: ast.expr) -> bool:
    while type(node) is ast.Attribute:
        node = node.value
    return type(node) is ast.Name
