"""The guards against a silent dedup mismatch (issue 11, item 25): each test fails
if its guard is removed, because the state it refuses would then answer wrongly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from crawler.admin.merge import merge_shard_files
from crawler.core.state.state import CrawlError
from crawler.wire.owner import owner_function
from dedup import GeometryMismatch, UrlSeen
from dedup.admin.resizing import merge_states, resize
from dedup.filter.shards import ShardedBloom
from dedup.url.canonical import CanonRules

CRAWL = "guards"
GEOM = {"capacity": 20_000, "error_rate": 0.01, "shards": 4, "seed": 3}
URLS = [f"http://h{i % 7}.test/p/{i}?b=2&a=1" for i in range(600)]


def build(path: Path, urls: list[str], **kw: object) -> None:
    with UrlSeen(path, crawl_id=CRAWL, **{**GEOM, **kw}) as seen:  # type: ignore[arg-type]
        seen.admit(urls)
        seen.snapshot()


def all_maybe_seen(path: Path, urls: list[str]) -> bool:
    with UrlSeen(path, create=False) as seen:
        return all(seen.check(u)[0] for u in urls)


def test_reopening_with_other_canonicalization_rules_is_refused(tmp_path: Path) -> None:
    build(tmp_path / "s", URLS[:10])
    with pytest.raises(GeometryMismatch, match="canonicalization rules differ"):
        UrlSeen(tmp_path / "s", create=False, rules=CanonRules(sort_query=False))
    # the same rules, or none given, reopen it
    with UrlSeen(tmp_path / "s", create=False, rules=CanonRules()) as seen:
        assert seen.check(URLS[0])[0]


def test_a_shard_file_of_another_index_is_rebuilt_from_the_ledger(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d, URLS)
    shards = d / "shards"
    shutil.copyfile(ShardedBloom.shard_path(shards, 1), ShardedBloom.shard_path(shards, 0))
    with UrlSeen(d, create=False) as seen:
        assert seen.damaged_shards == [0]
    assert all_maybe_seen(d, URLS)  # installed as shard 0, shard 1's bits would miss most


def test_a_shard_file_of_another_geometry_is_rebuilt_from_the_ledger(tmp_path: Path) -> None:
    d, other = tmp_path / "s", tmp_path / "other"
    build(d, URLS)
    build(other, URLS[:5], capacity=1_000)  # same crawl id and shard count, smaller m
    shutil.copyfile(ShardedBloom.shard_path(other / "shards", 0),
                    ShardedBloom.shard_path(d / "shards", 0))
    with UrlSeen(d, create=False) as seen:
        assert seen.damaged_shards == [0]
    assert all_maybe_seen(d, URLS)


def test_resize_and_merge_refuse_inputs_with_other_canonicalization_rules(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    build(a, URLS[:10])
    build(b, URLS[10:20], rules=CanonRules(sort_query=False))
    with pytest.raises(GeometryMismatch, match="canon_rules differs"):
        resize([a, b], 1, tmp_path / "out", owner_function)
    with pytest.raises(GeometryMismatch, match="canon_rules differs"):
        merge_states(tmp_path / "out2", [a, b])
    assert not (tmp_path / "out").exists() and not (tmp_path / "out2").exists()


def test_merge_refuses_an_input_that_lacks_shards_the_others_have(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    build(a, URLS[:300])
    build(b, URLS[300:])
    ShardedBloom.shard_path(b / "shards", 2).unlink()
    with pytest.raises(CrawlError, match=r"merge input .*b.*: lacks shard\(s\) \[2\]"):
        merge_shard_files([a, b], tmp_path / "out", lambda _: None)
    assert not (tmp_path / "out").exists()


def test_a_failed_file_write_names_the_step_and_the_file(tmp_path: Path) -> None:
    """An errno alone ('Not a directory', 'Input/output error') names no file: a write
    of dedup's (snapshots, index runs, JSON) says what it was writing; the errno stays."""
    import errno

    from dedup import FileError, atomic_write_bytes

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(FileError) as info:
        atomic_write_bytes(blocker / "shard-0001.bloom", b"bits")
    assert str(info.value) == f"writing {blocker / 'shard-0001.bloom'}: Not a directory"
    assert info.value.errno == errno.ENOTDIR and isinstance(info.value, OSError)
    assert list(tmp_path.iterdir()) == [blocker]  # no temporary file left behind
