"""One HTTP hop with timeouts, a size cap, retries and an SSRF guard.

Why one hop: the engine must deduplicate and scope-check every redirect target
before it is fetched, so `Fetcher.fetch` never follows redirects; it returns the
raw Location and lets the engine decide. It returns a ``FetchResult``
(``crawler.net.outcome``) and never raises for what the network does.

Requests carry the configured User-Agent and extra headers; cookies are kept
only with ``cookies`` (one jar for the session, scoped per host by RFC 6265).
A proxy is ``proxy`` or else the environment's ``HTTP_PROXY``/``HTTPS_PROXY``,
chosen per request (``NO_PROXY`` names hosts that go direct). Why not aiohttp's
``trust_env``: it also sends ``~/.netrc`` credentials to the crawled hosts.
Through a proxy the private-address guard still judges the *target*: its name
is resolved here and refused if private, while the proxy itself, which the user
chose, may be on loopback or a private network.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import contextvars
import random
import re
import socket
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import ada_url
import aiohttp
from aiohttp import hdrs
from aiohttp.abc import AbstractResolver
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.resolver import DefaultResolver
from yarl import URL

from crawler.config.ipliteral import ip_literal
from crawler.config.requestopts import check_proxy_url, parse_header_line
from crawler.config.settings import FetchSettings
from crawler.net.body import Body
from crawler.net.exchange import Exchange, exchange_of
from crawler.net.headers import (
    content_length,
    looks_like_html,
    parse_content_type,
    parse_retry_after,
)
from crawler.net.http1 import Pool, Response
from crawler.net.netguard import GuardedResolver, PrivateAddressError, check_literal_host
from crawler.net.outcome import BadResponse, FetchResult, classify_error
from dedup import FileError

__all__ = ["Fetcher", "TextFetch", "check_env_proxies", "decode_text"]

_CHUNK = 64 * 1024
_DISCARD_MAX = 64 * 1024  # read (not close) error bodies this small to keep the connection
_ACCEPT = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.5"
# request headers the HTTP clients write themselves
_CLIENT_HEADERS = frozenset({"host", "accept-encoding", "connection", "content-length",
                             "transfer-encoding", "cookie", "authorization"})


# The address a fetch's connection went to, for WARC-IP-Address: set by
# ``_PeerConnector.connect`` in the fetching task (aiohttp may release a
# small response's connection before the caller sees the response).
_PEER: contextvars.ContextVar[list[str | None] | None] = contextvars.ContextVar(
    "bloomcrawl_peer", default=None)


class _PeerConnector(aiohttp.TCPConnector):
    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        conn = await super().connect(req, traces, timeout)
        holder = _PEER.get()
        if holder is not None and conn.transport is not None:
            addr = conn.transport.get_extra_info("peername")
            holder[0] = str(addr[0]) if addr else None
        return conn


class _Proxy:
    """A proxy to send requests through: its URL (credentials taken out) and headers."""

    __slots__ = ("headers", "url")

    def __init__(self, text: str) -> None:
        url = check_proxy_url(text)
        self.headers: dict[str, str] | None = None
        if url.user is not None:  # aiohttp does not read credentials from a proxy URL
            token = base64.b64encode(f"{url.user}:{url.password or ''}".encode()).decode()
            self.headers = {hdrs.PROXY_AUTHORIZATION: f"Basic {token}"}
        self.url = url.with_user(None)

    @property
    def endpoint(self) -> tuple[str, int | None]:
        return (self.url.raw_host or "").lower(), self.url.port


class _Proxies:
    """Which proxy a request goes through: ``proxy`` (the flag/config) beats the
    environment's; ``NO_PROXY`` sends the hosts it names direct either way. Decided
    once per scheme and authority."""

    def __init__(self, configured: str, env: dict[str, str]) -> None:
        self._env = env
        self._by_scheme: dict[str, _Proxy] = {}
        for scheme in ("http", "https"):
            given = configured or env.get(scheme, "")
            if not given:
                continue
            # HTTP_PROXY=proxy:3128 means http://proxy:3128, as curl reads it
            text = given if "://" in given else "http://" + given
            try:
                self._by_scheme[scheme] = _Proxy(text)
            except ValueError:  # never silently direct: the user meant a proxy
                raise ValueError(f"{scheme.upper()}_PROXY: not a proxy URL "
                                 f"http(s)://HOST:PORT: {given!r}") from None
        self._cache: dict[tuple[str, str], _Proxy | None] = {}

    def __bool__(self) -> bool:
        return bool(self._by_scheme)

    def endpoints(self) -> frozenset[tuple[str, int | None]]:
        return frozenset(p.endpoint for p in self._by_scheme.values())

    def for_url(self, url: URL) -> _Proxy | None:
        key = (url.scheme, url.raw_authority)
        try:
            return self._cache[key]
        except KeyError:
            pass
        proxy = self._by_scheme.get(url.scheme)
        host = (url.raw_host or "").lower()
        if proxy is not None and "no" in self._env and urllib.request.proxy_bypass_environment(
                f"{host}:{url.port}" if url.port else host, self._env):
            proxy = None
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[key] = proxy
        return proxy


def check_env_proxies() -> None:
    """ValueError naming HTTP_PROXY or HTTPS_PROXY when it is not a proxy URL: a crawl
    refuses to start rather than going direct when a proxy was meant."""
    _Proxies("", _env_proxies())


def _proxy_args(proxy: _Proxy | None, url: URL) -> dict[str, object]:
    """aiohttp's keywords for a request through ``proxy`` (none: direct). Credentials
    go with the request itself to an http proxy, with the CONNECT for an https target."""
    if proxy is None:
        return {}
    if url.scheme == "http":
        return {"proxy": proxy.url, "headers": proxy.headers}
    return {"proxy": proxy.url, "proxy_headers": proxy.headers}


def _env_proxies() -> dict[str, str]:
    """HTTP_PROXY, HTTPS_PROXY and NO_PROXY (either case; lowercase wins, as in curl)."""
    env = urllib.request.getproxies_environment()
    return {k: v for k, v in env.items() if k in ("http", "https", "no") and v}


# A host whose last label is a number is an IPv4 address to the WHATWG URL standard
_NUMBER_END = re.compile(r"(?:^|\.)(?:[0-9]+|0[xX][0-9a-fA-F]*)\.?$")
_HEX_END = frozenset("0123456789abcdefABCDEFxX.")  # what such a host can end in


def _request_url(url: str) -> URL | str:
    """A yarl URL that aiohttp sends byte-for-byte, or a refusal reason string.

    Canonical URLs from the WHATWG canonicalizer are already ASCII and
    percent-encoded; re-quoting them (yarl's default) could change the URL we
    deduplicated on.
    """
    try:
        parsed = URL(url, encoded=url.isascii())
        # yarl parses the authority lazily: a port past 65535 raises here
        host = parsed.raw_host
        if parsed.scheme not in ("http", "https") or not host:
            return "invalid url"
        if host[-1] in _HEX_END and ip_literal(host) is None and _NUMBER_END.search(host):
            # an IPv4 address in another spelling (2130706433, 0x7f.1, 127.1) means
            # what a browser makes of it; aiohttp would refuse it, a resolver take it
            parsed = parsed.with_host(ada_url.URL(f"http://{host}/").hostname)
    except (ValueError, TypeError):
        return "invalid url"
    return parsed


@dataclass(frozen=True, slots=True)
class TextFetch:
    """What ``Fetcher.get_text`` came to."""

    status: int | None  # None: no (complete) answer
    text: str | None  # the decoded 2xx body
    error: str | None = None  # why there is no text ("timeout", "refused private address ...")
    retryable: bool = False  # the failure may pass: ask again later
    exchanges: tuple[Exchange, ...] = field(default=())  # each hop, when the fetcher records


class _Hop:
    """What one attempt learned, filled in as the response arrives."""

    __slots__ = (
        "body", "charset", "content_type", "digest", "error", "exchange", "headers",
        "interrupted", "location", "nbytes", "retry", "retry_after", "status",
    )  # fmt: skip

    def __init__(self) -> None:
        self.status: int | None = None
        self.content_type: str | None = None
        self.charset: str | None = None
        self.body: bytes | None = None
        self.digest: str | None = None
        self.nbytes = 0
        self.location: str | None = None
        self.retry_after: float | None = None
        self.error: str | None = None
        self.retry = False
        self.interrupted = False
        self.exchange: Exchange | None = None
        self.headers: Mapping[str, str] | None = None


class _Unretried(aiohttp.ClientConnectionError):
    """A reset or disconnect on its way past aiohttp's hidden re-send (``_sent_once``);
    ``failure`` is what was raised."""

    def __init__(self, failure: BaseException) -> None:
        super().__init__(str(failure))
        self.failure = failure


async def _sent_once(req: aiohttp.ClientRequest,
                     handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
    """A client middleware that makes every request aiohttp sends one that the fetch
    counts: aiohttp re-sends an idempotent request once, unseen, after a reset or a
    disconnect (RFC 9112 9.3.1; no public switch turns that off), but only for a
    ``ClientOSError`` or ``ServerDisconnectedError`` out of the middlewares. Wrapped,
    it is not retried, and ``_failed`` unwraps it. Every attempt then counts against
    the URL's budget ([crawl] max_retries), as with the lean client."""
    try:
        return await handler(req)
    except aiohttp.ClientConnectorError:
        raise  # never re-sent by aiohttp: a connect failure
    except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as e:
        raise _Unretried(e) from e


# What a hop's exchange can raise that is the server's or the network's doing.
_FAILURES = (aiohttp.ClientError, HttpProcessingError, BadResponse, OSError, TimeoutError,
             ValueError)


def _failed(hop: _Hop, e: BaseException) -> None:
    """Record why a hop failed, and drop what it had read: a broken transfer is
    neither parsed nor archived. A file of the crawl's own that failed (a body's
    temporary file: ``FileError``) is no failure of the server's: it is raised."""
    if isinstance(e, FileError):
        raise e
    failure = classify_error(e.failure if isinstance(e, _Unretried) else e)
    hop.error, hop.retry, hop.interrupted = (failure.reason, failure.retryable,
                                              failure.interrupted)
    hop.body = hop.digest = None
    if hop.exchange is not None:
        hop.exchange.payload.close()
        hop.exchange = None


class Fetcher:
    """An aiohttp session configured for crawling: one per worker, reused for all hosts."""

    def __init__(
        self,
        settings: FetchSettings = FetchSettings(),
        *,
        resolver: AbstractResolver | None = None,
        rng: random.Random | None = None,
        record: bool = False,
        record_types: str = "",
        spool_dir: str | None = None,
    ) -> None:
        """`resolver` replaces aiohttp's default DNS resolver (the Fetcher takes
        ownership and closes it); it is still wrapped by the private-address guard
        unless settings.allow_private. `rng` drives the backoff jitter.

        With `record` every answered hop's ``Exchange`` (for the WARC) is kept in
        the result, and 2xx bodies of any type are read (up to the cap) when their
        media type matches the `record_types` regex ("" matches all); a 2xx page
        whose type does not match has no exchange. robots.txt is always kept.

        A body past ``body.MEMORY`` bytes goes to an anonymous temp file in
        `spool_dir` (None: the system's temp directory) while it streams in."""
        self.settings = settings
        self._spool_dir = spool_dir
        self.record = record
        self._record_types = re.compile(record_types) if record_types else None
        self._inner_resolver = resolver
        self._rng = rng or random.Random()
        self._session: aiohttp.ClientSession | None = None
        self._resolver: AbstractResolver | None = None
        self._headers = {hdrs.USER_AGENT: settings.user_agent, hdrs.ACCEPT: _ACCEPT}
        for line in settings.headers:
            name, value = parse_header_line(line)
            self._headers[name] = value
        self._proxies = _Proxies(settings.proxy, _env_proxies())
        self._checked: dict[str, float] = {}  # proxied target names found public, until
        # a first attempt's whole budget (one object, not one a request)
        self._timeout = aiohttp.ClientTimeout(total=settings.total_timeout,
                                              sock_connect=settings.connect_timeout,
                                              sock_read=settings.read_timeout)
        # The lean client takes plain http:// GETs, unless something it does not do
        # is asked for: cookies, or extra headers that name one it writes itself.
        names = [k.lower() for k in self._headers]
        self._fast = (settings.client == "fast" and not settings.cookies
                      and len(set(names)) == len(names)
                      and not set(names) & _CLIENT_HEADERS)
        self._pool: Pool | None = None

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
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
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
                # the proxies the user configured are reachable wherever they are
                resolver = GuardedResolver(resolver, allow=self._proxies.endpoints())
            self._resolver = resolver
            if self._fast:
                self._pool = Pool(resolver, limit=s.max_connections,
                                  dns_ttl=s.dns_cache_ttl,
                                  connect_timeout=s.connect_timeout,
                                  read_timeout=s.read_timeout, headers=self._headers)
            connector = (_PeerConnector if self.record else aiohttp.TCPConnector)(
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
                headers=self._headers,
                # Off by default: a crawl must not accumulate state. unsafe: keep
                # cookies of IP-address hosts too (they are crawl targets like names).
                cookie_jar=aiohttp.CookieJar(unsafe=True) if s.cookies
                else aiohttp.DummyCookieJar(),
                middlewares=(_sent_once,),
            )
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
                                 attempts=most, head=self.settings.parse_limit)

    async def fetch_raw(self, url: str, *, limit: int, attempts: int | None = None
                        ) -> FetchResult:
        """Like ``fetch`` (one hop) for any content type, such as a sitemap: the body
        is read up to ``limit`` bytes and cut there (``nbytes`` > ``limit`` says it
        was), a Content-Encoding undone by aiohttp."""
        most = 1 + self.settings.retries if attempts is None else max(1, attempts)
        return await self._fetch(url, html_only=False, limit=limit, attempts=most)

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
        hops: list[Exchange] = []
        for _ in range(max_redirects + 1):
            r = await self._fetch(url, html_only=False, limit=max_bytes)
            if r.exchange is not None:
                hops.append(r.exchange)
            ex = tuple(hops)
            if r.status is None or r.interrupted:
                return TextFetch(None, None, r.error, r.retryable, ex)
            if 300 <= r.status < 400 and r.location:
                try:
                    url = ada_url.join_url(url, r.location)
                except ValueError:
                    return TextFetch(r.status, None, "bad redirect", exchanges=ex)
                if not url.startswith(("http://", "https://")):
                    return TextFetch(r.status, None, "bad redirect", exchanges=ex)
                continue
            if r.body is None or not 200 <= r.status < 300:
                return TextFetch(r.status, None, r.error, r.retryable, ex)
            return TextFetch(r.status, decode_text(r.body, r.charset), exchanges=ex)
        return TextFetch(r.status, None, "too many redirects", exchanges=tuple(hops))

    async def _fetch(self, url: str, *, html_only: bool, limit: int,
                     attempts: int | None = None, head: int | None = None) -> FetchResult:
        """``head``: the result's ``body`` holds the body's first ``head`` bytes
        (default: all of it, up to ``limit``)."""
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
                                   head=limit if head is None else head,
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
            digest=hop.digest,
            nbytes=hop.nbytes,
            location=hop.location,
            retry_after=hop.retry_after,
            error=hop.error,
            attempts=sent,
            elapsed=loop.time() - start,
            interrupted=hop.interrupted,
            retryable=hop.retry,
            exchange=hop.exchange,
            headers=hop.headers,
        )

    async def _once(self, url: URL, *, html_only: bool, limit: int, head: int,
                    budget: float) -> _Hop:
        hop = _Hop()
        s = self.settings
        timeout = self._timeout
        if budget < s.total_timeout - 0.001:  # a retry, or after a proxy check: what is left
            timeout = aiohttp.ClientTimeout(total=max(budget, 0.001),
                                            sock_connect=s.connect_timeout,
                                            sock_read=s.read_timeout)
        session = self._get_session()
        proxy = self._proxies.for_url(url) if self._proxies else None
        if (proxy is None and self._pool is not None and url.scheme == "http"
                and url.raw_user is None and ":" not in (url.raw_host or ":")):
            return await self._once_fast(self._pool, url, hop, html_only=html_only,
                                         limit=limit, head=head,
                                         budget=min(budget, s.total_timeout))
        if proxy is not None and not s.allow_private:
            try:
                async with asyncio.timeout(s.connect_timeout):
                    await self._check_target(url)
            except PrivateAddressError as e:
                hop.error = str(e)
                return hop
            except TimeoutError:
                hop.error, hop.retry = "timeout", True
                return hop
            except OSError as e:
                hop.error, hop.retry = "dns error", getattr(e, "errno", None) == socket.EAI_AGAIN
                return hop
        started = time.time()
        peer: list[str | None] = [None]
        token = _PEER.set(peer) if self.record else None
        try:
            async with session.get(url, allow_redirects=False, timeout=timeout,
                                   **_proxy_args(proxy, url)) as resp:
                if self.record:
                    hop.exchange = exchange_of(resp, started=started, ip=peer[0],
                                               proxied=proxy is not None)
                await self._read(resp, hop, html_only=html_only, limit=limit, head=head)
        except _FAILURES as e:
            _failed(hop, e)
        finally:
            if token is not None:
                _PEER.reset(token)
        return hop

    async def _once_fast(self, pool: Pool, url: URL, hop: _Hop, *, html_only: bool,
                         limit: int, head: int, budget: float) -> _Hop:
        """``_once`` through the lean client (``crawler.net.http1``): the same outcome."""
        resp: Response | None = None
        started = time.time()
        try:
            resp = await pool.get(url, asyncio.get_running_loop().time() + max(budget, 0.001))
            if self.record:
                hop.exchange = exchange_of(resp, started=started, ip=resp.peer)
            await self._read(resp, hop, html_only=html_only, limit=limit, head=head)
        except _FAILURES as e:
            _failed(hop, e)
        finally:
            if resp is not None:
                resp.release()
        return hop

    async def _check_target(self, url: URL) -> None:
        """Raise PrivateAddressError (or a DNS error) for a proxied target whose name
        resolves to a non-public address: the proxy would connect to it for us. A
        literal IP was checked before; a name found public is trusted for
        ``dns_cache_ttl``, like a direct connection's DNS answer."""
        host = url.raw_host or ""
        if ip_literal(host) is not None:  # refused before the request if not public
            return
        loop = asyncio.get_running_loop()
        if self._checked.get(host, 0.0) > loop.time():
            return
        assert self._resolver is not None
        await self._resolver.resolve(host, url.port or 0, family=socket.AF_UNSPEC)
        if len(self._checked) > 100_000:
            self._checked.clear()
        self._checked[host] = loop.time() + self.settings.dns_cache_ttl

    async def _read(
        self, resp: aiohttp.ClientResponse | Response, hop: _Hop, *, html_only: bool, limit: int,
        head: int,
    ) -> None:
        s = self.settings
        status = hop.status = resp.status
        hop.headers = resp.headers
        hop.content_type, hop.charset = parse_content_type(resp.headers.get(hdrs.CONTENT_TYPE))
        length = content_length(resp.headers.get(hdrs.CONTENT_LENGTH))
        ex = hop.exchange
        if (ex is not None and html_only and 200 <= status < 300
                and self._record_types is not None
                and not self._record_types.search(hop.content_type or "")):
            ex = hop.exchange = None  # the user archives other types only

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
        not_html = html_only and ctype is not None and ctype not in s.html_types
        if not_html and ex is None:
            # Not ours to parse: do not spend bandwidth on it.
            hop.nbytes = length or 0
            hop.error = "not html"
            resp.close()
            return
        if html_only and length is not None and length > limit:
            hop.nbytes = length
            hop.error = f"too large (>{limit} bytes)"
            if ex is not None:
                ex.truncated = "length"
            resp.close()
            return
        # Streamed: an archived body whole (to a temp file past body.MEMORY), else only
        # its first ``head`` bytes; the digest covers every byte either way.
        body = Body(None if ex is not None else head, spool_dir=self._spool_dir)
        try:
            cut = await _stream(resp, body, hop, limit)
        except BaseException:
            body.close()
            raise
        if ex is not None:
            ex.payload = body
            if cut:
                ex.truncated = "length"
        if cut and html_only:
            hop.error = f"too large (>{limit} bytes)"
        elif not_html or (html_only and ctype is None and not looks_like_html(body.head(512))):
            hop.error = "not html"
        else:
            hop.body = body.head(head)
            hop.digest = body.digest()
        if ex is None:
            body.close()


async def _stream(resp: aiohttp.ClientResponse | Response, body: Body, hop: _Hop,
                  limit: int) -> bool:
    """Read ``resp``'s body into ``body`` up to ``limit`` bytes; True: it was cut there
    (the connection dropped instead of draining the rest, however much more comes).

    A cut body has ``nbytes`` = ``limit + 1`` whichever client read it and however
    the bytes arrived: the last read asks for one byte past the limit, no more."""
    read = resp.content.read  # not iter_chunked: one coroutine less a chunk
    while chunk := await read(min(_CHUNK, limit + 1 - hop.nbytes)):
        hop.nbytes += len(chunk)
        if hop.nbytes > limit:
            body.write(chunk[:-1])
            resp.close()
            return True
        body.write(chunk)
    return False


async def _discard(resp: aiohttp.ClientResponse | Response, length: int | None, hop: _Hop) -> None:
    """Skip a body we do not want: read it if tiny (keeps the connection), else close.
    A recorded exchange keeps a tiny body; a closed one is archived truncated."""
    if length is not None and length <= _DISCARD_MAX:
        try:
            data = await resp.read()
            hop.nbytes = len(data)
            if hop.exchange is not None:
                hop.exchange.payload = Body.of(data)
            return
        except (aiohttp.ClientError, OSError, TimeoutError):
            pass
    else:
        hop.nbytes = length or 0
    if hop.exchange is not None and length != 0:
        hop.exchange.truncated = "length"
    resp.close()


def decode_text(body: bytes, charset: str | None) -> str:
    """Decode with the declared charset if Python knows it, else UTF-8 (BOM stripped)."""
    if charset:
        try:
            if codecs.lookup(charset).name != "utf-8":
                return body.decode(charset, "replace")
        except (LookupError, TypeError, ValueError):
            pass  # unknown or not a text encoding ("base64"): fall back
    return body.decode("utf-8-sig", "replace")
