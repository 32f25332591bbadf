"""Admission on its own (crawler/core/schedule/admission.py): which of a page's links are kept
here, handed to another worker or dropped (scope, URL patterns, owner, the per-host
cap), and what a group's ``admit_pages`` queues, skips and counts, over a real state
directory and frontier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler.config.scope import Scope
from crawler.core.schedule.admission import Admission
from crawler.core.state.crawlstate import CrawlState
from dedup import UrlSeen, host_of


@pytest.fixture
def seen(tmp_path: Path) -> Iterator[UrlSeen]:
    with UrlSeen(tmp_path / "state", capacity=10_000, shards=2) as s:
        yield s


def make(seen: UrlSeen, scope: Scope, *, cap: int = 0,
         host_counts: dict[str, int] | None = None) -> Admission:
    return Admission(seen, CrawlState(seen.records), scope, cap,
                     {} if host_counts is None else host_counts)


def pairs(seen: UrlSeen, *urls: str | None) -> list[tuple[str, str] | None]:
    return [None if u is None else seen.canonicalizer.resolve(u) for u in urls]


A = Scope.for_seeds(["http://a.test/"], domains=["b.test"], exclude=[r"/private/"])


def test_route_keeps_this_workers_links_hands_over_others_and_drops_the_rest(seen):
    adm = make(seen, A)
    links = pairs(seen, "http://a.test/1", None, "http://c.test/out-of-scope",
                  "http://a.test/private/x", "http://sub.b.test/y", "http://a.test/2?b=1&a=2")
    here, remote = adm.route(links, 3, local=lambda host: host == "a.test")
    assert here == ([links[0], links[5]], 3)
    assert here[0][1] == ("http://a.test/2?b=1&a=2", "http://a.test/2?a=2&b=1")
    assert remote == [("http://sub.b.test/y", "http://sub.b.test/y", "sub.b.test", 3)]
    assert seen.ledger.counts()["queued"] == 0  # routing admits nothing


def test_route_with_nothing_to_keep_expects_nothing(seen):
    adm = make(seen, A)
    here, remote = adm.route(pairs(seen, "http://c.test/x", "http://a.test/private/1"), 1)
    assert (here, remote) == (None, [])
    assert adm.take_admitted() == []
    # without ``local`` every in-scope host is this worker's
    here, remote = adm.route(pairs(seen, "http://sub.b.test/z"), 1)
    assert here is not None and here[0] == pairs(seen, "http://sub.b.test/z")
    assert remote == []


def test_route_drops_links_of_a_host_already_at_its_cap(seen):
    adm = make(seen, A, cap=2, host_counts={"a.test": 2})
    here, _ = adm.route(pairs(seen, "http://a.test/9", "http://sub.b.test/9"), 1)
    assert here == (pairs(seen, "http://sub.b.test/9"), 1)


def test_admit_pages_queues_each_new_url_once_in_page_order(seen):
    adm = make(seen, A)
    seen.filter_new(["http://a.test/old"])
    seen.commit()
    first = pairs(seen, "http://a.test/1", "http://a.test/2", "http://a.test/old")
    second = pairs(seen, "http://a.test/2", "http://a.test/3")
    deeper = pairs(seen, "http://a.test/4")
    queued = adm.admit_pages([(first, 1), (deeper, 2), (second, 1)])
    assert queued == [2, 1, 1]  # /2 is new on the first page only; /old was seen
    assert adm.queued == 4
    assert [n.url for n in adm.take_admitted()] == [
        "http://a.test/1", "http://a.test/2", "http://a.test/3", "http://a.test/4"]
    assert adm.take_admitted() == []  # taken once
    assert seen.ledger.counts()["queued"] == 1 + 4  # /old (filter_new queues it) and these
    assert adm.admit_pages([(first + second + deeper, 1)]) == [0]  # all seen now


def test_the_cap_counts_across_the_pages_of_one_group(seen):
    counts: dict[str, int] = {}
    adm = make(seen, A, cap=3, host_counts=counts)
    one = pairs(seen, "http://a.test/1", "http://a.test/2")
    two = pairs(seen, "http://a.test/3", "http://a.test/4", "http://sub.b.test/1")
    assert adm.admit_pages([(one, 1), (two, 1)]) == [2, 2]
    assert counts == {"a.test": 3, "sub.b.test": 1}
    got = seen.ledger.counts()
    assert (got["queued"], got["skipped"]) == (4, 1)  # /4: past the cap, recorded skipped
    assert len(adm.take_admitted()) == 4
    # the skipped link is seen: it is not admitted again, not even under the cap
    counts["a.test"] = 0
    assert adm.admit_pages([(pairs(seen, "http://a.test/4"), 1)]) == [0]


def test_keep_hosts_keeps_what_allows_host_allows() -> None:
    scope = Scope(frozenset({"a.test", "b.test:8080"}), ("c.test",))
    urls = ["http://a.test/x", "http://a.test:8080/x", "https://b.test:8080/", "http://b.test/",
            "http://www.c.test:99/y?q", "http://c.test/", "http://notc.test/", "http://u:p@a.test/z",
            "https://x@b.test:8080/"]
    pairs = [None, *((u, u + "#key") for u in urls), None]
    kept = scope.keep_hosts(pairs)
    assert kept == [p for p in pairs if p is not None and scope.allows_host(host_of(p[0]))]
    assert [u for u, _ in kept] == ["http://a.test/x", "https://b.test:8080/",
                                    "http://www.c.test:99/y?q", "http://c.test/",
                                    "http://u:p@a.test/z", "https://x@b.test:8080/"]
    assert scope.keep_hosts(pairs) == kept  # answered from the cache the second time


def test_keep_hosts_under_a_cap_drops_the_links_of_hosts_at_it() -> None:
    """The default crawl's links (a per-host cap, no patterns) in one loop: each link
    by its own host (a longer name, a port or userinfo is another host)."""
    scope = Scope(frozenset({"a.test", "a.test:8080", "a.test.evil", "b.test"}))
    counts = {"a.test": 2, "a.test:8080": 0, "b.test": 5}
    urls = ["http://a.test/1", "http://a.test/2", "http://a.test.evil/3", "http://a.test/4",
            "http://a.test:8080/5", "http://a.test:8080/6", "http://x@a.test/7",
            "https://a.test/8", "http://b.test/9", "http://b.test/10", "http://c.test/11",
            "http://c.test/12", "http://a.test.evil/13"]
    pairs = [(u, u + "#key") for u in urls]
    for cap in (1, 3, 6):
        want = [p for p in pairs if scope.allows_host(host_of(p[0]))
                and counts.get(host_of(p[0]), 0) < cap]
        assert scope.keep_hosts(pairs, counts, cap) == want
    assert [u for u, _ in scope.keep_hosts(pairs, counts, 3)] == [
        "http://a.test/1", "http://a.test/2", "http://a.test.evil/3", "http://a.test/4",
        "http://a.test:8080/5", "http://a.test:8080/6", "http://x@a.test/7",
        "https://a.test/8", "http://a.test.evil/13"]
