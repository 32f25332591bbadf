"""Every output record exactly once across kill -9: pages.jsonl lines and WARC records.

Each group's lines and records are fsynced and their files' sizes committed in
the ledger transaction that marks the group's pages; reopening cuts the files
back to those sizes. Killed at random moments (some land mid-write) and resumed,
a crawl must leave one line per done page, one readable WARC record per stored
page, nothing torn and nothing missing.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler.output import PageLog, WarcWriter, read_pages
from crawler.state import TOTALS_KEY
from dedup import UrlSeen
from tests.crawler.test_resume import SPEC, run_until, setup_crawl
from tests.support.helpers import run_cli, start_cli


async def output_grew(proc, path, timeout: float = 5.0) -> None:
    """Return as soon as ``path`` grows: the kill then lands between a group's writes
    and its ledger commit more often than at a random moment."""
    size = path.stat().st_size if path.exists() else 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while proc.returncode is None and loop.time() < deadline:
        if path.exists() and path.stat().st_size != size:
            return
        await asyncio.sleep(0.0005)


def warc_uris(path) -> list[str]:
    """Target URIs of every resource record; warcio raises on a torn or bad record."""
    with open(path, "rb") as fh:
        return [r.rec_headers.get_header("WARC-Target-URI")
                for r in ArchiveIterator(fh, check_digests=True)
                if r.rec_type == "resource"]


@pytest.mark.slow
async def test_kill9_loop_with_warc_leaves_every_line_and_record_exactly_once(tmp_path, site):
    rng = random.Random(11)
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        warc = tmp_path / "out" / "crawl.warc"
        total = len(running.site.reachable().fetched)
        kills = 0
        args = ["crawl", str(seeds), "--state", str(state), "--config", str(config), "--quiet",
                "--warc", str(warc)]
        for n in sorted(rng.sample(range(5, total - 20), 12)):
            proc = await start_cli(*args)
            await run_until(proc, running, n)
            await output_grew(proc, state / "pages.jsonl")  # a group is being written
            if proc.returncode is None:
                proc.kill()
                kills += 1
            await proc.wait()
            args = ["resume", str(state), "--quiet"]
        assert kills >= 10
        done = await run_cli(*args)
        assert done.rc == 0, done.stderr
    records = read_pages(state / "pages.jsonl")
    lines = Counter(r["url"] for r in records)
    assert [u for u, c in lines.items() if c > 1] == []  # no duplicate line
    want = running.site.reachable()
    with UrlSeen(state, readonly=True) as seen:
        keys = {seen.canonicalizer.resolve(u)[1] for u in lines}
        counts = seen.ledger.counts()
        totals = seen.ledger.meta_get(TOTALS_KEY)
    assert keys == want.fetched | want.robots_blocked  # nothing lost
    assert counts["fetched"] + counts["failed"] + counts["skipped"] == len(records)
    stored = [r["url"] for r in records if r["status"] == 200
              and (r["content_type"] or "").startswith("text/html")]
    uris = Counter(warc_uris(warc))
    assert [u for u, c in uris.items() if c > 1] == []  # no duplicate record
    assert set(uris) == set(stored)  # every stored page readable, none torn away
    # the kept dedup counters count exactly the committed rows (issue 11 item 7)
    assert totals["new"] == len(seen_rows(state))


def seen_rows(state) -> list:
    with UrlSeen(state, readonly=True) as seen:
        return list(seen.ledger.rows())


async def test_reopening_cuts_both_files_back_to_their_committed_sizes(tmp_path):
    pages, warc = tmp_path / "pages.jsonl", tmp_path / "a.warc"
    async with PageLog(pages, committed=0) as log, WarcWriter(warc, committed=0) as w:
        await log.append([{"url": "http://a/"}])
        await w.write_pages([("http://a/", "text/html", b"<p>a</p>", 0.0)])
        committed = (log.size, w.size)
        # an uncommitted group, the last record torn halfway (a kill -9 mid-write)
        await log.append([{"url": "http://b/"}])
        blob = w._record("resource", "http://b/", "text/html", b"<p>b</p>" * 100, 0.0)
        await w._write(blob[: len(blob) // 2])
    assert pages.stat().st_size > committed[0] and warc.stat().st_size > committed[1]
    async with PageLog(pages, committed=committed[0]) as log, \
            WarcWriter(warc, committed=committed[1]) as w:
        assert (log.size, w.size) == committed
        await log.append([{"url": "http://b/"}])
        await w.write_pages([("http://b/", "text/html", b"<p>b</p>", 0.0)])
    assert [r["url"] for r in read_pages(pages)] == ["http://a/", "http://b/"]
    assert warc_uris(warc) == ["http://a/", "http://b/"]


async def test_a_merged_state_dir_writes_its_own_warc_not_its_sources(tmp_path, site):
    """merge --state copies the source's settings, which name the source's WARC file:
    resuming the union must not append to it (two crawls in one file), and the two
    files together hold each stored page once."""
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        warc = tmp_path / "out" / "crawl.warc"
        first = await run_cli("crawl", str(seeds), "--state", str(state), "--config",
                              str(config), "--quiet", "--warc", str(warc), "--max-pages", "40")
        assert first.rc == 0, first.stderr
        before = warc.read_bytes()
        union = tmp_path / "union"
        merged = await run_cli("merge", "--state", "-o", str(union), str(state))
        assert merged.rc == 0, merged.stderr
        done = await run_cli("resume", str(union), "--quiet", "--max-pages", "0")
        assert done.rc == 0, done.stderr
        assert warc.read_bytes() == before  # the source's file is the source's
        own = union / "crawl.warc"
        uris = warc_uris(warc) + warc_uris(own)
        assert len(warc_uris(own)) > 0
        assert max(Counter(uris).values()) == 1
        stored = {r["url"] for r in read_pages(union / "pages.jsonl")
                  if r["status"] == 200 and r["content_type"] == "text/html"}
        assert set(uris) == stored
