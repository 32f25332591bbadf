"""robots.txt rules per origin, fetched once and cached (parsed by protego).

Why a shared in-flight fetch: a frontier often releases many URLs of a fresh
host at once; without it each would download robots.txt itself. Failure policy
follows Google's documented convention (and RFC 9309): a 4xx robots.txt means
"no rules", a 5xx/429, a timeout (also one in the middle of the body) or an
unreachable server means "assume everything is disallowed" — but only for
`error_ttl`, after which it is fetched again, and if an earlier copy of the
rules is cached it keeps being used meanwhile. ``check`` tells such a
"disallowed for now" (``unavailable``, with the reason) from a real Disallow,
so that the crawl retries the URL later instead of skipping it for good.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from protego import Protego
from yarl import URL

from crawler.net.fetch import Fetcher

__all__ = ["RobotsAnswer", "RobotsCache", "origin_of", "robots_token"]

_COMPATIBLE = re.compile(r"\(compatible;\s*([^/;\s)]+)", re.IGNORECASE)


def robots_token(user_agent: str) -> str:
    """The product token robots.txt groups name for ``user_agent`` (RFC 9309 2.2.1):
    ``AcmeBot/1.2 (+https://...)`` -> ``AcmeBot``, and for the browser-compatible
    form ``Mozilla/5.0 (compatible; AcmeBot/1.2; +https://...)`` the crawler's own
    token ``AcmeBot``, as Googlebot's is read, not ``Mozilla``."""
    ua = user_agent.strip()
    if not ua:
        return "*"
    m = _COMPATIBLE.search(ua)
    if m is not None and ua.lower().startswith("mozilla/"):
        return m.group(1)
    return ua.split("/", 1)[0].split()[0]


@dataclass(frozen=True, slots=True)
class _Rules:
    parser: Protego | None  # None: a blanket rule, see allow_all
    allow_all: bool
    expires: float
    fetched_ok: bool  # a real answer (2xx/4xx), reusable when a refetch fails
    error: str | None = None  # why there are no rules (robots.txt unavailable)
    retryable: bool = False  # the error may pass (a timeout, a 5xx): ask again later
    delay: float | None = None  # Crawl-delay for our agent, capped (read once per fetch)


@dataclass(frozen=True, slots=True)
class RobotsAnswer:
    """May a URL be fetched; if not only because robots.txt could not be had, why."""

    allowed: bool
    unavailable: str | None = None  # set: disallowed for now, why robots.txt had no answer
    retryable: bool = False  # ``unavailable`` may pass: retry the URL later


_ALLOWED = RobotsAnswer(True)
_DISALLOWED = RobotsAnswer(False)


def origin_of(url: str) -> str | None:
    """ "scheme://host:port" (explicit port, even when default) or None for non-http(s) URLs."""
    try:
        u = URL(url, encoded=url.isascii())
    except (ValueError, TypeError):
        return None
    if u.scheme not in ("http", "https") or not u.raw_host:
        return None
    host = u.raw_host.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{u.scheme}://{host}:{u.port}"


class RobotsCache:
    """Answers "may we fetch this URL?" and "how slowly?" for one user agent."""

    def __init__(
        self,
        fetcher: Fetcher,
        user_agent: str,
        *,
        max_crawl_delay: float = 30.0,
        max_entries: int = 10_000,
        ttl: float = 24 * 3600.0,
        error_ttl: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetcher = fetcher
        self.agent = robots_token(user_agent)
        self.max_crawl_delay = max_crawl_delay
        self.max_entries = max_entries
        self.ttl = ttl
        self.error_ttl = error_ttl
        self._clock = clock
        self._rules: OrderedDict[str, _Rules] = OrderedDict()
        self._loading: dict[str, asyncio.Future[_Rules]] = {}  # fetches under way
        self._origins: dict[str, str | None] = {}  # "scheme://authority" -> origin_of
        # given each robots.txt fetch's exchanges (a recording fetcher's, for the WARC)
        self.on_fetch: Callable[[Sequence[Any]], None] | None = None

    def _split(self, url: str) -> tuple[str | None, str]:
        """(origin, the rest of the URL from its path on), the origin parsed once per
        ``scheme://authority``: every URL of a host would otherwise be parsed twice."""
        start = url.find("://")
        end = len(url)
        if start >= 0:
            for sep in "/?#":
                i = url.find(sep, start + 3)
                if 0 <= i < end:
                    end = i
        prefix = url[:end]
        try:
            origin = self._origins[prefix]
        except KeyError:
            if len(self._origins) >= self.max_entries:
                self._origins.clear()
            origin = self._origins[prefix] = origin_of(prefix)
        return origin, url[end:]

    async def allowed(self, url: str) -> bool:
        """True when robots.txt of the URL's origin lets our agent fetch it."""
        return (await self.check(url)).allowed

    async def check(self, url: str) -> RobotsAnswer:
        """Allowed, disallowed, or disallowed for now because robots.txt is unavailable."""
        origin, rest = self._split(url)
        if origin is None:
            return _DISALLOWED
        rules = self._rules.get(origin)
        if rules is None or rules.expires <= self._clock():
            rules = await self._get(origin)
        else:  # cached: no coroutine for it (this runs for every URL)
            self._rules.move_to_end(origin)
        if rules.parser is None:
            if rules.allow_all:
                return _ALLOWED
            if rules.error is not None:
                return RobotsAnswer(False, rules.error, rules.retryable)
            return _DISALLOWED
        if rest.partition("?")[0].partition("#")[0] == "/robots.txt":
            return _ALLOWED
        return _ALLOWED if rules.parser.can_fetch(url, self.agent) else _DISALLOWED

    def crawl_delay(self, url: str) -> float | None:
        """Crawl-delay (or Request-rate as a delay) for our agent, capped; None if unknown."""
        origin = self._split(url)[0]
        rules = self._rules.get(origin) if origin else None
        return rules.delay if rules is not None else None

    def _delay(self, parser: Protego | None) -> float | None:
        """What ``crawl_delay`` answers for these rules: worked out once per fetch of
        robots.txt rather than once per URL."""
        if parser is None:
            return None
        delay = parser.crawl_delay(self.agent)
        if delay is None:
            rate = parser.request_rate(self.agent)
            if rate is not None and rate.requests > 0:
                delay = rate.seconds / rate.requests
        if delay is None or not delay >= 0:
            return None
        return min(float(delay), self.max_crawl_delay)

    def sitemaps(self, url: str) -> list[str]:
        """The ``Sitemap:`` URLs of the robots.txt of ``url``'s origin, as cached
        (empty when it is not, or names none)."""
        origin = self._split(url)[0]
        rules = self._rules.get(origin) if origin else None
        if rules is None or rules.parser is None:
            return []
        return list(rules.parser.sitemaps)

    def __len__(self) -> int:
        return len(self._rules)

    async def _get(self, origin: str) -> _Rules:
        rules = self._rules.get(origin)
        if rules is not None and rules.expires > self._clock():
            self._rules.move_to_end(origin)
            return rules
        loading = self._loading.get(origin)
        if loading is None:
            loading = asyncio.ensure_future(self._load(origin, rules))
            self._loading[origin] = loading
            loading.add_done_callback(lambda _: self._loading.pop(origin, None))
        # shield: one impatient caller being cancelled must not cancel everyone's fetch.
        return await asyncio.shield(loading)

    async def _load(self, origin: str, previous: _Rules | None) -> _Rules:
        got = await self._fetcher.get_text(origin + "/robots.txt")
        if got.exchanges and self.on_fetch is not None:
            self.on_fetch(got.exchanges)
        status, text = got.status, got.text
        now = self._clock()
        if status is None or status >= 500 or status == 429:
            if previous is not None and previous.fetched_ok:
                rules = _Rules(previous.parser, previous.allow_all, now + self.error_ttl, True,
                               delay=previous.delay)
            else:
                reason = got.error or f"http {status}"
                retryable = got.retryable or status is not None
                rules = _Rules(None, False, now + self.error_ttl, False, reason, retryable)
        elif 200 <= status < 300 and text is not None:
            parser = _parse(text)
            rules = _Rules(parser, True, now + self.ttl, True, delay=self._delay(parser))
        else:  # 4xx, or redirects that never ended: no usable rules => no restrictions
            rules = _Rules(None, True, now + self.ttl, True)
        self._rules[origin] = rules
        self._rules.move_to_end(origin)
        while len(self._rules) > self.max_entries:
            self._rules.popitem(last=False)
        return rules


def _parse(text: str) -> Protego | None:
    """Parsed rules, or None (= allow all) for a file protego cannot read."""
    try:
        return Protego.parse(text)
    except Exception:  # garbage robots.txt must not stop a crawl
        return None
