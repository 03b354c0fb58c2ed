"""identity.ByIdentity: a list or tuple key is found by identity, not by its contents, and is
kept alive while it is in (so a new object cannot take its id and its value)."""

import gc
import weakref

from torch2pypto.translator.engine.identity import ByIdentity


def test_a_key_is_found_by_identity_not_by_contents():
    cache, key = ByIdentity(), [1, 2]
    cache[key] = "found"
    assert cache.get(key) == "found"
    assert cache.get([1, 2]) is None  # equal, another object
    key.append(3)
    assert cache.get(key) == "found"  # the same list, changed
    assert len(cache) == 1
    cache.clear()
    assert cache.get(key) is None and len(cache) == 0


def test_a_key_is_kept_alive_while_it_is_in():
    class Key(list):  # a list that a weak reference can follow
        pass

    cache, key = ByIdentity(), Key([1])
    cache[key] = 0
    held = weakref.ref(key)
    del key
    gc.collect()
    assert held() is not None and cache.get(held()) == 0
    cache.clear()
    gc.collect()
    assert held() is None
