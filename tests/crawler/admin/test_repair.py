"""A damaged ledger: resume names it and the way out; ``repair`` recovers, resume finishes.

Both kinds of damage the issue names: a checkpointed ledger with bad pages (SQLite:
"database disk image is malformed") and a bit flip in the WAL in front of later
commits (SQLite would silently drop them, and resume would then cut pages.jsonl
back to match: lost records).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from crawler.admin.report import state_stats
from crawler.core.outputs.output import read_pages
from crawler.demo.site import SiteSpec
from dedup import UrlSeen
from dedup.journal.walcheck import FRAME_HEADER, WAL_HEADER
from tests.crawler.core.state.test_resume import run_until, setup_crawl
from tests.support.helpers import run_cli, start_cli

SPEC = SiteSpec(hosts=4, pages=60, seed=31, delay=0.01)


def damage_tables(db: Path, tables: tuple[str, ...]) -> None:
    """Scramble every database page of ``tables`` (the frontier's, which a resume
    reads first: a fraction of the file would hit other tables as they grow)."""
    with sqlite3.connect(db) as con:
        pagenos = [p for name, p in con.execute("SELECT name, pageno FROM dbstat")
                   if name in tables and p > 1]
    con.close()
    assert pagenos
    data = bytearray(db.read_bytes())
    for page in (p - 1 for p in pagenos):
        for i in range(page * 4096 + 64, page * 4096 + 4032, 5):
            data[i] ^= 0xA5
    db.write_bytes(bytes(data))


def keys_of(state: Path) -> Counter:
    with UrlSeen(state, readonly=True) as seen:
        return Counter(seen.canonicalizer.resolve(r["url"])[1]
                       for r in read_pages(state / "pages.jsonl"))


async def repair_then_resume(state: Path) -> str:
    fixed = await run_cli("repair", str(state))
    assert fixed.rc == 0, fixed.stderr
    assert f"repaired {state}" in fixed.stdout and "kept the damaged file" in fixed.stdout
    done = await run_cli("resume", str(state), "--quiet", "--max-pages", "0")
    assert done.rc in (0, 3), done.stderr
    return fixed.stdout


async def test_malformed_ledger_is_named_and_repaired(tmp_path, site):
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        first = await run_cli("crawl", str(seeds), "--state", str(state), "--config",
                              str(config), "--max-pages", "120", "--quiet")
        assert first.rc == 0, first.stderr
        before = keys_of(state)
        damage_tables(state / "ledger.sqlite", ("queue", "queue_host", "outcomes"))
        refused = await run_cli("resume", str(state))
        assert refused.rc == 1
        # what SQLite says depends on what the scrambled page held
        assert ("malformed" in refused.stderr or "not UTF-8" in refused.stderr
                or "not a database" in refused.stderr), refused.stderr
        assert f"bloomcrawl repair {state}" in refused.stderr
        assert "Traceback" not in refused.stderr
        report = await repair_then_resume(state)
        after = keys_of(state)
        want = running.site.reachable()
        assert max(after.values()) == 1  # no page written twice
        assert set(before) <= set(after) <= want.fetched | want.robots_blocked
        assert "stay lost" not in report
        assert set(after) == want.fetched | want.robots_blocked, report  # none lost
        server = running.total_pages()
        assert max(server.values()) <= 2, server.most_common(3)  # a crawl fetch, a repair's
        with UrlSeen(state, readonly=True) as seen:
            counts = seen.ledger.counts()
        assert counts["queued"] == 0
        assert counts["fetched"] + counts["failed"] + counts["skipped"] == len(after)
        stats = state_stats(state)  # the pages' counts, recounted by the repair
        assert stats["fetched"] + stats["failed"] + stats["skipped"] == len(after)


@pytest.mark.slow
async def test_wal_bit_flip_is_refused_and_its_pages_are_kept(tmp_path, site):
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        proc = await start_cli("crawl", str(seeds), "--state", str(state), "--config",
                               str(config), "--quiet")
        await run_until(proc, running, 150)
        proc.kill()  # leaves the commits in the WAL (no checkpoint yet)
        await proc.wait()
        wal = state / "ledger.sqlite-wal"
        data = bytearray(wal.read_bytes())
        page_size = int.from_bytes(data[8:12], "big")
        data[WAL_HEADER + 2 * (FRAME_HEADER + page_size) + FRAME_HEADER + 200] ^= 1
        wal.write_bytes(bytes(data))
        records = len(read_pages(state / "pages.jsonl"))
        assert records > 50
        refused = await run_cli("resume", str(state))
        assert refused.rc == 1, refused.stderr
        assert "frame 2 is damaged and committed transactions follow it" in refused.stderr
        assert f"bloomcrawl repair {state}" in refused.stderr
        assert len(read_pages(state / "pages.jsonl")) == records  # nothing cut back
        report = await repair_then_resume(state)
        assert "the transactions after that frame are lost" in report
        after = keys_of(state)
        assert max(after.values()) == 1
        assert len(after) >= records  # every page written before the damage is kept
        server = running.total_pages()
        assert max(server.values()) <= 2  # at most what was in flight at the kill
