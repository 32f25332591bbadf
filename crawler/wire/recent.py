"""A bounded set of recently used keys with O(1) inserts and LRU-like eviction.

Two generations: keys go into the young set; when it holds ``size // 2`` keys it
becomes the old set and the previous old set is dropped. A key found in the old
set is moved back to the young one, so keys in steady use survive every swap.
This costs two set operations per insert, where an ``OrderedDict`` LRU costs a
linked-list update on every hit as well. The fleet's relay keeps the keys it
forwarded lately here (``crawler.wire.relay``). (The seen-test's cache of recent
keys, ``dedup.store.seencore``, is set-associative with LRU buckets instead: a
fixed memory budget of 16-byte fingerprints, one cache line a lookup.)
"""

from __future__ import annotations


class RecentKeys:
    """The last ``size`` (about) distinct keys added or hit; ``size`` 0 keeps none."""

    __slots__ = ("_half", "_old", "_young")

    def __init__(self, size: int) -> None:
        self._half = size // 2 if size > 1 else size  # size 1 still remembers one key
        self._young: set[str] = set()
        self._old: set[str] = set()

    def __contains__(self, key: str) -> bool:
        if key in self._young:
            return True
        if key in self._old:
            self.add(key)
            return True
        return False

    def add(self, key: str) -> None:
        if self._half <= 0:
            return
        self._young.add(key)
        if len(self._young) >= self._half:
            self._old, self._young = self._young, set()

    def __len__(self) -> int:
        return len(self._young) + len(self._old)
