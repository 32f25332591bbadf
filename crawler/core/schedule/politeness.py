"""Per-host politeness budget: how many fetches at once, and when the next may start.

Why a separate object: the frontier decides *which* URL goes next; this decides
*when a host may be asked again*, from four sources that all compose into one
"ready at" time per host — the configured minimum delay, the host's robots.txt
Crawl-delay (capped), a Retry-After the host sent with a 429/503, and the
number of fetches already in flight to it. Pure bookkeeping over explicit
``now`` values (no clock, no asyncio), so it is tested without sleeping.

A host is a URL authority, ``host[:port]`` as the ledger stores it.
"""

from __future__ import annotations

__all__ = ["Politeness"]


class _Budget:
    __slots__ = ("active", "blocked_until", "crawl_delay", "last_sent", "last_start",
                 "next_start", "prev_next")

    def __init__(self) -> None:
        self.active = 0
        self.last_start: float | None = None
        self.last_sent: float | None = None
        self.next_start = 0.0  # earliest start allowed by the delay
        self.prev_next = 0.0  # next_start before the last start (to undo a no-request take)
        self.blocked_until = 0.0  # Retry-After
        self.crawl_delay = 0.0


class Politeness:
    """Concurrency and spacing per host.

    ``delay`` is the minimum time between the *starts* of two fetches from one
    host (Scrapy's DOWNLOAD_DELAY semantics); with ``per_host`` > 1 several
    fetches may overlap when responses take longer than the delay.
    """

    def __init__(self, *, per_host: int = 2, delay: float = 0.0,
                 max_crawl_delay: float = 30.0, max_backoff: float = 60.0) -> None:
        if per_host < 1:
            raise ValueError(f"per_host must be >= 1, not {per_host!r}")
        self.per_host = per_host
        self.delay = delay
        self.max_crawl_delay = max_crawl_delay
        self.max_backoff = max_backoff
        self._hosts: dict[str, _Budget] = {}

    def _get(self, host: str) -> _Budget:
        b = self._hosts.get(host)
        if b is None:
            b = self._hosts[host] = _Budget()
        return b

    def ready_at(self, host: str) -> float:
        """Earliest time a new fetch from ``host`` may start (concurrency aside)."""
        b = self._hosts.get(host)
        if b is None:
            return 0.0
        return max(b.next_start, b.blocked_until)

    def held_until(self, host: str) -> float:
        """Until when ``host`` is held back by a Retry-After or as seeming down (``hold``),
        the spacing of ``delay`` aside: 0.0 when it is not."""
        b = self._hosts.get(host)
        return 0.0 if b is None else b.blocked_until

    def has_slot(self, host: str) -> bool:
        b = self._hosts.get(host)
        return b is None or b.active < self.per_host

    def available(self, host: str, now: float) -> bool:
        """A fetch from ``host`` may start at ``now``."""
        return self.has_slot(host) and self.ready_at(host) <= now

    def active(self, host: str) -> int:
        b = self._hosts.get(host)
        return 0 if b is None else b.active

    def delay_for(self, host: str) -> float:
        b = self._hosts.get(host)
        return self.delay if b is None else max(self.delay, b.crawl_delay)

    def start(self, host: str, now: float) -> None:
        """A fetch from ``host`` starts now: take a slot and push the next start out."""
        b = self._get(host)
        b.active += 1
        b.prev_next = b.next_start
        b.last_start = now
        b.next_start = now + max(self.delay, b.crawl_delay)

    def reserve_send(self, host: str, now: float) -> float:
        """A started fetch is about to send its request: seconds it must wait first.

        Spacing is also enforced between actual sends, because a fetch may send
        later than it started (it waited for robots.txt, which may have brought a
        Crawl-delay that fetches started along with it did not know about).
        """
        b = self._get(host)
        spacing = max(self.delay, b.crawl_delay)
        at = now if b.last_sent is None else max(now, b.last_sent + spacing)
        b.last_sent = b.last_start = at
        b.next_start = max(b.next_start, at + spacing)
        return at - now

    def release(self, host: str, now: float, *, retry_after: float | None = None,
                requested: bool = True) -> None:
        """A fetch from ``host`` ended.

        ``retry_after``: the host asked us (429/503) to wait this long; every
        fetch from it is held back until then (capped at ``max_backoff``).
        ``requested=False``: no request was sent (e.g. robots.txt disallowed the
        URL), so the spacing taken at ``start`` is given back.
        """
        b = self._get(host)
        if b.active > 0:
            b.active -= 1
        if not requested:
            b.next_start = min(b.next_start, max(b.prev_next, now))
        if retry_after is not None and retry_after > 0:
            b.blocked_until = max(b.blocked_until, now + min(retry_after, self.max_backoff))

    def hold(self, host: str, until: float) -> None:
        """Start nothing from ``host`` before ``until`` (it seems down: retried later)."""
        b = self._get(host)
        b.blocked_until = max(b.blocked_until, until)

    def set_crawl_delay(self, host: str, seconds: float | None) -> None:
        """robots.txt Crawl-delay for ``host`` (None: none), capped."""
        if seconds is None and host not in self._hosts:
            return
        b = self._get(host)
        new = 0.0 if seconds is None else min(max(0.0, seconds), self.max_crawl_delay)
        if new > b.crawl_delay and b.last_start is not None:
            # the spacing after the last start was computed without it
            b.next_start = max(b.next_start, b.last_start + new)
        b.crawl_delay = new

    def forget_idle(self, host: str, now: float) -> None:
        """Drop the bookkeeping of a host that has nothing in flight and no wait pending."""
        b = self._hosts.get(host)
        if b is not None and b.active == 0 and max(b.next_start, b.blocked_until) <= now \
                and b.crawl_delay == 0.0:
            del self._hosts[host]

    def prune(self, now: float) -> int:
        """Forget every host with nothing in flight, no wait pending and no Crawl-delay.

        A Crawl-delay is kept: it is learnt only when a fetch of the host has
        already started, too late to space the fetches started along with it.
        """
        idle = [h for h, b in self._hosts.items() if b.active == 0 and b.crawl_delay == 0.0
                and max(b.next_start, b.blocked_until) <= now]
        for h in idle:
            del self._hosts[h]
        return len(idle)

    def __len__(self) -> int:
        return len(self._hosts)
