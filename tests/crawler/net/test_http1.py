"""The lean HTTP/1.1 client (crawler/net/http1.py) against aiohttp, on the same bytes.

A raw TCP server on 127.0.0.1 replays canned responses, well-formed and not
(chunked, close-delimited, compressed, bare-LF, 1xx first, oversized headers,
truncated bodies, broken encodings): each is fetched with ``[fetch] client =
"fast"`` and with ``"aiohttp"``, and every field of the result the crawl reads must
be the same. The request each client sent must carry the same headers.
"""

from __future__ import annotations

import asyncio
import gzip
import random
import zlib
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import pytest_asyncio

from crawler.config.settings import FetchSettings
from crawler.net.contentcoding import ACCEPT_ENCODING
from crawler.net.fetch import Fetcher
from tests.support.helpers import until

SETTINGS = FetchSettings(allow_private=True, connect_timeout=1.0, read_timeout=0.5,
                         total_timeout=3.0, retries=0, max_bytes=200_000,
                         headers=("X-Test: yes",))
PAGE = b"<html><body>" + b"<a href='/next'>x</a>" * 500 + b"</body></html>"


def _resp(head: str, body: bytes = b"", *, lf: bool = False) -> bytes:
    sep = "\n" if lf else "\r\n"
    return (head.replace("\n", sep) + sep + sep).encode("latin-1") + body


def _chunked(body: bytes, size: int = 1000, ext: bool = False) -> bytes:
    out = b""
    for i in range(0, len(body), size):
        piece = body[i:i + size]
        out += f"{len(piece):x}{';x=1' if ext else ''}\r\n".encode() + piece + b"\r\n"
    return out + b"0\r\nX-Trailer: t\r\n\r\n"


def _gz_members(body: bytes) -> bytes:
    half = len(body) // 2
    return gzip.compress(body[:half]) + gzip.compress(body[half:])


HTML = "Content-Type: text/html; charset=utf-8"
# path -> (response bytes, close the connection after sending)
CANNED: dict[str, tuple[bytes, bool]] = {
    "/cl": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Length: {len(PAGE)}", PAGE), False),
    "/chunked": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nTransfer-Encoding: chunked",
                       _chunked(PAGE, ext=True)), False),
    "/close": (_resp(f"HTTP/1.1 200 OK\n{HTML}", PAGE), True),
    "/http10": (_resp(f"HTTP/1.0 200 OK\n{HTML}\nContent-Length: {len(PAGE)}", PAGE), True),
    "/gzip": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: gzip\nContent-Length: "
                    f"{len(gzip.compress(PAGE))}", gzip.compress(PAGE)), False),
    "/gzip-chunked": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: GZIP\n"
                            "Transfer-Encoding: chunked", _chunked(gzip.compress(PAGE), 100)),
                      False),
    "/gzip-members": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: gzip\n"
                            f"Content-Length: {len(_gz_members(PAGE))}", _gz_members(PAGE)),
                      False),
    "/deflate": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: deflate\n"
                       f"Content-Length: {len(zlib.compress(PAGE))}", zlib.compress(PAGE)),
                 False),
    "/rawdeflate": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: deflate",
                          zlib.compress(PAGE, wbits=-15)), True),
    "/bomb": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: gzip",
                    gzip.compress(b"<html>" + b" " * 5_000_000)), True),
    "/badgzip": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: gzip\nContent-Length: 20",
                       b"\x1f\x8b" + b"garbage!" * 2 + b"xx"), False),
    "/unknown-encoding": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: x-custom\n"
                                f"Content-Length: {len(PAGE)}", PAGE), False),
    "/lf": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Length: {len(PAGE)}", PAGE, lf=True),
            False),
    "/early-hints": (_resp("HTTP/1.1 103 Early Hints\nLink: </s.css>; rel=preload")
                     + _resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Length: {len(PAGE)}", PAGE),
                     False),
    "/204": (_resp("HTTP/1.1 204 No Content"), False),
    "/304": (_resp("HTTP/1.1 304 Not Modified\nContent-Length: 100"), False),
    "/301": (_resp("HTTP/1.1 301 Moved\nLocation: /cl\nContent-Length: 5", b"moved"), False),
    "/404": (_resp("HTTP/1.1 404 Not Found\nContent-Length: 9", b"not found"), False),
    "/503": (_resp("HTTP/1.1 503 Busy\nRetry-After: 2\nContent-Length: 4", b"busy"), False),
    "/big": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Length: 300000", b"<p>" * 100_000),
             False),
    "/pdf": (_resp("HTTP/1.1 200 OK\nContent-Type: application/pdf\nContent-Length: 4000",
                   b"%PDF" * 1000), False),
    "/untyped": (_resp(f"HTTP/1.1 200 OK\nContent-Length: {len(PAGE)}", PAGE), False),
    "/truncated": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Length: {len(PAGE) + 500}",
                         PAGE), True),
    "/truncated-chunked": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nTransfer-Encoding: chunked",
                                 _chunked(PAGE)[:-40]), True),
    "/empty": (b"", True),
    "/half-head": (b"HTTP/1.1 200 OK\r\nContent-Ty", True),
    "/bad-status": (_resp(f"HTTP/1.1 2x0 OK\n{HTML}\nContent-Length: 2", b"hi"), False),
    "/long-header": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nX-Long: {'a' * 9000}\n"
                           "Content-Length: 2", b"hi"), False),
    "/many-headers": (_resp(f"HTTP/1.1 200 OK\n{HTML}\n"
                            + "".join(f"X-H{i}: v\n" for i in range(130))
                            + "Content-Length: 2", b"hi"), False),
    "/bad-chunk": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nTransfer-Encoding: chunked",
                         b"zz\r\nhello\r\n0\r\n\r\n"), False),
    "/te-and-cl": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nTransfer-Encoding: chunked\n"
                         "Content-Length: 5", _chunked(b"hello")), False),
    "/two-lengths": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Length: 2\nContent-Length: 3",
                           b"hi!"), False),
    "/silent": (b"", False),  # reads the request, never answers
    "/cl-then-close": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Length: {len(PAGE)}", PAGE),
                       True),
    "/keepalive-close": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nConnection: close\n"
                               f"Content-Length: {len(PAGE)}", PAGE), True),
}
# Content-Encoding edge cases (crawler/net/contentcoding.py against aiohttp's decoders).
# NOISY compresses to ~1/3 of its size, so half of its encoded body is half a page.
NOISY = b"<html><body>" + b"".join(
    f"<a href='/p/{n}'>{n}</a>".encode() for n in random.Random(7).choices(range(10**9), k=800)
) + b"</body></html>"
_GZ = gzip.compress(PAGE)
_NZ = gzip.compress(NOISY)


def _members(n: int) -> bytes:
    return b"".join(gzip.compress(PAGE[i:i + 2]) for i in range(0, 2 * n, 2))


CANNED.update({
    "/gzip-garbage-after": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: gzip\n"
                                  f"Content-Length: {len(_GZ) + 6}", _GZ + b"junk!!"), False),
    "/gzip-zero-padded": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: gzip\n"
                                f"Content-Length: {len(_GZ) + 8}", _GZ + bytes(8)), False),
    "/gzip-cut": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: gzip",
                        _NZ[:len(_NZ) // 2]), True),
    "/gzip-no-trailer": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: gzip",
                               _NZ[:-8]), True),
    "/gzip-1024-members": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: gzip\n"
                                 f"Content-Length: {len(_members(1024))}", _members(1024)),
                           False),
    "/gzip-1025-members": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: gzip\n"
                                 f"Content-Length: {len(_members(1025))}", _members(1025)),
                           False),
    "/deflate-cut": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: deflate",
                           zlib.compress(NOISY)[:3000]), True),
    "/rawdeflate-cut": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: deflate",
                              zlib.compress(NOISY, wbits=-15)[:3000]), True),
    "/deflate-members": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: deflate\n"
                               "Transfer-Encoding: chunked",
                               _chunked(zlib.compress(PAGE[:5000]) + zlib.compress(PAGE[5000:]),
                                        7)), False),
    "/identity": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: identity\n"
                        f"Content-Length: {len(PAGE)}", PAGE), False),
    "/two-codings": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: gzip, identity\n"
                           f"Content-Length: {len(_GZ)}", _GZ), False),
    "/empty-gzip": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: gzip\n"
                          "Transfer-Encoding: chunked", b"0\r\n\r\n"), False),
})
BROTLI = "br" in ACCEPT_ENCODING
if BROTLI:
    import brotli

    _BR = brotli.compress(PAGE)
    _NBR = brotli.compress(NOISY)
    CANNED["/br"] = (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: br\nContent-Length: "
                           f"{len(_BR)}", _BR), False)
    CANNED["/br-cut"] = (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: br",
                               _NBR[:len(_NBR) // 2]), True)
    CANNED["/br-bomb"] = (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: br",
                                brotli.compress(b"<html>" + b" " * 5_000_000)), True)
    CANNED["/br-bad"] = (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: br\n"
                               "Content-Length: 9", b"not brotl"), False)
ZSTD = "zstd" in ACCEPT_ENCODING
if ZSTD:
    try:
        from compression import zstd  # type: ignore[import-not-found]
    except ImportError:
        from backports import zstd  # type: ignore[import-not-found,no-redef]

    _ZS = zstd.compress(PAGE)
    _NZS = zstd.compress(NOISY)
    _ZS2 = zstd.compress(PAGE[:5000]) + zstd.compress(PAGE[5000:])
    CANNED.update({
        "/zstd": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: zstd\n"
                        f"Content-Length: {len(_ZS)}", _ZS), False),
        "/zstd-frames": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: zstd\n"
                               "Transfer-Encoding: chunked", _chunked(_ZS2, 11)), False),
        "/zstd-cut": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: zstd",
                            _NZS[:len(_NZS) // 2]), True),
        "/zstd-bomb": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: zstd",
                             zstd.compress(b"<html>" + b" " * 5_000_000)), True),
        "/zstd-bad": (_resp(f"HTTP/1.1 200 OK\n{HTML}\nContent-Encoding: zstd\n"
                            "Content-Length: 9", b"not zstd!"), False),
    })


class RawServer:
    """Replays CANNED by request path; logs each request's headers and connection."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, str, dict[str, str]]] = []
        self.connections = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                headers = {}
                for line in lines[1:]:
                    if line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                self.requests.append((conn, path, headers))
                data, close = CANNED[path.split("?")[0]]
                writer.write(data)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest_asyncio.fixture
async def raw() -> AsyncIterator[RawServer]:
    srv = RawServer()
    server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    srv.port = server.sockets[0].getsockname()[1]
    async with server:
        yield srv


async def _fetch(port: int, path: str, client: str, *, record: bool = False
                 ) -> tuple[object, ...]:
    async with Fetcher(replace(SETTINGS, client=client), record=record) as f:
        r = await f.fetch(f"http://127.0.0.1:{port}{path}")
    ex = r.exchange
    return (r.status, r.error, r.body, r.nbytes, r.digest, r.content_type, r.charset,
            r.location, r.retry_after, r.retryable, r.interrupted, r.attempts,
            None if r.headers is None else sorted(r.headers.items()),
            None if ex is None else (
                ex.url, ex.method, ex.target, sorted(ex.request_headers), ex.version,
                ex.status, ex.reason, ex.response_headers, ex.ip, ex.truncated,
                ex.payload.size, ex.payload_digest()))


@pytest.mark.parametrize("path", sorted(CANNED))
async def test_the_lean_client_fetches_every_response_as_aiohttp_does(
        raw: RawServer, path: str) -> None:
    fast = await _fetch(raw.port, path, "fast")
    slow = await _fetch(raw.port, path, "aiohttp")
    assert fast == slow


@pytest.mark.parametrize("path", ["/cl", "/chunked", "/gzip", "/close", "/301", "/404",
                                  "/big", "/pdf", "/truncated", "/early-hints", "/lf"])
async def test_the_lean_client_records_exchanges_as_aiohttp_does(
        raw: RawServer, path: str) -> None:
    fast = await _fetch(raw.port, path, "fast", record=True)
    slow = await _fetch(raw.port, path, "aiohttp", record=True)
    assert fast == slow


async def test_the_lean_client_sends_the_headers_aiohttp_sends(raw: RawServer) -> None:
    await _fetch(raw.port, "/cl?x=1", "fast")
    await _fetch(raw.port, "/cl?x=1", "aiohttp")
    (_, fast_path, fast), (_, slow_path, slow) = raw.requests
    assert fast_path == slow_path == "/cl?x=1"
    assert fast == slow and fast["x-test"] == "yes"


async def test_the_lean_client_keeps_connections_alive_and_drops_closed_ones(
        raw: RawServer) -> None:
    async with Fetcher(SETTINGS) as f:
        for path in ("/cl", "/chunked", "/gzip", "/404", "/keepalive-close", "/cl", "/cl"):
            r = await f.fetch(f"http://127.0.0.1:{raw.port}{path}")
            assert r.status is not None, path
        assert f._pool is not None  # the lean client took them
    # one connection up to the server's "Connection: close", a second after it
    assert [conn for conn, _, _ in raw.requests] == [1, 1, 1, 1, 1, 2, 2]


def test_client_setting_is_checked() -> None:
    from crawler.config.settings import ConfigError, settings_from_dict

    with pytest.raises(ConfigError, match='client must be "fast" or "aiohttp"'):
        settings_from_dict({"fetch": {"client": "curl"}})


async def test_a_connection_the_server_closed_while_idle_is_not_reused(raw: RawServer) -> None:
    async with Fetcher(SETTINGS) as f:
        first = await f.fetch(f"http://127.0.0.1:{raw.port}/cl-then-close")
        assert f._pool is not None
        pool = f._pool
        # the server's FIN arrives while the connection is idle in the pool
        await until(lambda: not any(conn.usable for idle in pool._idle.values()
                                    for conn, _ in idle), what="the FIN of connection 1")
        second = await f.fetch(f"http://127.0.0.1:{raw.port}/cl")
        assert f._pool is not None
    assert (first.error, second.error) == (None, None)
    assert [conn for conn, _, _ in raw.requests] == [1, 2]


async def test_a_cancelled_fetch_gives_its_connection_slot_back(raw: RawServer) -> None:
    async with Fetcher(replace(SETTINGS, max_connections=1, read_timeout=30.0,
                               total_timeout=30.0)) as f:
        task = asyncio.create_task(f.fetch(f"http://127.0.0.1:{raw.port}/silent"))
        await until(lambda: raw.requests, what="the request to arrive")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        r = await asyncio.wait_for(f.fetch(f"http://127.0.0.1:{raw.port}/cl"), 5.0)
        assert f._pool is not None and f._pool._in_use == 0
    assert r.error is None
    assert [conn for conn, _, _ in raw.requests] == [1, 2]  # the cancelled one was closed
