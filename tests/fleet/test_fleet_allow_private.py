"""A fleet of a loopback site started without --allow-private (issue 36, item 8, for a
fleet): every seed is refused, the fleet's summary names the flag, nothing is fetched,
and ``resume FLEETDIR --allow-private`` crawls the whole site, each page once, by its
owner, with one line a URL."""

from __future__ import annotations

from crawler.core.outputs.output import read_pages
from crawler.demo.site import SiteSpec
from tests.support.fleetrun import (
    check_exact,
    finish,
    fleet_files,
    fleet_worker_dirs,
    owned_site,
    start_fleet,
    worker_settings,
)
from tests.support.helpers import run_cli
from tests.support.redisserver import require_redis_binary


async def test_a_fleet_refused_its_private_seeds_resumes_with_allow_private(tmp_path):
    require_redis_binary()  # the fleet starts its own redis-server
    async with owned_site(SiteSpec(hosts=4, pages=30, seed=31), 2) as running:
        seeds, config = fleet_files(tmp_path, running.seeds, worker_settings().with_values(
            fetch={"allow_private": False}))
        root = tmp_path / "fleet"
        [(rc, err)] = await finish([await start_fleet(seeds, root, 2, config)])
        assert rc == 3, err  # not everything was crawled
        assert sum(running.total_pages().values()) == 0
        assert "--allow-private" in err, err
        refused = [r for d in fleet_worker_dirs(root) for r in read_pages(d / "pages.jsonl")]
        assert len(refused) == len(running.seeds)
        assert all(r["error"].startswith("refused private") for r in refused)

        done = await run_cli("resume", str(root), "--allow-private", timeout=180)
        assert done.rc == 0, done.stderr
        keys = check_exact(fleet_worker_dirs(root), running, max_refetches=0)
        assert max(keys.values()) == 1  # the refusals' lines gave way to the pages'
