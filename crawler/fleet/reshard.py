"""Re-route a stopped fleet's un-acknowledged links when ``bloomcrawl resize`` changes
its size: the Redis half of a resize (``crawler.fleet.resize`` does the state dirs).

Every entry still in a stream is a link not yet in its owner's ledger (acked
entries are deleted), so moving all of them to their owners under the new size,
in one transaction, is all a resize needs from Redis.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack

from crawler.wire.monitor import OP_TIMEOUT, TRANSIENT, TransportError, client, reason
from crawler.wire.owner import owner_of
from crawler.wire.protocol import GROUP, Keys, RemoteLink, decode
from crawler.wire.redis_url import password_of, redact

__all__ = ["reshard"]


async def reshard(url: str, crawl_id: str, workers: int) -> int:
    """Re-route the fleet's un-acknowledged links for a new fleet size; returns how many.

    Run with every worker stopped, alongside the state-dir resize
    (``dedup.admin.resizing``). Every entry still in a stream is a link not yet in
    its owner's ledger (acked entries are deleted), so all of them are read
    and rewritten to the streams of their owners under ``workers``, in one
    MULTI/EXEC with the deletion of the old streams and the new fleet size:
    a crash leaves either the old fleet or the new one, never half of each.
    Idle flags are cleared (every worker must report again), counters restart
    from the moved backlog.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers}")
    where, password = redact(url), password_of(url)
    keys = Keys(crawl_id)
    r = client(url)
    try:
        try:
            async with asyncio.timeout(OP_TIMEOUT):
                old = await r.hget(keys.fleet, "workers")
        except TRANSIENT as exc:
            raise TransportError(f"cannot reach Redis at {where}: "
                                 f"{reason(exc, password)}") from None
        if old is None:
            return 0  # nothing registered: nothing in flight
        old_workers = int(old)
        by_owner: dict[int, list[RemoteLink]] = {}
        dead: list[dict[Any, Any]] = []
        for i in range(max(old_workers, workers)):
            for _id, fields in await r.xrange(keys.stream(i)):
                try:
                    for link in decode(fields[b"d"]):
                        by_owner.setdefault(owner_of(link[2], workers), []).append(link)
                except (KeyError, ValueError, TypeError, msgpack.UnpackException):
                    dead.append(fields)
        moved = sum(len(v) for v in by_owner.values())
        pipe = r.pipeline(transaction=True)
        pipe.delete(*[keys.stream(i) for i in range(max(old_workers, workers))])
        pipe.delete(keys.idle, keys.stats)
        for o, links in sorted(by_owner.items()):
            for i in range(0, len(links), 500):
                chunk = links[i:i + 500]
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
