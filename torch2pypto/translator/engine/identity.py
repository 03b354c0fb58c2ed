"""Values found once per object, for keys that do not hash (a list) or hash by their contents
(a tuple): an ast node hashes by identity, so a plain dict keyed by the node does this for it."""

from __future__ import annotations


class ByIdentity:
    """A mapping keyed by each key's identity: ``get`` (None where absent), ``[key] = value``,
    ``len`` and ``clear``. A key is kept with its value, so its id is not reused while it is in."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[int, tuple] = {}  # id of a key -> (the key, its value)

    def get(self, key):
        held = self._held.get(id(key))
        return held[1] if held else None

    def __setitem__(self, key, value) -> None:
        self._held[id(key)] = (key, value)

    def __len__(self) -> int:
        return len(self._held)

    def clear(self) -> None:
        self._held.clear()
