"""Frontier: per-host order, budgets, a slow host never stalls others, bounded memory."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from crawler.core.schedule.frontier import Frontier
from crawler.core.schedule.politeness import Politeness
from crawler.core.state.crawlstate import CrawlState
from dedup import State, UrlSeen


@pytest.fixture
def seen(tmp_path):
    with UrlSeen(tmp_path / "s", capacity=10_000, shards=2) as s:
        yield s


def urls(host: str, n: int, start: int = 0) -> list[str]:
    return [f"http://{host}/{i}" for i in range(start, start + n)]


async def take(f: Frontier, timeout: float = 1.0):
    return await asyncio.wait_for(f.get(), timeout)


def finish(f: Frontier, seen: UrlSeen, item, **kw) -> None:
    """What the engine does with a taken item: release, mark, settle."""
    f.done(item, **kw)
    seen.ledger.mark(item.seq, State.FETCHED, status=200)
    f.settled([item.seq])


async def drain(f: Frontier, seen: UrlSeen) -> list[str]:
    got = []
    while (item := await take(f)) is not None:
        got.append(item.url)
        finish(f, seen, item)
    return got


async def test_hosts_interleave_and_each_host_keeps_discovery_order(seen):
    f = Frontier(CrawlState(seen.records), Politeness(per_host=1))
    f.add(seen.admit(urls("a.test", 4) + urls("b.test", 4)))
    got = await drain(f, seen)
    assert got[:4] == ["http://a.test/0", "http://b.test/0", "http://a.test/1",
                       "http://b.test/1"]
    assert [u for u in got if "a.test" in u] == urls("a.test", 4)
    assert [u for u in got if "b.test" in u] == urls("b.test", 4)
    assert f.finished() and f.closed
    assert await f.get() is None


async def test_a_host_in_retry_after_does_not_stall_the_others(seen):
    f = Frontier(CrawlState(seen.records), Politeness(per_host=1, max_backoff=60))
    f.add(seen.admit(urls("slow.test", 3) + urls("fast.test", 3)))
    first = await take(f)
    assert first.host == "slow.test"
    finish(f, seen, first, retry_after=30.0)
    got = []
    for _ in range(3):
        item = await take(f)
        got.append(item.url)
        finish(f, seen, item)
    assert got == urls("fast.test", 3)
    # slow.test is held back for 30 s: a waiter gets nothing, because of that hold
    waiter = asyncio.ensure_future(f.get())
    await asyncio.sleep(0)  # handing out is synchronous: it would be done by now
    assert not waiter.done()
    loop = asyncio.get_running_loop()
    assert f.politeness.ready_at("slow.test") - loop.time() > 29
    waiter.cancel()
    assert len(f) == 2  # slow.test's other two URLs are still queued
    assert not f.finished()


async def test_per_host_concurrency_is_a_budget(seen):
    f = Frontier(CrawlState(seen.records), Politeness(per_host=2))
    f.add(seen.admit(urls("a.test", 5)))
    one, two = await take(f), await take(f)
    third = asyncio.ensure_future(f.get())
    await asyncio.sleep(0)  # handing out is synchronous: it would be done by now
    assert not third.done() and f.in_flight == 2 and not f.politeness.has_slot("a.test")
    finish(f, seen, one)
    assert (await asyncio.wait_for(third, 1)).url == "http://a.test/2"
    finish(f, seen, two)


async def test_minimum_delay_spaces_the_starts_per_host(seen):
    loop = asyncio.get_running_loop()
    f = Frontier(CrawlState(seen.records), Politeness(per_host=4, delay=0.05))
    f.add(seen.admit(urls("a.test", 4) + urls("b.test", 1)))
    starts = []
    for _ in range(5):
        item = await take(f)
        starts.append((loop.time(), item.host))
        finish(f, seen, item)
    a = [t for t, h in starts if h == "a.test"]
    assert all(t2 - t1 >= 0.049 for t1, t2 in itertools.pairwise(a))
    # b.test was not made to wait behind a.test's delay
    assert [h for _, h in starts][:2] == ["a.test", "b.test"]


async def test_memory_is_bounded_and_queued_rows_are_paged_in_from_the_ledger(seen):
    f = Frontier(CrawlState(seen.records), Politeness(per_host=1), memory=10, page_size=5)
    batch = []
    for i in range(20):
        batch += [f"http://a.test/{i}", f"http://b.test/{i}", f"http://c.test/{i}"]
    f.add(seen.admit(batch))
    assert len(f) == 10
    peak, got = 0, []
    while (item := await take(f)) is not None:
        peak = max(peak, len(f))
        got.append(item.url)
        finish(f, seen, item)
        if len(got) == 30:  # more arrive while paging: they must queue behind
            more = seen.admit(urls("a.test", 5, start=100))
            f.add(more)
    assert peak <= 10 + 1
    assert sorted(got) == sorted(batch + urls("a.test", 5, start=100))
    for host in ("a.test", "b.test", "c.test"):
        mine = [u for u in got if host in u]
        assert mine == sorted(mine, key=lambda u: int(u.rsplit("/", 1)[1]))


async def test_load_registers_every_host_with_queued_rows(seen):
    seen.admit(urls("a.test", 3) + urls("b.test", 2))
    f = Frontier(CrawlState(seen.records), Politeness(per_host=2))
    assert f.load() == 2
    assert sorted(await drain(f, seen)) == sorted(urls("a.test", 3) + urls("b.test", 2))


async def test_taken_but_unmarked_rows_are_never_handed_out_twice(seen):
    f = Frontier(CrawlState(seen.records), Politeness(per_host=1), memory=1, page_size=1)
    f.add(seen.admit(["http://a.test/1"]))
    a1 = await take(f)
    f.add(seen.admit(["http://b.test/1"]))  # fills memory
    f.done(a1)  # fetched, but its ledger row is not marked yet (still QUEUED)
    f.add(seen.admit(["http://a.test/2"]))  # spills: must be paged in later
    got = [(await take(f)).url, (await take(f)).url]
    assert sorted(got) == ["http://a.test/2", "http://b.test/1"]
    waiter = asyncio.ensure_future(f.get())  # a1 is busy, not handed out again
    await asyncio.sleep(0)
    assert not waiter.done() and len(f) == 0 and f.in_flight == 2
    waiter.cancel()


async def test_rows_a_page_in_read_before_they_were_fed_are_not_queued_twice(seen):
    # The engine feeds the frontier after the group commit: a page-in between the
    # two reads the just-committed rows from the ledger before add() is called.
    f = Frontier(CrawlState(seen.records), Politeness(per_host=1), memory=10, page_size=10)
    f.add(seen.admit(urls("a.test", 11)))  # /0../9 fill memory, /10 spills to the ledger
    for _ in range(10):
        finish(f, seen, await take(f))
    late = seen.admit(urls("a.test", 2, start=11))  # committed, not fed yet
    paged = await take(f)  # pages in /10 and the committed /11, /12: memory has room
    assert paged.url == "http://a.test/10" and len(f) == 2
    f.add(late)  # the feed arrives after the page-in
    finish(f, seen, paged)
    got = [paged.url] + await drain(f, seen)
    assert got == urls("a.test", 3, start=10)
    assert len(f) == 0


async def test_max_take_stops_handing_out_and_uncounted_items_give_it_back(seen):
    f = Frontier(CrawlState(seen.records), Politeness(per_host=5), max_take=2)
    f.add(seen.admit(urls("a.test", 5)))
    one, two = await take(f), await take(f)
    waiting = asyncio.ensure_future(f.get())
    await asyncio.sleep(0)  # handing out is synchronous: it would be done by now
    assert not waiting.done() and f.taken == f.max_take
    f.done(one, requested=False, counted=False)  # e.g. robots.txt said no
    three = await asyncio.wait_for(waiting, 1)
    assert three.url == "http://a.test/2"
    finish(f, seen, two)
    finish(f, seen, three)
    assert f.finished()
    assert await f.get() is None


async def test_a_get_cancelled_as_its_item_arrives_gives_the_item_back(seen):
    f = Frontier(CrawlState(seen.records), Politeness(per_host=1))
    f.add(seen.admit(["http://b.test/1"]))
    busy = await take(f)  # in flight: the crawl is not over
    task = asyncio.ensure_future(f.get())
    await asyncio.sleep(0)  # the task now waits for an item
    f.add(seen.admit(["http://a.test/x"]))  # resolves the task's future at once
    assert f.in_flight == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError, match=r"^$"):  # cancelled, no message
        await task
    assert f.in_flight == 1
    assert (await take(f)).url == "http://a.test/x"
    f.done(busy)


async def test_close_wakes_every_waiter_with_none(seen):
    f = Frontier(CrawlState(seen.records), Politeness())
    f.add(seen.admit(["http://a.test/1"]))
    item = await take(f)
    waiters = [asyncio.ensure_future(f.get()) for _ in range(3)]
    await asyncio.sleep(0)
    f.close()
    assert await asyncio.gather(*waiters) == [None, None, None]
    f.done(item)


async def test_idle_hook_replaces_local_termination(seen):
    calls = []
    f = Frontier(CrawlState(seen.records), Politeness(), on_idle=lambda: calls.append(1))
    f.add(seen.admit(["http://a.test/1"]))
    item = await take(f)
    finish(f, seen, item)
    assert calls and not f.closed  # a fleet decides; the frontier keeps waiting
    f.add(seen.admit(["http://a.test/2"]))
    assert (await take(f)).url == "http://a.test/2"
