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
index, the *fence pointers*: the first ``(hi, lo)`` of every block of
``block_records`` records (170 records = 4080 bytes, one page), 16 bytes per 170
fingerprints. A lookup of a batch is a handful of numpy calls: fence
``searchsorted`` -> gather each key's block from the map -> vectorized compare.
bench/index_bench.py measures this against SQLite ``WITHOUT ROWID`` runs.

Opening validates every header field against the file size before mapping
anything, then streams the records once (bounded memory) to check the CRC, the
order and the seq range and to build the fences: a truncated, corrupted or
hostile file raises :class:`RunFileError`, never a huge allocation and never a
wrong answer.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from dedup.atomic import atomic_write

MAGIC = b"BCFPRUN1"
FORMAT_VERSION = 1
RECORD_SIZE = 24
BLOCK_RECORDS = 4096 // RECORD_SIZE
MAX_BLOCK_RECORDS = 1 << 16
TOMBSTONE = np.uint64(1 << 63)
SEQ_MASK = np.uint64((1 << 63) - 1)
_HEAD = struct.Struct("<8sIIQQQI")
HEADER_SIZE = 64
_CHUNK = 1 << 16  # records per streamed chunk (1.5 MiB)
_SCAN_MAX = 64  # up to this many keys a block scan beats a binary search (fewer calls)


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


class Run:
    """One open run file: the records mapped read-only, the fence pointers in RAM."""

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
        if self.count:  # a plain ndarray view: numpy.memmap adds overhead to every index
            self._rec = np.asarray(np.memmap(self.path, dtype="<u8", mode="r",
                                             offset=HEADER_SIZE, shape=(self.count, 3)))
        else:
            self._rec = np.zeros((0, 3), dtype="<u8")
        self._flat = self._rec.reshape(-1)
        self._offsets = np.arange(self.block, dtype=np.int64)
        self.fence_hi, self.fence_lo = self._verify(crc)

    def _verify(self, crc: int) -> tuple[np.ndarray, np.ndarray]:
        """Stream the records once: CRC, strict order, seq range; collect the fences."""
        got, prev = 0, None
        fh, fl = [], []
        step = max(self.block, (_CHUNK // self.block) * self.block)
        for start in range(0, self.count, step):
            chunk = np.ascontiguousarray(self._rec[start:start + step])
            got = zlib.crc32(chunk.data, got)
            hi, lo = chunk[:, 0], chunk[:, 1]
            seq = chunk[:, 2] & SEQ_MASK
            bad_order = not is_sorted_unique(hi, lo) or (
                prev is not None and (int(hi[0]), int(lo[0])) <= prev)
            if bad_order or int(seq.min()) < self.min_seq or int(seq.max()) > self.max_seq:
                raise RunFileError(f"run file {self.path}: records out of order or range")
            prev = (int(hi[-1]), int(lo[-1]))
            fh.append(hi[::self.block].copy())
            fl.append(lo[::self.block].copy())
        if got != crc:
            raise RunFileError(f"run file {self.path}: record checksum mismatch")
        empty = np.zeros(0, dtype=np.uint64)
        return (np.concatenate(fh) if fh else empty), (np.concatenate(fl) if fl else empty)

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
        if not self.count or not len(hi):
            return found, seq
        for start in range(0, len(hi), 4096):  # bounds the gathered blocks to ~28 MB
            sl = slice(start, start + 4096)
            found[sl], seq[sl] = self._contains(hi[sl], lo[sl])
        return found, seq

    def _contains(self, hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        fh, fl = self.fence_hi, self.fence_lo
        # the last block whose first key is <= (hi, lo): by hi, then step back over
        # blocks that start with the same hi and a larger lo (only with equal-hi streaks)
        b = np.searchsorted(fh, hi, side="right").astype(np.int64) - 1
        if (fh[np.maximum(b, 0)] == hi).any():  # rare: skip the loop's calls otherwise
            while True:
                bc = np.maximum(b, 0)
                back = (fh[bc] == hi) & (fl[bc] > lo) & (b >= 0)
                if not back.any():
                    break
                b[back] -= 1
        live = np.flatnonzero(b >= 0)
        if len(live) > _SCAN_MAX:
            return self._search(hi, lo, b, live)
        found = np.zeros(len(hi), dtype=bool)
        seq = np.zeros(len(hi), dtype=np.uint64)
        if not len(live):
            return found, seq
        # small batch: gather only the hi column of each key's block (8 bytes a record);
        # lo and seq are read just where hi matched, about one record per present key
        idx = b[live, None] * self.block + self._offsets
        np.minimum(idx, self.count - 1, out=idx)
        flat = self._flat
        key_at, col = np.nonzero(flat[idx * 3] == hi[live, None])
        rows = idx[key_at, col]
        keys = live[key_at]
        hit = flat[rows * 3 + 1] == lo[keys]
        found[keys[hit]] = True
        seq[keys[hit]] = flat[rows[hit] * 3 + 2]
        return found, seq

    def _search(self, hi: np.ndarray, lo: np.ndarray, b: np.ndarray,
                live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Large batch: a branchless binary search inside each key's block, all keys at
        once (log2(block) steps of n gathers instead of block-size gathers per key)."""
        flat = self._flat
        kh, kl = hi[live], lo[live]
        first = b[live] * self.block
        size = np.minimum(self.block, self.count - first)
        while True:
            half = size // 2
            if not half.any():
                break
            mid = first + half
            mh, ml = flat[mid * 3], flat[mid * 3 + 1]
            below = (mh < kh) | ((mh == kh) & (ml <= kl))
            first = np.where(below, mid, first)
            size -= half
        hit = (flat[first * 3] == kh) & (flat[first * 3 + 1] == kl)
        found = np.zeros(len(hi), dtype=bool)
        seq = np.zeros(len(hi), dtype=np.uint64)
        found[live[hit]] = True
        seq[live[hit]] = flat[first[hit] * 3 + 2]
        return found, seq

    def close(self) -> None:
        """Drop this object's reference to the map (numpy unmaps it once no view is left)."""
        self._rec = np.zeros((0, 3), dtype="<u8")
        self._flat = self._rec.reshape(-1)
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
