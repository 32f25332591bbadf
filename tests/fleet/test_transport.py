"""The Redis Streams transport against a real redis-server (started by the fixture)."""

from __future__ import annotations

import asyncio
import logging
import pickle
import random
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection

from crawler.fleet.reshard import reshard
from crawler.wire import transport as transport_mod
from crawler.wire.monitor import FleetMismatch, FleetMonitor, TransportError
from crawler.wire.owner import owner_of
from crawler.wire.redis_url import redact
from crawler.wire.transport import RedisTransport
from tests.support import redisserver
from tests.support.helpers import until, until_async
from tests.support.redisserver import RedisServer, free_port

pytestmark = pytest.mark.redis

GEOMETRY = {"capacity": 100_000, "error_rate": 0.01, "shards": 8, "seed": 0, "growth": 2,
            "hash": "murmur3_x64_128"}
HOSTS = [f"h{i}.example:{8000 + i}" for i in range(40)]


def items_for(hosts: list[str], n: int = 3, depth: int = 1) -> list[tuple[str, str, str, int]]:
    return [(f"http://{h}/p{j}", f"http://{h}/p{j}", h, depth) for h in hosts for j in range(n)]


def not_owned_by(worker: int, workers: int) -> list[str]:
    return [h for h in HOSTS if owner_of(h, workers) != worker]


async def join(url: str, workers: int, *, crawl_id: str = "t", ids: list[int] | None = None,
               **kw: Any) -> list[RedisTransport]:
    out = []
    for i in ids if ids is not None else range(workers):
        t = RedisTransport(url, crawl_id=crawl_id, workers=workers, worker_id=i,
                           geometry=GEOMETRY, **kw)
        await t.connect()
        out.append(t)
    return out


async def drain(t: RedisTransport, *, ack: bool = True, rounds: int = 5) -> list[Any]:
    got = []
    for _ in range(rounds):
        ds = await t.receive(block_ms=50)
        if ack:
            await t.ack(ds)
        got.extend(ds)
    return got


async def until_received(t: RedisTransport, *, timeout: float = 10.0) -> list[Any]:
    """Receive (and ack) until something arrives: for a delivery that becomes due
    later (a claim once the entries are idle long enough), without a fixed sleep."""
    got: list[Any] = []
    await until_async(lambda: _receive_into(t, got), timeout=timeout,
                      what="a delivery")
    return got


async def _receive_into(t: RedisTransport, got: list[Any]) -> bool:
    ds = await t.receive(block_ms=50)
    await t.ack(ds)
    got.extend(ds)
    return bool(got)


async def until_blocked(url: str, *, timeout: float = 10.0) -> None:
    """Wait until a client of the server at ``url`` is blocked (in XREADGROUP): the
    moment a test may cut the server or the connection under a waiting reader."""
    admin = aioredis.Redis.from_url(url)
    try:
        async def blocked() -> bool:
            return any("b" in c.get("flags", "") for c in await admin.client_list())
        await until_async(blocked, timeout=timeout, what="a reader blocked in XREADGROUP")
    finally:
        await admin.aclose()


def urls(deliveries: list[Any]) -> list[str]:
    return sorted(u for d in deliveries for u, *_ in d.links)


# -- forwarding -----------------------------------------------------------------------


async def test_forward_groups_by_owner_in_one_round_trip(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    ts = await join(redis_server.url, 3)
    items = items_for(not_owned_by(0, 3))
    assert {owner_of(h, 3) for _, _, h, _ in items} == {1, 2}
    admin = aioredis.Redis.from_url(redis_server.url)
    await admin.config_resetstat()

    sends = 0
    real = AbstractConnection.send_packed_command

    async def counting(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        nonlocal sends
        sends += 1
        await real(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)
    assert await ts[0].forward(items) == len(items)
    monkeypatch.undo()

    assert sends == 1
    stats = await admin.info("commandstats")
    assert stats["cmdstat_xadd"]["calls"] == 2  # one entry per owner, not one per link
    for t in ts[1:]:
        got = await drain(t)
        assert urls(got) == sorted(u for u, _, h, _ in items if owner_of(h, 3) == t.worker_id)
        assert all(d.sender == 0 for d in got)
    status = await ts[0].fleet_status()
    assert (status["forwarded"], status["acked"], status["backlog"]) == (len(items),) * 2 + (0,)
    await admin.aclose()
    for t in ts:
        await t.close()


async def test_forward_cuts_large_batches_and_keeps_items_intact(redis_server: RedisServer
                                                                 ) -> None:
    a, b = await join(redis_server.url, 2, batch=7)
    hosts = not_owned_by(0, 2)
    items = [(f"http://{h}/é?q={j}", f"http://{h}/%C3%A9?q={j}", h, j % 5)
             for h in hosts for j in range(5)]
    await a.forward(items)
    got = await drain(b)
    assert all(len(d.links) <= 7 for d in got)
    assert sorted(i for d in got for i in d.links) == sorted(items)
    await a.close()
    await b.close()


async def test_links_forwarded_before_the_owner_first_joins_are_kept(
        redis_server: RedisServer) -> None:
    (a,) = await join(redis_server.url, 2, ids=[0])
    items = items_for(not_owned_by(0, 2))
    await a.forward(items)
    (b,) = await join(redis_server.url, 2, ids=[1])
    assert urls(await drain(b)) == sorted(u for u, *_ in items)
    await a.close()
    await b.close()


async def test_forward_refuses_a_url_the_sender_owns(redis_server: RedisServer) -> None:
    (a, b) = await join(redis_server.url, 2)
    own = [h for h in HOSTS if owner_of(h, 2) == 0][:1]
    with pytest.raises(ValueError, match="owns"):
        await a.forward(items_for(own, 1))
    assert await a.forward([]) == 0
    await a.close()
    await b.close()


# -- at-least-once ----------------------------------------------------------------------


async def test_unacked_entries_are_reread_by_the_restarted_worker(redis_server: RedisServer
                                                                  ) -> None:
    a, b = await join(redis_server.url, 2)
    items = items_for(not_owned_by(0, 2))
    await a.forward(items)
    first = await drain(b, ack=False)
    assert urls(first) == sorted(u for u, *_ in items)
    await b.close()  # dies without acking

    (b2,) = await join(redis_server.url, 2, ids=[1])
    again = await drain(b2)
    assert urls(again) == urls(first)
    assert b2.stats["redelivered"] == len(first)
    assert (await a.fleet_status())["backlog"] == 0
    (b3,) = await join(redis_server.url, 2, ids=[1])
    assert await drain(b3) == []  # acked entries are gone for good
    for t in (a, b2, b3):
        await t.close()


async def test_entries_of_a_vanished_consumer_are_claimed(redis_server: RedisServer) -> None:
    a, b = await join(redis_server.url, 2)
    await a.forward(items_for(not_owned_by(0, 2)))
    (old,) = await join(redis_server.url, 2, ids=[1], consumer="worker-1@old-host")
    held = await drain(old, ack=False)
    assert held
    await old.close()

    (new,) = await join(redis_server.url, 2, ids=[1], consumer="worker-1@new-host",
                        claim_idle_ms=1000)
    assert await new.receive(block_ms=0) == []  # not idle long enough yet
    claimed = await until_received(new)  # claimed once idle for claim_idle_ms
    claimed += await drain(new)
    assert urls(claimed) == urls(held)
    assert (await a.fleet_status())["backlog"] == 0
    for t in (a, b, new):
        await t.close()


async def test_double_ack_counts_once(redis_server: RedisServer) -> None:
    a, b = await join(redis_server.url, 2)
    items = items_for(not_owned_by(0, 2), 1)
    await a.forward(items)
    ds = await b.receive(block_ms=50)
    assert await b.ack(ds) == len(items)
    assert await b.ack(ds) == 0
    status = await a.fleet_status()
    assert status["acked"] == status["forwarded"] == len(items)
    await a.close()
    await b.close()


async def test_undecodable_and_pickled_entries_go_to_dead_letters(
        redis_server: RedisServer, tmp_path: Path) -> None:
    a, b = await join(redis_server.url, 2)
    canary = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
            return (open, (str(canary), "w"))

    admin = aioredis.Redis.from_url(redis_server.url)
    stream = b.stream
    await admin.xadd(stream, {"d": pickle.dumps([Evil()]), "n": 1, "w": 0})
    await admin.xadd(stream, {"d": msgpack.packb([["only", "three", 1]]), "n": 1, "w": 0})
    await a.forward(items_for(not_owned_by(0, 2), 1))
    got = await drain(b)
    assert got and all(len(d.links[0]) == 4 for d in got)
    assert not canary.exists()
    assert b.stats["dead"] == 2
    assert await admin.xlen(b.keys.dead) == 2
    assert await admin.xlen(stream) == 0
    assert (await admin.xpending(stream, "owner"))["pending"] == 0
    await admin.aclose()
    await a.close()
    await b.close()


# -- joining ---------------------------------------------------------------------------


async def test_geometry_mismatch_is_refused_naming_the_field(redis_server: RedisServer) -> None:
    (a,) = await join(redis_server.url, 3, ids=[0])
    odd = RedisTransport(redis_server.url, crawl_id="t", workers=3, worker_id=1,
                         geometry={**GEOMETRY, "capacity": 200_000})
    with pytest.raises(FleetMismatch, match="'capacity'") as err:
        await odd.connect()
    msg = str(err.value)
    assert "'capacity'" in msg and "100000" in msg and "200000" in msg and "\n" not in msg
    status = await a.fleet_status()
    assert status["idle"] == 0
    admin = aioredis.Redis.from_url(redis_server.url)
    assert await admin.hget(a.keys.idle, "1") is None  # the refused worker left no trace
    await admin.aclose()
    await a.close()


async def test_worker_count_mismatch_is_refused(redis_server: RedisServer) -> None:
    (a,) = await join(redis_server.url, 3, ids=[0])
    with pytest.raises(FleetMismatch, match=r"has 3 workers.*--workers 4"):
        await join(redis_server.url, 4, ids=[1])
    with pytest.raises(ValueError, match="worker id"):
        RedisTransport(redis_server.url, crawl_id="t", workers=3, worker_id=3, geometry=GEOMETRY)
    (other,) = await join(redis_server.url, 4, crawl_id="another-crawl", ids=[1])
    await other.close()
    await a.close()


async def test_unreachable_redis_is_one_clear_line() -> None:
    port = free_port()  # nothing listens here
    t = RedisTransport(f"redis://:hunter2@127.0.0.1:{port}/0", crawl_id="t", workers=2,
                       worker_id=0, geometry=GEOMETRY)
    with pytest.raises(TransportError, match=r"^cannot reach Redis at") as err:
        await asyncio.wait_for(t.connect(), timeout=10)
    msg = str(err.value)
    assert msg.startswith(f"cannot reach Redis at redis://:***@127.0.0.1:{port}/0")
    assert "hunter2" not in msg and "\n" not in msg


async def test_password_is_never_shown(redis_factory: Callable[..., RedisServer],
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server = redis_factory(password="s3cr3t-pw")
    wrong = server.url.replace("s3cr3t-pw", "wrong-pw")
    t = RedisTransport(wrong, crawl_id="t", workers=1, worker_id=0, geometry=GEOMETRY)
    with pytest.raises(TransportError, match="refused the credentials") as err:
        await t.connect()
    assert "wrong-pw" not in str(err.value)
    assert "wrong-pw" not in repr(t)
    (ok,) = await join(server.url, 1)
    assert "s3cr3t-pw" not in repr(ok) and "***" in repr(ok)
    await ok.close()
    assert all("pw" not in r.getMessage() for r in caplog.records)


def test_missing_redis_server_skips_unless_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redisserver, "redis_binary", lambda: None)
    monkeypatch.delenv("BLOOMCRAWL_REQUIRE_REDIS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        redisserver.require_redis_binary()
    monkeypatch.setenv("BLOOMCRAWL_REQUIRE_REDIS", "1")
    with pytest.raises(pytest.fail.Exception, match="BLOOMCRAWL_REQUIRE_REDIS=1 requires it"):
        redisserver.require_redis_binary()


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
    ("redis://user:pw@h:1/0", "redis://user:***@h:1/0"),
    ("redis://pw@h:1", "redis://***@h:1"),
    ("redis://h:1/0?password=pw&db=2", "redis://h:1/0?password=***&db=2"),
    ("rediss://h:1/0", "rediss://h:1/0"),
    ("unix:///tmp/r.sock?password=pw", "unix:///tmp/r.sock?password=***"),
])
def test_redact(url: str, shown: str) -> None:
    assert redact(url) == shown


# -- connection loss ----------------------------------------------------------------------


async def test_redis_restart_mid_crawl_loses_nothing(
        redis_factory: Callable[..., RedisServer], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    server = redis_factory(persistent=True, password="pw-xyz")
    a, b = await join(server.url, 2, retry_for=30, backoff=(0.05, 0.2))
    hosts = not_owned_by(0, 2)
    first, second = items_for(hosts[:5]), items_for(hosts[5:])
    await a.forward(first)
    held = await b.receive(block_ms=50)  # delivered, not yet acked when Redis goes down
    assert urls(held) == sorted(u for u, *_ in first)

    reader = asyncio.create_task(b.receive(block_ms=2000))  # blocked in XREADGROUP
    await until_blocked(server.url)
    await asyncio.to_thread(server.stop)
    sender = asyncio.create_task(a.forward(second))
    await until(lambda: any("connection lost during forward" in r.getMessage()
                            for r in caplog.records), what="the sender to meet the outage")
    assert not sender.done()  # retrying with backoff, not failed
    await asyncio.to_thread(server.start)
    assert await asyncio.wait_for(sender, 20) == len(second)
    got = await asyncio.wait_for(reader, 20)

    assert await b.ack(held) == len(first)  # the PEL survived the restart
    await b.ack(got)
    got += await drain(b)
    assert set(urls(got)) >= {u for u, *_ in second}
    status = await a.fleet_status()
    assert status["backlog"] == 0 and status["forwarded"] == status["acked"]
    assert a.stats["reconnects"] >= 1 and b.stats["reconnects"] >= 1
    assert any("connection lost" in r.getMessage() for r in caplog.records)
    assert all("pw-xyz" not in r.getMessage() for r in caplog.records)
    await a.close()
    await b.close()


async def test_killed_connections_are_reopened(redis_server: RedisServer) -> None:
    a, b = await join(redis_server.url, 2, backoff=(0.01, 0.1))
    admin = aioredis.Redis.from_url(redis_server.url)
    reader = asyncio.create_task(b.receive(block_ms=3000))
    await until_blocked(redis_server.url)
    assert await admin.client_kill_filter(_type="normal", skipme=True) >= 1
    items = items_for(not_owned_by(0, 2))
    await a.forward(items)
    got = await asyncio.wait_for(reader, 10)
    got += await drain(b)
    assert set(urls(got)) == {u for u, *_ in items}
    await admin.aclose()
    await a.close()
    await b.close()


async def test_a_delivery_whose_reply_was_lost_is_reread_after_reconnect(
        redis_server: RedisServer) -> None:
    a, b = await join(redis_server.url, 2, backoff=(0.01, 0.1))
    admin = aioredis.Redis.from_url(redis_server.url)
    reader = asyncio.create_task(b.receive(block_ms=500))
    await until_blocked(redis_server.url)
    items = items_for(not_owned_by(0, 2))
    # Redis hands the entries to consumer worker-1, but worker-1 never sees the reply:
    # added and delivered in one MULTI, then b's connection dies.
    pipe = admin.pipeline(transaction=True)
    pipe.xadd(b.stream, {"d": msgpack.packb([list(i) for i in items]), "n": len(items),
                         "w": 0})
    pipe.xreadgroup("owner", "worker-1", {b.stream: ">"})
    await pipe.execute()
    await admin.client_kill_filter(_type="normal", skipme=True)
    assert await asyncio.wait_for(reader, 10) == []
    got = await drain(b)
    assert urls(got) == sorted(u for u, *_ in items)
    assert (await admin.xpending(b.stream, "owner"))["pending"] == 0
    await admin.aclose()
    await a.close()
    await b.close()


async def test_redis_that_comes_back_empty_is_an_error(redis_server: RedisServer) -> None:
    a, b = await join(redis_server.url, 2, backoff=(0.01, 0.1))
    await asyncio.to_thread(redis_server.restart)  # no persistence: the fleet is gone
    with pytest.raises(TransportError, match="without fleet t's data"):
        await a.forward(items_for(not_owned_by(0, 2), 1))
    await a.close()
    await b.close()


async def test_redis_that_comes_back_empty_gets_every_forwarded_link_again(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """With outboxes, a Redis that lost the fleet is recovered: the new epoch makes the
    owner join again (NOGROUP) and the sender re-send (set_idle refuses it until then)."""
    a, b = await join(redis_server.url, 2, backoff=(0.01, 0.1))
    for t in (a, b):
        d = tmp_path / f"w{t.worker_id}"
        d.mkdir()
        await t.attach_outbox(d)
    sent = items_for(not_owned_by(0, 2), 2)
    await a.forward(sent)
    before = a._epoch
    await asyncio.to_thread(redis_server.restart)  # no persistence: the links are gone
    assert await drain(b) == []  # b joined again (new epoch); nothing for it yet
    assert await a.set_idle(True) is False  # a must re-send first
    assert await a.set_idle(True) is True
    assert a._epoch != before and a.stats["resent"] == len(sent)
    assert (tmp_path / "w0" / "outbox.epoch").read_text().strip() == a._epoch
    got = await drain(b)
    assert urls(got) == sorted(u for u, *_ in sent)
    status = await a.fleet_status()
    assert (status["forwarded"], status["acked"], status["backlog"]) == (len(sent),) * 2 + (0,)
    a.fleet_finished()
    assert (tmp_path / "w0" / "outbox").stat().st_size == 0
    await a.close()
    await b.close()


async def test_a_worker_resumed_after_its_redis_lost_data_resends_its_outbox(
        redis_server: RedisServer, tmp_path: Path) -> None:
    a, b = await join(redis_server.url, 2)
    await a.attach_outbox(tmp_path)
    sent = items_for(not_owned_by(0, 2), 2)
    await a.forward(sent)
    await a.close()
    await asyncio.to_thread(redis_server.restart)
    (b2,) = await join(redis_server.url, 2, ids=[1])
    (a2,) = await join(redis_server.url, 2, ids=[0])
    await a2.attach_outbox(tmp_path)  # another epoch than the outbox's: re-send
    assert a2.stats["resent"] == len(sent)
    assert urls(await drain(b2)) == sorted(u for u, *_ in sent)
    await a2.close()
    (a3,) = await join(redis_server.url, 2, ids=[0])
    await a3.attach_outbox(tmp_path)  # same epoch: nothing to re-send
    assert a3.stats["resent"] == 0
    for t in (a3, b, b2):
        await t.close()


async def test_a_redis_that_lost_only_its_last_writes_gets_them_again(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """Same epoch, but the last forward is gone (as after a crash before the AOF fsync):
    the sender's count in Redis is short, so set_idle refuses and it re-sends."""
    a, b = await join(redis_server.url, 2, backoff=(0.01, 0.1))
    await a.attach_outbox(tmp_path)
    first, last = items_for(not_owned_by(0, 2)[:2], 2), items_for(not_owned_by(0, 2)[2:4], 2)
    await a.forward(first)
    assert urls(await drain(b)) == sorted(u for u, *_ in first)  # committed and acked
    await a.forward(last)
    admin = aioredis.Redis.from_url(redis_server.url)
    pipe = admin.pipeline(transaction=True)  # the last MULTI never reached the disk
    pipe.delete(b.stream)
    pipe.xgroup_create(b.stream, "owner", id="0", mkstream=True)
    pipe.hincrby(a.keys.counters, "sent:0", -len(last))
    pipe.hincrby(a.keys.counters, "forwarded", -len(last))
    await pipe.execute()
    await admin.aclose()
    assert await a.set_idle(True) is False
    assert await a.set_idle(True) is False  # it joined again: a new generation
    assert await a.set_idle(True) is True
    got = await drain(b)  # both batches again; b's seen-test would drop the first
    assert urls(got) == sorted(u for u, *_ in first + last)
    await a.close()
    await b.close()


def test_an_outbox_cuts_a_torn_tail_and_keeps_every_whole_batch(tmp_path: Path) -> None:
    from crawler.wire.outbox import Outbox

    box = Outbox(tmp_path)
    first, second = items_for(HOSTS[:2]), items_for(HOSTS[2:3])
    box.append(first)
    box.append(second)
    box.close()
    whole = (tmp_path / "outbox").stat().st_size
    with open(tmp_path / "outbox", "ab") as f:
        f.write(b"\x10\x00\x00\x00torn")  # a crash mid-append
    box = Outbox(tmp_path)
    assert [list(map(tuple, b)) for b in box.batches()] == [first, second]
    assert (tmp_path / "outbox").stat().st_size == whole and box.links == len(first) + 3
    box.append(second)  # appends after the cut, readable
    assert len(list(box.batches())) == 3
    box.clear()
    assert list(box.batches()) == [] and box.links == 0
    box.close()


async def test_gives_up_after_retry_for(redis_server: RedisServer) -> None:
    (a, b) = await join(redis_server.url, 2, retry_for=0.5, backoff=(0.05, 0.1))
    await asyncio.to_thread(redis_server.stop)
    with pytest.raises(TransportError, match=r"unreachable for 0 s during forward"):
        await asyncio.wait_for(a.forward(items_for(not_owned_by(0, 2), 1)), 10)
    await a.close()
    await b.close()


async def test_a_cancelled_call_really_ends(redis_server: RedisServer) -> None:
    """A task cancelled inside a Redis call ends. (With a socket timeout, redis-py sends
    through asyncio.wait_for, which on Python 3.11 can swallow the cancellation: the
    engine's receive task then ran on after its crawl had ended.)"""
    (t,) = await join(redis_server.url, 2, ids=[0])
    rng = random.Random(5)

    async def poll() -> None:
        while True:
            await t.stop_requested()

    for _ in range(100):
        tasks = [asyncio.create_task(poll()) for _ in range(3)]
        await asyncio.sleep(rng.random() * 0.005)
        for task in tasks:
            task.cancel()
        done, _ = await asyncio.wait(tasks, timeout=2)
        assert len(done) == 3 and all(task.cancelled() for task in tasks)
    await t.close()


async def test_a_peer_that_never_answers_is_noticed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each round trip has a deadline (a silent peer must not hang a worker forever)."""
    monkeypatch.setattr(transport_mod, "OP_TIMEOUT", 0.3)
    with socket.socket() as silent:  # accepts connections (backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        t = RedisTransport(f"redis://127.0.0.1:{port}/0", crawl_id="t", workers=2, worker_id=0,
                           geometry=GEOMETRY)
        with pytest.raises(TransportError, match="cannot reach Redis"):
            await asyncio.wait_for(t.connect(), timeout=10)


# -- termination and stop -------------------------------------------------------------------


async def test_fleet_done_only_when_all_idle_and_drained(redis_server: RedisServer) -> None:
    a, b = await join(redis_server.url, 2)
    assert not await a.fleet_done()  # joined workers start busy
    assert await a.set_idle(True)
    assert not await a.fleet_done()
    assert await b.set_idle(True)
    assert await a.fleet_done()

    await a.set_idle(False)
    await a.forward(items_for(not_owned_by(0, 2), 1))
    await a.set_idle(True)
    assert not await a.fleet_done()          # forwarded, not yet read
    ds = await b.receive(block_ms=50)
    assert not await b.fleet_done()          # read, not yet acked: still backlog
    await b.ack(ds)
    status = await b.fleet_status()
    assert (status["backlog"], status["idle"], status["done"]) == (0, 1, 0)  # ack made b busy
    assert await b.set_idle(True)
    assert await b.fleet_done()


async def test_a_stale_idle_cannot_hide_an_ack(redis_server: RedisServer) -> None:
    a, b = await join(redis_server.url, 2)
    await a.set_idle(True)
    decided_at = b._gen  # b decides "idle" ... while another task receives and acks
    await a.forward(items_for(not_owned_by(0, 2), 1))
    await b.ack(await b.receive(block_ms=50))
    b._gen = decided_at  # ... and the stale decision reaches Redis last
    assert not await b.set_idle(True)
    assert not await a.fleet_done()
    await a.close()
    await b.close()


async def test_stop_request_reaches_every_worker_but_not_later_joiners(
        redis_server: RedisServer) -> None:
    a, b, c = await join(redis_server.url, 3)
    assert not await b.stop_requested()
    await a.request_stop()
    assert await b.stop_requested() and await c.stop_requested() and await a.stop_requested()
    (c2,) = await join(redis_server.url, 3, ids=[2])  # a resume after the stop
    assert not await c2.stop_requested()
    for t in (a, b, c, c2):
        await t.close()


async def test_monitor_watches_and_stops_without_joining(redis_server: RedisServer) -> None:
    monitor = FleetMonitor(redis_server.url, crawl_id="t", workers=2)
    await monitor.connect()  # before any worker: nothing registered, not done
    assert (await monitor.fleet_status())["registered"] == 0
    assert not await monitor.fleet_done()
    a, b = await join(redis_server.url, 2)
    for t in (a, b):
        await t.set_idle(True)
    assert await monitor.fleet_done()
    status = await monitor.fleet_status()
    assert (status["registered"], status["idle"]) == (1, 2)  # the monitor is no worker
    await monitor.request_stop()
    assert await a.stop_requested() and await b.stop_requested()
    wrong = FleetMonitor(redis_server.url, crawl_id="t", workers=3)
    with pytest.raises(FleetMismatch, match="has 2 workers, not 3"):
        await wrong.connect()
    down = FleetMonitor(f"redis://127.0.0.1:{free_port()}/0", crawl_id="t", workers=2)
    with pytest.raises(TransportError, match="cannot reach Redis"):
        await down.connect()
    for t in (monitor, a, b):
        await t.close()


async def test_stats_are_shared(redis_server: RedisServer) -> None:
    a, b = await join(redis_server.url, 2)
    await a.publish_stats({"pages": 3})
    await b.publish_stats({"pages": 4})
    got = await a.fleet_stats()
    assert {i: s["pages"] for i, s in got.items()} == {0: 3, 1: 4}
    await a.close()
    await b.close()


# -- resize ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("before", "after"), [(2, 4), (4, 2)])
async def test_reshard_reroutes_unacked_links(redis_server: RedisServer, before: int,
                                              after: int) -> None:
    old = await join(redis_server.url, before)
    sent = []
    for t in old:
        batch = items_for([h for h in not_owned_by(t.worker_id, before)][t.worker_id::before])
        await t.forward(batch)
        sent += batch
    held = await drain(old[1], ack=False)  # delivered but unacked: must move too
    assert held
    for t in old:
        await t.close()

    assert await reshard(redis_server.url, "t", after) == len(sent)
    new = await join(redis_server.url, after)
    got: list[Any] = []
    for t in new:
        mine = await drain(t)
        assert all(owner_of(h, after) == t.worker_id for d in mine for _, _, h, _ in d.links)
        got += mine
    assert urls(got) == sorted(u for u, *_ in sent)
    for t in new:
        await t.set_idle(True)
    assert await new[0].fleet_done()
    with pytest.raises(FleetMismatch, match=f"has {after} workers"):
        await join(redis_server.url, before, ids=[0])
    for t in new:
        await t.close()
