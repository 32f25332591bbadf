"""kill -9 while a crawl is learning its hosts' rules, then resume (issue 39): the rules
learned before the kill are still there, pages.jsonl holds each page once, and no
distinct content is lost."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from crawler.core.outputs.output import read_pages
from dedup import UrlSeen
from tests.support.dupsite import build
from tests.support.helpers import config_toml, fast_settings, run_cli, start_cli, write_seeds

CONCURRENCY = 8


def _accepted(state) -> dict[int, tuple[str, str]]:
    with UrlSeen(state, readonly=True) as seen:
        return {r.id: (r.host, str(sorted(r.rule.items()))) for r in seen.records.learned_rules()
                if r.state == "accepted"}


async def _wait_for_rules(proc, state, n: int, timeout: float = 60.0) -> None:
    """Until the crawl's ledger holds ``n`` accepted rules (read, as ``stats`` does)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while proc.returncode is None:
        if (state / "ledger.sqlite").exists():
            try:
                if len(_accepted(state)) >= n:
                    return
            except Exception:  # a ledger being created: look again
                pass
        assert loop.time() < deadline, "the crawl learned no rule"
        await asyncio.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("kills", [1, 3])
async def test_kill9_during_learning_then_resume_keeps_the_rules_and_every_page(
        tmp_path, kills):
    site = build(seed=12, hosts=[{"sid_query", "ref_param", "trailing_slash", "noise"},
                                 {"sid_path", "index_html", "calendar", "noise"}], pages=240)
    async with site.serve() as running:
        seeds = write_seeds(tmp_path / "seeds.txt", running.seeds)
        config = tmp_path / "crawl.toml"
        config.write_text(config_toml(fast_settings(crawl={"concurrency": CONCURRENCY,
                                                           "max_depth": 40})))
        state = tmp_path / "state"
        args = ["crawl", str(seeds), "--state", str(state), "--config", str(config), "--quiet"]
        before: dict[int, tuple[str, str]] = {}
        for k in range(kills):
            proc = await start_cli(*args)
            await _wait_for_rules(proc, state, len(before) + 1)
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            before = _accepted(state)
            args = ["resume", str(state), "--quiet"]
            assert before, f"kill {k}: nothing learned yet"
        done = await run_cli(*args, timeout=120)
        assert done.rc == 0, done.stderr
        after = _accepted(state)
        found = running.found()
    # the rules learned before the last kill are the same rules, under the same ids
    assert all(after.get(rid) == rule for rid, rule in before.items()), (before, after)
    assert running.truth <= found  # no content lost
    records = read_pages(state / "pages.jsonl")
    with UrlSeen(state, readonly=True) as seen:
        counts = seen.records.counts()
        prints = list(seen.records.prints())
    assert counts["queued"] == 0
    # each committed page once: a line per page the ledger marked fetched or failed
    lines = Counter((r["url"], r["fetched_at"]) for r in records)
    assert max(lines.values()) == 1
    assert len(records) == counts["fetched"] + counts["failed"]
    # the prints: one per 2xx page with a body, their near_duplicate_of in the output
    by_url = {r["url"] for r in records}
    assert len(prints) == len({p.seq for p in prints})
    assert all(r["near_duplicate_of"] in by_url for r in records if r["near_duplicate_of"])
