"""Transient failures over a crawl (issue 11, items 14-16): retried later with
backoff, never turned into a permanent skip; what is given up is counted."""

from __future__ import annotations

import asyncio
import socket

from aiohttp import web

from crawler.admin.report import state_stats
from crawler.core.outputs.output import read_pages
from crawler.core.run.engine import Engine
from crawler.core.run.progress import format_stats
from crawler.core.state.state import create_crawl
from tests.crawler.core.run.test_engine import crawl
from tests.support.faultserver import add_request_log, fault_server, serve
from tests.support.helpers import fast_settings, write_seeds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _page(*links: str):
    body = "<html><body>" + "".join(f'<a href="{u}">x</a>' for u in links) + "</body></html>"

    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=body, content_type="text/html")

    return handler


async def test_a_seed_host_down_at_start_and_up_later_is_crawled(tmp_path):
    port = _free_port()
    app = web.Application()
    log = add_request_log(app)
    app.router.add_get("/", _page("/a"))
    app.router.add_get("/a", _page())
    settings = fast_settings(crawl={"max_retries": 6, "retry_delay": 0.3})
    seeds = write_seeds(tmp_path / "seeds.txt", [f"http://127.0.0.1:{port}/"])
    seen, scope, _ = create_crawl(tmp_path / "state", settings, seeds)
    engine = Engine(seen, settings, scope)
    task = asyncio.ensure_future(engine.run())
    try:
        while engine.retries.retried == 0:  # refused at least once (robots.txt)
            await asyncio.sleep(0.02)
        assert not task.done()
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        try:
            summary = await asyncio.wait_for(task, 30)
        finally:
            await runner.cleanup()
    finally:
        seen.close()
    records = {r["url"].rsplit("/", 1)[1]: r for r in read_pages(tmp_path / "state/pages.jsonl")}
    assert set(records) == {"", "a"}
    assert all((r["status"], r["error"]) == (200, None) for r in records.values())
    assert log.count("/") == 1 and log.count("/a") == 1
    assert summary["failed"] == 0


async def test_robots_txt_timing_out_is_disallow_for_now_then_given_up_not_allow_all(tmp_path):
    app = web.Application()
    log = add_request_log(app)

    async def trickle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        for _ in range(100):  # a 200 whose body never completes in time
            await asyncio.sleep(0.1)
            await resp.write(b"#")
        return resp

    app.router.add_get("/robots.txt", trickle)
    app.router.add_get("/page", _page())
    settings = fast_settings(crawl={"max_retries": 2, "retry_delay": 0.05},
                             fetch={"read_timeout": 0.5, "total_timeout": 0.5, "retries": 0})
    async with serve(app) as base:
        records, _, counts, summary = await crawl(tmp_path, [base + "/page"], settings)
    assert log.count("/page") == 0  # never fetched without its robots.txt
    assert log.count("/robots.txt") == 3  # first try + 2 rounds
    (record,) = records
    assert record["error"] == "robots.txt unavailable: timeout"
    assert counts["failed"] == 1 and counts["skipped"] == 0
    assert summary["failed"] == 1


async def test_robots_txt_5xx_then_200_is_retried_and_the_page_crawled(tmp_path):
    app = web.Application()
    log = add_request_log(app)
    state = {"n": 0}

    async def robots(request: web.Request) -> web.Response:
        state["n"] += 1
        if state["n"] <= 2:
            return web.Response(status=503, text="busy")
        return web.Response(text="User-agent: *\nDisallow: /private\n")

    app.router.add_get("/robots.txt", robots)
    app.router.add_get("/", _page("/private/x", "/ok"))
    app.router.add_get("/ok", _page())
    settings = fast_settings(crawl={"max_retries": 3, "retry_delay": 0.05},
                             fetch={"retries": 0})
    async with serve(app) as base:
        records, _, counts, _ = await crawl(tmp_path, [base + "/"], settings)
    by = {r["url"].removeprefix(base): r for r in records}
    assert by["/"]["status"] == 200 and by["/ok"]["status"] == 200
    assert by["/private/x"]["error"] == "robots.txt" and log.count("/private/x") == 0
    assert counts["failed"] == 0 and counts["skipped"] == 1


async def test_an_ssrf_refusal_is_recorded_as_such_not_as_robots_txt(tmp_path):
    # "localhost" is no IP literal: only the resolver's guard can refuse it
    app = web.Application()
    log = add_request_log(app)
    app.router.add_get("/", _page())
    async with serve(app) as base:
        port = base.rsplit(":", 1)[1]
        records, _, counts, _ = await crawl(
            tmp_path, [f"http://localhost:{port}/"], fast_settings(fetch={"allow_private": False}))
    assert log.count() == 0
    (record,) = records
    assert record["error"].startswith("refused private address")
    assert counts["failed"] == 1 and counts["skipped"] == 0


async def test_an_endless_chain_of_unique_redirects_stops_at_max_depth(tmp_path):
    app = web.Application()
    log = add_request_log(app)

    async def hop(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"/r/{int(request.match_info['n']) + 1}")

    app.router.add_get("/r/{n}", hop)
    settings = fast_settings(crawl={"max_depth": 3, "max_pages": 40})
    async with serve(app) as base:
        records, _, counts, _ = await crawl(tmp_path, [base + "/r/0"], settings)
    assert sorted(r["depth"] for r in records) == [0, 1, 2, 3]
    assert log.count() == 4 + 1  # /r/0../r/3 and robots.txt
    assert counts["queued"] == 0


async def test_transient_failures_are_given_up_after_their_rounds_and_counted(tmp_path):
    settings = fast_settings(crawl={"max_retries": 2, "retry_delay": 0.05},
                             fetch={"retries": 0, "read_timeout": 0.3, "total_timeout": 0.3,
                                    "max_bytes": 100_000})
    async with fault_server() as srv:
        paths = ["/flaky?key=a&fail=2", "/flaky?key=b&fail=9", "/hang", "/status/404",
                 "/big?mb=2"]
        records, _, counts, summary = await crawl(tmp_path, [srv.url(p) for p in paths],
                                                  settings)
        log = srv.log
    by = {r["url"].removeprefix(srv.base): r for r in records}
    assert (by["/flaky?key=a&fail=2"]["status"], by["/flaky?key=a&fail=2"]["error"]) == (200, None)
    assert by["/flaky?key=b&fail=9"]["error"] == "http 500"
    assert by["/hang"]["error"] == "timeout"
    assert sum(1 for r in log.records if r.query == "key=b&fail=9") == 3  # 1 + 2 rounds
    assert counts["failed"] == 2 and counts["queued"] == 0
    # failed: no response (the hang) or over the limit (big); answers with errors: 404, 500
    assert summary["failed"] == 2 and summary["fetched_with_errors"] == 2
    assert summary["failed_causes"] == {"timeout": 1, "too large": 1}
    assert summary["given_up"] == 2  # the 500 and the hang
    stats = state_stats(tmp_path / "state")
    assert (stats["failed"], stats["fetched_with_errors"]) == (2, 2)
    text = format_stats(stats)
    assert "2 with errors" in text and "2 failed" in text
