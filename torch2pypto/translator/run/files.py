"""Which files a run covers: walk folders the way black does.

Skipped while walking a folder: hidden folders (``.git``, ``.venv``, ...), virtual environments
and build output (black's defaults), whatever a ``.gitignore`` ignores (every ``.gitignore``
from the git work tree's root down to each file), ``--exclude`` patterns (``.gitignore`` syntax,
relative to the folder given) and the generated ``_pypto_kernels.py`` as a source. Files named
on the command line are always taken, as black and ruff do.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from pathspec import GitIgnoreSpec

KERNELS_MODULE = "_pypto_kernels"
KERNELS_FILE = f"{KERNELS_MODULE}.py"
SKIPPED_FOLDERS = frozenset({"__pycache__", "__pypackages__", "_build", "buck-out", "build", "dist", "venv"})


@dataclasses.dataclass(frozen=True)
class Tree:
    """A folder to translate: ``sources`` are its .py files, ``others`` every other file kept.

    Paths are relative to ``root`` and sorted. The root's ``_pypto_kernels.py`` is in neither
    list: it is rebuilt from the translations (extended if it exists).
    """

    root: Path
    sources: tuple[Path, ...]
    others: tuple[Path, ...]

    @functools.cached_property
    def is_package(self) -> bool:
        return (self.root / "__init__.py").is_file()

    def kernels_import(self, source: Path) -> str:
        """The import target of the shared kernels module, for the source at relative ``source``.

        In a package, a relative import with one dot per level (``._pypto_kernels`` at the top);
        otherwise the root is a folder on ``sys.path`` and the import is absolute.
        """
        if self.is_package:
            return "." * len(source.parts) + KERNELS_MODULE
        return KERNELS_MODULE


def gather(root: Path, exclude: Sequence[str] = ()) -> Tree:
    """The files of the folder ``root`` that a run covers."""
    resolved = root.resolve()
    top = _work_tree(resolved) or resolved
    above = resolved.relative_to(top).parts
    specs = [_gitignore(top.joinpath(*above[:depth]), _base(above[:depth])) for depth in range(len(above))]
    sources: list[Path] = []
    others: list[Path] = []
    for rel in _walk(root, _base(above), [s for s in specs if s], GitIgnoreSpec.from_lines(exclude)):
        if rel.suffix == ".py" and rel.name != KERNELS_FILE:
            sources.append(rel)
        elif rel != Path(KERNELS_FILE):
            others.append(rel)
    return Tree(root, tuple(sorted(sources)), tuple(sorted(others)))


Ignore = tuple[str, GitIgnoreSpec]  # a .gitignore's folder relative to the work tree ("" or "a/b/"), its spec


def _walk(root: Path, prefix: str, specs: list[Ignore], excluded: GitIgnoreSpec) -> Iterable[Path]:
    """Every file kept, relative to ``root``; ``prefix`` is ``root`` relative to the work tree."""
    stack = [(Path(), specs)]
    while stack:
        folder, specs = stack.pop()
        here = root / folder
        base = prefix + _base(folder.parts)
        specs = [*specs, ignore] if (ignore := _gitignore(here, base)) else specs
        with os.scandir(here) as entries:
            for entry in entries:
                rel = folder / entry.name
                is_dir = entry.is_dir(follow_symlinks=False)
                if is_dir and _skipped_folder(entry) or not is_dir and not entry.is_file():
                    continue
                posix = rel.as_posix() + ("/" if is_dir else "")
                if excluded.match_file(posix) or _ignored(prefix + posix, specs):
                    continue
                if is_dir:
                    stack.append((rel, specs))
                else:
                    yield rel


def _skipped_folder(entry: os.DirEntry) -> bool:
    name = entry.name
    return name.startswith(".") or name in SKIPPED_FOLDERS or os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))


def _ignored(path: str, specs: list[Ignore]) -> bool:
    return any(path.startswith(base) and spec.match_file(path[len(base) :]) for base, spec in specs)


def _base(parts: Sequence[str]) -> str:
    return "".join(f"{p}/" for p in parts)


def _gitignore(folder: Path, base: str) -> Ignore | None:
    path = folder / ".gitignore"
    if not path.is_file():
        return None
    return base, GitIgnoreSpec.from_lines(path.read_text(encoding="utf-8", errors="replace").splitlines())


def _work_tree(folder: Path) -> Path | None:
    """The root of the git work tree holding ``folder``, if any."""
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return None
