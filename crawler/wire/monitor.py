"""A connection to a fleet that does not join it: its status, its end and its stop.

Every Redis call goes through ``FleetMonitor._call``, which retries a lost
connection with backoff for a bounded time, then raises ``TransportError``
(one line, never a password). ``fleet_done`` is the fleet's termination test:
every worker idle and every stream drained, in one atomic reading.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    ResponseError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

from crawler.wire.protocol import (
    Keys,
)
from crawler.wire.redis_url import password_of, redact
from crawler.wire.scripts import ACK, REGISTER, SET_IDLE, STATUS

log = logging.getLogger("crawler.fleet")

SOCKET_TIMEOUT = 30.0    # seconds; a dead peer that never closes the socket is noticed
MAX_BLOCK_MS = 20_000    # a blocking read must end well within SOCKET_TIMEOUT
OP_TIMEOUT = SOCKET_TIMEOUT + MAX_BLOCK_MS / 1000  # one round trip, a blocking read included
T = TypeVar("T")

TRANSIENT = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)


class TransportError(RuntimeError):
    """Redis is unreachable, refused us, or lost the fleet's data. One line, no password."""


class FleetMismatch(TransportError):
    """This worker does not fit the fleet registered under the crawl id."""



def client(url: str) -> aioredis.Redis:
    # Retries are ours (bounded, logged, redacted), not redis-py's silent ones.
    # No socket_timeout: with one, redis-py sends every command through
    # asyncio.wait_for, which on Python 3.11 swallows a cancellation that
    # races with the send completing (the task then runs on, "cancelled");
    # our callers bound each round trip with asyncio.timeout instead.
    return aioredis.Redis.from_url(
        url, socket_connect_timeout=5.0, socket_timeout=None,
        retry=Retry(NoBackoff(), 0), health_check_interval=0)


def reason(exc: BaseException, password: str | None) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text.replace(password, "***") if password else text


class FleetMonitor:
    """A view of a fleet that does not join it: its status, its progress, and its stop.

    The ``fleet`` command uses one for the combined progress line and Ctrl-C;
    ``RedisTransport`` (a worker) builds on it. Every Redis call goes through
    ``_call``: a lost connection is retried with exponential backoff for up to
    ``retry_for`` seconds, then TransportError.
    """

    def __init__(self, url: str, *, crawl_id: str, workers: int, retry_for: float = 60.0,
                 backoff: tuple[float, float] = (0.05, 2.0)) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, not {workers}")
        self._url = url
        self._password = password_of(url)
        self.where = redact(url)
        self.crawl_id = crawl_id
        self.workers = workers
        self.retry_for = retry_for
        self.backoff = backoff
        self.keys = Keys(crawl_id)
        self._streams = [self.keys.stream(i) for i in range(workers)]
        self._redis: aioredis.Redis | None = None
        self._scripts: dict[str, Any] = {}
        self._stop_base = 0      # stop requests older than our connect do not stop us
        self._broken = False     # check the fleet (``_after_reconnect``) before the next call
        self._recovers = False   # a NOGROUP reply may mean lost data (workers only)
        self.stats: dict[str, int] = {"reconnects": 0, "calls": 0}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.where}, crawl={self.crawl_id}, {self.workers} workers)"

    async def connect(self) -> None:
        """Reach Redis, one attempt (clear TransportError if it is down); check the fleet size."""
        self._open()
        try:
            async with asyncio.timeout(OP_TIMEOUT):
                workers, stop = await self._redis.pipeline(  # type: ignore[union-attr]
                    transaction=False).hget(self.keys.fleet, "workers").get(
                    self.keys.stop).execute()
        except BaseException as exc:
            await self._drop()
            raise self._join_error(exc) from None
        if workers is not None and int(workers) != self.workers:
            await self._drop()
            raise FleetMismatch(f"fleet {self.crawl_id} at {self.where} has {int(workers)} "
                                f"workers, not {self.workers}")
        self._stop_base = int(stop or 0)

    def _open(self) -> None:
        try:
            self._redis = client(self._url)
        except ValueError as exc:
            raise TransportError(f"bad Redis URL {self.where}: "
                                 f"{reason(exc, self._password)}") from None
        for name, src in (("register", REGISTER), ("ack", ACK), ("idle", SET_IDLE),
                          ("status", STATUS)):
            self._scripts[name] = self._redis.register_script(src)

    def _join_error(self, exc: BaseException) -> BaseException:
        why = reason(exc, self._password)
        if isinstance(exc, AuthenticationError):
            return TransportError(f"Redis at {self.where} refused the credentials: {why}")
        if isinstance(exc, AuthorizationError):
            return TransportError(f"Redis at {self.where} denied access: {why}")
        if isinstance(exc, TRANSIENT):
            return TransportError(f"cannot reach Redis at {self.where}: {why}")
        if isinstance(exc, ResponseError):
            return TransportError(f"Redis at {self.where} failed: {why}")
        return exc

    async def _drop(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    async def close(self) -> None:
        """Disconnect. A worker's idle flag stays as it last set it."""
        await self._drop()

    # -- retries -------------------------------------------------------------------

    async def _call(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        if self._redis is None:
            raise TransportError("not connected to Redis (call connect() first)")
        delay, cap = self.backoff
        deadline: float | None = None
        nogroup = 0
        while True:
            try:
                if self._broken:
                    await self._after_reconnect()
                    self._broken = False
                self.stats["calls"] += 1  # one round trip (a pipeline or a script is one)
                # A dead peer that never closes the socket is noticed here (a
                # TimeoutError is an OSError: transient, the connection is dropped).
                async with asyncio.timeout(OP_TIMEOUT):
                    result = await op()
            except (AuthenticationError, AuthorizationError) as exc:
                raise TransportError(f"Redis at {self.where} refused us during {what}: "
                                     f"{reason(exc, self._password)}") from None
            except ResponseError as exc:
                if self._recovers and str(exc).startswith("NOGROUP") and nogroup < 2:
                    nogroup += 1  # its stream or group is gone: Redis lost data?
                    self._broken = True
                    continue
                raise TransportError(f"Redis at {self.where} rejected {what}: "
                                     f"{reason(exc, self._password)}") from None
            except TRANSIENT as exc:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.retry_for
                    log.warning("Redis at %s: connection lost during %s (%s); retrying for "
                                "up to %.0f s", self.where, what,
                                reason(exc, self._password), self.retry_for)
                if now >= deadline:
                    raise TransportError(
                        f"Redis at {self.where} unreachable for {self.retry_for:.0f} s "
                        f"during {what}: {reason(exc, self._password)}") from None
                self._broken = True
                await asyncio.sleep(min(delay, max(0.0, deadline - now)))
                delay = min(delay * 2, cap)
                continue
            if deadline is not None:
                self.stats["reconnects"] += 1
                log.info("Redis at %s: reconnected, %s resumed", self.where, what)
            return result

    async def _after_reconnect(self) -> None:
        """Hook run on the first successful call after a lost connection."""

    # -- the fleet -------------------------------------------------------------------

    async def fleet_status(self) -> dict[str, int]:
        """One atomic reading: ``registered`` (0 before any worker joined), ``idle``
        workers, stream ``backlog`` (URL batches not yet acked), ``forwarded`` and
        ``acked`` URL counters, and ``done`` (see ``fleet_done``)."""
        k = self.keys
        workers, idle, backlog, forwarded, acked = await self._call(
            "status", lambda: self._scripts["status"](
                keys=[k.fleet, k.idle, k.counters, *self._streams], args=[self.workers]))
        if workers and int(workers) != self.workers:
            raise FleetMismatch(f"fleet {self.crawl_id} at {self.where} now has {int(workers)} "
                                f"workers, not {self.workers}")
        done = bool(workers) and idle == self.workers and backlog == 0 and forwarded == acked
        return {"registered": int(bool(workers)), "workers": self.workers, "idle": int(idle),
                "backlog": int(backlog), "forwarded": int(forwarded), "acked": int(acked),
                "done": int(done)}

    async def fleet_done(self) -> bool:
        """True when the whole fleet has finished: nothing can ever create work again.

        Read in one Lua script, so it is a single instant of Redis state:
        every worker's flag is "idle", every stream is empty, and
        ``forwarded == acked``. Why one such instant is enough (no two-phase
        barrier needed):

        - Work reaches a worker only through its stream (its seeds and its
          resumed frontier are in place before it first reports idle: joining
          marks it busy). An entry stays in the stream until the ack script
          deletes it, and that same script marks the worker busy. So a link
          is always visible either as backlog or as a busy flag — there is
          no instant where it is in neither.
        - A worker sets itself idle only with nothing queued, in flight,
          un-acked or being forwarded, and only if no ack happened since it
          decided (generation check), so a late "idle" cannot hide an ack's
          "busy".
        - A forward completes (XADD acknowledged by Redis) before its sender
          can report idle, so an in-flight forward keeps its sender busy until
          its entries are backlog — which keeps the answer false.

        Hence "all idle and no backlog" at one instant means no worker has
        work and no link is anywhere in between; nothing can create work
        later, so the answer is stable and every worker can stop on it. A
        crashed worker keeps its last flag: busy if it had work, so the fleet
        waits for its resume. The counters check is redundant with the
        backlog check by design: a disagreement means lost state and keeps
        the crawl running rather than ending it early.
        """
        return bool((await self.fleet_status())["done"])

    async def request_stop(self) -> None:
        """Ask every worker of the fleet to stop (each polls ``stop_requested``)."""
        await self._call("stop", lambda: self._redis.incr(self.keys.stop))  # type: ignore[union-attr]

    async def stop_requested(self) -> bool:
        """Was a stop requested since this connected? (A resumed worker ignores older ones.)"""
        got = await self._call("stop", lambda: self._redis.get(self.keys.stop))  # type: ignore[union-attr]
        return int(got or 0) > self._stop_base

    async def clear_stats(self) -> None:
        """Forget every worker's published figures: a resumed fleet's supervisor starts
        with none, so nothing of the previous run passes for this one's."""
        await self._call("stats", lambda: self._redis.delete(self.keys.stats))  # type: ignore[union-attr]

    async def fleet_stats(self) -> dict[int, dict[str, Any]]:
        """Every worker's last ``publish_stats``, by worker id."""
        got = await self._call("stats", lambda: self._redis.hgetall(self.keys.stats))  # type: ignore[union-attr]
        return {int(k): json.loads(v) for k, v in got.items()}

