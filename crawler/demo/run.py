"""``make demo``: serve a generated multi-host site on 127.0.0.x and crawl it.

The site (``crawler.demo.site``) has thousands of interlinked pages over four
hosts, with navigation repeated on every page, tracking parameters,
fragments, redirects, a robots.txt rule, a PDF or two and a calendar trap.
The crawl's state goes to ./demo-state (wiped first); at the end the fetched
set is compared with the set the generator says is reachable.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

from crawler.config.settings import Settings
from crawler.core.outputs.output import PAGES_FILE, read_pages
from crawler.core.run.engine import run_crawl
from crawler.core.run.progress import Progress
from crawler.core.state.state import create_crawl
from crawler.demo.serve import RunningSite, serve_site
from crawler.demo.site import SiteSpec

HOST_IPS = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]


def demo_settings(max_depth: int) -> Settings:
    return Settings().with_values(
        # no sitemaps: the demo checks the crawl against the sample site's link graph
        crawl={"concurrency": 32, "max_depth": max_depth, "sitemaps": False},
        politeness={"per_host": 4, "delay": 0.0},
        fetch={"allow_private": True},  # the demo site lives on loopback addresses
        dedup={"capacity": 200_000, "shards": 16},
        snapshot={"interval": 5.0},
    )


@contextlib.asynccontextmanager
async def demo_site(spec: SiteSpec) -> AsyncIterator[RunningSite]:
    """Serve ``spec`` on the four 127.0.0.x hosts, or on distinct ports of 127.0.0.1
    where those aliases are unavailable (the demo and ``make screenshots``)."""
    try:
        serving = serve_site(spec, ips=HOST_IPS)
        running = await serving.__aenter__()
    except OSError:
        serving = serve_site(spec)
        running = await serving.__aenter__()
    try:
        yield running
    finally:
        await serving.__aexit__(None, None, None)


async def demo(state_dir: Path, pages: int, max_depth: int) -> int:
    spec = SiteSpec(hosts=len(HOST_IPS), pages=pages, seed=42, trap=True)
    async with demo_site(spec) as running:
        want = running.site.reachable(max_depth=max_depth)
        print(f"serving {spec.hosts} hosts x {spec.pages} pages: "
              f"{', '.join(running.origins)}", file=sys.stderr)
        print(f"reachable from the home pages: {len(want.fetched)} URLs to fetch, "
              f"{len(want.robots_blocked)} disallowed by robots.txt", file=sys.stderr)
        shutil.rmtree(state_dir, ignore_errors=True)
        settings = demo_settings(max_depth)
        with tempfile.TemporaryDirectory() as tmp:
            seeds = Path(tmp) / "seeds.txt"
            seeds.write_text("".join(u + "\n" for u in running.seeds))
            seen, scope, _ = create_crawl(state_dir, settings, seeds)
        try:
            summary = await run_crawl(seen, settings, scope, progress=Progress(),
                                      install_signals=True)
            records = read_pages(state_dir / PAGES_FILE)
            keys = Counter(seen.canonicalizer.resolve(r["url"])[1] for r in records)
        finally:
            seen.close()
        got = set(keys)
        expected = want.fetched | want.robots_blocked
        print(f"pages.jsonl: {len(records)} records in {state_dir / PAGES_FILE}",
              file=sys.stderr)
        if summary["outcome"] != "finished":
            print("crawl did not finish; continue it with "
                  f"'bloomcrawl resume {state_dir}'", file=sys.stderr)
            return 0
        twice = sum(n - 1 for n in keys.values())
        if got == expected and twice == 0:
            print(f"check: fetched set == reachable set ({len(got)} URLs), each once",
                  file=sys.stderr)
            return 0
        print(f"check FAILED: missing {len(expected - got)}, unexpected {len(got - expected)},"
              f" fetched twice {twice}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crawler.demo", description=__doc__)
    parser.add_argument("--state", default="demo-state", help="state directory (wiped)")
    parser.add_argument("--pages", type=int, default=750, help="pages per host")
    parser.add_argument("--max-depth", type=int, default=10)
    args = parser.parse_args(argv)
    return asyncio.run(demo(Path(args.state).resolve(), args.pages, args.max_depth))

