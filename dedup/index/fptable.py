"""The fingerprint index's in-RAM buffer as one compiled hash table.

Why not :class:`dedup.index.fpbuffer.Buffer` where the compiled lookup is built: its
records sit in sorted numpy columns plus a dict of the latest tens of
thousands, and every time the dict fills it is folded in with a copy of the
whole sorted part. At 1M-2M URLs those folds and the dict's upkeep were ~5% of
UrlSeen's time, more than the index lookups in RAM they serve. Here a record is
written once into an open-addressing table (``dedup/native/_lookup.c``: ``table_put``,
``table_find``) and sorted once, when the buffer becomes a run.

The table holds one record per key, the newest (highest seq without the
tombstone bit; on a tie the later add), which is what the sorted buffer's
newest-wins merges keep, so a lookup stops at its first hit in both. Memory:
``slots`` takes 24 B and ``tags`` 1 B per slot; the table is sized for the
index's ``buffer_records`` at most 7/8 full (and doubles past that), so at
:data:`dedup.store.ledger.INDEX_BUFFER` records (3/4 of 2**20) it is 25 MB.
"""

from __future__ import annotations

import numpy as np

from dedup.index.merging import key_order
from dedup.index.sortedkeys import SEQ_MASK, Query, find_each_with
from dedup.native import compiled as _compiled

Columns = tuple[np.ndarray, np.ndarray, np.ndarray]
_FIRST_SLOTS = 1 << 8


def available() -> bool:
    """Whether the compiled table is built (else the index uses ``Buffer``)."""
    return _compiled.lookup is not None and hasattr(_compiled.lookup, "table_put")


class TableBuffer:
    """The newest records of the index in RAM, one per key, in a hash table."""

    def __init__(self, capacity: int = 0) -> None:
        # sized for ``capacity`` records from the start: a doubling near the top
        # would hold the old table, the new one and the records moved at once
        self._first = _FIRST_SLOTS
        while 8 * capacity > 7 * self._first:
            self._first *= 2
        self.generation = -1  # one more at each new table (an index's probe holds one)
        self.clear()

    def clear(self, slots: int = 0) -> None:
        slots = slots or self._first  # zeroed lazily: untouched pages cost no RAM
        self._slots = np.zeros(3 * slots, dtype=np.uint64)  # hi, lo, raw seq per slot
        self._tags = np.zeros(slots, dtype=np.uint8)  # 0: empty
        self.generation += 1
        self.count = 0  # keys held
        self.size = 0  # records added since the last take (a key may count twice)
        self.top = -1  # highest seq held, tombstone bit masked

    @property
    def parts(self) -> tuple[TableBuffer]:
        """What a lookup asks, newest first (``Buffer`` has two parts)."""
        return (self,)

    def add(self, hi: np.ndarray, lo: np.ndarray, seq: np.ndarray) -> None:
        """Keep the records ``(hi, lo, raw seq)``; a key keeps its newest."""
        if len(seq):
            self._put(hi, lo, seq, int((seq & SEQ_MASK).max()))

    def add_consecutive(self, hi: np.ndarray, lo: np.ndarray, first: int) -> None:
        """:meth:`add` of admissions at seqs ``first, first + 1, ...`` (a ledger append)."""
        if len(hi):
            self._put(hi, lo, np.arange(first, first + len(hi), dtype=np.uint64),
                      first + len(hi) - 1)

    def _put(self, hi: np.ndarray, lo: np.ndarray, raw: np.ndarray, top: int) -> None:
        n = len(hi)
        if 8 * (self.count + n) > 7 * len(self._tags):
            self._grow(self.count + n)
        self.count += _compiled.lookup.table_put(self._slots, self._tags, self.count,
                                                 hi, lo, raw)
        self.size += n
        self.top = max(self.top, top)

    def _grow(self, need: int) -> None:
        slots = len(self._tags)
        while 8 * need > 7 * slots:
            slots *= 2
        hi, lo, raw = self._records()
        size, top = self.size, self.top
        self.clear(slots)
        if len(hi):
            self.count = _compiled.lookup.table_put(self._slots, self._tags, 0, hi, lo, raw)
        self.size, self.top = size, top

    def _records(self) -> Columns:
        """The held records as contiguous columns, in slot order."""
        held = self._tags != 0
        rec = self._slots.reshape(-1, 3)
        return rec[:, 0][held], rec[:, 1][held], rec[:, 2][held]

    def probe_spec(self) -> tuple[str, np.ndarray, np.ndarray]:
        """This table as a part of the compiled ``IndexParts`` (valid until
        :attr:`generation` moves)."""
        return "table", self._slots, self._tags

    def find_into(self, hi: np.ndarray, lo: np.ndarray, todo: np.ndarray, raw: np.ndarray, *,
                  mapped: bool = False) -> None:
        """As :meth:`dedup.index.sortedkeys.SortedKeys.find_into`: keys ``i`` with ``todo[i]``
        set that are held get ``raw[i]`` and ``todo[i] = 0`` (``mapped`` is for runs)."""
        if self.count and len(hi):
            _compiled.lookup.table_find(self._slots, self._tags, hi, lo, todo, raw)

    def find_each(self, todo: list[Query]) -> tuple[list[tuple[int, int]], list[Query]]:
        """Key by key, as ``SortedKeys.find_each``: ``([(position, raw seq)], [not found])``."""
        if not self.count or not todo:
            return [], todo
        return find_each_with(self.find_into, todo)

    def take(self, upto_seq: int) -> Columns:
        """Remove and return the records with seq <= ``upto_seq``, sorted by key (one
        per key, the newest); the rest stays."""
        hi, lo, raw = self._records()
        top = self.top
        self.clear()
        if top > upto_seq:  # a newer part stays (records past the last commit)
            old = (raw & SEQ_MASK) <= np.uint64(upto_seq)
            stay = ~old
            self._put(hi[stay], lo[stay], raw[stay], top)
            hi, lo, raw = hi[old], lo[old], raw[old]
        order = key_order(hi, lo)
        hi = hi[order]  # one column at a time: each unsorted one is freed as it goes
        lo = lo[order]
        return hi, lo, raw[order]

    def nbytes(self) -> int:
        """Bytes of the table."""
        return self._slots.nbytes + self._tags.nbytes
