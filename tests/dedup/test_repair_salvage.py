"""``dedup.admin.repair`` on a ledger SQLite cannot read: bounded in reads, nothing half-made.

A ledger truncated to half or without its SQLite header made the old salvage split
the rowid range +-2**62 down to single rowids (minutes, then a scratch file left
behind when killed); a byte flipped inside a row was read back as another value.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from dedup import LedgerDamaged, UrlSeen
from dedup.admin.repair import classify, repair
from dedup.journal.journal import Journal
from dedup.store.statedir import ledger_path

pytestmark = pytest.mark.usefixtures("store_impl")  # compiled and numpy/Python alike


def make_state(d: Path, n: int = 3000) -> None:
    with UrlSeen(d, capacity=10_000, shards=2) as seen:
        for i in range(0, n, 100):
            seen.admit([f"http://h{i % 7}.example/p/{j}" for j in range(i, i + 100)], depth=1)


def budget(db: Path) -> int:
    pages = max(1, db.stat().st_size // 4096)
    return 4 * (256 + 8 * pages)  # four tables, each its own budget


@pytest.mark.parametrize("damage", ["truncate", "header"])
def test_salvage_ends_within_its_budget_and_leaves_nothing_half_made(tmp_path, damage):
    make_state(tmp_path)
    db = ledger_path(tmp_path)
    size = db.stat().st_size
    if damage == "truncate":
        with open(db, "r+b") as f:
            f.truncate(size // 2)
    else:
        data = bytearray(db.read_bytes())
        data[:16] = bytes(16)
        db.write_bytes(bytes(data))
    original = db.read_bytes()
    limit = budget(db)
    Path(f"{db}.salvage").write_bytes(b"left by a killed repair")
    Path(f"{db}.repaired").write_bytes(b"left by a killed repair")
    assert classify(tmp_path).ledger
    start = time.monotonic()
    try:
        report = repair(tmp_path)
    except LedgerDamaged as exc:  # no meta and no copy of it: nothing to rebuild from
        assert "nothing to repair from" in str(exc)
        assert db.read_bytes() == original  # untouched
    else:
        assert report.damage.journal and report.probes <= limit
        assert report.set_aside and report.set_aside[0].read_bytes() == original
    assert time.monotonic() - start < 10
    assert not Path(f"{db}.salvage").exists() and not Path(f"{db}.repaired").exists()


def test_nothing_readable_costs_a_bounded_number_of_reads(tmp_path):
    make_state(tmp_path)
    db = ledger_path(tmp_path)
    data = bytearray(db.read_bytes())
    data[:16] = bytes(16)
    db.write_bytes(bytes(data))
    report = repair(tmp_path, fallback_meta={"geometry": {"capacity": 10_000,
                                                           "error_rate": 0.01, "shards": 2,
                                                           "seed": 0, "growth": 2}})
    assert report.kept == {"meta": 0, "log": 0, "queue": 0, "outcomes": 0}
    assert report.probes <= 4 * 130  # ~2 x 63 a table
    assert report.meta_from == ["geometry"]
    with Journal(db, readonly=True) as j:
        assert j.last_seq() == 0 and j.verify() >= 0


def test_a_flipped_byte_inside_a_row_is_refused_and_its_row_dropped(tmp_path):
    make_state(tmp_path)
    db = ledger_path(tmp_path)
    con = sqlite3.connect(db)
    blob = con.execute("SELECT fps FROM log ORDER BY seq DESC LIMIT 1").fetchone()[0]
    con.close()
    data = bytearray(db.read_bytes())
    at = data.find(blob[:32])
    data[at + 5] ^= 1
    db.write_bytes(bytes(data))
    with Journal(db, readonly=True) as j, pytest.raises(LedgerDamaged, match="checksum"):
        j.verify()
    damage = classify(tmp_path)
    assert "log row" in damage.ledger and not damage.wal
    report = repair(tmp_path)
    assert report.bad_rows["log"] == 1
    assert report.orphans  # its URLs' text survived: the caller queues them again
    with Journal(db, readonly=True) as j:
        j.verify()


def test_a_clean_ledger_is_kept(tmp_path):
    make_state(tmp_path)
    db = ledger_path(tmp_path)
    before = db.read_bytes()
    report = repair(tmp_path)
    assert not report.damage.journal and not report.set_aside
    assert db.read_bytes() == before
