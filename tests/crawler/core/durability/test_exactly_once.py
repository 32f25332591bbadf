"""Every output record exactly once across kill -9: pages.jsonl lines and WARC records.

Each group's lines and records are fsynced and their files' sizes (the WARC's
as serial + size, files rotating) committed in the ledger transaction that
marks the group's pages; reopening cuts the files back to those sizes and
deletes WARC files opened after them. Killed at random moments (some land
mid-write) and resumed, a crawl must leave one line per done page, one readable
response (or revisit) record per answered page, nothing torn and nothing missing.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler.core.outputs.output import PageLog, read_pages
from crawler.core.outputs.warc import WarcFiles, build_records
from crawler.core.state.crawlstate import CrawlState
from crawler.net.exchange import Exchange
from dedup import UrlSeen
from tests.crawler.core.state.test_resume import SPEC, run_until, setup_crawl
from tests.support.helpers import run_cli
from tests.support.killloop import kill_at


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


def warc_uris(*paths) -> list[str]:
    """Target URIs of every response and revisit record but robots.txt's (fetched
    again after a restart) in the files (or directories of files) ``paths``;
    warcio raises on a torn record, and a digest must not fail."""
    files = sorted(f for p in paths for f in (p.iterdir() if p.is_dir() else [p]))
    uris = []
    for f in files:
        with open(f, "rb") as fh:
            for r in ArchiveIterator(fh, check_digests=True):
                r.content_stream().read()
                assert r.digest_checker.passed is not False, f
                uri = r.rec_headers.get_header("WARC-Target-URI")
                if r.rec_type in ("response", "revisit") and not uri.endswith("/robots.txt"):
                    uris.append(uri)
    return uris


@pytest.mark.slow
async def test_kill9_loop_with_warc_leaves_every_line_and_record_exactly_once(tmp_path, site):
    rng = random.Random(11)
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        warc = tmp_path / "out" / "crawl.warc.gz"
        total = len(running.site.reachable().fetched)
        args = ["crawl", str(seeds), "--state", str(state), "--config", str(config), "--quiet",
                "--warc", str(warc), "--warc-max-size", "20000"]

        async def reached(proc, n: int) -> None:
            await run_until(proc, running, n)
            await output_grew(proc, state / "pages.jsonl")  # a group is being written
        kills, args = await kill_at(args, state, sorted(rng.sample(range(5, total - 20), 12)),
                                    reached)
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
        totals = CrawlState(seen.records).totals()
    assert keys == want.fetched | want.robots_blocked  # nothing lost
    assert counts["fetched"] + counts["failed"] + counts["skipped"] == len(records)
    stored = [r["url"] for r in records if r["status"] is not None]
    assert len(list(warc.parent.iterdir())) > 1  # rotated
    uris = Counter(warc_uris(warc.parent))
    assert [u for u, c in uris.items() if c > 1] == []  # no duplicate record
    assert set(uris) == set(stored)  # every answered page readable, none torn away
    # the kept dedup counters count exactly the committed rows (issue 11 item 7)
    assert totals["new"] == len(seen_rows(state))


def seen_rows(state) -> list:
    with UrlSeen(state, readonly=True) as seen:
        return list(seen.ledger.rows())


def exchange(url: str, body: bytes) -> Exchange:
    return Exchange(url, 0.0, "GET", "/", [("Host", "a")], "HTTP/1.1", 200, "OK",
                    [("Content-Type", "text/html")], "127.0.0.1", body)


async def test_reopening_cuts_both_files_back_to_their_committed_sizes(tmp_path):
    pages, warc = tmp_path / "pages.jsonl", tmp_path / "w" / "a.warc.gz"
    blob = build_records(exchange("http://b/", b"<p>b</p>" * 100), gzip=True)
    async with PageLog(pages, committed=0) as log, WarcFiles(warc, max_size=0) as w:
        await log.append([{"url": "http://a/"}])
        await w.write([build_records(exchange("http://a/", b"<p>a</p>"), gzip=True)])
        committed = (log.size, w.committed())
        # an uncommitted group, the last record torn halfway (a kill -9 mid-write)
        await log.append([{"url": "http://b/"}])
        await w._file._write(blob[: len(blob) // 2])
    assert pages.stat().st_size > committed[0]
    assert w.path.stat().st_size > committed[1]["size"]
    async with PageLog(pages, committed=committed[0]) as log, \
            WarcFiles(warc, committed[1]) as w:
        assert (log.size, w.committed()) == committed
        await log.append([{"url": "http://b/"}])
        await w.write([blob])
    assert [r["url"] for r in read_pages(pages)] == ["http://a/", "http://b/"]
    assert warc_uris(warc.parent) == ["http://a/", "http://b/"]


async def test_a_crash_right_after_rotation_leaves_each_record_once(tmp_path):
    """A group that rotated (its records in the old file's tail and a new file)
    and never committed: reopening cuts the old file back and deletes the new one."""
    warc = tmp_path / "w" / "a.warc.gz"
    blobs = {u: build_records(exchange(f"http://{u}/", random.Random(u).randbytes(3000)),
                              gzip=True)
             for u in "abcd"}
    async with WarcFiles(warc, max_size=4096) as w:
        await w.write([blobs["a"]])
        await w.sync()
        committed = w.committed()
        await w.write([blobs["b"], blobs["c"]])  # b fits nowhere but a new file: rotates
        await w._file._write(blobs["d"][:100])  # d torn in the newest file
        await w.sync()
    assert len(list(warc.parent.iterdir())) == 3
    async with WarcFiles(warc, committed, max_size=4096) as w:
        assert w.committed() == committed
        await w.write([blobs["b"], blobs["c"], blobs["d"]])
        await w.sync()
    names = sorted(f.name for f in warc.parent.iterdir())
    assert names == [f"a-{i:05d}.warc.gz" for i in range(4)]
    assert warc_uris(warc.parent) == ["http://a/", "http://b/", "http://c/", "http://d/"]


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
        files = warc.parent / "crawl-00000.warc"
        before = files.read_bytes()
        union = tmp_path / "union"
        merged = await run_cli("merge", "--state", "-o", str(union), str(state))
        assert merged.rc == 0, merged.stderr
        done = await run_cli("resume", str(union), "--quiet", "--max-pages", "0")
        assert done.rc == 0, done.stderr
        assert files.read_bytes() == before  # the source's file is the source's
        assert [f.name for f in warc.parent.iterdir()] == ["crawl-00000.warc"]
        own = union / "crawl-00000.warc"
        uris = warc_uris(files) + warc_uris(own)
        assert len(warc_uris(own)) > 0
        assert max(Counter(uris).values()) == 1
        stored = {r["url"] for r in read_pages(union / "pages.jsonl")
                  if r["status"] is not None}
        assert set(uris) == stored
