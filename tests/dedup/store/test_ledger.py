"""The ledger (format 2): journal + fingerprint index behind one API: exact
membership, seqs never reused, forgetting, the frontier, union on import, and
an index that is rebuilt or replayed from the journal whatever state it is in."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from dedup.base.errors import StateFormatError
from dedup.store.ledger import Ledger, QueuedRow, State

pytestmark = pytest.mark.usefixtures("store_impl")  # compiled and numpy/Python alike


def fp(i: int) -> bytes:
    return hashlib.md5(str(i).encode()).digest()


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite") as led:
        yield led


def add(led: Ledger, ids, host="a.test", depth=0):
    """Admit the fingerprints of ``ids`` as one batch of queued URLs."""
    ids = list(ids)
    return led.append(b"".join(fp(i) for i in ids), depth=depth,
                      urls=[f"http://{host}/{i}" for i in ids], hosts=[host] * len(ids))


def present(led: Ledger, fps) -> set[bytes]:
    """The subset of ``fps`` (16-byte fingerprints) the ledger holds."""
    fps = list(fps)
    if not fps:
        return set()
    return {fps[i] for i in led.held_among(b"".join(fps))}


def test_append_returns_consecutive_seqs_and_lookup_is_exact(ledger):
    assert list(add(ledger, range(5))) == [1, 2, 3, 4, 5]
    assert list(add(ledger, range(5, 8))) == [6, 7, 8]
    assert ledger.last_seq() == 8
    probe = [fp(i) for i in range(0, 20, 2)]
    assert present(ledger, probe) == {fp(i) for i in (0, 2, 4, 6)}
    assert len(ledger) == 8


def test_lookup_is_exact_across_runs_buffer_and_reopen(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path, autocommit=False, index_buffer=1000) as led:
        for start in range(0, 35_000, 500):
            add(led, range(start, start + 500))
            led.commit()
        assert led.index_stats()["runs"] >= 2  # flushed into runs, not only the buffer
        probe = [fp(i) for i in range(34_990, 35_010)] + [fp(i) for i in range(40_000)]
        assert present(led, probe) == {fp(i) for i in range(35_000)}
    with Ledger(path, index_buffer=1000) as led:  # runs + replay past their mark
        assert present(led, [fp(i) for i in range(34_000, 36_000)]) == {
            fp(i) for i in range(34_000, 35_000)}


def test_an_index_lost_or_from_another_ledger_is_rebuilt_from_the_journal(tmp_path):
    a, b = tmp_path / "a" / "ledger.sqlite", tmp_path / "b" / "ledger.sqlite"
    a.parent.mkdir()
    b.parent.mkdir()
    with Ledger(a, index_buffer=100) as led:
        add(led, range(1000))
    with Ledger(b, index_buffer=100) as led:
        add(led, range(10))
    shutil.rmtree(a.with_name("ledger.index"))
    with Ledger(a) as led:
        assert present(led, [fp(i) for i in (0, 999, 1000)]) == {fp(0), fp(999)}
    # b's index now runs ahead of a journal that is not its own
    shutil.rmtree(b.with_name("ledger.index"))
    shutil.copytree(a.with_name("ledger.index"), b.with_name("ledger.index"))
    with Ledger(b) as led:
        assert present(led, [fp(i) for i in (5, 500)]) == {fp(5)}


def test_seq_is_never_reused_and_forget_readmits(ledger):
    # A reused seq at or below a snapshot's high-water mark would never be replayed.
    add(ledger, range(3))
    assert ledger.forget([fp(2), fp(99)]) == 1
    assert present(ledger, [fp(2)]) == set()
    assert ledger.get(fp(2)) is None
    assert list(add(ledger, [2])) == [5]  # 4 went to the tombstone
    assert present(ledger, [fp(2)]) == {fp(2)}
    assert ledger.get(fp(2))["seq"] == 5
    assert len(ledger) == 3


def test_forgetting_a_queued_url_takes_it_out_of_the_frontier(ledger):
    add(ledger, range(3))
    ledger.forget([fp(1)])
    assert [r.seq for r in ledger.queued(10)] == [1, 3]


@pytest.mark.parametrize("autocommit", [True, False])
def test_bad_input_leaves_nothing(tmp_path, autocommit):
    with Ledger(tmp_path / "l.sqlite", autocommit=autocommit) as led:
        assert list(add(led, [-1])) == [1]
        with pytest.raises(ValueError, match="fingerprints are 16 bytes"):
            led.append(b"x" * 17)
        with pytest.raises(ValueError, match="1 urls for 2 fingerprints"):
            led.append(fp(1) + fp(2), urls=["http://a.test/1"], hosts=["a.test"])
        led.commit()
        assert len(led) == 1 and present(led, [fp(1), fp(2)]) == set()
        assert list(add(led, [1])) == [2]


def test_mark_queued_and_counts(ledger):
    seqs = add(ledger, range(6), host="a.test")
    add(ledger, range(6, 9), host="b.test", depth=2)
    ledger.mark(seqs[0], State.FETCHED, status=200)
    ledger.mark_many([(seqs[1], State.FAILED, None, "timeout"),
                      (seqs[2], State.SKIPPED, None, "robots.txt")])
    counts = ledger.counts()
    assert {k: counts[k] for k in ("queued", "fetched", "failed", "skipped")} == {
        "queued": 6, "fetched": 1, "failed": 1, "skipped": 1}
    assert counts == ledger.journal.recount()
    assert ledger.queued_hosts() == ["a.test", "b.test"]
    page = ledger.queued(2)
    assert page == [QueuedRow(4, "http://a.test/3", "a.test", 0),
                    QueuedRow(5, "http://a.test/4", "a.test", 0)]
    assert [r.seq for r in ledger.queued(10, after_seq=5)] == [6, 7, 8, 9]
    assert [r.seq for r in ledger.queued(10, host="b.test")] == [7, 8, 9]
    assert ledger.queued(10, host="b.test")[0].depth == 2
    row = ledger.get(fp(1))
    assert row["state"] == "failed" and row["error"] == "timeout"


def test_replay_stream_in_order(ledger):
    add(ledger, range(10))
    chunks = list(ledger.batches_after(6))
    assert [s for c in chunks for s in c[0].tolist()] == [7, 8, 9, 10]
    assert b"".join(c[1] for c in chunks) == b"".join(fp(i) for i in range(6, 10))


def test_seen_set_appends_keep_no_url_text(ledger):
    blob = b"".join(fp(i) for i in range(4))
    assert list(ledger.append(blob, depth=1)) == [1, 2, 3, 4]
    assert ledger.queued(10) == []
    assert ledger.held_among(blob + fp(9)) == [0, 1, 2, 3]


def test_meta_roundtrip(ledger):
    assert ledger.meta_get("nope", 42) == 42
    ledger.meta_set("config", {"a": [1, 2], "b": None})
    assert ledger.meta_get("config") == {"a": [1, 2], "b": None}


def test_rows_and_import_rows_union_by_fingerprint(tmp_path, ledger):
    add(ledger, range(4))
    ledger.mark(1, State.FETCHED, status=200)
    (tmp_path / "o").mkdir()
    with Ledger(tmp_path / "o" / "ledger.sqlite") as other:
        add(other, range(2, 7), host="b.test")
        assert other.import_rows(ledger.rows()) == 2
        assert len(other) == 7
        assert other.get(fp(0))["state"] == "fetched"
        assert other.get(fp(2))["host"] == "b.test"  # kept its own row
        assert other.import_rows(ledger.rows()) == 0


def test_readonly_beside_a_writer(tmp_path, ledger):
    add(ledger, range(3))
    ro = Ledger(ledger.path, readonly=True)
    assert len(ro) == 3 and present(ro, [fp(1)]) == {fp(1)}
    with pytest.raises(PermissionError, match="read-only"):
        ro.meta_set("x", 1)
    ro.close()
    with pytest.raises(FileNotFoundError, match="no ledger"):
        Ledger(tmp_path / "missing.sqlite", readonly=True)


def test_format1_ledger_is_refused_naming_the_format(tmp_path):
    from tests.support.ledger_v1 import Ledger as LedgerV1

    with LedgerV1(tmp_path / "ledger.sqlite") as old:
        old.insert([(fp(1), "http://a.test/1", "a.test", 0, 0)])
    with pytest.raises(StateFormatError, match="format 1"):
        Ledger(tmp_path / "ledger.sqlite")
