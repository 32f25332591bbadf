"""Crash and stop, then resume: nothing lost, refetches bounded by what was in flight.

The crawl runs as a child process (``python -m crawler``) against a generated
site served by this test's event loop, so the site keeps serving while the
crawler is killed with SIGKILL or stopped with SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import random
import signal
from collections import Counter

import pytest

from crawler.core.outputs.output import read_pages, repair_tail
from crawler.demo.site import SiteSpec
from dedup import UrlSeen
from tests.support.helpers import config_toml, fast_settings, run_cli, start_cli, write_seeds
from tests.support.killloop import kill_at

CONCURRENCY = 8
SPEC = SiteSpec(hosts=4, pages=90, seed=21, delay=0.03)


def crash_settings():
    return fast_settings(crawl={"concurrency": CONCURRENCY},
                         politeness={"per_host": 2, "delay": 0.0},
                         snapshot={"interval": 0.3, "every_new_urls": 50})


def setup_crawl(tmp_path, running):
    seeds = write_seeds(tmp_path / "seeds.txt", running.seeds)
    config = tmp_path / "crawl.toml"
    config.write_text(config_toml(crash_settings()))
    return seeds, config, tmp_path / "state"


async def requests_seen(running) -> int:
    return sum(running.total_pages().values())


async def run_until(proc, running, n: int, timeout: float = 30.0) -> None:
    """Wait until the site has served ``n`` page requests in all (or the process ended)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while await requests_seen(running) < n and proc.returncode is None:
        assert loop.time() < deadline, "crawl made no progress"
        await asyncio.sleep(0.005)


def final_check(tmp_path, running, *, max_refetches: int) -> None:
    want = running.site.reachable()
    records = read_pages(tmp_path / "state" / "pages.jsonl")
    with UrlSeen(tmp_path / "state", readonly=True) as seen:
        keys = Counter(seen.canonicalizer.resolve(r["url"])[1] for r in records)
        counts = seen.ledger.counts()
    assert set(keys) == want.fetched | want.robots_blocked  # nothing lost, nothing extra
    assert counts["queued"] == 0
    server = running.total_pages()
    assert set(server) == set(want.fetched)
    refetched = sum(n - 1 for n in server.values())
    assert refetched <= max_refetches, server.most_common(5)
    assert sum(n - 1 for n in keys.values()) <= max_refetches


@pytest.mark.slow
async def test_kill9_at_random_moments_then_resume_loses_nothing(tmp_path, site):
    rng = random.Random(2024)
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        total = len(running.site.reachable().fetched)
        moments = sorted(rng.sample(range(10, total - 40), 3))
        args = ["crawl", str(seeds), "--state", str(state), "--config", str(config), "--quiet"]
        kills, args = await kill_at(args, state, moments,
                                    lambda proc, n: run_until(proc, running, n))
        assert kills == 3
        done = await run_cli(*args)
        assert done.rc == 0, done.stderr
        assert done.stderr == ""  # --quiet
        final_check(tmp_path, running, max_refetches=kills * CONCURRENCY)


@pytest.mark.slow
async def test_sigint_stops_gracefully_and_resume_finishes_without_refetching(tmp_path, site):
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        proc = await start_cli("crawl", str(seeds), "--state", str(state), "--config",
                               str(config))
        await run_until(proc, running, 60)
        assert proc.returncode is None
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 20)
        assert proc.returncode == 128 + signal.SIGINT, err  # 130: interrupted, resumable
        err_text = err.decode()
        assert "SIGINT: stopping" in err_text and "stopped by SIGINT" in err_text
        assert "bloomcrawl resume" in err_text  # the summary says how to continue
        with UrlSeen(state, readonly=True) as seen:
            assert seen.ledger.counts()["queued"] > 0
        done = await run_cli("resume", str(state), "--quiet")
        assert done.rc == 0, done.stderr
        final_check(tmp_path, running, max_refetches=0)


@pytest.mark.slow
async def test_a_second_signal_exits_at_once_and_the_crawl_still_resumes(tmp_path, site):
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        proc = await start_cli("crawl", str(seeds), "--state", str(state), "--config",
                               str(config), "--quiet")
        await run_until(proc, running, 40)
        proc.send_signal(signal.SIGTERM)  # two different signals are never merged
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 10)
        # 128 + the signal handled second (the kernel may deliver them in either order)
        assert proc.returncode in (128 + signal.SIGINT, 128 + signal.SIGTERM), err
        assert "exiting now" in err.decode()
        done = await run_cli("resume", str(state), "--quiet")
        assert done.rc == 0, done.stderr
        final_check(tmp_path, running, max_refetches=CONCURRENCY)


async def test_resume_of_a_finished_crawl_fetches_nothing(tmp_path, site):
    async with site(SiteSpec(hosts=1, pages=5, seed=22)) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        first = await run_cli("crawl", str(seeds), "--state", str(state), "--config",
                              str(config), "--quiet")
        assert first.rc == 0, first.stderr
        before = running.total_pages()
        again = await run_cli("resume", str(state))
        assert again.rc == 0, again.stderr
        assert running.total_pages() == before
        assert "0 pages this run" in again.stderr
        final_check(tmp_path, running, max_refetches=0)


def test_a_torn_last_line_is_cut_before_appending(tmp_path):
    path = tmp_path / "pages.jsonl"
    path.write_bytes(b'{"url": "a"}\n{"url": "b"}\n{"url": "c", "sta')
    assert repair_tail(path) == len(b'{"url": "c", "sta')
    assert path.read_bytes() == b'{"url": "a"}\n{"url": "b"}\n'
    assert repair_tail(path) == 0
    path.write_bytes(b"no newline at all")
    assert repair_tail(path) == len(b"no newline at all") and path.read_bytes() == b""
