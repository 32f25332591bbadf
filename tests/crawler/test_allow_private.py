"""A crawl of a loopback site without --allow-private (issue 36, item 8): every page is
refused, the summary and pages.jsonl say which flag fetches it, nothing is counted as
"given up", and ``resume DIR --allow-private`` fetches the refused pages
and what they link to, each URL ending with one line in pages.jsonl, as a retried URL
does (it was a dead end: resume refused the flag as frozen)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest

from crawler.core.outputs.output import read_pages
from crawler.core.run.crawl import Crawler
from crawler.core.state.state import CONFIG_KEY, REWRITE_FILE, committed_pages
from crawler.demo.site import SiteSpec
from dedup import UrlSeen
from tests.support.helpers import REPO, cli_env, config_toml, fast_settings, run_cli, write_seeds

SPEC = SiteSpec(hosts=2, pages=40, seed=31)


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "crawl.toml"
    config.write_text(config_toml(fast_settings(fetch={"allow_private": False})))
    return config


def _keys(state: Path) -> Counter[str]:
    with UrlSeen(state, readonly=True) as seen:
        return Counter(seen.canonicalizer.resolve(r["url"])[1]
                       for r in read_pages(state / "pages.jsonl"))


async def _stats(state: Path) -> dict:
    res = await run_cli("stats", str(state), "--json")
    assert res.rc == 0, res.stderr
    return json.loads(res.stdout)


def _exact(state: Path, running) -> None:
    """Every reachable URL has exactly one line, none a refusal; the server saw each
    page once."""
    want = running.site.reachable()
    keys = _keys(state)
    assert set(keys) == want.fetched | want.robots_blocked and max(keys.values()) == 1
    assert not [r for r in read_pages(state / "pages.jsonl")
                if "refused private" in (r["error"] or "")]
    server = running.total_pages()
    assert set(server) == set(want.fetched) and max(server.values()) == 1


async def test_refused_seeds_name_the_flag_and_resume_with_it_crawls_them(tmp_path, site):
    async with site(SPEC) as running:
        # two seeds by address (refused before any request) and one by name: "localhost"
        # is refused by the resolver's guard, first for its robots.txt
        local = running.seeds[0].replace("127.0.0.1", "localhost")
        seeds = write_seeds(tmp_path / "seeds.txt", [*running.seeds, local])
        state = tmp_path / "s"
        first = await run_cli("crawl", str(seeds), "--state", str(state), "--config",
                              str(_config(tmp_path)))
        assert first.rc == 3, first.stderr  # not everything was crawled
        assert sum(running.total_pages().values()) == 0
        assert "given up" not in first.stderr  # nothing was retried
        assert (f"refused (whole crawl): 3 URL(s) on private, loopback or link-local "
                f"addresses; fetch them with: bloomcrawl resume {state} --allow-private"
                ) in first.stderr
        errors = [r["error"] for r in read_pages(state / "pages.jsonl")]
        assert errors == ["refused private address 127.0.0.1 (needs --allow-private)"] * 3
        stats = await _stats(state)
        assert (stats["given_up"], stats["refused"], stats["failed"]) == (0, 3, 3)

        again = await run_cli("resume", str(state), "--allow-private")
        assert again.rc == 0, again.stderr
        assert "3 URL(s) refused as private addresses are queued again" in again.stderr
        assert "refused (whole crawl)" not in again.stderr
        stats = await _stats(state)
        assert (stats["given_up"], stats["refused"], stats["failed"], stats["queued"]) == \
            (0, 0, 0, 0)
        # the site's pages, each once; the localhost seed's own pages too
        records = read_pages(state / "pages.jsonl")
        assert stats["fetched"] + stats["skipped"] == len(records)  # skipped: robots.txt
        keys = _keys(state)
        assert max(keys.values()) == 1
        assert any(r["url"] == local and r["status"] == 200 for r in records)
        want = running.site.reachable()
        assert {k for k in keys if "localhost" not in k} == \
            want.fetched | want.robots_blocked

        size = (state / "pages.jsonl").stat().st_size
        third = await run_cli("resume", str(state), "--allow-private", "--quiet")
        assert third.rc == 0 and third.stderr == ""
        assert (state / "pages.jsonl").stat().st_size == size


async def _refused_below_the_seeds(tmp_path: Path, running) -> Path:
    """A crawl whose pages past the first 5 were refused as private addresses: started
    with private addresses allowed and stopped at 5 pages, then resumed as if it had been
    started without them (the frozen setting turned off: refused links, not seeds, with
    their depth and referrer)."""
    seeds = write_seeds(tmp_path / "seeds.txt", running.seeds)
    config = tmp_path / "crawl.toml"
    config.write_text(config_toml(fast_settings()))
    state = tmp_path / "s"
    res = await run_cli("crawl", str(seeds), "--state", str(state), "--config", str(config),
                        "--max-pages", "5", "--quiet")
    assert res.rc == 0, res.stderr
    with UrlSeen(state, create=False) as seen:
        frozen = seen.meta_get(CONFIG_KEY)
        frozen["fetch"]["allow_private"] = False
        frozen["crawl"]["max_pages"] = 0
        seen.meta_set(CONFIG_KEY, frozen)
        seen.commit()
    res = await run_cli("resume", str(state), "--quiet")
    assert res.rc == 3, res.stderr
    refused = [r for r in read_pages(state / "pages.jsonl") if r["error"]
               and r["error"].startswith("refused private")]
    assert refused and all(r["depth"] >= 1 and r["referrer"] for r in refused)
    return state


@pytest.mark.parametrize("how", ["resume", "script run again"])
async def test_refused_links_are_fetched_at_their_depth_with_their_referrer(
        tmp_path, site, how):
    async with site(SPEC) as running:
        state = await _refused_below_the_seeds(tmp_path, running)
        before = {r["url"]: r for r in read_pages(state / "pages.jsonl")}
        crawl = Crawler(state=state, allow_private=True) if how == "resume" else \
            Crawler(running.seeds, state=state, config=fast_settings().to_dict(),
                    allow_private=True)  # the script that started it, run again
        async with crawl:
            reopened = crawl.reopened
            await crawl.run()
        assert reopened == sum(1 for r in before.values()
                               if (r["error"] or "").startswith("refused private"))
        _exact(state, running)
    want = running.site.reachable()
    with UrlSeen(state, readonly=True) as seen:
        for r in read_pages(state / "pages.jsonl"):
            assert r["depth"] == want.depth[seen.canonicalizer.resolve(r["url"])[1]]
            if (before.get(r["url"], {}).get("error") or "").startswith("refused"):
                assert r["referrer"] == before[r["url"]]["referrer"]


# Opens a crawl to resume with --allow-private, killed with SIGKILL at a chosen point
# of the reopening: just before the ledger commits it, or after that commit and before
# the copy of pages.jsonl is renamed into place.
_KILLED_AT = """
import os, signal, sys
from crawler.core.run.crawl import Crawler
from crawler.core.state import reopen
from crawler.core.state.state import REWRITE_KEY
from dedup import UrlSeen

def kill(): os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[2] == "commit":
    commit = UrlSeen.commit
    def before_commit(self):
        if self.meta_get(REWRITE_KEY):
            kill()
        commit(self)
    UrlSeen.commit = before_commit
else:
    finish = reopen.finish_rewrite
    def before_rename(seen):
        if seen.meta_get(REWRITE_KEY):
            kill()
        finish(seen)
    reopen.finish_rewrite = before_rename
Crawler(state=sys.argv[1], allow_private=True).open()
"""


@pytest.mark.parametrize("at", ["commit", "rename"])
async def test_a_kill_inside_the_reopening_loses_and_duplicates_nothing(tmp_path, site, at):
    """Killed before the ledger commits the reopening (the copy of pages.jsonl is left
    behind: deleted, and a resume reopens again), or after the commit and before the
    copy is renamed into place (the next open finishes the rename; readers meanwhile
    read the copy)."""
    async with site(SPEC) as running:
        state = await _refused_below_the_seeds(tmp_path, running)
        committed_before = committed_pages(state)
        script = tmp_path / "killed.py"
        script.write_text(_KILLED_AT)
        proc = await asyncio.create_subprocess_exec(sys.executable, str(script), str(state),
                                                    at, env=cli_env(), cwd=REPO)
        assert await asyncio.wait_for(proc.wait(), 60) == -signal.SIGKILL
        assert (state / REWRITE_FILE).exists()
        kept = [ln for ln in committed_before if b"refused private" not in ln]
        assert committed_pages(state) == (committed_before if at == "commit" else kept)
        res = await run_cli("resume", str(state), *(["--allow-private"] if at == "commit"
                                                     else []), "--quiet")
        assert res.rc == 0, res.stderr
        assert not (state / REWRITE_FILE).exists()
        _exact(state, running)


def test_resume_of_a_fleet_hands_allow_private_to_each_worker_as_a_flag():
    """``resume FLEETDIR --allow-private`` resumes each worker with the flag (not with
    "--allow-private True", which a worker's parser would refuse)."""
    from crawler.cli.args import resume_flags
    from crawler.cli.main import build_parser

    args = build_parser().parse_args(["resume", "fleet", "--allow-private", "--max-pages", "5"])
    assert resume_flags(args) == ["--max-pages", "5", "--allow-private"]
    assert build_parser().parse_args(["resume", "fleet/worker-0", *resume_flags(args)])
    assert resume_flags(build_parser().parse_args(["resume", "fleet"])) == []
