"""Ledger format 2 (dedup.journal.journal) vs format 1 (tests/support/ledger_v1.py, the
format ``bloomcrawl migrate`` reads) on one stream.

A crawl-like admission stream: pages of ``--per-page`` new fingerprints (random
16-byte keys) with their URLs (hosts drawn from a Zipf-like distribution over
10k hosts, most links of a page on the page's own host), one group commit per
``--commit-every`` pages. Variants, each in a fresh file, in this process:

- ``journal``: ``Journal.append(fps, depth=...)`` (the pure seen-set: no URL text)
- ``journal+urls``: ``Journal.append(fps, depth=..., urls=..., hosts=...)``
- ``ledger-v1``: ``Ledger.insert(rows)`` (format 1), at ``--v1-urls`` URLs

Reported per variant: append µs per page (the call only; stream generation is
not timed), commit µs, bytes on disk per URL (db + WAL after close), bytes
written per URL (/proc/self/io write_bytes, so WAL, checkpoints and the final
checkpoint at close are all in), open time and ``counts()`` time on the result,
and the largest the WAL file got (sampled after every commit).

    .venv/bin/python bench/journal_bench.py --urls 10000000 --v1-urls 2000000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dedup.journal import journal as journal_mod
from dedup.journal.format import State
from dedup.journal.journal import Journal
from tests.support.ledger_v1 import Ledger

HOSTS = 10_000


def write_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    raise RuntimeError("no write_bytes in /proc/self/io")


def pages(n_urls: int, per_page: int, seed: int = 0):
    """Yield ``(fps, urls, hosts)`` per page, deterministic for a seed."""
    rng = np.random.default_rng(seed)
    # Zipf-like host popularity: host rank r drawn with weight 1/(r+1)
    weights = 1.0 / np.arange(1, HOSTS + 1)
    weights /= weights.sum()
    n_pages = n_urls // per_page
    block = 10_000
    i = 0
    for start in range(0, n_pages, block):
        count = min(block, n_pages - start)
        fps = rng.bytes(count * per_page * 16)
        page_hosts = rng.choice(HOSTS, size=count, p=weights)
        other = rng.choice(HOSTS, size=(count, per_page), p=weights)
        own = rng.random((count, per_page)) < 0.7
        for p in range(count):
            hosts = [f"host{page_hosts[p] if own[p, k] else other[p, k]}.example"
                     for k in range(per_page)]
            urls = [f"https://{h}/section/{(i + k) % 977}/article-{i + k}.html?ref=nav"
                    for k, h in enumerate(hosts)]
            i += per_page
            yield fps[p * per_page * 16:(p + 1) * per_page * 16], urls, hosts


def run(variant: str, n_urls: int, per_page: int, commit_every: int, workdir: Path) -> dict:
    path = workdir / f"{variant}.sqlite"
    w0 = write_bytes()
    t_append = t_commit = 0.0
    n_pages = 0
    wal = Path(f"{path}-wal")
    peak_wal = 0
    opened = (Ledger(path, autocommit=False) if variant == "ledger-v1"
              else Journal(path, autocommit=False))
    with opened as store:
        for fps, urls, hosts in pages(n_urls, per_page):
            if variant == "ledger-v1":
                rows = [(fps[k * 16:(k + 1) * 16], u, h, 1, State.QUEUED)
                        for k, (u, h) in enumerate(zip(urls, hosts, strict=True))]
                t = time.perf_counter()
                store.insert(rows)
            elif variant == "journal+urls":
                t = time.perf_counter()
                store.append(fps, depth=1, urls=urls, hosts=hosts)
            else:
                t = time.perf_counter()
                store.append(fps, depth=1)
            t_append += time.perf_counter() - t
            n_pages += 1
            if n_pages % commit_every == 0:
                t = time.perf_counter()
                store.commit()
                t_commit += time.perf_counter() - t
                if wal.exists():
                    peak_wal = max(peak_wal, wal.stat().st_size)
    written = write_bytes() - w0
    size = sum(p.stat().st_size for p in workdir.glob(f"{variant}.sqlite*"))
    t = time.perf_counter()
    reopened = Ledger(path) if variant == "ledger-v1" else Journal(path)
    t_open = time.perf_counter() - t
    t = time.perf_counter()
    counts = reopened.counts()
    t_counts = time.perf_counter() - t
    reopened.close()
    n = n_pages * per_page
    assert counts["queued"] == n, counts
    return {"variant": variant, "urls": n, "append_us_page": t_append / n_pages * 1e6,
            "commit_us": t_commit / max(1, n_pages // commit_every) * 1e6,
            "disk_B_url": size / n, "written_B_url": written / n,
            "open_ms": t_open * 1e3, "counts_ms": t_counts * 1e3, "peak_wal_mb": peak_wal / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--urls", type=int, default=2_000_000)
    ap.add_argument("--v1-urls", type=int, default=None, help="format-1 size (default --urls)")
    ap.add_argument("--per-page", type=int, default=10)
    ap.add_argument("--commit-every", type=int, default=100)
    ap.add_argument("--variants", default="journal,journal+urls,ledger-v1")
    ap.add_argument("--page-size", type=int, default=journal_mod.PAGE_SIZE)
    ap.add_argument("--autocheckpoint", type=int, default=journal_mod.WAL_AUTOCHECKPOINT)
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    args = ap.parse_args()
    journal_mod.PAGE_SIZE = args.page_size
    journal_mod.WAL_AUTOCHECKPOINT = args.autocheckpoint
    workdir = Path(tempfile.mkdtemp(prefix="journal-bench-", dir=args.dir))
    print(f"page_size={args.page_size} wal_autocheckpoint={args.autocheckpoint} "
          f"per_page={args.per_page} commit_every={args.commit_every}", flush=True)
    print("| variant | URLs | append µs/page | commit µs | disk B/URL | written B/URL "
          "| open ms | counts() ms | peak WAL MB |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    try:
        for variant in args.variants.split(","):
            n = args.v1_urls or args.urls if variant == "ledger-v1" else args.urls
            r = run(variant, n, args.per_page, args.commit_every, workdir)
            print(f"| {r['variant']} | {r['urls']:,} | {r['append_us_page']:.1f} "
                  f"| {r['commit_us']:.0f} | {r['disk_B_url']:.1f} | {r['written_B_url']:.1f} "
                  f"| {r['open_ms']:.1f} | {r['counts_ms']:.1f} | {r['peak_wal_mb']:.1f} |",
                  flush=True)
            for p in workdir.glob(f"{variant}.sqlite*"):
                os.unlink(p)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
