"""One bound on requests per URL (issue 28, item 5): a fetch's quick retries and
the rounds over the crawl draw from one budget, ``[crawl] max_retries``; the
pages.jsonl record counts every request sent for the URL; the count survives
kill -9 and resume."""

from __future__ import annotations

import pytest
from aiohttp import web

from crawler.config.settings import ConfigError, Settings, settings_from_dict
from crawler.core.outputs.output import read_pages
from crawler.core.state.crawlstate import CrawlState
from dedup import UrlSeen
from tests.crawler.core.run.test_engine import crawl
from tests.support.faultserver import add_request_log, fault_server, serve
from tests.support.helpers import (
    config_toml,
    fast_settings,
    run_cli,
    start_cli,
    until,
    write_seeds,
)

MAX_RETRIES = 3
BOUND = 1 + MAX_RETRIES  # requests per URL, documented in config/default.toml


def budget_settings(**fetch: object) -> Settings:
    # one quick retry within a fetch: it must come out of the same budget
    return fast_settings(
        crawl={"max_retries": MAX_RETRIES, "retry_delay": 0.05, "retry_delay_max": 0.2},
        fetch={"retries": 1, "backoff_base": 0.01, "backoff_max": 0.02, **fetch})


async def test_a_server_resetting_every_connection_gets_exactly_the_bound(tmp_path):
    async with fault_server() as srv:
        records, _, counts, summary = await crawl(tmp_path, [srv.url("/reset")],
                                                  budget_settings())
        sent = srv.log.count("/reset")
    assert sent == BOUND  # not (1 + retries) x (1 + rounds), nor doubled by aiohttp
    (record,) = records
    assert record["attempts"] == BOUND
    assert record["status"] is None and record["error"].startswith("connection reset")
    assert counts["failed"] == 1 and counts["queued"] == 0
    assert summary["failed"] == 1


async def test_a_body_cut_by_the_total_timeout_counts_like_any_failure(tmp_path):
    # a byte every 0.2 s: under the read timeout, so only total_timeout ends it
    settings = budget_settings(read_timeout=2.0, total_timeout=0.5)
    async with fault_server() as srv:
        records, _, counts, _ = await crawl(tmp_path, [srv.url("/slowbody?every=0.2&n=100")],
                                            settings)
        sent = srv.log.count("/slowbody")
    assert sent == BOUND
    (record,) = records
    assert (record["error"], record["attempts"]) == ("timeout", BOUND)
    assert counts["failed"] == 1


async def test_failing_twice_then_answering_is_fetched_with_three_attempts(tmp_path):
    async with fault_server() as srv:
        # 500, 500 in the first round (a quick retry), 200 in the second
        records, _, counts, _ = await crawl(tmp_path, [srv.url("/flaky?key=a&fail=2")],
                                            budget_settings())
        sent = srv.log.count("/flaky")
    assert sent == 3
    (record,) = records
    assert (record["status"], record["error"], record["attempts"]) == (200, None, 3)
    assert counts["fetched"] == 1 and counts["failed"] == 0


async def test_a_round_lost_to_robots_txt_counts_and_the_record_counts_page_requests(
        tmp_path):
    app = web.Application()
    log = add_request_log(app)
    robots = {"n": 0}

    async def robots_txt(request: web.Request) -> web.Response:
        robots["n"] += 1
        if robots["n"] == 1:
            return web.Response(status=503, text="busy")
        return web.Response(status=404)

    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=500, text="broken")

    app.router.add_get("/robots.txt", robots_txt)
    app.router.add_get("/p", broken)
    settings = fast_settings(crawl={"max_retries": 2, "retry_delay": 0.05},
                             fetch={"retries": 0})
    async with serve(app) as base:
        records, _, counts, _ = await crawl(tmp_path, [base + "/p"], settings)
    # 3 tries: the round robots.txt was unavailable, then two requests for the page
    assert log.count("/p") == 2
    (record,) = records
    assert (record["status"], record["error"], record["attempts"]) == (500, "http 500", 2)
    assert counts["failed"] == 1


async def test_the_bound_holds_across_kill_9_and_resume(tmp_path):
    settings = fast_settings(crawl={"max_retries": 5, "retry_delay": 0.2,
                                    "retry_delay_max": 0.2},
                             fetch={"retries": 0})
    config = tmp_path / "crawl.toml"
    config.write_text(config_toml(settings))
    state = tmp_path / "state"
    async with fault_server() as srv:
        seeds = write_seeds(tmp_path / "seeds.txt", [srv.url("/reset")])
        proc = await start_cli("crawl", str(seeds), "--state", str(state), "--config",
                               str(config), "--quiet")
        try:
            await until(lambda: srv.log.count("/reset") >= 3, timeout=20,
                        what="three requests before the kill")
        finally:
            proc.kill()
            await proc.wait()
        assert srv.log.count("/reset") < 6  # killed mid-crawl
        done = await run_cli("resume", str(state), "--quiet")
        sent = srv.log.count("/reset")
    assert done.rc == 3, done.stderr  # given up
    assert sent == 6  # 1 + max_retries over both runs, not anew after the restart
    (record,) = read_pages(state / "pages.jsonl")
    assert record["attempts"] == 6 and record["error"].startswith("connection reset")
    with UrlSeen(state, readonly=True) as seen:
        assert seen.ledger.counts()["failed"] == 1
        assert not CrawlState(seen.records).retry_attempts()  # settled: nothing left


def test_retry_rounds_in_a_config_file_is_an_error_naming_max_retries():
    with pytest.raises(ConfigError, match=r"\[crawl\] retry_rounds is replaced by "
                                          r"\[crawl\] max_retries"):
        Settings().overlay({"crawl": {"retry_rounds": 5}}, source="config file c.toml")


def test_a_crawl_frozen_with_retry_rounds_resumes_with_its_old_total():
    frozen = Settings().to_dict()
    del frozen["crawl"]["max_retries"]
    frozen["crawl"]["retry_rounds"] = 5
    frozen["fetch"]["retries"] = 2
    s = settings_from_dict(frozen)
    assert (s.crawl.max_retries, s.fetch.retries) == (17, 2)  # 3 x 6 requests in all
