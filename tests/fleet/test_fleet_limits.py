"""A fleet stopped by its page limit (issue 37): its summary splits the pages by worker,
``stats FLEETDIR`` shows the fleet and each worker, ``resume FLEETDIR`` says how to go
on, and ``resume FLEETDIR --max-pages N`` does (a limit per worker, as ``fleet``'s).
Real worker processes, the fleet's own redis-server, a generated site."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from crawler.admin.report import state_stats
from crawler.demo.serve import RunningSite
from crawler.demo.site import SiteSpec
from tests.support.fleetrun import (
    check_exact,
    finish,
    fleet_files,
    fleet_worker_dirs,
    owned_site,
    start_fleet,
)
from tests.support.helpers import CliResult, run_cli
from tests.support.redisserver import require_redis_binary

pytestmark = pytest.mark.redis

LIMIT = 15  # pages per worker: each owns a host of 40 pages, so each stops at it


@dataclass
class Limited:
    root: Path
    running: RunningSite
    started: str  # the fleet's stderr, stopped by the limit
    at_limit: list[dict]  # each worker's state_stats then
    stats: CliResult  # stats FLEETDIR then
    stats_json: CliResult
    same: CliResult  # resume FLEETDIR
    more: CliResult  # resume FLEETDIR --max-pages 1000


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Limited:
    """A 2-worker fleet run to its limit, looked at, resumed as is, then with more."""
    require_redis_binary()
    tmp = tmp_path_factory.mktemp("limited")

    async def run() -> Limited:
        async with owned_site(SiteSpec(hosts=4, pages=40, seed=12), 2) as running:
            seeds, config = fleet_files(tmp, running.seeds)
            root = tmp / "f"
            ((rc, err),) = await finish([await start_fleet(
                seeds, root, 2, config, "--max-pages", str(LIMIT), "--crawl-id", "limits")])
            assert rc == 0, err
            at_limit = [state_stats(d) for d in fleet_worker_dirs(root)]
            stats = await run_cli("stats", str(root))
            stats_json = await run_cli("stats", "--json", str(root))
            same = await run_cli("resume", str(root), timeout=120)
            more = await run_cli("resume", str(root), "--max-pages", "1000", timeout=180)
            return Limited(root, running, err, at_limit, stats, stats_json, same, more)

    return asyncio.run(run())


def worker_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("  worker ")]


def test_the_fleet_summary_shows_each_workers_pages(limited):
    lines = worker_lines(limited.started)
    assert len(lines) == 2, limited.started
    for i, (line, st) in enumerate(zip(lines, limited.at_limit, strict=True)):
        assert st["fetched"] + st["failed"] == LIMIT
        assert line.startswith(f"  worker {i}: {LIMIT} pages this run (50%), {LIMIT} "
                               f"fetched in all, {st['queued']} still queued, "), line
    assert f"{2 * LIMIT} pages this run by 2 workers" in limited.started
    assert (f"continue with a higher one: bloomcrawl resume {limited.root} --max-pages N, "
            "N per worker") in limited.started


def test_stats_of_a_fleet_dir_shows_its_totals_and_each_worker(limited):
    assert limited.stats.rc == 0, limited.stats.stderr
    text = limited.stats.stdout
    assert text.startswith(f"fleet limits of 2 workers in {limited.root}\n")
    per = limited.at_limit
    queued = sum(w["queued"] for w in per)
    assert f"  pages (whole crawl): {2 * LIMIT} fetched (" in text and \
        f", {queued} queued, " in text
    links = sum(w["links"] for w in per)
    assert f"  dedup (whole crawl): {links} links checked: {sum(w['new'] for w in per)} " \
        "new" in text
    lines = worker_lines(text)
    assert len(lines) == 2
    for i, (line, w) in enumerate(zip(lines, per, strict=True)):
        assert line.startswith(f"  worker {i}: {w['fetched']} fetched, {w['failed']} failed, "
                               f"{w['skipped']} skipped, {w['queued']} queued"), line
        assert f"page limit {LIMIT} reached" in line
    assert limited.stats_json.rc == 0, limited.stats_json.stderr
    doc = json.loads(limited.stats_json.stdout)
    assert doc["workers"] == 2 and len(doc["per_worker"]) == 2
    for key in ("fetched", "failed", "queued", "links", "new", "repeats"):
        assert doc["totals"][key] == sum(w[key] for w in per), key


def test_resume_of_a_fleet_at_its_limit_says_how_to_go_on(limited):
    assert limited.same.rc == 0, limited.same.stderr
    assert "0 pages this run by 2 workers" in limited.same.stderr
    assert f"bloomcrawl resume {limited.root} --max-pages N" in limited.same.stderr


def test_resume_fleetdir_with_a_higher_limit_continues_to_the_end(limited):
    assert limited.more.rc == 0, limited.more.stderr
    assert "bloomcrawl fleet: finished after" in limited.more.stderr
    dirs = fleet_worker_dirs(limited.root)
    check_exact(dirs, limited.running)  # nothing lost, nothing fetched twice
    for d in dirs:  # the new limit is each worker's, stored for later resumes
        assert state_stats(d)["config"]["crawl"]["max_pages"] == 1000
