"""The dashboard (``--ui``) and the report (``bloomcrawl report``): the JSON endpoint
during a real crawl, the page in a real browser (headless Chromium over DevTools),
the report file opened from disk, and the loopback rule."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from crawler.demo.site import SiteSpec
from crawler.ui.address import UiAddressError, parse_ui_address
from crawler.ui.stats import PageTally, Tail, bin_series
from tests.support.browser import charts_when, chromium, wait_for
from tests.support.dashboard import SLOW, dashboard_url, stop, until_stats
from tests.support.helpers import run_cli, start_cli, write_seeds

# what the README documents of /api/stats
FIELDS = ("schema", "mode", "generated_at", "state_dir", "outcome", "elapsed", "totals",
          "series", "status_codes", "status_codes_scope", "errors_by_cause", "top_hosts",
          "filter", "dedup", "storage", "recent_errors", "workers", "interval")
TOTALS = ("fetched", "failed", "given_up", "skipped", "queued", "in_flight", "hosts",
          "hosts_crawled", "session_pages", "bytes", "pages_per_s", "bytes_per_s")
SERIES = ("t", "pages_per_s", "bytes_per_s", "queued", "fill", "ledger_bytes", "index_bytes")
# the one absolute URL the page may hold: the SVG namespace (an identifier, never fetched)
EXTERNAL = re.compile(r"(?:https?:)?//(?!www\.w3\.org/2000/svg)[a-z0-9.-]+", re.I)


# -- the address ------------------------------------------------------------------------------

def test_ui_address_defaults_to_loopback_and_refuses_the_network() -> None:
    assert parse_ui_address("8080") == ("127.0.0.1", 8080)
    assert parse_ui_address("localhost:0") == ("localhost", 0)
    assert parse_ui_address("127.0.0.9:81") == ("127.0.0.9", 81)
    assert parse_ui_address("[::1]:8080") == ("::1", 8080)
    for bad in ("0.0.0.0:8080", "192.168.1.5:80", "example.com:80", "[::]:80"):
        with pytest.raises(UiAddressError, match="--ui-public"):
            parse_ui_address(bad)
        assert parse_ui_address(bad, public=True)[1] in (80, 8080)
    for bad in ("x", "127.0.0.1:99999", ":80"):
        with pytest.raises(UiAddressError):
            parse_ui_address(bad)


async def test_non_loopback_ui_refused_without_ui_public(tmp_path: Path) -> None:
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/"])
    state = tmp_path / "state"
    r = await run_cli("crawl", str(seeds), "--state", str(state), "--ui", "0.0.0.0:0")
    assert r.rc == 2, r.stderr
    assert "--ui-public" in r.stderr and "not a loopback address" in r.stderr
    assert not state.exists()  # refused before anything was created
    r = await run_cli("crawl", str(seeds), "--state", str(state), "--ui-public")
    assert r.rc == 2 and "--ui-public goes with --ui" in r.stderr


# -- pages.jsonl counted ----------------------------------------------------------------------

def _record(url: str, at: str, status: int | None = 200, error: str | None = None,
            nbytes: int = 100, new: int = 2) -> str:
    return json.dumps({"url": url, "status": status, "error": error, "bytes": nbytes,
                       "links_new": new, "fetched_at": at}) + "\n"


def test_tally_counts_statuses_causes_hosts_and_rates(tmp_path: Path) -> None:
    p = tmp_path / "pages.jsonl"
    p.write_text(
        _record("http://a.test/1", "2026-01-01T00:00:00.100Z")
        + _record("http://a.test/2", "2026-01-01T00:00:00.900Z", 404, "http 404")
        + _record("http://b.test:8080/", "2026-01-01T00:00:02.000Z", None, "timeout", 0, 0)
        + _record("http://b.test:8080/x", "2026-01-01T00:00:02.500Z", None, "robots.txt", 0, 0)
        + '{"url": "http://torn.test/", "sta')  # a crawl's torn last line: not counted
    t = PageTally()
    assert t.feed(p) == 4
    assert dict(t.statuses) == {"200": 1, "404": 1, "no response": 1, "robots.txt": 1}
    assert dict(t.causes) == {"timeout": 1}
    assert (t.fetched, t.failed, t.skipped, t.bytes) == (2, 1, 1, 200)
    assert t.top_hosts(5) == [("a.test", 2, 0), ("b.test:8080", 0, 1)]
    s = bin_series(t.per_second)
    assert s["pages_per_s"] == [2, 0, 2] and s["bytes_per_s"] == [200, 0, 0]
    assert [e["error"] for e in t.recent_errors] == ["http 404", "timeout"]
    # binned to at most max_points, rates over each bin's seconds
    s = bin_series({0: [10, 0, 0], 1: [10, 0, 0], 2: [4, 0, 0]}, max_points=2)
    assert s["bin_s"] == 2 and s["pages_per_s"] == [10, 4]


def test_tally_counts_every_host_crawled_exactly_past_its_host_counters(tmp_path) -> None:
    """Hosts crawled: exact beyond the hosts counted by name (MAX_HOST_ENTRIES) and across
    the folds of their hashes, and for a fleet's tallies merged (shared hosts once)."""
    def records(hosts: range, repeat: int = 2) -> list[bytes]:
        return [json.dumps({"url": f"http://h{h}.test/{k}", "status": 200, "bytes": 1,
                            "fetched_at": "2026-01-01T00:00:00.000Z"}).encode()
                for k in range(repeat) for h in hosts]
    a, b = PageTally(), PageTally()
    for chunk in range(0, 70_000, 7_000):  # the live dashboard's and report's batches
        a.feed_lines(records(range(chunk, chunk + 7_000)))
    b.feed_lines(records(range(60_000, 80_000), repeat=1))
    assert (a.hosts_crawled, b.hosts_crawled) == (70_000, 20_000)
    assert len(a.hosts) < 70_000  # the counters by name kept the biggest only
    a.merge(b)
    assert a.hosts_crawled == 80_000 and a.pages == 160_000


def test_tail_reads_complete_lines_as_they_come(tmp_path: Path) -> None:
    p = tmp_path / "pages.jsonl"
    p.write_bytes(b'{"old": 1}\n')
    tail = Tail(p)  # from the end: earlier runs' pages are not re-read
    assert tail.read() == []
    with open(p, "ab") as fh:
        fh.write(b'{"a": 1}\n{"b"')
    assert tail.read() == [b'{"a": 1}']
    with open(p, "ab") as fh:
        fh.write(b': 2}\n')
    assert tail.read() == [b'{"b": 2}']


# -- the live dashboard of a real crawl --------------------------------------------------------

async def test_live_dashboard_during_a_crawl(tmp_path: Path, site) -> None:
    async with site(SiteSpec(hosts=3, pages=300, seed=3)) as running:
        seeds = write_seeds(tmp_path / "seeds.txt", running.seeds)
        proc = await start_cli("crawl", str(seeds), "--state", str(tmp_path / "state"),
                               "--ui", "127.0.0.1:0", *SLOW)
        try:
            url = await dashboard_url(proc)
            async with aiohttp.ClientSession() as http:
                first = await until_stats(http, url, lambda d: d["totals"]["fetched"] > 0
                                           and len(d["series"]["t"]) >= 2, "pages fetched",
                                           proc=proc)
                for key in FIELDS:
                    assert key in first, key
                assert set(TOTALS) <= set(first["totals"])
                assert set(SERIES) == set(first["series"])
                assert {len(v) for v in first["series"].values()} == {len(first["series"]["t"])}
                assert first["mode"] == "live" and first["outcome"] == "running"
                assert first["status_codes"] and first["top_hosts"]
                assert 0 < first["filter"]["fill"] < 1 and first["storage"]["ledger_bytes"] > 0
                # moving: more pages, more samples, newer
                later = await until_stats(
                    http, url, lambda d: d["totals"]["fetched"] > first["totals"]["fetched"]
                    and len(d["series"]["t"]) > len(first["series"]["t"]), "the figures to move",
                    proc=proc)
                assert later["generated_at"] > first["generated_at"]
                assert max(later["series"]["pages_per_s"]) > 0
                assert sum(later["status_codes"].values()) >= sum(first["status_codes"].values())
                # read-only: nothing but GET
                async with http.post(url + "api/stats", data=b"{}") as r:
                    assert r.status == 405
                async with http.get(url) as r:
                    page = await r.text()
                    assert r.status == 200 and "Content-Security-Policy" in r.headers
                assert not EXTERNAL.findall(page)
            assert proc.returncode is None, "the crawl must still be running"

            async with chromium() as browser:
                await browser.open(url)
                drawn = json.loads(await wait_for(browser, charts_when(
                    "c.pages_per_s && c.pages_per_s.points[0] >= 2 && c.status_codes.bars.length"
                ), timeout=30))
                assert drawn["bytes_per_s"]["points"][0] >= 2
                assert drawn["queued"]["points"][0] >= 2
                assert drawn["fill"]["points"][0] >= 2
                assert drawn["storage"]["points"] and min(drawn["storage"]["points"]) >= 2
                assert any(v > 0 for _, v in drawn["status_codes"]["bars"])
                assert any(v > 0 for _, v in drawn["top_hosts"]["bars"])
                for name in ("pages_per_s", "bytes_per_s", "status_codes"):
                    assert drawn[name]["ticks"] >= 5, name  # labelled axes
                tiles = await browser.eval(
                    "[...document.querySelectorAll('.tile .v')].map(e => e.textContent)")
                assert len(tiles) >= 12 and "–" not in tiles[:8]
                # it polls: the page asks api/stats again
                await wait_for(browser, "1", timeout=1)
                n = len(browser.requests)
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 15
                while len(browser.requests) <= n + 1 and loop.time() < deadline:
                    await asyncio.sleep(0.1)
                assert len(browser.requests) > n + 1
                origin = urlsplit(url).netloc
                assert browser.requests and all(
                    urlsplit(u).netloc == origin for u in browser.requests), browser.requests
                assert not browser.console_errors, browser.console_errors
            assert proc.returncode is None
        finally:
            await stop(proc)
        assert proc.returncode in (0, 130, 3)

        # resume --ui: the dashboard of the next run (the earlier pages stay counted)
        resumed = await start_cli("resume", str(tmp_path / "state"), "--ui", "127.0.0.1:0")
        try:
            url = await dashboard_url(resumed)
            async with aiohttp.ClientSession() as http:
                doc = await until_stats(http, url, lambda d: d["totals"]["session_pages"] > 0,
                                        "the resumed crawl's pages", proc=resumed)
            assert doc["totals"]["fetched"] > later["totals"]["fetched"]
            assert doc["outcome"] == "running"
        finally:
            await stop(resumed)

        # the report of that (stopped) crawl: one file, charts drawn, no network
        out = tmp_path / "report.html"
        r = await run_cli("report", str(tmp_path / "state"), "-o", str(out))
        assert r.rc == 0, r.stderr
    html = out.read_text()
    # the crawl's URLs are data (JSON, drawn as text); the page itself refers to none
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    assert data is not None and json.loads(data.group(1))["mode"] == "report"
    assert not EXTERNAL.findall(html.replace(data.group(1), ""))
    assert "<script src" not in html and "<link" not in html
    async with chromium() as browser:
        await browser.open(out.as_uri())
        drawn = json.loads(await wait_for(browser, charts_when(
            "c.pages_per_s && c.pages_per_s.points[0] >= 2")))
        assert drawn["queued"]["points"][0] >= 2 and drawn["fill"]["points"][0] >= 2
        assert sum(v for _, v in drawn["status_codes"]["bars"]) > 0
        assert drawn["storage"]["bars"][0][1] > 0
        # learning was on, and the sample site has no duplicate URLs: the card says so
        learned = await browser.eval("document.getElementById('learning').textContent")
        assert learned.startswith("nothing learned yet"), learned
        assert browser.requests == [out.as_uri()], browser.requests
        assert not browser.console_errors, browser.console_errors


async def test_report_command_errors(tmp_path: Path) -> None:
    r = await run_cli("report", str(tmp_path / "missing"), "-o", str(tmp_path / "r.html"))
    assert r.rc == 1 and "not a directory" in r.stderr
    assert not (tmp_path / "r.html").exists()
    r = await run_cli("report", str(tmp_path), "-o", str(tmp_path / "r.html"))
    assert r.rc == 1 and not (tmp_path / "r.html").exists()


def test_browser_tests_fail_without_chromium_where_required(monkeypatch) -> None:
    """CI sets BLOOMCRAWL_REQUIRE_CHROMIUM=1: a missing chromium fails, never skips."""
    from tests.support.browser import require_chromium

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("BLOOMCRAWL_REQUIRE_CHROMIUM", raising=False)
    with pytest.raises(pytest.skip.Exception):
        require_chromium()
    monkeypatch.setenv("BLOOMCRAWL_REQUIRE_CHROMIUM", "1")
    with pytest.raises(pytest.fail.Exception, match="BLOOMCRAWL_REQUIRE_CHROMIUM=1 requires"):
        require_chromium()


async def test_recent_errors_are_failures_and_error_statuses_not_pdfs(tmp_path: Path,
                                                                      site) -> None:
    """A real crawl: PDFs come back 200 and are not parsed ("not html"): fetched, not
    errors; a 404 and a refused connection are."""
    config = tmp_path / "c.toml"
    config.write_text("[crawl]\nmax_retries = 0\n")
    async with site(SiteSpec(hosts=2, pages=120, seed=7)) as running:
        missing = running.seeds[0].rstrip("/") + "/no-such-page"
        seeds = write_seeds(tmp_path / "seeds.txt",
                            [missing, *running.seeds, "http://127.0.0.1:9/"])
        r = await run_cli("crawl", str(seeds), "--state", str(tmp_path / "state"),
                          "--config", str(config), "--allow-private", "--no-sitemaps",
                          "--delay", "0", "--quiet")
    assert r.rc == 3, r.stderr  # the refused seed was given up
    records = [json.loads(line) for line in
               (tmp_path / "state" / "pages.jsonl").read_text().splitlines()]
    errors = {rec["error"] for rec in records}
    assert {"not html", "http 404", "robots.txt unavailable: connection refused"} <= errors
    out = tmp_path / "report.html"
    r = await run_cli("report", str(tmp_path / "state"), "-o", str(out))
    assert r.rc == 0, r.stderr
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>',
                     out.read_text(), re.S)
    assert data is not None
    listed = json.loads(data.group(1))["recent_errors"]
    want = [rec for rec in records
            if (rec["status"] is None and rec["error"] != "robots.txt")
            or (rec["status"] or 0) >= 400 or (rec["error"] or "").startswith("too large")]
    assert [(e["url"], e["error"]) for e in listed] == \
        [(rec["url"], rec["error"]) for rec in reversed(want[-20:])]
    assert {e["error"] for e in listed} >= {"robots.txt unavailable: connection refused"}
    assert "not html" not in {e["error"] for e in listed}
