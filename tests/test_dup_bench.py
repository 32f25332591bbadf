"""bench/dup_bench.py at toy size, so that it cannot rot while the learner is built.

No timing or ratio is asserted (those live in bench/README.md): only that each crawler
runs against the site's counting server and that what the server counted adds up. On
a host whose only pattern is per-response noise no URL has a duplicate, so an exact-URL
crawler ends by itself having found every content page.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run_bench(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "dup.json"
    env = dict(os.environ, BENCH_JSON=str(out))
    proc = subprocess.run([sys.executable, str(BENCH / "dup_bench.py"), *args],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def crawlers() -> str:
    have = ["bloomcrawl", "scrapy"]
    if importlib.util.find_spec("crawlee") is not None:  # the bench extra, not the test one
        have.append("crawlee")
    return ",".join(have)


def test_each_crawler_finds_the_whole_site_when_no_url_has_a_duplicate(tmp_path):
    result = run_bench(tmp_path, "--each-pattern", "--patterns", "noise", "--pages", "40",
                       "--cap", "500", "--crawlers", crawlers(),
                       "--variant", "again=--max-depth 20")
    runs = result["patterns"]["noise"]
    assert [r["crawler"] for r in runs] == [*crawlers().split(","), "bloomcrawl (again)"]
    for r in runs:
        assert r["returncode"] == 0 and r["ended_itself"], r
        assert r["found"] == r["truth"] >= 40, r
        # a fetch per page, plus robots.txt and a sitemap for those that ask for them
        assert r["truth"] <= r["fetches"] <= r["truth"] + 2, r


@pytest.mark.parametrize("crawler", ["bloomcrawl", "scrapy"])
def test_a_capped_crawl_is_counted_by_the_server(tmp_path, crawler):
    result = run_bench(tmp_path, "--pages", "240", "--cap", "150", "--crawlers", crawler)
    (r,) = result["runs"]
    assert not r["ended_itself"]
    assert 150 <= r["fetches"] <= 150 + 40  # the cap, and what was in flight
    assert sum(h["fetches"] for h in r["hosts"]) == r["fetches"]
    assert 0 < r["found"] < r["truth"]
    assert r["per_page"] == r["fetches"] / r["found"]
