"""``dedup.admin.salvage`` on a ledger SQLite cannot read: bounded in reads, nothing half-made.

A ledger truncated to half or without its SQLite header made the old salvage split
the rowid range +-2**62 down to single rowids (minutes, then a scratch file left
behind when killed); a byte flipped inside a row was read back as another value.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from dedup import LedgerDamaged, State, UrlSeen
from dedup.admin.salvage import classify, repair
from dedup.journal.journal import Journal
from dedup.store.statedir import ledger_path

pytestmark = pytest.mark.usefixtures("store_impl")  # compiled and numpy/Python alike


def make_state(d: Path, n: int = 3000) -> None:
    with UrlSeen(d, capacity=10_000, shards=2) as seen:
        for i in range(0, n, 100):
            seen.admit([f"http://h{i % 7}.example/p/{j}" for j in range(i, i + 100)], depth=1)


def budget(db: Path) -> int:
    pages = max(1, db.stat().st_size // 4096)
    return 5 * (256 + 8 * pages) + 2  # five rowid tables, each its own budget; contents 2


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
    assert report.kept == {"meta": 0, "log": 0, "queue": 0, "outcomes": 0, "notes": 0,
                           "contents": 0}
    assert report.probes <= 5 * 130 + 2  # ~2 x 63 a rowid table, 2 reads for contents
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


def make_crawl_state(d: Path) -> None:
    """A state dir with what a crawl keeps beside the keys: referrers (notes) and body
    digests (contents), and outcomes with an error text."""
    with UrlSeen(d, capacity=10_000, shards=2) as seen:
        for page in range(40):
            new = seen.admit([f"http://h{page % 3}.example/p/{page}/{j}" for j in range(8)],
                             depth=1)
            seen.records.note_referrers([(new[0].seq, new[-1].seq, f"http://h0.example/from/{page}")])
            seen.records.note_captures([(f"sha1:{page:032d}", f"http://h1.example/c/{page}",
                                 "2026-01-01T00:00:00Z")])
            seen.records.record_outcomes([(new[0].seq, State.FETCHED, 200, "not html")])


def flip_text(db: Path, text: str) -> None:
    """Make the stored ``text`` (stored once) not UTF-8: a byte >= 0x80 before an ASCII one."""
    data = bytearray(db.read_bytes())
    at = data.find(text.encode())
    assert at > 0 and data.find(text.encode(), at + 1) < 0
    data[at + 6] ^= 0x80
    db.write_bytes(bytes(data))


@pytest.mark.parametrize(("table", "text"), [("contents", "sha1:" + "17".zfill(32)),
                                             ("notes", "http://h0.example/from/23"),
                                             ("meta", '"seed": 0')])
def test_text_that_is_not_utf8_is_damage_and_its_row_dropped(tmp_path, table, text):
    """The sqlite3 module cannot read such text (an OperationalError, the class of a
    locked file, which classify re-raised): the journal reads it as damage, and the
    salvage reads the row's bytes and drops it by its checksum."""
    make_crawl_state(tmp_path)
    db = ledger_path(tmp_path)
    flip_text(db, text)
    with pytest.raises(LedgerDamaged, match="not UTF-8"), Journal(db, readonly=True) as j:
        j.verify()
    assert "not UTF-8" in classify(tmp_path).ledger
    report = repair(tmp_path, fallback_meta={"geometry": {"capacity": 10_000,
                                                           "error_rate": 0.01, "shards": 2,
                                                           "seed": 0, "growth": 2}})
    assert report.bad_rows[table] == 1
    with Journal(db, readonly=True) as j:
        assert j.verify() > 0
        assert len(list(j.notes())) == 40 - (table == "notes")
        assert len(list(j.contents())) == 40 - (table == "contents")


def test_repair_carries_referrers_and_digests_under_the_new_seqs(tmp_path):
    """Repair renumbers seqs: the notes runs follow their rows (a dropped row shortens
    its run), the contents rows are kept, so a page fetched after a repair still names
    its referrer and a body its first capture."""
    make_crawl_state(tmp_path)
    with UrlSeen(tmp_path, readonly=True) as seen:
        url_of = {seen.ledger.journal.row(s).url: s for s in range(1, len(seen) + 1)}
        want = {u: seen.records.referrer_of(s) for u, s in url_of.items()}
    db = ledger_path(tmp_path)
    con = sqlite3.connect(db)
    first, n, fps = con.execute("SELECT seq, n, fps FROM log ORDER BY seq LIMIT 1 "
                                "OFFSET 5").fetchone()
    con.close()
    data = bytearray(db.read_bytes())
    at = data.find(fps)
    data[at + 3] ^= 1  # a batch of 8 URLs: its log row fails its checksum
    db.write_bytes(bytes(data))
    report = repair(tmp_path)
    assert report.bad_rows["log"] == 1 and len(report.orphans) == n - 1  # one was fetched
    with UrlSeen(tmp_path, readonly=True) as seen:
        got = {}
        for s in range(1, len(seen) + 1):
            row = seen.ledger.journal.row(s)
            got[row.url] = seen.records.referrer_of(s)
        assert seen.records.first_capture("sha1:" + "5".zfill(32)) == ("http://h1.example/c/5",
                                                              "2026-01-01T00:00:00Z")
    lost = {u for u, s in url_of.items() if first <= s < first + n}
    assert got == {u: r for u, r in want.items() if u not in lost}


def test_meta_that_is_not_json_is_damage(tmp_path):
    make_state(tmp_path)
    db = ledger_path(tmp_path)
    data = bytearray(db.read_bytes())
    at = data.find(b'"growth": 2')
    data[at + 9] = ord("{")
    db.write_bytes(bytes(data))
    with pytest.raises(LedgerDamaged, match="meta 'geometry' is not JSON"):
        UrlSeen(tmp_path, readonly=True)
    assert "not JSON" in classify(tmp_path).ledger


def test_a_damaged_index_page_is_found_by_the_structure_check(tmp_path):
    """A page of the frontier's (host, id) index no row scan reads: quick_check finds it
    (before, verify passed and the crawl failed on its first frontier read)."""
    make_state(tmp_path)
    db = ledger_path(tmp_path)
    con = sqlite3.connect(db)
    page = con.execute("SELECT max(pageno) FROM dbstat WHERE name = 'queue_host'").fetchone()[0]
    con.close()
    data = bytearray(db.read_bytes())
    for i in range(page * 4096 - 80, page * 4096 - 16):
        data[i] ^= 0x5A
    db.write_bytes(bytes(data))
    with Journal(db, readonly=True) as j, pytest.raises(LedgerDamaged, match="structure check"):
        j.verify()
    report = repair(tmp_path)
    assert report.damage.journal and not report.bad_rows["queue"]
    with Journal(db, readonly=True) as j:
        j.verify()
        assert sum(len(g[2]) for g in j.queue_groups()) == 3000
