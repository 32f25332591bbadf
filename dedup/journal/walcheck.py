"""Refuse a ledger whose write-ahead log lost committed transactions to damage.

SQLite replays its WAL only up to the first frame whose cumulative checksum fails,
and silently ignores the rest: right after a kill -9 that is a torn last
transaction (never committed, so nothing is lost), but a bit flip in an early
frame makes it drop every *later* commit without a word, and the crawl would then
resume from an older state and cut its output files back to match. So before a
writer opens the ledger, this reads the WAL once (sequentially) and tells the two
apart: frames of the current WAL generation (its salts) that are *commit* frames,
after the first bad frame, mean committed work would be dropped.

Format: https://www.sqlite.org/fileformat2.html#walformat
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

from dedup.base.errors import LedgerDamaged

WAL_HEADER = 32
FRAME_HEADER = 24
_MAGIC_LE, _MAGIC_BE = 0x377F0682, 0x377F0683


def _checksum(data: bytes, s0: int, s1: int, big_endian: bool) -> tuple[int, int]:
    """SQLite's WAL checksum of ``data`` (a multiple of 8 bytes), continuing (s0, s1).

    The recurrence ``s0 += x0 + s1; s1 += x1 + s0`` is linear, so n steps are one
    sum: with A = [[1, 1], [1, 2]] and b_k = (x0, x0 + x1), s_n = A^n s_0 +
    sum_k A^(n-k) b_k, all mod 2**32 (numpy's wrapping uint64 keeps that exact).
    """
    words = np.frombuffer(data, dtype=">u4" if big_endian else "<u4").astype(np.uint64)
    x0, x1 = words[0::2], words[1::2]
    b0, b1 = x0, (x0 + x1) & np.uint64(0xFFFFFFFF)
    p = _powers(len(x0))  # p[j] = A^j as (a, b, c, d), mod 2**32
    rev = p[len(x0) - 1::-1] if len(x0) else p[:0]  # A^(n-k) for k = 1..n
    n = len(x0)
    a, b, c, d = (int(v) for v in p[n])
    t0 = int(np.sum(rev[:, 0] * b0 + rev[:, 1] * b1, dtype=np.uint64))
    t1 = int(np.sum(rev[:, 2] * b0 + rev[:, 3] * b1, dtype=np.uint64))
    m = 0xFFFFFFFF
    return (a * s0 + b * s1 + t0) & m, (c * s0 + d * s1 + t1) & m


_POW_CACHE: dict[int, np.ndarray] = {}


def _powers(n: int) -> np.ndarray:
    """A^0 .. A^n, each row (a, b, c, d) of [[a, b], [c, d]], entries mod 2**32."""
    got = _POW_CACHE.get(n)
    if got is None:
        rows = [(1, 0, 0, 1)]
        for _ in range(n):
            a, b, c, d = rows[-1]  # A^(j+1) = A^j @ A
            rows.append(((a + b) & 0xFFFFFFFF, (a + 2 * b) & 0xFFFFFFFF,
                         (c + d) & 0xFFFFFFFF, (c + 2 * d) & 0xFFFFFFFF))
        got = _POW_CACHE[n] = np.array(rows, dtype=np.uint64)
    return got


def check_wal(db_path: str | os.PathLike[str]) -> int:
    """Raise :class:`LedgerDamaged` if ``db_path``'s WAL holds committed frames past a
    damaged one; return how many valid frames it replays (0: no WAL, or empty)."""
    wal = Path(f"{os.fspath(db_path)}-wal")
    if not wal.exists():
        return 0
    with open(wal, "rb") as f:
        return _scan(f, wal)


def _scan(f: BinaryIO, wal: Path) -> int:
    head = f.read(WAL_HEADER)
    if len(head) < WAL_HEADER:
        return 0  # never written past its creation: nothing to replay
    magic, _, page_size, _, salt1, salt2, c1, c2 = struct.unpack(">8I", head)
    if magic not in (_MAGIC_LE, _MAGIC_BE):
        raise LedgerDamaged(f"{wal}: not a SQLite WAL (bad magic): the ledger is damaged")
    big = magic == _MAGIC_BE
    s = _checksum(head[:24], 0, 0, big)
    if s != (c1, c2):
        return 0  # SQLite ignores a WAL whose header fails: nothing replayed, nothing lost
    frame = FRAME_HEADER + page_size
    valid = index = 0
    bad_at: int | None = None
    while len(data := f.read(frame)) == frame:  # a shorter read is a torn tail
        _, commit, fs1, fs2, fc1, fc2 = struct.unpack(">6I", data[:FRAME_HEADER])
        ours = (fs1, fs2) == (salt1, salt2)  # else left over from an older generation
        if bad_at is None:
            nxt = _checksum(data[:8] + data[FRAME_HEADER:], *s, big) if ours else None
            if nxt != (fc1, fc2):
                bad_at = index
            else:
                s = nxt
                valid = index + 1 if commit else valid
        elif ours and commit:
            raise LedgerDamaged(
                f"{wal}: frame {bad_at} is damaged and committed transactions follow it "
                f"(frame {index}): SQLite would silently drop them")
        index += 1
    return valid
