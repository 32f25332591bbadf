"""dedup.scrapy: the Scrapy dupefilter, through real Scrapy crawls (``scrapy runspider``
in a child process) of a linked site served by aiohttp.web on 127.0.0.1, whose
request log says what was fetched."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.helpers import REPO, cli_env, until

scrapy = pytest.importorskip("scrapy")

from scrapy import Request  # noqa: E402

from dedup import Canonicalizer  # noqa: E402
from dedup.scrapy import UrlSeenDupeFilter, request_key  # noqa: E402

PAGES = 40

SPIDER = '''
import json
import scrapy


class Site(scrapy.Spider):
    name = "site"
    allowed_domains = ["127.0.0.1"]

    def __init__(self, start, out, extra="", **kw):
        super().__init__(**kw)
        self.start_urls = [start]
        self.out = out
        self.extra = extra

    async def start(self):
        for url in self.start_urls:
            yield scrapy.Request(url, dont_filter=True)
        if self.extra:
            base = self.start_urls[0].rsplit("/", 2)[0]
            for body in ("a=1", "a=2", "a=1"):
                yield scrapy.Request(base + "/form", method="POST", body=body)
            for _ in range(2):
                yield scrapy.Request(base + "/again", dont_filter=True)
            yield scrapy.Request(base + "/once")
            yield scrapy.Request(base + "/once?utm_source=x")
            yield scrapy.Request(base + "/once", method="HEAD")

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href)

    def closed(self, reason):
        with open(self.out, "w") as f:
            json.dump(self.crawler.stats.get_stats(), f, default=str)
'''


@dataclass
class Site:
    """Pages /p/0 .. /p/N-1: page i links to 2i+1 and 2i+2 (a tree), back to /p/0
    and to its own URL with a tracking parameter (duplicates to filter); page 0
    also to /missing (404) and to an off-site URL (a downloader middleware drops it)."""

    delay: float = 0.0
    log: list[tuple[str, str, bytes]] = field(default_factory=list)

    def fetched(self) -> list[str]:
        return [path for method, path, _ in self.log
                if method == "GET" and path.startswith("/p/")]

    def count(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.log if (m, p) == (method, path))

    async def page(self, request: web.Request) -> web.Response:
        i = int(request.match_info["i"])
        self.log.append((request.method, request.path, b""))
        if self.delay:
            await asyncio.sleep(self.delay)
        links = [f"/p/{j}" for j in (2 * i + 1, 2 * i + 2) if j < PAGES]
        links += ["/p/0", f"/p/{i}?utm_source=feed"]
        if i == 0:
            links += ["/missing", f"http://localhost:{request.url.port}/p/1"]
        body = "".join(f'<a href="{u}">{u}</a>' for u in links)
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")

    async def other(self, request: web.Request) -> web.Response:
        self.log.append((request.method, request.path, await request.read()))
        if request.path == "/missing":
            raise web.HTTPNotFound()
        return web.Response(text="<html></html>", content_type="text/html")


@pytest.fixture
async def site() -> AsyncIterator[tuple[Site, str]]:
    s = Site()
    app = web.Application()
    app.router.add_get("/p/{i}", s.page)
    app.router.add_route("*", "/form", s.other)
    app.router.add_route("*", "/again", s.other)
    app.router.add_route("*", "/once", s.other)
    app.router.add_get("/missing", s.other)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield s, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def start_scrapy(tmp: Path, origin: str, seen_dir: Path, run: int, *,
                       extra: bool = False, middleware: bool = True,
                       settings: dict[str, str] | None = None,
                       source: str = SPIDER) -> asyncio.subprocess.Process:
    spider = tmp / "spider.py"
    spider.write_text(source)
    opts = {"DUPEFILTER_CLASS": "dedup.scrapy.UrlSeenDupeFilter",
            "BLOOMCRAWL_SEEN_DIR": str(seen_dir), "LOG_LEVEL": "INFO",
            "TELNETCONSOLE_ENABLED": "False", "ROBOTSTXT_OBEY": "False",
            "CONCURRENT_REQUESTS": "2", "BLOOMCRAWL_COMMIT_INTERVAL": "0.05",
            "BLOOMCRAWL_SEEN_CAPACITY": "100000", **(settings or {})}
    if middleware:
        opts["SPIDER_MIDDLEWARES"] = json.dumps({"dedup.scrapy.UrlSeenSpiderMiddleware": 10})
        opts["DOWNLOADER_MIDDLEWARES"] = json.dumps(
            {"dedup.scrapy.UrlSeenDownloaderMiddleware": 10})
    args = [a for k, v in opts.items() for a in ("-s", f"{k}={v}")]
    args += ["-a", f"start={origin}/p/0", "-a", f"out={tmp / f'stats{run}.json'}"]
    if extra:
        args += ["-a", "extra=1"]
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "scrapy", "runspider", str(spider), *args, cwd=tmp,
        env=cli_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def run_scrapy(tmp: Path, origin: str, seen_dir: Path, run: int,
                     **kw: object) -> dict[str, object]:
    proc = await start_scrapy(tmp, origin, seen_dir, run, **kw)  # type: ignore[arg-type]
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    return json.loads((tmp / f"stats{run}.json").read_text())


ALL_PAGES = {f"/p/{i}" for i in range(PAGES)}


async def test_second_run_fetches_only_its_start_url(site, tmp_path: Path) -> None:
    s, origin = site
    seen_dir = tmp_path / "seen"
    stats = await run_scrapy(tmp_path, origin, seen_dir, 1)
    first = s.fetched()
    # each page once (the start URL is dont_filter: its first link back is new)
    assert sorted(first) == sorted([*ALL_PAGES, "/p/0"])
    assert s.count("GET", "/missing") == 1
    assert stats["dupefilter/filtered"] >= PAGES  # every back link and tracking variant
    assert stats["bloomcrawl/new"] == PAGES + 2  # and /missing, and the off-site URL
    assert stats["offsite/filtered"] >= 1
    assert 0 < stats["bloomcrawl/fill"] < 1
    assert "bloomcrawl/ledger_queries" in stats and "bloomcrawl/false_positives" in stats
    s.log.clear()
    stats = await run_scrapy(tmp_path, origin, seen_dir, 2)
    assert s.fetched() == ["/p/0"] and s.count("GET", "/missing") == 0
    # nothing re-issued: the 404 and the off-site request were marked done too
    assert stats["bloomcrawl/new"] == 0 and stats["bloomcrawl/recovered"] == 0


async def test_second_run_without_the_middleware(site, tmp_path: Path) -> None:
    """DUPEFILTER_CLASS alone: still exact and persistent across clean runs."""
    s, origin = site
    seen_dir = tmp_path / "seen"
    await run_scrapy(tmp_path, origin, seen_dir, 1, middleware=False)
    assert sorted(s.fetched()) == sorted([*ALL_PAGES, "/p/0"])
    s.log.clear()
    await run_scrapy(tmp_path, origin, seen_dir, 2, middleware=False)
    assert s.fetched() == ["/p/0"]


async def test_kill_9_loses_no_page(site, tmp_path: Path) -> None:
    """Killed mid-crawl, then run again: every page is fetched at least once over the
    two runs (the requests waiting in the killed Scrapy's scheduler are re-issued),
    and the second run does not start over."""
    s, origin = site
    s.delay = 0.05
    seen_dir = tmp_path / "seen"
    proc = await start_scrapy(tmp_path, origin, seen_dir, 1)
    try:
        await until(lambda: len(s.fetched()) >= 12, timeout=90, what="12 pages fetched")
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    first = set(s.fetched())
    assert len(first) < PAGES, "the crawl ended before the kill"
    s.log.clear()
    s.delay = 0.0
    stats = await run_scrapy(tmp_path, origin, seen_dir, 2)
    second = s.fetched()
    assert first | set(second) == ALL_PAGES, f"lost: {sorted(ALL_PAGES - first - set(second))}"
    assert len(second) == len(set(second))  # exact within the run
    again = (first & set(second)) - {"/p/0"}
    assert len(again) < len(first) - 1, "the second run fetched the first one's pages again"
    assert stats["bloomcrawl/recovered"] > 0
    s.log.clear()
    await run_scrapy(tmp_path, origin, seen_dir, 3)  # and now it is all done
    assert s.fetched() == ["/p/0"]


async def test_post_bodies_head_and_dont_filter(site, tmp_path: Path) -> None:
    s, origin = site
    seen_dir = tmp_path / "seen"
    await run_scrapy(tmp_path, origin, seen_dir, 1, extra=True)
    posts = sorted(body for method, path, body in s.log if method == "POST")
    assert posts == [b"a=1", b"a=2"]  # the repeated body is filtered, the other is not
    assert sum(1 for m, p, _ in s.log if (m, p) == ("GET", "/again")) == 2  # dont_filter
    assert sum(1 for m, p, _ in s.log if (m, p) == ("GET", "/once")) == 1  # utm variant: dup
    assert sum(1 for m, p, _ in s.log if (m, p) == ("HEAD", "/once")) == 1  # HEAD: own key
    s.log.clear()
    await run_scrapy(tmp_path, origin, seen_dir, 2, extra=True)
    assert sorted((m, p) for m, p, _ in s.log) == [("GET", "/again"), ("GET", "/again"),
                                                  ("GET", "/p/0")]

def test_keys() -> None:
    c = Canonicalizer()
    get = request_key(Request("http://a.example/x?b=2&a=1&utm_source=z"), c)
    assert get == "http://a.example/x?a=1&b=2"
    post1 = request_key(Request("http://a.example/x", method="POST", body=b"q=1"), c)
    post2 = request_key(Request("http://a.example/x", method="POST", body=b"q=2"), c)
    assert post1 is not None and post1.startswith("POST http://a.example/x sha256:")
    assert post1 != post2
    assert request_key(Request("http://a.example/x", method="HEAD"), c) == \
        "HEAD http://a.example/x"
    assert request_key(Request("data:text/plain,hi"), c) is None


def test_dont_filter_is_never_recorded(tmp_path: Path) -> None:
    df = UrlSeenDupeFilter(tmp_path / "seen")
    df.open()
    try:
        assert df.request_seen(Request("http://a.example/", dont_filter=True)) is False
        assert df.request_seen(Request("http://a.example/")) is False
        assert df.request_seen(Request("http://a.example/")) is True
        assert df.request_seen(Request("http://a.example/", dont_filter=True)) is False
        assert df.request_seen(Request("data:text/plain,hi")) is False  # no key: kept
        assert df.request_seen(Request("data:text/plain,hi")) is False
    finally:
        df.close("finished")
    df = UrlSeenDupeFilter(tmp_path / "seen")
    df.open()
    try:
        assert df.request_seen(Request("http://a.example/?utm_medium=x")) is True
        assert df.request_seen(Request("http://b.example/")) is False
    finally:
        df.close("finished")


def test_commit_every_counts_admissions_not_repeats(tmp_path: Path) -> None:
    """A repeat writes nothing, so it must not bring the next group commit (a
    commit per ``commit_every`` calls was most calls' only write at scale)."""
    df = UrlSeenDupeFilter(tmp_path / "seen", commit_every=3, commit_interval=3600.0)
    df.open()
    commits = []
    commit = df.commit

    def counted() -> None:
        commits.append(1)
        commit()

    df.commit = counted  # type: ignore[method-assign]
    try:
        assert df.request_seen(Request("http://a.example/")) is False
        for _ in range(10):
            assert df.request_seen(Request("http://a.example/")) is True
        assert commits == []
        assert df.request_seen(Request("http://a.example/1")) is False
        assert df.request_seen(Request("http://a.example/2")) is False
        assert commits == [1]
    finally:
        df.close("finished")


def test_ram_settings_reach_the_seen_set(tmp_path: Path) -> None:
    """The filter's RAM is chosen by two settings, smaller by default than a
    bloomcrawl crawl's (the 10M comparison in bench/README.md depends on it)."""
    from scrapy.utils.test import get_crawler

    from dedup import scrapy as ds
    from dedup.store.ledger import INDEX_BUFFER

    assert ds.INDEX_BUFFER < INDEX_BUFFER
    crawler = get_crawler(settings_dict={"BLOOMCRAWL_SEEN_DIR": str(tmp_path / "a"),
                                         "BLOOMCRAWL_INDEX_BUFFER": 4096,
                                         "BLOOMCRAWL_CONFIRM_CACHE": 1000})
    df = UrlSeenDupeFilter.from_crawler(crawler)
    assert (df.index_buffer, df.confirm_cache_size) == (4096, 1000)
    df.open()
    try:
        assert df.seen is not None and df.seen.ledger.index.buffer_records == 4096
    finally:
        df.close("finished")
    df = UrlSeenDupeFilter(tmp_path / "b")
    df.open()
    try:
        assert df.seen is not None and df.seen.ledger.index.buffer_records == ds.INDEX_BUFFER
    finally:
        df.close("finished")


def test_dedup_does_not_import_scrapy() -> None:
    code = ("import sys, dedup, dedup.store.seen; "
            "assert 'scrapy' not in sys.modules, 'dedup imported scrapy'; "
            "import dedup.scrapy; assert 'scrapy' in sys.modules")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=REPO, timeout=60)


async def test_a_page_is_done_after_its_output_not_before(tmp_path: Path) -> None:
    """The spider middleware's order of marks, without a crawl: a page stays queued
    (re-issued after a kill -9) until its callback's output is through, even when
    the callback builds its requests with ``meta=response.meta``."""
    from scrapy.http import HtmlResponse

    from dedup import scrapy as ds

    class Owner:  # what the middleware finds its filter by (a crawler)
        pass

    owner = Owner()
    df = UrlSeenDupeFilter(tmp_path / "seen")
    df.open()
    ds._filters[owner] = df
    mw = ds.UrlSeenSpiderMiddleware(owner)  # type: ignore[arg-type]

    def queued() -> set[str]:
        assert df.seen is not None  # queued() writes pending admissions first
        return {row.url for row in df.seen.records.queued(100)}

    try:
        page = Request("http://a.example/page")
        assert df.request_seen(page) is False
        response = HtmlResponse(page.url, request=page, body=b"<html></html>")
        mw.process_spider_input(response)
        first = Request("http://a.example/1", meta=response.meta)  # meta copied
        second = Request("http://a.example/2")
        again = Request("http://a.example/page", meta=response.meta)  # a duplicate

        async def nothing() -> AsyncIterator[Request]:
            return
            yield

        async def output() -> AsyncIterator[Request]:
            yield first
            assert queued() == {page.url, first.url}  # admitted as it left the callback
            yield again
            # `first` fetched and through its callback while this one still runs
            child = HtmlResponse(first.url, request=first, body=b"<html></html>")
            mw.process_spider_input(child)
            assert [r async for r in mw.process_spider_output(child, nothing())] == []
            assert queued() == {page.url}  # neither it nor the duplicate marked the page
            yield second

        answers = []
        async for r in mw.process_spider_output(response, output()):
            answers.append((r, df.request_seen(r)))  # the scheduler asks as it gets each
        assert answers == [(first, False), (again, True), (second, False)]
        assert queued() == {second.url}  # the page is done only now
    finally:
        df.close("finished")


ITEMS_SPIDER = '''
import asyncio
import json
import scrapy


class SlowPipeline:
    """Items take a while to go through: a page's callback is done long before its
    items are out of the pipelines (what the marks must wait for)."""

    async def process_item(self, item, spider=None):
        await asyncio.sleep(0.3)
        return item


class Items(scrapy.Spider):
    name = "items"
    allowed_domains = ["127.0.0.1"]

    def __init__(self, start, out, **kw):
        super().__init__(**kw)
        self.start_urls = [start]
        self.out = out

    async def start(self):
        for url in self.start_urls:
            yield scrapy.Request(url)  # filtered like any: a finished crawl ends at once

    def parse(self, response):
        for part in (1, 2):
            yield {"url": response.url, "part": part}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href)

    def closed(self, reason):
        with open(self.out, "w") as f:
            json.dump(self.crawler.stats.get_stats(), f, default=str)
'''


async def test_items_exactly_once_across_kill_9(site, tmp_path: Path) -> None:
    """A real Scrapy crawl with the README's settings and BLOOMCRAWL_ITEMS, killed
    with -9 twice mid-crawl (items still in a slow pipeline), then run to the end:
    every page's items are in the items file exactly once, and nothing is torn."""
    s, origin = site
    s.delay = 0.05
    seen_dir = tmp_path / "seen"
    items = tmp_path / "items.jsonl"
    opts = {"BLOOMCRAWL_ITEMS": str(items),
            "ITEM_PIPELINES": json.dumps({"spider.SlowPipeline": 100})}
    for run, more in ((1, 12), (2, 10)):
        already = len(s.fetched())
        proc = await start_scrapy(tmp_path, origin, seen_dir, run, settings=opts,
                                  source=ITEMS_SPIDER)
        try:
            await until(lambda n=already + more: len(s.fetched()) >= n, timeout=90,
                        what=f"{more} more pages fetched")
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        assert len(set(s.fetched())) < PAGES, "the crawl ended before the kill"
    s.delay = 0.0
    stats = await run_scrapy(tmp_path, origin, seen_dir, 3, settings=opts,
                             source=ITEMS_SPIDER)
    assert set(s.fetched()) == ALL_PAGES
    assert stats["bloomcrawl/recovered"] > 0
    lines = items.read_bytes().split(b"\n")
    assert lines[-1] == b""  # whole lines only
    got = [json.loads(line) for line in lines[:-1]]
    parts = Counter((i["url"].removeprefix(origin), i["part"]) for i in got)
    assert [k for k, n in parts.items() if n > 1] == []  # none twice
    assert set(parts) == {(p, part) for p in ALL_PAGES for part in (1, 2)}  # none lost


def test_items_need_the_spider_middleware(tmp_path: Path) -> None:
    """Without the middleware nothing says which page an item is of: refused."""
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(settings_dict={"BLOOMCRAWL_SEEN_DIR": str(tmp_path / "seen"),
                                         "BLOOMCRAWL_ITEMS": str(tmp_path / "items.jsonl")})
    df = UrlSeenDupeFilter.from_crawler(crawler)
    with pytest.raises(RuntimeError, match=r"BLOOMCRAWL_ITEMS needs dedup\.scrapy\."
                       "UrlSeenSpiderMiddleware"):
        df.open()
    df.close("finished")
