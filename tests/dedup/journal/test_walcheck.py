"""dedup.journal.walcheck: a torn WAL tail is normal, committed frames after a damaged one are
not."""

from __future__ import annotations

import random
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest

from dedup.base.errors import LedgerDamaged
from dedup.journal.walcheck import FRAME_HEADER, WAL_HEADER, _checksum, check_wal


def reference_checksum(data: bytes, s0: int, s1: int, big: bool) -> tuple[int, int]:
    """The WAL checksum exactly as the SQLite file format page spells it."""
    fmt = ">2I" if big else "<2I"
    for i in range(0, len(data), 8):
        x0, x1 = struct.unpack(fmt, data[i:i + 8])
        s0 = (s0 + x0 + s1) & 0xFFFFFFFF
        s1 = (s1 + x1 + s0) & 0xFFFFFFFF
    return s0, s1


@pytest.mark.parametrize("n", [0, 8, 24, 4104])
@pytest.mark.parametrize("big", [False, True])
def test_vectorized_checksum_equals_the_loop(n, big):
    data = random.Random(n).randbytes(n)
    assert _checksum(data, 5, 7, big) == reference_checksum(data, 5, 7, big)


@pytest.fixture
def live_wal(tmp_path: Path) -> tuple[Path, int]:
    """A copy of a database and its WAL holding 20 commits (no checkpoint)."""
    src = tmp_path / "src.sqlite"
    db = sqlite3.connect(src, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE t(x)")
    for i in range(20):
        db.execute("INSERT INTO t VALUES (?)", (random.Random(i).randbytes(3000),))
    copy = tmp_path / "copy.sqlite"
    shutil.copy(src, copy)
    shutil.copy(f"{src}-wal", f"{copy}-wal")
    db.close()
    page_size = struct.unpack(">I", Path(f"{copy}-wal").read_bytes()[8:12])[0]
    return copy, page_size


def rows_sqlite_sees(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT count(*) FROM t").fetchone()[0]


def test_an_intact_wal_passes(live_wal):
    path, _ = live_wal
    assert check_wal(path) > 20
    assert rows_sqlite_sees(path) == 20


def test_a_torn_tail_passes_like_sqlite_reads_it(live_wal):
    path, _ = live_wal
    wal = Path(f"{path}-wal")
    wal.write_bytes(wal.read_bytes()[:-1000])  # kill -9 in the middle of the last frame
    assert check_wal(path) > 0
    assert rows_sqlite_sees(path) == 19  # only the uncommitted last transaction is gone


def test_a_flipped_bit_before_later_commits_is_refused(live_wal):
    path, page_size = live_wal
    wal = Path(f"{path}-wal")
    data = bytearray(wal.read_bytes())
    data[WAL_HEADER + 3 * (FRAME_HEADER + page_size) + FRAME_HEADER + 100] ^= 1
    wal.write_bytes(bytes(data))
    with pytest.raises(LedgerDamaged, match=r"frame 3 is damaged and committed transactions "
                                            r"follow it \(frame \d+\)"):
        check_wal(path)
    assert rows_sqlite_sees(path) < 5  # what SQLite alone would have done: drop them quietly


def test_no_wal_and_stale_frames_of_an_older_generation_pass(live_wal, tmp_path):
    path, page_size = live_wal
    assert check_wal(tmp_path / "none.sqlite") == 0
    wal = Path(f"{path}-wal")
    data = bytearray(wal.read_bytes())
    # after a checkpoint SQLite rewrites the WAL from the start with new salts; the
    # frames past what it rewrote are an older generation's (other salts): ignored
    frame = FRAME_HEADER + page_size
    for off in range(WAL_HEADER + 5 * frame, len(data) - frame + 1, frame):
        struct.pack_into(">I", data, off + 8, 12345)
    wal.write_bytes(bytes(data))
    assert 0 < check_wal(path) <= 5
