"""A lean HTTP/1.1 client for the crawl's common case: a plain ``http://`` GET, direct.

Why: a crawl of small pages spent a quarter of its CPU inside aiohttp's request
and response machinery (request objects, tracing hooks, a timer rescheduled on
every read, a stream reader per body). This client does only what a crawl's
GET needs, on an ``asyncio.Protocol`` whose buffer the reader pulls from, with a
keep-alive pool per host. ``crawler.net.fetch`` sends everything else (https,
proxies, cookies) through aiohttp; WARC recording works through both. It is off
with ``[fetch] client = "aiohttp"``.

It keeps aiohttp's behaviour where the crawl can see it: the same request
headers (its Accept-Encoding included), its header limits (8190-byte lines, 128
fields), its decoding (``crawler.net.contentcoding``, fed at most a chunk at a
time so a compression bomb is cut by the size cap like any body), and its
failures are the types ``classify_error`` files as aiohttp's (aiohttp's public
``ServerDisconnectedError`` and ``ClientPayloadError``; ``BadResponse``,
``ConnectError`` and ``ResolveError`` of ``crawler.net.outcome`` where aiohttp's
own can only be built from its internals). It uses no aiohttp name that aiohttp
does not export.
Timeouts: a total deadline for the whole exchange, a connect timeout per
connection, and a read timeout between two reads of the headers or the body.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from aiohttp import ClientPayloadError, ServerDisconnectedError, hdrs
from aiohttp.abc import AbstractResolver
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from crawler.config.ipliteral import ip_literal
from crawler.net.contentcoding import ACCEPT_ENCODING, DecodeError, Decoder, decoder_for
from crawler.net.outcome import BadResponse, ConnectError, ResolveError

__all__ = ["Pool", "Response", "Sent"]

_MAX_LINE = 8190  # aiohttp's max_line_size and max_field_size
_MAX_HEADERS = 128  # aiohttp's max_headers for a response
_MAX_HEAD = _MAX_LINE * (_MAX_HEADERS + 2)
_HIGH_WATER = 256 * 1024  # buffered body bytes before the socket stops being read
_KEEPALIVE = 15.0  # seconds an idle connection is kept (aiohttp's keepalive_timeout)
_NO_BODY = (204, 304)
_DIGITS = "0123456789"
_FRAMING = frozenset({"connection", "transfer-encoding", "content-length",
                      "content-encoding"})

_LENGTH, _CHUNKED, _CLOSE, _NONE = range(4)


class _Conn(asyncio.Protocol):
    """One TCP connection: bytes received so far, and whoever waits for more."""

    __slots__ = ("buf", "eof", "exc", "key", "paused", "peer", "transport", "waiter")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.eof = False  # the peer closed (or the connection was lost)
        self.exc: BaseException | None = None
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None
        self.key: tuple[str, int] = ("", 0)
        self.peer: str | None = None  # the address connected to (WARC-IP-Address)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.eof = True
        self.exc = exc
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def wait(self, deadline: float, read_timeout: float) -> None:
        """Until more bytes or the end arrive; TimeoutError past ``deadline`` or
        after ``read_timeout`` seconds of silence."""
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        loop = asyncio.get_running_loop()
        fut = self.waiter = loop.create_future()
        timer = loop.call_at(min(deadline, loop.time() + read_timeout), _expire, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self.waiter = None

    @property
    def usable(self) -> bool:
        return not self.eof and not self.buf and self.transport is not None \
            and not self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.eof = True


def _expire(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


class Sent(NamedTuple):
    """A request as sent (the fields of aiohttp's ``RequestInfo`` the WARC reads)."""

    url: URL
    method: str
    headers: CIMultiDictProxy[str]


class Response:
    """A response whose headers have arrived; the body is pulled with ``read``.

    Duck-types the part of ``aiohttp.ClientResponse`` the fetch uses: ``status``,
    ``headers``, ``read()``, ``content.read(n)`` and ``close()``, and for the WARC
    (``crawler.net.exchange.exchange_of``) ``url``, ``version``, ``reason``,
    ``raw_headers`` and ``request_info``."""

    __slots__ = ("_chunk_left", "_conn", "_decoder", "_done", "_encoding", "_framing",
                 "_head_bytes", "_mode", "_pool", "_read_timeout", "_remaining", "_reuse",
                 "_spill", "content", "deadline", "headers", "peer", "reason", "status", "url",
                 "version")

    def __init__(self, pool: Pool, conn: _Conn, url: URL, deadline: float,
                 read_timeout: float) -> None:
        self._pool = pool
        self.url = url
        self._conn: _Conn | None = conn
        self.deadline = deadline
        self._read_timeout = read_timeout
        self.status = 0
        self.reason = ""
        self.version = (1, 1)
        self.headers: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
        self._mode = _NONE
        self._remaining = 0
        self._chunk_left = -1  # chunked: bytes left of this chunk (-1: a size line is next)
        self._done = False
        self._reuse = False
        self._decoder: Decoder | None = None
        self._encoding = ""
        self._spill = b""  # decoded bytes past what the last ``read(n)`` could return
        self._framing: dict[str, list[str]] = {}
        self._head_bytes = b""
        self.peer = conn.peer
        self.content = self

    # --- headers --------------------------------------------------------------------------

    async def _start(self) -> None:
        conn = self._conn
        assert conn is not None
        while True:  # 1xx answers (Early Hints, a stray Continue) come before the real one
            head = await self._head(conn)
            self._parse(head)
            if not (100 <= self.status < 200) or self.status == 101:
                break
        if self.status == 101:
            raise BadResponse("unexpected 101 Switching Protocols")
        self._frame()
        if self._mode == _CHUNKED and b"\n" in conn.buf:
            # a bad first chunk-size line that came with the headers fails the response
            # itself, as aiohttp's parser (which parses what it has) reports it
            self._check_size_line(conn.buf[:conn.buf.index(b"\n")])

    async def _head(self, conn: _Conn) -> bytes:
        start = 0
        while True:
            buf = conn.buf
            end = buf.find(b"\r\n\r\n", start)
            lf = buf.find(b"\n\n", start, None if end < 0 else end)  # bare LF ends too
            if lf >= 0:
                head = bytes(buf[:lf])
                del buf[:lf + 2]
                return head
            if end >= 0:
                head = bytes(buf[:end])
                del buf[:end + 4]
                return head
            if len(buf) > _MAX_HEAD:
                raise BadResponse(f"response head over {_MAX_HEAD} bytes")
            if conn.eof:
                if conn.exc is not None and isinstance(conn.exc, OSError):
                    raise conn.exc
                raise ServerDisconnectedError()
            start = max(0, len(buf) - 3)
            await conn.wait(self.deadline, self._read_timeout)

    @property
    def raw_headers(self) -> tuple[tuple[bytes, bytes], ...]:
        """The response's header fields in order, as received, as aiohttp gives them."""
        out = []
        for line in self._head_bytes.split(b"\n")[1:]:
            name, _, value = line.partition(b":")
            out.append((name, value.strip(b" \t\r")))
        return tuple(out)

    @property
    def request_info(self) -> Sent:
        """The request as sent, as aiohttp's ``request_info`` gives it."""
        headers = CIMultiDictProxy(CIMultiDict(self._pool.sent_headers(self.url)))
        return Sent(self.url, "GET", headers)

    def _parse(self, head: bytes) -> None:
        self._head_bytes = head
        text = head.decode("utf-8", "surrogateescape")
        lines = text.split("\n")
        if len(head) > _MAX_LINE and any(len(line) > _MAX_LINE + 1 for line in lines):
            raise BadResponse(f"a header line over {_MAX_LINE} bytes")
        line = lines[0].rstrip("\r")
        version, _, rest = line.partition(" ")
        code, _, reason = rest.partition(" ")
        if (len(version) != 8 or version[:5] != "HTTP/" or version[6] != "."
                or version[5] not in _DIGITS or version[7] not in _DIGITS
                or len(code) != 3 or not code.isdigit() or not code.isascii()):
            raise BadResponse(f"bad status line {line[:100]!r}")
        self.version = (ord(version[5]) - 48, ord(version[7]) - 48)
        self.status = int(code)
        self.reason = reason
        if len(lines) - 1 > _MAX_HEADERS:
            raise BadResponse("Too many headers received")
        fields = []
        framing: dict[str, list[str]] = {}
        for raw in lines[1:]:
            name, sep, value = raw.partition(":")
            if not sep or not name or name != name.strip(" \t"):
                raise BadResponse(f"bad header line {raw[:100]!r}")
            value = value.strip(" \t\r")
            fields.append((name, value))
            low = name.lower()
            if low in _FRAMING:
                framing.setdefault(low, []).append(value)
        self.headers = CIMultiDictProxy(CIMultiDict(fields))
        self._framing = framing

    def _frame(self) -> None:
        """How the body ends, whether the connection may be reused, how it is encoded."""
        f = self._framing
        keep = self.version >= (1, 1)
        if "connection" in f:
            tokens = {t.strip().lower() for t in ",".join(f["connection"]).split(",")}
            keep = "close" not in tokens and (keep or "keep-alive" in tokens)
        te = ", ".join(f["transfer-encoding"]) if "transfer-encoding" in f else None
        lengths = f.get("content-length", ())
        if self.status in _NO_BODY:
            self._mode = _NONE
        elif te is not None:
            if lengths:
                raise BadResponse("Transfer-Encoding can't be present with Content-Length")
            if te.rsplit(",", 1)[-1].strip().lower() == "chunked":
                self._mode = _CHUNKED
            else:
                self._mode, keep = _CLOSE, False
        elif lengths:
            if len(set(lengths)) != 1 or not lengths[0].isdigit() or not lengths[0].isascii():
                raise BadResponse(f"bad Content-Length {lengths[0][:40]!r}")
            self._mode, self._remaining = _LENGTH, int(lengths[0])
            if self._remaining == 0:
                self._mode = _NONE
        else:
            self._mode, keep = _CLOSE, False
        self._reuse = keep
        if self._mode == _NONE:
            self._finish()
            return
        enc = f["content-encoding"][0] if "content-encoding" in f else ""
        if enc and enc.isascii():
            self._encoding = enc.lower()
            try:
                self._decoder = decoder_for(self._encoding)
            except DecodeError as e:  # br or zstd without its library
                raise BadResponse(str(e)) from None

    # --- body -----------------------------------------------------------------------------

    async def _raw(self, most: int) -> bytes:
        """Up to ``most`` bytes of the body as framed on the wire; b"" at its end."""
        conn = self._conn
        if self._done or conn is None:
            return b""
        mode = self._mode
        if mode == _LENGTH:
            while not conn.buf:
                if conn.eof:
                    raise ClientPayloadError("Response payload is not completed")
                await conn.wait(self.deadline, self._read_timeout)
            buf = conn.buf
            take = min(len(buf), self._remaining, most)
            if take == len(buf):
                data = bytes(buf)
                buf.clear()
            else:
                data = bytes(buf[:take])
                del buf[:take]
            self._remaining -= take
            if self._remaining == 0:
                self._finish()
            return data
        if mode == _CLOSE:
            while not conn.buf:
                if conn.eof:
                    if isinstance(conn.exc, OSError):
                        raise ClientPayloadError("Response payload is not completed")
                    self._finish()
                    return b""
                await conn.wait(self.deadline, self._read_timeout)
            buf = conn.buf
            take = min(len(buf), most)
            data = bytes(buf[:take])
            del buf[:take]
            return data
        return await self._chunk(conn, most)

    async def _line(self, conn: _Conn) -> bytes:
        while True:
            end = conn.buf.find(b"\n")
            if end >= 0:
                line = bytes(conn.buf[:end])
                del conn.buf[:end + 1]
                if len(line) > _MAX_LINE:
                    raise BadResponse(f"a line over {_MAX_LINE} bytes")
                return line.rstrip(b"\r")
            if len(conn.buf) > _MAX_LINE:
                raise BadResponse(f"a line over {_MAX_LINE} bytes")
            if conn.eof:
                raise ClientPayloadError("Response payload is not completed")
            await conn.wait(self.deadline, self._read_timeout)

    async def _chunk(self, conn: _Conn, most: int) -> bytes:
        while self._chunk_left <= 0:
            if self._chunk_left == 0 and await self._line(conn):  # the CRLF after the data
                raise BadResponse("chunk data not followed by CRLF")
            n = self._check_size_line(await self._line(conn))
            if n == 0:
                for _ in range(_MAX_HEADERS + 1):  # trailers, up to an empty line
                    if not await self._line(conn):
                        self._finish()
                        return b""
                raise BadResponse("Too many trailers")
            self._chunk_left = n
        while not conn.buf:
            if conn.eof:
                raise ClientPayloadError("Response payload is not completed")
            await conn.wait(self.deadline, self._read_timeout)
        buf = conn.buf
        take = min(len(buf), self._chunk_left, most)
        data = bytes(buf[:take])
        del buf[:take]
        self._chunk_left -= take
        return data

    @staticmethod
    def _check_size_line(line: bytes | bytearray) -> int:
        size = bytes(line).rstrip(b"\r").split(b";", 1)[0].strip()
        try:
            if not size or not size.isascii() or size.startswith((b"+", b"-", b"0x")):
                raise ValueError
            return int(size, 16)
        except ValueError:
            raise BadResponse(f"bad chunk size {size[:40]!r}") from None

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` decoded body bytes (-1: all of it); b"" once the body ended."""
        if n < 0:
            parts = []
            while chunk := await self.read(1 << 20):
                parts.append(chunk)
            return b"".join(parts)
        dec = self._decoder
        if dec is None:
            return await self._raw(n)
        if self._spill:
            out, self._spill = self._spill[:n], self._spill[n:]
            return out
        try:
            while True:
                if dec.more:
                    out = dec.decompress(b"", n)
                else:
                    raw = await self._raw(n)
                    if not raw:
                        self._decoder = None
                        dec.finish()
                        return b""
                    out = dec.decompress(raw, n)
                if out:
                    if len(out) > n:  # brotli's bound is a hint
                        out, self._spill = out[:n], out[n:]
                    return out
        except DecodeError:
            raise ClientPayloadError(
                f"Can not decode content-encoding: {self._encoding}") from None

    # --- the connection -------------------------------------------------------------------

    def _finish(self) -> None:
        self._done = True
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(conn, self._reuse)

    def close(self) -> None:
        """Drop the connection: the rest of the body is not wanted."""
        self._done = True
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(conn, False)

    def release(self) -> None:
        """Back to the pool if the body was read to its end, else closed."""
        if not self._done:
            self.close()


class Pool:
    """Keep-alive connections per (host, port), at most ``limit`` in use at once
    (idle ones do not count, as in aiohttp's connector), DNS answers kept ``dns_ttl``.

    ``resolver`` turns names into addresses (the private-address guard wraps it);
    literal IPs are connected to as they are, checked by the caller."""

    def __init__(self, resolver: AbstractResolver, *, limit: int, dns_ttl: float,
                 connect_timeout: float, read_timeout: float,
                 headers: dict[str, str]) -> None:
        self._resolver = resolver
        self._limit = limit
        self._dns_ttl = dns_ttl
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._in_use = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._idle: dict[tuple[str, int], list[tuple[_Conn, float]]] = {}
        self._nidle = 0
        self._dns: dict[tuple[str, int], tuple[float, list[Any]]] = {}
        self._sweep_at = 0.0
        self._closed = False
        self._headers = list(headers.items())
        if not any(k.lower() == "accept-encoding" for k in headers):
            self._headers.append((hdrs.ACCEPT_ENCODING, ACCEPT_ENCODING))
        self._tail = ("".join(f"{k}: {v}\r\n" for k, v in self._headers)
                      + "\r\n").encode("latin-1")

    def sent_headers(self, url: URL) -> list[tuple[str, str]]:
        """The header fields ``get(url)`` sends, in order (for the WARC request record)."""
        host = url.raw_host or ""
        port = url.port or 80
        authority = host if url.is_default_port() else f"{host}:{port}"
        return [(hdrs.HOST, authority), *self._headers]

    async def get(self, url: URL, deadline: float) -> Response:
        """Send ``GET url`` and read the response's headers, by ``deadline`` (loop time)."""
        host = url.raw_host or ""
        port = url.port or 80
        key = (host, port)
        target = url.raw_path_qs or "/"
        authority = host if url.is_default_port() else f"{host}:{port}"
        request = (f"GET {target} HTTP/1.1\r\nHost: {authority}\r\n".encode("latin-1")
                   + self._tail)

        loop = asyncio.get_running_loop()
        if self._in_use >= self._limit or self._waiters:
            await self._slot(loop, deadline)
        self._in_use += 1
        try:
            conn = self._take_idle(key, loop.time())
            if conn is None:
                conn = await self._connect(key, loop, deadline)
        except BaseException:
            self._give_back()
            raise
        resp = Response(self, conn, url, deadline, self._read_timeout)
        try:
            assert conn.transport is not None
            conn.transport.write(request)
            await resp._start()
        except BaseException:
            resp.close()
            raise
        return resp

    async def _slot(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        try:
            async with asyncio.timeout_at(deadline):
                await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                self._wake()  # handed a slot we will not use: pass it on
            else:
                fut.cancel()
            raise
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(fut)

    def _wake(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
                return

    def _give_back(self) -> None:
        self._in_use -= 1
        if self._waiters:
            self._wake()

    def _take_idle(self, key: tuple[str, int], now: float) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn, since = idle.pop()
            self._nidle -= 1
            if conn.usable and now - since < _KEEPALIVE:
                return conn
            conn.close()
        return None

    def release(self, conn: _Conn, reuse: bool) -> None:
        self._give_back()
        if not reuse or self._closed or not conn.usable:
            conn.close()
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._idle.setdefault(conn.key, []).append((conn, now))
        self._nidle += 1
        if self._nidle > self._limit or now >= self._sweep_at:
            self._sweep(now)

    def _sweep(self, now: float) -> None:
        """Close idle connections past the keep-alive time, and the oldest past ``limit``."""
        self._sweep_at = now + _KEEPALIVE / 3
        entries = [(since, key, conn) for key, idle in self._idle.items()
                   for conn, since in idle]
        entries.sort(key=lambda e: e[0], reverse=True)
        self._idle = {}
        self._nidle = 0
        for since, key, conn in entries:
            if self._nidle < self._limit and conn.usable and now - since < _KEEPALIVE:
                self._idle.setdefault(key, []).insert(0, (conn, since))
                self._nidle += 1
            else:
                conn.close()

    async def _connect(self, key: tuple[str, int], loop: asyncio.AbstractEventLoop,
                       deadline: float) -> _Conn:
        try:
            async with asyncio.timeout_at(deadline):
                infos = await self._resolve(key, loop)
        except TimeoutError:
            raise  # a lookup that did not answer in time: a timeout, as with aiohttp
        except OSError as e:
            raise ResolveError(key[0], key[1], e) from e
        last: OSError | None = None
        factory: Callable[[], _Conn] = _Conn
        for info in infos:
            try:
                async with asyncio.timeout_at(min(deadline, loop.time() + self._connect_timeout)):
                    _, conn = await loop.create_connection(
                        factory, info["host"], info["port"], family=info["family"],
                        proto=info["proto"], flags=info["flags"])
            except OSError as e:
                last = e
                continue
            conn.key = key
            assert conn.transport is not None
            peer = conn.transport.get_extra_info("peername")
            conn.peer = str(peer[0]) if peer else None
            return conn
        assert last is not None
        raise ConnectError(key[0], key[1], last) from last

    async def _resolve(self, key: tuple[str, int], loop: asyncio.AbstractEventLoop) -> list[Any]:
        host, port = key
        ip = ip_literal(host)
        if ip is not None:
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            return [{"host": host, "port": port, "family": family, "proto": 0, "flags": 0}]
        hit = self._dns.get(key)
        now = loop.time()
        if hit is not None and hit[0] > now:
            return hit[1]
        infos = list(await self._resolver.resolve(host, port, family=socket.AF_UNSPEC))
        if len(self._dns) > 100_000:
            self._dns.clear()
        self._dns[key] = (now + self._dns_ttl, infos)
        return infos

    def close(self) -> None:
        """Close every idle connection (those in use close when their response ends)."""
        self._closed = True
        for idle in self._idle.values():
            for conn, _ in idle:
                conn.close()
        self._idle.clear()
        self._nidle = 0
