"""A bounded set of recently used keys with O(1) inserts and LRU-like eviction.

Two generations: keys go into the young set; when it holds ``size // 2`` keys it
becomes the old set and the previous old set is dropped. A key found in the old
set is moved back to the young one, so keys in steady use survive every swap.
This costs two set operations per insert, where an ``OrderedDict`` LRU costs a
linked-list update on every hit as well.
"""

from __future__ import annotations

from collections.abc import Iterable

from dedup import kernel as _compiled


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

    def update(self, keys: Iterable[str]) -> None:
        """:meth:`add` of a batch, in one C-level set update."""
        if self._half <= 0:
            return
        self._young.update(keys)
        if len(self._young) >= self._half:
            self._old, self._young = self._young, set()

    def first_unknown(self, pairs: Iterable[tuple[str, str] | None],
                      first: dict[str, str] | None = None) -> tuple[dict[str, str], int]:
        """For ``(value, key)`` pairs: ``({key: its first value}`` for the keys not held,
        in first-seen order, ``number of pairs whose key is held)``. Held keys count
        as hits (an old one moves back to the young set). ``None`` items (links the
        canonicalizer rejected) are skipped. One call per batch: a method call per
        key cost more than the set lookups it made. ``first`` continues an earlier
        call's dict (a batch of pages, one call each)."""
        if first is None:
            first = {}
        split = _compiled.lookup.split_known if _compiled.lookup is not None else None
        if split is None or type(pairs) is not list:
            return first, self._first_unknown(pairs, first)
        hits = i = 0
        while i < len(pairs):
            # stops after a promotion fills the young set: swap, then go on
            i, n = split(pairs, i, self._young, self._old, first, self._half)
            hits += n
            if len(self._young) >= self._half > 0:
                self._old, self._young = self._young, set()
        return first, hits

    def _first_unknown(self, pairs: Iterable[tuple[str, str] | None],
                       first: dict[str, str]) -> int:
        """:meth:`first_unknown` in Python (no compiled kernel): the hits."""
        young, old = self._young, self._old
        hits = 0
        for pair in pairs:
            if pair is None:
                continue
            value, key = pair
            if key in young:
                hits += 1
            elif key in old:
                hits += 1
                self.add(key)
                young, old = self._young, self._old  # the add may have swapped them
            elif key not in first:
                first[key] = value
        return hits

    def discard(self, key: str) -> None:
        self._young.discard(key)
        self._old.discard(key)

    def __len__(self) -> int:
        return len(self._young) + len(self._old)
