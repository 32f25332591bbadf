"""The SQLite ledger: exact membership, monotonic sequence numbers, frontier paging."""

from __future__ import annotations

import hashlib

import pytest

from dedup.ledger import Ledger, QueuedRow, State


def fp(i: int) -> bytes:
    return hashlib.md5(str(i).encode()).digest()


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite") as led:
        yield led


def add(led: Ledger, ids, host="a.test", depth=0, state=State.QUEUED):
    return led.insert([(fp(i), f"http://{host}/{i}", host, depth, state) for i in ids])


def test_wal_mode(ledger):
    assert ledger._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # checkpoints every 10000 WAL pages, not 1000: random fingerprint inserts make
    # each group commit dirty pages all over the index
    assert ledger._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 10000


def test_insert_returns_consecutive_seqs_and_find_is_exact(ledger):
    assert list(add(ledger, range(5))) == [1, 2, 3, 4, 5]
    assert list(add(ledger, range(5, 8))) == [6, 7, 8]
    assert ledger.hwm() == 8
    probe = [fp(i) for i in range(0, 20, 2)]
    assert ledger.find(probe) == {fp(i) for i in (0, 2, 4, 6)}
    assert len(ledger) == 8


def test_find_handles_more_than_sqlite_parameter_limit(ledger):
    add(ledger, range(35_000))
    probe = [fp(i) for i in range(34_990, 35_010)] + [fp(i) for i in range(40_000)]
    assert ledger.find(probe) == {fp(i) for i in range(35_000)}


def test_seq_is_never_reused_after_forgetting_the_newest_row(ledger):
    # A reused seq at or below a snapshot's high-water mark would never be replayed.
    add(ledger, range(3))
    assert ledger.forget([fp(2)]) == 1
    assert list(add(ledger, [2])) == [4]
    assert ledger.hwm() == 4


def test_duplicate_fingerprint_is_refused_and_rolled_back(ledger):
    add(ledger, [1])
    with pytest.raises(Exception, match="UNIQUE"):
        add(ledger, [2, 1])
    assert ledger.find([fp(2)]) == set()


@pytest.mark.parametrize("autocommit", [True, False])
@pytest.mark.parametrize("n", [3, 2500])  # one INSERT statement, or several in a savepoint
def test_a_failing_batch_leaves_nothing_and_keeps_earlier_rows(tmp_path, autocommit, n):
    with Ledger(tmp_path / "l.sqlite", autocommit=autocommit) as led:
        assert list(add(led, [-1])) == [1]
        assert list(add(led, range(n))) == list(range(2, n + 2))  # consecutive past 1000
        with pytest.raises(Exception, match="UNIQUE"):
            add(led, [*range(n, 2 * n), n - 1])  # the last row is a duplicate
        led.commit()
        assert len(led) == n + 1 and led.find([fp(n)]) == set()
        assert list(add(led, [n])) == [n + 2]  # no seq lost to the failed batch

def test_mark_queued_and_counts(ledger):
    seqs = add(ledger, range(6), host="a.test")
    add(ledger, range(6, 9), host="b.test", depth=2)
    ledger.mark(seqs[0], State.FETCHED, status=200)
    ledger.mark_many([(seqs[1], State.FAILED, None, "timeout"),
                      (seqs[2], State.SKIPPED, None, "robots.txt")])
    assert ledger.counts() == {"queued": 6, "fetched": 1, "failed": 1, "skipped": 1}
    assert ledger.queued_hosts() == ["a.test", "b.test"]
    page = ledger.queued(2)
    assert page == [QueuedRow(4, "http://a.test/3", "a.test", 0),
                    QueuedRow(5, "http://a.test/4", "a.test", 0)]
    assert [r.seq for r in ledger.queued(10, after_seq=5)] == [6, 7, 8, 9]
    assert [r.seq for r in ledger.queued(10, host="b.test")] == [7, 8, 9]
    assert ledger.queued(10, host="b.test")[0].depth == 2
    row = ledger.get(fp(1))
    assert row["state"] == "failed" and row["error"] == "timeout"


def test_fps_after_replays_in_order(ledger):
    add(ledger, range(10))
    chunks = list(ledger.fps_after(6, chunk=2))
    seqs = [s for c in chunks for s in c[0]]
    assert seqs == [7, 8, 9, 10]
    assert b"".join(c[1] for c in chunks) == b"".join(fp(i) for i in range(6, 10))


def test_meta_roundtrip(ledger):
    assert ledger.meta_get("nope", 42) == 42
    ledger.meta_set("config", {"a": [1, 2], "b": None})
    assert ledger.meta_get("config") == {"a": [1, 2], "b": None}


def test_rows_and_import_rows_union_by_fingerprint(tmp_path, ledger):
    add(ledger, range(4))
    ledger.mark(1, State.FETCHED, status=200)
    with Ledger(tmp_path / "other.sqlite") as other:
        add(other, range(2, 7), host="b.test")
        assert other.import_rows(ledger.rows()) == 2
        assert len(other) == 7
        assert other.get(fp(0))["state"] == "fetched"
        assert other.get(fp(2))["host"] == "b.test"  # kept its own row


def test_readonly_cannot_write_and_requires_file(tmp_path, ledger):
    add(ledger, range(3))
    ro = Ledger(ledger.path, readonly=True)
    assert len(ro) == 3
    with pytest.raises(Exception, match="readonly"):
        ro.meta_set("x", 1)
    ro.close()
    with pytest.raises(FileNotFoundError):
        Ledger(tmp_path / "missing.sqlite", readonly=True)
