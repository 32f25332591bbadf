"""Sitemaps as a source of URLs, opt-in (``--sitemaps``): robots.txt ``Sitemap:``
lines, the /sitemap.xml fallback, an index pointing at a gzip sitemap, bad sitemaps
counted and survived, scope, ``follow`` and robots.txt applied, --no-sitemaps,
resume fetching a sitemap a stopped crawl had queued, and a sitemap fetch being no
page (WARC and stats, never pages.jsonl) across kill -9. Real aiohttp servers on
127.0.0.1; what was fetched is read from the server's request log."""

from __future__ import annotations

import asyncio
import gzip
import random
import tomllib
from collections import Counter

from aiohttp import web

from crawler import Crawler
from crawler.admin.report import state_stats
from crawler.config.settings import Settings, settings_from_dict
from crawler.core.outputs.output import read_pages
from crawler.core.run.engine import Engine
from crawler.core.state.state import create_crawl
from crawler.net.sitemap import parse_sitemap
from dedup import UrlSeen
from tests.crawler.core.durability.test_exactly_once import warc_uris
from tests.support.faultserver import add_request_log, serve
from tests.support.helpers import (
    REPO,
    config_toml,
    fast_settings,
    run_cli,
    start_cli,
    until,
    write_seeds,
)
from tests.support.killloop import kill_at

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(locs: list[str]) -> bytes:
    body = "".join(f"<url><loc>{u}</loc><lastmod>2026-01-01</lastmod></url>" for u in locs)
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>{body}</urlset>'.encode()


def index(locs: list[str]) -> bytes:
    body = "".join(f"<sitemap><loc>{u}</loc></sitemap>" for u in locs)
    return f'<?xml version="1.0"?><sitemapindex {NS}>{body}</sitemapindex>'.encode()


def site_app(files: dict[str, tuple[bytes, str]], routes: dict | None = None
             ) -> tuple[web.Application, object]:
    """``files``: path -> (body, content type); ``routes``: path -> handler; every
    other path is a page with no links (so a page is reachable only through a
    sitemap) or, under /missing, a 404."""
    app = web.Application()
    log = add_request_log(app)
    for path, handler in (routes or {}).items():
        app.router.add_get(path, handler)

    async def handle(request: web.Request) -> web.Response:
        got = files.get(request.path)
        if got is not None:
            return web.Response(body=got[0], content_type=got[1])
        if request.path in ("/robots.txt", "/sitemap.xml") or request.path.startswith(
                "/missing"):
            raise web.HTTPNotFound()
        return web.Response(text="<html><body>no links</body></html>",
                            content_type="text/html")

    app.router.add_get("/{tail:.*}", handle)
    return app, log


def paths(log) -> list[str]:
    return [r.path for r in log.records]


def on(**crawl) -> Settings:
    return fast_settings(crawl={"sitemaps": True, **crawl})


async def crawl(tmp_path, base: str, settings: Settings, name: str = "s") -> dict:
    seen, scope, problems = create_crawl(tmp_path / name, settings,
                                         write_seeds(tmp_path / f"{name}.seeds", [base + "/"]))
    assert problems == []
    try:
        await Engine(seen, settings, scope).run()
    finally:
        seen.close()
    return {r["url"].split("/", 3)[3]: r for r in read_pages(tmp_path / name / "pages.jsonl")}


def sitemap_counts(state) -> dict:
    return state_stats(state).get("sitemaps", {})


def test_sitemaps_are_off_by_default():
    assert Settings().crawl.sitemaps is False
    default = tomllib.loads((REPO / "config" / "default.toml").read_text())
    assert default["crawl"]["sitemaps"] is False


async def test_a_60_page_site_gives_60_lines_without_a_sitemap_request(tmp_path):
    """No sitemap option anywhere (the defaults, with no `sitemaps` key in the config
    file): robots.txt names a sitemap, and the crawl neither asks for it nor for
    /sitemap.xml; pages.jsonl has one line per page."""
    n = 60
    files: dict[str, tuple[bytes, str]] = {}

    async def page(request: web.Request) -> web.Response:
        i = int(request.match_info["i"])
        links = "".join(f'<a href="/p/{j}">{j}</a>' for j in (2 * i + 1, 2 * i + 2) if j < n)
        return web.Response(text=f"<html><body>{links}</body></html>",
                            content_type="text/html")

    app, log = site_app(files, {"/p/{i}": page})
    fast = fast_settings().to_dict()
    del fast["crawl"]["sitemaps"]
    config = tmp_path / "fast.toml"
    config.write_text(config_toml(settings_from_dict(fast)).replace("sitemaps = false\n", ""))
    assert "sitemaps" not in config.read_text().replace("sitemap_max", "")
    async with serve(app) as base:
        files["/robots.txt"] = (f"Sitemap: {base}/maps/s.xml\n".encode(), "text/plain")
        files["/maps/s.xml"] = (urlset([f"{base}/hidden"]), "application/xml")
        seeds = write_seeds(tmp_path / "seeds.txt", [base + "/p/0"])
        done = await run_cli("crawl", str(seeds), "--state", str(tmp_path / "s"),
                             "--config", str(config))
        assert done.rc == 0, done.stderr
    lines = read_pages(tmp_path / "s" / "pages.jsonl")
    assert len(lines) == n
    assert {r["url"].removeprefix(base) for r in lines} == {f"/p/{i}" for i in range(n)}
    assert set(paths(log)) == {"/robots.txt", *(f"/p/{i}" for i in range(n))}
    assert "  sitemaps (" not in done.stderr  # the summary has no sitemap line
    assert sitemap_counts(tmp_path / "s") == {}


async def test_robots_sitemap_pages_are_fetched_and_scope_applies(tmp_path):
    holder: dict[str, str] = {}
    files: dict[str, tuple[bytes, str]] = {}
    app, log = site_app(files)
    async with serve(app) as base:
        port = base.rsplit(":", 1)[1]
        holder["base"] = base
        files["/robots.txt"] = (
            f"User-agent: *\nDisallow: /secret-maps/\nSitemap: {base}/maps/site.xml\n"
            f"Sitemap: {base}/secret-maps/s.xml\n".encode(), "text/plain")
        files["/maps/site.xml"] = (urlset(
            [f"{base}/hidden/1", f"{base}/hidden/2#frag", f"{base}/hidden/3",
             f"{base}/hidden/2",  # the same page after canonicalization: once
             f"http://localhost:{port}/outside",  # another host: out of scope
             f"{base}/private/4"]),  # excluded by a pattern
            "application/xml")
        files["/secret-maps/s.xml"] = (urlset([f"{base}/hidden/secret"]), "application/xml")
        pages = await crawl(tmp_path, base, on(exclude=["/private/"]))
    got = paths(log)
    for p in ("/hidden/1", "/hidden/2", "/hidden/3"):
        assert got.count(p) == 1, got
    assert "/outside" not in got and "/private/4" not in got
    assert "/secret-maps/s.xml" not in got and "/hidden/secret" not in got
    assert "/sitemap.xml" not in got  # robots.txt named sitemaps: no fallback
    # sitemap files are no pages: counted, not recorded
    assert set(pages) == {"", "hidden/1", "hidden/2", "hidden/3"}
    assert pages["hidden/1"]["depth"] == 1
    assert pages["hidden/1"]["referrer"] == base + "/maps/site.xml"
    assert sitemap_counts(tmp_path / "s") == {
        "fetched": 1, "with_errors": 0, "failed": 0, "skipped": 1,  # the disallowed one
        "urls": 6, "new": 3}


async def test_an_index_pointing_to_a_gzip_sitemap(tmp_path):
    files: dict[str, tuple[bytes, str]] = {}
    app, log = site_app(files)
    async with serve(app) as base:
        files["/robots.txt"] = (f"Sitemap: {base}/index.xml\n".encode(), "text/plain")
        files["/index.xml"] = (index([f"{base}/maps/a.xml.gz", "/missing/b.xml"]),
                               "application/xml")
        files["/maps/a.xml.gz"] = (gzip.compress(urlset([f"{base}/gz/{i}" for i in range(3)])),
                                   "application/x-gzip")
        pages = await crawl(tmp_path, base, on())
    got = paths(log)
    assert sorted(p for p in got if p.startswith("/gz/")) == ["/gz/0", "/gz/1", "/gz/2"]
    assert got.count("/maps/a.xml.gz") == 1 and got.count("/missing/b.xml") == 1
    assert set(pages) == {"", "gz/0", "gz/1", "gz/2"}
    assert sitemap_counts(tmp_path / "s") == {  # the 404 counted, not fatal
        "fetched": 3, "with_errors": 1, "failed": 0, "skipped": 0, "urls": 5, "new": 5}


async def test_the_sitemap_xml_fallback_without_a_robots_line(tmp_path):
    files: dict[str, tuple[bytes, str]] = {}
    app, log = site_app(files)
    async with serve(app) as base:
        files["/robots.txt"] = (b"User-agent: *\nDisallow: /nothing\n", "text/plain")
        files["/sitemap.xml"] = (urlset([f"{base}/fb/{i}" for i in range(3)]), "text/xml")
        await crawl(tmp_path, base, on())
    assert sorted(p for p in paths(log) if p.startswith("/fb/")) == ["/fb/0", "/fb/1", "/fb/2"]


async def test_bad_sitemaps_are_recorded_and_the_crawl_goes_on(tmp_path):
    files: dict[str, tuple[bytes, str]] = {}
    app, log = site_app(files)
    async with serve(app) as base:
        files["/robots.txt"] = ("".join(f"Sitemap: {base}/{n}\n" for n in (
            "bad.xml", "big.xml", "bad.xml.gz", "dtd.xml", "good.xml")).encode(), "text/plain")
        files["/bad.xml"] = (urlset([f"{base}/from-bad"])[:-20], "application/xml")
        files["/big.xml"] = (urlset([f"{base}/from-big/{i}" for i in range(200)]),
                             "application/xml")
        files["/bad.xml.gz"] = (b"\x1f\x8b\x08\x00garbage", "application/gzip")
        files["/dtd.xml"] = (b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "a">]>'
                             b'<urlset><url><loc>&e;</loc></url></urlset>', "application/xml")
        files["/good.xml"] = (urlset([f"{base}/ok/{i}" for i in range(3)]), "application/xml")
        pages = await crawl(tmp_path, base, on(sitemap_max_bytes=2000))
    got = paths(log)
    assert sorted(p for p in got if p.startswith("/ok/")) == ["/ok/0", "/ok/1", "/ok/2"]
    assert not any(p.startswith(("/from-bad", "/from-big")) for p in got)
    assert set(pages) == {"", "ok/0", "ok/1", "ok/2"}
    assert sitemap_counts(tmp_path / "s") == {
        "fetched": 5, "with_errors": 4, "failed": 0, "skipped": 0, "urls": 3, "new": 3}
    with UrlSeen(tmp_path / "s", readonly=True) as seen:  # why, in each one's ledger row
        errors = {name: seen.check(f"{base}/{name}")[1]["error"] for name in
                  ("bad.xml", "big.xml", "bad.xml.gz", "dtd.xml", "good.xml")}
    assert errors["bad.xml"].startswith("sitemap: malformed xml")
    assert errors["big.xml"] == "sitemap: too large (>2000 bytes)"
    assert errors["bad.xml.gz"].startswith("sitemap: bad gzip")
    assert errors["dtd.xml"] == "sitemap: declares a DTD (refused)"
    assert errors["good.xml"] is None


async def test_no_sitemaps_flag_and_resume_fetching_a_queued_sitemap(tmp_path):
    files: dict[str, tuple[bytes, str]] = {}
    app, log = site_app(files)
    config = tmp_path / "fast.toml"
    config.write_text(config_toml(on()))
    async with serve(app) as base:
        files["/robots.txt"] = (f"Sitemap: {base}/maps/s.xml\n".encode(), "text/plain")
        files["/maps/s.xml"] = (urlset([f"{base}/only/{i}" for i in range(3)]),
                                "application/xml")
        seeds = write_seeds(tmp_path / "seeds.txt", [base + "/"])
        off = await run_cli("crawl", str(seeds), "--state", str(tmp_path / "off"),
                            "--config", str(config), "--quiet", "--no-sitemaps")
        assert off.rc == 0, off.stderr
        assert set(paths(log)) == {"/robots.txt", "/"}
        refused = await run_cli("resume", str(tmp_path / "off"), "--no-sitemaps")
        assert refused.rc == 2 and "resume cannot change --no-sitemaps" in refused.stderr
        refused = await run_cli("resume", str(tmp_path / "off"), "--sitemaps")
        assert refused.rc == 2 and "resume cannot change --sitemaps" in refused.stderr
        log.records.clear()
        # stopped after the seed: the sitemap is queued in the ledger, not yet fetched
        first = await run_cli("crawl", str(seeds), "--state", str(tmp_path / "on"),
                              "--config", str(config), "--quiet", "--max-pages", "1")
        assert first.rc == 0, first.stderr
        assert "/maps/s.xml" not in paths(log)
        resumed = await run_cli("resume", str(tmp_path / "on"), "--quiet", "--max-pages", "0")
        assert resumed.rc == 0, resumed.stderr
    got = paths(log)
    assert got.count("/maps/s.xml") == 1
    assert sorted(p for p in got if p.startswith("/only/")) == ["/only/0", "/only/1", "/only/2"]
    assert got.count("/") == 1


def test_parse_sitemap_limits():
    assert parse_sitemap(urlset(["http://h/a", "http://h/b"])).locs == ["http://h/a", "http://h/b"]
    capped = parse_sitemap(urlset([f"http://h/{i}" for i in range(5)]), max_urls=3)
    assert capped.locs == ["http://h/0", "http://h/1", "http://h/2"] and capped.note
    bomb = gzip.compress(b" " * 100_000)
    assert parse_sitemap(bomb, max_bytes=1000).error == \
        "too large (>1000 bytes uncompressed)"
    assert parse_sitemap(b"<html><body/></html>").error == "not a sitemap (<html>)"
    assert parse_sitemap(index(["http://h/s.xml"])).index


async def test_kill_9_while_a_sitemap_is_fetched_then_resume(tmp_path):
    """The sitemap's response is held until the crawl is killed: on resume it is
    fetched again (still QUEUED in the ledger, known as a sitemap from
    sitemaps.json) and its pages are admitted and recorded exactly once; the
    sitemap itself is in the WARC once and in no pages.jsonl line."""
    files: dict[str, tuple[bytes, str]] = {}
    release = asyncio.Event()
    held = 0

    async def sitemap(request: web.Request) -> web.Response:
        nonlocal held
        held += 1
        if held == 1:
            await release.wait()
        return web.Response(body=files["/maps/s.xml"][0], content_type="application/xml")

    app, _ = site_app(files, {"/maps/s.xml": sitemap})
    config = tmp_path / "fast.toml"
    config.write_text(config_toml(on()))
    warc = tmp_path / "w" / "crawl.warc.gz"
    async with serve(app) as base:
        files["/robots.txt"] = (f"Sitemap: {base}/maps/s.xml\n".encode(), "text/plain")
        files["/maps/s.xml"] = (urlset([f"{base}/k/{i}" for i in range(30)]),
                                "application/xml")
        seeds = write_seeds(tmp_path / "seeds.txt", [base + "/"])
        state = str(tmp_path / "state")
        proc = await start_cli("crawl", str(seeds), "--state", state, "--config", str(config),
                               "--quiet", "--warc", str(warc))
        try:
            await until(lambda: held >= 1, timeout=30, what="the sitemap request")
        finally:
            proc.kill()
            await proc.wait()
            release.set()
        resumed = await run_cli("resume", state, "--quiet")
        assert resumed.rc == 0, resumed.stderr
    assert held == 2
    urls = Counter(r["url"].removeprefix(base) for r in read_pages(tmp_path / "state" /
                                                                   "pages.jsonl"))
    want = {"/", *(f"/k/{i}" for i in range(30))}
    assert set(urls) == want and set(urls.values()) == {1}, urls
    records = Counter(u.removeprefix(base) for u in warc_uris(warc.parent))
    assert set(records) == {*want, "/maps/s.xml"} and set(records.values()) == {1}, records
    assert sitemap_counts(tmp_path / "state") == {
        "fetched": 1, "with_errors": 0, "failed": 0, "skipped": 0, "urls": 30, "new": 30}


def sitemap_site(pages: int, maps: int, per_map: int, overlap: int
                 ) -> tuple[web.Application, object, dict[str, tuple[bytes, str]]]:
    """A site whose pages (/p/0 ..) have no links: only the sitemaps reach them.
    robots.txt names an index of ``maps`` sitemaps; map i lists ``per_map`` pages
    from i * (per_map - overlap), so neighbours share ``overlap`` pages (listed
    twice, admitted once). Each request takes 20 ms, so a kill lands mid-crawl."""
    files: dict[str, tuple[bytes, str]] = {}

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.02)
        got = files.get(request.path)
        if got is not None:
            return web.Response(body=got[0], content_type=got[1])
        return web.Response(text="<html><body>no links</body></html>",
                            content_type="text/html")

    app, log = site_app(files, {"/p/{i}": slow, "/maps/{name}": slow})
    assert (maps - 1) * (per_map - overlap) + per_map == pages
    return app, log, files


async def test_kill_9_loop_with_sitemaps_keeps_pages_stats_and_warc_exact(tmp_path):
    """Killed at random moments (some while sitemaps are fetched, some while their
    pages are), resumed each time: every page one pages.jsonl line and one WARC
    response, every sitemap one WARC response and no line, the sitemap counts in
    ``stats`` what the generator says (URLs listed twice counted twice, new once),
    and the ledger's done rows are the lines plus the sitemaps."""
    rng = random.Random(5)
    maps, per_map, overlap = 4, 25, 5
    n = (maps - 1) * (per_map - overlap) + per_map
    app, log, files = sitemap_site(n, maps, per_map, overlap)
    config = tmp_path / "fast.toml"
    config.write_text(config_toml(on(concurrency=4)))
    warc = tmp_path / "w" / "crawl.warc.gz"
    state = tmp_path / "state"
    async with serve(app) as base:
        files["/robots.txt"] = (f"Sitemap: {base}/maps/index.xml\n".encode(), "text/plain")
        files["/maps/index.xml"] = (index([f"{base}/maps/{i}.xml" for i in range(maps)]),
                                    "application/xml")
        for i in range(maps):
            start = i * (per_map - overlap)
            files[f"/maps/{i}.xml"] = (urlset([f"{base}/p/{j}"
                                               for j in range(start, start + per_map)]),
                                       "application/xml")
        seeds = write_seeds(tmp_path / "seeds.txt", [base + "/"])
        args = ["crawl", str(seeds), "--state", str(state), "--config", str(config),
                "--quiet", "--warc", str(warc), "--warc-max-size", "20000"]

        async def reached(proc, at: int) -> None:
            await until(lambda: len(log.records) >= at or proc.returncode is not None,
                        timeout=60, what=f"{at} requests")
        kills, args = await kill_at(args, state, sorted(rng.sample(range(2, n), 5)), reached)
        assert kills >= 4
        done = await run_cli(*args)
        assert done.rc == 0, done.stderr
    pages = {f"/p/{i}" for i in range(n)}
    lines = Counter(r["url"].removeprefix(base) for r in read_pages(state / "pages.jsonl"))
    assert set(lines) == {"/", *pages} and set(lines.values()) == {1}, lines
    sitemaps = {"/maps/index.xml", *(f"/maps/{i}.xml" for i in range(maps))}
    records = Counter(u.removeprefix(base) for u in warc_uris(warc.parent))
    assert set(records) == {"/", *pages, *sitemaps} and set(records.values()) == {1}
    stats = state_stats(state)
    assert stats["sitemaps"] == {"fetched": maps + 1, "with_errors": 0, "failed": 0,
                                 "skipped": 0, "urls": maps + maps * per_map,
                                 "new": maps + n}
    assert (stats["fetched"], stats["failed"], stats["given_up"], stats["queued"]) == \
        (n + 1, 0, 0, 0)
    with UrlSeen(state, readonly=True) as seen:
        counts = seen.ledger.counts()
    assert counts["fetched"] + counts["failed"] + counts["skipped"] == \
        sum(lines.values()) + len(sitemaps)


async def test_with_sitemaps_a_listed_url_obeys_exclude_and_the_max_pages_count(tmp_path):
    """--sitemaps from the command line: a listed URL is fetched, an excluded one is
    not, and --max-pages counts pages only (the sitemap fetch is not one of them)."""
    files: dict[str, tuple[bytes, str]] = {}
    app, log = site_app(files)
    config = tmp_path / "fast.toml"
    config.write_text(config_toml(fast_settings()))
    async with serve(app) as base:
        files["/robots.txt"] = (f"Sitemap: {base}/maps/s.xml\n".encode(), "text/plain")
        files["/maps/s.xml"] = (urlset([f"{base}/listed", f"{base}/private/x"]),
                                "application/xml")
        seeds = write_seeds(tmp_path / "seeds.txt", [base + "/"])
        done = await run_cli("crawl", str(seeds), "--state", str(tmp_path / "s"),
                             "--config", str(config), "--sitemaps", "--exclude", "/private/",
                             "--max-pages", "2")
        assert done.rc == 0, done.stderr
    got = paths(log)
    assert got.count("/listed") == 1 and "/private/x" not in got
    assert got.count("/maps/s.xml") == 1
    lines = [r["url"].removeprefix(base) for r in read_pages(tmp_path / "s" / "pages.jsonl")]
    assert sorted(lines) == ["/", "/listed"]
    assert "sitemaps (whole crawl): 1 fetched (0 with errors), 0 failed, 0 disallowed by " \
        "robots.txt: 2 URLs listed, 1 of them new" in done.stderr
    assert "pages (whole crawl): 2 fetched" in done.stderr and "0 still queued" in done.stderr


async def secret_site(files: dict[str, tuple[bytes, str]], base: str) -> None:
    files["/robots.txt"] = (f"Sitemap: {base}/maps/s.xml\n".encode(), "text/plain")
    files["/maps/s.xml"] = (urlset([f"{base}/secret", f"{base}/docs/a"]), "application/xml")


async def test_follow_decides_sitemap_urls_too(tmp_path):
    """``follow`` decides every URL beyond the seeds: ``follow=lambda page: []`` on a
    site whose robots.txt names a sitemap listing /secret, with sitemaps off (the
    default) or on; and a follow that keeps /docs/ sees the sitemap as a Page with
    ``sitemap=True`` and its listed URLs as ``links``."""
    files: dict[str, tuple[bytes, str]] = {}
    app, log = site_app(files)
    seen_pages = []

    def docs_only(page):
        seen_pages.append((page.url, page.sitemap, sorted(page.links)))
        return [u for u in page.links if "/docs/" in u]

    async with serve(app) as base:
        await secret_site(files, base)
        for name, options in (("default", {}), ("on", {"sitemaps": True})):
            log.records.clear()
            async with Crawler([base + "/"], state=tmp_path / name, follow=lambda page: [],
                               config=fast_settings().to_dict() | {"crawl": {}},
                               allow_private=True, **options) as c:
                summary = await c.run()
            assert "/secret" not in paths(log), (name, paths(log))
            assert summary["fetched"] == 1
        assert paths(log).count("/maps/s.xml") == 1  # read (opted in), nothing followed
        log.records.clear()
        async with Crawler([base + "/"], state=tmp_path / "docs", follow=docs_only,
                           config=fast_settings().to_dict(), sitemaps=True) as c:
            await c.run()
    got = paths(log)
    assert got.count("/docs/a") == 1 and "/secret" not in got
    assert (base + "/maps/s.xml", True, [base + "/docs/a", base + "/secret"]) in seen_pages
    lines = {r["url"].removeprefix(base) for r in read_pages(tmp_path / "docs" / "pages.jsonl")}
    assert lines == {"/", "/docs/a"}


def test_a_crawl_frozen_before_sitemaps_resumes_without_them():
    frozen = Settings().with_values(crawl={"sitemaps": True}).to_dict()
    assert settings_from_dict(frozen).crawl.sitemaps is True  # as it was started
    del frozen["crawl"]["sitemaps"]
    assert settings_from_dict(frozen).crawl.sitemaps is False


async def test_repair_keeps_the_sitemap_rows_that_have_no_record(tmp_path):
    """``repair`` takes a done row without a pages.jsonl record for a damaged one,
    except a sitemap file's (``DIR/sitemaps.json`` names them): they stay done, and
    the seen-set loses nothing."""
    from crawler.admin.repair import repair_state_dir
    from tests.crawler.admin.test_repair import damage_tables

    files: dict[str, tuple[bytes, str]] = {}
    app, _ = site_app(files)
    async with serve(app) as base:
        files["/robots.txt"] = (f"Sitemap: {base}/maps/s.xml\n".encode(), "text/plain")
        files["/maps/s.xml"] = (urlset([f"{base}/a", f"{base}/b"]), "application/xml")
        await crawl(tmp_path, base, on())
    damage_tables(tmp_path / "s" / "ledger.sqlite", ("queue", "queue_host"))
    done = repair_state_dir(tmp_path / "s")
    report, restored = done.report, done.restored
    assert report.damage.journal
    assert (report.unaccounted, restored) == (0, 0)
    with UrlSeen(tmp_path / "s", readonly=True) as seen:
        assert seen.check(f"{base}/maps/s.xml")[1]["state"] == "fetched"
