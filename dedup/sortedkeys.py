"""Sorted unique fingerprint records with a radix directory: the batched lookup.

Shared by the index's run files (:mod:`dedup.runs`) and the in-RAM part of its
buffer (:mod:`dedup.fpbuffer`). Records are ``(hi, lo, seq)`` uint64 triples
sorted by ``(hi, lo)``; the *radix directory* holds the first record of every
bucket of the top ``k`` bits of ``hi``, with ``2**k`` about ``count /
block_records`` (fingerprints are uniform hashes, so a bucket holds about
``block_records`` records; skewed keys only make a bucket's search longer,
never wrong). A one-probe filter over ``lo`` answers most absent keys first.

A page-sized batch (a few keys) is probed key by key in C-level ``bisect``
calls: numpy's fixed cost per call (~1 µs) on a dozen ops per run dominated such
batches. A run file's buckets are read with ``pread``, not through its map, so
lookups map no page into the process. A large batch stays one vectorized
branchless binary search over all its keys.
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right

import numpy as np

RECORD_SIZE = 24  # bytes of one (hi, lo, seq) record
BLOCK_RECORDS = 16  # records per directory bucket: 0.25-0.5 B of RAM per key, ~4 bisect steps
FILTER_BITS = 8  # bits per record of a probe filter: ~12% of absent keys pass it
_FILTER_MAX = 1 << 32  # bits; keeps ``(lo >> 32) * m`` within uint64
_WILLNEED = getattr(os, "POSIX_FADV_WILLNEED", 0)  # 0: no posix_fadvise here
# A probe to answer: (position in the caller's batch, hi, lo) as Python ints.
Probe = tuple[int, int, int]


def filter_size(count: int) -> int:
    """Bits of a run's probe filter (at least 8, a multiple of 8)."""
    return min(_FILTER_MAX, max(8, -(-count * FILTER_BITS // 8) * 8))


def filter_positions(lo: np.ndarray, m: int) -> np.ndarray:
    """Each key's bit in a filter of ``m`` bits: the top 32 bits of ``lo`` scaled to
    ``[0, m)`` (fingerprints are uniform hashes: no hashing needed)."""
    return ((lo >> np.uint64(32)) * np.uint64(m)) >> np.uint64(32)


def filter_add(bloom: np.ndarray, lo: np.ndarray) -> None:
    """Set the filter bits of the keys with these ``lo`` halves."""
    x = filter_positions(lo, len(bloom) * 8)
    np.bitwise_or.at(bloom, (x >> np.uint64(3)).astype(np.intp),
                     np.uint8(1) << (x & np.uint64(7)).astype(np.uint8))


def directory_bits(count: int, block: int) -> int:
    """``k``: the directory has ``2**k`` buckets, about ``block`` records each."""
    k = 1
    while k < 40 and (count >> k) > block:
        k += 1
    return k


def bucket_counts(hi: np.ndarray, bits: int) -> np.ndarray:
    """Records per directory bucket (the top ``bits`` bits of ``hi``) of one chunk."""
    ids = (hi >> np.uint64(64 - bits)).astype(np.intp)
    return np.bincount(ids, minlength=1 << bits)


class SortedKeys:
    """Records sorted by ``(hi, lo)`` (unique) with a radix directory: the batched
    lookup shared by run files and the index buffer's sorted part.

    ``counts`` are the records per bucket of the top ``bits`` bits of ``hi``; the
    columns may be strided views (a run's rows in its map).
    """

    def __init__(self, hi: np.ndarray, lo: np.ndarray, seq: np.ndarray,
                 counts: np.ndarray, bits: int,
                 views: list[memoryview] | None = None,
                 bloom: np.ndarray | None = None,
                 file: tuple[int, int] | None = None) -> None:
        self.count = len(hi)
        # (fd, offset of record 0): probes read their bucket from the file instead
        # of the map, so lookups map no page (a mapped page cache folio, up to 2 MB
        # on recent kernels, counts in RSS until released)
        self._file = file
        # a one-probe Bloom filter over lo (None: none): most keys a page asks about
        # are absent from most runs, and a filter bit is cheaper than a bisect
        self.bloom = bloom
        self._bloom = memoryview(bloom) if bloom is not None else None
        self._m = len(bloom) * 8 if bloom is not None else 0
        self.hi, self.lo, self.seq = hi, lo, seq
        self.shift = 64 - bits
        wide = self.count >= 1 << 31
        start = np.zeros(len(counts) + 1, dtype=np.int64 if wide else np.int32)
        np.cumsum(counts, out=start[1:])
        self.start = start
        self._start = memoryview(start).cast("B").cast("q" if wide else "i")
        if views is None:
            views = [columns(a, 1)[0] for a in (hi, lo, seq)]
        self._hi, self._lo, self._seq = views

    @classmethod
    def build(cls, hi: np.ndarray, lo: np.ndarray, seq: np.ndarray,
              block: int = BLOCK_RECORDS, bloom: np.ndarray | None = None) -> SortedKeys:
        """Index contiguous sorted unique columns held in RAM (``bloom``: a filter
        already holding every key's bit, or None)."""
        bits = directory_bits(len(hi), block)
        return cls(hi, lo, seq, bucket_counts(hi, bits), bits, bloom=bloom)

    def probe(self, todo: list[Probe]) -> tuple[list[tuple[int, int]], list[Probe]]:
        """Key by key: ``([(position, raw seq) found], [probes not found])``.

        The filter bit first; then, in RAM, two directory reads and a ``bisect``
        of ~log2(block) steps; from a file, one ``pread`` of the key's bucket,
        searched for the key's 16 bytes (a bucket's records are unique, so the one
        record-aligned match of ``hi || lo``, little-endian as stored, is the key).
        All in C: cheaper than numpy's fixed cost per call for a page's dozen keys.
        """
        mh, ml, ms, start, shift = self._hi, self._lo, self._seq, self._start, self.shift
        bloom, m, file = self._bloom, self._m, self._file
        hits: list[tuple[int, int]] = []
        miss: list[Probe] = []
        for t in todo:
            if bloom is not None:
                x = ((t[2] >> 32) * m) >> 32
                if not (bloom[x >> 3] >> (x & 7)) & 1:
                    miss.append(t)
                    continue
            h = t[1]
            j = h >> shift
            a, b = start[j], start[j + 1]
            if file is not None:
                p = self._find_in_file(file, a, b, h, t[2])
                if p is None:
                    miss.append(t)
                else:
                    hits.append((t[0], p))
                continue
            p = bisect_left(mh, h, a, b)
            if p < b and mh[p] == h:
                if ml[p] != t[2] and p + 1 < b and mh[p + 1] == h:
                    e = bisect_right(mh, h, p, b)  # a streak of equal hi: search its lo
                    p = bisect_left(ml, t[2], p, e)
                    if p == e:
                        miss.append(t)
                        continue
                if ml[p] == t[2]:
                    hits.append((t[0], ms[p]))
                    continue
            miss.append(t)
        return hits, miss

    def find_many(self, hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`contains` for a batch of hundreds or thousands of keys (a group of
        pages) that maps nothing: the filter bits of all keys at once, then the
        candidates searched in RAM, or from a file with one ``pread`` each."""
        found = np.zeros(len(hi), dtype=bool)
        seq = np.zeros(len(hi), dtype=np.uint64)
        if not self.count or not len(hi):
            return found, seq
        cand = np.arange(len(hi))
        if self.bloom is not None:
            x = filter_positions(lo, self._m)
            bit = self.bloom[(x >> np.uint64(3)).astype(np.intp)] >> (x & np.uint64(7))
            cand = np.flatnonzero(bit & np.uint64(1))
        if self._file is None:
            found[cand], seq[cand] = self.contains(hi[cand], lo[cand])
            return found, seq
        j = (hi[cand] >> np.uint64(self.shift)).astype(np.intp)
        starts, ends = self.start[j].tolist(), self.start[j + 1].tolist()
        if _WILLNEED:  # ask for every bucket first: the reads of an index colder than
            fd, off = self._file  # RAM then wait together, not one after another
            for a, b in zip(starts, ends, strict=True):
                if b > a:  # (a length of 0 would mean the rest of the file)
                    os.posix_fadvise(fd, off + a * RECORD_SIZE, (b - a) * RECORD_SIZE,
                                     _WILLNEED)
        for c, h, lo_, a, b in zip(cand.tolist(), hi[cand].tolist(), lo[cand].tolist(),
                                   starts, ends, strict=True):
            got = self._find_in_file(self._file, a, b, h, lo_)
            if got is not None:
                found[c], seq[c] = True, got
        return found, seq

    @staticmethod
    def _find_in_file(file: tuple[int, int], a: int, b: int, hi: int, lo: int) -> int | None:
        """The raw seq of key ``(hi, lo)`` among records ``[a, b)`` of a run file, or None."""
        if a == b:
            return None
        fd, off = file
        size = (b - a) * RECORD_SIZE
        raw = os.pread(fd, size, off + a * RECORD_SIZE)
        if len(raw) != size:
            raise ValueError(f"run file (fd {fd}): short read: changed under us")
        key = hi.to_bytes(8, "little") + lo.to_bytes(8, "little")
        p = raw.find(key)
        while p > 0 and p % RECORD_SIZE:  # a match across two records' fields
            p = raw.find(key, p + 1)
        return None if p < 0 else int.from_bytes(raw[p + 16:p + RECORD_SIZE], "little")

    def contains(self, hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each key: (found, raw seq incl. tombstone bit, 0 if not found).

        One branchless binary search inside each key's bucket, all keys at once
        (log2(bucket) steps of n gathers). A batch sorted by ``(hi, lo)`` reads
        the columns front to back.
        """
        hi = np.asarray(hi, dtype=np.uint64)
        lo = np.asarray(lo, dtype=np.uint64)
        found = np.zeros(len(hi), dtype=bool)
        seq = np.zeros(len(hi), dtype=np.uint64)
        if not self.count or not len(hi):
            return found, seq
        j = (hi >> np.uint64(self.shift)).astype(np.intp)
        first = self.start[j]
        size = self.start[j + 1] - first
        live = size > 0
        np.minimum(first, self.count - 1, out=first)  # empty buckets: any row, masked below
        H, L = self.hi, self.lo
        while True:
            half = size // 2
            if not half.any():
                break
            mid = first + half
            mh, ml = H[mid], L[mid]
            below = (mh < hi) | ((mh == hi) & (ml <= lo))
            first = np.where(below, mid, first)
            size -= half
        hit = live & (H[first] == hi) & (L[first] == lo)
        found[hit] = True
        seq[hit] = self.seq[first[hit]]
        return found, seq


def columns(a: np.ndarray, width: int) -> list[memoryview]:
    """Memoryviews of the ``width`` interleaved uint64 columns of contiguous ``a``:
    their items are Python ints, so ``bisect`` searches them in C."""
    flat = memoryview(np.ascontiguousarray(a).reshape(-1)).cast("B").cast("Q")
    return [flat[c::width] for c in range(width)]
