"""The crawl engine against real local servers: exact reachable set, faults, limits."""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import pytest

from crawler.core.outputs.output import read_pages
from crawler.core.run.engine import Engine
from crawler.core.state.state import create_crawl
from crawler.demo.site import OUT_OF_SCOPE, SiteSpec
from dedup import State
from tests.support.faultserver import fault_server
from tests.support.helpers import fast_settings, until, write_seeds

FIELDS = {"url", "final_url", "status", "content_type", "bytes", "depth", "links_found",
          "links_new", "fetched_at", "error"}


async def crawl(tmp_path, seed_urls, settings, name="state"):
    """Run a whole crawl in-process; returns (records, ledger counts, seen-closed stats)."""
    seeds = write_seeds(tmp_path / f"{name}-seeds.txt", seed_urls)
    seen, scope, problems = create_crawl(tmp_path / name, settings, seeds)
    assert problems == []
    try:
        summary = await Engine(seen, settings, scope).run()
        counts = seen.ledger.counts()
        keys = [seen.canonicalizer.resolve(r["url"])[1]
                for r in read_pages(tmp_path / name / "pages.jsonl")]
    finally:
        seen.close()
    return read_pages(tmp_path / name / "pages.jsonl"), keys, counts, summary


async def test_crawl_fetches_exactly_the_reachable_set_each_page_once(tmp_path, site):
    spec = SiteSpec(hosts=3, pages=120, seed=11, trap=True)
    async with site(spec) as running:
        records, keys, counts, summary = await crawl(
            tmp_path, running.seeds, fast_settings(crawl={"max_depth": 8}))
        want = running.site.reachable(max_depth=8)
        server = running.total_pages()
    # every reachable URL once, nothing else (robots-blocked ones recorded, not requested)
    assert Counter(keys) == Counter(want.fetched | want.robots_blocked)
    assert max(Counter(keys).values()) == 1
    assert set(server) == set(want.fetched) and max(server.values()) == 1
    # the site's ordinary pages sit well above the depth limit; only the trap hits it
    assert max(d for k, d in want.depth.items() if "/cal/" not in k) <= 4
    cal = sorted(k for k in keys if "/cal/" in k)
    assert len(cal) == 8  # /cal/2000/01 is at depth 1, ... the 8th at depth 8
    for r in records:
        assert set(r) >= FIELDS
    by_url = {r["url"]: r for r in records}
    blocked = [r for r in records if "/private/" in r["url"]]
    assert blocked and all(r["error"] == "robots.txt" and r["status"] is None for r in blocked)
    redirect = next(r for r in records if "/old/" in r["url"])
    assert redirect["status"] == 301
    assert redirect["final_url"] == re.sub(r"/old/(\d+)$", r"/p/\1.html", redirect["url"])
    out = next(r for r in records if r["url"].endswith("/out"))
    assert out["status"] == 302 and out["final_url"] == OUT_OF_SCOPE
    assert out["links_new"] == 0 and OUT_OF_SCOPE not in by_url
    pdf = next(r for r in records if r["url"].endswith(".pdf"))
    assert pdf["content_type"] == "application/pdf" and pdf["links_found"] == 0
    home = by_url[running.seeds[0]]
    assert home["depth"] == 0 and home["status"] == 200 and home["error"] is None
    assert home["links_found"] > home["links_new"] > 0
    # the ledger agrees, and nothing is left queued
    assert counts["queued"] == 0
    assert counts["fetched"] + counts["failed"] == len(records) - len(blocked)
    assert counts["skipped"] == len(blocked)
    assert summary["new"] == len(records)  # seeds included: same UrlSeen session
    assert summary["repeats"] > summary["new"]  # navigation repeats on every page


async def test_a_group_of_pages_goes_through_the_seen_test_in_one_batch(tmp_path, site):
    async with site(SiteSpec(hosts=2, pages=30, seed=12)) as running:
        settings = fast_settings(crawl={"concurrency": 8})
        seeds = write_seeds(tmp_path / "seeds.txt", running.seeds)
        seen, scope, _ = create_crawl(tmp_path / "state", settings, seeds)
        calls = []
        real = seen.admit_pages

        def counting(pages):
            calls.append([len(pairs) for pairs, _ in pages])
            return real(pages)

        seen.admit_pages = counting
        try:
            summary = await Engine(seen, settings, scope).run()
        finally:
            seen.close()
        records = read_pages(tmp_path / "state" / "pages.jsonl")
    with_links = [r for r in records if r["links_found"]]
    pages = sum(len(c) for c in calls)
    assert 0.9 * len(with_links) <= pages <= len(with_links)  # each at most once
    assert len(calls) < pages  # many pages a call
    assert max(n for c in calls for n in c) > 10  # a page's links together
    # links_new is counted at the commit: it adds up to every URL queued but the seeds
    assert sum(r["links_new"] for r in records) == len(records) - len(running.seeds)
    assert summary["new"] == len(records)


async def test_faults_are_bounded_recorded_and_the_crawl_finishes(tmp_path):
    settings = fast_settings(
        crawl={"concurrency": 16},
        politeness={"per_host": 16},
        fetch={"read_timeout": 1.0, "total_timeout": 2.0, "retries": 1, "backoff_base": 0.05,
               "max_bytes": 1_000_000, "max_retry_after": 5.0})
    async with fault_server() as srv:
        paths = ["/hang", "/reset", "/flaky?key=f&fail=1", "/429?key=r&after=1",
                 "/503?key=s&after=1", "/loop/a", "/big?mb=50", "/pdf?mb=1", "/badcharset",
                 "/slowbody?every=0.5&n=30", "/status/404",
                 "/redirect?to=/html%3Flinks%3D2"]
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        records, _, counts, _ = await asyncio.wait_for(
            crawl(tmp_path, [srv.url(p) for p in paths], settings), 30)
        elapsed = loop.time() - t0
        log = srv.log
    by_path = {re.sub(r"^http://[^/]+", "", r["url"]): r for r in records}
    assert elapsed < 15
    assert counts["queued"] == 0
    hang = by_path["/hang"]
    assert (hang["status"], hang["error"]) == (None, "timeout")
    assert by_path["/reset"]["error"].startswith("connection reset")
    flaky = by_path["/flaky?key=f&fail=1"]
    assert (flaky["status"], flaky["error"], flaky["attempts"]) == (200, None, 2)
    r429 = by_path["/429?key=r&after=1"]
    assert (r429["status"], r429["error"]) == (200, None)
    first, second = log.for_path("/429")
    assert second.started - first.started >= 0.95  # Retry-After honoured
    assert by_path["/503?key=s&after=1"]["status"] == 200
    loop_a, loop_b = by_path["/loop/a"], by_path["/loop/b"]
    assert loop_a["status"] == loop_b["status"] == 302
    assert loop_a["final_url"].endswith("/loop/b") and loop_b["final_url"].endswith("/loop/a")
    assert log.count("/loop/a") == log.count("/loop/b") == 1  # stopped by the seen-test
    big = by_path["/big?mb=50"]
    assert big["error"].startswith("too large") and big["bytes"] < 2_000_000
    (big_req,) = log.for_path("/big")
    assert not big_req.completed and big_req.bytes_sent < 10 * 1024 * 1024
    pdf = by_path["/pdf?mb=1"]
    assert (pdf["content_type"], pdf["error"], pdf["links_found"]) == (
        "application/pdf", "not html", 0)
    bad = by_path["/badcharset"]
    assert (bad["status"], bad["links_found"]) == (200, 3)
    assert "/one" in by_path and by_path["/one"]["status"] == 404
    assert by_path["/slowbody?every=0.5&n=30"]["error"] == "timeout"
    assert by_path["/status/404"]["status"] == 404
    assert by_path["/redirect?to=/html%3Flinks%3D2"]["final_url"].endswith("/html?links=2")
    assert by_path["/html?links=2"]["links_new"] == 2
    assert {p for p, r in by_path.items() if r["status"] is None} == {"/hang", "/reset"}
    assert counts["failed"] == 3  # hang, reset and the timed-out slow body


async def test_max_pages_counts_fetched_pages(tmp_path, site):
    async with site(SiteSpec(hosts=2, pages=50, seed=13)) as running:
        records, _, counts, summary = await crawl(
            tmp_path, running.seeds, fast_settings(crawl={"max_pages": 25}))
    fetched = [r for r in records if r["error"] != "robots.txt"]
    assert len(fetched) == 25
    assert counts["fetched"] + counts["failed"] == 25 and counts["queued"] > 0
    assert summary["outcome"] == "max pages reached"


async def test_per_host_cap_bounds_a_calendar_trap(tmp_path, site):
    spec = SiteSpec(hosts=1, pages=5, seed=14, trap=True)
    async with site(spec) as running:
        records, _, counts, _ = await crawl(
            tmp_path, running.seeds,
            fast_settings(crawl={"max_depth": 1000, "max_pages_per_host": 30}))
    assert len(records) == 30  # every admitted URL of the host was taken once
    assert counts["queued"] == 0
    assert any("/cal/" in r["url"] for r in records)


async def test_scope_is_the_seeds_hosts_unless_widened(tmp_path, site):
    async with site(SiteSpec(hosts=3, pages=8, seed=15)) as running:
        narrow, _, _, _ = await crawl(tmp_path, running.seeds[:1], fast_settings(), "narrow")
        hosts = {r["url"].split("/")[2] for r in narrow}
        assert hosts == {running.origins[0].split("/")[2]}
        wide, wide_keys, _, _ = await crawl(
            tmp_path, running.seeds[:1],
            fast_settings(crawl={"allow_domains": ["127.0.0.1"]}), "wide")
        want = running.site.reachable(running.seeds[:1], scope=[
            o.split("/")[2] for o in running.origins])
    assert {r["url"].split("/")[2] for r in wide} == {o.split("/")[2]
                                                      for o in running.origins}
    assert set(wide_keys) == want.fetched | want.robots_blocked


async def test_base_href_is_respected(tmp_path, site):
    async with site(SiteSpec(hosts=1, pages=40, seed=16)) as running:
        records, _, _, _ = await crawl(tmp_path, running.seeds, fast_settings())
    base_pages = [r for r in records if "/d/" in r["url"]]
    assert base_pages and all(r["links_found"] >= 5 for r in base_pages)
    # links on /d/N/ are relative to <base href="/p/">: nothing under /d/N/ but the page
    assert all(r["url"].endswith("/") for r in base_pages)
    assert all(r["status"] != 404 for r in records)


async def test_private_targets_are_refused_unless_allowed(tmp_path, site):
    async with site(SiteSpec(hosts=1, pages=4, seed=17)) as running:
        records, _, counts, _ = await crawl(
            tmp_path, running.seeds, fast_settings(fetch={"allow_private": False}))
        assert sum(log.counts.total() for log in running.logs) == 0
    (record,) = records
    assert record["status"] is None
    assert record["error"] == "refused private address 127.0.0.1 (needs --allow-private)"
    assert counts["failed"] == 1


async def test_warc_output_holds_each_answered_page(tmp_path, site):
    warc = tmp_path / "out.warc"
    async with site(SiteSpec(hosts=1, pages=10, seed=18)) as running:
        records, _, _, _ = await crawl(
            tmp_path, running.seeds, fast_settings(output={"warc": str(warc)}))
    answered = [r for r in records if r["status"] is not None]
    data = (tmp_path / "out-00000.warc").read_bytes()
    heads = re.findall(rb"WARC/1\.1\r\n(.*?)\r\n\r\n", data, re.S)
    types = Counter(re.search(rb"WARC-Type: (\w+)", h)[1] for h in heads)
    robots = 1  # one host
    assert types[b"warcinfo"] == 1
    assert types[b"request"] == types[b"response"] + types[b"revisit"] == len(answered) + robots
    uris = {re.search(rb"WARC-Target-URI: (\S+)", h)[1].decode() for h in heads
            if b"WARC-Type: re" in h}
    assert uris == {r["url"] for r in answered} | {running.seeds[0].rstrip("/") + "/robots.txt"}
    # every record's Content-Length matches its block
    pos = 0
    while pos < len(data):
        end = data.index(b"\r\n\r\n", pos)
        length = int(re.search(rb"Content-Length: (\d+)", data[pos:end])[1])
        pos = end + 4 + length
        assert data[pos:pos + 4] == b"\r\n\r\n"
        pos += 4


async def test_stop_leaves_in_flight_urls_queued_for_resume(tmp_path, site, capsys):
    spec = SiteSpec(hosts=2, pages=40, seed=19, delay=0.05)
    async with site(spec) as running:
        settings = fast_settings(crawl={"stop_grace": 0.0})
        seeds = write_seeds(tmp_path / "seeds.txt", running.seeds)
        seen, scope, _ = create_crawl(tmp_path / "state", settings, seeds)
        engine = Engine(seen, settings, scope)
        task = asyncio.ensure_future(engine.run())
        await until(lambda: engine.session.pages >= 10, timeout=60, what="10 pages")
        engine.stop()
        summary = await task
        assert summary["outcome"] == "stopped"
        # the pages cut short by the deadline are said (their resume refetches them)
        assert re.search(r"\d+ page\(s\) still under way after 0 s \(crawl.stop_grace\): "
                         "cut short", capsys.readouterr().err)
        queued = seen.ledger.counts()["queued"]
        seen.close()
        records = read_pages(tmp_path / "state" / "pages.jsonl")
        assert queued > 0
        # everything recorded is marked; everything unrecorded is still queued
        recorded = {r["url"] for r in records}
        with __import__("dedup").UrlSeen(tmp_path / "state", create=False) as again:
            for r in records:
                _, row = again.check(r["url"])
                assert row["state"] != State.QUEUED.name.lower()
            unrecorded = [(url, state) for _, url, _, _, state, *_ in again.ledger.rows()
                          if url not in recorded]
        assert unrecorded  # the stop left work behind ...
        assert all(state == State.QUEUED for _, state in unrecorded)  # ... all of it queued


@pytest.mark.parametrize("bad", ["", "# only a comment\n\n", "ftp://x\nnot a url\n"])
async def test_seeds_file_without_a_valid_url_is_an_error(tmp_path, bad):
    from crawler.config.scope import SeedError
    (tmp_path / "seeds.txt").write_text(bad)
    with pytest.raises(SeedError, match="no valid URL"):
        create_crawl(tmp_path / "state", fast_settings(), tmp_path / "seeds.txt")
    assert not (tmp_path / "state").exists()  # nothing half-created


@pytest.mark.parametrize("trigger", [
    {"interval": 1000.0, "every_new_urls": 20},  # by new URLs
    {"interval": 0.2, "every_new_urls": 10_000_000},  # by time
])
async def test_snapshots_are_taken_during_the_crawl_off_the_event_loop(tmp_path, site, trigger):
    import threading

    # The snapshot task looks at its triggers once a second: the crawl (2 hosts,
    # one fetch at a time each, 40 pages of 0.06 s) lasts ~2.4 s, so it sees one.
    spec = SiteSpec(hosts=2, pages=40, seed=20, delay=0.06)
    async with site(spec) as running:
        settings = fast_settings(snapshot=trigger, crawl={"concurrency": 4},
                                 politeness={"per_host": 1})
        seeds = write_seeds(tmp_path / "seeds.txt", running.seeds)
        seen, scope, _ = create_crawl(tmp_path / "state", settings, seeds)
        calls = []
        real = seen.snapshot_shard

        def spy(i):
            # pages served so far: "mid-crawl" means before the last page was fetched
            # (the link graph is dense, so every URL may be admitted early on)
            # (list() of a dict view copies it under the GIL: safe from this thread)
            served = sum(sum(list(log.counts.values())) for log in running.logs)
            calls.append((i, threading.get_ident(), served))
            return real(i)

        seen.snapshot_shard = spy
        try:
            await Engine(seen, settings, scope).run()
        finally:
            seen.close()
    final = seen.nshards
    assert len(calls) > final  # at least one periodic snapshot besides the final one
    assert threading.get_ident() not in {ident for _, ident, _ in calls}
    periodic = calls[:-final]
    assert min(served for *_, served in periodic) < calls[-1][2]  # taken mid-crawl


async def test_the_filter_fill_is_counted_only_when_someone_reads_it(tmp_path, site):
    """Counting the filter's set bits takes ms: the progress loop does it for a status
    line that is due, a fleet, or a reader of ``status()``, not every tick of a quiet
    crawl (which counts it once, for its summary)."""
    async with site(SiteSpec(hosts=1, pages=25, seed=13)) as running:
        calls = {}
        for reader in (False, True):
            settings = fast_settings(output={"progress_interval": 0.01},
                                     politeness={"delay": 0.02, "per_host": 1})
            seeds = write_seeds(tmp_path / f"seeds-{reader}.txt", running.seeds)
            seen, scope, _ = create_crawl(tmp_path / f"state-{reader}", settings, seeds)
            counted = calls[reader] = []
            info = seen.bloom.info
            seen.bloom.info = lambda info=info, counted=counted: counted.append(1) or info()
            engine = Engine(seen, settings, scope)

            async def read(engine: Engine = engine) -> None:
                while True:
                    assert 0 < engine.status()["fill"] < 1
                    await asyncio.sleep(0.01)

            task = asyncio.create_task(read()) if reader else None
            try:
                summary = await engine.run()
            finally:
                if task is not None:
                    task.cancel()
                seen.close()
            assert summary["session_pages"] > 20 and summary["fill"] > 0
        assert len(calls[False]) == 1  # the summary's
        assert len(calls[True]) > 10
