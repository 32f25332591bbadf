"""Sorted unique fingerprint records with a radix directory: the batched lookup.

Shared by the index's run files (:mod:`dedup.index.runs`) and the in-RAM part of its
buffer (:mod:`dedup.index.fpbuffer`). Records are ``(hi, lo, seq)`` uint64 triples
sorted by ``(hi, lo)``; the *radix directory* holds the first record of every
bucket of the top ``k`` bits of ``hi``, with ``2**k`` about ``count /
block_records`` (fingerprints are uniform hashes, so a bucket holds about
``block_records`` records; skewed keys only make a bucket's search longer,
never wrong). A three-probe filter over the key's bits answers most absent keys
first.

A page-sized batch (a few keys) is probed key by key in C-level ``bisect``
calls: numpy's fixed cost per call (~1 µs) on a dozen ops per run dominated such
batches. A run file's buckets are read with ``pread``, not through its map, so
lookups map no page into the process. A large batch stays one vectorized
branchless binary search over all its keys.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable

import numpy as np

from dedup.native import compiled as _compiled

RECORD_SIZE = 24  # bytes of one (hi, lo, seq) record
TOMBSTONE = np.uint64(1 << 63)  # the top bit of a record's seq: the key was forgotten
SEQ_MASK = np.uint64((1 << 63) - 1)  # the seq without that bit
BLOCK_RECORDS = 16  # records per directory bucket: 0.25-0.5 B of RAM per key, ~4 bisect steps
FILTER_BITS = 8  # bits per record of a probe filter: ~3% of absent keys pass it
_FILTER_MAX = 1 << 32  # bits; keeps ``(32-bit part) * m`` within uint64
_LOW32 = np.uint64(0xFFFF_FFFF)
_WILLNEED = getattr(os, "POSIX_FADV_WILLNEED", 0)  # 0: no posix_fadvise here
# seconds per bucket read above which a batch's reads count as waiting on the disk
_WAITING_READ = 5e-6
# A key to look up: (position in the caller's batch, hi, lo) as Python ints.
Query = tuple[int, int, int]
# A part's batch lookup: (hi, lo, todo, raw) -> None, as SortedKeys.find_into.
FindInto = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]


def filter_size(count: int) -> int:
    """Bits of a run's probe filter (at least 8, a multiple of 8)."""
    return min(_FILTER_MAX, max(8, -(-count * FILTER_BITS // 8) * 8))


def filter_positions(hi: np.ndarray, lo: np.ndarray, m: int) -> list[np.ndarray]:
    """Each key's three bits in a filter of ``m`` bits: the two 32-bit halves of
    ``lo`` and the low half of ``hi``, each scaled to ``[0, m)``. Fingerprints are
    uniform hashes, so no hashing is needed; the top of ``hi`` is left out because
    it picks the key's shard and directory bucket. Three probes at 8 bits a record
    let ~3% of absent keys through where one let ~12%: each one through costs a
    bucket read from a run file."""
    m = np.uint64(m)
    thirty_two = np.uint64(32)
    return [((part & _LOW32) * m) >> thirty_two for part in (lo >> thirty_two, lo, hi)]


def filter_add(bloom: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> None:
    """Set the filter bits of these keys."""
    if _compiled.lookup is not None:
        _compiled.lookup.filter_set(bloom, _u64(hi), _u64(lo))
        return
    for x in filter_positions(hi, lo, len(bloom) * 8):
        np.bitwise_or.at(bloom, (x >> np.uint64(3)).astype(np.intp),
                         np.uint8(1) << (x & np.uint64(7)).astype(np.uint8))


def filter_passes(bloom: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Which keys have all their filter bits set (the candidates worth a search).
    (The compiled :meth:`SortedKeys.find_into` tests the same bits in C.)"""
    ok = np.ones(len(hi), dtype=bool)
    for x in filter_positions(hi, lo, len(bloom) * 8):
        ok &= ((bloom[(x >> np.uint64(3)).astype(np.intp)] >> (x & np.uint64(7)).astype(
            np.uint8)) & np.uint8(1)).astype(bool)
    return ok


def find_each_with(find_into: FindInto, todo: list[Query]
                   ) -> tuple[list[tuple[int, int]], list[Query]]:
    """A key-by-key lookup answered by one batch ``find_into`` call (a run file's,
    the compiled buffer table's): ``([(position, raw seq) found], [queries not
    found])``, each in the order asked."""
    hi = np.array([t[1] for t in todo], dtype=np.uint64)
    lo = np.array([t[2] for t in todo], dtype=np.uint64)
    left = np.ones(len(todo), dtype=np.uint8)
    raw = np.zeros(len(todo), dtype=np.uint64)
    find_into(hi, lo, left, raw)
    hits: list[tuple[int, int]] = []
    miss: list[Query] = []
    for t, more, got in zip(todo, left.tolist(), raw.tolist(), strict=True):
        if more:
            miss.append(t)
        else:
            hits.append((t[0], got))
    return hits, miss


def _u64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.uint64)


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
        # (fd, offset of record 0): lookups read their bucket from the file instead
        # of the map, so lookups map no page (a mapped page cache folio, up to 2 MB
        # on recent kernels, counts in RSS until released)
        self._file = file
        self._readahead = True  # until reads are seen to come from the page cache
        # a three-probe Bloom filter over the keys (None: none): most keys a page
        # asks about are absent from most runs, and filter bits are cheaper than a search
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

    def probe_spec(self) -> tuple[str, np.ndarray, int, np.ndarray | None, int, int] | None:
        """A run file's part of the compiled ``IndexParts`` (its directory, filter and
        file); None for columns in RAM, which it does not read."""
        if self._file is None:
            return None
        return "run", self.start, self.shift, self.bloom, *self._file

    def find_each(self, todo: list[Query]) -> tuple[list[tuple[int, int]], list[Query]]:
        """Key by key: ``([(position, raw seq) found], [queries not found])``, each
        in the order asked except that, from a file, the keys read come last.

        Filter bits first; then, in RAM, two directory reads and a ``bisect``
        of ~log2(block) steps; from a file, one ``pread`` of the key's bucket,
        searched for the key's 16 bytes (a bucket's records are unique, so the one
        record-aligned match of ``hi || lo``, little-endian as stored, is the key),
        the page's reads asked for together first while reads wait on the disk.
        All in C: cheaper than numpy's fixed cost per call for a page's dozen keys.
        With the compiled lookup a run file's keys take one :meth:`find_into` call.
        """
        if self._file is not None and _compiled.lookup is not None and todo:
            return find_each_with(self.find_into, todo)  # filter, directory and reads in C
        mh, ml, ms, start, shift = self._hi, self._lo, self._seq, self._start, self.shift
        bloom, m, file = self._bloom, self._m, self._file
        hits: list[tuple[int, int]] = []
        miss: list[Query] = []
        reads: list[tuple[Query, int, int]] = []  # from a file: (query, first, end record)
        for t in todo:
            if bloom is not None:
                # Two of the key's three filter bits, the second only when the first
                # is set: Python's arithmetic on 64-bit ints made the third cost
                # more than the ~6% of absent keys' reads it saves.
                x = ((t[2] >> 32) * m) >> 32
                if not (bloom[x >> 3] >> (x & 7)) & 1:
                    miss.append(t)
                    continue
                x = ((t[2] & 0xFFFF_FFFF) * m) >> 32
                if not (bloom[x >> 3] >> (x & 7)) & 1:
                    miss.append(t)
                    continue
            h = t[1]
            j = h >> shift
            a, b = start[j], start[j + 1]
            if file is not None:
                if a < b:
                    reads.append((t, a, b))
                else:
                    miss.append(t)
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
        if reads:
            self._read_queries(reads, hits, miss)
        return hits, miss

    def _read_queries(self, reads: list[tuple[Query, int, int]],
                     hits: list[tuple[int, int]], miss: list[Query]) -> None:
        """:meth:`find_each`'s bucket reads from the run file (see :meth:`_read_at`)."""
        off = self._file[1]  # type: ignore[index]
        where, sizes, parts = [], [], []
        for t, a, b in reads:
            where.append(off + a * RECORD_SIZE)
            sizes.append((b - a) * RECORD_SIZE)
            parts += (t[1].to_bytes(8, "little"), t[2].to_bytes(8, "little"))
        at, got = self._read_at(where, sizes, b"".join(parts))
        j = 0
        for i, (t, _, _) in enumerate(reads):
            if j < len(at) and at[j] == i:  # ``at`` ascends
                hits.append((t[0], got[j]))
                j += 1
            else:
                miss.append(t)

    def find_into(self, hi: np.ndarray, lo: np.ndarray, todo: np.ndarray,
                  raw: np.ndarray, *, mapped: bool = False) -> None:
        """Look up the keys ``i`` with ``todo[i]`` set (uint8); where found, set
        ``raw[i]`` to the raw seq and clear ``todo[i]``. The filter bits first, then
        the candidates searched in RAM, or from a file with one ``pread`` each (see
        :meth:`_read_at`). The index asks each part in turn, newest first, with
        the keys the newer parts did not hold: one compiled call per part.
        (``mapped`` is for a run; the buffer's columns are in RAM either way.)"""
        if not self.count or not len(hi):
            return
        lookup = _compiled.lookup
        in_ram = self._file is None
        if lookup is None or (in_ram and not all(
                c.flags.c_contiguous for c in (self.hi, self.lo, self.seq))):
            self._find_into_python(hi, lo, todo, raw)  # (strided: a mapped run's columns)
            return
        fd, off = (-1, 0) if in_ram else self._file  # type: ignore[misc]
        cols = (self.hi, self.lo, self.seq) if in_ram else ()
        began = time.perf_counter()
        reads = lookup.sorted_find(self.start, self.shift, self.bloom, fd, off, cols, hi, lo,
                                   todo, raw, bool(_WILLNEED and self._readahead))
        if reads and _WILLNEED:
            self._readahead = time.perf_counter() - began > reads * _WAITING_READ

    def _find_into_python(self, hi: np.ndarray, lo: np.ndarray, todo: np.ndarray,
                          raw: np.ndarray) -> None:
        # (a caller may pass ``array`` objects: these views write through to them)
        hi, lo, todo, raw = np.asarray(hi), np.asarray(lo), np.asarray(todo), np.asarray(raw)
        cand = np.flatnonzero(todo)
        if self.bloom is not None and len(cand):
            cand = cand[filter_passes(self.bloom, hi[cand], lo[cand])]
        if not len(cand):
            return
        if self._file is None:
            found, seq = self.contains(hi[cand], lo[cand])
            at = cand[found]
            got: np.ndarray | list[int] = seq[found]
        else:
            pos, got = self._read_buckets(hi[cand], lo[cand])
            at = cand[pos]
        raw[at] = got
        todo[at] = 0

    def _read_buckets(self, hi: np.ndarray, lo: np.ndarray) -> tuple[list[int], list[int]]:
        """:meth:`_read_at` of a group's candidates: their offsets, sizes and bytes
        computed for all at once in numpy: ``(positions found, their raw seqs)``."""
        off = self._file[1]  # type: ignore[index]
        j = (hi >> np.uint64(self.shift)).astype(np.intp)
        first = self.start[j].astype(np.int64)
        size = (self.start[j + 1] - first) * RECORD_SIZE
        wanted = np.empty((len(hi), 2), dtype="<u8")
        wanted[:, 0], wanted[:, 1] = hi, lo
        return self._read_at((first * RECORD_SIZE + off).tolist(), size.tolist(),
                             wanted.tobytes())

    def _read_at(self, where: list[int], sizes: list[int],
                 keys: bytes) -> tuple[list[int], list[int]]:
        """Read ``sizes[i]`` bytes at ``where[i]`` of the run file (a bucket) and find
        key ``i`` (bytes ``16 i`` to ``16 i + 16`` of ``keys``, ``hi || lo``
        little-endian as stored) in it: ``(indexes found, their raw seqs)``.
        A bucket's records are unique, so its one record-aligned match is the key.
        (The compiled :meth:`find_into` does the same reads in C.)

        Every bucket is asked for first (``POSIX_FADV_WILLNEED``) while reads are
        seen waiting on the disk, so the reads of an index colder than RAM wait
        together, not one after another; while they come from the page cache
        (~1 µs a read) the extra call per key (~0.5 µs) is skipped. The batch is
        timed with its read-ahead calls: starting a read from disk makes them
        slow, so a batch the read-ahead made fast still counts as cold."""
        fd = self._file[0]  # type: ignore[index]
        began = time.perf_counter()
        if _WILLNEED and self._readahead and len(where) > 1:
            for o, n in zip(where, sizes, strict=True):
                if n:  # (a length of 0 would mean the rest of the file)
                    os.posix_fadvise(fd, o, n, _WILLNEED)
        at: list[int] = []
        got: list[int] = []
        pread = os.pread
        for i, (o, n) in enumerate(zip(where, sizes, strict=True)):
            if not n:
                continue
            raw = pread(fd, n, o)
            if len(raw) != n:
                raise ValueError(f"run file (fd {fd}): short read: changed under us")
            key = keys[16 * i:16 * i + 16]
            p = raw.find(key)
            while p > 0 and p % RECORD_SIZE:  # a match across two records' fields
                p = raw.find(key, p + 1)
            if p >= 0:
                at.append(i)
                got.append(int.from_bytes(raw[p + 16:p + RECORD_SIZE], "little"))
        if _WILLNEED:
            self._readahead = time.perf_counter() - began > len(where) * _WAITING_READ
        return at, got

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
