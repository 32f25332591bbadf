"""Pending: the one test of "nothing is left to crawl" (frontier, pages under way,
fleet deliveries), and the call that lets the engine see it turn at once."""

from __future__ import annotations

import asyncio

import pytest

from crawler.core.run.pending import Pending
from crawler.core.schedule.frontier import Frontier
from crawler.core.schedule.politeness import Politeness
from crawler.core.state.crawlstate import CrawlState
from dedup import State, UrlSeen


@pytest.fixture
def seen(tmp_path):
    with UrlSeen(tmp_path / "s", capacity=10_000, shards=2) as s:
        yield s


async def test_a_page_is_pending_until_its_commit_returns(seen):
    changes: list[bool] = []
    f = Frontier(CrawlState(seen.records), Politeness(), on_idle=lambda: None)
    pending = Pending(f, lambda: changes.append(pending.idle()))
    f.add(seen.admit(["http://a.test/1"]))
    assert not pending.idle()  # something to hand out
    item = await asyncio.wait_for(f.get(), 1.0)
    with pending.page():
        f.done(item)
        assert f.finished() and not pending.idle()  # its links are not admitted yet
        new = seen.admit(["http://a.test/2"], depth=1)  # its group commit
        seen.records.record_outcomes([(item.seq, State.FETCHED, 200, None)])
        f.add(new)
        f.settled([item.seq])
    assert changes == [False]  # the link it found is left to fetch
    item = await asyncio.wait_for(f.get(), 1.0)
    with pending.page():
        f.done(item)
    assert changes == [False, True]
    assert pending.idle()


async def test_a_delivery_is_pending_until_acked(seen):
    changes: list[bool] = []
    f = Frontier(CrawlState(seen.records), Politeness(), on_idle=lambda: None)
    pending = Pending(f, lambda: changes.append(pending.idle()))
    assert pending.idle()
    with pending.delivery():
        assert not pending.idle()
    assert changes == [True]


async def test_an_error_inside_still_ends_the_page(seen):
    f = Frontier(CrawlState(seen.records), Politeness(), on_idle=lambda: None)
    pending = Pending(f)
    with pytest.raises(RuntimeError), pending.page():
        raise RuntimeError("disk full")
    assert pending.pages == 0 and pending.idle()
