"""UnderWay: the one test of "nothing is left to crawl" (frontier, pages under way,
fleet deliveries), and the call that lets the engine see it turn at once."""

from __future__ import annotations

import asyncio

import pytest

from crawler.core.run.underway import UnderWay
from crawler.core.schedule.frontier import Frontier
from crawler.core.schedule.politeness import Politeness
from crawler.core.state.crawlstate import CrawlState
from dedup import State, UrlSeen


@pytest.fixture
def seen(tmp_path):
    with UrlSeen(tmp_path / "s", capacity=10_000, shards=2) as s:
        yield s


async def test_a_page_is_under_way_until_its_commit_returns(seen):
    changes: list[bool] = []
    f = Frontier(CrawlState(seen.records), Politeness(), on_idle=lambda: None)
    under_way = UnderWay(f, lambda: changes.append(under_way.idle()))
    f.add(seen.admit(["http://a.test/1"]))
    assert not under_way.idle()  # something to hand out
    item = await asyncio.wait_for(f.get(), 1.0)
    with under_way.page():
        f.done(item)
        assert f.finished() and not under_way.idle()  # its links are not admitted yet
        new = seen.admit(["http://a.test/2"], depth=1)  # its group commit
        seen.records.record_outcomes([(item.seq, State.FETCHED, 200, None)])
        f.add(new)
        f.settled([item.seq])
    assert changes == [False]  # the link it found is left to fetch
    item = await asyncio.wait_for(f.get(), 1.0)
    with under_way.page():
        f.done(item)
    assert changes == [False, True]
    assert under_way.idle()


async def test_a_delivery_is_under_way_until_acked(seen):
    changes: list[bool] = []
    f = Frontier(CrawlState(seen.records), Politeness(), on_idle=lambda: None)
    under_way = UnderWay(f, lambda: changes.append(under_way.idle()))
    assert under_way.idle()
    with under_way.delivery():
        assert not under_way.idle()
    assert changes == [True]


async def test_an_error_inside_still_ends_the_page(seen):
    f = Frontier(CrawlState(seen.records), Politeness(), on_idle=lambda: None)
    under_way = UnderWay(f)
    with pytest.raises(RuntimeError), under_way.page():
        raise RuntimeError("disk full")
    assert under_way.pages == 0 and under_way.idle()
