"""Duplicate-URL benchmark: bloomcrawl, Scrapy and Crawlee on a site whose different URLs
carry the same content (issue 39), each capped at the same number of fetches.

Why: a crawler that never fetches the same *spelling* twice still wastes most of a
broad crawl on the same *content* under other URLs: session ids, parameters that
change nothing, path aliases, printer views, calendars, facets, relative-link
loops. This measures that waste per crawler, by the site's ground truth.

Setup, all in one run:

* **The site**: ``tests.support.dupsite`` (default: its six hosts, ~3,000 distinct
  content pages, seed 1), served by real aiohttp.web in a SEPARATE process, one
  127.0.0.x address per host on one port (distinct ports of 127.0.0.1 where those
  addresses cannot be bound). Every request is counted there, per crawler run
  (the counts are reset between runs, and each run sees the same sequence of
  session ids and noise): no crawler's own statistics are trusted.
* **bloomcrawl**: ``python -m crawler crawl SEEDS --state NEW_DIR --allow-private
  --delay 0 --max-pages CAP --quiet`` plus ``--bloomcrawl-args``; every other
  setting at its default (robots.txt, sitemaps, max depth 20, 2 fetches per host).
* **Scrapy**: a plain ``scrapy.Spider`` following every link of the page's own
  host (``LinkExtractor()``), default settings (the default ``RFPDupeFilter``,
  16 requests in flight, 8 per host, no depth limit, cookies on),
  ``CLOSESPIDER_PAGECOUNT = CAP``.
* **Crawlee for Python**: ``ParselCrawler`` whose handler calls
  ``enqueue_links()`` (same hostname, the default), default request queue
  (its unique-key dedup) and concurrency, ``max_requests_per_crawl = CAP``.

Per crawler: fetches (every request the site answered, robots.txt included);
distinct content pages found (content ids the site served with a 200, by its
ground truth); fetches per distinct page; % of the reachable content found;
whether it ended by itself before the cap; wall time and CPU (user + system of
the crawler's process, from ``os.wait4``; the server's CPU apart); and the same
per host.

    .venv/bin/python bench/dup_bench.py                       # 3,000 pages, cap 25,000
    .venv/bin/python bench/dup_bench.py --quick               # 600 pages, cap 3,000
    .venv/bin/python bench/dup_bench.py --crawlers bloomcrawl \\
        --variant learn-off="--no-learn"                      # learning on and off
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve()
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from run import emit  # noqa: E402

HOST_IPS = [f"127.0.0.{i}" for i in range(2, 256)]
RUN_TIMEOUT = 1800.0
CRAWLERS = ("bloomcrawl", "scrapy", "crawlee")


# -- the server process ------------------------------------------------------------------


async def _serve(seed: int, pages: int, hosts: list[list[str]] | None) -> None:
    """Serve the site; on stdin, ``reset`` zeroes the counts and ``report`` prints them."""
    from tests.support.dupsite import build

    site = build(seed, hosts, pages=pages)
    n = len(site.hosts)
    try:
        serving = site.serve(ips=HOST_IPS[:n])
        running = await serving.__aenter__()
    except OSError:
        serving = site.serve()
        running = await serving.__aenter__()
    print(json.dumps({"origins": running.origins}), flush=True)
    loop = asyncio.get_running_loop()
    while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        if line == "reset":
            running.reset()
            print(json.dumps({"ok": True}), flush=True)
        elif line == "report":
            print(json.dumps({"hosts": [
                {"fetches": log.n, "robots": log.robots, "statuses": dict(log.statuses),
                 "distinct_urls": len(log.requests), "content": sorted(log.content),
                 "top": log.requests.most_common(3)} for log in running.logs]}), flush=True)
    await serving.__aexit__(None, None, None)


class Server:
    """The site's process and its command channel."""

    def __init__(self, seed: int, pages: int, hosts: list[list[str]] | None = None) -> None:
        cmd = [sys.executable, str(THIS), "--_role", "server", "--seed", str(seed),
               "--pages", str(pages), "--_hosts", json.dumps(hosts)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.origins: list[str] = self._read()["origins"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the site's server process ended")
        return json.loads(line)

    def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._read()

    def cpu(self) -> float:
        return _proc_cpu(self.proc.pid)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the peers (each in its own process) --------------------------------------------------


def _scrapy(seeds: list[str], cap: int) -> None:
    from urllib.parse import urlsplit

    import scrapy
    from scrapy.crawler import CrawlerProcess
    from scrapy.http import HtmlResponse
    from scrapy.linkextractors import LinkExtractor

    class AllLinks(scrapy.Spider):
        """Every link of the page's own host, Scrapy's defaults for the rest."""

        name = "dupbench"
        start_urls = tuple(seeds)
        links = LinkExtractor()

        def parse(self, response):  # type: ignore[no-untyped-def]
            if not isinstance(response, HtmlResponse):
                return
            here = urlsplit(response.url).netloc
            for link in self.links.extract_links(response):
                if urlsplit(link.url).netloc == here:
                    yield scrapy.Request(link.url, callback=self.parse)

    process = CrawlerProcess({"CLOSESPIDER_PAGECOUNT": cap, "LOG_LEVEL": "WARNING",
                              "TELNETCONSOLE_ENABLED": False})
    process.crawl(AllLinks)
    process.start()


def _crawlee(seeds: list[str], cap: int) -> None:
    import logging

    from crawlee.crawlers import ParselCrawler, ParselCrawlingContext

    async def go() -> None:
        crawler = ParselCrawler(max_requests_per_crawl=cap, configure_logging=False)

        @crawler.router.default_handler
        async def handler(context: ParselCrawlingContext) -> None:
            await context.enqueue_links()

        await crawler.run(seeds)

    logging.basicConfig(level=logging.WARNING)
    asyncio.run(go())


# -- one run ----------------------------------------------------------------------------------


def _command(who: str, seeds: Path, state: Path, cap: int, extra: list[str]) -> list[str]:
    if who == "bloomcrawl":
        return [sys.executable, "-m", "crawler", "crawl", str(seeds), "--state", str(state),
                "--allow-private", "--delay", "0", "--max-pages", str(cap), "--quiet", *extra]
    return [sys.executable, str(THIS), "--_role", who, "--_seeds", str(seeds),
            "--cap", str(cap)]


def run_one(name: str, who: str, extra: list[str], server: Server, seeds: Path, tmp: Path,
            cap: int, truth: dict[int, set[str]]) -> dict[str, Any]:
    server.ask("reset")
    state = tmp / f"state-{name}"
    env = dict(os.environ, CRAWLEE_STORAGE_DIR=str(tmp / f"crawlee-{name}"),
               PYTHONPATH=str(ROOT))
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                "ALL_PROXY"):
        env.pop(var, None)
    cmd = _command(who, seeds, state, cap, extra)
    load = os.getloadavg()[0]
    cpu0 = server.cpu()
    errfile = tmp / f"stderr-{name}.txt"
    with open(errfile, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.DEVNULL, stderr=err, env=env)
        deadline = time.monotonic() + RUN_TIMEOUT
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        sys.stderr.write(f"{name} exited {rc}:\n{errfile.read_text(errors='replace')[-3000:]}\n")
    server_cpu = server.cpu() - cpu0
    report = server.ask("report")["hosts"]
    shutil.rmtree(state, ignore_errors=True)
    shutil.rmtree(tmp / f"crawlee-{name}", ignore_errors=True)  # its queue: a file a request
    hosts = []
    for h, r in enumerate(report):
        found = set(r["content"]) & truth[h]
        hosts.append({"host": h, "fetches": r["fetches"], "robots": r["robots"],
                      "found": len(found), "truth": len(truth[h]),
                      "per_page": r["fetches"] / max(1, len(found)),
                      "statuses": r["statuses"], "distinct_urls": r["distinct_urls"],
                      "top": r["top"]})
    fetches = sum(r["fetches"] for r in hosts)
    found = sum(r["found"] for r in hosts)
    total = sum(len(t) for t in truth.values())
    pages = fetches - sum(r["robots"] for r in hosts)
    return {"crawler": name, "returncode": rc, "fetches": fetches, "found": found,
            "truth": total, "per_page": fetches / max(1, found), "found_pct": 100 * found / total,
            "ended_itself": pages < cap and rc == 0, "wall_s": wall,
            "cpu_s": ru.ru_utime + ru.ru_stime, "server_cpu_s": server_cpu, "load1": load,
            "hosts": hosts}


def _runs(args: argparse.Namespace) -> list[tuple[str, str, list[str]]]:
    """(name, crawler, extra arguments) of each run, in order."""
    runs: list[tuple[str, str, list[str]]] = []
    for who in args.crawlers.split(","):
        if who not in CRAWLERS:
            raise SystemExit(f"unknown crawler {who!r}: choose from {', '.join(CRAWLERS)}")
        extra = shlex.split(args.bloomcrawl_args) if who == "bloomcrawl" else []
        runs.append((who, who, extra))
    for v in args.variant:
        name, _, vargs = v.partition("=")
        runs.append((f"bloomcrawl ({name})", "bloomcrawl",
                     shlex.split(args.bloomcrawl_args) + shlex.split(vargs)))
    return runs


def crawl_site(seed: int, pages: int, hosts: list[list[str]] | None, cap: int,
               runs: list[tuple[str, str, list[str]]], label: str = ""
               ) -> tuple[Any, list[dict[str, Any]]]:
    """Serve the site of (seed, hosts, pages) and crawl it with each run in turn."""
    from tests.support.dupsite import build

    server = Server(seed, pages, hosts)
    try:
        site = build(seed, hosts, pages=pages).at(server.origins)
        truth = {h: set(site.truth_of(h)) for h in range(len(site.hosts))}
        total = sum(len(t) for t in truth.values())
        print(f"site{label}: seed {seed}, {len(site.hosts)} hosts at {server.origins[0]}"
              f"{' .. ' + server.origins[-1] if len(site.hosts) > 1 else ''}, {total} "
              f"distinct content pages reachable; cap {cap} fetches a crawler", flush=True)
        results = []
        with tempfile.TemporaryDirectory(prefix="dup-bench-") as tmpdir:
            tmp = Path(tmpdir)
            seeds = tmp / "seeds.txt"
            seeds.write_text("".join(s + "\n" for s in site.seeds))
            for name, who, extra in runs:
                r = run_one(name, who, extra, server, seeds, tmp, cap, truth)
                results.append(r)
                print(f"  {name}: {r['fetches']} fetches, {r['found']}/{r['truth']} content "
                      f"pages ({r['found_pct']:.1f}%), {r['per_page']:.2f} fetches a page, "
                      f"{'ended by itself' if r['ended_itself'] else 'capped'}, "
                      f"{r['wall_s']:.1f} s, {r['cpu_s']:.1f} CPU s, load {r['load1']:.1f}",
                      flush=True)
    finally:
        server.close()
    return site, results


def drive(args: argparse.Namespace) -> dict[str, Any]:
    site, results = crawl_site(args.seed, args.pages, None, args.cap, _runs(args))
    total = results[0]["truth"] if results else len(site.truth)
    names = [host.name for host in site.hosts]
    patterns = [", ".join(sorted(host.spec.patterns)) for host in site.hosts]
    tables = [{
        "title": f"Duplicate-URL crawl, cap {args.cap:,} fetches (seed {args.seed}, "
                 f"{total:,} distinct content pages)",
        "columns": ["crawler", "fetches", "distinct found", "fetches / distinct",
                    "content found %", "ends by itself", "wall s", "CPU s"],
        "rows": [[r["crawler"], r["fetches"], r["found"], r["per_page"], r["found_pct"],
                  "yes" if r["ended_itself"] else "no (cap)", r["wall_s"], r["cpu_s"]]
                 for r in results],
        "notes": ["Fetches: every request the site answered (robots.txt included), counted "
                  "by the server; found: content ids it served with a 200, by the "
                  "generator's ground truth. CPU: the crawler's process (user + system)."]}, {
        "title": "Per host: fetches / distinct content found (found of reachable)",
        "columns": ["host", "patterns", *[r["crawler"] for r in results]],
        "rows": [[f"{h} {names[h]}", patterns[h],
                  *[f"{r['hosts'][h]['per_page']:.1f} ({r['hosts'][h]['found']}/"
                    f"{r['hosts'][h]['truth']})" for r in results]]
                 for h in range(len(site.hosts))]}]
    result = {"seed": args.seed, "pages": args.pages, "cap": args.cap, "truth": total,
              "runs": results}
    emit(tables, **result)
    return result


def drive_each_pattern(args: argparse.Namespace) -> dict[str, Any]:
    """One host with one pattern at a time: what each pattern alone costs a crawler."""
    from tests.support.dupsite import PATTERNS

    runs = _runs(args)
    rows, all_results = [], {}
    for pattern in args.patterns.split(",") if args.patterns else sorted(PATTERNS):
        _, results = crawl_site(args.seed, args.pages, [[pattern]], args.cap, runs,
                                f" [{pattern}]")
        all_results[pattern] = results
        rows.append([pattern, *[f"{r['per_page']:.2f} ({r['found']}/{r['truth']}"
                                f"{', capped' if not r['ended_itself'] else ''})"
                                for r in results]])
    tables = [{"title": f"One pattern a host ({args.pages} pages, cap {args.cap:,}): "
                        "fetches / distinct content found (found of reachable)",
               "columns": ["pattern", *[name for name, _, _ in runs]], "rows": rows,
               "notes": ["capped: the crawl did not end by itself before the cap."]}]
    result = {"seed": args.seed, "pages": args.pages, "cap": args.cap,
              "patterns": all_results}
    emit(tables, **result)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pages", type=int, default=None,
                    help="distinct content pages (about; default 3,000)")
    ap.add_argument("--cap", type=int, default=None, help="fetches per crawler "
                    "(default 25,000)")
    ap.add_argument("--crawlers", default=",".join(CRAWLERS),
                    help="comma-separated, of: " + ", ".join(CRAWLERS))
    ap.add_argument("--bloomcrawl-args", default="", metavar="ARGS",
                    help="extra arguments for every bloomcrawl run (e.g. \"--no-learn\")")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                    help="also run bloomcrawl with these extra arguments (repeatable)")
    ap.add_argument("--each-pattern", action="store_true",
                    help="instead: one host per pattern, each crawled apart (default "
                    "--pages 300 --cap 3000)")
    ap.add_argument("--patterns", default="", help="with --each-pattern: only these "
                    "(comma-separated)")
    ap.add_argument("--quick", action="store_true", help="600 pages, cap 3,000")
    ap.add_argument("--_role", choices=("server", "scrapy", "crawlee"), help=argparse.SUPPRESS)
    ap.add_argument("--_seeds", help=argparse.SUPPRESS)
    ap.add_argument("--_hosts", default="null", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._role == "server":
        asyncio.run(_serve(args.seed, args.pages, json.loads(args._hosts)))
        return 0
    if args._role in ("scrapy", "crawlee"):
        seeds = Path(args._seeds).read_text().split()
        (_scrapy if args._role == "scrapy" else _crawlee)(seeds, args.cap)
        return 0
    if args.each_pattern:
        args.pages, args.cap = args.pages or 300, args.cap or 3000
        drive_each_pattern(args)
        return 0
    if args.quick:
        args.pages, args.cap = args.pages or 600, args.cap or 3000
    args.pages, args.cap = args.pages or 3000, args.cap or 25_000
    drive(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
