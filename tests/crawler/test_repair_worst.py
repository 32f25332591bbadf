"""A ledger damaged past what SQLite can read: ``repair`` ends in seconds and rebuilds
from what survives; bytes flipped inside rows are noticed at open or repaired exactly.

The crawl is stopped by ``--max-pages`` (its ledger checkpointed, its index flushed),
then a copy of the damage an operator could meet is applied: the file truncated to
half, its SQLite header overwritten, 64 bytes flipped at a few offsets. After
``repair``, ``resume`` must fetch no page twice, keep every page pages.jsonl
records, and count what pages.jsonl holds.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from crawler.core.outputs.output import read_pages
from crawler.demo.site import SiteSpec
from dedup import UrlSeen
from tests.crawler.test_resume import setup_crawl
from tests.support.helpers import run_cli

SPEC = SiteSpec(hosts=4, pages=50, seed=37, delay=0.0)
FIRST = 90  # pages of the first run; the rest is left queued


def keys_of(state: Path) -> Counter:
    with UrlSeen(state, readonly=True) as seen:
        return Counter(seen.canonicalizer.resolve(r["url"])[1]
                       for r in read_pages(state / "pages.jsonl"))


async def first_run(tmp_path, running, *, warc: bool = False) -> Path:
    seeds, config, state = setup_crawl(tmp_path, running)
    extra = ["--warc", str(tmp_path / "out.warc")] if warc else []
    first = await run_cli("crawl", str(seeds), "--state", str(state), "--config",
                          str(config), "--max-pages", str(FIRST), "--quiet", *extra)
    assert first.rc == 0, first.stderr
    return state


async def repair_and_finish(state: Path, running, before: Counter) -> str:
    """Repair (bounded in time), resume to the end, and check nothing is fetched twice,
    no recorded page is lost and the counters match pages.jsonl."""
    fixed = await run_cli("repair", str(state), timeout=30)
    assert fixed.rc == 0, fixed.stdout + fixed.stderr
    assert "Traceback" not in fixed.stderr
    assert not list(state.glob("*.salvage*")) and not list(state.glob("*.repaired*"))
    done = await run_cli("resume", str(state), "--quiet", "--max-pages", "0")
    assert done.rc in (0, 3), done.stderr
    after = keys_of(state)
    want = running.site.reachable()
    assert max(after.values()) == 1  # no page written twice
    assert set(before) <= set(after) <= want.fetched | want.robots_blocked
    server = running.total_pages()
    assert max(server.values()) == 1, server.most_common(3)  # nothing fetched twice
    with UrlSeen(state, readonly=True) as seen:
        counts = seen.ledger.counts()
        assert seen.ledger.journal.recount() == counts
    assert counts["queued"] == 0
    records = read_pages(state / "pages.jsonl")
    robots = sum(1 for r in records if r.get("error") == "robots.txt")
    assert counts["fetched"] + counts["failed"] == len(records) - robots
    assert counts["skipped"] >= robots
    stats = await run_cli("stats", str(state), "--json")
    assert stats.rc == 0, stats.stderr
    assert json.loads(stats.stdout)["fetched"] == counts["fetched"]
    if "left the frontier" not in fixed.stdout:  # nothing reported lost: everything crawled
        assert set(after) == want.fetched | want.robots_blocked, fixed.stdout
    return fixed.stdout


@pytest.mark.parametrize("damage", ["truncate", "header"])
async def test_unreadable_ledger_is_rebuilt_from_what_survives(tmp_path, site, damage):
    async with site(SPEC) as running:
        state = await first_run(tmp_path, running)
        before = keys_of(state)
        db = state / "ledger.sqlite"
        if damage == "truncate":
            with open(db, "r+b") as f:
                f.truncate(db.stat().st_size // 2)
        else:
            data = bytearray(db.read_bytes())
            data[:16] = bytes(b ^ 0xFF for b in data[:16])
            db.write_bytes(bytes(data))
        refused = await run_cli("resume", str(state))
        assert refused.rc == 1
        assert f"bloomcrawl repair {state}" in refused.stderr, refused.stderr
        report = await repair_and_finish(state, running, before)
        assert "kept the damaged file" in report


async def test_without_a_settings_copy_the_geometry_comes_from_the_shards(tmp_path, site):
    """A crawl that kept no crawl-settings.json (made before it existed): the pages and
    the seen-set come back, and repair says the frozen configuration is lost."""
    async with site(SPEC) as running:
        state = await first_run(tmp_path, running)
        records = len(read_pages(state / "pages.jsonl"))
        (state / "crawl-settings.json").unlink()
        db = state / "ledger.sqlite"
        data = bytearray(db.read_bytes())
        data[:16] = bytes(16)
        db.write_bytes(bytes(data))
        fixed = await run_cli("repair", str(state), timeout=30)
        assert fixed.rc == 0, fixed.stdout + fixed.stderr
        assert "came from the shard files" in fixed.stdout
        assert "configuration and scope are lost" in fixed.stdout
        with UrlSeen(state, readonly=True) as seen:
            counts = seen.ledger.counts()
        robots = sum(1 for r in read_pages(state / "pages.jsonl") if r.get("error") == "robots.txt")
        assert counts["fetched"] + counts["failed"] == records - robots
        refused = await run_cli("resume", str(state))
        assert refused.rc == 1 and "no crawl configuration" in refused.stderr


async def test_the_lost_frontier_is_found_again_in_the_warc(tmp_path, site):
    async with site(SPEC) as running:
        state = await first_run(tmp_path, running, warc=True)
        before = keys_of(state)
        db = state / "ledger.sqlite"
        data = bytearray(db.read_bytes())
        data[:16] = bytes(16)
        db.write_bytes(bytes(data))
        report = await repair_and_finish(state, running, before)
        assert "found again in the links of the recorded pages" in report
        assert "left the frontier" not in report  # so every page was crawled


def blob_offset(db: Path, data: bytes, sql: str) -> tuple[int, int]:
    """Where in the file the blob ``sql`` selects is stored, and how many of its bytes
    to flip (up to 48: a blob may spill onto an overflow page)."""
    con = sqlite3.connect(db)
    try:
        blob = con.execute(sql).fetchone()[0]
    finally:
        con.close()
    n = min(48, len(blob))
    at = data.find(blob[:n])
    assert at > 0 and data.find(blob[:n], at + 1) < 0
    return at, n


@pytest.mark.parametrize("where", ["log", "queue", 0.5, 0.8])
async def test_flipped_bytes_are_noticed_at_open_and_repaired_exactly(tmp_path, site, where):
    """A flip inside a row's blob is one SQLite never notices: the fingerprints of the
    last batch (queued URLs: read again as other keys, their pages would be fetched
    twice) or the text of a queue row; at a fraction of the file, whatever is there."""
    async with site(SPEC) as running:
        state = await first_run(tmp_path, running)
        before = keys_of(state)
        db = state / "ledger.sqlite"
        data = bytearray(db.read_bytes())
        if where == "log":
            at, n = blob_offset(db, data, "SELECT fps FROM log ORDER BY seq DESC LIMIT 1")
        elif where == "queue":
            at, n = blob_offset(db, data, "SELECT urls FROM queue ORDER BY id DESC LIMIT 1")
        else:
            at, n = int(len(data) * where), 64
        for i in range(at, at + n):
            data[i] ^= 0x5A
        db.write_bytes(bytes(data))
        served = sum(running.total_pages().values())
        refused = await run_cli("resume", str(state), "--quiet", "--max-pages", "0")
        if isinstance(where, str) or refused.rc == 1:  # noticed before a single fetch
            assert refused.rc == 1, refused.stderr
            assert f"bloomcrawl repair {state}" in refused.stderr, refused.stderr
            assert sum(running.total_pages().values()) == served
            report = await repair_and_finish(state, running, before)
            if where == "log":  # the batch's URLs are queued again from their text
                assert "left the frontier" not in report
        else:  # the damage touched nothing the crawl reads: it finished exactly
            assert refused.rc in (0, 3), refused.stderr
            after = keys_of(state)
            want = running.site.reachable()
            assert set(after) == want.fetched | want.robots_blocked
            assert max(running.total_pages().values()) == 1
