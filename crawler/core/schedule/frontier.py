"""The frontier: which URL to fetch next, per host, in bounded memory.

Why per-host queues and a ready-time heap: politeness makes each host a
separate, rate-limited lane. One FIFO for everything would make every worker
wait behind the slowest host; here ``get()`` hands out the oldest URL of any
host that is *ready now* (delay elapsed, no Retry-After pending, a concurrency
slot free), and sleeps until the earliest ready time only when none is.

Why paging: the ledger's QUEUED rows are the durable frontier, so memory only
needs a window of it. Each host's in-memory deque holds a prefix (by ledger
``seq``) of that host's not-yet-taken QUEUED rows; when the memory budget is
full a host is marked *spilled* and later URLs stay in the ledger only, to be
paged in (``CrawlState.queued(host=..., after_seq=...)``) when its deque drains.
Rows taken but not yet marked in the ledger (in flight, or awaiting the
engine's batched commit) are remembered by ``seq`` so paging never hands them
out twice.

Workers wait on futures handed out in FIFO order, so a new URL or a freed slot
wakes exactly one worker, not all of them.

Why ``defer``: a transient failure (the host refused the connection, timed out,
answered 5xx, its robots.txt was unavailable) is not an answer. The URL stays
QUEUED in the ledger and comes back after a delay, optionally with its whole
host held back; meanwhile the frontier is not *finished*, so the crawl waits
for it instead of ending with the URL given up.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol

from crawler.core.schedule.politeness import Politeness
from crawler.core.state.crawlstate import CrawlState

__all__ = ["Frontier", "QueuedUrl"]


class QueuedUrl(Protocol):
    """A queued URL, what the frontier schedules: ``dedup.NewUrl`` (just admitted) and
    ``dedup.QueuedRow`` (paged in from the ledger) both are one."""

    @property
    def seq(self) -> int: ...
    @property
    def url(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def depth(self) -> int: ...


class _Host:
    __slots__ = ("in_heap", "last_seq", "name", "queue", "spilled")

    def __init__(self, name: str, *, spilled: bool = False) -> None:
        self.name = name
        self.queue: deque[QueuedUrl] = deque()
        self.last_seq = 0  # highest seq ever put in memory for this host
        self.spilled = spilled  # the ledger may hold QUEUED rows past last_seq
        self.in_heap = False

    def has_work(self) -> bool:
        return bool(self.queue) or self.spilled


class Frontier:
    """Per-host queues, a heap of (ready time, host), paging from the ledger.

    ``state`` is where the durable frontier is paged in from (its ``queued`` and
    ``queued_hosts``).
    ``max_take``: stop handing out URLs after this many were taken and counted
    (``done(counted=False)`` gives one back); None means no limit.
    """

    def __init__(self, state: CrawlState, politeness: Politeness, *, memory: int = 20_000,
                 page_size: int = 500, max_take: int | None = None,
                 on_idle: Callable[[], None] | None = None) -> None:
        self._state = state
        self.politeness = politeness
        self.memory = max(1, memory)
        self.page_size = max(1, page_size)
        self.max_take = max_take
        self.taken = 0
        self.in_flight = 0
        self.in_memory = 0
        self._hosts: dict[str, _Host] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._tick = itertools.count()
        self._busy: set[int] = set()  # seqs handed out and not yet settled in the ledger
        self._waiters: deque[asyncio.Future[QueuedUrl | None]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._closed = False
        self._deferred: dict[int, asyncio.TimerHandle] = {}  # seq -> its comeback
        self._loop: asyncio.AbstractEventLoop | None = None
        # Called when nothing is left to hand out and nothing is in flight. The
        # default ends the crawl; a fleet replaces it with a fleet-wide check.
        self.on_idle: Callable[[], None] = on_idle or self.close

    # -- filling -------------------------------------------------------------------

    def load(self) -> int:
        """Register every host with QUEUED rows in the ledger (start or resume)."""
        hosts = self._state.queued_hosts()
        for name in hosts:
            h = self._hosts.get(name)
            if h is None:
                h = self._hosts[name] = _Host(name, spilled=True)
            else:
                h.spilled = True
            self._schedule(h)
        self._dispatch()
        return len(hosts)

    def add(self, new: Iterable[QueuedUrl]) -> None:
        """New URLs, already recorded QUEUED in the ledger, in ascending seq order."""
        hosts = self._hosts
        for queued in new:
            h = hosts.get(queued.host)
            if h is None:
                h = hosts[queued.host] = _Host(queued.host)
            if queued.seq <= h.last_seq:
                # paged in already: the commit that recorded it came before this call
                # and a page-in read it from the ledger meanwhile (a second copy would
                # be handed out twice)
                continue
            if h.spilled or self.in_memory >= self.memory:
                h.spilled = True  # keep the deque a prefix: later rows are paged in
            else:
                h.queue.append(queued)
                h.last_seq = queued.seq
                self.in_memory += 1
            if not h.in_heap:
                self._schedule(h)
        self._dispatch()

    # -- taking ----------------------------------------------------------------------

    async def get(self) -> QueuedUrl | None:
        """The next URL to fetch, waiting until one is ready; None when the crawl is over.

        The caller owns a slot of the URL's host until ``done(queued)``.
        """
        if self._closed:
            return None
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[QueuedUrl | None] = self._loop.create_future()
        self._waiters.append(fut)
        self._dispatch()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.result() is not None:
                self._give_back(fut.result())  # handed out just as we were cancelled
            raise

    def done(self, queued: QueuedUrl, *, retry_after: float | None = None, requested: bool = True,
             counted: bool = True) -> None:
        """Release the host slot taken by ``queued``.

        ``requested=False``: nothing was sent to the host (politeness spacing is
        given back). ``counted=False``: it does not count against ``max_take``.
        The URL stays *busy* until ``settled`` (its ledger row is marked).
        """
        self.in_flight -= 1
        if not counted:
            self.taken -= 1
        now = self._now()
        self.politeness.release(queued.host, now, retry_after=retry_after, requested=requested)
        h = self._hosts.get(queued.host)
        if h is not None:
            if h.has_work():
                if not h.in_heap:
                    self._schedule(h)
            elif self.politeness.active(h.name) == 0:
                del self._hosts[h.name]
                self.politeness.forget_idle(h.name, now)
        self._dispatch()

    def defer(self, queued: QueuedUrl, delay: float, *, hold_host: bool,
              requested: bool = True) -> None:
        """Release ``queued``'s slot and hand it out again in ``delay`` seconds.

        It does not count against ``max_take``; with ``hold_host`` nothing else
        of its host starts before then either (the host seems down).
        """
        now = self._now()
        loop = self._loop or asyncio.get_running_loop()
        # registered first: done() must not find the frontier finished meanwhile
        self._deferred[queued.seq] = loop.call_at(now + delay, self._come_back, queued)
        if hold_host:
            self.politeness.hold(queued.host, now + delay)
        self.done(queued, requested=requested, counted=False)

    def push_back(self, queued: QueuedUrl) -> None:
        """Release ``queued``'s slot (nothing sent, not counted) and hand it out again
        after what its host has queued in memory: a URL that may soon be known a
        duplicate (``crawler.core.schedule.learning``) waits for the rest."""
        self.in_flight -= 1
        self.taken -= 1
        self.politeness.release(queued.host, self._now(), requested=False)
        self._requeue(queued, front=False)

    def _come_back(self, queued: QueuedUrl) -> None:
        self._deferred.pop(queued.seq, None)
        self._requeue(queued)

    @property
    def deferred(self) -> int:
        """URLs waiting to be retried after a transient failure."""
        return len(self._deferred)

    def settled(self, seqs: Iterable[int]) -> None:
        """These rows are no longer QUEUED in the ledger (the engine marked them)."""
        self._busy.difference_update(seqs)

    def close(self) -> None:
        """Stop handing out URLs: every waiting and future ``get()`` returns None."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for handle in self._deferred.values():  # they stay QUEUED in the ledger
            handle.cancel()
        self._deferred.clear()
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)

    # -- state -------------------------------------------------------------------------

    def finished(self) -> bool:
        """Nothing left to hand out, nothing in flight or deferred. Pages done but not
        yet committed may still add URLs: ``crawler.core.run.underway`` counts them."""
        if self.in_flight or self._deferred:
            return False
        if self.max_take is not None and self.taken >= self.max_take:
            return True
        # With nothing in flight every host that has work is in the heap (only a
        # host at its concurrency limit is left out, and done() puts it back).
        return not self._heap

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def hosts(self) -> int:
        """Hosts with URLs waiting or in flight."""
        return len(self._hosts)

    def __len__(self) -> int:
        """URLs held in memory (the ledger may hold more)."""
        return self.in_memory

    def top_hosts(self, n: int) -> list[tuple[str, int]]:
        """The ``n`` hosts with the most URLs held in memory, ``(host, URLs)`` (a host
        paged out to the ledger has more there): the dashboard's top hosts, read-only."""
        return heapq.nlargest(n, ((name, len(h.queue)) for name, h in self._hosts.items()
                                  if h.queue), key=lambda x: x[1])

    # -- internals ---------------------------------------------------------------------

    def _now(self) -> float:
        loop = self._loop
        if loop is None:
            try:
                loop = self._loop = asyncio.get_running_loop()
            except RuntimeError:
                return 0.0
        return loop.time()

    def _schedule(self, h: _Host) -> None:
        if h.in_heap or not self.politeness.has_slot(h.name):
            return  # done() reschedules it when a slot frees up
        h.in_heap = True
        heapq.heappush(self._heap, (self.politeness.ready_at(h.name), next(self._tick), h.name))

    def _give_back(self, queued: QueuedUrl) -> None:
        self.in_flight -= 1
        self.taken -= 1
        self.politeness.release(queued.host, self._now(), requested=False)
        self._requeue(queued)

    def _requeue(self, queued: QueuedUrl, *, front: bool = True) -> None:
        """``queued`` goes back to its host's queue (the front, or behind what is there),
        to be handed out again."""
        self._busy.discard(queued.seq)
        h = self._hosts.get(queued.host)
        if h is None:
            h = self._hosts[queued.host] = _Host(queued.host)
        if front:
            h.queue.appendleft(queued)
        else:
            h.queue.append(queued)
        self.in_memory += 1
        self._schedule(h)
        self._dispatch()

    def _pop_queued(self, h: _Host) -> QueuedUrl | None:
        if not h.queue and h.spilled:
            self._page_in(h)
        if not h.queue:
            return None
        self.in_memory -= 1
        return h.queue.popleft()

    def _page_in(self, h: _Host) -> None:
        busy = self._busy
        # a full memory still pages one row, so a drained host keeps going
        want = max(min(self.page_size, self.memory - self.in_memory), 1)
        while h.spilled and not h.queue:
            rows = self._state.queued(want, after_seq=h.last_seq, host=h.name)
            if len(rows) < want:
                h.spilled = False
            if rows:
                h.last_seq = max(h.last_seq, rows[-1].seq)
            fresh = [r for r in rows if r.seq not in busy]
            h.queue.extend(fresh)
            self.in_memory += len(fresh)

    def _dispatch(self) -> None:
        """Hand ready URLs to waiting workers; arm a timer for the next ready time."""
        if self._closed:
            return
        waiters = self._waiters
        heap = self._heap
        pol = self.politeness
        now = self._now()
        while waiters and heap and heap[0][0] <= now:
            if self.max_take is not None and self.taken >= self.max_take:
                break
            while waiters and waiters[0].done():  # cancelled waiters
                waiters.popleft()
            if not waiters:
                break
            _, _, name = heapq.heappop(heap)
            h = self._hosts.get(name)
            if h is None:
                continue
            h.in_heap = False
            if not pol.has_slot(name):
                continue
            ready = pol.ready_at(name)
            if ready > now:  # a crawl-delay or Retry-After arrived meanwhile
                self._schedule(h)
                continue
            queued = self._pop_queued(h)
            if queued is None:
                if pol.active(name) == 0:
                    del self._hosts[name]
                    pol.forget_idle(name, now)
                continue
            pol.start(name, now)
            self.in_flight += 1
            self.taken += 1
            self._busy.add(queued.seq)
            if h.has_work():
                self._schedule(h)
            waiters.popleft().set_result(queued)
        if self.finished():
            self.on_idle()
            if self._closed:
                return
        while waiters and waiters[0].done():
            waiters.popleft()
        if waiters and heap and (self.max_take is None or self.taken < self.max_take):
            self._arm(heap[0][0])

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            if self._timer_at <= when:
                return
            self._timer.cancel()
        loop = self._loop or asyncio.get_running_loop()
        self._timer_at = when
        self._timer = loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()
