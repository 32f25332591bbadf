"""UrlSeen: the exact seen-test, its crash recovery and its persistence."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup import GeometryMismatch, State, StateLocked, UrlSeen

pytestmark = pytest.mark.usefixtures("store_impl")  # compiled and numpy/Python alike


def urls(n: int, host: str = "a.test", start: int = 0) -> list[str]:
    return [f"http://{host}/p/{i}" for i in range(start, start + n)]


@pytest.fixture
def seen(tmp_path):
    with UrlSeen(tmp_path / "s", capacity=10_000, shards=4) as s:
        yield s


def test_filter_new_returns_new_canonical_urls_in_first_seen_order(seen):
    page = ["/b?utm_source=x", "/a#frag", "http://A.TEST:80/b", "mailto:x@y", "/c?z=1&a=2"]
    assert seen.filter_new(page, "http://a.test/dir/page") == [
        "http://a.test/b", "http://a.test/a", "http://a.test/c?a=2&z=1"]
    assert seen.filter_new(page, "http://a.test/") == []
    assert seen.filter_new(["/d", "/a"], "http://a.test/") == ["http://a.test/d"]
    st_ = seen.stats()
    assert st_["new"] == 4 and st_["rejected"] == 2 and st_["queued"] == 4


def test_admit_keeps_fetch_url_apart_from_key(seen):
    (new,) = seen.admit(["/x?b=2&a=1&utm_medium=m"], "http://a.test/")
    assert new.url == "http://a.test/x?b=2&a=1&utm_medium=m"
    assert new.key == "http://a.test/x?a=1&b=2"
    assert (new.host, new.depth, new.seq) == ("a.test", 0, 1)
    (row,) = seen.ledger.queued(5)
    assert row.url == new.url


def test_one_ledger_query_per_batch_and_cache_in_front(tmp_path):
    # A tiny, saturated filter: nearly every lookup is "maybe seen".
    with UrlSeen(tmp_path / "s", capacity=50, error_rate=0.5, shards=1) as s:
        s.filter_new(urls(200))
        lookups: list[int] = []
        real = s.ledger.index.lookup
        s.ledger.index.lookup = lambda hi, lo: (lookups.append(len(hi)), real(hi, lo))[1]
        fresh = s.filter_new(urls(200, start=200) + urls(200))
        assert len(fresh) == 200
        assert len(lookups) <= 1
        lookups.clear()
        assert s.filter_new(urls(400)) == []  # all confirmed by the in-memory cache
        assert lookups == []
        assert s.stats()["confirm_cache_hits"] >= 400


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(st.integers(0, 400), max_size=40), min_size=1, max_size=15))
def test_exact_against_a_set_even_with_a_terrible_filter(tmp_path_factory, batches):
    # error_rate 0.5 and capacity 8 make the Bloom filter say "maybe" constantly:
    # the ledger must still make every answer exact.
    d = tmp_path_factory.mktemp("exact")
    model: set[str] = set()
    with UrlSeen(d, capacity=8, error_rate=0.5, shards=2, confirm_cache_size=16) as s:
        for batch in batches:
            links = [f"http://h.test/{i}" for i in batch]
            expected = [u for u in dict.fromkeys(links) if u not in model]
            assert s.filter_new(links) == expected
            model.update(links)
        assert s.stats()["false_positives"] >= 0


def test_false_positives_are_confirmed_and_counted(tmp_path):
    with UrlSeen(tmp_path / "s", capacity=20, error_rate=0.3, shards=1) as s:
        s.filter_new(urls(200))
        s.commit()  # the pending keys' bits are set when they are written
        new = s.filter_new(urls(2000, start=200))
        assert len(new) == 2000
        assert s.stats()["false_positives"] > 0


def test_reopen_uses_snapshot_and_replays_rows_past_it(tmp_path):
    d = tmp_path / "s"
    with UrlSeen(d, capacity=5000, shards=8) as s:
        s.filter_new(urls(1000))
        s.snapshot()
        s.filter_new(urls(500, start=1000))  # never snapshotted: the "crash" gap
    with UrlSeen(d) as s:
        keys = urls(1500)
        assert s.bloom.contains_many(keys).all()  # the filter itself, not the ledger
        assert s.filter_new(keys) == []
        assert s.geometry.shards == 8


def test_crash_between_setting_bits_and_the_ledger_append(tmp_path, monkeypatch):
    """Every write sets bits first: a crash before the append leaves extra bits,
    and the keys it did not record are new again, never seen unrecorded."""
    d = tmp_path / "s"
    s = UrlSeen(d, capacity=1000, shards=2)
    first = s.filter_new(urls(10))
    s.commit()
    s.snapshot()

    def crash(*a, **k):
        raise SystemExit("killed after the bits, before the append")

    monkeypatch.setattr(s.ledger, "append", crash)
    with pytest.raises(SystemExit, match="killed after the bits"):
        s.filter_new_pages([(None, urls(10, start=10))])
    monkeypatch.undo()
    s.close()
    with UrlSeen(d) as s2:
        assert s2.filter_new(urls(10)) == []
        again = s2.filter_new(urls(10, start=10))
        assert len(again) == 10 and not set(again) & set(first)


def test_concurrent_snapshots_never_lose_bits(tmp_path):
    d = tmp_path / "s"
    s = UrlSeen(d, capacity=20_000, shards=4)
    stop = threading.Event()

    def snapshotter():
        while not stop.is_set():
            for i in range(s.nshards):
                s.snapshot_shard(i)

    t = threading.Thread(target=snapshotter)
    t.start()
    try:
        for b in range(60):
            s.filter_new(urls(100, start=b * 100))
    finally:
        stop.set()
        t.join()
    s.close()  # no final snapshot: whatever the thread wrote last is what we load
    with UrlSeen(d) as s2:
        assert s2.bloom.contains_many(urls(6000)).all()


def test_damaged_shard_is_rebuilt_from_the_ledger(tmp_path, caplog):
    d = tmp_path / "s"
    with UrlSeen(d, capacity=4000, shards=4) as s:
        s.filter_new(urls(800))
        s.snapshot()
        victim = s.shard_path(2)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with UrlSeen(d) as s:
        assert s.damaged_shards == [2]
        assert s.bloom.contains_many(urls(800)).all()
    assert "rebuilding" in caplog.text


def test_rebuild_recreates_all_shards(tmp_path):
    d = tmp_path / "s"
    with UrlSeen(d, capacity=4000, shards=4) as s:
        s.filter_new(urls(300))
        s.snapshot()
        before = [s.shard_path(i).read_bytes() for i in range(4)]
    for p in (d / "shards").iterdir():
        p.unlink()
    UrlSeen.rebuild(d).close()
    with UrlSeen(d) as s:
        assert s.bloom.contains_many(urls(300)).all()
        for i in range(4):
            # same bits as before (the header's creation time differs)
            assert s.shard_path(i).stat().st_size == len(before[i])


def test_forget_makes_urls_new_again(seen):
    seen.filter_new(urls(10))
    assert seen.filter_new(urls(10)) == []
    assert seen.forget([*urls(3), "not a url at all"]) == 3
    assert seen.filter_new(urls(10)) == urls(3)


def test_a_forgotten_url_met_again_is_not_a_bloom_false_positive(seen):
    # its bits were set by its own admission, as the ledger's tombstone says
    seen.filter_new(urls(10))
    assert seen.forget(urls(3)) == 3
    assert seen.filter_new(urls(10)) == urls(3)
    assert seen.counters["false_positives"] == 0
    assert seen.counters["bloom_maybe"] == 10
    # bits set with no row behind them: a false positive, counted
    _, key = seen.canonicalizer.resolve("http://fp.test/x")
    seen.bloom.add(key)
    assert seen.filter_new(["http://fp.test/x", *urls(1, start=1)]) == ["http://fp.test/x"]
    assert seen.counters["false_positives"] == 1
    assert seen.filter_new(["http://fp.test/x"]) == []  # admitted now: a repeat
    assert seen.counters["false_positives"] == 1


def test_check_reports_bloom_and_ledger(seen):
    seen.admit(["http://a.test/x"])
    maybe, row = seen.check("HTTP://a.test/x#y")
    assert maybe and row["url"] == "http://a.test/x" and row["state"] == "queued"
    maybe, row = seen.check("http://a.test/never")
    assert row is None


def test_states_for_the_crawler(seen):
    (n,) = seen.admit(["http://a.test/x"])
    seen.ledger.mark(n.seq, State.FETCHED, status=200)
    assert seen.stats()["fetched"] == 1
    (s2,) = seen.admit(["http://a.test/robots-blocked"], state=State.SKIPPED)
    assert seen.ledger.get(seen._fp_of(s2.url))["state"] == "skipped"


def test_geometry_and_crawl_id_are_frozen(tmp_path):
    d = tmp_path / "s"
    UrlSeen(d, capacity=1000, shards=4, crawl_id="crawl-a").close()
    with pytest.raises(GeometryMismatch, match="shards differs"):
        UrlSeen(d, shards=8)
    with pytest.raises(GeometryMismatch, match="crawl_id differs"):
        UrlSeen(d, crawl_id="crawl-b")
    with UrlSeen(d, capacity=1000) as s:
        assert s.crawl_id == "crawl-a"


def test_state_dir_is_locked_while_open(tmp_path):
    d = tmp_path / "s"
    with UrlSeen(d, capacity=100, shards=1):
        with pytest.raises(StateLocked, match="in use by another bloomcrawl process"):
            UrlSeen(d)
        ro = UrlSeen(d, readonly=True)  # inspection still works
        assert ro.stats()["shards"] == 1
        ro.close()
    UrlSeen(d).close()


def test_missing_dir_without_create(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a bloomcrawl state directory"):
        UrlSeen(tmp_path / "nope", create=False)


def test_growth_keeps_every_url(tmp_path):
    with UrlSeen(tmp_path / "s", capacity=200, shards=2) as s:
        keys = urls(3000)
        random.Random(1).shuffle(keys)
        for i in range(0, 3000, 50):
            s.filter_new(keys[i:i + 50])
        assert s.stats()["layers"] > 2
        assert s.bloom.contains_many(keys).all()
        assert np.count_nonzero(s.bloom.contains_many(urls(3000, host="b.test"))) < 300


def _run(code: str) -> None:
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, timeout=120)


def test_group_commit_crash_never_leaves_a_false_negative(tmp_path):
    # Process 1: commit A, leave B uncommitted, snapshot, die without closing.
    # The snapshot must not claim B's seq numbers: after the crash they are
    # handed out again (to C), and C must still be replayed into the filter.
    d = tmp_path / "s"
    a, b, c = urls(50), urls(50, start=50), urls(50, start=100)
    _run(f"""
import os
from dedup import UrlSeen
s = UrlSeen({str(d)!r}, capacity=10_000, shards=2, autocommit=False)
s.filter_new({a!r}); s.commit()
s.filter_new({b!r})
s.snapshot()
os._exit(0)
""")
    with UrlSeen(d, autocommit=False) as s:
        assert s.filter_new(a) == []
        b_fps = b"".join(s._fp_of(u) for u in b)
        assert not s.ledger.held_among(b_fps)  # B was never committed
    _run(f"""
import os
from dedup import UrlSeen
s = UrlSeen({str(d)!r}, autocommit=False)
s.filter_new({c!r}); s.commit()
os._exit(0)
""")
    with UrlSeen(d) as s:
        assert s.bloom.contains_many(a + c).all()
        assert s.filter_new(a + c) == []


def test_group_commit_is_one_transaction(tmp_path):
    d = tmp_path / "s"
    with UrlSeen(d, capacity=1000, shards=1, autocommit=False) as s:
        s.filter_new(urls(5))
        assert s.ledger.in_transaction
        reader = UrlSeen(d, readonly=True)
        assert len(reader.ledger) == 0
        s.commit()
        assert not s.ledger.in_transaction
        assert len(reader.ledger) == 5
        reader.close()


def test_rebuild_refuses_a_directory_in_use_and_touches_nothing(tmp_path):
    d = tmp_path / "s"
    with UrlSeen(d, capacity=1000, shards=2) as s:
        s.filter_new(urls(20))
        s.snapshot()
        before = {p.name: p.read_bytes() for p in (d / "shards").iterdir()}
        with pytest.raises(StateLocked, match="in use by another bloomcrawl process"):
            UrlSeen.rebuild(d)
        assert {p.name: p.read_bytes() for p in (d / "shards").iterdir()} == before


def test_recently_seen_keys_are_answered_before_the_filter(seen):
    seen.filter_new(urls(50))
    before = dict(seen.counters)
    assert seen.filter_new(urls(60)) == urls(10, start=50)
    # the 50 repeats never reach the filter (nor the ledger): the compiled call a page
    # probes inside it, so the counters tell
    probed = sum(seen.counters[k] - before[k] for k in ("bloom_maybe", "bloom_definitely_new"))
    assert probed == 10
    assert seen.stats()["confirm_cache_hits"] == 50
