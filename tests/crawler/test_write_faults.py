"""Write failures (issue 36, item 9): a crawl stopped by one commits nothing of the
group it was in, and its resume is exact."""

from __future__ import annotations

import errno
import importlib.util
import os
import sys

import pytest

from crawler.core.outputs.output import PageLog
from crawler.core.run.crawl import Crawler
from crawler.demo.site import SiteSpec
from dedup import UrlSeen
from tests.support.helpers import REPO, fast_settings

_spec = importlib.util.spec_from_file_location("reliability_checks",
                                               REPO / "bench" / "reliability_checks.py")
checks = importlib.util.module_from_spec(_spec)
sys.modules["reliability_checks"] = checks
_spec.loader.exec_module(checks)

SPEC = SiteSpec(hosts=2, pages=120, seed=41)


async def test_a_crawl_a_failed_write_stops_commits_nothing_of_the_group_it_was_in(
        tmp_path, site, monkeypatch):
    """The group commit admits a group's links in the ledger's open transaction, then
    writes its pages.jsonl lines: when that write fails, closing the state dir
    committed the links without their pages, so the resume refetched those pages and
    found their links "seen" (links_new no longer added up to the admitted URLs). Now
    what a failed crawl had not committed is discarded, as a kill -9 would."""
    settings = fast_settings(crawl={"concurrency": 4})
    async with site(SPEC) as running:
        groups = 0
        append = PageLog.append

        async def fifth_fails(self: PageLog, records: list) -> None:
            nonlocal groups
            groups += 1
            if groups == 5:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            await append(self, records)

        state = tmp_path / "s"
        with monkeypatch.context() as m:
            m.setattr(PageLog, "append", fifth_fails)
            with pytest.raises(OSError, match="Input/output error"):
                await Crawler(running.seeds, state=state, config=settings.to_dict()).run()
        await Crawler(state=state).run()
        want = running.site.reachable()
    pages = checks.check_pages(state / "pages.jsonl")
    assert set(pages.urls) == {checks.canonicalize(u) for u in want.fetched | want.robots_blocked}
    assert checks.duplicates(pages.urls) == 0
    with UrlSeen(state, readonly=True) as seen:
        assert pages.links_new + len(running.seeds) == len(seen)
