"""The fingerprint index's in-RAM buffer: the newest records, before they become a run.

This is the buffer where the compiled lookup did not build; with it, the index
keeps its newest records in one hash table instead (:mod:`dedup.index.fptable`).

Why not one dict: a dict of 128-bit Python ints costs ~130 B per record, and
the buffer holds a quarter of a million records or more. Here most records
sit in sorted numpy columns (24 B each) searched like a run
(:class:`dedup.index.sortedkeys.SortedKeys`); only the most recent tens of thousands are in
a dict, folded into the sorted part by a linear merge whenever it fills.

The dict is keyed by ``hi`` alone and points into two lists holding ``lo`` and
the seq: ``hi.tolist()`` is one C call where building 128-bit keys took object
arrays, and a fold (a copy of the whole sorted part) is the cost that the
dict's size divides. Two records sharing ``hi`` (a re-admitted key, or a 2**-64
coincidence) make the add fold at once, so the dict never holds two keys
with the same ``hi``.

Invariant: every record in the dict is newer (higher seq) than any record of
the same key in the sorted part, so a lookup stops at its first hit. Adds that
arrive out of seq order (replays, tests) go straight to the sorted part through
the general newest-wins merge.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from dedup.base.heap import give_back
from dedup.index.merging import merge_newer, newest_unique
from dedup.index.sortedkeys import SEQ_MASK, Query, SortedKeys, filter_add, filter_size

Columns = tuple[np.ndarray, np.ndarray, np.ndarray]


def _empty() -> Columns:
    z = np.zeros(0, dtype=np.uint64)
    return z, z, z


class Buffer:
    """The newest records in RAM: sorted columns plus a small dict of the latest."""

    def __init__(self, recent_max: int = 1 << 16, capacity: int = 1 << 18) -> None:
        self.recent_max = recent_max
        self._filter_bits = filter_size(capacity)  # fuller, never wrong, past capacity
        self.clear()

    def clear(self) -> None:
        self._recent: dict[int, int] = {}  # hi -> position in _lo and _seq
        self._lo: list[int] = []
        self._seq: list[int] = []  # raw seq (tombstone bit included)
        self._pending: list[Columns] = []  # the recent dict's records, as added
        # the sorted part's probe filter, as runs have: only ever gains bits until take
        self._bloom = np.zeros(self._filter_bits // 8, dtype=np.uint8)
        self.sorted = SortedKeys.build(*_empty(), bloom=self._bloom)
        self.size = 0  # records added since the last take (a key may count twice)
        self.top = -1  # highest seq held: a batch entirely above it is the newest

    def add(self, hi: np.ndarray, lo: np.ndarray, seq: np.ndarray) -> None:
        if not len(seq):
            return
        masked = seq & SEQ_MASK
        in_order = int(masked[0]) > self.top and bool(np.all(masked[1:] > masked[:-1]))
        self._keep(hi, lo, seq, int(masked.max()), seq.tolist() if in_order else None)

    def add_consecutive(self, hi: np.ndarray, lo: np.ndarray, first: int) -> None:
        """:meth:`add` of admissions at seqs ``first, first + 1, ...`` (a ledger
        append): their order needs no checking, which was most of a page's cost."""
        n = len(hi)
        if not n:
            return
        seq = np.arange(first, first + n, dtype=np.uint64)
        in_order = first > self.top
        self._keep(hi, lo, seq, first + n - 1, range(first, first + n) if in_order else None)

    def _keep(self, hi: np.ndarray, lo: np.ndarray, seq: np.ndarray, top: int,
              newest: Iterable[int] | None) -> None:
        """Add the records; ``newest`` is their seqs when they are all newer than
        anything held (they may go to the recent dict), else None."""
        self.size += len(hi)
        self.top = max(self.top, top)
        self._pending.append((hi, lo, seq))
        if newest is not None:  # the owner's usual order
            recent, at = self._recent, len(self._lo)
            before = len(recent)
            recent.update(zip(hi.tolist(), range(at, at + len(hi)), strict=True))
            self._lo += lo.tolist()
            self._seq += newest
            if len(recent) == before + len(hi) and len(recent) < self.recent_max:
                return
        self.fold()

    @property
    def count(self) -> int:
        """Records in the recent dict (the sorted part counts its own)."""
        return len(self._recent)

    def find_each(self, todo: list[Query]) -> tuple[list[tuple[int, int]], list[Query]]:
        """The recent records, key by key, like :meth:`SortedKeys.find_each`:
        ``([(position, raw seq) found], [queries not found])``."""
        recent, los, seqs = self._recent, self._lo, self._seq
        if not recent:
            return [], todo
        hits: list[tuple[int, int]] = []
        miss: list[Query] = []
        for t in todo:
            p = recent.get(t[1])
            if p is not None and los[p] == t[2]:
                hits.append((t[0], seqs[p]))
            else:
                miss.append(t)
        return hits, miss

    @property
    def parts(self) -> tuple[Buffer, SortedKeys]:
        """What a lookup asks, newest first: the recent dict (this object), then the
        sorted part."""
        return self, self.sorted

    def find_into(self, hi: np.ndarray, lo: np.ndarray, todo: np.ndarray, raw: np.ndarray, *,
                  mapped: bool = False) -> None:
        """The recent dict's part of a batch lookup, as ``SortedKeys.find_into``.
        Most keys are not here, and a C-level ``map`` of the dict's ``get`` answers
        them at a fraction of a loop's cost per key."""
        recent = self._recent
        if not recent:
            return
        lo_col, seq_col, los = self._lo, self._seq, lo.tolist()
        for i, p in enumerate(map(recent.get, hi.tolist())):
            if p is not None and todo[i] and lo_col[p] == los[i]:
                raw[i] = seq_col[p]
                todo[i] = 0

    def fold(self) -> None:
        """Move the recent records into the sorted part (newest wins)."""
        if not self._pending:
            return
        cols = [np.concatenate(c) for c in zip(*self._pending, strict=True)]
        new = newest_unique(*cols, drop_tombstones=False)
        filter_add(self._bloom, new[0], new[1])
        s = self.sorted
        merged = merge_newer((s.hi, s.lo, s.seq), new) if s.count else new
        self.sorted = SortedKeys.build(*merged, bloom=self._bloom)
        self._recent, self._lo, self._seq = {}, [], []
        self._pending = []
        give_back()  # the old sorted columns, up to 24 MB a million records

    def take(self, upto_seq: int) -> Columns:
        """Remove and return the records with seq <= ``upto_seq`` (sorted by key, one
        record per key: the newest); the rest stays. A key's older record is dropped
        when a newer one stays: the newer one answers for it, here or replayed from
        the ledger."""
        self.fold()
        s = self.sorted
        if self.top <= upto_seq:  # the flush after a commit: all of it, no copy
            self.clear()
            return s.hi, s.lo, s.seq
        old = (s.seq & SEQ_MASK) <= np.uint64(upto_seq)
        keep = ~old
        out = s.hi[old], s.lo[old], s.seq[old]
        rest = s.hi[keep], s.lo[keep], s.seq[keep]
        top = self.top
        self.clear()
        if len(rest[0]):
            filter_add(self._bloom, rest[0], rest[1])
            self.sorted = SortedKeys.build(*rest, bloom=self._bloom)
            self.size = len(rest[0])
            self.top = top
        return out

    def nbytes(self) -> int:
        """Bytes of the sorted columns and their directory (the dict not counted)."""
        s = self.sorted
        return s.hi.nbytes + s.lo.nbytes + s.seq.nbytes + s.start.nbytes + self._bloom.nbytes
