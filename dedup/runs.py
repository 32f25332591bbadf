"""Immutable sorted run files of the fingerprint index: codec, atomic write, batched lookup.

A run is one file of 24-byte records ``(hi, lo, seq)`` (little-endian uint64),
sorted by ``(hi, lo)``, one record per fingerprint; ``seq`` is the ledger
sequence number, top bit set for a tombstone. Layout::

    header   64 bytes  magic b"BCFPRUN1", format version, records per block,
                       record count, min and max seq (tombstone bit masked),
                       CRC32 of the records, CRC32 of the header before it
    records  24 bytes each

Why a file and not a SQLite table: the records are written once, in order, in
large sequential writes, and read through an ``mmap`` with a small in-RAM
index, a *radix directory* (:class:`SortedKeys`): the first record of every
bucket of the top ``k`` bits of ``hi``, with ``2**k`` about ``count /
block_records`` (fingerprints are uniform hashes, so a bucket holds about
``block_records`` records; skewed keys only make a bucket's search longer, never
wrong). A page-sized batch (a few keys) is probed key by key in C-level
``bisect`` calls on a ``memoryview`` of the map: numpy's fixed cost per call
(~1 µs) on a dozen ops per run dominated such batches. A large batch stays one
vectorized branchless binary search over all its keys.
bench/index_bench.py measures this against SQLite ``WITHOUT ROWID`` runs.

Opening validates every header field against the file size before mapping
anything, then streams the records once (bounded memory) to check the CRC, the
order and the seq range and to count the directory: a truncated, corrupted or
hostile file raises :class:`RunFileError`, never a huge allocation and never a
wrong answer.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from dedup.atomic import atomic_write

MAGIC = b"BCFPRUN1"
FORMAT_VERSION = 1
RECORD_SIZE = 24
BLOCK_RECORDS = 16  # records per directory bucket: 0.25-0.5 B of RAM per key, ~4 bisect steps
MAX_BLOCK_RECORDS = 1 << 16
TOMBSTONE = np.uint64(1 << 63)
SEQ_MASK = np.uint64((1 << 63) - 1)
_HEAD = struct.Struct("<8sIIQQQI")
HEADER_SIZE = 64
_CHUNK = 1 << 16  # records per streamed chunk (1.5 MiB)
FILTER_BITS = 8  # bits per record of a run's probe filter: ~12% of absent keys pass it
_FILTER_MAX = 1 << 32  # bits; keeps ``(lo >> 32) * m`` within uint64
# A probe to answer: (position in the caller's batch, hi, lo) as Python ints.
Probe = tuple[int, int, int]


class RunFileError(ValueError):
    """A run file is truncated, corrupted, of another format or not a run file at all."""


def records_dtype() -> np.dtype:
    """The on-disk record: three little-endian uint64 columns."""
    return np.dtype([("hi", "<u8"), ("lo", "<u8"), ("seq", "<u8")])


def is_sorted_unique(hi: np.ndarray, lo: np.ndarray) -> bool:
    """True when ``(hi, lo)`` pairs strictly increase (sorted, no duplicates)."""
    if len(hi) < 2:
        return True
    dh = hi[1:] > hi[:-1]
    eq = hi[1:] == hi[:-1]
    return bool(np.all(dh | (eq & (lo[1:] > lo[:-1]))))


def _pack_header(block: int, count: int, min_seq: int, max_seq: int, crc: int) -> bytes:
    body = _HEAD.pack(MAGIC, FORMAT_VERSION, block, count, min_seq, max_seq, crc)
    head = body + struct.pack("<I", zlib.crc32(body))
    return head.ljust(HEADER_SIZE, b"\0")


def write_run(path: str | os.PathLike[str],
              chunks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]],
              *, block_records: int = BLOCK_RECORDS,
              should_stop: Callable[[], bool] | None = None) -> int:
    """Write the records of ``chunks`` (each ``(hi, lo, seq)``, together strictly
    increasing by ``(hi, lo)``) as a run file at ``path``, atomically; return the count.

    Streams: memory is one chunk, whatever the run's size. ``should_stop`` is polled
    between chunks; when it answers True the write is abandoned (``InterruptedError``)
    and no file is left behind.
    """
    if not 1 <= block_records <= MAX_BLOCK_RECORDS:
        raise ValueError(f"block_records must be 1..{MAX_BLOCK_RECORDS}, not {block_records}")
    dtype = records_dtype()
    written = 0

    def body(f: BinaryIO) -> None:
        nonlocal written
        f.write(b"\0" * HEADER_SIZE)
        count, crc, lo_seq, hi_seq = 0, 0, None, None
        last: tuple[int, int] | None = None
        for hi, lo, seq in chunks:
            if should_stop is not None and should_stop():
                raise InterruptedError("run write abandoned")
            n = len(hi)
            if not n:
                continue
            if not is_sorted_unique(hi, lo) or (
                    last is not None and (int(hi[0]), int(lo[0])) <= last):
                raise ValueError("run records must strictly increase by (hi, lo)")
            last = (int(hi[-1]), int(lo[-1]))
            rec = np.empty(n, dtype=dtype)
            rec["hi"], rec["lo"], rec["seq"] = hi, lo, seq
            data = rec.tobytes()
            crc = zlib.crc32(data, crc)
            f.write(data)
            masked = rec["seq"] & SEQ_MASK
            mn, mx = int(masked.min()), int(masked.max())
            lo_seq = mn if lo_seq is None else min(lo_seq, mn)
            hi_seq = mx if hi_seq is None else max(hi_seq, mx)
            count += n
        f.seek(0)
        f.write(_pack_header(block_records, count, lo_seq or 0, hi_seq or 0, crc))
        written = count

    atomic_write(path, body)
    return written


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
                 bloom: np.ndarray | None = None) -> None:
        self.count = len(hi)
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
            views = [_columns(a, 1)[0] for a in (hi, lo, seq)]
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

        Two directory reads and a ``bisect`` of ~log2(block) steps per key, all
        in C: cheaper than numpy's fixed cost per call for a page's dozen keys.
        """
        mh, ml, ms, start, shift = self._hi, self._lo, self._seq, self._start, self.shift
        bloom, m = self._bloom, self._m
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


def _columns(a: np.ndarray, width: int) -> list[memoryview]:
    """Memoryviews of the ``width`` interleaved uint64 columns of contiguous ``a``:
    their items are Python ints, so ``bisect`` searches them in C."""
    flat = memoryview(np.ascontiguousarray(a).reshape(-1)).cast("B").cast("Q")
    return [flat[c::width] for c in range(width)]


class Run:
    """One open run file: the records mapped read-only, the radix directory in RAM."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as f:
                head = f.read(HEADER_SIZE)
        except OSError as exc:
            raise RunFileError(f"run file {self.path}: cannot read: {exc}") from exc
        self.block, self.count, self.min_seq, self.max_seq, crc = _parse_header(
            self.path, head, size)
        self.nbytes = size
        self._map: mmap.mmap | None = None
        if self.count:  # a plain ndarray over our own map (numpy.memmap taxes every index)
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._rec = np.frombuffer(self._map, dtype="<u8", count=self.count * 3,
                                      offset=HEADER_SIZE).reshape(self.count, 3)
        else:
            self._rec = np.zeros((0, 3), dtype="<u8")
        self.keys = self._verify(crc)
        self.release()

    def release(self) -> None:
        """Let go of the mapped pages this process has touched (they stay in the page
        cache): lookups touch a page per key, and without this a long crawl's RSS
        would grow to the whole index."""
        if self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED)

    def _verify(self, crc: int) -> SortedKeys:
        """Stream the records once: CRC, strict order, seq range; count the buckets."""
        got, prev = 0, None
        bits = directory_bits(self.count, self.block)
        counts = np.zeros(1 << bits, dtype=np.int64)
        m = filter_size(self.count)
        bloom = np.zeros(m // 8, dtype=np.uint8)
        for start in range(0, self.count, _CHUNK):
            chunk = np.ascontiguousarray(self._rec[start:start + _CHUNK])
            got = zlib.crc32(chunk.data, got)
            hi, lo = chunk[:, 0], chunk[:, 1]
            seq = chunk[:, 2] & SEQ_MASK
            bad_order = not is_sorted_unique(hi, lo) or (
                prev is not None and (int(hi[0]), int(lo[0])) <= prev)
            if bad_order or int(seq.min()) < self.min_seq or int(seq.max()) > self.max_seq:
                raise RunFileError(f"run file {self.path}: records out of order or range")
            prev = (int(hi[-1]), int(lo[-1]))
            counts += bucket_counts(hi, bits)
            filter_add(bloom, lo)
        if got != crc:
            raise RunFileError(f"run file {self.path}: record checksum mismatch")
        rec = self._rec
        return SortedKeys(rec[:, 0], rec[:, 1], rec[:, 2], counts, bits, _columns(rec, 3),
                          bloom)

    def records(self, start: int, stop: int) -> np.ndarray:
        """Records ``[start, stop)`` as an ``(n, 3)`` uint64 array (a view of the map)."""
        return self._rec[start:stop]

    def contains(self, hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each key: (found in this run, raw seq incl. tombstone bit, 0 if not found).

        Any order works; a batch sorted by ``(hi, lo)`` reads the map front to back.
        """
        hi = np.asarray(hi, dtype=np.uint64)
        lo = np.asarray(lo, dtype=np.uint64)
        found = np.zeros(len(hi), dtype=bool)
        seq = np.zeros(len(hi), dtype=np.uint64)
        for start in range(0, len(hi), 1 << 16):  # bounds the temporaries
            sl = slice(start, start + (1 << 16))
            found[sl], seq[sl] = self.keys.contains(hi[sl], lo[sl])
        return found, seq

    def probe(self, todo: list[Probe]) -> tuple[list[tuple[int, int]], list[Probe]]:
        """Key by key (see :meth:`SortedKeys.probe`): for page-sized batches."""
        return self.keys.probe(todo)

    def close(self) -> None:
        """Drop this object's references to the map (numpy unmaps it once no view is left)."""
        self._rec = np.zeros((0, 3), dtype="<u8")
        self._map = None  # unmapped once the last view of it is gone
        empty = np.zeros(0, dtype=np.uint64)
        self.keys = SortedKeys(empty, empty, empty, np.zeros(2, dtype=np.int64), 1)
        self.count = 0


def _parse_header(path: Path, head: bytes, size: int) -> tuple[int, int, int, int, int]:
    """Validate every header field against the file size; no allocation before."""
    if len(head) < HEADER_SIZE:
        raise RunFileError(f"run file {path}: truncated header ({len(head)} bytes)")
    magic, version, block, count, min_seq, max_seq, crc = _HEAD.unpack_from(head)
    if magic != MAGIC:
        raise RunFileError(f"run file {path}: not a fingerprint run (bad magic)")
    (hcrc,) = struct.unpack_from("<I", head, _HEAD.size)
    if zlib.crc32(head[:_HEAD.size]) != hcrc or any(head[_HEAD.size + 4:HEADER_SIZE]):
        raise RunFileError(f"run file {path}: header checksum mismatch")
    if version != FORMAT_VERSION:
        raise RunFileError(f"run file {path}: format version {version}, "
                           f"this build reads {FORMAT_VERSION}")
    if not 1 <= block <= MAX_BLOCK_RECORDS:
        raise RunFileError(f"run file {path}: bad block size {block}")
    if size != HEADER_SIZE + count * RECORD_SIZE:
        raise RunFileError(f"run file {path}: {size} bytes, header says {count} records "
                           f"({HEADER_SIZE + count * RECORD_SIZE} bytes): truncated or damaged")
    if min_seq > max_seq or max_seq >= 1 << 63:
        raise RunFileError(f"run file {path}: bad seq range {min_seq}..{max_seq}")
    return block, count, min_seq, max_seq, crc
