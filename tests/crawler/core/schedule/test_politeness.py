"""Politeness: the budget's arithmetic, and what a real server observes during a crawl."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from crawler.core.outputs.output import read_pages
from crawler.core.run.engine import Engine
from crawler.core.schedule.politeness import Politeness
from crawler.core.state.state import create_crawl
from crawler.demo.site import SiteSpec
from tests.support.helpers import fast_settings, write_seeds

# -- the budget, with explicit clocks ----------------------------------------------------


def test_delay_spaces_starts_and_per_host_bounds_concurrency():
    p = Politeness(per_host=2, delay=1.0)
    assert p.available("h", 0.0)
    p.start("h", 10.0)
    assert p.ready_at("h") == 11.0
    assert not p.available("h", 10.5) and p.available("h", 11.0)
    p.start("h", 11.0)
    assert not p.has_slot("h") and not p.available("h", 100.0)
    p.release("h", 11.5)
    assert p.available("h", 12.0)
    assert p.available("other", 10.0)  # hosts are independent


def test_retry_after_holds_the_host_back_capped():
    p = Politeness(per_host=1, delay=0.0, max_backoff=5.0)
    p.start("h", 0.0)
    p.release("h", 1.0, retry_after=3.0)
    assert p.ready_at("h") == 4.0
    p.start("h", 4.0)
    p.release("h", 4.0, retry_after=3600.0)
    assert p.ready_at("h") == 9.0  # capped at max_backoff


def test_crawl_delay_widens_the_spacing_even_for_a_fetch_already_started():
    p = Politeness(per_host=2, delay=0.5, max_crawl_delay=10.0)
    p.start("h", 0.0)
    assert p.ready_at("h") == 0.5
    p.set_crawl_delay("h", 3.0)  # robots.txt arrived after the first start
    assert p.ready_at("h") == 3.0
    p.release("h", 1.0)
    p.start("h", 3.0)
    assert p.ready_at("h") == 6.0
    p.set_crawl_delay("h", 99.0)
    assert p.delay_for("h") == 10.0  # capped


def test_sends_are_spaced_even_when_fetches_started_together():
    p = Politeness(per_host=2, delay=0.0)
    p.start("h", 0.0)
    p.start("h", 0.0)  # both started before robots.txt was known
    p.set_crawl_delay("h", 2.0)
    assert p.reserve_send("h", 0.1) == 0.0
    assert p.reserve_send("h", 0.1) == pytest.approx(2.0)  # waits for its turn
    p.release("h", 0.2)
    p.release("h", 2.3)
    assert p.ready_at("h") == pytest.approx(4.1)


def test_no_request_gives_the_spacing_back():
    p = Politeness(per_host=1, delay=2.0)
    p.start("h", 0.0)
    p.release("h", 0.1)
    p.start("h", 2.0)
    p.release("h", 2.1, requested=False)  # robots.txt disallowed it: nothing was sent
    assert p.ready_at("h") == 2.1
    p.forget_idle("h", 5.0)
    assert len(p) == 0


def test_per_host_must_be_positive():
    with pytest.raises(ValueError, match="per_host must be >= 1"):
        Politeness(per_host=0)


# -- against a real server ---------------------------------------------------------------


def page_starts(log) -> list[float]:
    return sorted(t for t, path in log.starts if path != "/robots.txt")


async def crawl_site(tmp_path, running, settings, seed_urls=None) -> list[dict]:
    seeds = write_seeds(tmp_path / "seeds.txt", seed_urls or running.seeds)
    seen, scope, _ = create_crawl(tmp_path / "state", settings, seeds)
    try:
        await Engine(seen, settings, scope).run()
    finally:
        seen.close()
    return read_pages(tmp_path / "state" / "pages.jsonl")


async def test_server_sees_at_most_per_host_requests_at_once(tmp_path, site):
    spec = SiteSpec(hosts=2, pages=10, seed=3, delay=0.05)
    async with site(spec) as running:
        await crawl_site(tmp_path, running, fast_settings(
            crawl={"concurrency": 8}, politeness={"per_host": 2, "delay": 0.0}))
        for log in running.logs:
            assert log.max_active == 2  # the budget is used, and never exceeded
            assert max(log.pages().values()) == 1


async def test_server_sees_the_configured_delay_between_requests(tmp_path, site):
    spec = SiteSpec(hosts=2, pages=8, seed=4, delay=0.01)
    async with site(spec) as running:
        await crawl_site(tmp_path, running, fast_settings(
            crawl={"concurrency": 8}, politeness={"per_host": 2, "delay": 0.1}))
        for log in running.logs:
            starts = page_starts(log)
            assert len(starts) >= 8
            gaps = [b - a for a, b in itertools.pairwise(starts)]
            assert min(gaps) >= 0.1 * 0.75  # client-side spacing, less network jitter


async def test_robots_txt_disallow_is_obeyed_and_crawl_delay_honoured(tmp_path, site):
    spec = SiteSpec(hosts=2, pages=6, seed=5, crawl_delay=0.15)
    async with site(spec) as running:
        # several seeds per host: fetches start together before robots.txt is known
        seeds = [f"{o}/p/{i}.html" for o in running.origins for i in (1, 2, 3)]
        records = await crawl_site(tmp_path, running, fast_settings(
            crawl={"concurrency": 8}, politeness={"per_host": 2, "delay": 0.0}),
            running.seeds + seeds)
        for log in running.logs:
            assert log.counts["/robots.txt"] == 1  # fetched once per host, cached
            assert not [p for p in log.counts if p.startswith("/private/")]
            starts = page_starts(log)
            gaps = [b - a for a, b in itertools.pairwise(starts)]
            assert min(gaps) >= 0.15 * 0.75
    blocked = [r for r in records if "/private/" in r["url"]]
    assert blocked and all(r["error"] == "robots.txt" and r["status"] is None
                           for r in blocked)
    assert Counter(r["error"] for r in records)["robots.txt"] == len(blocked)


async def test_obey_robots_false_fetches_disallowed_pages(tmp_path, site):
    async with site(SiteSpec(hosts=1, pages=4, seed=6)) as running:
        records = await crawl_site(tmp_path, running, fast_settings(
            politeness={"obey_robots": False}))
        assert running.logs[0].counts["/robots.txt"] == 0
        private = [r for r in records if "/private/" in r["url"]]
        assert private and all(r["status"] == 200 for r in private)


def test_prune_forgets_idle_hosts_only():
    p = Politeness(per_host=2, delay=1.0)
    p.start("busy", 0.0)
    p.start("waiting", 10.0)
    p.release("waiting", 10.1)
    p.start("idle", 0.0)
    p.release("idle", 0.1)
    p.set_crawl_delay("slow", 2.0)
    assert p.prune(5.0) == 1  # "waiting" may not start before 11.0, "busy" is in flight
    assert p.delay_for("slow") == 2.0
    assert p.ready_at("waiting") == 11.0 and p.active("busy") == 1
    assert p.ready_at("idle") == 0.0
