"""The Scrapy dupefilter's RAM: what each structure may hold by default, and the
process's growth over a run, measured in a child process (issue 26: at most a
quarter of RFPDupeFilter's peak RSS at 10M requests, bench/README.md).

Bounds are structure sizes or RSS, never timings, and loose enough to hold on a
loaded machine: each fails by a margin on the defaults they replaced."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.dedup.conftest import require_kernel
from tests.support.helpers import REPO

pytest.importorskip("scrapy")

from dedup import UrlSeen
from dedup import scrapy as ds
from dedup.store.seencore import PySeenCore

MB = 1 << 20


def test_a_new_dir_plans_a_small_filter_an_existing_one_keeps_its_own(tmp_path: Path) -> None:
    """A new dir's Bloom filter is planned for ds.CAPACITY keys (1.3 MB), not
    UrlSeen's 10M (12.7 MB from the first request), and grows by layers; the
    default is only a new dir's: a dir made with another capacity reopens (an
    explicit capacity would be refused as a geometry mismatch)."""
    from scrapy import Request
    df = ds.UrlSeenDupeFilter(tmp_path / "new")
    df.open()
    try:
        assert df.seen is not None
        st = df.seen.stats()
        assert st["capacity"] == ds.CAPACITY == 1_000_000
        assert st["error_rate"] == ds.ERROR_RATE == 0.05  # a false positive: an index lookup
        assert st["bytes"] < 1 * MB  # 1.3 MB at 1%
        assert df.seen.geometry.growth >= 2
    finally:
        df.close("finished")
    with UrlSeen(tmp_path / "old", capacity=50_000) as seen:
        seen.add("https://a.example/1")
    df = ds.UrlSeenDupeFilter(tmp_path / "old")
    df.open()
    try:
        assert df.seen is not None and df.seen.geometry.capacity == 50_000
        assert df.seen.geometry.error_rate == 0.01  # UrlSeen's, kept
        assert df.request_seen(Request("https://a.example/1")) is True
    finally:
        df.close("finished")


def test_the_confirm_cache_fits_its_default_budget() -> None:
    """Filled past its size, the default cache of recent keys stays within its
    budget (16 bytes a key: 1 MB) and holds about its size."""
    core = PySeenCore(1, cache_bytes=16 * ds.CONFIRM_CACHE, pending_keys=1,
                      pending_seconds=0, fast_page=lambda b: None, resolve=lambda ls, b: [],
                      probe=lambda f: [], lookup=lambda f: [], write=lambda b: None)
    rng = np.random.default_rng(3)
    for _ in range(3):
        core.learn(rng.integers(1, 2**64, size=(65_536, 2), dtype=np.uint64).tobytes())
    assert core.cache_buckets * 64 <= 16 * ds.CONFIRM_CACHE
    assert core.cached >= 0.9 * ds.CONFIRM_CACHE


_CHILD = r"""
import json, sys, tempfile
from scrapy import Request
from dedup.scrapy import UrlSeenDupeFilter

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

df = UrlSeenDupeFilter(tempfile.mkdtemp(prefix="rss-"))
df.open()
df.request_seen(Request("https://warm.example/"))
base = rss()
n = int(sys.argv[1])
for start in range(0, n, 5000):  # a few thousand requests alive at a time, as a crawl
    batch = [Request(f"https://h{i % 997}.example/p/{i}") for i in range(start, start + 5000)]
    for r in batch:
        df.request_seen(r)
    for r in batch[::7]:
        df.request_seen(r)  # repeats: confirm cache hits
    del batch
grown = rss() - base
df.close("finished")
print(json.dumps({"grown": grown}))
"""


def test_rss_growth_over_200k_distinct_requests_is_bounded() -> None:
    """200,000 distinct request URLs (and repeats) grow the process by under 16.5 MB
    above its RSS after open (the filter, the confirm cache, the index buffer and
    runs, SQLite, and the child's own 5,000 live Requests): measured 12.2-13.7 MB;
    18.2-19.5 MB with a 1% filter, a 131,072-key confirm cache, a 32,768-record
    buffer, SQLite's 2 MB page cache and 16,384-record merge steps, and 35 MB
    before those (a 10M-key filter, a 500,000-key confirm cache)."""
    require_kernel()  # the bound is the compiled path's; the numpy/Python one holds more
    out = subprocess.run([sys.executable, "-c", _CHILD, "200000"], capture_output=True,
                         text=True, cwd=REPO, timeout=600, check=True)
    grown = json.loads(out.stdout.strip().splitlines()[-1])["grown"]
    assert grown < 16.5 * MB, f"RSS grew {grown / MB:.1f} MB"


def test_the_ledger_keeps_a_small_sqlite_page_cache(tmp_path: Path) -> None:
    """The filter only appends and marks recent rows: SQLite's page cache of its
    ledger is LEDGER_CACHE_KIB (256 KiB), not SQLite's default 2,000 KiB, which it
    filled within 1M requests (2.1 MB of the process's RSS)."""
    df = ds.UrlSeenDupeFilter(tmp_path / "s")
    df.open()
    try:
        assert df.seen is not None
        (size,) = df.seen.ledger.journal._db.execute("PRAGMA cache_size").fetchone()
        assert size == -ds.LEDGER_CACHE_KIB and ds.LEDGER_CACHE_KIB <= 512
    finally:
        df.close("finished")
    with UrlSeen(tmp_path / "crawl") as seen:  # a crawl's keeps SQLite's default
        assert seen.ledger.journal._db.execute("PRAGMA cache_size").fetchone() == (-2000,)


@pytest.mark.parametrize("bad", [0, -5, True, 1.5])
def test_a_bad_ledger_cache_size_is_refused(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="cache_kib"):
        UrlSeen(tmp_path / "s", ledger_cache_kib=bad)  # type: ignore[arg-type]


def test_the_error_rate_setting_plans_a_new_dir(tmp_path: Path) -> None:
    from scrapy.utils.test import get_crawler
    crawler = get_crawler(settings_dict={"BLOOMCRAWL_SEEN_DIR": str(tmp_path / "s"),
                                         "BLOOMCRAWL_SEEN_ERROR_RATE": 0.02})
    df = ds.UrlSeenDupeFilter.from_crawler(crawler)
    df.open()
    try:
        assert df.seen is not None and df.seen.geometry.error_rate == 0.02
    finally:
        df.close("finished")
