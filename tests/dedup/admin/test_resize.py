"""Fleet merge and resize on state dirs built with UrlSeen directly (no crawling)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.wire.owner import owner_function, owner_of
from dedup import GeometryMismatch, State, StateLocked, UrlSeen
from dedup.admin.resizing import merge_states, resize, split_state
from dedup.filter.bloom import read_snapshot
from dedup.filter.shards import ShardedBloom
from dedup.store.ledger import Ledger

pytestmark = pytest.mark.usefixtures("store_impl")  # compiled and numpy/Python alike

CRAWL = "fleet-test"
GEOM = {"capacity": 20_000, "error_rate": 0.01, "shards": 8, "seed": 7}
HOSTS = [f"h{i}.test:{8000 + i}" for i in range(40)]
URLS = [f"http://{h}/p/{j}" for h in HOSTS for j in range(25)]


def host(url: str) -> str:
    return url.split("/")[2]


def build_worker(path: Path, urls: list[str], *, snapshot_part: bool = True) -> None:
    """A worker's state dir: rows in every state, some past the last snapshot (as after a crash)."""
    with UrlSeen(path, crawl_id=CRAWL, **GEOM) as seen:
        half = len(urls) // 2
        new = seen.admit(urls[:half], depth=1)
        seen.ledger.mark_many([(n.seq, State(n.seq % 4), 200 + n.seq % 3, None) for n in new])
        if snapshot_part:
            seen.snapshot()
        seen.admit(urls[half:], depth=2)  # not snapshotted: only the ledger has them


def build_fleet(root: Path, workers: int) -> list[Path]:
    dirs = []
    for i in range(workers):
        d = root / f"w{i}"
        build_worker(d, [u for u in URLS if owner_of(host(u), workers) == i])
        dirs.append(d)
    return dirs


def rows(state_dir: Path) -> set[tuple]:
    """Ledger rows without seq: (url, host, depth, state, status, error)."""
    with Ledger(state_dir / "ledger.sqlite", readonly=True) as ledger:
        return {(r.url, r.host, r.depth, r.state, r.status, r.error) for r in ledger.rows()}


def shard_filters(state_dir: Path) -> list:
    return [read_snapshot(ShardedBloom.shard_path(state_dir / "shards", i))
            for i in range(GEOM["shards"])]


def assert_exact_owner_state(state_dir: Path, owned: list[str]) -> None:
    """The dir's ledger holds exactly ``owned``, and its filter knows every one of them."""
    assert sorted(r[0] for r in rows(state_dir)) == sorted(owned)
    with UrlSeen(state_dir, create=False) as seen:
        assert seen.damaged_shards == []
        assert all(seen.check(u)[0] for u in owned)
        assert seen.admit(owned) == []  # nothing is new, nothing is lost


def test_merge_is_bit_for_bit_the_filter_of_all_urls(tmp_path: Path) -> None:
    dirs = build_fleet(tmp_path, 3)
    out = tmp_path / "merged"
    result = merge_states(out, dirs)

    with UrlSeen(tmp_path / "reference", crawl_id=CRAWL, **GEOM) as ref:
        ref.admit(URLS)
        ref.snapshot()
    merged = shard_filters(out)
    for (bf, header), (ref_bf, _) in zip(merged, shard_filters(tmp_path / "reference"),
                                         strict=True):
        assert bf == ref_bf
        assert header.hwm == result.hwm and header.crawl_id == CRAWL
    assert rows(out) == set().union(*(rows(d) for d in dirs))
    assert (result.rows, result.duplicates) == (len(URLS), 0)
    expected = {k: 0 for k in ("queued", "fetched", "failed", "skipped")}
    for d in dirs:
        with Ledger(d / "ledger.sqlite", readonly=True) as ledger:
            for k in expected:
                expected[k] += ledger.counts()[k]
    with Ledger(out / "ledger.sqlite", readonly=True) as ledger:
        assert ledger.last_seq() == result.hwm
        got = ledger.counts()
        assert {k: got[k] for k in expected} == expected and min(expected.values()) > 0
    assert_exact_owner_state(out, URLS)


def test_merged_shards_carry_the_new_ledgers_mark(tmp_path: Path) -> None:
    """An input's own mark can exceed the merged ledger's: using it would lose later rows."""
    small, big = tmp_path / "small", tmp_path / "big"
    build_worker(small, URLS[:20])
    with UrlSeen(big, crawl_id=CRAWL, **GEOM) as seen:
        seen.admit(URLS[100:600])
        seen.forget(URLS[100:590])  # mark 500, 10 rows left
        seen.snapshot()
    out = tmp_path / "out"
    result = merge_states(out, [small, big])
    assert result.hwm == 30 and result.rows == 30

    later = [f"http://late.test/{i}" for i in range(100)]
    with UrlSeen(out, create=False) as seen:
        assert len(seen.admit(later)) == 100  # seqs 31..130, never snapshotted: a crash
    with UrlSeen(out, create=False) as seen:
        assert all(seen.check(u)[0] for u in later)
        assert seen.admit(later) == []


def test_merge_keeps_first_metadata_and_first_row_of_a_duplicate(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    with UrlSeen(a, crawl_id=CRAWL, **GEOM) as seen:
        (n,) = seen.admit(["http://dup.test/x"])
        seen.ledger.mark(n.seq, State.FETCHED, status=200)
        seen.ledger.meta_set("crawler", {"worker_id": 0, "workers": 2, "max_depth": 3})
        seen.snapshot()
    with UrlSeen(b, crawl_id=CRAWL, **GEOM) as seen:
        seen.admit(["http://dup.test/x", "http://other.test/"])
        seen.ledger.meta_set("crawler", {"worker_id": 1, "workers": 2, "max_depth": 3})
    result = merge_states(tmp_path / "out", [a, b])
    assert (result.rows, result.duplicates) == (2, 1)
    with Ledger(tmp_path / "out" / "ledger.sqlite", readonly=True) as ledger:
        assert ledger.meta_get("crawler")["worker_id"] == 0
        assert ledger.meta_get("crawl_id") == CRAWL
        (dup,) = [r for r in ledger.rows() if r[1] == "http://dup.test/x"]
        assert (State(dup[4]), dup[5]) == (State.FETCHED, 200)


def test_resize_4_to_2_to_4_keeps_every_url_with_exactly_its_owner(tmp_path: Path) -> None:
    four = build_fleet(tmp_path / "orig", 4)
    before = {i: rows(d) for i, d in enumerate(four)}

    two = resize(four, 2, tmp_path / "two", owner_function)
    assert [r.path for r in two] == [tmp_path / "two" / f"worker-{i}" for i in range(2)]
    for i, r in enumerate(two):
        owned = [u for u in URLS if owner_of(host(u), 2) == i]
        assert_exact_owner_state(r.path, owned)
        assert rows(r.path) == before[i] | before[i + 2]  # states, depths, statuses kept

    back = resize([r.path for r in two], 4, tmp_path / "four", owner_function)
    for j, r in enumerate(back):
        assert rows(r.path) == before[j]
        assert_exact_owner_state(r.path, [u for u in URLS if owner_of(host(u), 4) == j])
        assert r.rows == len(before[j])
        with UrlSeen(r.path, create=False) as seen:
            assert seen.stats()["queued"] == sum(1 for row in before[j] if row[3] == 0)
            new = seen.admit([f"http://{HOSTS[0]}/fresh"])
            assert len(new) == 1 and new[0].seq > r.hwm  # numbering continues past the mark


def test_split_gives_each_output_the_whole_filter_and_its_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dedup.admin.resizing.IMPORT_CHUNK", 7)  # imports in bounded chunks
    src = tmp_path / "src"
    build_worker(src, URLS)
    outs = [tmp_path / f"o{k}" for k in range(3)]
    results = split_state(src, outs, lambda h: owner_of(h, 3))
    full = [bf for bf, _ in shard_filters(src)]
    for k, out in enumerate(outs):
        assert [bf for bf, _ in shard_filters(out)] == full
        assert_exact_owner_state(out, [u for u in URLS if owner_of(host(u), 3) == k])
    assert sum(r.rows for r in results) == len(URLS)


def test_other_ratios_are_refused(tmp_path: Path) -> None:
    dirs = build_fleet(tmp_path, 4)
    for to in (3, 4, 1, 16):
        with pytest.raises(ValueError, match="can only halve"):
            resize(dirs, to, tmp_path / f"to{to}", owner_function)
    assert not (tmp_path / "to3").exists()


def test_mismatched_inputs_are_refused_naming_the_field(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    build_worker(a, URLS[:10])
    with UrlSeen(b, crawl_id=CRAWL, **{**GEOM, "capacity": 40_000}) as seen:
        seen.admit(URLS[10:20])
    with UrlSeen(c, crawl_id="another-crawl", **GEOM) as seen:
        seen.admit(URLS[20:30])
    with pytest.raises(GeometryMismatch, match=r"capacity differs: 40000.*20000"):
        merge_states(tmp_path / "out", [a, b])
    with pytest.raises(GeometryMismatch, match="crawl_id differs"):
        resize([a, c], 1, tmp_path / "out", owner_function)
    assert not (tmp_path / "out").exists()


def test_failures_leave_no_output(tmp_path: Path) -> None:
    dirs = build_fleet(tmp_path, 2)
    with UrlSeen(dirs[1], create=False), \
            pytest.raises(StateLocked, match="in use by another bloomcrawl process"):
        merge_states(tmp_path / "out", dirs)  # a worker is still running there
    with pytest.raises(FileNotFoundError, match="not a bloomcrawl state directory"):
        merge_states(tmp_path / "out", [dirs[0], tmp_path / "nothing"])
    with pytest.raises(ValueError, match="belongs to output"):
        split_state(dirs[0], [tmp_path / "s0", tmp_path / "s1"], lambda h: owner_of(h, 4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w0", "w1"]  # no partial dirs

    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    with pytest.raises(FileExistsError, match="not empty"):
        merge_states(tmp_path / "taken", dirs)
    with pytest.raises(ValueError, match="output cannot be one of the inputs"):
        merge_states(dirs[0], dirs)
