"""``[tool.torch2pypto]`` in pyproject.toml: the command line's settings, checked against its parser.

Keys are the long flag names (``assume-tensors``); what each takes comes from the parser's
actions, so nothing is declared twice. Flags win over the file (``apply_config``).
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import os
import tomllib
from collections.abc import Sequence
from pathlib import Path

SECTION = "tool.torch2pypto"
# Flags about one run rather than the project: where this run writes, replacing read-only files,
# a one-file --verify.
_NOT_SETTINGS = frozenset({"output", "force", "verify"})


class ConfigError(Exception):
    """A bad config file: reported as one line naming the file and key (exit 2)."""


def load_config(parser: argparse.ArgumentParser, paths: Sequence[Path]) -> dict[str, object]:
    """argparse dest -> value from the nearest ``[tool.torch2pypto]`` (see ``find_section``)."""
    found = find_section(paths)
    if found is None:
        return {}
    pyproject, section = found
    if not isinstance(section, dict):
        raise ConfigError(f"{pyproject}: [{SECTION}] must be a table")
    settings, others = _settings(parser)
    config: dict[str, object] = {}
    for key, value in section.items():
        where = f"{pyproject}: [{SECTION}] {key}"
        if key in others:
            raise ConfigError(f"{where}: not a setting; give it on the command line")
        if key not in settings:
            close = difflib.get_close_matches(key.replace("_", "-"), settings, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: unknown key{hint}; known keys: {', '.join(sorted(settings))}")
        action = settings[key]
        converted = _convert(action, value, where)
        if isinstance(converted, Path) and not converted.is_absolute():
            converted = pyproject.parent / converted
        config[action.dest] = converted
    return config


def find_section(paths: Sequence[Path]) -> tuple[Path, object] | None:
    """The nearest pyproject.toml with a ``[tool.torch2pypto]`` table at or above ``paths``, and the table.

    The search starts at the inputs' common folder (the working folder if there are none) and,
    like black, stops at the repository root (a folder holding .git or .hg); pyproject files
    without the table are passed over.
    """
    folders = [p if p.is_dir() else p.parent for p in (Path.cwd() / q for q in paths or [Path.cwd()])]
    common = Path(os.path.commonpath([f.resolve() for f in folders]))
    for folder in (common, *common.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            tool = _read(pyproject).get("tool")
            if isinstance(tool, dict) and "torch2pypto" in tool:
                return pyproject, tool["torch2pypto"]
        if (folder / ".git").exists() or (folder / ".hg").is_dir():
            return None
    return None


def apply_config(parser: argparse.ArgumentParser, args: argparse.Namespace, config: dict[str, object]) -> set[str]:
    """Fill in the settings left at their defaults on the command line (flags win); the dests filled."""
    filled = set()
    for dest, value in config.items():
        if getattr(args, dest) == parser.get_default(dest):
            setattr(args, dest, value)
            filled.add(dest)
    return filled


def _read(pyproject: Path) -> dict:
    try:
        with pyproject.open("rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{pyproject}: {exc}") from None


def _settings(parser: argparse.ArgumentParser) -> tuple[dict[str, argparse.Action], set[str]]:
    """Settable actions by long name, and the names that exist but are not settings."""
    settings: dict[str, argparse.Action] = {}
    others: set[str] = set()
    for action in parser._actions:
        longs = [s[2:] for s in action.option_strings if s.startswith("--")]
        if not action.option_strings:
            others.add(action.dest)
        elif _kind(action) is None or action.dest in _NOT_SETTINGS:
            others.update(longs)
        else:
            settings.update(dict.fromkeys(longs, action))
    return settings, others


def _kind(action: argparse.Action) -> str | None:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "bool"
    if isinstance(action, (argparse._ExtendAction, argparse._AppendAction)):
        return "list"
    if type(action) is argparse._StoreAction and action.nargs is None:
        return "scalar"
    return None


def _convert(action: argparse.Action, value: object, where: str) -> object:
    kind = _kind(action)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return (not value) if isinstance(action, argparse._StoreFalseAction) else value
    if kind == "list":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: expected an array of strings, got {value!r}")
        items = [_scalar(action, v, where) for v in value]
        if isinstance(action, argparse._ExtendAction) and action.nargs is None:
            return list(itertools.chain.from_iterable(items))  # each value is a list, as on the command line
        return items
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"{where}: expected a string or a number, got {value!r}")
    return _scalar(action, value, where)


def _scalar(action: argparse.Action, value: str | int | float, where: str) -> object:
    """``value`` as argparse would take it from the command line: its text through ``action.type``."""
    try:
        converted = action.type(str(value)) if action.type else str(value)
    except argparse.ArgumentTypeError as exc:  # the type's own message says what it expects
        raise ConfigError(f"{where}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: invalid value {value!r}: {' '.join(str(exc).split())}") from None
    if action.choices is not None and converted not in action.choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return converted
