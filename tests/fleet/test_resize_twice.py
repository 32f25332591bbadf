"""``resize`` twice from the same stopped fleet: the source and both copies resume and
finish the crawl exactly (issue 11 #13)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from crawler.demo.serve import RunningSite
from crawler.demo.site import Site
from tests.support.fleetrun import (
    SLOW_SPEC,
    check_exact,
    ctrl_c,
    fleet_files,
    fleet_worker_dirs,
    owned_site,
    served_at_least,
    start_fleet,
)
from tests.support.helpers import run_cli
from tests.support.redisserver import require_redis_binary


@dataclass
class OneCopy:
    """The site as one copy of the fleet saw it: the requests before the stop and its
    own after, for ``check_exact`` when several copies resume against one site."""

    running: RunningSite
    pages: Counter[str]

    @property
    def site(self) -> Site:
        return self.running.site

    def total_pages(self) -> Counter[str]:
        return self.pages


async def stopped_fleet(tmp_path, running, src, *extra: str) -> None:
    """A fleet of 2 in ``src``, stopped by Ctrl-C part way through (resumable)."""
    seeds, config = fleet_files(tmp_path, running.seeds)
    proc = await start_fleet(seeds, src, 2, config, *extra)
    await served_at_least(running, 60)
    await ctrl_c(proc)


@pytest.mark.slow
async def test_resize_twice_from_one_fleet_leaves_it_and_both_copies_resumable(tmp_path):
    require_redis_binary()
    async with owned_site(SLOW_SPEC, 2) as running:
        src, a, b = tmp_path / "f2", tmp_path / "a", tmp_path / "b"
        await stopped_fleet(tmp_path, running, src)
        stopped = running.total_pages()  # what every copy has fetched so far
        for out in (a, b):
            done = await run_cli("resize", "--from-state", str(src), "--to", "1", "-o",
                                 str(out))
            assert done.rc == 0, done.stderr
        # the source (after both resizes) and each copy finish the crawl on their own,
        # one after the other against the same site: each fetches what it lacked
        for state in (src, a, b):
            before = running.total_pages()
            done = await run_cli("resume", str(state), "--quiet")
            assert done.rc == 0, done.stderr
            assert done.stderr == ""
            own = OneCopy(running, stopped + (running.total_pages() - before))
            check_exact(fleet_worker_dirs(state), own, max_refetches=2 * 8)
        assert len(fleet_worker_dirs(a)) == len(fleet_worker_dirs(b)) == 1


@pytest.mark.slow
async def test_resize_twice_from_a_fleet_on_a_shared_redis_is_refused_by_name(tmp_path,
                                                                              redis_server):
    async with owned_site(SLOW_SPEC, 2) as running:
        src, a, b = tmp_path / "f2", tmp_path / "a", tmp_path / "b"
        await stopped_fleet(tmp_path, running, src, "--redis", redis_server.url)
        done = await run_cli("resize", "--from-state", str(src), "--to", "1", "-o", str(a))
        assert done.rc == 0, done.stderr
        # its links in the shared Redis now belong to the resized fleet
        for argv in (["resize", "--from-state", str(src), "--to", "1", "-o", str(b)],
                     ["resume", str(src)], ["resume", str(src / "worker-1")]):
            again = await run_cli(*argv)
            assert again.rc == 1, again.stderr
            assert f"was resized into {a}" in again.stderr, again.stderr
            assert f"bloomcrawl resume {a}" in again.stderr
        assert not b.exists()
        done = await run_cli("resume", str(a), "--quiet")
        assert done.rc == 0, done.stderr
        check_exact(fleet_worker_dirs(a), running, max_refetches=2 * 8)
