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
import re
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from crawler.core.outputs.output import read_pages
from crawler.demo.site import SiteSpec
from dedup import UrlSeen
from dedup.admin import diagnose, index_keys
from tests.crawler.core.state.test_resume import setup_crawl
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


async def repair_and_finish(state: Path, running, before: Counter, *args: str,
                            earlier: Counter | None = None) -> str:
    """Repair (bounded in time), resume to the end, and check the crawl came out exact
    (``finish_exactly``); the pages repair fetched again to find lost URLs are each
    a recorded page, fetched once. ``earlier``: the site's requests of this state's
    first run (default: every request so far)."""
    served = running.total_pages()
    fixed = await run_cli("repair", str(state), *args, timeout=30)
    assert fixed.rc == 0, fixed.stdout + fixed.stderr
    assert "Traceback" not in fixed.stderr
    assert not list(state.glob("*.salvage*")) and not list(state.glob("*.repaired*"))
    refetched = running.total_pages() - served
    assert not refetched or max(refetched.values()) == 1
    with UrlSeen(state, readonly=True) as seen:
        assert {seen.canonicalizer.resolve(u)[1] for u in refetched} <= set(before)
    assert "stay lost" not in fixed.stdout and "index is unreadable" not in fixed.stdout
    await finish_exactly(state, running, served if earlier is None else earlier)
    return fixed.stdout


async def finish_exactly(state: Path, running, earlier: Counter) -> None:
    """Resume to the end; then every reachable page is in pages.jsonl once (none lost,
    none twice), the crawl (``earlier`` requests, then the resume's) fetched each
    once, and the counters match pages.jsonl."""
    start = running.total_pages()
    done = await run_cli("resume", str(state), "--quiet", "--max-pages", "0")
    assert done.rc in (0, 3), done.stderr
    after = keys_of(state)
    want = running.site.reachable()
    assert max(after.values()) == 1  # no page written twice
    assert set(after) == want.fetched | want.robots_blocked  # none lost
    crawl = earlier + (running.total_pages() - start)
    assert max(crawl.values()) == 1, crawl.most_common(3)  # the crawl fetched nothing twice
    assert set(crawl) == want.fetched
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


def referrers_link(running, state: Path) -> int:
    """How many records (depth > 0) name a referrer; fail if a named one does not
    link to the record's URL (or redirect to it) at the depth before."""
    site = running.site
    index = {o: h for h, o in enumerate(site.origins)}
    records = read_pages(state / "pages.jsonl")
    depth = {r["url"]: r["depth"] for r in records}
    named = 0
    with UrlSeen(state, readonly=True) as seen:
        for r in records:
            if not r["depth"] or r["referrer"] is None:
                continue
            named += 1
            ref = r["referrer"]
            page = seen.canonicalizer.resolve(ref)[1]  # tracking parameters dropped
            cut = page.index("/", len("http://"))
            h, path = index[page[:cut]], page[cut:]
            targets = ({site.redirect_target(h, path)} if site.kind(path) == "redirect"
                       else {k for _, k in site.links(h, path)})
            assert seen.canonicalizer.resolve(r["url"])[1] in targets, (r["url"], ref)
            assert depth.get(ref) == r["depth"] - 1, (r["url"], ref)
    return named


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
        # no WARC: the queued URLs the ledger lost were found again by fetching the
        # recorded pages that admitted links (and only as many as it took)
        assert "recorded page(s) fetched again" in report
        assert re.search(r"all \d+ queued URL\(s\) the ledger lost were found again", report)
        assert referrers_link(running, state) == sum(
            1 for r in read_pages(state / "pages.jsonl") if r["depth"])


async def test_with_no_fetch_allowed_repair_says_exactly_how_many_urls_stay_lost(tmp_path,
                                                                                  site):
    """``--refetch 0`` (offline): the lost queued URLs are not looked for on the network,
    and repair counts them exactly: the fingerprints the old index held that the new
    ledger does not."""
    async with site(SPEC) as running:
        state = await first_run(tmp_path, running)
        held = index_keys(state)
        db = state / "ledger.sqlite"
        with open(db, "r+b") as f:
            f.truncate(db.stat().st_size // 2)
        served = sum(running.total_pages().values())
        fixed = await run_cli("repair", str(state), "--refetch", "0", timeout=30)
        assert fixed.rc == 0, fixed.stdout + fixed.stderr
        assert sum(running.total_pages().values()) == served  # nothing fetched
        with UrlSeen(state, readonly=True) as seen:
            lost = len(held) - len(seen.held_among(held.tobytes()))
        assert lost > 0
        assert f"  {lost} queued URL(s) stay lost: " in fixed.stdout, fixed.stdout
        assert "higher --refetch" in fixed.stdout


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
        assert "fetched again" not in report  # the WARC held every page needed


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
                assert "fetched again" not in report
        else:  # the damage touched nothing the crawl reads: it finished exactly
            assert refused.rc in (0, 3), refused.stderr
            after = keys_of(state)
            want = running.site.reachable()
            assert set(after) == want.fetched | want.robots_blocked
            assert max(running.total_pages().values()) == 1


def text_offset(db: Path, data: bytes, table: str, sql: str) -> tuple[int, int]:
    """Where in the file a text value ``sql`` selects is stored in ``table``'s pages (a
    URL may also be a page's ``contents`` name), and its length."""
    con = sqlite3.connect(db)
    try:
        texts = [r[0].encode() for r in con.execute(sql)]
        pages = {p for (p,) in con.execute("SELECT pageno FROM dbstat WHERE name = ?",
                                           (table,))}
        size = con.execute("PRAGMA page_size").fetchone()[0]
    finally:
        con.close()
    for text in texts:
        at = data.find(text)
        while at > 0:
            if at // size + 1 in pages and (at + len(text) - 1) // size + 1 in pages:
                return at, len(text)
            at = data.find(text, at + 1)
    raise AssertionError(f"no value of {sql!r} found in the pages of {table}")


TEXT_VALUES = {  # real text values of each kind the crawl writes, found in the file
    "digest": ("contents", "SELECT digest FROM contents ORDER BY digest"),
    "referrer": ("notes", "SELECT text FROM notes ORDER BY first DESC"),
    "meta": ("meta", "SELECT value FROM meta WHERE key = 'crawl_id'"),
}


@pytest.mark.parametrize("column", sorted(TEXT_VALUES))
async def test_a_byte_flipped_inside_a_text_column_is_repaired_exactly(tmp_path, site, column):
    """Bytes flipped inside a text value (a body digest ``sha1:...``, a referrer URL, a
    setting) so that it is no longer UTF-8: the sqlite3 module cannot even read the
    row. Resume names the damage and repair; repair reads the row's bytes, drops it
    by its checksum and exits 0; the resumed crawl is exact."""
    async with site(SPEC) as running:
        state = await first_run(tmp_path, running)
        before = keys_of(state)
        db = state / "ledger.sqlite"
        data = bytearray(db.read_bytes())
        at, n = text_offset(db, data, *TEXT_VALUES[column])
        for i in range(at + 6, at + n - 2, 2):  # a byte >= 0x80 then an ASCII one: not UTF-8
            data[i] ^= 0x80
        db.write_bytes(bytes(data))
        refused = await run_cli("resume", str(state), "--quiet", "--max-pages", "0")
        assert refused.rc == 1, refused.stderr
        assert f"bloomcrawl repair {state}" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
        report = await repair_and_finish(state, running, before)
        assert "not UTF-8" in report
        assert "fetched again" not in report  # no frontier URL was lost
        named = referrers_link(running, state)
        deep = sum(1 for r in read_pages(state / "pages.jsonl") if r["depth"])
        if column != "referrer":  # only the damaged run's pages lost their referrer
            assert named == deep


SMALL = SiteSpec(hosts=3, pages=30, seed=36, delay=0.0)


def regions(db: Path) -> dict[str, int]:
    """One region per b-tree of the ledger (tables, indexes, the schema): the 64 bytes
    that end 16 bytes before the end of its last page, where SQLite packs a page's
    cells (the first one written)."""
    con = sqlite3.connect(db)
    try:
        last = dict(con.execute("SELECT name, max(pageno) FROM dbstat GROUP BY name"))
        size = con.execute("PRAGMA page_size").fetchone()[0]
    finally:
        con.close()
    return {name: page * size - 80 for name, page in sorted(last.items())}


async def test_any_single_damaged_region_is_repaired_exactly(tmp_path, site):
    """64 bytes flipped in each b-tree of a stopped crawl's ledger in turn (each on a
    copy: every table's rows, the indexes, the schema): whatever the region held,
    resume refuses before a fetch, naming repair, and repair then resume is exact;
    or the damage is in nothing read (a deleted cell) and resume is exact."""
    async with site(SMALL) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        ran = await run_cli("crawl", str(seeds), "--state", str(state), "--config",
                            str(config), "--max-pages", "40", "--quiet")
        assert ran.rc == 0, ran.stderr
        before = keys_of(state)
        first = running.total_pages()
        where = regions(state / "ledger.sqlite")
        assert {"log", "queue", "queue_host", "outcomes", "notes", "contents", "meta"} <= set(where)
        noticed = set()
        for name, at in where.items():
            copy = tmp_path / name
            shutil.copytree(state, copy)
            db = copy / "ledger.sqlite"
            data = bytearray(db.read_bytes())
            for i in range(at, at + 64):
                data[i] ^= 0x5A
            db.write_bytes(bytes(data))
            if not diagnose(copy).ledger_damaged:  # the damage is in nothing read
                await finish_exactly(copy, running, first)
                continue
            noticed.add(name)
            served = running.total_pages()
            refused = await run_cli("resume", str(copy), "--quiet", "--max-pages", "0")
            assert refused.rc == 1, (name, refused.stderr)
            assert f"bloomcrawl repair {copy}" in refused.stderr, refused.stderr
            assert running.total_pages() == served  # before a single fetch
            await repair_and_finish(copy, running, before, earlier=first)
        assert {"log", "outcomes", "sqlite_schema"} <= noticed  # rows never deleted
