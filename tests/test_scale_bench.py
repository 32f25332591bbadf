"""The scale benchmark at toy size, so that it cannot rot while storage is rewritten.

No timing is asserted (speed targets live in bench/): only that every
implementation runs, counts the same distinct URLs, and reports its windows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urljoin

from w3lib.url import canonicalize_url, url_query_cleaner

from dedup import Canonicalizer

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_scale_bench_counts_agree(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "scale.py"), "--distinct", "10000", "--window", "4000",
         "--jobs", "2", "--cold", "--hosts", "2000", "--workdir", str(tmp_path / "work"),
         "--out", str(out)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["complete"] is True
    runs = {(r["impl"], r["cold"]) for r in result["runs"]}
    assert runs == {("urlseen", False), ("sqlite", False), ("set", False), ("scrapy", False),
                    ("urlseen", True), ("sqlite", True)}
    counts = set(map(tuple, result["counts"].values()))
    assert len(counts) == 1, result["counts"]
    distinct, pages = counts.pop()
    assert distinct >= 10000 and pages % 100 == 0
    for run in result["runs"]:
        ws = run["windows"]
        assert len(ws) >= 2 and ws[-1]["distinct"] == distinct
        assert sum(w["new"] for w in ws) == distinct
        assert sum(w["links"] for w in ws) == 75 * pages
        assert all(w["links_per_cpu_s"] > 0 and w["vmhwm"] > 0 for w in ws)
        if run["impl"] in ("urlseen", "sqlite"):
            assert ws[-1]["state_bytes"] > 0
    verdicts = {row[0]: row[3] for row in result["ratios"]}
    assert any(k.startswith("links/CPU-s, UrlSeen ÷ (a)") for k in verdicts)
    assert result["restart"]["reopen_open_s"] > 0 and result["restart"]["stats_cli_s"] > 0
    assert "FAIL" not in proc.stdout
    again = subprocess.run([sys.executable, str(BENCH / "scale.py"), "--report", str(out)],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert "Per window of distinct URLs" in again and "Issue 10 targets" in again



def test_scale_bench_page_by_page_counts_the_same(tmp_path: Path) -> None:
    """--feed page (one call per page, the crawler's way) against the default groups."""
    counts = []
    for feed in ("page", "group"):
        out = tmp_path / f"{feed}.json"
        proc = subprocess.run(
            [sys.executable, str(BENCH / "scale.py"), "--distinct", "5000", "--window", "5000",
             "--impl", "urlseen,sqlite", "--jobs", "2", "--hosts", "2000", "--feed", feed,
             "--workdir", str(tmp_path / feed), "--out", str(out)],
            capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        result = json.loads(out.read_text())
        assert {r["feed"] for r in result["runs"]} == {feed}
        counts.append(set(map(tuple, result["counts"].values())))
    assert len(counts[0]) == 1 and counts[0] == counts[1]


def test_stream_is_reproducible_and_agrees_with_w3lib() -> None:
    """Same seed, same pages; 75 links a page in the promised forms; the project's
    keys and Scrapy's canonical URLs name the same set (what lets the bench assert
    equal counts)."""
    sys.path.insert(0, str(BENCH))
    try:
        from crawlstream import TRACKING, CrawlStream
    finally:
        sys.path.remove(str(BENCH))
    a, b = CrawlStream(seed=3, hosts=500), CrawlStream(seed=3, hosts=500)
    pages = a.chunk(300) + a.chunk(300)
    assert pages == b.chunk(600)
    assert pages != CrawlStream(seed=4, hosts=500).chunk(600)
    hrefs = [h for _, links in pages for h in links]
    assert {len(links) for _, links in pages} == {75}
    for marker in ("../", "#", "utm_", "gclid", "fbclid", "//www.", "WWW.SITE", "/./",
                   "mailto:", "?sort=asc"):
        assert any(marker in h for h in hrefs), marker
    canon = Canonicalizer()
    ours, theirs = set(), set()
    for base, links in pages:
        ours.update(r[1] for r in canon.resolve_many(links, base) if r is not None)
        for href in links:
            url = urljoin(base, href)
            if url.startswith(("http://", "https://")):
                theirs.add(canonicalize_url(url_query_cleaner(url, TRACKING, remove=True,
                                                              keep_fragments=True)))
    assert ours == theirs
    assert 0.1 < len(ours) / len(hrefs) < 0.5  # mostly repeats, many new


def test_lookup_bench_answers_alike_warm_and_cold(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "lookup_bench.py"), "--pages", "3000", "--record", "400",
         "--repeat", "1", "--state", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines()
            if line.startswith(("| page by page", "| 100 pages a call"))]
    assert [(r[0].strip(), r[2].strip()) for r in rows] == [
        ("page by page", "warm"), ("page by page", "cold"),
        ("100 pages a call", "warm"), ("100 pages a call", "cold")]
    found = [int(r[3].replace(",", "")) for r in rows]
    assert found[0] == found[1] > 0 and found[2] == found[3] > 0
