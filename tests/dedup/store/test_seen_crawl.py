"""The crawl-facing records of the seen-store (``dedup.store.crawl``: ``seen.records``,
``open_records``): what the crawler needs of a state directory, without reaching
through ``seen.ledger``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dedup import State, StateLocked, UrlSeen, open_records
from dedup.store.crawl import IDENTITY_KEYS
from dedup.url.fingerprint import fingerprint

ROOT = Path(__file__).resolve().parents[3]


def _open(d: Path, **kw: object) -> UrlSeen:
    return UrlSeen(d, capacity=64, shards=2, crawl_id="crawl", **kw)


@pytest.mark.usefixtures("store_impl")  # compiled and numpy/Python alike
def test_frontier_outcomes_and_counts(tmp_path: Path) -> None:
    with _open(tmp_path) as seen:
        records = seen.records
        new = seen.admit(["http://a.test/1", "http://b.test:81/2", "http://a.test/3"])
        assert [n.host for n in new] == ["a.test", "b.test:81", "a.test"]
        assert len(seen) == 3
        assert sorted(records.queued_hosts()) == ["a.test", "b.test:81"]
        assert [r.url for r in records.queued(10, host="a.test")] == [
            "http://a.test/1", "http://a.test/3"]
        records.record_outcomes([(new[0].seq, State.FETCHED, 200, None),
                                 (new[1].seq, State.FAILED, None, "refused")])
        seen.commit()
        c = records.counts()
        assert (c["queued"], c["fetched"], c["failed"]) == (1, 1, 1)
        assert [(seq, st, status, err) for seq, st, status, err, _ in records.outcomes()] == [
            (new[0].seq, State.FETCHED, 200, None), (new[1].seq, State.FAILED, None, "refused")]
        assert [r.url for r in records.queued(10)] == ["http://a.test/3"]


@pytest.mark.usefixtures("store_impl")
def test_values_referrers_and_captures_survive_reopening(tmp_path: Path) -> None:
    with _open(tmp_path, autocommit=False) as seen:
        records = seen.records
        new = seen.admit_pages([([("http://a.test/x", "http://a.test/x"),
                                  ("http://a.test/y", "http://a.test/y")], 1)])[0]
        records.note_referrers([(new[0].seq, new[-1].seq, "http://a.test/")])
        records.note_captures([("sha1:AB", "http://a.test/x", "2026-01-01T00:00:00Z")])
        records.note_captures([("sha1:AB", "http://a.test/y", "2026-01-02T00:00:00Z")])
        records.set_value("outputs", {"pages": 12})
        seen.commit()
    with _open(tmp_path, readonly=True) as seen:
        records = seen.records
        assert records.value("outputs") == {"pages": 12}
        assert records.value("absent", "default") == "default"
        assert [records.referrer_of(n.seq) for n in new] == ["http://a.test/"] * 2
        assert records.referrer_of(new[-1].seq + 1) is None
        assert records.first_capture("sha1:AB") == ("http://a.test/x", "2026-01-01T00:00:00Z")
        assert records.first_capture("sha1:CD") is None
        assert records.first_captures(["sha1:CD", "sha1:AB", "sha1:AB"]) == {
            "sha1:AB": ("http://a.test/x", "2026-01-01T00:00:00Z")}
        many = records.first_captures([*(f"sha1:{i}" for i in range(1200)), "sha1:AB"])
        assert many == {"sha1:AB": ("http://a.test/x", "2026-01-01T00:00:00Z")}
        assert records.last_seq() == new[-1].seq
        assert seen.verify() > 0
        fps = b"".join(fingerprint(k, seen.seed) for k in ("http://a.test/x", "http://no.test/"))
        assert seen.held_among(fps) == [0]
        index = seen.index_stats()
        assert sum(index["run_records"]) + index["buffer"] == 2
        assert seen.held_among(b"") == []


def test_the_directorys_identity_is_read_never_written_through_the_records(
        tmp_path: Path) -> None:
    with _open(tmp_path) as seen:
        identity = seen.records.identity()
        assert identity["crawl_id"] == "crawl"
        assert identity["geometry"]["shards"] == 2 and "strip_params" in identity["canon_rules"]
        for name in IDENTITY_KEYS:
            with pytest.raises(ValueError, match="fixed at creation"):
                seen.records.set_value(name, None)
    with _open(tmp_path) as seen:  # nothing was overwritten
        assert seen.records.identity() == identity


def test_open_records_reads_beside_a_writer_and_writes_only_a_stopped_directory(
        tmp_path: Path) -> None:
    with _open(tmp_path, autocommit=False) as seen:
        seen.records.set_value("k", 1)
        seen.commit()
        with open_records(tmp_path) as records:  # read-only: beside the writer
            assert records.value("k") == 1
            with pytest.raises(PermissionError):
                records.set_value("k", 2)
        with pytest.raises(StateLocked), open_records(tmp_path, readonly=False):
            pass
    with open_records(tmp_path, readonly=False) as records:  # stopped: committed at once
        records.set_value("k", 3)
        assert records.last_seq() == 0
    with _open(tmp_path) as seen:
        assert seen.records.value("k") == 3
    with pytest.raises(FileNotFoundError), open_records(tmp_path / "none"):
        pass


def test_the_crawler_never_reaches_into_the_ledger() -> None:
    """The seen-store's methods are the crawler's only door to the ledger."""
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "crawler").rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"\.ledger\.|\bseen\.ledger\b|\.journal\.", line)]
    assert hits == []
