"""The fingerprint index's in-RAM buffer: the newest records, before they become a run.

Why not one dict: a dict of 128-bit Python ints costs ~130 B per record, and
the buffer holds a quarter of a million records or more. Here most records
sit in sorted numpy columns (24 B each) searched like a run
(:class:`dedup.runs.SortedKeys`); only the most recent few thousand are in a
small dict, folded into the sorted part by a linear merge whenever it fills.

Invariant: every record in the dict is newer (higher seq) than any record of
the same key in the sorted part, so a lookup stops at its first hit. Adds that
arrive out of seq order (replays, tests) go straight to the sorted part through
the general newest-wins merge.
"""

from __future__ import annotations

import numpy as np

from dedup.merging import merge_newer, newest_unique
from dedup.runs import SEQ_MASK, SortedKeys, filter_add, filter_size

Columns = tuple[np.ndarray, np.ndarray, np.ndarray]


def keys128(hi: np.ndarray, lo: np.ndarray) -> list[int]:
    """128-bit Python ints: the recent dict's keys (cheap for page-sized batches)."""
    return ((hi.astype(object) << 64) | lo.astype(object)).tolist()


def _empty() -> Columns:
    z = np.zeros(0, dtype=np.uint64)
    return z, z, z


class Buffer:
    """The newest records in RAM: sorted columns plus a small dict of the latest."""

    def __init__(self, recent_max: int = 8192, capacity: int = 1 << 18) -> None:
        self.recent_max = recent_max
        self._filter_bits = filter_size(capacity)  # fuller, never wrong, past capacity
        self.clear()

    def clear(self) -> None:
        self.recent: dict[int, int] = {}  # (hi << 64 | lo) -> raw seq
        self._pending: list[Columns] = []  # the recent dict's records, as added
        # the sorted part's probe filter, as runs have: only ever gains bits until take
        self._bloom = np.zeros(self._filter_bits // 8, dtype=np.uint8)
        self.sorted = SortedKeys.build(*_empty(), bloom=self._bloom)
        self.size = 0  # records added since the last take (a key may count twice)
        self.top = -1  # highest seq held: a batch entirely above it is the newest

    def add(self, hi: np.ndarray, lo: np.ndarray, seq: np.ndarray) -> None:
        if not len(seq):
            return
        self.size += len(hi)
        masked = seq & SEQ_MASK
        in_order = int(masked[0]) > self.top and bool(np.all(masked[1:] > masked[:-1]))
        self.top = max(self.top, int(masked.max()))
        self._pending.append((hi, lo, seq))
        if in_order:  # the owner's usual order: these are the newest records of their keys
            self.recent.update(zip(keys128(hi, lo), seq.tolist(), strict=True))
            if len(self.recent) < self.recent_max:
                return
        self.fold()

    def fold(self) -> None:
        """Move the recent records into the sorted part (newest wins)."""
        if not self._pending:
            return
        cols = [np.concatenate(c) for c in zip(*self._pending, strict=True)]
        new = newest_unique(*cols, drop_tombstones=False)
        filter_add(self._bloom, new[1])
        s = self.sorted
        merged = merge_newer((s.hi, s.lo, s.seq), new) if s.count else new
        self.sorted = SortedKeys.build(*merged, bloom=self._bloom)
        self.recent = {}
        self._pending = []

    def take(self, upto_seq: int) -> Columns:
        """Remove and return the records with seq <= ``upto_seq`` (sorted, newest
        per key); the rest stays. A key's older record is dropped when a newer one
        stays: the newer one answers for it, here or replayed from the ledger."""
        self.fold()
        s = self.sorted
        old = (s.seq & SEQ_MASK) <= np.uint64(upto_seq)
        keep = ~old
        out = s.hi[old], s.lo[old], s.seq[old]
        rest = s.hi[keep], s.lo[keep], s.seq[keep]
        top = self.top
        self.clear()
        if len(rest[0]):
            filter_add(self._bloom, rest[1])
            self.sorted = SortedKeys.build(*rest, bloom=self._bloom)
            self.size = len(rest[0])
            self.top = top
        return out

    def nbytes(self) -> int:
        """Bytes of the sorted columns and their directory (the dict not counted)."""
        s = self.sorted
        return s.hi.nbytes + s.lo.nbytes + s.seq.nbytes + s.start.nbytes + self._bloom.nbytes
