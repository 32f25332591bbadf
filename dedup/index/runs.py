"""Immutable sorted run files of the fingerprint index: codec, atomic write, open, read.

A run is one file of 24-byte records ``(hi, lo, seq)`` (little-endian uint64),
sorted by ``(hi, lo)``, one record per fingerprint; ``seq`` is the ledger
sequence number, top bit set for a tombstone. Layout::

    header   64 bytes  magic b"BCFPRUN1", format version, records per block,
                       record count, min and max seq (tombstone bit masked),
                       CRC32 of the records, CRC32 and length of the filter,
                       CRC32 of the header before it
    records  24 bytes each
    filter   the run's probe filter (see sortedkeys.filter_add), or nothing

The filter is built by :func:`write_run` as the records stream (it is told how many
to expect) and stored so that opening a run does not recompute it: setting three
scattered bits per record was the dearest part of an open (~120 ns a record). A run
without one (format 1, or written without a count to expect) gets it computed at open,
as before; format 1 files still open.

Why a file and not a SQLite table: the records are written once, in order, in
large sequential writes; lookups go through the radix directory and probe
filter of :mod:`dedup.index.sortedkeys`, kept in RAM, and read a key's bucket (~16
records) with ``pread``. The file is also mapped, for the vectorized search of
large batches (replays, rebuilds), which :meth:`Run.release` lets go of; opening
and merging stream the records with plain reads, so no path maps a whole run.
bench/index_bench.py measures this against SQLite ``WITHOUT ROWID`` runs.

Opening validates every header field against the file size before mapping
anything, then streams the records once (bounded memory) to check the CRC, the
order and the seq range and to count the directory, and checks the stored filter's
CRC; a large run is checked in segments on parallel threads (the reads, the CRC
and numpy's passes let go of the GIL), their CRCs combined: a truncated, corrupted or
hostile file raises :class:`RunFileError` (an :class:`~dedup.base.errors.IndexDamaged`),
never a huge allocation and never a wrong answer. :func:`verify_run` makes the
same checks without building the directory, for a reader that only asks "is it
whole?" (``bloomcrawl stats``).
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import numpy as np

from dedup.base.atomic import atomic_write
from dedup.base.errors import IndexDamaged
from dedup.index.sortedkeys import (
    BLOCK_RECORDS,
    RECORD_SIZE,
    SEQ_MASK,
    Query,
    SortedKeys,
    columns,
    directory_bits,
    filter_add,
    filter_size,
)
from dedup.index.sortedkeys import TOMBSTONE as TOMBSTONE  # fpindex takes it from here

MAGIC = b"BCFPRUN1"
FORMAT_VERSION = 2  # 1: no stored filter (still read)
MAX_BLOCK_RECORDS = 1 << 16
_HEAD = struct.Struct("<8sIIQQQI")
_FILTER = struct.Struct("<IQ")  # format 2: the filter's CRC32 and length in bytes
HEADER_SIZE = 64
_CHUNK = 1 << 16  # records per streamed chunk (1.5 MiB)
# records per step of an open's check (384 KiB): its temporaries come on top of the
# steady RAM while the index installs a merged run, on one thread per segment
_OPEN_CHUNK = 1 << 14
_FILTER_MAX_BYTES = filter_size(1 << 62) // 8  # the largest filter filter_size makes
# a run of at least this many records is checked at open in segments on threads
_PARALLEL_MIN = 16 * _CHUNK


class RunFileError(IndexDamaged):
    """A run file is missing, truncated, corrupted, of another format or not a run file
    at all."""


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


def _pack_header(block: int, count: int, min_seq: int, max_seq: int, crc: int,
                 filter_crc: int, filter_len: int) -> bytes:
    body = (_HEAD.pack(MAGIC, FORMAT_VERSION, block, count, min_seq, max_seq, crc)
            + _FILTER.pack(filter_crc, filter_len))
    head = body + struct.pack("<I", zlib.crc32(body))
    return head.ljust(HEADER_SIZE, b"\0")


def write_run(path: str | os.PathLike[str],
              chunks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]],
              *, block_records: int = BLOCK_RECORDS,
              should_stop: Callable[[], bool] | None = None,
              expect: int | None = None) -> int:
    """Write the records of ``chunks`` (each ``(hi, lo, seq)``, together strictly
    increasing by ``(hi, lo)``) as a run file at ``path``, atomically; return the count.

    Streams: memory is one chunk, whatever the run's size, plus the probe filter
    (one byte a record) when ``expect`` (at least the number of records; a list
    or tuple of chunks is counted here) says how large to make it: the filter is
    stored after the records, and opening the run reads it instead of computing it.
    ``should_stop`` is polled between chunks; when it answers True the write is
    abandoned (``InterruptedError``) and no file is left behind.
    """
    if not 1 <= block_records <= MAX_BLOCK_RECORDS:
        raise ValueError(f"block_records must be 1..{MAX_BLOCK_RECORDS}, not {block_records}")
    if expect is None and isinstance(chunks, list | tuple):
        expect = sum(len(c[0]) for c in chunks)
    bloom = np.zeros(filter_size(expect) // 8, dtype=np.uint8) if expect else None
    dtype = records_dtype()
    written = 0

    def body(f: BinaryIO) -> None:
        nonlocal written
        f.write(b"\0" * HEADER_SIZE)
        count, crc, lo_seq, hi_seq = 0, 0, None, None
        last: tuple[int, int] | None = None
        for hi, lo, seq in _sliced(chunks):
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
            crc = zlib.crc32(rec, crc)  # the array's own buffer: no bytes copy
            f.write(rec)
            if bloom is not None:
                filter_add(bloom, hi, lo)
            masked = seq & SEQ_MASK
            mn, mx = int(masked.min()), int(masked.max())
            lo_seq = mn if lo_seq is None else min(lo_seq, mn)
            hi_seq = mx if hi_seq is None else max(hi_seq, mx)
            count += n
            # let go before the next chunk is made: a merge computes it here, and this
            # slice would keep its whole chunk alive beside the next one's temporaries
            del hi, lo, seq, rec, masked
        stored = bloom if bloom is not None and 0 < count <= (expect or 0) else None
        filter_crc, filter_len = 0, 0
        if stored is not None:
            f.write(stored.data)
            filter_crc, filter_len = zlib.crc32(stored.data), stored.nbytes
        f.seek(0)
        f.write(_pack_header(block_records, count, lo_seq or 0, hi_seq or 0, crc,
                             filter_crc, filter_len))
        written = count

    atomic_write(path, body)
    return written


def _sliced(chunks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]
            ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The chunks cut into slices of at most ``_CHUNK`` records: a flush hands
    over its whole buffer at once, and each slice is copied twice on its way out."""
    for hi, lo, seq in chunks:
        for a in range(0, len(hi), _CHUNK):
            yield hi[a:a + _CHUNK], lo[a:a + _CHUNK], seq[a:a + _CHUNK]
        del hi, lo, seq  # not alive while the next chunk is made


class Run:
    """One open run file: the records mapped read-only, the radix directory in RAM."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        size, head = _read_head(self.path)
        self.block, self.count, self.min_seq, self.max_seq, crc, fcrc, flen = _parse_header(
            self.path, head, size)
        self.nbytes = size
        self._map: mmap.mmap | None = None
        self._fd: int | None = None
        if self.count:  # a plain ndarray over our own map (numpy.memmap taxes every index)
            self._fd = os.open(self.path, os.O_RDONLY)
            try:
                if hasattr(os, "posix_fadvise"):  # lookups read a bucket: no readahead
                    os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)
                self._map = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ)
            except BaseException:
                os.close(self._fd)
                raise
            self._rec = np.frombuffer(self._map, dtype="<u8", count=self.count * 3,
                                      offset=HEADER_SIZE).reshape(self.count, 3)
        else:
            self._rec = np.zeros((0, 3), dtype="<u8")
        try:
            self.keys = self._verify(crc, fcrc, flen)
        except BaseException:
            self.close()
            raise

    def release(self) -> None:
        """Let go of the mapped pages this process has touched (they stay in the page
        cache): a vectorized search of a large batch (replay, rebuild) touches
        pages all over the run, and without this they would stay in RSS. Page- and
        group-sized lookups read with ``pread`` and map nothing."""
        if self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED)

    def _verify(self, crc: int, filter_crc: int, filter_len: int) -> SortedKeys:
        """Stream the records once: CRC, strict order, seq range; count the buckets;
        read the stored filter (checked by its CRC) or build it."""
        bits = directory_bits(self.count, self.block)
        counts = np.zeros(1 << bits, dtype=np.int64)
        bloom = self._stored_filter(filter_crc, filter_len)
        build = bloom is None
        if build:
            bloom = np.zeros(filter_size(self.count) // 8, dtype=np.uint8)
        lock = threading.Lock()  # the shared counts and filter

        def segment(first: int, stop: int) -> _RecordCheck:
            check = _RecordCheck(self.path, self.min_seq, self.max_seq, first)
            for start in range(first, stop, _OPEN_CHUNK):
                chunk = self.records(start, min(start + _OPEN_CHUNK, stop))
                check.feed(chunk)
                hi = chunk[:, 0]
                ids = (hi >> np.uint64(64 - bits)).astype(np.intp)
                low = int(ids.min())  # sorted unless damaged: a few buckets, not all 2**bits
                part = np.bincount(ids - low)
                with lock:
                    counts[low:low + len(part)] += part
                    if build:
                        filter_add(bloom, hi, chunk[:, 1])
            return check

        parts = _segments(self.count)
        if len(parts) > 1:
            with ThreadPoolExecutor(len(parts), thread_name_prefix="run-open") as pool:
                checks = list(pool.map(lambda p: segment(*p), parts))
        else:
            checks = [segment(*p) for p in parts]
        _RecordCheck.joined(self.path, checks, self.min_seq, self.max_seq).finish(crc)
        rec = self._rec
        return SortedKeys(rec[:, 0], rec[:, 1], rec[:, 2], counts, bits, columns(rec, 3),
                          bloom, (self._fd, HEADER_SIZE) if self._fd is not None else None)

    def _stored_filter(self, filter_crc: int, filter_len: int) -> np.ndarray | None:
        """The filter stored after the records, its CRC checked; None if there is none."""
        if not filter_len:
            return None
        bloom = np.empty(filter_len, dtype=np.uint8)
        assert self._fd is not None
        got = os.preadv(self._fd, [bloom], HEADER_SIZE + self.count * RECORD_SIZE)
        if got != filter_len:
            raise RunFileError(f"run file {self.path}: short read of its filter: changed "
                               "under us")
        if zlib.crc32(bloom.data) != filter_crc:
            raise RunFileError(f"run file {self.path}: filter checksum mismatch: the stored "
                               "filter is damaged")
        return bloom

    def records(self, start: int, stop: int) -> np.ndarray:
        """Records ``[start, stop)`` as an ``(n, 3)`` uint64 array, read into memory.

        Read, not mapped: streaming a whole run (opening it, merging it) through
        the map would map every page of it into this process (RSS of the whole
        index at a billion URLs); the map is for the lookups' scattered reads."""
        start, stop = max(0, start), min(stop, self.count)
        out = np.empty((max(0, stop - start), 3), dtype="<u8")
        if out.size:
            assert self._fd is not None
            got = os.preadv(self._fd, [out], HEADER_SIZE + start * RECORD_SIZE)
            if got != out.nbytes:
                raise RunFileError(f"run file {self.path}: short read ({got} of "
                                   f"{out.nbytes} bytes): changed under us")
        return out

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

    def find_each(self, todo: list[Query]) -> tuple[list[tuple[int, int]], list[Query]]:
        """Key by key (see :meth:`SortedKeys.find_each`): for page-sized batches."""
        return self.keys.find_each(todo)

    def find_into(self, hi: np.ndarray, lo: np.ndarray, todo: np.ndarray,
                  raw: np.ndarray, *, mapped: bool = False) -> None:
        """The keys ``todo`` marks (see :meth:`SortedKeys.find_into`); ``mapped``:
        searched through the map, as :meth:`contains` does."""
        if mapped:
            at = np.flatnonzero(todo)
            found, seq = self.contains(hi[at], lo[at])
            raw[at[found]] = seq[found]
            todo[at[found]] = 0
        else:
            self.keys.find_into(hi, lo, todo, raw)

    def close(self) -> None:
        """Drop this object's references to the map (numpy unmaps it once no view is left)."""
        self._rec = np.zeros((0, 3), dtype="<u8")
        self._map = None  # unmapped once the last view of it is gone
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        empty = np.zeros(0, dtype=np.uint64)
        self.keys = SortedKeys(empty, empty, empty, np.zeros(2, dtype=np.int64), 1)
        self.count = 0


class _RecordCheck:
    """The checks of a run's records as they stream by, in file order: the CRC over
    all of them, strict ``(hi, lo)`` order, seqs within the header's range.

    All records are read before anything is concluded, so that damage (the CRC
    fails) is told apart from records that are whole but wrong (the CRC passes,
    the order does not: a file written by something other than :func:`write_run`)."""

    def __init__(self, path: Path, min_seq: int, max_seq: int, first: int = 0) -> None:
        self.path, self.min_seq, self.max_seq = path, min_seq, max_seq
        self.crc, self.first, self.seen = 0, first, first  # first: the record it starts at
        self.nbytes = 0
        self.head: tuple[int, int] | None = None  # the first key fed
        self.prev: tuple[int, int] | None = None
        self.bad_at: int | None = None  # the first chunk found out of order or range

    @classmethod
    def joined(cls, path: Path, parts: list[_RecordCheck], min_seq: int,
               max_seq: int) -> _RecordCheck:
        """The check of the consecutive segments ``parts`` as one: their CRCs
        combined, the order checked across each boundary too."""
        whole = cls(path, min_seq, max_seq)
        for p in parts:
            if p.head is not None and whole.prev is not None and whole.bad_at is None and (
                    p.head <= whole.prev):
                whole.bad_at = p.first
            if whole.bad_at is None:
                whole.bad_at = p.bad_at
            whole.crc = crc32_combine(whole.crc, p.crc, p.nbytes)
            whole.nbytes += p.nbytes
            whole.prev = p.prev if p.prev is not None else whole.prev
        return whole

    def feed(self, chunk: np.ndarray) -> None:
        """The next records, an ``(n, 3)`` C-contiguous uint64 array."""
        self.crc = zlib.crc32(chunk.data, self.crc)
        self.nbytes += chunk.nbytes
        if len(chunk):
            hi, lo = chunk[:, 0], chunk[:, 1]
            if self.head is None:
                self.head = (int(hi[0]), int(lo[0]))
            if self.bad_at is None:
                seq = chunk[:, 2] & SEQ_MASK
                bad = not _increasing(hi, lo) or (
                    self.prev is not None and (int(hi[0]), int(lo[0])) <= self.prev)
                if bad or int(seq.min()) < self.min_seq or int(seq.max()) > self.max_seq:
                    self.bad_at = self.seen
            self.prev = (int(hi[-1]), int(lo[-1]))
        self.seen += len(chunk)

    def finish(self, crc: int) -> None:
        """Raise :class:`RunFileError` if anything fed was wrong."""
        if self.crc != crc:
            raise RunFileError(f"run file {self.path}: record checksum mismatch: the "
                               "records are damaged")
        if self.bad_at is not None:
            raise RunFileError(f"run file {self.path}: records out of order or out of the "
                               f"header's seq range (from record {self.bad_at} on) although "
                               "their checksum matches: not written by this program")


def _increasing(hi: np.ndarray, lo: np.ndarray) -> bool:
    """:func:`is_sorted_unique`, in one comparison when no two ``hi`` are equal
    (fingerprints are uniform hashes: the rule), the full test only otherwise."""
    return bool(np.all(hi[1:] > hi[:-1])) or is_sorted_unique(hi, lo)


def _segments(count: int) -> list[tuple[int, int]]:
    """``[first, stop)`` record ranges to check on parallel threads: one per CPU
    for a large run (whole chunks each), one for a small run."""
    if count < _PARALLEL_MIN:
        return [(0, count)]
    step = -(-count // min(os.cpu_count() or 1, 4) // _CHUNK) * _CHUNK
    return [(a, min(a + step, count)) for a in range(0, count, step)]


def _crc_mulmod(a: int, b: int) -> int:
    """``a * b`` modulo the CRC-32 polynomial, reflected (zlib's ``multmodp``)."""
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if not a & (m - 1):
                return p
        m >>= 1
        b = (b >> 1) ^ 0xEDB88320 if b & 1 else b >> 1


_X2N = [1 << 30]  # x^(2^k) modulo the polynomial, k = 0..31
for _ in range(31):
    _X2N.append(_crc_mulmod(_X2N[-1], _X2N[-1]))


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """``zlib.crc32(a + b)`` from ``crc1 = zlib.crc32(a)``, ``crc2 = zlib.crc32(b)`` and
    ``len(b)`` (zlib's ``crc32_combine``, which Python's zlib does not expose): what
    lets a run's segments be checked on separate threads."""
    p, k, n = 1 << 31, 3, len2  # x^0; multiply by x^(8 * len2)
    while n:
        if n & 1:
            p = _crc_mulmod(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return _crc_mulmod(p, crc1) ^ crc2


def verify_run(path: str | os.PathLike[str]) -> int:
    """Check a run file whole (header, size, records' CRC, order, seq range) without
    building its directory or mapping it: bounded memory, one sequential read.
    Returns its record count; raises :class:`RunFileError`."""
    path = Path(path)
    size, head = _read_head(path)
    _, count, min_seq, max_seq, crc, filter_crc, filter_len = _parse_header(path, head, size)
    check = _RecordCheck(path, min_seq, max_seq)
    buf = np.empty((min(count, _CHUNK), 3), dtype="<u8")
    try:
        with open(path, "rb") as f:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            f.seek(HEADER_SIZE)
            for start in range(0, count, _CHUNK):
                part = buf[:min(_CHUNK, count - start)]
                got = f.readinto(memoryview(part).cast("B"))
                if got != part.nbytes:
                    raise RunFileError(f"run file {path}: short read ({got} of {part.nbytes} "
                                       "bytes): changed under us")
                check.feed(part)
            stored = f.read(filter_len)
    except OSError as exc:
        raise RunFileError(f"run file {path}: cannot read: {exc}") from exc
    check.finish(crc)
    if len(stored) != filter_len or zlib.crc32(stored) != filter_crc:
        raise RunFileError(f"run file {path}: filter checksum mismatch: the stored filter "
                           "is damaged")
    return count


def check_run_header(path: str | os.PathLike[str]) -> int:
    """Check a run file's header (magic, version, its own CRC, fields) and that the
    file's size is what the header says, without reading its records: what a
    reader that only reports damage can afford (``bloomcrawl stats``). A flipped
    byte inside the records passes; :func:`verify_run` and opening the run catch it.
    Returns its record count; raises :class:`RunFileError`."""
    path = Path(path)
    size, head = _read_head(path)
    return _parse_header(path, head, size)[1]


def _read_head(path: Path) -> tuple[int, bytes]:
    """``(file size, its first HEADER_SIZE bytes)``; a missing file is damage too
    (the MANIFEST names it)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            return size, f.read(HEADER_SIZE)
    except FileNotFoundError:
        raise RunFileError(f"run file {path}: missing (the index MANIFEST names it)") from None
    except OSError as exc:
        raise RunFileError(f"run file {path}: cannot read: {exc}") from exc


def _parse_header(path: Path, head: bytes, size: int
                  ) -> tuple[int, int, int, int, int, int, int]:
    """Validate every header field against the file size; no allocation before.
    ``(block, count, min_seq, max_seq, records' CRC, filter's CRC, filter bytes)``."""
    if len(head) < HEADER_SIZE:
        raise RunFileError(f"run file {path}: truncated header ({len(head)} bytes)")
    magic, version, block, count, min_seq, max_seq, crc = _HEAD.unpack_from(head)
    if magic != MAGIC:
        raise RunFileError(f"run file {path}: not a fingerprint run (bad magic)")
    if version not in (1, FORMAT_VERSION):  # before its checksum: where that is depends on it
        raise RunFileError(f"run file {path}: format version {version}, "
                           f"this build reads 1 and {FORMAT_VERSION}")
    end = _HEAD.size + (_FILTER.size if version >= 2 else 0)
    (hcrc,) = struct.unpack_from("<I", head, end)
    if zlib.crc32(head[:end]) != hcrc or any(head[end + 4:HEADER_SIZE]):
        raise RunFileError(f"run file {path}: header checksum mismatch")
    filter_crc, filter_len = _FILTER.unpack_from(head, _HEAD.size) if version >= 2 else (0, 0)
    if not 1 <= block <= MAX_BLOCK_RECORDS:
        raise RunFileError(f"run file {path}: bad block size {block}")
    if filter_len and not filter_size(count) <= filter_len * 8 <= _FILTER_MAX_BYTES * 8:
        raise RunFileError(f"run file {path}: bad filter size {filter_len} bytes for "
                           f"{count} records")
    if size != HEADER_SIZE + count * RECORD_SIZE + filter_len:
        raise RunFileError(f"run file {path}: {size} bytes, header says {count} records "
                           f"and a {filter_len}-byte filter "
                           f"({HEADER_SIZE + count * RECORD_SIZE + filter_len} bytes): "
                           "truncated or damaged")
    if min_seq > max_seq or max_seq >= 1 << 63:
        raise RunFileError(f"run file {path}: bad seq range {min_seq}..{max_seq}")
    return block, count, min_seq, max_seq, crc, filter_crc, filter_len
