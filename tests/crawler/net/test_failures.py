"""How failures are classified and retried (issue 11, item 26), against real
sockets and servers: DNS, refused connections, a redirect without Location, and a
robots.txt that is not UTF-8."""

from __future__ import annotations

import socket
from dataclasses import replace

from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from crawler.config.settings import FetchSettings
from crawler.net.fetch import Fetcher
from crawler.net.robots import RobotsCache
from tests.crawler.core.run.test_engine import crawl
from tests.support.faultserver import HostMap, add_request_log, fault_server, serve
from tests.support.helpers import fast_settings

FAST = FetchSettings(allow_private=True, connect_timeout=1.0, read_timeout=0.5,
                     total_timeout=5.0, retries=2, backoff_base=0.01, backoff_max=0.02)


class FlakyDns(AbstractResolver):
    """A resolver whose lookups fail with EAI_AGAIN (a DNS server timing out)."""

    def __init__(self) -> None:
        self.lookups = 0

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        self.lookups += 1
        raise OSError(socket.EAI_AGAIN, "Temporary failure in name resolution")

    async def close(self) -> None:
        return None


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_an_unknown_name_is_a_dns_error_not_retried() -> None:
    hosts = HostMap({})
    async with Fetcher(FAST, resolver=hosts) as f:
        r = await f.fetch("http://nowhere.test/")
    assert (r.status, r.error, r.retryable, r.attempts) == (None, "dns error", False, 1)
    assert hosts.lookups == ["nowhere.test"]


async def test_a_temporary_dns_failure_is_retried() -> None:
    dns = FlakyDns()
    async with Fetcher(FAST, resolver=dns) as f:
        r = await f.fetch("http://flaky.test/")
    assert (r.status, r.error, r.retryable, r.attempts) == (None, "dns error", True, 3)
    assert dns.lookups == 3


async def test_a_refused_connection_is_retried_and_transient() -> None:
    async with Fetcher(FAST) as f:
        r = await f.fetch(f"http://127.0.0.1:{closed_port()}/")
    assert (r.status, r.error, r.retryable, r.interrupted, r.attempts) == (
        None, "connection refused", True, True, 3)
    assert r.failed


async def test_a_404_is_an_answer_not_retried() -> None:
    async with fault_server() as srv, Fetcher(FAST) as f:
        r = await f.fetch(srv.url("/status/404"))
        assert (r.status, r.error, r.retryable, r.attempts, r.failed) == (
            404, "http 404", False, 1, False)
        assert srv.log.count("/status/404") == 1


async def test_a_redirect_without_location_is_recorded_with_its_error(tmp_path) -> None:
    async with fault_server() as srv:
        async with Fetcher(FAST) as f:
            r = await f.fetch(srv.url("/status/302"))
        assert (r.status, r.location, r.error, r.retryable) == (
            302, None, "redirect without location", False)
        records, _, counts, summary = await crawl(tmp_path, [srv.url("/status/302")],
                                                  fast_settings())
    (record,) = records
    assert (record["status"], record["error"], record["links_found"]) == (
        302, "redirect without location", 0)
    assert counts["fetched"] == 1 and summary["fetched_with_errors"] == 1


async def test_a_robots_txt_that_is_not_utf8_still_applies() -> None:
    app = web.Application()
    log = add_request_log(app)

    async def robots(request: web.Request) -> web.Response:
        # latin-1 bytes (invalid UTF-8) around the rules, no charset declared
        body = b"# caf\xe9 \xff\xfe\nUser-agent: *\nDisallow: /secret\nDisallow: /caf\xe9\n"
        return web.Response(body=body, content_type="text/plain")

    app.router.add_get("/robots.txt", robots)
    async with serve(app) as base, Fetcher(replace(FAST, retries=0)) as f:
        cache = RobotsCache(f, FAST.user_agent)
        assert not await cache.allowed(base + "/secret/x")
        assert await cache.allowed(base + "/public")
        answer = await cache.check(base + "/secret")
        assert (answer.allowed, answer.unavailable) == (False, None)  # a real Disallow
    assert log.count("/robots.txt") == 1
