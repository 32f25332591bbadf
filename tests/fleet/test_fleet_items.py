"""Page handlers in a fleet: every worker runs the handler on the pages it fetches and
writes their items to its own items.jsonl, each exactly once across kill -9 of a worker
and its resume (which runs the stored handler), ``resize`` carries them with their
pages to the new owners, and ``--on-error stop`` fails only the worker whose handler
raised, as the README says.

Workers are child processes (``python -m crawler``) on a real redis-server; the site
is served by the test and counts every request.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from crawler.core.outputs.output import read_pages
from crawler.wire.owner import owner_of
from dedup import UrlSeen
from dedup.journal.format import State
from dedup.store.seen import host_of
from tests.crawler.core.durability.test_exactly_once import output_grew
from tests.support.fleetrun import (
    SLOW_SPEC,
    check_exact,
    ctrl_c,
    finish,
    fleet_files,
    fleet_worker_dirs,
    make_fleet,
    owned_site,
    served_at_least,
    start_fleet,
    worker_settings,
)
from tests.support.helpers import REPO, run_cli, start_cli
from tests.support.redisserver import require_redis_binary

pytestmark = pytest.mark.redis

HOOKS = '''
def parts(page):
    # two items per page, so a torn or duplicated group shows
    yield {"url": page.url, "part": 1, "status": page.status}
    yield {"url": page.url, "part": 2, "links": len(page.links)}
'''


def hooks_env(tmp_path: Path) -> dict[str, str | None]:
    (tmp_path / "fleet_hooks.py").write_text(HOOKS)
    return {"PYTHONPATH": f"{tmp_path}:{REPO}"}


def check_items(dirs: list[Path]) -> int:
    """Each worker's items.jsonl holds the two items of every page with a response in
    its pages.jsonl, each once, and of no other page; returns the items in all."""
    workers = len(dirs)
    total = 0
    for i, d in enumerate(dirs):
        records = read_pages(d / "pages.jsonl")
        answered = {r["url"] for r in records if r["status"] is not None}
        assert answered, d  # every worker owns hosts
        items = [json.loads(line) for line in (d / "items.jsonl").read_bytes().split(b"\n")
                 if line]  # a torn line fails here
        parts = Counter((x["url"], x["part"]) for x in items)
        assert [k for k, n in parts.items() if n > 1] == [], d  # no item twice
        assert set(parts) == {(u, p) for u in answered for p in (1, 2)}, d  # none lost
        assert all(owner_of(host_of(u), workers) == i for u, _ in parts), d
        assert {r["url"]: r["items"] for r in records if r["status"] is not None} == \
            dict.fromkeys(answered, 2)
        total += len(items)
    return total


@pytest.mark.slow
async def test_each_worker_runs_the_handler_exactly_once_across_kill9_and_resume(
        tmp_path, redis_server):
    env = hooks_env(tmp_path)
    async with owned_site(SLOW_SPEC, 3) as running:
        fleet = make_fleet(tmp_path, running, redis_server.url, 3)
        procs = [await fleet.start(i, "--handler", "fleet_hooks:parts", env=env)
                 for i in range(3)]
        # each joined (its state dir is made after): a kill must hit a crawling worker
        await fleet.joined()
        kills = 0
        for n in (60, 130, 200):
            await served_at_least(running, n)
            await output_grew(procs[1], fleet.dir(1) / "items.jsonl")  # a group is written
            if procs[1].returncode is None:
                procs[1].kill()
                kills += 1
            await procs[1].wait()
            # no --handler: the one the worker was started with is stored
            procs[1] = await fleet.resume(1, env=env)
        assert kills >= 2
        results = await finish(procs)
        assert all(rc == 0 for rc, _ in results), results
        check_exact(fleet.dirs, running, max_refetches=6 * kills)
    assert check_items(fleet.dirs) == 2 * sum(
        r["status"] is not None for d in fleet.dirs for r in read_pages(d / "pages.jsonl"))


@pytest.mark.slow
async def test_fleet_handler_items_follow_their_pages_through_resize_and_merge(tmp_path):
    require_redis_binary()
    env = hooks_env(tmp_path)
    async with owned_site(SLOW_SPEC, 4) as running:
        seeds, config = fleet_files(tmp_path, running.seeds)
        f2, f4, f2b = tmp_path / "f2", tmp_path / "f4", tmp_path / "f2b"
        proc = await start_fleet(seeds, f2, 2, config, "--handler", "fleet_hooks:parts",
                                 env=env)
        await served_at_least(running, 100)
        await ctrl_c(proc)
        before = check_items(fleet_worker_dirs(f2))
        # a line past the committed size, as a kill -9 mid-group leaves: never carried
        with open(f2 / "worker-0" / "items.jsonl", "ab") as fh:
            fh.write(b'{"url": "http://uncommitted.test/", "part": 1}\n')
        done = await run_cli("resize", "--from-state", str(f2), "--to", "4", "-o", str(f4))
        assert done.rc == 0, done.stderr
        assert check_items(fleet_worker_dirs(f4)) == before  # split by their pages' hosts
        done = await run_cli("resume", str(f4), "--quiet", env=env)  # the stored handler
        assert done.rc == 0, done.stderr
        check_exact(fleet_worker_dirs(f4), running, max_refetches=0)
    total = check_items(fleet_worker_dirs(f4))
    assert total > before
    done = await run_cli("resize", "--from-state", str(f4), "--to", "2", "-o", str(f2b))
    assert done.rc == 0, done.stderr
    assert check_items(fleet_worker_dirs(f2b)) == total  # joined two by two
    merged = tmp_path / "merged"
    done = await run_cli("merge", "--state", "-o", str(merged),
                         *map(str, fleet_worker_dirs(f2b)))
    assert done.rc == 0, done.stderr
    assert check_items([merged]) == total  # one process's: every page's items, once


FAILING = '''
BAD = {bad!r}

def parts(page):
    if page.url == BAD:
        raise ValueError("no title on " + page.url)
    yield {{"url": page.url, "part": 1, "status": page.status}}
    yield {{"url": page.url, "part": 2, "links": len(page.links)}}
'''


@pytest.mark.slow
async def test_on_error_stop_in_a_fleet_fails_the_worker_which_is_restarted_then_stops_all(
        tmp_path):
    """README: with ``--on-error stop`` the worker whose handler raised exits 1 like a
    failed worker: ``fleet`` restarts it (``max_restarts``), then stops the others,
    resumable; the failing page is not recorded and stays queued, what was committed
    keeps its items once, and ``resume`` with the handler fixed goes on to the end."""
    require_redis_binary()
    env = hooks_env(tmp_path) | {"PYTHONDONTWRITEBYTECODE": "1"}  # the fix is seen
    async with owned_site(SLOW_SPEC, 2) as running:
        origin = next(o for o in running.origins if owner_of(host_of(o + "/"), 2) == 1)
        bad = origin + "/p/1.html"  # a nav link of every page: reached early, at depth 1
        (tmp_path / "fleet_hooks.py").write_text(FAILING.format(bad=bad))
        seeds, config = fleet_files(tmp_path, running.seeds, worker_settings().with_values(
            distributed={"max_restarts": 1}))
        root = tmp_path / "f"
        ((rc, err),) = await finish([await start_fleet(
            seeds, root, 2, config, "--handler", "fleet_hooks:parts", "--on-error", "stop",
            env=env)])
        assert rc == 1, err
        failed = f"[worker 1] bloomcrawl: error: the page handler failed on {bad}"
        assert err.count(failed) == 2, err  # the first run and its one restart
        assert err.count(f"ValueError: no title on {bad}") >= 2, err  # the traceback
        assert "worker 1 exited with status 1; resuming it (restart 1 of 1)" in err
        assert "worker 1 exited with status 1 2 times; stopping the others" in err
        assert f"worker 1 exited with status 1; continue with: bloomcrawl resume {root}" in err
        assert "[worker 0] bloomcrawl: error" not in err  # stopped, not failed
        # worker 1's last figures: its queue is counted in the fleet's summary
        (line,) = [ln for ln in err.splitlines() if ln.startswith("  worker 1: ")]
        assert "(aborted)" in line and " 0 still queued" not in line, err
        assert running.total_pages()[bad] == 2
        dirs = fleet_worker_dirs(root)
        committed = check_items(dirs)  # the pages committed so far: their items once each
        assert bad not in {r["url"] for d in dirs for r in read_pages(d / "pages.jsonl")}
        with UrlSeen(dirs[1], readonly=True) as seen:
            assert (bad, State.QUEUED) in {(r.url, r.state) for r in seen.ledger.rows()}
        assert len(running.total_pages()) < len(running.site.reachable().fetched)  # work left

        (tmp_path / "fleet_hooks.py").write_text(HOOKS)  # the handler fixed
        ((rc, err),) = await finish([await start_cli("resume", str(root), "--quiet", env=env)])
        assert rc == 0, err
        check_exact(dirs, running, max_refetches=2)  # the failing page, by each run
        assert running.total_pages()[bad] == 3
    assert check_items(dirs) > committed
    assert [r["items"] for r in read_pages(dirs[1] / "pages.jsonl") if r["url"] == bad] == [2]
