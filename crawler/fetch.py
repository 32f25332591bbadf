"""One HTTP hop with timeouts, a size cap, retries and an SSRF guard.

Why one hop: the engine must deduplicate and scope-check every redirect target
before it is fetched, so `Fetcher.fetch` never follows redirects; it returns the
raw Location and lets the engine decide. It returns a ``FetchResult``
(``crawler.outcome``) and never raises for what the network does.
"""

from __future__ import annotations

import asyncio
import codecs
import random
from dataclasses import dataclass
from types import TracebackType

import ada_url
import aiohttp
from aiohttp import hdrs
from aiohttp.abc import AbstractResolver
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.resolver import DefaultResolver
from yarl import URL

from crawler.headers import (
    content_length,
    looks_like_html,
    parse_content_type,
    parse_retry_after,
)
from crawler.netguard import GuardedResolver, check_literal_host
from crawler.outcome import FetchResult, classify_error

__all__ = ["FetchSettings", "Fetcher", "TextFetch"]

_CHUNK = 64 * 1024
_DISCARD_MAX = 64 * 1024  # read (not close) error bodies this small to keep the connection
_ACCEPT = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.5"


@dataclass(frozen=True, slots=True)
class FetchSettings:
    user_agent: str = "bloomcrawl/0.1 (+https://github.com/bloomcrawl)"
    connect_timeout: float = 10.0
    read_timeout: float = 20.0  # max gap between body chunks / headers
    total_timeout: float = 60.0  # one fetch: every attempt, its body and backoff included
    max_bytes: int = 5 * 1024 * 1024  # body cap; streamed, stop reading past it
    # quick extra attempts within one fetch on connection errors, timeouts and 5xx; a
    # crawl caps them with what is left of the URL's budget ([crawl] max_retries)
    retries: int = 0
    backoff_base: float = 0.5  # exponential backoff base seconds, full jitter
    backoff_max: float = 30.0
    max_retry_after: float = 60.0  # longer Retry-After (429/503) => error "retry-after too long"
    html_types: tuple[str, ...] = ("text/html", "application/xhtml+xml")
    allow_private: bool = False  # refuse private/loopback/link-local/reserved targets unless True
    max_connections: int = 100
    dns_cache_ttl: float = 300.0


def _request_url(url: str) -> URL | str:
    """A yarl URL that aiohttp sends byte-for-byte, or a refusal reason string.

    Canonical URLs from the WHATWG canonicalizer are already ASCII and
    percent-encoded; re-quoting them (yarl's default) could change the URL we
    deduplicated on.
    """
    try:
        parsed = URL(url, encoded=url.isascii())
    except (ValueError, TypeError):
        return "invalid url"
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        return "invalid url"
    return parsed


@dataclass(frozen=True, slots=True)
class TextFetch:
    """What ``Fetcher.get_text`` came to."""

    status: int | None  # None: no (complete) answer
    text: str | None  # the decoded 2xx body
    error: str | None = None  # why there is no text ("timeout", "refused private address ...")
    retryable: bool = False  # the failure may pass: ask again later


class _Hop:
    """What one attempt learned, filled in as the response arrives."""

    __slots__ = (
        "body", "charset", "content_type", "error", "interrupted", "location", "nbytes",
        "retry", "retry_after", "status",
    )  # fmt: skip

    def __init__(self) -> None:
        self.status: int | None = None
        self.content_type: str | None = None
        self.charset: str | None = None
        self.body: bytes | None = None
        self.nbytes = 0
        self.location: str | None = None
        self.retry_after: float | None = None
        self.error: str | None = None
        self.retry = False
        self.interrupted = False


class Fetcher:
    """An aiohttp session configured for crawling: one per worker, reused for all hosts."""

    def __init__(
        self,
        settings: FetchSettings = FetchSettings(),
        *,
        resolver: AbstractResolver | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """`resolver` replaces aiohttp's default DNS resolver (the Fetcher takes
        ownership and closes it); it is still wrapped by the private-address guard
        unless settings.allow_private. `rng` drives the backoff jitter."""
        self.settings = settings
        self._inner_resolver = resolver
        self._rng = rng or random.Random()
        self._session: aiohttp.ClientSession | None = None
        self._resolver: AbstractResolver | None = None

    async def __aenter__(self) -> Fetcher:
        self._get_session()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        session, self._session = self._session, None
        resolver, self._resolver = self._resolver, None
        if session is not None:
            await session.close()
        if resolver is not None:  # the connector closes only resolvers it created itself
            await resolver.close()

    def _get_session(self) -> aiohttp.ClientSession:
        # Created lazily: aiohttp sessions and resolvers need a running loop.
        if self._session is None:
            s = self.settings
            resolver: AbstractResolver = self._inner_resolver or DefaultResolver()
            if not s.allow_private:
                resolver = GuardedResolver(resolver)
            self._resolver = resolver
            connector = aiohttp.TCPConnector(
                limit=s.max_connections,
                ttl_dns_cache=int(s.dns_cache_ttl),
                resolver=resolver,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(
                    total=s.total_timeout,
                    sock_connect=s.connect_timeout,
                    sock_read=s.read_timeout,
                ),
                headers={hdrs.USER_AGENT: s.user_agent, hdrs.ACCEPT: _ACCEPT},
                cookie_jar=aiohttp.DummyCookieJar(),  # crawls must not accumulate state
            )
            # aiohttp re-sends an idempotent request once, unseen, after a reset or a
            # disconnect (its own TestClient turns that off the same way; there is
            # no public switch). Off here: every request a server sees is one that
            # ``attempts`` counts against the URL's budget ([crawl] max_retries).
            if hasattr(self._session, "_retry_connection"):
                self._session._retry_connection = False
        return self._session

    def _backoff(self, attempt: int) -> float:
        s = self.settings
        return self._rng.uniform(0.0, min(s.backoff_max, s.backoff_base * 2 ** (attempt - 1)))

    async def fetch(self, url: str, *, attempts: int | None = None) -> FetchResult:
        """Fetch one URL (one hop). Never raises for network or HTTP problems.

        ``attempts``: the most requests this fetch may send (default ``1 + retries``).
        A crawl passes what is left of the URL's retry budget, so quick retries
        here and later rounds over the crawl never add up past it.
        """
        most = 1 + self.settings.retries if attempts is None else max(1, attempts)
        return await self._fetch(url, html_only=True, limit=self.settings.max_bytes,
                                 attempts=most)

    async def get_text(
        self, url: str, max_bytes: int = 512 * 1024, *, max_redirects: int = 5
    ) -> TextFetch:
        """The decoded body of a small text resource such as robots.txt.

        Unlike `fetch` it follows up to `max_redirects` redirects itself (each hop
        still guarded) and truncates at max_bytes instead of failing. The text is
        None when there was no complete 2xx body; a transfer that broke after the
        status line (a body timing out) is reported like one that never answered,
        so that a caller never reads a half-received file as "no rules".
        """
        for _ in range(max_redirects + 1):
            r = await self._fetch(url, html_only=False, limit=max_bytes)
            if r.status is None or r.interrupted:
                return TextFetch(None, None, r.error, r.retryable)
            if 300 <= r.status < 400 and r.location:
                try:
                    url = ada_url.join_url(url, r.location)
                except ValueError:
                    return TextFetch(r.status, None, "bad redirect")
                if not url.startswith(("http://", "https://")):
                    return TextFetch(r.status, None, "bad redirect")
                continue
            if r.body is None or not 200 <= r.status < 300:
                return TextFetch(r.status, None, r.error, r.retryable)
            return TextFetch(r.status, _decode_text(r.body, r.charset))
        return TextFetch(r.status, None, "too many redirects")

    async def _fetch(self, url: str, *, html_only: bool, limit: int,
                     attempts: int | None = None) -> FetchResult:
        s = self.settings
        loop = asyncio.get_running_loop()
        start = loop.time()
        target = _request_url(url)
        refusal = target if isinstance(target, str) else None
        if refusal is None and not s.allow_private:
            refusal = check_literal_host(target.raw_host or "")
        if refusal is not None:
            return FetchResult(
                url, None, None, None, None, 0, None, None, refusal, 0, loop.time() - start
            )
        # One deadline for the whole fetch: a body trickling in just under the
        # read timeout must not hold a slot for (1 + retries) x total_timeout.
        deadline = start + s.total_timeout
        most = 1 + s.retries if attempts is None else attempts
        sent = 0
        while True:
            sent += 1
            hop = await self._once(target, html_only=html_only, limit=limit,
                                   budget=deadline - loop.time())
            if not hop.retry or sent >= most:
                break
            delay = hop.retry_after if hop.retry_after is not None else self._backoff(sent)
            if loop.time() + delay >= deadline:
                break  # no time left for another attempt: the crawl retries it later
            await asyncio.sleep(delay)
        return FetchResult(
            url=url,
            status=hop.status,
            content_type=hop.content_type,
            charset=hop.charset,
            body=hop.body,
            nbytes=hop.nbytes,
            location=hop.location,
            retry_after=hop.retry_after,
            error=hop.error,
            attempts=sent,
            elapsed=loop.time() - start,
            interrupted=hop.interrupted,
            retryable=hop.retry,
        )

    async def _once(self, url: URL, *, html_only: bool, limit: int, budget: float) -> _Hop:
        hop = _Hop()
        s = self.settings
        timeout = aiohttp.ClientTimeout(total=max(budget, 0.001), sock_connect=s.connect_timeout,
                                        sock_read=s.read_timeout)
        try:
            async with self._get_session().get(url, allow_redirects=False,
                                               timeout=timeout) as resp:
                await self._read(resp, hop, html_only=html_only, limit=limit)
        except (aiohttp.ClientError, HttpProcessingError, OSError, TimeoutError, ValueError) as e:
            failure = classify_error(e)
            hop.error, hop.retry, hop.interrupted = (failure.reason, failure.retryable,
                                                      failure.interrupted)
            hop.body = None
        return hop

    async def _read(
        self, resp: aiohttp.ClientResponse, hop: _Hop, *, html_only: bool, limit: int
    ) -> None:
        s = self.settings
        status = hop.status = resp.status
        hop.content_type, hop.charset = parse_content_type(resp.headers.get(hdrs.CONTENT_TYPE))
        length = content_length(resp.headers.get(hdrs.CONTENT_LENGTH))

        if status == 429 or status == 503:
            hop.retry_after = parse_retry_after(resp.headers.get(hdrs.RETRY_AFTER))
            if hop.retry_after is not None and hop.retry_after > s.max_retry_after:
                hop.error = "retry-after too long"
            else:
                hop.error, hop.retry = f"http {status}", True
            await _discard(resp, length, hop)
            return
        if 300 <= status < 400:
            hop.location = resp.headers.get(hdrs.LOCATION)
            if hop.location is None and status != 304:
                hop.error = "redirect without location"
            await _discard(resp, length, hop)
            return
        if status >= 400:
            hop.error = f"http {status}"
            hop.retry = status >= 500 and status != 501
            await _discard(resp, length, hop)
            return

        ctype = hop.content_type
        if html_only and ctype is not None and ctype not in s.html_types:
            # Not ours to parse: do not spend bandwidth on it.
            hop.nbytes = length or 0
            hop.error = "not html"
            resp.close()
            return
        if html_only and length is not None and length > limit:
            hop.nbytes = length
            hop.error = f"too large (>{limit} bytes)"
            resp.close()
            return
        buf = bytearray()
        async for chunk in resp.content.iter_chunked(_CHUNK):
            buf += chunk
            hop.nbytes = len(buf)
            if len(buf) > limit:
                resp.close()  # drop the connection instead of draining the rest
                if html_only:
                    hop.error = f"too large (>{limit} bytes)"
                    return
                del buf[limit:]
                break
        if html_only and ctype is None and not looks_like_html(bytes(buf[:512])):
            hop.error = "not html"
            return
        hop.body = bytes(buf)


async def _discard(resp: aiohttp.ClientResponse, length: int | None, hop: _Hop) -> None:
    """Skip a body we do not want: read it if tiny (keeps the connection), else close."""
    if length is not None and length <= _DISCARD_MAX:
        try:
            hop.nbytes = len(await resp.read())
            return
        except (aiohttp.ClientError, OSError, TimeoutError):
            pass
    else:
        hop.nbytes = length or 0
    resp.close()


def _decode_text(body: bytes, charset: str | None) -> str:
    """Decode with the declared charset if Python knows it, else UTF-8 (BOM stripped)."""
    if charset:
        try:
            if codecs.lookup(charset).name != "utf-8":
                return body.decode(charset, "replace")
        except (LookupError, TypeError, ValueError):
            pass  # unknown or not a text encoding ("base64"): fall back
    return body.decode("utf-8-sig", "replace")
