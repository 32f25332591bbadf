"""The ``fleet`` supervisor when a worker dies, and a lone worker waiting for its
fleet (issue 11, item 17): real worker processes, a real redis-server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from crawler.demo.serve import RunningSite, serve_site
from crawler.demo.site import SiteSpec
from crawler.wire.owner import owner_of
from dedup import host_of
from tests.support.fleetrun import (
    SLOW_SPEC,
    check_exact,
    ctrl_c,
    finish,
    fleet_files,
    fleet_worker_dirs,
    kill_worker,
    make_fleet,
    owned_site,
    served_at_least,
    start_fleet,
    stderr_until,
    worker_settings,
)
from tests.support.helpers import run_cli, until
from tests.support.redisserver import require_redis_binary

pytestmark = pytest.mark.redis


@pytest.mark.slow
async def test_a_killed_worker_is_resumed_bounded_then_the_fleet_stops_resumable(tmp_path):
    require_redis_binary()
    async with owned_site(SLOW_SPEC, 3) as running:
        seeds, config = fleet_files(tmp_path, running.seeds, worker_settings().with_values(
            distributed={"max_restarts": 1}))
        root = tmp_path / "f"
        proc = await start_fleet(seeds, root, 3, config)
        err: list[str] = []
        await served_at_least(running, 40)
        pages = root / "worker-1" / "pages.jsonl"  # it has started crawling, not only starting
        await until(lambda: pages.exists() and pages.stat().st_size > 0, timeout=60,
                    what="worker 1 to record pages")
        await kill_worker(proc, 1)
        await stderr_until(proc, "resuming it (restart 1 of 1)", seen=err)
        served = sum(running.total_pages().values())
        await served_at_least(running, served + 10)  # the fleet goes on
        await kill_worker(proc, 1)  # the resumed one
        await stderr_until(proc, "stopping the others", seen=err)
        ((rc, rest),) = await finish([proc], timeout=60)
        text = "".join(err) + rest
        assert rc == 1, text
        assert f"continue with: bloomcrawl resume {root}" in text
        assert sum(running.total_pages().values()) < len(running.site.reachable().fetched)
        done = await run_cli("resume", str(root), "--quiet")
        assert done.rc == 0, done.stderr
        check_exact(fleet_worker_dirs(root), running, max_refetches=2 * 6)


async def test_a_lone_worker_says_it_waits_for_its_fleet(tmp_path, redis_server):
    async with owned_site(SLOW_SPEC, 2) as running:
        fleet = make_fleet(tmp_path, running, redis_server.url, 2)
        proc = await fleet.start(0)  # worker 1 never comes
        said = (await stderr_until(proc, "waiting for the fleet")).splitlines()[-1]
        assert "1 of 2 workers idle" in said and "bloomcrawl resume" in said
        await ctrl_c(proc)


async def test_a_one_host_fleet_warns_at_start_and_its_idle_worker_only_waits(tmp_path):
    """Issue 37: a fleet splits work by host, so with one seed host one worker has it
    all: ``fleet`` says so at start, naming the worker that will idle; that worker
    says it waits for the fleet, without the advice meant for a worker run by hand
    (the supervisor runs and stops them all)."""
    require_redis_binary()
    async with site_of_one_host() as running:
        busy = owner_of(host_of(running.origins[0] + "/"), 2)
        seeds, config = fleet_files(tmp_path, running.seeds, worker_settings().with_values(
            politeness={"per_host": 1, "delay": 0.05}))
        proc = await start_fleet(seeds, tmp_path / "f", 2, config)
        err: list[str] = []
        said = await stderr_until(proc, "waiting for the fleet", seen=err)
        warnings = [ln.strip() for ln in err if "warning" in ln]
        assert warnings == [(
            f"bloomcrawl: warning: 1 of 2 workers own no seed host (worker {1 - busy}): a "
            "fleet splits work by host, one worker per host, so they wait unless links lead "
            "to other hosts; fewer workers would do the same work")], "".join(err)
        waiting = said.splitlines()[-1]
        assert waiting.startswith(f"[worker {1 - busy}] bloomcrawl: worker {1 - busy}: "
                                  "nothing left to do here; waiting for the fleet")
        assert "Ctrl-C" not in waiting and "resume" not in waiting
        await ctrl_c(proc)


@contextlib.asynccontextmanager
async def site_of_one_host() -> AsyncIterator[RunningSite]:
    """One host whose crawl lasts longer than a worker waits before saying so (5 s)."""
    async with serve_site(SiteSpec(hosts=1, pages=400, seed=4, delay=0.02)) as running:
        yield running
