"""Scrapy's duplicate filters head to head: dedup.scrapy.UrlSeenDupeFilter against
Scrapy's own RFPDupeFilter (with JOBDIR, so both persist), in the same run.

Why: a Scrapy user chooses a dupefilter on what each ``request_seen`` call costs
(Scrapy calls it once per request), on RAM at the size of the crawl, on the bytes
it keeps, on how long a resumed job waits before its first request, and on
whether a kill -9 loses anything. Each figure comes from its own process:

* ``requests/s``: requests (absolute URLs from the scale stream,
  ``bench/crawlstream.py``, resolved with ``urljoin`` as ``response.follow`` does)
  through ``request_seen``, per CPU-second of those calls alone (the stream and
  the ``Request`` objects are built outside the clock; CPU time, because the
  machine it runs on is shared: wall time is reported beside it);
* ``peak RSS``: the process's VmHWM over the run, and its RSS after the imports;
* ``bytes/URL``: the state on disk after ``close()`` per distinct URL
  (ours: the state dir, which keeps each GET's URL text as the kill -9 frontier;
  RFPDupeFilter: ``requests.seen``);
* ``reopen``: a fresh process constructing and opening the filter on that state,
  then answering one request (RFPDupeFilter reads requests.seen whole).

``--crawl`` also runs a real Scrapy crawl of the demo site (``crawler.demo``,
served on 127.0.0.1) with each filter and times it.

    .venv/bin/python bench/scrapy_dupefilter.py --requests 1000000 --crawl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from procstats import du, proc_status  # noqa: E402

# pages of the stream turned into Requests at a time (~730): 200 pages (15,000
# Requests alive at once) put ~20 MB of the harness's own into both workers' RSS
CHUNK_PAGES = 10


def requests_of(pages: list[tuple[str, list[str]]]) -> list[str]:
    out = []
    for page, hrefs in pages:
        for href in hrefs:
            url = urljoin(page, href)
            if url.startswith(("http://", "https://")):
                out.append(url.split("#", 1)[0])
    return out


def make_filter(impl: str, state: Path) -> Any:
    if impl == "urlseen":
        from dedup.scrapy import UrlSeenDupeFilter
        df = UrlSeenDupeFilter(state)
    else:
        from scrapy.dupefilters import RFPDupeFilter
        state.mkdir(parents=True, exist_ok=True)
        df = RFPDupeFilter(str(state))
    df.open()
    return df


def state_files(impl: str, state: Path) -> list[Path]:
    if impl == "rfp":
        return [state / "requests.seen"]
    return [p for p in state.rglob("*") if p.is_file()]


def run_worker(impl: str, state: Path, n: int, progress: int = 0) -> dict[str, Any]:
    from crawlstream import CrawlStream
    from scrapy import Request
    base = proc_status()["VmRSS"]
    df = make_filter(impl, state)
    stream = CrawlStream(seed=1)
    done = new = 0
    spent = wall = 0.0
    while done < n:
        reqs = [Request(u) for u in requests_of(stream.chunk(CHUNK_PAGES))][:n - done]
        seen = df.request_seen
        t, c = time.perf_counter(), time.process_time()
        for r in reqs:
            if not seen(r):
                new += 1
        spent += time.process_time() - c
        wall += time.perf_counter() - t
        done += len(reqs)
        if progress and done // progress > (done - len(reqs)) // progress:
            print(f"{impl} {done:,} requests {new:,} new {done / spent:,.0f} req/s "
                  f"RSS {proc_status()['VmRSS']:.0f} MB", file=sys.stderr, flush=True)
    t = time.perf_counter()
    df.close("finished")
    close_s = time.perf_counter() - t
    st = proc_status()
    size = du(state_files(impl, state))
    return {"impl": impl, "requests": done, "distinct": new, "cpu_s": spent, "wall_s": wall,
            "requests_per_s": done / spent, "close_s": close_s,
            "rss_base_mb": base, "peak_rss_mb": st["VmHWM"], "disk_bytes": size,
            "bytes_per_url": size / max(new, 1)}


def reopen_worker(impl: str, state: Path) -> dict[str, Any]:
    from scrapy import Request
    t, c = time.perf_counter(), time.process_time()
    df = make_filter(impl, state)
    df.request_seen(Request("https://www.site1.example/"))
    opened, opened_cpu = time.perf_counter() - t, time.process_time() - c
    st = proc_status()
    df.close("finished")
    return {"reopen_s": opened, "reopen_cpu_s": opened_cpu, "reopen_peak_rss_mb": st["VmHWM"]}


def child(args: list[str]) -> dict[str, Any]:
    return children([args])[0]


def children(argvs: list[list[str]]) -> list[dict[str, Any]]:
    """Run workers at once (each its own process; their progress goes to stderr)
    and return each one's figures."""
    procs = [subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE,
                              text=True, cwd=REPO) for args in argvs]
    outs = [p.communicate()[0] for p in procs]
    for p in procs:
        if p.returncode:
            raise SystemExit(f"worker {p.args} failed: {p.returncode}")
    return [json.loads(out.strip().splitlines()[-1]) for out in outs]


SPIDER = '''
import scrapy

class Demo(scrapy.Spider):
    name = "demo"

    def __init__(self, seeds, **kw):
        super().__init__(**kw)
        self.start_urls = seeds.split(",")

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href)
'''


async def crawl_demo(tmp: Path, pages: int) -> list[dict[str, Any]]:
    from crawler.demo.serve import serve_site
    from crawler.demo.site import SiteSpec
    spider = tmp / "demo_spider.py"
    spider.write_text(SPIDER)
    rows = []
    for impl in ("urlseen", "rfp"):
        async with serve_site(SiteSpec(hosts=2, pages=pages, seed=3)) as running:
            opts = {"LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": "False",
                    "ROBOTSTXT_OBEY": "False", "CONCURRENT_REQUESTS": "32",
                    "CONCURRENT_REQUESTS_PER_DOMAIN": "16", "JOBDIR": str(tmp / f"job-{impl}")}
            if impl == "urlseen":
                opts["DUPEFILTER_CLASS"] = "dedup.scrapy.UrlSeenDupeFilter"
                opts["SPIDER_MIDDLEWARES"] = json.dumps(
                    {"dedup.scrapy.UrlSeenSpiderMiddleware": 10})
                opts["DOWNLOADER_MIDDLEWARES"] = json.dumps(
                    {"dedup.scrapy.UrlSeenDownloaderMiddleware": 10})
            args = [a for k, v in opts.items() for a in ("-s", f"{k}={v}")]
            t = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "scrapy", "runspider", str(spider), *args,
                "-a", "seeds=" + ",".join(running.seeds), cwd=tmp,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
            _, err = await proc.communicate()
            wall = time.perf_counter() - t
            if proc.returncode:
                raise SystemExit(err.decode()[-2000:])
            fetched = running.total_pages()
            rows.append({"impl": impl, "wall_s": wall, "pages": len(fetched),
                         "fetches": sum(fetched.values())})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1_000_000, help="0: only --crawl")
    ap.add_argument("--crawl", action="store_true", help="also crawl the demo site")
    ap.add_argument("--crawl-pages", type=int, default=1000, help="pages per demo host")
    ap.add_argument("--parallel", action="store_true",
                    help="run the two filters' workers at once (same load, half the wall time)")
    ap.add_argument("--progress", type=int, default=0, metavar="N",
                    help="print each worker's figures to stderr every N requests")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--worker", choices=["urlseen", "rfp"], help=argparse.SUPPRESS)
    ap.add_argument("--reopen", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        res = reopen_worker(a.worker, a.state) if a.reopen else \
            run_worker(a.worker, a.state, a.requests, a.progress)
        print(json.dumps(res))
        return
    figures: dict[str, Any] = {"requests": a.requests, "rows": []}
    with tempfile.TemporaryDirectory(prefix="scrapy-df-bench-") as tmp:
        impls = ("urlseen", "rfp")
        argvs = [["--worker", impl, "--state", str(Path(tmp, impl)), "--requests",
                  str(a.requests), "--progress", str(a.progress)] for impl in impls]
        if not a.requests:
            impls, argvs = (), []
        rows = children(argvs) if a.parallel else [child(argv) for argv in argvs]
        for impl, row in zip(impls, rows, strict=True):
            row.update(child(["--worker", impl, "--reopen", "--state", str(Path(tmp, impl))]))
            figures["rows"].append(row)
            print(f"{impl:8} {row['requests']:>9,} requests {row['distinct']:>9,} distinct "
                  f"{row['requests_per_s']:>9,.0f} req/s  peak RSS {row['peak_rss_mb']:6.0f} MB "
                  f"(base {row['rss_base_mb']:.0f})  {row['bytes_per_url']:5.1f} B/URL  "
                  f"close {row['close_s']:.2f} s  reopen {row['reopen_s']:.2f} s "
                  f"({row['reopen_cpu_s']:.2f} CPU) "
                  f"(peak {row['reopen_peak_rss_mb']:.0f} MB)", flush=True)
        if a.crawl:
            figures["crawl"] = asyncio.run(crawl_demo(Path(tmp), a.crawl_pages))
            for row in figures["crawl"]:
                print(f"crawl {row['impl']:8} {row['pages']:>6} pages {row['fetches']:>6} "
                      f"fetches {row['wall_s']:6.1f} s")
    if a.out:
        a.out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
