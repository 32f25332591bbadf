"""``crawler.Crawler``: a crawl from Python with a page handler (items) and a follow
filter, against real aiohttp.web servers on 127.0.0.1.

What is checked: only the links ``follow`` chose are fetched (the server's request
log), each page's items are in items.jsonl once, a handler that raises is recorded
and the crawl goes on (or stops with ``on_error="stop"``, resumable), a resume
through the API, and items.jsonl exactly once across kill -9 loops.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web

from crawler import Crawler, HandlerError, Page
from crawler.cli.args import CRAWL_OPTIONS as CLI_OPTIONS
from crawler.config.settings import ConfigError
from crawler.core.outputs.output import read_pages
from crawler.core.run.crawl import CRAWL_OPTIONS
from crawler.core.state.state import CrawlError
from dedup import UrlSeen
from tests.crawler.core.durability.test_exactly_once import output_grew
from tests.crawler.core.state.test_resume import SPEC, run_until, setup_crawl
from tests.support.faultserver import add_request_log, serve
from tests.support.helpers import REPO, cli_env, config_toml, fast_settings, run_cli, write_seeds

# a small documentation site: the home page links to /docs/ pages and to others
PAGES = {
    "/": ["/docs/", "/blog/", "/about", "http://203.0.113.9/external"],
    "/docs/": ["/docs/install", "/docs/usage", "/blog/2024", "/"],
    "/docs/install": ["/docs/usage", "/about"],
    "/docs/usage": ["/docs/api#top", "/docs/install"],
    "/docs/api": ["/blog/"],
    "/blog/": ["/blog/2024", "/docs/"],
    "/blog/2024": ["/about"],
    "/about": [],
}
DOCS = {"/", "/docs/", "/docs/install", "/docs/usage", "/docs/api"}


def docs_app() -> tuple[web.Application, object]:
    app = web.Application()
    log = add_request_log(app)

    async def page(request: web.Request) -> web.Response:
        links = PAGES.get(request.path)
        if links is None:
            raise web.HTTPNotFound()
        body = "".join(f'<a href="{href}">x</a>' for href in links)
        return web.Response(text=f"<html><head><title>T{request.path}</title></head>"
                            f"<body>{body}</body></html>", content_type="text/html",
                            headers={"X-Page": request.path})

    async def robots(request: web.Request) -> web.Response:
        return web.Response(text="User-agent: *\nAllow: /\n")

    app.router.add_get("/robots.txt", robots)
    app.router.add_get("/{tail:.*}", page)
    return app, log


def config_file(tmp_path: Path, **sections: dict) -> Path:
    path = tmp_path / "crawl.toml"
    path.write_text(config_toml(fast_settings(**sections)))
    return path


def title(page: Page) -> list[dict] | None:
    m = re.search(r"<title>(.*?)</title>", page.text or "")
    return [{"url": page.url, "title": m.group(1)}] if m else None


def docs_only(page: Page) -> list[str]:
    return [u for u in page.links if "/docs/" in u]


def fetched_paths(log) -> Counter[str]:
    return Counter(r.path for r in log.records if r.path != "/robots.txt")


def items_of(state: Path) -> list[dict]:
    path = state / "items.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_handler_items_and_follow_fetch_only_the_chosen_links(tmp_path):
    app, log = docs_app()
    async with serve(app) as base:
        seen_pages: list[Page] = []
        async with Crawler(base + "/", state=tmp_path / "state", handler=title,
                           follow=docs_only, config=config_file(tmp_path)) as crawl:
            async for page in crawl:
                seen_pages.append(page)
        summary = crawl.summary
    assert summary is not None and summary["outcome"] == "finished"
    assert fetched_paths(log) == Counter(DOCS)  # only what follow chose, each once
    assert sorted(p.url for p in seen_pages) == sorted(base + p for p in DOCS)
    items = items_of(tmp_path / "state")
    assert sorted((i["url"], i["title"]) for i in items) == sorted(
        (base + p, f"T{p}") for p in DOCS)
    assert summary["items"] == len(DOCS) and summary["handler_errors"] == 0
    home = next(p for p in seen_pages if p.url == base + "/")
    assert home.status == 200 and home.depth == 0 and home.referrer is None
    assert home.content_type == "text/html" and home.headers["x-page"] == "/"
    assert home.body.startswith(b"<html>") and home.text is not None
    # in scope only (the external host is not), absolute and without fragments
    assert home.links == [base + "/docs/", base + "/blog/", base + "/about"]
    usage = next(p for p in seen_pages if p.url == base + "/docs/usage")
    assert usage.depth == 2 and usage.referrer in (base + "/docs/", base + "/docs/install")
    assert base + "/docs/api" in usage.links
    records = read_pages(tmp_path / "state" / "pages.jsonl")
    assert {r["url"]: r["items"] for r in records} == {base + p: 1 for p in DOCS}
    assert all(r["handler_error"] is None for r in records)


async def test_a_handler_that_raises_is_recorded_and_the_crawl_goes_on(tmp_path):
    app, log = docs_app()

    async def handler(page: Page):  # an async handler
        if page.url.endswith("/docs/install"):
            raise ValueError("no install section")
        return title(page)

    async with serve(app) as base:
        summary = await Crawler([base + "/"], state=tmp_path / "state", handler=handler,
                                config=config_file(tmp_path)).run()
    assert summary["handler_errors"] == 1
    assert fetched_paths(log) == Counter(PAGES.keys())  # every page: no follow, all links
    records = {r["url"]: r for r in read_pages(tmp_path / "state" / "pages.jsonl")}
    bad = records[base + "/docs/install"]
    assert bad["items"] == 0
    assert "Traceback" in bad["handler_error"]
    assert "ValueError: no install section" in bad["handler_error"]
    # its links were still followed (follow is not the handler)
    assert all(r["handler_error"] is None for u, r in records.items() if u != bad["url"])
    items = items_of(tmp_path / "state")
    assert sorted(i["url"] for i in items) == sorted(base + p for p in PAGES
                                                     if p != "/docs/install")


async def test_on_error_stop_stops_cleanly_and_a_resume_handles_that_page(tmp_path):
    app, log = docs_app()
    state = tmp_path / "state"

    def broken(page: Page):
        if page.url.endswith("/docs/"):
            raise RuntimeError("bug in the handler")
        return title(page)

    async with serve(app) as base:
        crawl = Crawler(base + "/", state=state, handler=broken, on_error="stop",
                        config=config_file(tmp_path, crawl={"concurrency": 1},
                                           politeness={"per_host": 1}))
        with pytest.raises(HandlerError) as caught:
            await crawl.run()
        assert caught.value.url == base + "/docs/"
        assert "RuntimeError: bug in the handler" in caught.value.traceback
        with UrlSeen(state, readonly=True) as seen:
            assert seen.ledger.counts()["queued"] > 0  # stopped, not finished
        urls = [r["url"] for r in read_pages(state / "pages.jsonl")]
        assert base + "/docs/" not in urls  # not committed: handled again on resume
        summary = await Crawler(state=state, handler=title).run()
        assert summary["outcome"] == "finished" and summary["handler_errors"] == 0
    records = read_pages(state / "pages.jsonl")
    assert Counter(r["url"] for r in records) == Counter(base + p for p in PAGES)
    items = items_of(state)
    assert Counter(i["url"] for i in items) == Counter(base + p for p in PAGES)
    assert log.count("/docs/") == 2  # the failed page's fetch, then the resume's


async def test_resume_through_the_api_finishes_the_crawl_with_each_item_once(tmp_path):
    app, log = docs_app()
    state = tmp_path / "state"
    async with serve(app) as base:
        first = await Crawler([base + "/"], state=state, handler=title, max_pages=3,
                              config=config_file(tmp_path)).run()
        assert first["outcome"] == "max pages reached"
        assert len(items_of(state)) == 3
        with pytest.raises(CrawlError, match="cannot change include"):
            Crawler(state=state, include="/docs/")  # frozen at the crawl's start
        with pytest.raises(TypeError, match="unknown crawl option 'max_page'; did you mean "
                           "'max_pages'"):
            Crawler(state=state, max_page=3)
        async with Crawler(state=state, handler=title, max_pages=0) as crawl:
            pages = [p.url async for p in crawl]
        assert crawl.summary is not None and crawl.summary["outcome"] == "finished"
    assert len(pages) == len(PAGES) - 3  # the rest, not the first run's pages again
    assert fetched_paths(log) == Counter(PAGES.keys())
    assert Counter(i["url"] for i in items_of(state)) == Counter(base + p for p in PAGES)


async def test_leaving_the_loop_early_stops_the_crawl_resumably(tmp_path):
    app, log = docs_app()
    state = tmp_path / "state"
    async with serve(app) as base:
        async with Crawler(base + "/", state=state, handler=title,
                           config=config_file(tmp_path, crawl={"concurrency": 1},
                                              politeness={"per_host": 1})) as crawl:
            async for _page in crawl:
                break
        assert crawl.summary is not None and crawl.summary["outcome"] == "stopped"
        await Crawler(state=state, handler=title).run()
    assert fetched_paths(log) == Counter(PAGES.keys())
    assert Counter(i["url"] for i in items_of(state)) == Counter(base + p for p in PAGES)


def test_the_options_are_the_command_lines(tmp_path):
    assert set(CRAWL_OPTIONS) == {f.lstrip("-").replace("-", "_") for f, _ in CLI_OPTIONS}


def test_config_is_a_toml_file_or_its_tables_as_a_dict(tmp_path):
    tables = {"dedup": {"capacity": 12_345}, "politeness": {"per_host": 3}}
    crawl = Crawler("http://127.0.0.1:9/", state=tmp_path / "s", config=tables, per_host=5)
    assert crawl.settings.dedup.capacity == 12_345
    assert crawl.settings.politeness.per_host == 5  # the options over the config
    with pytest.raises(ConfigError, match="unknown section"):
        Crawler("http://127.0.0.1:9/", state=tmp_path / "s", config={"nope": {}})


HOOKS_MODULE = '''
import re


def title(page):
    m = re.search(r"<title>(.*?)</title>", page.text or "")
    return {"url": page.url, "title": m.group(1)} if m else None


def docs_only(page):
    return [u for u in page.links if "/docs/" in u]
'''


async def test_the_command_line_runs_the_same_handler_and_resumes_with_it(tmp_path):
    (tmp_path / "hooks_mod.py").write_text(HOOKS_MODULE)
    env = {"PYTHONPATH": f"{tmp_path}{':'}{REPO}"}
    app, log = docs_app()
    state = tmp_path / "state"
    async with serve(app) as base:
        seeds = write_seeds(tmp_path / "seeds.txt", [base + "/"])
        first = await run_cli("crawl", str(seeds), "--state", str(state), "--config",
                              str(config_file(tmp_path)), "--quiet", "--max-pages", "2",
                              "--handler", "hooks_mod:title", "--follow", "hooks_mod:docs_only",
                              env=env)
        assert first.rc == 0, first.stderr
        assert len(items_of(state)) == 2
        done = await run_cli("resume", str(state), "--max-pages", "0", env=env)
        assert done.rc == 0, done.stderr
        assert f"items (this run): {len(DOCS) - 2} written to items.jsonl, 0 page(s)" \
            in done.stderr  # the summary
        bad = await run_cli("crawl", str(seeds), "--state", str(tmp_path / "other"),
                            "--handler", "hooks_mod:nothing", env=env)
    assert bad.rc == 2 and "hooks_mod has no nothing" in bad.stderr
    assert fetched_paths(log) == Counter(DOCS)  # the stored follow, on resume too
    assert sorted((i["url"], i["title"]) for i in items_of(state)) == sorted(
        (base + p, f"T{p}") for p in DOCS)


KILL_SCRIPT = '''
import asyncio
import sys
from pathlib import Path

from crawler import Crawler


def handler(page):
    # two items per page, so a torn or duplicated group shows
    yield {"url": page.url, "part": 1, "status": page.status}
    yield {"url": page.url, "part": 2, "links": len(page.links)}


async def main(seeds, state, config):
    if Path(state).exists():
        crawl = Crawler(state=state, handler=handler)
    else:
        crawl = Crawler(Path(seeds), state=state, config=config, handler=handler)
    await crawl.run()


asyncio.run(main(*sys.argv[1:]))
'''


@pytest.mark.slow
async def test_kill9_loop_leaves_every_item_exactly_once(tmp_path, site):
    import asyncio

    rng = random.Random(26)
    script = tmp_path / "crawl_script.py"
    script.write_text(KILL_SCRIPT)
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        total = len(running.site.reachable().fetched)
        kills = 0
        for n in sorted(rng.sample(range(5, total - 20), 6)):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(script), str(seeds), str(state), str(config),
                cwd=REPO, env=cli_env(), stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE)
            await run_until(proc, running, n)
            await output_grew(proc, state / "items.jsonl")  # a group is being written
            if proc.returncode is None:
                proc.kill()
                kills += 1
            await proc.wait()
        assert kills >= 5
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), str(seeds), str(state), str(config), cwd=REPO,
            env=cli_env(), stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
    records = read_pages(state / "pages.jsonl")
    assert max(Counter(r["url"] for r in records).values()) == 1
    answered = {r["url"] for r in records if r["status"] is not None}
    items = [json.loads(line) for line in (state / "items.jsonl").read_bytes().split(b"\n")
             if line]  # a torn line fails here
    parts = Counter((i["url"], i["part"]) for i in items)
    assert [k for k, c in parts.items() if c > 1] == []  # no item twice
    assert set(parts) == {(u, p) for u in answered for p in (1, 2)}  # none lost
    assert {r["url"]: r["items"] for r in records if r["status"] is not None} == \
        dict.fromkeys(answered, 2)


async def test_merge_carries_each_committed_item_once_and_the_union_resumes(tmp_path):
    app, log = docs_app()
    state, union = tmp_path / "state", tmp_path / "union"
    async with serve(app) as base:
        await Crawler(base + "/", state=state, handler=title, config=config_file(tmp_path),
                      max_pages=3).run()
        # past the committed size, as a kill -9 between a group's writes and its commit
        with open(state / "items.jsonl", "ab") as fh:
            fh.write(b'{"url": "http://uncommitted.test/", "title": "x"}\n')
        done = await run_cli("merge", "--state", "-o", str(union), str(state))
        assert done.rc == 0, done.stderr
        urls = [i["url"] for i in items_of(union)]
        assert len(urls) == 3
        assert set(urls) == {r["url"] for r in read_pages(state / "pages.jsonl")}
        summary = await Crawler(state=union, handler=title, max_pages=0).run()  # the rest
    assert summary["outcome"] == "finished" and summary["items"] == len(PAGES) - 3
    assert sorted(i["url"] for i in items_of(union)) == sorted(base + p for p in PAGES)
    assert fetched_paths(log) == Counter(list(PAGES))  # nothing fetched twice


def test_every_crawl_runs_on_crawler():
    """``bloomcrawl crawl``/``resume``, fleet workers, the demo and ``make screenshots``
    all crawl through ``Crawler``: the engine is made in one place, no second path."""
    import inspect

    makers = sorted(p for p in (REPO / "crawler").rglob("*.py")
                    if re.search(r"\bEngine\(", p.read_text(encoding="utf-8")))
    assert makers == [Path(inspect.getfile(Crawler))]


AGAIN_SCRIPT = '''
import asyncio
import sys

from crawler import Crawler


def handler(page):
    yield {"url": page.url, "part": 1}
    yield {"url": page.url, "part": 2}


def follow(page):
    return [u for u in page.links if "/x/" not in u]


async def main(root, state):
    # the same call every time: it starts the crawl, or continues the one in `state`
    async with Crawler([root], state=state, handler=handler, follow=follow,
                       config={"crawl": {"concurrency": 4, "max_retries": 1},
                               "politeness": {"delay": 0.0, "per_host": 4},
                               "dedup": {"capacity": 100_000, "shards": 4}},
                       allow_private=True, max_pages=0) as crawl:
        await crawl.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
'''


def tree_app(n: int) -> tuple[web.Application, object]:
    """/p/0 .. /p/n-1, a binary tree; each page also links to /x/i, which the
    script's follow leaves out. 10 ms a page, so a kill lands mid-crawl."""
    import asyncio

    app = web.Application()
    log = add_request_log(app)

    async def page(request: web.Request) -> web.Response:
        await asyncio.sleep(0.01)
        i = int(request.match_info["i"])
        links = [f"/p/{j}" for j in (2 * i + 1, 2 * i + 2) if j < n] + [f"/x/{i}"]
        body = "".join(f'<a href="{u}">x</a>' for u in links)
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")

    app.router.add_get("/p/{i}", page)
    app.router.add_get("/x/{i}", page)
    return app, log


async def test_the_same_script_run_again_after_kill_9_continues_its_crawl(tmp_path):
    """The script that started a crawl, run again after a kill -9, continues it with
    its handler and follow (no 'already holds a crawl'): every page's items once,
    no URL follow left out ever fetched. `bloomcrawl resume` of that crawl refuses
    to run without the handler and follow (Python objects it cannot import), and
    runs with them named as MODULE:FUNCTION."""
    import asyncio
    import os

    n = 120
    rng = random.Random(36)
    script = tmp_path / "crawl_script.py"
    script.write_text(AGAIN_SCRIPT)
    state = tmp_path / "state"
    app, log = tree_app(n)

    def pages_asked() -> int:
        return sum(1 for r in log.records if r.path.startswith("/p/"))

    async with serve(app) as base:
        run = [sys.executable, str(script), base + "/p/0", str(state)]
        kills = 0
        for at in sorted(rng.sample(range(10, n - 20), 3)):
            proc = await asyncio.create_subprocess_exec(
                *run, cwd=tmp_path, env=cli_env(), stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while pages_asked() < at and proc.returncode is None:
                assert loop.time() < deadline, "the crawl made no progress"
                await asyncio.sleep(0.005)
            if proc.returncode is None:
                proc.kill()
                kills += 1
            _, err = await proc.communicate()
            assert proc.returncode in (0, -9), err.decode()
        assert kills == 3
        refused = await run_cli("resume", str(state), "--quiet")
        assert refused.rc == 1
        assert "started from Python with handler=__main__.handler, " \
            "follow=__main__.follow" in refused.stderr, refused.stderr
        assert "--handler MODULE:FUNCTION --follow MODULE:FUNCTION" in refused.stderr
        env = {"PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"}
        named = await run_cli("resume", str(state), "--quiet", "--max-pages", "100",
                              "--handler", "crawl_script:handler",
                              "--follow", "crawl_script:follow", env=env)
        assert named.rc == 0, named.stderr
        proc = await asyncio.create_subprocess_exec(
            *run, cwd=tmp_path, env=cli_env(), stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
    assert not any(r.path.startswith("/x/") for r in log.records)  # follow respected
    assert {r.path for r in log.records if r.path.startswith("/p/")} == \
        {f"/p/{i}" for i in range(n)}
    lines = Counter(r["url"].removeprefix(base) for r in read_pages(state / "pages.jsonl"))
    assert set(lines) == {f"/p/{i}" for i in range(n)} and set(lines.values()) == {1}
    parts = Counter((i["url"].removeprefix(base), i["part"]) for i in items_of(state))
    assert set(parts.values()) == {1}
    assert set(parts) == {(f"/p/{i}", p) for i in range(n) for p in (1, 2)}


async def test_run_again_with_other_settings_is_refused_or_stored(tmp_path):
    """A crawl continued by seeds-and-state: a frozen setting that differs is refused
    (named), a limit a resume may change is stored, a new seed is admitted, and a
    seed out of the frozen scope is reported."""
    app, log = docs_app()
    state = tmp_path / "state"
    config = config_file(tmp_path)
    async with serve(app) as base:
        first = await Crawler([base + "/"], state=state, handler=title, config=config,
                              max_pages=2).run()
        assert first["outcome"] == "max pages reached"
        with pytest.raises(CrawlError, match=r"crawl\.exclude = \['/blog/'\] \(the crawl's: "
                           r"\[\]\)"):
            Crawler([base + "/"], state=state, handler=title, config=config,
                    max_pages=2, exclude="/blog/").open()
        crawl = Crawler([base + "/", base + "/about", "http://203.0.113.9/x"], state=state,
                        handler=title, config=config, max_pages=0).open()
        try:
            assert crawl.settings.crawl.max_pages == 0  # stored as the crawl's new value
            assert crawl.problems == ["seed 'http://203.0.113.9/x': out of the crawl's "
                                      "scope (its hosts were frozen when it started)"]
        finally:
            crawl.close()
        summary = await Crawler(state=state, handler=title).run()
    assert summary["outcome"] == "finished"
    assert fetched_paths(log) == Counter(PAGES.keys())
    assert Counter(i["url"] for i in items_of(state)) == Counter(base + p for p in PAGES)


def test_crawl_error_and_handler_error_come_from_crawler():
    import crawler

    assert crawler.CrawlError is CrawlError and issubclass(crawler.HandlerError, CrawlError)
    assert {"CrawlError", "HandlerError"} <= set(crawler.__all__)
