"""The seen-test's pending admissions: fingerprints answered "new", not yet written.

``UrlSeen`` answers a repeat of such a key "seen" from here (its Bloom bits are
set only when it is written), so every call must consult them. Where the compiled
lookup is built they are a table of the confirm cache's kind
(``dedup/native/_fpset.h``), which the compiled pass over a page's links
(``confirm_links``) reads as it goes: a page's keys then reach Python already
screened, with no set of 16-byte ``bytes`` to build, test and empty. Elsewhere a
set of those bytes gives the same answers. Keys are only added, and all are
dropped at once when the admissions are written.
"""

from __future__ import annotations

import numpy as np

from dedup.native import compiled as _compiled

_FIRST_SLOTS = 1 << 11  # 32 KB: 1,024 keys
# clear() keeps a grown table up to this many slots (1 MB), zeroed: the keys pending
# between two writes (UrlSeen's 4,096 by default: 16,384 slots) are about as many
# each time, and growing from the first size again cost each write three tables'
# allocation, page faults and copies (~5% of a call a URL's CPU)
_KEPT_SLOTS = 1 << 16


class PendingKeys:
    """A set of 16-byte fingerprints (``hi || lo`` little-endian, as the ledger's)."""

    __slots__ = ("_lookup", "_set", "held", "table")

    def __init__(self) -> None:
        lookup = _compiled.lookup
        self._lookup = lookup if lookup is not None and hasattr(lookup, "confirm_absent") \
            else None
        self.held = 0
        self._set: set[bytes] = set()
        # the compiled table, two uint64 words a slot, at most half full; None without it
        self.table: np.ndarray | None = (np.zeros(2 * _FIRST_SLOTS, dtype=np.uint64)
                                         if self._lookup is not None else None)

    def add(self, blob: bytes) -> None:
        """Hold the fingerprints of ``blob`` (16 bytes each)."""
        if self.table is None:
            self._set.update(blob[i:i + 16] for i in range(0, len(blob), 16))
            self.held = len(self._set)
            return
        h = memoryview(blob).cast("Q")  # (hi, lo) words, as confirm_add reads them: no numpy call
        i, n = 0, len(blob) // 16
        while i < n:
            half = len(self.table) // 4
            if self.held >= half:
                self._grow()
                continue
            i, self.held = self._lookup.confirm_add(  # type: ignore[union-attr]
                self.table, self.held, half, h, i)
        if self.held >= len(self.table) // 4:
            self._grow()  # confirm_links takes it at most half full

    def reserve(self, n: int) -> None:
        """Room in the table for ``n`` more keys, below half its slots (a page's call,
        ``OneLink.page``, pends up to a key a link without growing it)."""
        while self.held + n >= len(self.table) // 4:  # type: ignore[arg-type]
            self._grow()

    def held_more(self, n: int) -> None:
        """``n`` more keys are held: a compiled call (``OneLink.page``, a page's, or
        ``OneLink.one``, a URL's) put them in the table, which it takes at most half
        full."""
        self.held += n
        if self.held >= len(self.table) // 4:  # type: ignore[arg-type]
            self._grow()

    def _grow(self) -> None:
        table = self.table
        assert table is not None
        rows = table.reshape(-1, 2)
        kept = rows[(rows[:, 0] | rows[:, 1]) != 0]
        grown = np.zeros(2 * len(table), dtype=np.uint64)
        stop, held = self._lookup.confirm_add(  # type: ignore[union-attr]
            grown, 0, len(grown) // 4, kept, 0)
        if not stop == held == len(kept) == self.held:  # a real check, not an assert
            raise RuntimeError(f"pending keys: the grown table kept {held} of {self.held}")
        self.table = grown

    def absent(self, blob: bytes) -> list[int]:
        """Indexes of the fingerprints of ``blob`` not held, ascending."""
        if self.table is None:
            held = self._set
            return [j for j, i in enumerate(range(0, len(blob), 16))
                    if blob[i:i + 16] not in held]
        return self._lookup.confirm_absent(self.table, blob)  # type: ignore[union-attr]

    def clear(self) -> None:
        """Drop every key (they were written)."""
        if self.held:
            if self.table is not None:
                if len(self.table) > 2 * _KEPT_SLOTS:
                    self.table = np.zeros(2 * _FIRST_SLOTS, dtype=np.uint64)
                else:
                    self.table.fill(0)
            self._set.clear()
            self.held = 0

    def __len__(self) -> int:
        return self.held
