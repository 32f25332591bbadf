"""RobotsCache against a real aiohttp server whose robots.txt the test controls."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from crawler.config.settings import FetchSettings
from crawler.net.fetch import Fetcher
from crawler.net.robots import RobotsCache, origin_of
from tests.support.faultserver import RequestLog, add_request_log, serve
from tests.support.helpers import until

SETTINGS = FetchSettings(
    allow_private=True, read_timeout=0.5, total_timeout=3.0, retries=0, backoff_base=0.01
)
UA = SETTINGS.user_agent


@dataclass
class Site:
    """A server whose /robots.txt answer (status, body, delay) tests can change."""

    base: str
    log: RequestLog
    status: int = 200
    body: str = ""
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)

    def url(self, path: str) -> str:
        return self.base + path


@asynccontextmanager
async def robots_site(body: str = "", status: int = 200) -> AsyncIterator[Site]:
    app = web.Application()
    log = add_request_log(app)
    holder: list[Site] = []

    async def robots(request: web.Request) -> web.Response:
        site = holder[0]
        if site.delay:
            await asyncio.sleep(site.delay)
        return web.Response(status=site.status, text=site.body, headers=site.headers)

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently("/real-robots.txt")

    app.router.add_get("/robots.txt", robots)
    app.router.add_get("/moved/robots.txt", moved)  # not a robots location; for redirects
    app.router.add_get("/real-robots.txt", robots)
    async with serve(app) as base:
        holder.append(Site(base, log, status, body))
        yield holder[0]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def cache(**kw: object) -> AsyncIterator[RobotsCache]:
    async with Fetcher(SETTINGS) as fetcher:
        yield RobotsCache(fetcher, UA, **kw)  # type: ignore[arg-type]


async def test_disallow_rules_are_obeyed() -> None:
    body = "User-agent: *\nDisallow: /private\nAllow: /private/open\n"
    async with robots_site(body) as site, cache() as robots:
        assert not await robots.allowed(site.url("/private"))
        assert not await robots.allowed(site.url("/private/x?y=1"))
        assert await robots.allowed(site.url("/private/open/page"))
        assert await robots.allowed(site.url("/public"))
        assert await robots.allowed(site.url("/"))
        assert site.log.count("/robots.txt") == 1  # cached across calls


async def test_our_agent_group_wins_over_the_star_group() -> None:
    body = "User-agent: bloomcrawl\nDisallow: /\n\nUser-agent: *\nAllow: /\n"
    async with robots_site(body) as site, cache() as robots:
        assert robots.agent == "bloomcrawl"
        assert not await robots.allowed(site.url("/anything"))
        assert await robots.allowed(site.url("/robots.txt"))  # the file itself is always fine
    body = "User-agent: otherbot\nDisallow: /\n"
    async with robots_site(body) as site, cache() as robots:
        assert await robots.allowed(site.url("/anything"))


@pytest.mark.parametrize("user_agent, token", [
    ("AcmeBot/1.2 (+https://acme.example/bot)", "AcmeBot"),
    ("Mozilla/5.0 (compatible; AcmeBot/1.2; +https://acme.example/bot)", "AcmeBot"),
    ("AcmeBot", "AcmeBot"),
])
async def test_the_configured_agents_product_token_picks_the_group(user_agent, token) -> None:
    body = ("User-agent: AcmeBot\nDisallow: /acme\n\n"
            "User-agent: Mozilla\nDisallow: /mozilla\n\n"
            "User-agent: *\nDisallow: /star\n")
    async with robots_site(body) as site, Fetcher(SETTINGS) as fetcher:
        robots = RobotsCache(fetcher, user_agent)
        assert robots.agent == token
        assert not await robots.allowed(site.url("/acme"))
        assert await robots.allowed(site.url("/star"))
        assert await robots.allowed(site.url("/mozilla"))


async def test_crawl_delay_parsed_and_capped() -> None:
    body = "User-agent: *\nCrawl-delay: 2.5\n\nUser-agent: bloomcrawl\nCrawl-delay: 1000\n"
    async with robots_site(body) as site, cache(max_crawl_delay=30.0) as robots:
        assert robots.crawl_delay(site.url("/")) is None  # not fetched yet: unknown
        await robots.allowed(site.url("/"))
        assert robots.crawl_delay(site.url("/x")) == 30.0
    async with robots_site("User-agent: *\nCrawl-delay: 2.5\n") as site, cache() as robots:
        await robots.allowed(site.url("/"))
        assert robots.crawl_delay(site.url("/")) == 2.5
    async with robots_site("User-agent: *\nRequest-rate: 1/5\n") as site, cache() as robots:
        await robots.allowed(site.url("/"))
        assert robots.crawl_delay(site.url("/")) == 5.0
    async with robots_site("User-agent: *\nDisallow: /x\n") as site, cache() as robots:
        await robots.allowed(site.url("/"))
        assert robots.crawl_delay(site.url("/")) is None


async def test_concurrent_callers_share_one_fetch() -> None:
    async with robots_site("User-agent: *\nDisallow: /no\n") as site, cache() as robots:
        site.delay = 0.2  # keep the fetch in flight while everyone asks
        paths = [f"/no/{i}" if i % 2 else f"/yes/{i}" for i in range(10)]
        answers = await asyncio.gather(*(robots.allowed(site.url(p)) for p in paths))
        assert answers == [i % 2 == 0 for i in range(10)]
        assert site.log.count("/robots.txt") == 1


async def test_a_cancelled_caller_does_not_cancel_the_shared_fetch() -> None:
    async with robots_site("User-agent: *\nDisallow: /no\n") as site, cache() as robots:
        site.delay = 0.2
        first = asyncio.create_task(robots.allowed(site.url("/no")))
        second = asyncio.create_task(robots.allowed(site.url("/yes")))
        await until(lambda: site.log.active == 1, what="the shared fetch at the server")
        first.cancel()
        assert await second is True
        with pytest.raises(asyncio.CancelledError, match=r"^$"):  # cancelled, no message
            await first
        assert site.log.count("/robots.txt") == 1


async def test_404_robots_allows_everything() -> None:
    async with robots_site("User-agent: *\nDisallow: /\n", status=404) as site, cache() as robots:
        assert await robots.allowed(site.url("/anything"))
        assert robots.crawl_delay(site.url("/")) is None


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_server_error_robots_disallows_everything(status: int) -> None:
    async with robots_site("", status=status) as site, cache() as robots:
        assert not await robots.allowed(site.url("/anything"))
        assert not await robots.allowed(site.url("/"))
        assert site.log.count("/robots.txt") == 1


async def test_unreachable_origin_is_disallowed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with cache() as robots:
        assert not await robots.allowed(f"http://127.0.0.1:{port}/page")


async def test_server_error_is_retried_after_error_ttl() -> None:
    clock = FakeClock()
    async with robots_site("", status=500) as site, cache(error_ttl=60.0, clock=clock) as robots:
        assert not await robots.allowed(site.url("/a"))
        site.status, site.body = 200, "User-agent: *\nDisallow: /private\n"
        clock.now += 59
        assert not await robots.allowed(site.url("/a"))  # still within error_ttl
        assert site.log.count("/robots.txt") == 1
        clock.now += 2
        assert await robots.allowed(site.url("/a"))
        assert not await robots.allowed(site.url("/private"))
        assert site.log.count("/robots.txt") == 2


async def test_rules_refetched_after_ttl_and_kept_when_the_refetch_fails() -> None:
    clock = FakeClock()
    async with (
        robots_site("User-agent: *\nDisallow: /private\n") as site,
        cache(ttl=100.0, error_ttl=10.0, clock=clock) as robots,
    ):
        assert await robots.allowed(site.url("/a"))
        clock.now += 101
        site.status = 503
        # The refetch fails; the last good rules stay in force (not disallow-all).
        assert await robots.allowed(site.url("/a"))
        assert not await robots.allowed(site.url("/private"))
        assert site.log.count("/robots.txt") == 2
        clock.now += 11
        site.status, site.body = 200, "User-agent: *\nDisallow: /\n"
        assert not await robots.allowed(site.url("/a"))
        assert site.log.count("/robots.txt") == 3


async def test_redirected_robots_is_followed() -> None:
    async with robots_site("User-agent: *\nDisallow: /secret\n") as site:
        app_origin = site.base
        async with Fetcher(SETTINGS) as fetcher:
            got = await fetcher.get_text(app_origin + "/moved/robots.txt")
        status, text = got.status, got.text
        assert status == 200 and text is not None and "Disallow: /secret" in text
        assert site.log.count("/real-robots.txt") == 1


async def test_origins_are_cached_separately_and_bounded() -> None:
    async with (
        robots_site("User-agent: *\nDisallow: /a\n") as one,
        robots_site("User-agent: *\nDisallow: /b\n") as two,
        cache(max_entries=1) as robots,
    ):
        assert not await robots.allowed(one.url("/a")) and await robots.allowed(one.url("/b"))
        assert await robots.allowed(two.url("/a")) and not await robots.allowed(two.url("/b"))
        assert len(robots) == 1  # the first origin was evicted
        assert not await robots.allowed(one.url("/a"))
        assert one.log.count("/robots.txt") == 2 and two.log.count("/robots.txt") == 1


async def test_garbage_robots_allows_everything() -> None:
    body = "\x00\xff<html><body>not a robots file</body></html>\nDisallow /oops\n"
    async with robots_site(body) as site, cache() as robots:
        assert await robots.allowed(site.url("/oops"))


def test_origin_of() -> None:
    assert origin_of("http://Example.COM/a?b") == "http://example.com:80"
    assert origin_of("https://example.com:8443/") == "https://example.com:8443"
    assert origin_of("https://example.com/") == "https://example.com:443"
    assert origin_of("http://[::1]:8080/x") == "http://[::1]:8080"
    assert origin_of("mailto:a@b.c") is None
    assert origin_of("/relative") is None


async def test_non_http_urls_are_not_allowed() -> None:
    async with cache() as robots:
        assert not await robots.allowed("ftp://example.com/file")


async def test_each_origin_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import crawler.net.robots

    parsed: list[str] = []
    real = crawler.net.robots.origin_of
    monkeypatch.setattr(crawler.net.robots, "origin_of", lambda u: parsed.append(u) or real(u))
    body = "User-agent: *\nDisallow: /private\n"
    async with robots_site(body) as site, cache() as robots:
        for i in range(20):
            assert await robots.allowed(site.url(f"/p/{i}?q#f"))
            assert robots.crawl_delay(site.url(f"/p/{i}")) is None
        assert not await robots.allowed(site.url("/private/1"))
        assert await robots.allowed(site.url("/robots.txt?x=1#y"))
    assert parsed == [site.base]
