"""Links between workers over Redis Streams: at-least-once, owner-deduplicated.

Each host has one owner (``crawler.owner``). A worker sends the links it finds
for other owners to their streams, in batches, and reads its own stream through
a consumer group. The owner's URL-seen test turns at-least-once delivery into
exactly-once crawling, so every step below may repeat, but none may lose.

Keys (``{crawl_id}`` is a Redis Cluster hash tag, so a fleet's keys share a slot
and the Lua scripts below may touch them all)::

    bloomcrawl:{ID}:fleet      hash: workers, geometry (JSON), protocol, created
    bloomcrawl:{ID}:in:I       stream of worker I (group "owner", consumer "worker-I")
    bloomcrawl:{ID}:idle       hash: I -> "1" idle / "0" busy
    bloomcrawl:{ID}:gen        hash: I -> generation, bumped by every ack of worker I
    bloomcrawl:{ID}:counters   hash: forwarded, acked (URLs)
    bloomcrawl:{ID}:stop       integer, incremented by every stop request
    bloomcrawl:{ID}:stats      hash: I -> JSON progress of worker I
    bloomcrawl:{ID}:dead       stream of undecodable entries (kept, never dropped)

A stream entry is ``{"d": msgpack([[url, key, host, depth], ...]), "n": count,
"w": sender}``. Never pickle: a stream is shared input, and unpickling it would
run whatever a peer (or anyone who can write to Redis) put there.

Life of a link: ``forward`` appends it (XADD, counted in ``forwarded`` in the
same MULTI). ``receive`` delivers it (XREADGROUP; it joins the PEL). The engine
commits it to its ledger and then calls ``ack``, a script that XACKs, *deletes*
the entry (XDEL), counts it in ``acked`` and marks the worker busy, atomically.
So an entry is in its stream exactly until its URLs are in the owner's ledger:
a crash before the ack leaves it in the PEL, and the restarted worker re-reads
its PEL (XREADGROUP from id 0) — or, if it comes back under another consumer
name, claims it with XAUTOCLAIM once idle long enough.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import msgpack
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

from crawler.owner import owner_of
from dedup.geometry import first_difference

log = logging.getLogger("crawler.transport")

PROTOCOL = "msgpack-1"
SOCKET_TIMEOUT = 30.0    # seconds; a dead peer that never closes the socket is noticed
MAX_BLOCK_MS = 20_000    # a blocking read must end well within SOCKET_TIMEOUT
OP_TIMEOUT = SOCKET_TIMEOUT + MAX_BLOCK_MS / 1000  # one round trip, a blocking read included
GROUP = "owner"
Item = tuple[str, str, str, int]  # (url, key, host, depth)
T = TypeVar("T")

_PASSWORD_PARAM = re.compile(r"(?i)([?&]password=)[^&#]*")
_TRANSIENT = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)


class TransportError(RuntimeError):
    """Redis is unreachable, refused us, or lost the fleet's data. One line, no password."""


class FleetMismatch(TransportError):
    """This worker does not fit the fleet registered under the crawl id."""


def redact(url: str) -> str:
    """``url`` with any password (in the userinfo or a ``password=`` query) replaced by ***."""
    scheme, sep, rest = url.partition("://")
    if sep:
        end = len(rest)
        for c in "/?#":
            pos = rest.find(c)
            if pos != -1:
                end = min(end, pos)
        authority, tail = rest[:end], rest[end:]
        if "@" in authority:
            userinfo, _, hostport = authority.rpartition("@")
            user, colon, _ = userinfo.partition(":")
            # redis://secret@host is a bare password to redis-py: hide it too.
            authority = f"{user}:***@{hostport}" if colon else f"***@{hostport}"
        url = f"{scheme}://{authority}{tail}"
    return _PASSWORD_PARAM.sub(r"\1***", url)


def has_password(url: str) -> bool:
    """Does ``url`` carry a password (userinfo or ``password=``)? Such a URL is never stored."""
    return _password_of(url) is not None


def _password_of(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    secrets = [v for k, v in parse_qsl(parts.query) if k.lower() == "password"]
    if parts.password:
        secrets.append(parts.password)
    elif parts.username and "@" in parts.netloc:
        secrets.append(parts.username)
    return secrets[0] if secrets else None


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Delivery:
    """One stream entry handed to the owner: ack it once its URLs are in the ledger."""

    id: str
    items: list[Item] = field(default_factory=list)
    sender: int = -1


# -- server-side scripts: each runs atomically ------------------------------------

_REGISTER = """
-- KEYS: fleet, idle, gen, stop, stream   ARGV: workers, geometry, protocol, created, id, group
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'workers', ARGV[1], 'geometry', ARGV[2],
             'protocol', ARGV[3], 'created', ARGV[4])
end
local got = redis.call('HMGET', KEYS[1], 'workers', 'geometry', 'protocol')
local gen = 0
if got[1] == ARGV[1] and got[2] == ARGV[2] and got[3] == ARGV[3] then
  redis.call('HSET', KEYS[2], ARGV[5], '0')
  gen = redis.call('HINCRBY', KEYS[3], ARGV[5], 1)
  -- from id 0, not $: links forwarded before this worker first joined are its too
  redis.pcall('XGROUP', 'CREATE', KEYS[5], ARGV[6], '0', 'MKSTREAM')
end
return {got[1], got[2], got[3], redis.call('GET', KEYS[4]) or '0', gen}
"""

_ACK = """
-- KEYS: stream, counters, idle, gen   ARGV: group, worker id, entry ids...
local acked = 0
for i = 3, #ARGV do
  local entry = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if redis.call('XACK', KEYS[1], ARGV[1], ARGV[i]) == 1 then
    if entry[1] then
      local f = entry[1][2]
      for j = 1, #f, 2 do
        if f[j] == 'n' then acked = acked + tonumber(f[j + 1]) end
      end
    end
    redis.call('XDEL', KEYS[1], ARGV[i])
  end
end
if acked > 0 then redis.call('HINCRBY', KEYS[2], 'acked', acked) end
redis.call('HSET', KEYS[3], ARGV[2], '0')
return {acked, redis.call('HINCRBY', KEYS[4], ARGV[2], 1)}
"""

_SET_IDLE = """
-- KEYS: idle, gen   ARGV: worker id, generation the caller saw
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], '1')
  return 1
end
return 0
"""

_STATUS = """
-- KEYS: fleet, idle, counters, streams...   ARGV: workers
local w = tonumber(ARGV[1])
local idle = 0
for i = 0, w - 1 do
  if redis.call('HGET', KEYS[2], tostring(i)) == '1' then idle = idle + 1 end
end
local backlog = 0
for j = 4, #KEYS do backlog = backlog + redis.call('XLEN', KEYS[j]) end
local c = redis.call('HMGET', KEYS[3], 'forwarded', 'acked')
return {redis.call('HGET', KEYS[1], 'workers') or '', idle, backlog,
        tonumber(c[1] or '0'), tonumber(c[2] or '0')}
"""


class _Keys:
    def __init__(self, crawl_id: str) -> None:
        if not crawl_id or any(c in crawl_id for c in "{}\r\n "):
            raise ValueError(f"crawl id must be non-empty without braces or spaces: {crawl_id!r}")
        p = f"bloomcrawl:{{{crawl_id}}}:"
        self.fleet, self.idle, self.gen = p + "fleet", p + "idle", p + "gen"
        self.counters, self.stop, self.stats, self.dead = (
            p + "counters", p + "stop", p + "stats", p + "dead")
        self._in = p + "in:"

    def stream(self, worker: int) -> str:
        return f"{self._in}{worker}"


def _client(url: str) -> aioredis.Redis:
    # Retries are ours (bounded, logged, redacted), not redis-py's silent ones.
    # No socket_timeout: with one, redis-py sends every command through
    # asyncio.wait_for, which on Python 3.11 swallows a cancellation that
    # races with the send completing (the task then runs on, "cancelled");
    # our callers bound each round trip with asyncio.timeout instead.
    return aioredis.Redis.from_url(
        url, socket_connect_timeout=5.0, socket_timeout=None,
        retry=Retry(NoBackoff(), 0), health_check_interval=0)


def _reason(exc: BaseException, password: str | None) -> str:
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
        self._password = _password_of(url)
        self.where = redact(url)
        self.crawl_id = crawl_id
        self.workers = workers
        self.retry_for = retry_for
        self.backoff = backoff
        self.keys = _Keys(crawl_id)
        self._streams = [self.keys.stream(i) for i in range(workers)]
        self._redis: aioredis.Redis | None = None
        self._scripts: dict[str, Any] = {}
        self._stop_base = 0      # stop requests older than our connect do not stop us
        self._broken = False
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
            self._redis = _client(self._url)
        except ValueError as exc:
            raise TransportError(f"bad Redis URL {self.where}: "
                                 f"{_reason(exc, self._password)}") from None
        for name, src in (("register", _REGISTER), ("ack", _ACK), ("idle", _SET_IDLE),
                          ("status", _STATUS)):
            self._scripts[name] = self._redis.register_script(src)

    def _join_error(self, exc: BaseException) -> BaseException:
        why = _reason(exc, self._password)
        if isinstance(exc, AuthenticationError):
            return TransportError(f"Redis at {self.where} refused the credentials: {why}")
        if isinstance(exc, AuthorizationError):
            return TransportError(f"Redis at {self.where} denied access: {why}")
        if isinstance(exc, _TRANSIENT):
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
                                     f"{_reason(exc, self._password)}") from None
            except ResponseError as exc:
                raise TransportError(f"Redis at {self.where} rejected {what}: "
                                     f"{_reason(exc, self._password)}") from None
            except _TRANSIENT as exc:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.retry_for
                    log.warning("Redis at %s: connection lost during %s (%s); retrying for "
                                "up to %.0f s", self.where, what,
                                _reason(exc, self._password), self.retry_for)
                if now >= deadline:
                    raise TransportError(
                        f"Redis at {self.where} unreachable for {self.retry_for:.0f} s "
                        f"during {what}: {_reason(exc, self._password)}") from None
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

    async def fleet_stats(self) -> dict[int, dict[str, Any]]:
        """Every worker's last ``publish_stats``, by worker id."""
        got = await self._call("stats", lambda: self._redis.hgetall(self.keys.stats))  # type: ignore[union-attr]
        return {int(k): json.loads(v) for k, v in got.items()}


class RedisTransport(FleetMonitor):
    """One worker's end of the fleet: forward links, receive and ack its own, report idle.

    After a reconnect the fleet's keys are checked (a Redis that came back
    empty lost forwarded links: that is an error, not a silent loss) and the
    worker's own PEL is re-read, since a reply lost on the wire may have
    delivered entries nobody saw.
    """

    def __init__(self, url: str, *, crawl_id: str, workers: int, worker_id: int,
                 geometry: dict[str, Any], batch: int = 500, consumer: str | None = None,
                 read_count: int = 64, claim_idle_ms: int = 60_000, retry_for: float = 60.0,
                 backoff: tuple[float, float] = (0.05, 2.0)) -> None:
        super().__init__(url, crawl_id=crawl_id, workers=workers, retry_for=retry_for,
                         backoff=backoff)
        if not 0 <= worker_id < workers:
            raise ValueError(f"worker id must be in 0..{workers - 1}, not {worker_id}")
        if batch < 1:
            raise ValueError(f"batch must be >= 1, not {batch}")
        self.worker_id = worker_id
        self.geometry = json.loads(_canonical_json(geometry))
        self.batch = batch
        self.consumer = consumer or f"worker-{worker_id}"
        self.read_count = read_count
        self.claim_idle_ms = claim_idle_ms
        self.stream = self.keys.stream(worker_id)
        self._gen = 0            # last ack generation this worker saw (see set_idle)
        self._pel_done = False   # own pending entries re-read since (re)connect?
        self._pel_cursor = "0"
        self._claim_cursor = "0-0"
        self._next_claim = 0.0
        self.stats.update({"forwarded": 0, "forward_calls": 0, "received": 0, "acked": 0,
                           "redelivered": 0, "dead": 0})

    def __repr__(self) -> str:
        return (f"RedisTransport({self.where}, crawl={self.crawl_id}, "
                f"worker {self.worker_id}/{self.workers})")

    async def connect(self) -> None:
        """Reach Redis (one attempt: a fleet must not start against a dead Redis) and join.

        The first worker records the fleet's size and filter geometry; every
        later one must match them exactly, because owners are ``hash mod W``
        and the fleet's seen-set is the OR of same-geometry filters. Joining
        marks this worker busy and creates its stream and consumer group.
        """
        self._open()
        k = self.keys
        try:
            async with asyncio.timeout(OP_TIMEOUT):
                got = await self._scripts["register"](
                    keys=[k.fleet, k.idle, k.gen, k.stop, self.stream],
                    args=[self.workers, _canonical_json(self.geometry), PROTOCOL,
                          f"{time.time():.3f}", self.worker_id, GROUP])
        except BaseException as exc:
            await self._drop()
            raise self._join_error(exc) from None
        workers, geometry, protocol, stop, gen = got
        try:
            self._check_fleet(int(workers), json.loads(geometry), protocol.decode())
        except FleetMismatch:
            await self._drop()
            raise
        self._stop_base = int(stop)
        self._gen = int(gen)
        log.info("joined fleet %s at %s as worker %d of %d", self.crawl_id, self.where,
                 self.worker_id, self.workers)

    def _check_fleet(self, workers: int, geometry: dict[str, Any], protocol: str) -> None:
        who = f"fleet {self.crawl_id} at {self.where}"
        if protocol != PROTOCOL:
            raise FleetMismatch(f"{who} speaks {protocol}, this worker {PROTOCOL}")
        if workers != self.workers:
            raise FleetMismatch(f"{who} has {workers} workers; this worker was started with "
                                f"--workers {self.workers} (resize with `bloomcrawl resize`)")
        diff = first_difference(self.geometry, geometry)
        if diff is not None:
            raise FleetMismatch(
                f"{who}: geometry field '{diff}' differs: the fleet has "
                f"{geometry.get(diff)!r}, this worker {self.geometry.get(diff)!r}")

    async def _after_reconnect(self) -> None:
        assert self._redis is not None
        pipe = self._redis.pipeline(transaction=False)
        pipe.hget(self.keys.fleet, "workers")
        pipe.exists(self.stream)
        workers, stream_exists = await pipe.execute()
        if workers is None or not stream_exists:
            raise TransportError(
                f"Redis at {self.where} came back without fleet {self.crawl_id}'s data "
                "(restarted without persistence?): forwarded links may be lost; "
                "enable appendonly on Redis and restart the fleet with resume")
        if int(workers) != self.workers:
            raise FleetMismatch(f"fleet {self.crawl_id} at {self.where} now has {int(workers)} "
                                f"workers, not {self.workers}")
        self._pel_done, self._pel_cursor = False, "0"

    # -- sending ---------------------------------------------------------------------

    def owner(self, host: str) -> int:
        return owner_of(host, self.workers)

    def is_local(self, host: str) -> bool:
        return owner_of(host, self.workers) == self.worker_id

    async def forward(self, items: Sequence[Item]) -> int:
        """Send ``(url, key, host, depth)`` items to their owners: one round trip in all.

        Items are grouped by owner, cut into entries of at most ``batch``, and
        written with the ``forwarded`` counter in one MULTI/EXEC pipeline, so
        the counter and the streams always agree. Items this worker owns are a
        caller bug (they belong in its own seen-test) and raise ValueError.
        A retry after a lost reply may append an entry twice; the owner's
        seen-test drops the repeat. Returns the number of items sent.
        """
        by_owner: dict[int, list[Item]] = {}
        for item in items:
            o = owner_of(item[2], self.workers)
            if o == self.worker_id:
                raise ValueError(f"forward() got a URL this worker owns: {item[0]}")
            by_owner.setdefault(o, []).append(item)
        if not by_owner:
            return 0
        entries: list[tuple[str, dict[str, Any]]] = []
        for o in sorted(by_owner):
            group = by_owner[o]
            for i in range(0, len(group), self.batch):
                chunk = group[i:i + self.batch]
                entries.append((self.keys.stream(o), {
                    "d": msgpack.packb([[u, k, h, int(d)] for u, k, h, d in chunk]),
                    "n": len(chunk), "w": self.worker_id}))
        total = sum(len(g) for g in by_owner.values())

        async def op() -> list[Any]:
            assert self._redis is not None
            pipe = self._redis.pipeline(transaction=True)
            for stream, fields in entries:
                pipe.xadd(stream, fields)
            pipe.hincrby(self.keys.counters, "forwarded", total)
            return await pipe.execute()

        await self._call("forward", op)
        self.stats["forwarded"] += total
        self.stats["forward_calls"] += 1
        return total

    # -- receiving -------------------------------------------------------------------

    async def receive(self, block_ms: int = 1000) -> list[Delivery]:
        """Entries for this worker, oldest duty first.

        1. After (re)connecting, this consumer's own PEL (XREADGROUP from id 0):
           delivered before a crash or a lost reply, never acked.
        2. Every ``claim_idle_ms``, XAUTOCLAIM of entries pending longer than
           that under any consumer name (a worker restarted under a new name,
           or a consumer that vanished): at-least-once, never stuck.
        3. New entries (XREADGROUP ``>``), blocking up to ``block_ms``
           (0 = do not block; at most ``MAX_BLOCK_MS``, under the socket timeout).
        """
        if not self._pel_done:
            got = await self._call("receive", lambda: self._read(self._pel_cursor, 0))
            if got:
                self._pel_cursor = got[-1][0].decode()
                self.stats["redelivered"] += len(got)
                return await self._deliveries(got)
            self._pel_done = True
        if time.monotonic() >= self._next_claim:
            claimed = await self._call("claim", self._claim)
            if claimed:
                self.stats["redelivered"] += len(claimed)
                return await self._deliveries(claimed)
        block_ms = min(block_ms, MAX_BLOCK_MS)
        got = await self._call("receive", lambda: self._read(">", block_ms))
        return await self._deliveries(got)

    async def _read(self, start: str, block_ms: int) -> list[tuple[bytes, Any]]:
        assert self._redis is not None
        res = await self._redis.xreadgroup(
            GROUP, self.consumer, {self.stream: start}, count=self.read_count,
            block=block_ms if block_ms > 0 else None)
        return res[0][1] if res else []  # [[stream, [(id, fields), ...]]]

    async def _claim(self) -> list[tuple[bytes, Any]]:
        assert self._redis is not None
        cursor, entries, *_deleted = await self._redis.xautoclaim(
            self.stream, GROUP, self.consumer, self.claim_idle_ms,
            start_id=self._claim_cursor, count=self.read_count)
        cursor = cursor.decode() if isinstance(cursor, bytes) else str(cursor)
        if cursor == "0-0":
            self._next_claim = time.monotonic() + self.claim_idle_ms / 1000
        self._claim_cursor = cursor
        return [e for e in entries if e is not None]

    async def _deliveries(self, entries: list[tuple[bytes, Any]]) -> list[Delivery]:
        out: list[Delivery] = []
        bad: list[tuple[str, dict[Any, Any] | None]] = []
        for raw_id, fields in entries:
            entry_id = raw_id.decode()
            if not fields:  # deleted while pending: nothing left to process
                bad.append((entry_id, None))
                continue
            try:
                out.append(Delivery(entry_id, _decode(fields[b"d"]), int(fields.get(b"w", -1))))
            except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
                log.error("worker %d: undecodable stream entry %s moved to %s: %s",
                          self.worker_id, entry_id, self.keys.dead, exc)
                bad.append((entry_id, fields))
        if bad:
            await self._bury(bad)
        self.stats["received"] += sum(len(d.items) for d in out)
        return out

    async def _bury(self, bad: list[tuple[str, dict[Any, Any] | None]]) -> None:
        """Keep undecodable entries in the dead-letter stream, then ack them out of the way."""
        async def op() -> None:
            assert self._redis is not None
            pipe = self._redis.pipeline(transaction=True)
            for entry_id, fields in bad:
                if fields:
                    pipe.xadd(self.keys.dead, {**fields, b"from": self.stream, b"id": entry_id})
            await pipe.execute()
        if any(fields for _, fields in bad):
            await self._call("dead-letter", op)
        self.stats["dead"] += sum(1 for _, f in bad if f)
        await self._ack_ids([entry_id for entry_id, _ in bad])

    async def ack(self, deliveries: Iterable[Delivery]) -> int:
        """Acknowledge entries whose URLs are committed to this worker's ledger.

        One script, one round trip: XACK + XDEL each entry, add its count to
        ``acked``, mark this worker busy and bump its generation. Acking twice
        (after a redelivery) counts once. Returns the URLs newly acknowledged.
        """
        return await self._ack_ids([d.id for d in deliveries])

    async def _ack_ids(self, ids: list[str]) -> int:
        if not ids:
            return 0
        k = self.keys
        acked, gen = await self._call("ack", lambda: self._scripts["ack"](
            keys=[self.stream, k.counters, k.idle, k.gen],
            args=[GROUP, self.worker_id, *ids]))
        self._gen = max(self._gen, int(gen))
        self.stats["acked"] += int(acked)
        return int(acked)

    # -- the end of the crawl --------------------------------------------------------

    async def set_idle(self, idle: bool) -> bool:
        """Tell the fleet whether this worker has work.

        Call ``set_idle(True)`` only when the worker has nothing queued, nothing
        in flight, no delivery un-acked and no forward unfinished. The flag is
        set only if no ack happened since the last one this worker saw (the
        generation check): a stale "idle" that reaches Redis after an ack on
        another connection must not overwrite the "busy" that ack wrote.
        Returns whether the flag now says what was asked.
        """
        k = self.keys
        if not idle:
            await self._call("set_idle", lambda: self._redis.hset(  # type: ignore[union-attr]
                k.idle, str(self.worker_id), "0"))
            return True
        gen = self._gen
        done = await self._call("set_idle", lambda: self._scripts["idle"](
            keys=[k.idle, k.gen], args=[self.worker_id, gen]))
        return bool(done)

    async def fleet_status(self) -> dict[str, int]:
        status = await super().fleet_status()
        if not status["registered"]:
            raise TransportError(f"Redis at {self.where} no longer has fleet {self.crawl_id} "
                                 "(flushed or restarted without persistence?)")
        return status

    async def publish_stats(self, stats: dict[str, Any]) -> None:
        """Store this worker's progress (JSON) for the fleet's combined progress line."""
        payload = _canonical_json({**stats, "at": round(time.time(), 3)})
        await self._call("stats", lambda: self._redis.hset(  # type: ignore[union-attr]
            self.keys.stats, str(self.worker_id), payload))


def _decode(payload: bytes) -> list[Item]:
    rows = msgpack.unpackb(payload, raw=False, use_list=True)
    if not isinstance(rows, list):
        raise ValueError("payload is not a list")
    items: list[Item] = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str)
                and isinstance(row[1], str) and isinstance(row[2], str)
                and isinstance(row[3], int)):
            raise ValueError(f"bad item {row!r:.80}")
        items.append((row[0], row[1], row[2], row[3]))
    return items


async def reshard(url: str, crawl_id: str, workers: int) -> int:
    """Re-route the fleet's un-acknowledged links for a new fleet size; returns how many.

    Run with every worker stopped, alongside the state-dir resize
    (``dedup.resize``). Every entry still in a stream is a link not yet in
    its owner's ledger (acked entries are deleted), so all of them are read
    and rewritten to the streams of their owners under ``workers``, in one
    MULTI/EXEC with the deletion of the old streams and the new fleet size:
    a crash leaves either the old fleet or the new one, never half of each.
    Idle flags are cleared (every worker must report again), counters restart
    from the moved backlog.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers}")
    where, password = redact(url), _password_of(url)
    keys = _Keys(crawl_id)
    r = _client(url)
    try:
        try:
            async with asyncio.timeout(OP_TIMEOUT):
                old = await r.hget(keys.fleet, "workers")
        except _TRANSIENT as exc:
            raise TransportError(f"cannot reach Redis at {where}: "
                                 f"{_reason(exc, password)}") from None
        if old is None:
            return 0  # nothing registered: nothing in flight
        old_workers = int(old)
        by_owner: dict[int, list[Item]] = {}
        dead: list[dict[Any, Any]] = []
        for i in range(max(old_workers, workers)):
            for _id, fields in await r.xrange(keys.stream(i)):
                try:
                    for item in _decode(fields[b"d"]):
                        by_owner.setdefault(owner_of(item[2], workers), []).append(item)
                except (KeyError, ValueError, TypeError, msgpack.UnpackException):
                    dead.append(fields)
        moved = sum(len(v) for v in by_owner.values())
        pipe = r.pipeline(transaction=True)
        pipe.delete(*[keys.stream(i) for i in range(max(old_workers, workers))])
        pipe.delete(keys.idle, keys.stats)
        for o, items in sorted(by_owner.items()):
            for i in range(0, len(items), 500):
                chunk = items[i:i + 500]
                pipe.xadd(keys.stream(o), {"d": msgpack.packb([list(c) for c in chunk]),
                                           "n": len(chunk), "w": -1})
        for fields in dead:
            pipe.xadd(keys.dead, fields)
        for i in range(workers):
            pipe.xgroup_create(keys.stream(i), GROUP, id="0", mkstream=True)
        pipe.hset(keys.fleet, "workers", workers)
        pipe.hset(keys.counters, mapping={"forwarded": moved, "acked": 0})
        await pipe.execute()
        return moved
    finally:
        await r.aclose()
