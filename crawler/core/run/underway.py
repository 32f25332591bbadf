"""When is a crawl over? One object counts what could still queue a URL.

A URL is queued by a page's links (admitted at the page's group commit), by a
sitemap a page led to, or, in a fleet, by links another worker forwarded. So
nothing more can come once

- the frontier has nothing to hand out, in flight or deferred for a retry
  (``Frontier.finished``),
- no page is being processed: taken from the frontier and its group commit not
  yet returned (which covers its links, routed but not yet admitted),
- no fleet delivery is being received: taken from Redis and not yet admitted
  and acknowledged.

``UnderWay.idle`` is that test, the crawler's ``queue.join()``: a single process
ends the crawl when it holds; a fleet worker reports itself idle to the fleet,
which ends when every worker is (``crawler.wire.relay``). ``on_change`` is
called whenever the answer may have turned (the frontier ran dry, a page or a
delivery finished), so the end is seen at once, not at a poll.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from crawler.core.schedule.frontier import Frontier

__all__ = ["UnderWay"]


class UnderWay:
    """Pages and fleet deliveries under way, beside the frontier: ``idle()``."""

    def __init__(self, frontier: Frontier, on_change: Callable[[], None] | None = None) -> None:
        self.frontier = frontier
        self.pages = 0  # taken from the frontier, their commit not returned yet
        self.deliveries = 0  # fleet deliveries taken from Redis, not acked yet
        self.on_change: Callable[[], None] = on_change or (lambda: None)
        self._page = _Page(self)

    def idle(self) -> bool:
        """Nothing to fetch and nothing under way that could queue more."""
        return not self.pages and not self.deliveries and self.frontier.finished()

    def page(self) -> _Page:
        """One page, from ``frontier.get()`` to the return of its commit (a plain
        context manager: entered once a page, a generator's costs ~1 us more)."""
        return self._page

    @contextmanager
    def delivery(self) -> Iterator[None]:
        """One fleet delivery, from its read to its acknowledgement."""
        self.deliveries += 1
        try:
            yield
        finally:
            self.deliveries -= 1
            self.on_change()


class _Page:
    """``UnderWay.page()``: counts a page under way while entered (one shared
    instance: the count lives in ``UnderWay``)."""

    __slots__ = ("_under_way",)

    def __init__(self, under_way: UnderWay) -> None:
        self._under_way = under_way

    def __enter__(self) -> None:
        self._under_way.pages += 1

    def __exit__(self, *exc: object) -> None:
        under_way = self._under_way
        under_way.pages -= 1
        under_way.on_change()
