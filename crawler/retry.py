"""Transient failures over a crawl: when a URL is tried again, when it is given up,
and the count of what was given up.

Why over the crawl and not only inside one fetch: a host that is down for a
minute (a restart, a deploy) outlasts a fetch's own quick retries. Such a URL
is not an answer; turning it into a permanent "failed" (or a robots.txt
"skipped") loses it. So it goes back to the frontier for a later round, with
exponential backoff, ``retry_rounds`` times; only then is it given up, and what
was given up is counted where ``bloomcrawl stats`` and the exit status see it.
"""

from __future__ import annotations

from typing import Any

from crawler.frontier import Frontier, Item
from crawler.settings import CrawlSettings

__all__ = ["ERRORS_KEY", "ErrorCounts", "Retries"]

# Ledger meta key: {"failed": N, "fetched_with_errors": M} over every run.
ERRORS_KEY = "page_errors"


class Retries:
    """Retry rounds per URL (by ledger ``seq``), for this run of the crawl.

    Not persisted: a resumed crawl gives every still-queued URL its rounds anew,
    which is what a user resuming after an outage wants.
    """

    def __init__(self, settings: CrawlSettings, frontier: Frontier) -> None:
        self.settings = settings
        self.frontier = frontier
        self._rounds: dict[int, int] = {}
        self.retried = 0  # rounds handed out this run

    def delay(self, seq: int, *, at_least: float = 0.0) -> float | None:
        """Seconds until the next round of ``seq``, or None: its rounds are used up."""
        c = self.settings
        used = self._rounds.get(seq, 0)
        if used >= c.retry_rounds:
            return None
        self._rounds[seq] = used + 1
        self.retried += 1
        return max(at_least, min(c.retry_delay_max, c.retry_delay * 2 ** used))

    def later(self, item: Item, *, hold_host: bool, requested: bool = True,
              at_least: float = 0.0) -> bool:
        """Defer ``item`` to its next round (its host held back with ``hold_host``);
        False when its rounds are used up."""
        delay = self.delay(item.seq, at_least=at_least)
        if delay is None:
            return False
        self.frontier.defer(item, delay, hold_host=hold_host, requested=requested)
        return True

    def forget(self, seq: int) -> None:
        """``seq`` is settled (fetched, or given up)."""
        self._rounds.pop(seq, None)


class ErrorCounts:
    """Pages recorded with an error, kept in the ledger's meta (O(1) for ``stats``).

    ``failed``: given up (no usable answer after every retry round, or refused);
    ``fetched_with_errors``: an answer that is an error (4xx, too large, not HTML).
    Each update joins the ledger's open group-commit transaction, so it becomes
    durable with the marks committed next (after a kill -9 it may be off by the
    pages that were in flight, like the rest of the counters).
    """

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger
        self.counts: dict[str, int] = {"failed": 0, "fetched_with_errors": 0}
        self.counts.update(ledger.meta_get(ERRORS_KEY) or {})

    def count(self, error: str | None, *, failed: bool) -> None:
        if error is None:
            return
        kind = "failed" if failed else "fetched_with_errors"
        self.counts[kind] += 1
        self._ledger.meta_set(ERRORS_KEY, self.counts)
