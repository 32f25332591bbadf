"""Fetcher against a real misbehaving aiohttp server on 127.0.0.1 (tests/support/faultserver.py),
every network test on both HTTP clients (the ``client`` fixture): what one does, the other
must do too."""

from __future__ import annotations

import asyncio
import random
import socket
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
import pytest_asyncio

from crawler.config.settings import FetchSettings
from crawler.net.body import MEMORY
from crawler.net.exchange import payload_digest
from crawler.net.fetch import Fetcher, TextFetch
from crawler.net.headers import looks_like_html, parse_content_type, parse_retry_after
from crawler.net.links import extract_links
from crawler.net.netguard import GuardedResolver, PrivateAddressError, is_public_address
from tests.support.faultserver import MB, FaultServer, HostMap, fault_server
from tests.support.helpers import until

FAST = FetchSettings(
    allow_private=True,  # the test server is on loopback
    connect_timeout=1.0,
    read_timeout=0.5,
    total_timeout=5.0,
    retries=0,
    backoff_base=0.01,
    backoff_max=0.05,
    max_bytes=1 * MB,
)


@pytest_asyncio.fixture
async def srv():
    async with fault_server() as server:
        yield server


@pytest.fixture(params=["fast", "aiohttp"])
def client(request: pytest.FixtureRequest) -> str:
    """Each test runs on both HTTP clients ([fetch] client): the lean one
    (crawler/net/http1.py) takes these plain http:// GETs, aiohttp the others."""
    return request.param


async def fetch(url: str, *, client: str, **settings: object):
    async with Fetcher(replace(FAST, client=client, **settings)) as f:
        return await f.fetch(url)


# --- plain success --------------------------------------------------------------------------


async def test_html_page_is_kept_with_its_metadata(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/html?links=3"), client=client)
    assert (r.status, r.error, r.attempts) == (200, None, 1)
    assert r.ok
    assert r.content_type == "text/html" and r.charset == "utf-8"
    assert r.body is not None and r.nbytes == len(r.body)
    assert b'href="/html/page/2"' in r.body
    assert r.location is None and r.retry_after is None
    rec = srv.log.for_path("/html")[0]
    assert rec.user_agent == FAST.user_agent


# --- timeouts, resets, refusals -------------------------------------------------------------


async def test_hanging_server_is_bounded_by_read_timeout(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/hang"), read_timeout=0.3, total_timeout=30.0, client=client)
    assert (r.status, r.error, r.body) == (None, "timeout", None)
    assert r.elapsed < 3.0


async def test_hanging_server_is_bounded_by_total_timeout(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/hang"), read_timeout=30.0, total_timeout=0.4, client=client)
    assert (r.status, r.error) == (None, "timeout")
    assert r.elapsed < 3.0


async def test_body_dripping_slower_than_read_timeout_times_out(
    client: str, srv: FaultServer
) -> None:
    r = await fetch(srv.url("/slowbody?every=0.4&n=50"), read_timeout=0.15, client=client)
    assert r.status == 200 and r.error == "timeout" and r.body is None
    assert r.elapsed < 3.0


async def test_body_dripping_within_read_timeout_is_cut_by_total_timeout(
    client: str,
    srv: FaultServer,
) -> None:
    r = await fetch(
        srv.url("/slowbody?every=0.05&n=400"), read_timeout=0.5, total_timeout=0.6, client=client
    )
    assert r.error == "timeout" and r.body is None
    rec = srv.log.for_path("/slowbody")[0]
    await until(lambda: rec.finished is not None, what="the handler to end")
    assert not rec.completed and rec.bytes_sent < 400  # cut, not merely slow
    assert r.elapsed < 3.0


async def test_reset_before_response(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/reset"), client=client)
    assert r.status is None and r.body is None
    assert r.error is not None and r.error.startswith("connection reset")


async def test_reset_in_the_middle_of_the_body(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/reset?after=2000"), client=client)
    assert r.status == 200 and r.body is None
    assert r.error is not None and r.error.startswith("connection reset")
    assert 0 < r.nbytes < 2000 + 100_000


async def test_connection_refused_is_retried_then_reported(client: str) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = await fetch(f"http://127.0.0.1:{port}/", retries=1, client=client)
    assert (r.status, r.error, r.attempts) == (None, "connection refused", 2)


async def test_invalid_urls_are_refused_without_a_request(client: str) -> None:
    for url in (
        "ftp://example.com/x",
        "http:///nohost",
        "not a url",
        "/relative",
        "http://127.0.0.1:99999/x",
        "http://1.2.3.999/x",
        "http://09.1.1.1/x",
    ):
        r = await fetch(url, client=client)
        assert (r.status, r.error, r.attempts) == (None, "invalid url", 0), url


# --- retries ----------------------------------------------------------------------------------


async def test_5xx_retried_until_success(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/flaky?key=a&fail=2"), retries=2, client=client)
    assert (r.status, r.error, r.attempts) == (200, None, 3)
    assert r.body is not None
    assert [rec.status for rec in srv.log.for_path("/flaky")] == [500, 500, 200]


async def test_retries_exhausted_returns_last_status_and_error(
    client: str, srv: FaultServer
) -> None:
    r = await fetch(srv.url("/flaky?key=b&fail=10"), retries=2, client=client)
    assert (r.status, r.error, r.attempts, r.body) == (500, "http 500", 3, None)
    assert srv.log.count("/flaky") == 3


async def test_without_retries_a_single_request_is_made(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/flaky?key=c&fail=1"), retries=0, client=client)
    assert (r.status, r.attempts) == (500, 1)
    assert srv.log.count("/flaky") == 1


@pytest.mark.parametrize("code", [404, 403, 501])
async def test_4xx_and_501_are_not_retried(client: str, srv: FaultServer, code: int) -> None:
    r = await fetch(srv.url(f"/status/{code}"), retries=3, client=client)
    assert (r.status, r.error, r.attempts) == (code, f"http {code}", 1)
    assert srv.log.count(f"/status/{code}") == 1


async def test_502_is_retried(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/status/502"), retries=2, client=client)
    assert (r.status, r.error, r.attempts) == (502, "http 502", 3)
    assert srv.log.count("/status/502") == 3


async def test_connection_reset_is_retried(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/reset"), retries=2, client=client)
    assert r.attempts == 3 and r.error is not None and r.error.startswith("connection reset")
    # one request an attempt: aiohttp's own unseen re-send of an idempotent request
    # after a reset (RFC 9112 9.3.1) is off, so [crawl] max_retries counts them all
    assert srv.log.count("/reset") == 3


async def test_timeouts_are_retried(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/hang"), read_timeout=0.2, retries=1, client=client)
    assert (r.error, r.attempts) == ("timeout", 2)
    assert srv.log.count("/hang") == 2


async def test_429_retry_after_seconds_is_honoured(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/429?key=a&after=1"), retries=2, client=client)
    assert (r.status, r.error, r.attempts) == (200, None, 2)
    assert r.elapsed >= 0.95
    first, second = srv.log.for_path("/429")
    assert first.status == 429 and second.status == 200
    assert second.started - first.started >= 0.95


async def test_503_retry_after_http_date_is_honoured(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/503?key=a&date=2"), retries=1, client=client)
    assert (r.status, r.attempts) == (200, 2)
    first, second = srv.log.for_path("/503")
    # HTTP-dates have 1 s resolution: "now + 2 s" is 1-2 s away.
    assert second.started - first.started >= 0.9


async def test_retry_after_longer_than_cap_gives_up_at_once(client: str, srv: FaultServer) -> None:
    r = await fetch(
        srv.url("/429?key=b&after=3600"), retries=3, max_retry_after=60.0, client=client
    )
    assert (r.status, r.error, r.attempts) == (429, "retry-after too long", 1)
    assert r.retry_after == 3600.0
    assert srv.log.count("/429") == 1


async def test_429_still_limited_after_retries_reports_429(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/429?key=c&after=0&times=9"), retries=2, client=client)
    assert (r.status, r.error, r.attempts, r.retry_after) == (429, "http 429", 3, 0.0)
    assert srv.log.count("/429") == 3


def test_backoff_is_full_jitter_within_the_exponential_cap() -> None:
    f = Fetcher(FetchSettings(backoff_base=0.5, backoff_max=3.0), rng=random.Random(7))
    for attempt, cap in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (10, 3.0)]:
        delays = [f._backoff(attempt) for _ in range(300)]
        assert all(0.0 <= d <= cap for d in delays)
        assert max(delays) > 0.8 * cap and min(delays) < 0.2 * cap  # spread over [0, cap]


# --- size cap and content type ----------------------------------------------------------------


async def test_huge_streamed_body_stops_past_the_cap(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/big?mb=50"), max_bytes=1 * MB, client=client)
    assert r.status == 200 and r.body is None
    assert r.error == f"too large (>{1 * MB} bytes)"
    assert r.nbytes == 1 * MB + 1  # cut at the first byte past the cap, however it came
    rec = srv.log.for_path("/big")[0]
    await until(lambda: rec.finished is not None, what="the server to see the close")
    assert not rec.completed and rec.bytes_sent < 50 * MB


async def test_compression_bomb_is_capped_after_decompression(
    client: str, srv: FaultServer
) -> None:
    r = await fetch(srv.url("/gzipbomb?mb=20"), max_bytes=1 * MB, client=client)
    assert r.status == 200 and r.body is None
    assert r.error == f"too large (>{1 * MB} bytes)"
    assert r.nbytes == 1 * MB + 1  # cut at the first byte past the cap, however it came


async def test_declared_length_over_the_cap_is_refused_unread(
    client: str, srv: FaultServer
) -> None:
    r = await fetch(srv.url("/big?mb=50&length=1"), max_bytes=1 * MB, client=client)
    assert r.error == f"too large (>{1 * MB} bytes)" and r.body is None
    assert r.nbytes == 50 * MB  # the declared size
    rec = srv.log.for_path("/big")[0]
    await until(lambda: rec.finished is not None, what="the server to see the close")
    assert not rec.completed and rec.bytes_sent < 50 * MB


async def test_body_at_the_cap_is_kept(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/big?mb=1"), max_bytes=1 * MB, client=client)
    assert r.error is None and r.body is not None and len(r.body) == 1 * MB


async def test_links_come_from_the_head_while_the_digest_covers_the_whole_body(
    client: str, srv: FaultServer
) -> None:
    r = await fetch(srv.url("/big?mb=3"), max_bytes=4 * MB, parse_limit=1 * MB, client=client)
    whole = await fetch(srv.url("/big?mb=3"), max_bytes=4 * MB, parse_limit=4 * MB, client=client)
    assert whole.body is not None and len(whole.body) == 3 * MB
    assert (r.error, r.nbytes, r.body) == (None, 3 * MB, whole.body[: 1 * MB])
    assert r.digest == whole.digest == payload_digest(whole.body)


async def test_a_recorded_body_reset_midway_past_the_memory_spool_is_not_archived(
    client: str, srv: FaultServer
) -> None:
    async with Fetcher(replace(FAST, client=client, max_bytes=8 * MB), record=True) as f:
        r = await f.fetch(srv.url(f"/reset?after={3 * MEMORY}"))
    assert (r.status, r.interrupted, r.exchange, r.body, r.digest) == (200, True, None, None, None)
    assert r.error is not None and r.error.startswith("connection reset")
    assert MEMORY < r.nbytes < 3 * MEMORY + 100_000


async def test_non_html_is_not_downloaded(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/pdf?mb=20"), client=client)
    assert (r.status, r.content_type, r.error, r.body) == (200, "application/pdf", "not html", None)
    assert r.nbytes == 20 * MB  # from Content-Length
    rec = srv.log.for_path("/pdf")[0]
    await until(lambda: rec.finished is not None, what="the server to see the close")
    assert not rec.completed and rec.bytes_sent < 20 * MB


async def test_charset_is_reported_even_when_unknown(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/badcharset"), client=client)
    assert r.error is None and r.charset == "x-unknown-garbage"
    assert r.body is not None and b"\xff" in r.body
    base, hrefs = extract_links(r.body, r.url, charset=r.charset)
    assert base == r.url
    assert hrefs[0] == "/one" and len(hrefs) == 3


# --- redirects --------------------------------------------------------------------------------


async def test_redirect_is_returned_not_followed(client: str, srv: FaultServer) -> None:
    r = await fetch(srv.url("/loop/a"), client=client)
    assert (r.status, r.location, r.error, r.body) == (302, "/loop/b", None, None)
    assert srv.log.count("/loop/a") == 1 and srv.log.count("/loop/b") == 0


async def test_get_text_follows_redirects_and_decodes(client: str, srv: FaultServer) -> None:
    async with Fetcher(replace(FAST, client=client)) as f:
        got = await f.get_text(srv.url("/redirect?to=/html%3Flinks%3D2"))
        assert got.status == 200 and got.text is not None and "/html/page/1" in got.text
        assert await f.get_text(srv.url("/loop/a"), max_redirects=3) == TextFetch(
            302, None, "too many redirects"
        )
        assert srv.log.count("/loop/a") + srv.log.count("/loop/b") == 4
        assert await f.get_text(srv.url("/status/404")) == TextFetch(404, None, "http 404")
        got = await f.get_text(srv.url("/big?mb=2"), max_bytes=1000)
        assert got.status == 200 and got.text is not None and len(got.text.encode()) == 1000


async def test_get_text_network_error_has_no_status(client: str, srv: FaultServer) -> None:
    async with Fetcher(replace(FAST, client=client, read_timeout=0.2)) as f:
        assert await f.get_text(srv.url("/hang")) == TextFetch(None, None, "timeout", True)


async def test_get_text_body_timing_out_is_no_answer_not_an_empty_file(
    client: str, srv: FaultServer
) -> None:
    # headers (200) arrive, then the body trickles past the deadline: that is not
    # an empty robots.txt (which would mean "no rules"), it is no answer at all
    async with Fetcher(
        replace(FAST, client=client, read_timeout=0.5, total_timeout=0.6, retries=0)
    ) as f:
        got = await f.get_text(srv.url("/slowbody?every=0.1&n=30"))
    assert (got.status, got.text, got.error, got.retryable) == (None, None, "timeout", True)


async def test_a_trickling_body_is_cut_by_one_deadline_for_every_attempt(
    client: str, srv: FaultServer
) -> None:
    # each byte comes before the read timeout; retries would restart the clock
    settings = replace(FAST, read_timeout=0.5, total_timeout=1.0, retries=2, backoff_base=0.01)
    async with Fetcher(replace(settings, client=client)) as f:
        r = await f.fetch(srv.url("/slowbody?every=0.1&n=100"))
    assert (r.status, r.error, r.retryable) == (200, "timeout", True)
    assert r.elapsed < 1.9  # one deadline of 1 s; before: 3 attempts x 1 s
    assert srv.log.count("/slowbody") == 1


# --- connection limit -------------------------------------------------------------------------


async def test_max_connections_bounds_concurrency(client: str, srv: FaultServer) -> None:
    async with Fetcher(replace(FAST, client=client, max_connections=2)) as f:
        urls = [srv.url(f"/slowbody?every=0.02&n=5&i={i}") for i in range(6)]
        results = await asyncio.gather(*(f.fetch(u) for u in urls))
    assert all(r.error is None for r in results)
    assert srv.log.count("/slowbody") == 6
    assert srv.log.max_active == 2


# --- private address guard --------------------------------------------------------------------


async def test_loopback_literal_is_refused_by_default(client: str, srv: FaultServer) -> None:
    async with Fetcher(FetchSettings(retries=2, client=client)) as f:
        r = await f.fetch(srv.url("/html"))
    assert (r.status, r.error, r.attempts) == (
        None, "refused private address 127.0.0.1 (needs --allow-private)", 0)
    assert srv.log.count() == 0


async def test_name_resolving_to_loopback_is_refused(client: str, srv: FaultServer) -> None:
    port = srv.base.rsplit(":", 1)[1]
    async with Fetcher(FetchSettings(retries=2, client=client)) as f:
        r = await f.fetch(f"http://localhost:{port}/html")
    assert r.status is None
    assert r.error is not None and r.error.startswith("refused private address")
    assert r.attempts == 1
    assert srv.log.count() == 0


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "127.1", "0177.0.0.1"])
async def test_other_spellings_of_a_loopback_address_are_refused_as_it(
    client: str, srv: FaultServer, host: str
) -> None:
    # a browser reads each as 127.0.0.1 (WHATWG URL): so do both clients, before any
    # request or lookup, and with allow_private they reach that address
    port = srv.base.rsplit(":", 1)[1]
    async with Fetcher(FetchSettings(retries=2, client=client)) as f:
        r = await f.fetch(f"http://{host}:{port}/html")
    assert (r.status, r.error, r.attempts) == (
        None, "refused private address 127.0.0.1 (needs --allow-private)", 0)
    r = await fetch(f"http://{host}:{port}/html", client=client)
    assert (r.status, r.error) == (200, None)
    assert srv.log.count("/html") == 1


async def test_an_unknown_name_is_a_dns_error_not_retried(client: str, srv: FaultServer) -> None:
    port = srv.base.rsplit(":", 1)[1]
    hosts = HostMap({})
    async with Fetcher(replace(FAST, client=client, retries=2), resolver=hosts) as f:
        r = await f.fetch(f"http://nowhere.test:{port}/html")
    assert (r.status, r.error, r.retryable, r.attempts) == (None, "dns error", False, 1)
    assert hosts.lookups == ["nowhere.test"] and srv.log.count() == 0


async def test_a_hanging_dns_lookup_is_a_timeout_and_retried(client: str) -> None:
    # a lookup that does not answer is as transient as a server that does not
    hosts = HostMap({"slow.test": "127.0.0.1"}, delay=30.0)
    settings = replace(FAST, client=client, total_timeout=0.5, retries=1)
    async with Fetcher(settings, resolver=hosts) as f:
        r = await f.fetch("http://slow.test:9/html")
    assert (r.status, r.error, r.retryable, r.attempts) == (None, "timeout", True, 1)
    assert r.elapsed < 3.0


async def test_dns_cannot_steer_into_private_network(client: str, srv: FaultServer) -> None:
    port = srv.base.rsplit(":", 1)[1]
    hosts = HostMap({"innocent.test": "127.0.0.1"})
    async with Fetcher(FetchSettings(client=client), resolver=hosts) as f:
        r = await f.fetch(f"http://innocent.test:{port}/html")
    assert r.error == "refused private address 127.0.0.1 (needs --allow-private)"
    assert hosts.lookups == ["innocent.test"] and srv.log.count() == 0
    # The same table with allow_private reaches the server (so the guard made the difference).
    async with Fetcher(
        replace(FAST, client=client, allow_private=True), resolver=HostMap(hosts.table)
    ) as f:
        r = await f.fetch(f"http://innocent.test:{port}/html")
    assert (r.status, r.error) == (200, None)
    assert srv.log.count("/html") == 1


async def test_guarded_resolver_keeps_only_public_answers() -> None:
    table = {"mixed.test": "8.8.8.8", "meta.test": "169.254.169.254", "v6.test": "::1"}
    guard = GuardedResolver(HostMap(table))
    answers = await guard.resolve("mixed.test", 80)
    assert [a["host"] for a in answers] == ["8.8.8.8"]
    for name in ("meta.test", "v6.test"):
        with pytest.raises(PrivateAddressError, match="refused private address"):
            await guard.resolve(name, 80)


async def test_guarded_resolver_with_the_system_resolver_refuses_localhost() -> None:
    guard = GuardedResolver()
    with pytest.raises(PrivateAddressError, match="refused private address"):
        await guard.resolve("localhost", 80)
    await guard.close()


@pytest.mark.parametrize(
    "ip",
    [
        "10.0.0.1", "172.16.5.4", "192.168.1.1", "127.0.0.1", "127.255.0.9", "169.254.169.254",
        "100.64.0.1", "100.127.255.254", "0.0.0.0", "224.0.0.1", "239.255.255.250", "240.0.0.1",
        "255.255.255.255", "192.0.2.1", "198.18.0.1", "::1", "::", "fe80::1", "fe80::1%eth0",
        "fc00::1", "fd12:3456::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.1.2.3",
        "2002:7f00:1::1", "64:ff9b::a00:1", "2001:db8::1", "not-an-ip", "",
    ],
)  # fmt: skip
def test_non_public_addresses_are_refused(ip: str) -> None:
    assert not is_public_address(ip)


@pytest.mark.parametrize(
    "ip", ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8"]
)
def test_public_addresses_are_allowed(ip: str) -> None:
    assert is_public_address(ip)


# --- header parsing ---------------------------------------------------------------------------


def test_parse_content_type() -> None:
    assert parse_content_type('Text/HTML; Charset="ISO-8859-1"') == ("text/html", "iso-8859-1")
    assert parse_content_type("application/xhtml+xml") == ("application/xhtml+xml", None)
    assert parse_content_type("text/html; foo=bar; charset=utf-8") == ("text/html", "utf-8")
    assert parse_content_type("text/html; charset=") == ("text/html", None)
    assert parse_content_type(None) == (None, None)
    assert parse_content_type("") == (None, None)


def test_parse_retry_after() -> None:
    now = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(" 0 ") == 0.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), now) == 0
    for bad in ("-5", "soon", "", "nan", "inf", None):
        assert parse_retry_after(bad, now) is None, bad


# --- sniffing untyped bodies -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "want"),
    [
        (b"<!DOCTYPE html><html>", True),
        (b"\n  <HTML lang=en>", True),
        (b"<p>text", True),
        (b"<!-- c -->", True),
        (b"%PDF-1.7\n", False),
        (b'{"a": 1}', False),
        (b"<htmlx>", False),
        (b"<?xml version='1.0'?><rss>", False),
        (b"", False),
        (b"plain text <html>", False),
    ],
)
def test_untyped_bodies_are_html_only_when_they_start_like_html(head: bytes, want: bool) -> None:
    assert looks_like_html(head) is want
