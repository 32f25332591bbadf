"""WARC output read back with warcio: request/response pairs, revisits, robots.txt,
non-HTML responses, rotation, and pages.jsonl's referrer/payload_digest/duplicate_of.

A real aiohttp site on 127.0.0.1; the crawl runs through the CLI in a subprocess,
and every file is also checked with ``warcio check`` (the CLI), which verifies
the block and payload digests of every record.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from collections import Counter
from pathlib import Path

from aiohttp import web
from warcio.archiveiterator import ArchiveIterator

from crawler.core.outputs.output import read_pages
from tests.support.faultserver import serve
from tests.support.helpers import config_toml, fast_settings, run_cli, write_seeds
from tests.support.proxyserver import forward_proxy

SAME = b"<html><body><p>the very same body</p></body></html>"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def _page(links: list[str], text: str) -> web.Response:
    body = "".join(f'<a href="{u}">{u}</a>' for u in links)
    return web.Response(text=f"<html><body><h1>{text}</h1>{body}</body></html>",
                        content_type="text/html", headers={"X-Test": text})


def make_site(extra_pages: int = 0) -> web.Application:
    """/ links to /a, /b (same body as /c), /img.png (not HTML), /moved (301 -> /a)
    and /missing (404); /a links to /c; /b links to /deep/{i} pages."""
    app = web.Application()

    async def robots(_: web.Request) -> web.Response:
        return web.Response(text="User-agent: *\nDisallow: /private\n")

    async def root(_: web.Request) -> web.Response:
        return _page(["/a", "/b", "/img.png", "/moved", "/missing", "/private"], "root")

    async def a(_: web.Request) -> web.Response:
        return _page(["/c"], "a")

    async def b(_: web.Request) -> web.Response:
        links = "".join(f'<a href="/deep/{i}">d{i}</a>' for i in range(extra_pages))
        return web.Response(body=SAME.replace(b"</p>", b"</p>" + links.encode()) if links
                            else SAME, content_type="text/html")

    async def c(_: web.Request) -> web.Response:
        return web.Response(body=SAME, content_type="text/html")

    async def deep(request: web.Request) -> web.Response:
        n = request.match_info["n"]
        return _page([], f"deep {n} " + "x" * 2000)

    async def img(_: web.Request) -> web.Response:
        return web.Response(body=PNG, content_type="image/png")

    async def moved(_: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently("/a")

    app.router.add_get("/robots.txt", robots)
    app.router.add_get("/", root)
    app.router.add_get("/a", a)
    app.router.add_get("/b", b)
    app.router.add_get("/c", c)
    app.router.add_get("/deep/{n}", deep)
    app.router.add_get("/img.png", img)
    app.router.add_get("/moved", moved)
    return app


async def crawl(tmp_path: Path, base: str, *flags: str) -> tuple[Path, str]:
    seeds = write_seeds(tmp_path / "seeds.txt", [base + "/"])
    config = tmp_path / "config.toml"
    config.write_text(config_toml(fast_settings(crawl={"concurrency": 2})))
    state = tmp_path / "state"
    got = await run_cli("crawl", str(seeds), "--state", str(state), "--config", str(config),
                        "--quiet", *flags)
    assert got.rc == 0, got.stderr
    return state, got.stderr


def records(path: Path) -> list:
    """Every record of a WARC file, content read, digests checked by warcio."""
    out = []
    with open(path, "rb") as fh:
        for r in ArchiveIterator(fh, check_digests=True):
            r.body = r.content_stream().read()
            assert r.digest_checker.passed is not False, r.digest_checker.problems
            out.append(r)
    return out


def warcio_check(path: Path) -> None:
    got = subprocess.run([sys.executable, "-m", "warcio.cli", "check", "-v", str(path)],
                         capture_output=True, text=True, timeout=60)
    if got.returncode != 0:  # older warcio has no __main__ in warcio.cli
        got = subprocess.run([str(Path(sys.executable).with_name("warcio")), "check", "-v",
                              str(path)], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "digest pass" in got.stdout and "digest fail" not in got.stdout, got.stdout


def sha1(body: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()


async def test_warc_holds_request_response_pairs_revisits_robots_and_non_html(tmp_path):
    async with serve(make_site()) as base:
        state, _ = await crawl(tmp_path, base, "--warc", str(tmp_path / "out" / "crawl.warc.gz"))
    files = sorted((tmp_path / "out").iterdir())
    assert [f.name for f in files] == ["crawl-00000.warc.gz"]
    warcio_check(files[0])
    recs = records(files[0])
    kinds = Counter(r.rec_type for r in recs)
    assert recs[0].rec_type == "warcinfo"

    by_id = {r.rec_headers.get_header("WARC-Record-ID"): r for r in recs}
    pairs = {}
    for r in recs:
        if r.rec_type == "request":
            other = by_id[r.rec_headers.get_header("WARC-Concurrent-To")]
            assert other.rec_type in ("response", "revisit")
            uri = r.rec_headers.get_header("WARC-Target-URI")
            assert other.rec_headers.get_header("WARC-Target-URI") == uri
            assert other.rec_headers.get_header("WARC-Date") == \
                r.rec_headers.get_header("WARC-Date")
            assert r.http_headers.protocol == "GET"
            # the request line whole: origin-form target and version
            assert r.http_headers.statusline == \
                f"{uri[uri.index('/', len('http://')):]} HTTP/1.1", r.http_headers.statusline
            assert r.http_headers.get_header("User-Agent").startswith("bloomcrawl")
            assert r.http_headers.get_header("Host").startswith("127.0.0.1:")
            pairs[uri] = (r, other)
    assert kinds["request"] == kinds["response"] + kinds["revisit"] == len(pairs)

    robots = pairs[base + "/robots.txt"][1]
    assert robots.rec_type == "response" and robots.http_headers.get_statuscode() == "200"
    assert b"Disallow: /private" in robots.body
    assert robots.rec_headers.get_header("WARC-IP-Address") == "127.0.0.1"

    root = pairs[base + "/"][1]
    assert root.http_headers.protocol == "HTTP/1.1"
    assert root.http_headers.statusline == "200 OK"
    assert root.http_headers.get_header("X-Test") == "root"
    assert root.http_headers.get_header("Content-Type").startswith("text/html")
    assert root.rec_headers.get_header("WARC-Payload-Digest") == sha1(root.body)
    assert root.rec_headers.get_header("WARC-Block-Digest").startswith("sha1:")

    img = pairs[base + "/img.png"][1]
    assert img.rec_type == "response" and img.body == PNG
    assert img.rec_headers.get_header("WARC-Payload-Digest") == sha1(PNG)
    assert pairs[base + "/moved"][1].http_headers.get_statuscode() == "301"
    assert pairs[base + "/moved"][1].http_headers.get_header("Location") == "/a"
    assert pairs[base + "/missing"][1].http_headers.get_statuscode() == "404"
    assert base + "/private" not in pairs  # robots.txt said no: never requested

    b_rec, c_rec = pairs[base + "/b"][1], pairs[base + "/c"][1]
    first, second = sorted([b_rec, c_rec], key=lambda r: recs.index(r))
    assert first.rec_type == "response" and first.body == SAME
    assert second.rec_type == "revisit"
    assert second.rec_headers.get_header("WARC-Profile") == \
        "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
    assert second.rec_headers.get_header("WARC-Refers-To-Target-URI") == \
        first.rec_headers.get_header("WARC-Target-URI")
    assert second.rec_headers.get_header("WARC-Refers-To-Date") == \
        first.rec_headers.get_header("WARC-Date")
    assert second.rec_headers.get_header("WARC-Payload-Digest") == sha1(SAME)
    assert second.http_headers.statusline == "200 OK"

    pages = {p["url"]: p for p in read_pages(state / "pages.jsonl")}
    assert pages[base + "/"]["referrer"] is None
    assert pages[base + "/a"]["referrer"] == base + "/"
    assert pages[base + "/c"]["referrer"] == base + "/a"
    assert pages[base + "/"]["payload_digest"] == sha1(root.body)
    assert pages[base + "/img.png"]["payload_digest"] == sha1(PNG)
    dup = pages[second.rec_headers.get_header("WARC-Target-URI")]
    orig = pages[first.rec_headers.get_header("WARC-Target-URI")]
    assert dup["duplicate_of"] == orig["url"] and orig["duplicate_of"] is None
    assert dup["payload_digest"] == orig["payload_digest"] == sha1(SAME)
    assert pages[base + "/a"]["duplicate_of"] is None


async def test_pages_jsonl_has_referrer_digest_and_duplicate_of_without_warc(tmp_path):
    async with serve(make_site()) as base:
        state, _ = await crawl(tmp_path, base)
    pages = {p["url"]: p for p in read_pages(state / "pages.jsonl")}
    assert pages[base + "/c"]["referrer"] == base + "/a"
    assert pages[base + "/moved"]["referrer"] == base + "/"
    assert pages[base + "/b"]["payload_digest"] == pages[base + "/c"]["payload_digest"] \
        == sha1(SAME)
    dups = {u: p["duplicate_of"] for u, p in pages.items() if p["duplicate_of"]}
    assert list(dups.values()) in ([base + "/b"], [base + "/c"])
    assert pages[base + "/img.png"]["payload_digest"] is None  # not read: no WARC wants it


async def test_warc_content_type_limits_what_is_archived(tmp_path):
    async with serve(make_site()) as base:
        await crawl(tmp_path, base, "--warc", str(tmp_path / "out" / "crawl.warc"),
                    "--warc-content-type", "^text/html$")
    (f,) = sorted((tmp_path / "out").iterdir())
    assert f.name == "crawl-00000.warc"
    uris = {r.rec_headers.get_header("WARC-Target-URI") for r in records(f)
            if r.rec_type == "response"}
    assert base + "/" in uris and base + "/robots.txt" in uris
    assert base + "/img.png" not in uris


async def test_rotation_writes_several_valid_files(tmp_path):
    async with serve(make_site(extra_pages=30)) as base:
        state, _ = await crawl(tmp_path, base, "--warc", str(tmp_path / "out" / "c.warc.gz"),
                               "--warc-max-size", "8192")
    files = sorted((tmp_path / "out").iterdir())
    assert len(files) >= 3
    assert [f.name for f in files] == [f"c-{i:05d}.warc.gz" for i in range(len(files))]
    uris: Counter[str] = Counter()
    for f in files:
        warcio_check(f)
        recs = records(f)
        assert recs[0].rec_type == "warcinfo"
        assert recs[0].rec_headers.get_header("WARC-Filename") == f.name
        assert any(r.rec_type in ("response", "revisit") for r in recs)
        uris.update(r.rec_headers.get_header("WARC-Target-URI") for r in recs
                    if r.rec_type in ("response", "revisit"))
        # a file passes the limit only by its last record pair
        assert f.stat().st_size < 8192 + 16384
    pages = read_pages(state / "pages.jsonl")
    fetched = {p["url"] for p in pages if p["status"] is not None}
    assert set(uris) == fetched | {base + "/robots.txt"}
    assert max(uris.values()) == 1


async def test_warc_through_a_proxy_holds_absolute_targets_and_no_ip(tmp_path):
    """Through an http proxy aiohttp sends ``GET http://host:port/path``: the request
    record holds that line (what the proxy received, as its log shows), no
    WARC-IP-Address (the connection went to the proxy, not to the site) and not
    the proxy's credentials."""
    async with serve(make_site()) as base, forward_proxy() as proxy:
        with_auth = proxy.url.replace("http://", "http://user:secret@")
        await crawl(tmp_path, base, "--warc", str(tmp_path / "out" / "crawl.warc.gz"),
                    "--proxy", with_auth)
    files = sorted((tmp_path / "out").iterdir())
    warcio_check(files[0])
    recs = [r for f in files for r in records(f)]
    requests = [r for r in recs if r.rec_type == "request"]
    assert requests and len(requests) == len(proxy.log)
    targets = []
    for r in requests:
        uri = r.rec_headers.get_header("WARC-Target-URI")
        target, version = r.http_headers.statusline.split(" ")
        assert (r.http_headers.protocol, target, version) == ("GET", uri, "HTTP/1.1")
        assert r.http_headers.get_header("Proxy-Authorization") is None
        targets.append(target)
    assert sorted(targets) == sorted(proxy.urls())
    assert all(r.headers.get("Proxy-Authorization", "").startswith("Basic ")
               for r in proxy.log)  # the proxy did get them
    assert base + "/robots.txt" in targets and base + "/a" in targets
    assert not [r for r in recs if r.rec_headers.get_header("WARC-IP-Address")]
