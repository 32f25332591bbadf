"""Links between workers over Redis Streams: at-least-once, owner-deduplicated.

Each host has one owner (``crawler.owner``). A worker sends the links it finds
for other owners to their streams, in batches, and reads its own stream through
a consumer group. The owner's URL-seen test turns at-least-once delivery into
exactly-once crawling, so every step below may repeat, but none may lose.

Keys (``{crawl_id}`` is a Redis Cluster hash tag, so a fleet's keys share a slot
and the Lua scripts below may touch them all)::

    bloomcrawl:{ID}:fleet      hash: workers, geometry (JSON), protocol, created, epoch
    bloomcrawl:{ID}:in:I       stream of worker I (group "owner", consumer "worker-I")
    bloomcrawl:{ID}:idle       hash: I -> "1" idle / "0" busy
    bloomcrawl:{ID}:gen        hash: I -> generation, bumped by every ack of worker I
    bloomcrawl:{ID}:counters   hash: forwarded, acked, sent:I (URLs; sent:I by worker I)
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

A Redis that loses the fleet's data (restarted without persistence, flushed)
loses the links waiting in its streams. The fleet hash carries an ``epoch``, a
random token set when the hash is created, so such a Redis gets a new one. A
worker learns of it after a reconnect, from a NOGROUP reply, from ``set_idle``
(which refuses a caller of another epoch) or from a fleet status without the
fleet; it then joins again and re-sends every link in its ``Outbox`` (each
forward is recorded there before the XADD, and synced by the group commit that
marks its page, with pages.jsonl) before it takes
the new epoch as its own. Since a worker counts as idle only under the epoch it
re-sent in, the fleet cannot be done while a lost link is not back in a stream.
A Redis that lost only its last writes (a crash before its append-only file
reached the disk) keeps its epoch, but counts fewer links in ``sent:I`` than
worker I knows it sent: that is a loss too, found the same ways, re-sent the
same way (while the worker runs; a worker resumed later has no count to compare).
"""


from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgpack

from crawler.wire.monitor import (
    MAX_BLOCK_MS,
    OP_TIMEOUT,
    FleetMismatch,
    FleetMonitor,
    TransportError,
)
from crawler.wire.outbox import Outbox
from crawler.wire.owner import owner_of
from crawler.wire.protocol import (
    GROUP,
    PROTOCOL,
    Delivery,
    RemoteLink,
    canonical_json,
    decode,
    first_difference,
)

log = logging.getLogger("crawler.transport")


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
        self.geometry = json.loads(canonical_json(geometry))
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
        self._epoch: str | None = None  # the fleet epoch this worker last re-sent under
        self.outbox: Outbox | None = None
        self._recovering = asyncio.Lock()
        self._sent_field = f"sent:{worker_id}"
        self._sent = 0  # links this worker's forwards brought the fleet's count to
        self._recovers = True
        self.stats.update({"forwarded": 0, "forward_calls": 0, "received": 0, "acked": 0,
                           "redelivered": 0, "dead": 0, "resent": 0})

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
        try:
            async with asyncio.timeout(OP_TIMEOUT):
                got = await self._register()
        except FleetMismatch:
            await self._drop()
            raise
        except BaseException as exc:
            await self._drop()
            raise self._join_error(exc) from None
        self._epoch, self._stop_base = got
        log.info("joined fleet %s at %s as worker %d of %d", self.crawl_id, self.where,
                 self.worker_id, self.workers)

    async def _register(self) -> tuple[str, int]:
        """Join (the register script, one round trip); returns the fleet's epoch and its
        stop count. Raises FleetMismatch if this worker does not fit the fleet."""
        assert self._redis is not None
        k = self.keys
        got = await self._scripts["register"](
            keys=[k.fleet, k.idle, k.gen, k.stop, self.stream],
            args=[self.workers, canonical_json(self.geometry), PROTOCOL,
                  f"{time.time():.3f}", self.worker_id, GROUP, uuid.uuid4().hex])
        workers, geometry, protocol, stop, gen, epoch = got
        self._check_fleet(int(workers), json.loads(geometry), protocol.decode())
        self._gen = int(gen)
        return epoch.decode(), int(stop)

    async def attach_outbox(self, state_dir: str | Path) -> None:
        """Record forwards in ``state_dir``'s outbox from now on (call once connected).

        A worker resumed after its fleet's Redis lost data (the outbox was last
        held under another epoch) re-sends the outbox's links first.
        """
        if self._epoch is None:
            raise TransportError("not connected to Redis (call connect() first)")
        self.outbox = outbox = Outbox(state_dir)
        held = outbox.epoch()
        if outbox.links and held != self._epoch:
            if held is None:  # an outbox carried over by a resize that could not tell
                log.info("worker %d: re-sending the %d links of its outbox",
                         self.worker_id, outbox.links)
            else:
                log.warning("worker %d: fleet %s at %s lost its data since this worker "
                            "last ran (new epoch): re-sending the %d links it forwarded",
                            self.worker_id, self.crawl_id, self.where, outbox.links)
            await self._call("resend", self._resend)
        outbox.set_epoch(self._epoch)

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
        """Check the fleet after a lost connection (or a sign of lost data).

        Same epoch: the data is there; re-read the PEL (a reply lost on the wire
        may have delivered entries nobody saw). Another epoch, or none: Redis
        lost the fleet's data; join again and re-send the outbox, then take the
        new epoch. Without an outbox nothing can be re-sent: an error.
        """
        async with self._recovering:  # the receive, forward and fleet tasks: one recovery
            await self._check_epoch()
        self._pel_done, self._pel_cursor = False, "0"

    async def _check_epoch(self) -> None:
        assert self._redis is not None
        known = self._sent  # from replies already in: Redis must count at least that many
        pipe = self._redis.pipeline(transaction=True)
        pipe.hget(self.keys.fleet, "epoch")
        pipe.hget(self.keys.counters, self._sent_field)
        epoch, sent = await pipe.execute()
        if epoch is not None and epoch.decode() == self._epoch and self.outbox is not None \
                and int(sent or 0) < known:
            # same fleet, but its last writes are gone (a crash before they reached disk)
            await self._register()
            log.warning("worker %d: Redis at %s lost the last links this worker forwarded "
                        "(it counts %d of %d): re-sending the %d links it forwarded",
                        self.worker_id, self.where, int(sent or 0), known,
                        self.outbox.links)
            self._sent = 0
            await self._resend()
            self._claim_cursor, self._next_claim = "0-0", 0.0
        elif epoch is None or epoch.decode() != self._epoch:
            if self.outbox is None:
                raise TransportError(
                    f"Redis at {self.where} came back without fleet {self.crawl_id}'s data "
                    "(restarted without persistence?): forwarded links may be lost; "
                    "enable appendonly on Redis and restart the fleet with resume")
            new, stop = await self._register()
            log.warning("worker %d: Redis at %s lost fleet %s's data (restarted without "
                        "persistence?): re-sending the %d links this worker forwarded",
                        self.worker_id, self.where, self.crawl_id, self.outbox.links)
            self._sent = 0
            await self._resend()
            self._epoch, self._stop_base = new, stop
            self.outbox.set_epoch(new)
            self._claim_cursor, self._next_claim = "0-0", 0.0

    async def _resend(self) -> int:
        """Forward every link in the outbox again (raw calls: run inside ``_call``).

        At-least-once: an owner that committed a link before the loss drops the
        repeat in its seen-test. Returns the number of links sent.
        """
        assert self._redis is not None and self.outbox is not None
        sent = 0
        entries_out: list[tuple[str, dict[str, Any]]] = []
        count = 0

        async def flush() -> None:
            await self._send_entries(entries_out, count)

        for batch in self.outbox.batches():
            links = [it for it in batch if not self.is_local(it[2])]
            entries, total = self._entries(links)
            entries_out += entries
            count += total
            if len(entries_out) >= 100:
                await flush()
                sent += count
                entries_out, count = [], 0
        if entries_out:
            await flush()
            sent += count
        self.stats["resent"] += sent
        return sent

    # -- sending ---------------------------------------------------------------------

    def is_local(self, host: str) -> bool:
        return owner_of(host, self.workers) == self.worker_id

    async def forward(self, links: Sequence[RemoteLink]) -> int:
        """Send ``(url, key, host, depth)`` links to their owners: one round trip in all.

        Links are grouped by owner, cut into entries of at most ``batch``, and
        written with the ``forwarded`` counter in one MULTI/EXEC pipeline, so
        the counter and the streams always agree. Links this worker owns are a
        caller bug (they belong in its own seen-test) and raise ValueError.
        A retry after a lost reply may append an entry twice; the owner's
        seen-test drops the repeat. Returns the number of links sent.
        """
        for link in links:
            if self.is_local(link[2]):
                raise ValueError(f"forward() got a URL this worker owns: {link[0]}")
        entries, total = self._entries(links)
        if not entries:
            return 0

        if self.outbox is not None:  # synced by the group commit that marks the page
            self.outbox.append(links)
        await self._call("forward", lambda: self._send_entries(entries, total))
        self.stats["forwarded"] += total
        self.stats["forward_calls"] += 1
        return total

    async def _send_entries(self, entries: list[tuple[str, dict[str, Any]]], count: int) -> None:
        """Append ``entries`` (carrying ``count`` links) to their streams with the
        ``forwarded`` and this worker's ``sent`` counters in one MULTI/EXEC, so the
        counters and the streams always agree; remember what Redis counts as sent."""
        assert self._redis is not None
        pipe = self._redis.pipeline(transaction=True)
        for stream, fields in entries:
            pipe.xadd(stream, fields)
        pipe.hincrby(self.keys.counters, "forwarded", count)
        pipe.hincrby(self.keys.counters, self._sent_field, count)
        self._sent = max(self._sent, int((await pipe.execute())[-1]))

    def _entries(self, links: Sequence[RemoteLink]) -> tuple[list[tuple[str, dict[str, Any]]], int]:
        """Stream entries for ``links`` (grouped by owner, at most ``batch`` each) and
        the number of links they carry."""
        by_owner: dict[int, list[RemoteLink]] = {}
        for link in links:
            by_owner.setdefault(owner_of(link[2], self.workers), []).append(link)
        entries: list[tuple[str, dict[str, Any]]] = []
        for o in sorted(by_owner):
            group = by_owner[o]
            for i in range(0, len(group), self.batch):
                chunk = group[i:i + self.batch]
                entries.append((self.keys.stream(o), {
                    "d": msgpack.packb([[u, k, h, int(d)] for u, k, h, d in chunk]),
                    "n": len(chunk), "w": self.worker_id}))
        return entries, sum(len(g) for g in by_owner.values())

    def fleet_finished(self) -> None:
        """The whole fleet is done: every link forwarded is in its owner's ledger, so
        the outbox need not keep them."""
        if self.outbox is not None:
            self.outbox.clear()

    async def close(self) -> None:
        await super().close()
        if self.outbox is not None:
            self.outbox.close()

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
                out.append(Delivery(entry_id, decode(fields[b"d"]), int(fields.get(b"w", -1))))
            except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
                log.error("worker %d: undecodable stream entry %s moved to %s: %s",
                          self.worker_id, entry_id, self.keys.dead, exc)
                bad.append((entry_id, fields))
        if bad:
            await self._bury(bad)
        self.stats["received"] += sum(len(d.links) for d in out)
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
        gen, epoch, sent = self._gen, self._epoch, self._sent
        done = await self._call("set_idle", lambda: self._scripts["idle"](
            keys=[k.idle, k.gen, k.fleet, k.counters],
            args=[self.worker_id, gen, epoch, self._sent_field, sent]))
        if int(done) < 0:  # Redis lost data since this worker last looked: recover first
            self._broken = True
            return False
        return bool(done)

    async def fleet_status(self) -> dict[str, int]:
        status = await super().fleet_status()
        if not status["registered"] and self.outbox is not None:
            self._broken = True  # lost: join again and re-send (``_after_reconnect``)
            status = await super().fleet_status()
        if not status["registered"]:
            raise TransportError(f"Redis at {self.where} no longer has fleet {self.crawl_id} "
                                 "(flushed or restarted without persistence?)")
        return status

    async def publish_stats(self, stats: dict[str, Any]) -> None:
        """Store this worker's progress (JSON) for the fleet's combined progress line."""
        payload = canonical_json({**stats, "at": round(time.time(), 3)})
        await self._call("stats", lambda: self._redis.hset(  # type: ignore[union-attr]
            self.keys.stats, str(self.worker_id), payload))
