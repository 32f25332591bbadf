"""The crawl-state object (``crawler.core.state.crawlstate``): every value the crawl
keeps in its ledger under one named method, stored under the names existing state
directories use, in the seen-store's transaction."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crawler.core.state.crawlstate import Committed, CrawlState
from dedup import State, UrlSeen

ROOT = Path(__file__).resolve().parents[4]

# (setter, getter, value, the name it is stored under): the state directory's format
VALUES = [
    ("set_settings", "settings", {"crawl": {"max_pages": 5}}, "config"),
    ("set_scope", "scope", {"hosts": ["a.test"]}, "scope"),
    ("set_hooks", "hooks", {"handler": "m:f"}, "hooks"),
    ("set_fleet", "fleet", {"crawl_id": "c", "workers": 2, "worker_id": 1}, "fleet"),
    ("set_totals", "totals", {"links": 3, "new": 2}, "dedup_totals"),
    ("set_page_counts", "page_counts", {"fetched": 1, "causes": {}}, "page_counts"),
    ("set_sitemap_counts", "sitemap_counts", {"fetched": 1, "urls": 4}, "sitemap_counts"),
]


def test_each_value_round_trips_under_its_stored_name(tmp_path: Path) -> None:
    with UrlSeen(tmp_path, autocommit=False) as seen:
        state = CrawlState(seen.records)
        for setter, _, value, _ in VALUES:
            getattr(state, setter)(value)
        state.set_retry_attempts({7: (2, 3, "timeout")})
        state.set_committed(Committed(pages=10, items=0, warc={"serial": 1, "size": 5}))
        state.set_pages_rewrite(42)
        seen.commit()
    with UrlSeen(tmp_path, readonly=True) as seen:
        state = CrawlState(seen.records)
        for _, getter, value, name in VALUES:
            assert getattr(state, getter)() == value
            assert seen.records.value(name) == value  # what an older crawler wrote
        assert state.retry_attempts() == {7: [2, 3, "timeout"]}
        assert seen.records.value("retry_attempts") == {"7": [2, 3, "timeout"]}
        assert state.committed() == Committed(10, 0, {"serial": 1, "size": 5})
        assert seen.records.value("outputs") == {"pages": 10, "items": 0,
                                                 "warc": {"serial": 1, "size": 5}}
        assert state.pages_rewrite() == 42
        assert seen.records.value("pages_rewrite") == {"size": 42}


def test_absent_values_read_as_a_new_crawls(tmp_path: Path) -> None:
    with UrlSeen(tmp_path) as seen:
        state = CrawlState(seen.records)
        assert (state.settings(), state.scope(), state.fleet(), state.page_counts()) == (
            None, None, None, None)
        assert (state.hooks(), state.totals(), state.sitemap_counts(),
                state.retry_attempts()) == ({}, {}, {}, {})
        assert state.committed() == Committed(None, None, None)
        assert state.pages_rewrite() is None
        state.set_committed(Committed(pages=3))  # only what was recorded is stored
        assert seen.records.value("outputs") == {"pages": 3}
        state.set_fleet(None)
        state.set_sitemap_counts({})
        assert seen.records.value("fleet") is None
        assert seen.records.value("sitemap_counts") is None


def test_the_settings_copy_holds_what_repair_needs(tmp_path: Path) -> None:
    with UrlSeen(tmp_path, crawl_id="c1", shards=2) as seen:
        state = CrawlState(seen.records)
        state.set_settings({"crawl": {}})
        state.set_scope({"hosts": []})
        copy = state.settings_copy()
    assert set(copy) == {"config", "scope", "fleet", "geometry", "canon_rules", "crawl_id"}
    assert (copy["config"], copy["crawl_id"], copy["geometry"]["shards"]) == (
        {"crawl": {}}, "c1", 2)


def test_stopped_reads_beside_nothing_and_writes_only_when_asked(tmp_path: Path) -> None:
    with UrlSeen(tmp_path) as seen:
        seen.admit(["http://a.test/1"])
        CrawlState(seen.records).record_outcomes([(1, State.FETCHED, 200, None)])
    with CrawlState.stopped(tmp_path) as state:
        assert state.counts()["fetched"] == 1 and state.last_seq() == 1
        with pytest.raises(PermissionError):
            state.set_totals({"links": 1})
    with CrawlState.stopped(tmp_path, readonly=False) as state:
        state.set_totals({"links": 1})
    with CrawlState.stopped(tmp_path) as state:
        assert state.totals() == {"links": 1}


def test_only_the_crawl_state_names_the_stored_values() -> None:
    """No crawler module but crawlstate.py reads or writes a value by its name, and
    the seen-store's records are reached only to make a ``CrawlState``."""
    own = ROOT / "crawler" / "core" / "state" / "crawlstate.py"
    hits = []
    for p in sorted((ROOT / "crawler").rglob("*.py")):
        for i, line in enumerate(p.read_text().splitlines(), 1):
            named = re.search(r"\b(meta_get|meta_set|meta_items|set_value)\(|\.value\(", line)
            records = re.search(r"\bseen\.records\b", line) and "CrawlState(" not in line
            if (named and p != own) or records:
                hits.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert hits == []
