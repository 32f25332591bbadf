"""A crawl's lifecycle from the command line: starting (atomically, after every check),
being killed while starting, and resuming with new limits."""

from __future__ import annotations

import asyncio
import random
import socket
from collections import Counter

import pytest

from crawler.cli.main import main
from crawler.core.outputs.output import read_pages
from crawler.core.state.crawlstate import CrawlState
from dedup import UrlSeen
from dedup.store.statedir import is_state_dir
from tests.crawler.cli.test_cli import one_error_line
from tests.crawler.core.state.test_resume import setup_crawl
from tests.support.helpers import run_cli, start_cli, write_seeds


async def test_resume_stores_new_limits_and_refuses_frozen_flags(tmp_path, small_site):
    seeds, config, state = setup_crawl(tmp_path, small_site)
    first = await run_cli("crawl", str(seeds), "--state", str(state), "--config", str(config),
                          "--max-pages", "5", "--quiet")
    assert first.rc == 0, first.stderr
    assert len(read_pages(state / "pages.jsonl")) == 5
    more = await run_cli("resume", str(state), "--max-pages", "12", "--delay", "0.01",
                         "--per-host", "1", "--concurrency", "3", "--max-depth", "9",
                         "--quiet")
    assert more.rc == 0, more.stderr
    assert len(read_pages(state / "pages.jsonl")) == 12  # max pages counts the whole crawl
    with UrlSeen(state, readonly=True) as seen:
        stored = CrawlState(seen.records).settings()
    assert stored["crawl"]["max_pages"] == 12 and stored["crawl"]["max_depth"] == 9
    assert stored["crawl"]["concurrency"] == 3
    assert stored["politeness"] == stored["politeness"] | {"per_host": 1, "delay": 0.01}
    again = await run_cli("resume", str(state), "--quiet")  # keeps the stored values
    assert again.rc == 0, again.stderr
    assert len(read_pages(state / "pages.jsonl")) == 12
    for flag in (["--allow-domain", "example.org"], ["--warc", str(tmp_path / "w.warc")],
                 ["--cookies"]):
        refused = await run_cli("resume", str(state), *flag)
        assert refused.rc == 2, refused.stderr
        assert f"resume cannot change {flag[0]}" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    bad = await run_cli("resume", str(state), "--max-pages", "-1")
    assert bad.rc == 2 and "--max-pages" in bad.stderr


async def test_a_crawl_at_its_page_limit_says_to_resume_with_a_higher_one(tmp_path,
                                                                         small_site):
    """A plain resume of a crawl at its limit fetches nothing: the summary says which
    resume goes on (the same words as a fleet's)."""
    seeds, config, state = setup_crawl(tmp_path, small_site)
    for argv in (["crawl", str(seeds), "--state", str(state), "--config", str(config),
                  "--max-pages", "5"], ["resume", str(state)]):
        done = await run_cli(*argv)
        assert done.rc == 0, done.stderr
        assert ("(its page limit is reached; continue with a higher one: bloomcrawl resume "
                f"{state} --max-pages N)") in done.stderr
    assert len(read_pages(state / "pages.jsonl")) == 5


# -- a start that fails or is killed leaves nothing that crawl/resume refuse ---------------


def bad_config_status(tmp_path, seeds) -> int:
    """What `crawl` exits with for any other configuration error (the exit-code scheme)."""
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[fetch]\ntimeout = 3\n")
    return main(["crawl", str(seeds), "--state", str(tmp_path / "x"), "--config", str(cfg)])


def test_a_capacity_beyond_the_machines_memory_is_one_line_naming_the_memory(tmp_path,
                                                                              capsys):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/"])
    expected = bad_config_status(tmp_path, seeds)
    capsys.readouterr()
    cfg = tmp_path / "c.toml"
    cfg.write_text("[dedup]\ncapacity = 100_000_000_000\n")
    state = tmp_path / "state"
    rc = main(["crawl", str(seeds), "--state", str(state), "--config", str(cfg)])
    line = one_error_line(capsys.readouterr().err)
    assert rc == expected != 0
    assert "dedup.capacity 100_000_000_000" in line and "GiB of memory" in line
    assert not state.exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "bad.toml", "c.toml", "seeds.txt"]


async def test_an_unwritable_warc_path_is_named_and_the_state_dir_stays_usable(tmp_path,
                                                                               small_site):
    seeds, config, state = setup_crawl(tmp_path, small_site)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    args = ["crawl", str(seeds), "--state", str(state), "--config", str(config), "--quiet",
            "--max-pages", "3"]
    bad = await run_cli(*args, "--warc", str(blocker / "out.warc"))
    assert bad.rc != 0 and "WARC file (--warc)" in one_error_line(bad.stderr)
    assert not state.exists()
    good = await run_cli(*args, "--warc", str(tmp_path / "w" / "out.warc"))
    assert good.rc == 0, good.stderr
    assert len(read_pages(state / "pages.jsonl")) == 3


@pytest.mark.slow
async def test_kill9_while_starting_never_wedges_the_state_dir(tmp_path, small_site):
    rng = random.Random(5)
    seeds, config, _ = setup_crawl(tmp_path, small_site)
    outcomes = Counter()
    for i in range(10):
        state = tmp_path / f"state{i}"
        args = ["crawl", str(seeds), "--state", str(state), "--config", str(config),
                "--quiet", "--max-pages", "40"]
        proc = await start_cli(*args)
        # Even rounds kill within ~5 ms of the build dir appearing (mid-build), odd
        # rounds within ~50 ms of the state dir's rename: both outcomes happen
        # however slow the machine is, which a fixed window after the first sign
        # of the build did not guarantee.
        names = (f".{state.name}", state.name) if i % 2 == 0 else (state.name,)
        while proc.returncode is None and not any(
                p.name.startswith(names) for p in tmp_path.iterdir()):
            await asyncio.sleep(0.0005)
        await asyncio.sleep(rng.uniform(0, 0.005 if i % 2 == 0 else 0.05))
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        if is_state_dir(state):
            outcomes["state dir"] += 1
            after = await run_cli("resume", str(state), "--quiet")
        else:
            outcomes["nothing"] += 1
            assert not state.exists() or not any(state.iterdir())
            after = await run_cli(*args)
        assert after.rc == 0, (i, after.stderr)
        urls = [r["url"] for r in read_pages(state / "pages.jsonl")]
        assert len(urls) == len(set(urls))
        with UrlSeen(state, readonly=True) as seen:
            counts = seen.ledger.counts()
        assert counts["fetched"] + counts["failed"] == 40
        assert counts["fetched"] + counts["failed"] + counts["skipped"] == len(urls)
    assert outcomes["state dir"] and outcomes["nothing"], outcomes
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # a later start removed the dead builds


def test_fleet_with_an_unreachable_redis_creates_nothing(tmp_path, capsys):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/"])
    state = tmp_path / "fleet"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["fleet", str(seeds), "--state", str(state), "--workers", "2",
                 "--redis", f"redis://127.0.0.1:{port}/0"]) == 1
    assert "cannot reach Redis at redis://127.0.0.1" in one_error_line(capsys.readouterr().err)
    assert not state.exists()
