"""Big pages: a 50 MB page crawled with its links followed, archived whole, for a
bounded RSS; a page over the size limit (a server that never stops sending) cut
there and counted as failed; long pages parsed in pieces like one parse.

A real aiohttp site on 127.0.0.1 that generates the pages as it sends them; the
crawls run the CLI in child processes, whose peak RSS (VmHWM) they print.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import sys
from pathlib import Path

from aiohttp import web
from warcio.archiveiterator import ArchiveIterator

from crawler.core.outputs.output import read_pages
from crawler.net.body import MEMORY, Body, sha1_text
from crawler.net.links import PIECE, extract_links
from tests.dedup.conftest import require_kernel
from tests.support.faultserver import serve
from tests.support.helpers import REPO, cli_env, config_toml, fast_settings, until, write_seeds

MB = 1_000_000
BIG = 50 * MB
LINKS = [f"/p/{i}" for i in range(5)]
# dense markup, as a long real page has (lexbor's tree of 8 MiB of it is ~130 MB);
# its anchors point into the page itself
PARA = ('<p class="t">Lorem ipsum <b>dolor</b> sit amet, <a href="#s{}">consectetur</a> '
        'adipiscing elit, sed do <i>eiusmod</i> tempor incididunt.</p>\n')
FILLER = "".join(PARA.format(i % 97) for i in range(600)).encode()  # ~80 KB
LATE_AT = 40 * MB  # a link this far in, past the parse limit: not followed


def big_page_chunks() -> list[bytes | None]:
    """The 50 MB page as a list of chunks (None: one more FILLER), BIG bytes in all:
    its links first, the /late link at LATE_AT."""
    head = ("<!doctype html><html><head><meta charset=utf-8><title>big</title></head><body>"
            + "".join(f'<a href="{u}">{u}</a>' for u in LINKS)).encode()
    late = b'<a href="/late">late</a>'
    tail = b"</body></html>\n"
    chunks: list[bytes | None] = [head]
    size = len(head)
    while size + len(FILLER) < LATE_AT:
        chunks.append(None)
        size += len(FILLER)
    chunks.append(late)
    size += len(late)
    while size + len(FILLER) + len(tail) < BIG:
        chunks.append(None)
        size += len(FILLER)
    chunks.append(b"<!--" + b"x" * (BIG - size - len(tail) - 7) + b"-->")
    chunks.append(tail)
    return chunks


def expected_digest() -> str:
    sha = hashlib.sha1()
    for c in big_page_chunks():
        sha.update(FILLER if c is None else c)
    return "sha1:" + base64.b32encode(sha.digest()).decode()


def make_app(sent: dict[str, int]) -> web.Application:
    async def big(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/html; charset=utf-8"})
        resp.content_length = BIG
        await resp.prepare(request)
        for c in big_page_chunks():
            await resp.write(FILLER if c is None else c)
        await resp.write_eof()
        return resp

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/html"})
        await resp.prepare(request)  # chunked, no length: never says how much comes
        await resp.write(b'<html><body><a href="/p/9">nine</a>')
        sent["endless"] = 0
        try:
            while True:  # until the client hangs up
                await resp.write(FILLER)
                sent["endless"] += len(FILLER)
        except (ConnectionError, asyncio.CancelledError):  # aiohttp cancels on hang-up
            sent["hung_up"] = 1
            raise

    async def small(_: web.Request) -> web.Response:
        body = "".join(f'<a href="{u}">{u}</a>' for u in LINKS)
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=f"<html><body>{request.path}</body></html>",
                            content_type="text/html")

    app = web.Application()
    app.router.add_get("/big", big)
    app.router.add_get("/endless", endless)
    app.router.add_get("/small", small)
    app.router.add_get("/p/{n}", page)
    app.router.add_get("/late", page)
    return app


# the CLI in this process, then its peak RSS in MB on stderr
_RUN = ("import sys\nfrom crawler.cli.main import main\nrc = main(sys.argv[1:])\n"
        "hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')][0]\n"
        "print('VMHWM', int(hwm.split()[1]) / 1024, file=sys.stderr)\nsys.exit(rc)\n")


async def crawl(tmp_path: Path, name: str, url: str, *flags: str) -> tuple[Path, str, float]:
    """Crawl ``url`` (depth 1) with the CLI: (state dir, stderr, peak RSS in MB)."""
    work = tmp_path / name
    work.mkdir()
    seeds = write_seeds(work / "seeds.txt", [url])
    config = work / "config.toml"
    config.write_text(config_toml(fast_settings(
        crawl={"concurrency": 4, "max_depth": 1},
        fetch={"read_timeout": 20.0, "total_timeout": 60.0},
        politeness={"obey_robots": False})))
    state = work / "state"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _RUN, "crawl", str(seeds), "--state", str(state),
        "--config", str(config), *flags,
        cwd=REPO, env=cli_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 120)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    text = err.decode()
    assert proc.returncode == 0, text
    rss = float(text.rsplit("VMHWM ", 1)[1].split()[0])
    return state, text, rss


def warc_responses(prefix: Path) -> dict[str, tuple[int, str, str | None, str]]:
    """{url: (payload bytes, sha1 of them, WARC-Truncated, WARC-Payload-Digest)} of
    every response record in the files of ``prefix``, digests checked by warcio."""
    out = {}
    for path in sorted(prefix.parent.glob(prefix.name + "-*.warc")):
        with open(path, "rb") as fh:
            for r in ArchiveIterator(fh, check_digests=True):
                if r.rec_type != "response":
                    continue
                sha, n = hashlib.sha1(), 0
                stream = r.content_stream()
                while chunk := stream.read(1 << 20):
                    sha.update(chunk)
                    n += len(chunk)
                assert r.digest_checker.passed is not False, r.digest_checker.problems
                h = r.rec_headers
                out[h.get_header("WARC-Target-URI")] = (
                    n, "sha1:" + base64.b32encode(sha.digest()).decode(),
                    h.get_header("WARC-Truncated"), h.get_header("WARC-Payload-Digest"))
    return out


async def test_a_50_mb_page_is_crawled_archived_whole_and_costs_little_memory(tmp_path):
    require_kernel()  # the bound is the compiled path's; the numpy/Python one holds more
    async with serve(make_app({})) as base:
        _, _, small_rss = await crawl(tmp_path, "small", base + "/small",
                                      "--warc", str(tmp_path / "small.warc"))
        state, _, big_rss = await crawl(tmp_path, "big", base + "/big",
                                        "--warc", str(tmp_path / "big.warc"))
    pages = {r["url"].removeprefix(base): r for r in read_pages(state / "pages.jsonl")}
    digest = expected_digest()
    big = pages["/big"]
    assert (big["status"], big["error"], big["bytes"]) == (200, None, BIG)
    assert big["payload_digest"] == digest
    # the links of its first part followed; the one 40 MB in is past the parse limit
    assert sorted(pages) == sorted(["/big", *LINKS])
    assert all(pages[u]["status"] == 200 for u in LINKS)
    assert big["links_found"] > len(LINKS) and big["links_new"] == len(LINKS)
    # the whole body in the WARC, its digest the one pages.jsonl has
    got = warc_responses(tmp_path / "big")
    assert got[base + "/big"] == (BIG, digest, None, digest)
    assert set(got) == {base + u for u in ["/big", *LINKS]}
    # before: held whole (and three copies of it) it cost ~200 MB. Streamed, +27-29 MB on
    # an idle box (the 8 MiB parse head, its parse pieces, the WARC copy buffers), +33
    # under load: 40 still fails any code that holds the 50 MB body once.
    print(f"peak RSS: 50 MB page {big_rss:.1f} MB, small page {small_rss:.1f} MB")
    assert big_rss - small_rss < 40, (big_rss, small_rss)
    assert not list(state.glob("tmp*"))  # no spool file left (they have no name)


async def test_a_page_over_the_limit_is_cut_there_and_counted_as_failed(tmp_path):
    sent: dict[str, int] = {}
    limit = 2_000_000
    async with serve(make_app(sent)) as base:
        state, err, _ = await crawl(tmp_path, "endless", base + "/endless",
                                    "--max-bytes", str(limit),
                                    "--warc", str(tmp_path / "endless.warc"))
        stats = await _stats(state)
        await until(lambda: sent.get("hung_up"), what="the server to see the hang-up")
    # the crawl ended while the server would send forever: the crawler hung up; what
    # the server wrote past the limit sat in the loopback sockets' buffers (megabytes)
    assert sent["endless"] < 16 * limit
    (rec,) = read_pages(state / "pages.jsonl")
    assert (rec["status"], rec["error"]) == (200, f"too large (>{limit} bytes)")
    assert rec["payload_digest"] is None and rec["links_found"] == 0
    assert "0 fetched" in err and "1 failed (1 too large)" in err
    assert (stats["fetched"], stats["failed"]) == (0, 1)
    assert stats["failed_causes"] == {"too large": 1}
    # archived as far as it was read, marked truncated
    n, sha, truncated, digest = warc_responses(tmp_path / "endless")[base + "/endless"]
    assert (n, truncated, digest) == (limit, "length", sha)


async def _stats(state: Path) -> dict:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "stats", str(state), "--json", cwd=REPO,
        env=cli_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


def test_a_long_page_parsed_in_pieces_gives_the_links_of_one_parse() -> None:
    head = (b'<html><head><meta charset="windows-1252"><base href="/dir/"></head><body>'
            b'<a href="first">x</a>')
    rows = b"".join(b'<p>text <a href="p%d" rel="nofollow">a</a> <A\nHREF="q%d">b</A> '
                    b'<area href="m%d"> caf\xe9</p>\n' % (i, i, i) for i in range(40_000))
    body = head + rows + b'<a href="last\xe9">y</a></body></html>'
    assert len(body) > 4 * PIECE
    whole_base = "http://h/dir/"
    base, hrefs = extract_links(body, "http://h/page")
    assert base == whole_base
    assert hrefs[0] == "first" and hrefs[-1] == "last\xe9"  # windows-1252 in every piece
    assert len(hrefs) == 2 + 3 * 40_000
    assert hrefs[1:4] == ["p0", "q0", "m0"] and hrefs[-4:-1] == ["p39999", "q39999", "m39999"]
    _, followed = extract_links(body, "http://h/page", nofollow=True)
    assert len(followed) == 2 + 2 * 40_000
    meta = body.replace(b"<base", b'<meta name="robots" content="nofollow"><base', 1)
    assert extract_links(meta, "http://h/page", nofollow=True) == (whole_base, [])


def test_a_body_spills_to_a_temp_file_and_keeps_its_head_and_digest(tmp_path) -> None:
    data = bytes(range(256)) * (3 * MEMORY // 256 + 1)
    body = Body(spool_dir=str(tmp_path))
    for i in range(0, len(data), 65536):
        body.write(data[i:i + 65536])
    assert (len(body), body.head(1000)) == (len(data), data[:1000])
    assert body.reader().read() == data
    assert body.digest() == "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()
    assert not list(tmp_path.iterdir())  # the file has no name
    kept = Body(keep=10, spool_dir=str(tmp_path))
    kept.write(data[:5])
    kept.write(data[5:5000])
    assert (kept.size, len(kept), kept.head(100)) == (5000, 10, data[:10])
    assert kept.digest() == Body.of(data[:5000]).digest()
    body.close()


def test_the_digest_text_is_base32_of_the_sha1() -> None:
    for n in range(300):
        digest = hashlib.sha1(bytes([n % 256]) * n).digest()
        assert sha1_text(digest) == "sha1:" + base64.b32encode(digest).decode()
    for digest in (bytes(20), b"\xff" * 20, bytes(19) + b"\x01", b"\x80" + bytes(19)):
        assert sha1_text(digest) == "sha1:" + base64.b32encode(digest).decode()


def test_the_limits_come_from_flags_for_a_crawl_its_fleet_workers_and_resume() -> None:
    from crawler.cli.args import crawl_settings, resume_changes, worker_flags
    from crawler.cli.main import build_parser

    parse = build_parser().parse_args
    options = ["--max-bytes", "200_000_000", "--parse-limit", "16777216"]
    fleet = parse(["fleet", "seeds", "--state", "d", "--workers", "2", *options])
    worker = parse(["crawl", "seeds", "--state", "d/worker-1", *worker_flags(fleet, 1)])
    s = crawl_settings(worker)
    assert (s.fetch.max_bytes, s.fetch.parse_limit) == (200_000_000, 16_777_216)
    assert crawl_settings(parse(["crawl", "seeds", "--state", "d"])).fetch.max_bytes == 1 << 26
    assert resume_changes(parse(["resume", "d", *options])) == {
        "fetch": {"max_bytes": 200_000_000, "parse_limit": 16_777_216}}
