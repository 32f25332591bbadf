"""A fleet worker's side of the crawl loop: forward, receive, and end with the fleet.

A link of a host another worker owns is forwarded to that owner's stream before
the page that found it is marked (a crash in between refetches the page and
forwards it again; the owner's seen-test drops the repeat). Forwarding is
grouped like the commit: links of pages finished while one batch is on the
wire go out together in the next, one ``RedisTransport.forward`` round trip.

The receive task admits what others forward (``admit_received``: with the
next group commit, one batch per depth) and only then acks: an entry leaves the
owner's stream once its URLs are durable in the owner's ledger; an un-acked one
is re-read after a crash.

Locally idle (nothing queued, in flight, being forwarded or being received) is
not the end: the fleet task reports idle and polls ``fleet_done`` (every
worker idle, every stream drained, in one atomic reading), and only then calls
``end``; it also polls for a fleet-wide stop request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Coroutine, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from crawler.config.settings import DistributedSettings
from crawler.wire.protocol import Delivery, RemoteLink
from crawler.wire.recent import RecentKeys
from crawler.wire.transport import RedisTransport

__all__ = ["Relay"]

log = logging.getLogger("crawler.fleet")

# set by a ``fleet`` supervisor (crawler.fleet.supervisor) in its workers' environment
SUPERVISED_ENV = "BLOOMCRAWL_FLEET_SUPERVISOR"
_WAIT_NOTICE = 5.0  # seconds idle here, the fleet not done, before saying so
_WAIT_REPEAT = 60.0

# what a worker publishes for its fleet's progress line, summary and dashboard: the
# figures a single process's dashboard shows (crawler.ui.doc), this worker's
_PUBLISHED = ("outcome", "elapsed", "rate", "fetched", "fetched_with_errors", "failed",
              "errors", "failed_causes", "given_up", "refused", "skipped", "queued",
              "in_flight", "hosts", "session_pages", "fill", "expected_fpr", "estimated_count",
              "capacity", "layers", "shards", "links", "new", "repeats", "rejected",
              "bloom_definitely_new", "bloom_maybe", "confirm_cache_hits", "ledger_queries",
              "false_positives", "forwarded", "received", "redis_calls", "worker_id")


class Crawl(Protocol):
    """What the relay needs of the crawl it serves (``crawler.core.run.engine.Engine``)."""

    @property
    def stopping(self) -> bool: ...
    async def admit_received(self, by_depth: Sequence[tuple[list[tuple[str, str]], int]]
                             ) -> None: ...
    def locally_idle(self) -> bool: ...
    def receiving(self) -> AbstractContextManager[None]: ...
    def end(self) -> None: ...
    def stop(self, reason: str = "stopped") -> None: ...
    def abort(self, exc: BaseException) -> bool: ...
    def message(self, text: str) -> None: ...


class Relay:
    """Links between this worker and the others, and the fleet's end and stop."""

    def __init__(self, transport: RedisTransport, settings: DistributedSettings,
                 crawl: Crawl) -> None:
        self.transport = transport
        self.settings = settings
        self._crawl = crawl
        self._wake = asyncio.Event()
        self._recent = RecentKeys(settings.forward_cache_size)
        self._sending: dict[str, asyncio.Future[None]] = {}  # key -> the batch carrying it
        self._outbox: list[RemoteLink] = []  # the batch being filled
        self._outbox_done: asyncio.Future[None] | None = None
        self._outbox_wake = asyncio.Event()
        self._stop_request: asyncio.Task[None] | None = None
        self.forward_batches = 0
        self.forwarded = 0  # links sent to their owners this run
        self.received = 0  # links received from other workers this run

    def is_local(self, host: str) -> bool:
        return self.transport.is_local(host)

    def wake(self) -> None:
        """Something changed locally: look at idleness again now, not at the next poll."""
        self._wake.set()

    def tasks(self) -> list[asyncio.Task[None]]:
        """The receive, forward and fleet tasks; one that fails aborts the crawl."""
        return [asyncio.create_task(self._guard(self._receive_loop()), name="bloomcrawl-receive"),
                asyncio.create_task(self._guard(self._forward_loop()), name="bloomcrawl-forward"),
                asyncio.create_task(self._guard(self._fleet_loop()), name="bloomcrawl-fleet")]

    # -- forwarding -----------------------------------------------------------------------

    async def forward(self, links: list[RemoteLink]) -> None:
        """Hand a page's remote links to the forwarder; return once Redis holds them all.

        A key sent lately is skipped; a key already in a batch on its way is not
        added again, but that batch is waited for.
        """
        recent = self._recent
        sending = self._sending
        waits: set[asyncio.Future[None]] = set()
        for link in links:
            key = link[1]
            if key in recent:
                continue
            fut = sending.get(key)
            if fut is None:
                if self._outbox_done is None:
                    self._outbox_done = asyncio.get_running_loop().create_future()
                fut = sending[key] = self._outbox_done
                self._outbox.append(link)
            waits.add(fut)
        if not waits:
            return
        self._outbox_wake.set()
        await asyncio.wait(waits)  # not gather: a cancelled page must not cancel a batch
        for fut in waits:
            if fut.cancelled():
                raise asyncio.CancelledError
            if fut.exception() is not None:
                raise fut.exception()  # type: ignore[misc]

    async def _forward_loop(self) -> None:
        sending = self._sending
        while True:
            await self._outbox_wake.wait()
            self._outbox_wake.clear()
            while self._outbox:
                batch, done = self._outbox, self._outbox_done
                self._outbox, self._outbox_done = [], None
                assert done is not None
                try:
                    await self.transport.forward(batch)
                except BaseException as exc:
                    for fut in (done, self._outbox_done):  # waiters fail, not hang
                        if fut is None or fut.done():
                            continue
                        if isinstance(exc, Exception):
                            fut.set_exception(exc)
                            fut.exception()  # retrieved: it may have no waiter left
                        else:
                            fut.cancel()
                    raise
                for link in batch:  # only once Redis holds them
                    self._recent.add(link[1])
                    sending.pop(link[1], None)
                self.forwarded += len(batch)
                self.forward_batches += 1
                done.set_result(None)

    # -- receiving ------------------------------------------------------------------------

    async def _receive_loop(self) -> None:
        block_ms = max(1, round(self.settings.receive_block * 1000))
        while True:
            deliveries = await self.transport.receive(block_ms=block_ms)
            if not deliveries:
                continue
            with self._crawl.receiving():  # not idle until acked; wakes the fleet loop
                await self._take(deliveries)

    async def _take(self, deliveries: list[Delivery]) -> None:
        """Admit forwarded links (one batch per depth), commit, then acknowledge."""
        t = self.transport
        by_depth: dict[int, list[tuple[str, str]]] = {}
        foreign: list[RemoteLink] = []
        n = 0
        for d in deliveries:
            for url, key, host, depth in d.links:
                n += 1
                if t.is_local(host):
                    by_depth.setdefault(depth, []).append((url, key))
                else:  # sent under another fleet size: pass it on, never admit it here
                    foreign.append((url, key, host, depth))
        if foreign:
            await t.forward(foreign)
        # never ack a link that is not durable in this worker's ledger
        await self._crawl.admit_received([(by_depth[d], d) for d in sorted(by_depth)])
        self.received += n
        await t.ack(deliveries)

    # -- the end and the stop -------------------------------------------------------------

    async def _fleet_loop(self) -> None:
        """End the crawl when the whole fleet is done; stop when any worker asks to.

        Reports idle only when locally idle; ``set_idle`` refuses if an ack
        happened since (work arrived), and ``fleet_done`` is one atomic reading
        of every worker's flag and every stream, so a forward in flight (its
        sender is busy until Redis has it) cannot end the crawl early.
        """
        t = self.transport
        poll = self.settings.poll_interval
        loop = asyncio.get_running_loop()
        next_stop_check = 0.0
        waiting_since: float | None = None  # idle here, the fleet not done, since then
        next_notice = 0.0
        while True:
            if loop.time() >= next_stop_check:
                next_stop_check = loop.time() + poll
                if await t.stop_requested():
                    if not self._crawl.stopping:
                        self._crawl.message("bloomcrawl: stop requested by the fleet: "
                                            "stopping — finishing in-flight fetches")
                        self._crawl.stop("stopped by fleet request")
                    return
            crawl = self._crawl
            if crawl.locally_idle() and await t.set_idle(True) and crawl.locally_idle():
                if await t.fleet_done():
                    crawl.end()  # the workers see the end; the crawl is finished
                    t.fleet_finished()  # every forwarded link is committed by its owner
                    return
                waiting_since = loop.time() if waiting_since is None else waiting_since
                if loop.time() - waiting_since >= _WAIT_NOTICE and loop.time() >= next_notice:
                    next_notice = loop.time() + _WAIT_REPEAT
                    await self._say_waiting()
            else:
                waiting_since = None
            self._wake.clear()
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await self._wake.wait()

    async def _say_waiting(self) -> None:
        """Idle here while the fleet is not done: say so, or a lone worker looks hung.
        One a ``fleet`` supervisor runs says only that: the supervisor runs (and
        stops) every worker, so the advice for a worker started by hand is not for it."""
        t = self.transport
        with contextlib.suppress(Exception):
            st = await t.fleet_status()
            text = (f"bloomcrawl: worker {t.worker_id}: nothing left to do here; waiting for "
                    f"the fleet ({st['idle']} of {st['workers']} workers idle, {st['backlog']} "
                    "batches of links not yet taken)")
            if not os.environ.get(SUPERVISED_ENV):
                text += (". Every worker must run for the fleet to finish: 'bloomcrawl resume "
                         "FLEETDIR' resumes them all. Ctrl-C stops this one (resumable).")
            self._crawl.message(text)

    async def _guard(self, loop: Coroutine[Any, Any, None]) -> None:
        """A fleet task that fails (Redis gone for good) stops the crawl with its error."""
        try:
            await loop
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._crawl.abort(exc):
                log.error("fleet worker aborted: %s", exc)

    def request_stop(self) -> None:
        """This worker was told to stop (a signal): every worker of the fleet stops too."""
        self._stop_request = asyncio.get_running_loop().create_task(self._request_stop())

    async def _request_stop(self) -> None:
        try:
            await self.transport.request_stop()
        except Exception as exc:  # the local stop goes on regardless
            log.error("could not ask the fleet to stop: %s", exc)

    async def stop_request_sent(self, timeout: float) -> None:
        """Wait (bounded) until the other workers have heard of this worker's stop."""
        if self._stop_request is not None:
            await asyncio.wait([self._stop_request], timeout=timeout)

    # -- reporting ------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """This worker's fleet figures for the status line and the summary."""
        t = self.transport
        return {"worker_id": t.worker_id, "workers": t.workers, "forwarded": self.forwarded,
                "forward_batches": self.forward_batches, "received": self.received,
                "redis_calls": t.stats["calls"]}

    async def publish(self, status: dict[str, Any]) -> None:
        """This worker's figures for the fleet's combined progress line (best effort)."""
        try:
            await self.transport.publish_stats({k: status[k] for k in _PUBLISHED
                                                if k in status})
        except Exception as exc:
            log.debug("could not publish stats: %s", exc)
