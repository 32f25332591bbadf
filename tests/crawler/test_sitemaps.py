"""Sitemaps as a source of URLs: robots.txt ``Sitemap:`` lines, the /sitemap.xml
fallback, an index pointing at a gzip sitemap, bad sitemaps recorded and survived,
scope and robots.txt applied, --no-sitemaps, and resume fetching a sitemap a
stopped crawl had queued. Real aiohttp servers on 127.0.0.1; what was fetched is
read from the server's request log."""

from __future__ import annotations

import asyncio
import gzip
from collections import Counter

from aiohttp import web

from crawler.config.settings import Settings, settings_from_dict
from crawler.core.outputs.output import read_pages
from crawler.core.run.engine import run_crawl
from crawler.core.state.state import create_crawl
from crawler.net.sitemap import parse_sitemap
from tests.support.faultserver import add_request_log, serve
from tests.support.helpers import (
    config_toml,
    fast_settings,
    run_cli,
    start_cli,
    until,
    write_seeds,
)

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
        await run_crawl(seen, settings, scope)
    finally:
        seen.close()
    return {r["url"].split("/", 3)[3]: r for r in read_pages(tmp_path / name / "pages.jsonl")}


def test_sitemaps_are_on_by_default():
    assert Settings().crawl.sitemaps is True


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
    assert pages["maps/site.xml"]["depth"] == 1 and pages["maps/site.xml"]["error"] is None
    assert pages["maps/site.xml"]["links_found"] == 6
    assert pages["hidden/1"]["depth"] == 1
    assert pages["hidden/1"]["referrer"] == base + "/maps/site.xml"
    assert pages["secret-maps/s.xml"]["error"] == "robots.txt"


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
    assert got.count("/maps/a.xml.gz") == 1
    assert pages["missing/b.xml"]["error"] == "http 404"  # recorded, not fatal


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
    assert pages["bad.xml"]["error"].startswith("sitemap: malformed xml")
    assert pages["big.xml"]["error"] == "sitemap: too large (>2000 bytes)"
    assert pages["bad.xml.gz"]["error"].startswith("sitemap: bad gzip")
    assert pages["dtd.xml"]["error"] == "sitemap: declares a DTD (refused)"
    assert pages["good.xml"]["error"] is None


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
    sitemaps.json) and its pages are admitted and recorded exactly once."""
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
    async with serve(app) as base:
        files["/robots.txt"] = (f"Sitemap: {base}/maps/s.xml\n".encode(), "text/plain")
        files["/maps/s.xml"] = (urlset([f"{base}/k/{i}" for i in range(30)]),
                                "application/xml")
        seeds = write_seeds(tmp_path / "seeds.txt", [base + "/"])
        state = str(tmp_path / "state")
        proc = await start_cli("crawl", str(seeds), "--state", state, "--config", str(config),
                               "--quiet")
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
    want = {"/", "/maps/s.xml", *(f"/k/{i}" for i in range(30))}
    assert set(urls) == want and set(urls.values()) == {1}, urls


def test_a_crawl_frozen_before_sitemaps_resumes_without_them():
    frozen = Settings().to_dict()
    assert settings_from_dict(frozen).crawl.sitemaps is True
    del frozen["crawl"]["sitemaps"]
    assert settings_from_dict(frozen).crawl.sitemaps is False
