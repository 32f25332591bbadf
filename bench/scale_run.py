"""One implementation fed the crawl stream, measured per window (a subprocess of scale.py).

Why a process per implementation: RSS, peak RSS and ``/proc/self/io`` are
per process, so each implementation must run alone in its own. The stream is
generated here, 100 pages at a time (one group commit), outside the timed
region; its CPU time is measured and reported separately.

Prints one line ``W <json>`` per window of distinct URLs and ``R <json>`` at
the end. Also ``--reopen DIR``: time ``UrlSeen(DIR)`` + ``close()`` in a fresh
process (a restart on the final state).

    .venv/bin/python bench/scale_run.py urlseen STATE_DIR --distinct 2000000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from crawlstream import CrawlStream
from procstats import drop_cache, du, proc_io, proc_status
from scale_impls import COLD_IMPLS, IMPLS, Impl, make

GROUP = 100  # default pages per transaction / group commit, and per cache drop in --cold


class Meter:
    """Accumulates one window's counters and turns them into a row."""

    def __init__(self) -> None:
        self.distinct = 0
        self.total_links = 0
        self.total_pages = 0
        self._start_window()

    def _start_window(self) -> None:
        self.pages = self.links = 0
        self.cpu = self.wall = self.gen_cpu = 0.0
        self.io0 = proc_io()
        self.distinct0 = self.distinct
        self.snap0 = 0
        self.peak_anon = 0.0

    def sample(self) -> None:
        """Between groups, untimed: anonymous RSS has no kernel-kept peak."""
        self.peak_anon = max(self.peak_anon, proc_status()["RssAnon"])

    def window(self, impl: Impl) -> dict[str, Any]:
        io = proc_io()
        new = self.distinct - self.distinct0
        state = du(impl.files())
        written = io["write_bytes"] - self.io0["write_bytes"]
        read = io["read_bytes"] - self.io0["read_bytes"]
        row = {"distinct": self.distinct, "new": new, "pages": self.pages, "links": self.links,
               "cpu_s": self.cpu, "wall_s": self.wall, "gen_cpu_s": self.gen_cpu,
               "links_per_cpu_s": self.links / self.cpu if self.cpu else None,
               "links_per_s": self.links / self.wall if self.wall else None,
               "state_bytes": state, "state_b_per_url": state / self.distinct,
               "write_bytes": written, "written_b_per_new": written / new if new else None,
               "snapshot_write_bytes": impl.snapshot_bytes - self.snap0,
               "read_bytes": read, "read_b_per_page": read / self.pages if self.pages else None,
               "cancelled_write_bytes": io["cancelled_write_bytes"]
               - self.io0["cancelled_write_bytes"],
               **{k.lower(): v for k, v in proc_status().items()}}
        row["peak_anon"] = max(self.peak_anon, row["rssanon"])
        row["counters"] = impl.counters()  # cumulative: a window's are the differences
        self._start_window()
        self.snap0 = impl.snapshot_bytes
        return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    impl = make(args.impl, Path(args.state), snapshot_every=args.snapshot_every,
                capacity=args.capacity, feed=args.feed)
    stream = CrawlStream(seed=args.seed, hosts=args.hosts, zipf=args.zipf)
    m = Meter()
    windows = []
    edge = args.window
    process_time, perf_counter = time.process_time, time.perf_counter
    while m.distinct < args.distinct:
        g0 = process_time()
        pages = stream.chunk(args.group)
        n_links = sum(len(hrefs) for _, hrefs in pages)
        g1 = process_time()
        t0, c0 = perf_counter(), process_time()
        if args.feed == "group":
            new = impl.feed_group(pages)
        elif args.feed == "page":
            new = sum(impl.feed(base, hrefs) for base, hrefs in pages)
        else:
            new = sum(impl.feed_urls(base, hrefs) for base, hrefs in pages)
        m.distinct += new
        impl.commit(m.distinct)
        done = m.distinct >= args.distinct
        if done:
            impl.close()  # the final commit / snapshot belongs to the last window
        m.cpu += process_time() - c0
        m.wall += perf_counter() - t0
        m.sample()
        m.gen_cpu += g1 - g0
        m.pages += len(pages)
        m.links += n_links
        m.total_pages += len(pages)
        m.total_links += n_links
        if args.cold and not done:
            drop_cache(impl.files())
        if m.distinct >= edge or done:
            row = m.window(impl)
            windows.append(row)
            print("W " + json.dumps(row), flush=True)
            while edge <= m.distinct:
                edge += args.window
    name = impl.name + {"group": "", "page": ", page by page", "url": ", URL by URL"}[
        args.feed] + (
        f", {args.group} pages a group" if args.group != GROUP else "")
    return {"impl": args.impl, "name": name, "cold": args.cold, "feed": args.feed,
            "group": args.group,
            "group_commit": getattr(impl, "group_commit", None),
            "distinct": m.distinct, "pages": m.total_pages, "links": m.total_links,
            "windows": windows}


def reopen(state: str) -> dict[str, Any]:
    """Seconds to open (restart) and close UrlSeen on a finished state directory."""
    from dedup import UrlSeen
    t0 = time.perf_counter()
    seen = UrlSeen(state)
    opened = time.perf_counter() - t0
    seen.close()
    return {"open_s": opened, "open_close_s": time.perf_counter() - t0,
            "rss_mb": proc_status()["VmRSS"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("impl", choices=[*IMPLS, "reopen"])
    ap.add_argument("state", help="state directory (must not hold another run's state)")
    ap.add_argument("--distinct", type=int, default=1_000_000)
    ap.add_argument("--window", type=int, default=500_000)
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--feed", choices=("group", "page", "url"), default="group",
                    help="a group commit's pages in one call where the API batches (group), "
                         "one call per page (page), or per link where the API has a "
                         "per-URL call (url)")
    ap.add_argument("--group", type=int, default=GROUP,
                    help="pages per group commit (and per call with --feed group): the "
                         "crawler's groups are the pages that finish during one commit")
    ap.add_argument("--snapshot-every", type=int, default=100_000)
    ap.add_argument("--capacity", type=int, default=None,
                    help="UrlSeen's planned capacity (default: the library's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hosts", type=int, default=20_000)
    ap.add_argument("--zipf", type=float, default=1.0)
    args = ap.parse_args()
    if args.impl == "reopen":
        print("R " + json.dumps(reopen(args.state)), flush=True)
        return
    if args.cold and args.impl not in COLD_IMPLS:
        ap.error(f"--cold applies to {', '.join(COLD_IMPLS)} only (the others keep no files)")
    print("R " + json.dumps(run(args)), flush=True)


if __name__ == "__main__":
    main()
