"""A real aiohttp.web server that misbehaves on purpose, for crawler tests.

Why: the crawler's failure handling (timeouts, resets, retries, size caps,
redirect loops, bad encodings) is only worth something if it is exercised
against a real HTTP stack, so there are no HTTP mocks in this project.

Quick use (a server with only the fault routes):

    from tests.support.faultserver import fault_server

    async def test_x():
        async with fault_server() as srv:
            result = await fetcher.fetch(srv.url("/flaky?key=a&fail=2"))
            assert srv.log.count("/flaky") == 3

Mounting the faults next to your own routes (e.g. a generated test site):

    from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
    from tests.support.faultserver import add_fault_routes, serve

    app = web.Application()
    app.router.add_get("/site/{n}", my_handler)
    log = add_fault_routes(app, prefix="/fault")   # /fault/hang, /fault/reset, ...
    async with serve(app) as base:                   # "http://127.0.0.1:<port>"
        ...
    log.count("/site/1"); log.max_active            # every request is logged

Several hostnames on one test server: `HostMap({"a.test": "127.0.0.1", ...})` is a
DNS resolver to pass as `Fetcher(settings, resolver=HostMap(...))` (with
allow_private=True, or to show the guard refusing a name that resolves to
loopback); unknown names fail like NXDOMAIN, so nothing leaves the machine.

`add_request_log(app)` alone installs just the logging middleware (request
path, query, start/finish times, in-flight concurrency) on any app. Call these
before the app starts (aiohttp freezes middlewares and routes at startup).
`serve` runs the app on 127.0.0.1 with a free port, cancels handlers whose
client went away (so /hang and /slowbody never outlive a test), and stops the
server on exit.

Fault routes (all GET, relative to `prefix`; `key=` separates independent
counters so one server can serve many test cases):

    /hang                 accepts the request and never answers
    /reset[?after=N]      resets the TCP connection (RST) before any response, or
                          after sending headers and N body bytes of a longer body
    /flaky?key=&fail=N    500 the first N times per key (default `flaky_failures`),
                          then 200 HTML
    /429?key=&times=N&after=S|date=S
                          429 with Retry-After: S seconds (default 1), or an HTTP-date
                          S seconds ahead, the first N times per key (default 1),
                          then 200 HTML
    /503?...              the same with 503
    /loop/a, /loop/b      302 to each other forever
    /redirect?to=U&status=302
                          a redirect to U (relative to the prefix when it starts with /)
    /status/{code}        that status with a tiny text body
    /html?links=N         a 200 HTML page with N links (/html/page/0 ... N-1)
    /big?mb=50[&length=1] streams mb MB of HTML in 64 KiB chunks (chunked encoding,
                          or with a Content-Length header when length=1)
    /gzipbomb?mb=100      text/html, Content-Encoding: gzip: ~0.1 MB on the wire that
                          inflates to mb MB
    /pdf?mb=1             application/pdf of mb MB with a Content-Length, streamed
    /badcharset           text/html; charset=x-unknown-garbage, invalid UTF-8, 3 links
    /slowbody?every=S&n=N HTML headers now, then one byte every S seconds (default 1),
                          N bytes in all (default 30)

Streaming routes record in their log entry how many body bytes were written
and whether the body was completed, so a test can see that a client stopped
downloading early.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from email.utils import formatdate

from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

__all__ = [
    "FaultServer",
    "HostMap",
    "RequestLog",
    "RequestRecord",
    "add_fault_routes",
    "add_request_log",
    "fault_server",
    "make_fault_app",
    "serve",
]

MB = 1024 * 1024
_CHUNK = 64 * 1024
_HANG_SECONDS = 3600.0


@dataclass(slots=True)
class RequestRecord:
    path: str
    query: str
    method: str
    started: float  # time.monotonic() when the handler started
    concurrency: int  # requests in flight, this one included
    user_agent: str | None
    status: int | None = None
    finished: float | None = None
    bytes_sent: int = 0  # body bytes written by streaming routes
    completed: bool = False  # streaming routes: whole body written


@dataclass(slots=True)
class RequestLog:
    records: list[RequestRecord] = field(default_factory=list)
    active: int = 0
    max_active: int = 0

    def count(self, path: str | None = None) -> int:
        """Requests to exactly `path` (all requests when None)."""
        if path is None:
            return len(self.records)
        return sum(1 for r in self.records if r.path == path)

    def for_path(self, path: str) -> list[RequestRecord]:
        return [r for r in self.records if r.path == path]

    def clear(self) -> None:
        self.records.clear()
        self.max_active = self.active


REQUEST_LOG = web.AppKey("faultserver_request_log", RequestLog)
_COUNTERS = web.AppKey("faultserver_counters", Counter)
_RECORD = web.RequestKey("faultserver_record", RequestRecord)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_request_log(app: web.Application) -> RequestLog:
    """Log every request of `app` (idempotent); returns the log."""
    if REQUEST_LOG in app:
        return app[REQUEST_LOG]
    log = RequestLog()
    app[REQUEST_LOG] = log

    @web.middleware
    async def _log_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
        log.active += 1
        log.max_active = max(log.max_active, log.active)
        record = RequestRecord(
            path=request.path,
            query=request.query_string,
            method=request.method,
            started=time.monotonic(),
            concurrency=log.active,
            user_agent=request.headers.get("User-Agent"),
        )
        log.records.append(record)
        request[_RECORD] = record
        try:
            response = await handler(request)
            record.status = response.status
            return response
        except web.HTTPException as exc:
            record.status = exc.status
            raise
        finally:
            record.finished = time.monotonic()
            log.active -= 1

    app.middlewares.append(_log_requests)
    return log


def _html(links: list[str], title: str = "ok") -> str:
    items = "".join(f'<li><a href="{h}">{h}</a></li>' for h in links)
    return (
        f"<!DOCTYPE html><html><head><title>{title}</title></head>"
        f"<body><ul>{items}</ul></body></html>"
    )


def _ok_page(request: web.Request) -> web.Response:
    return web.Response(text=_html([], request.path), content_type="text/html")


def _bump(request: web.Request, route: str) -> int:
    """How many times this route+key was hit before this request."""
    counters = request.app[_COUNTERS]
    key = (route, request.query.get("key", ""))
    seen = counters[key]
    counters[key] = seen + 1
    return seen


def _rst(request: web.Request) -> None:
    """Abort the connection with a TCP RST (SO_LINGER 0), not a polite FIN."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _stream(
    request: web.Request, response: web.StreamResponse, total: int, chunk: bytes
) -> web.StreamResponse:
    record: RequestRecord = request[_RECORD]
    await response.prepare(request)
    try:
        while record.bytes_sent < total:
            piece = chunk[: total - record.bytes_sent]
            await response.write(piece)
            record.bytes_sent += len(piece)
        await response.write_eof()
        record.completed = True
    except (ConnectionError, RuntimeError):
        pass  # the client went away: exactly what the tests provoke
    return response


def add_fault_routes(
    app: web.Application,
    *,
    prefix: str = "",
    flaky_failures: int = 2,
    hang_seconds: float = _HANG_SECONDS,
) -> RequestLog:
    """Mount the fault routes under `prefix` and the request log; returns the log."""
    log = add_request_log(app)
    if _COUNTERS not in app:
        app[_COUNTERS] = Counter()
    prefix = prefix.rstrip("/")
    route = app.router.add_get
    bombs: dict[int, bytes] = {}

    async def hang(request: web.Request) -> web.Response:
        await asyncio.sleep(hang_seconds)
        return _ok_page(request)

    async def reset(request: web.Request) -> web.StreamResponse:
        after = int(request.query.get("after", "-1"))
        if after < 0:
            _rst(request)
            await asyncio.sleep(hang_seconds)  # cancelled by the closed connection
            return _ok_page(request)
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        response.content_length = after + 100_000
        await response.prepare(request)
        await response.write(b"<html><body>" + b"x" * max(0, after - 12))
        await asyncio.sleep(0.2)  # let the client read the bytes: an RST discards unread data
        _rst(request)
        await asyncio.sleep(hang_seconds)
        return response

    async def flaky(request: web.Request) -> web.Response:
        fail = int(request.query.get("fail", str(flaky_failures)))
        if _bump(request, "flaky") < fail:
            return web.Response(status=500, text="flaky failure")
        return _ok_page(request)

    def limited(status: int) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            times = int(request.query.get("times", "1"))
            if _bump(request, str(status)) >= times:
                return _ok_page(request)
            if "date" in request.query:
                value = formatdate(time.time() + float(request.query["date"]), usegmt=True)
            else:
                value = request.query.get("after", "1")
            return web.Response(status=status, text="slow down", headers={"Retry-After": value})

        return handler

    async def loop_a(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"{prefix}/loop/b")

    async def loop_b(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"{prefix}/loop/a")

    async def redirect(request: web.Request) -> web.Response:
        to = request.query.get("to", "/")
        if to.startswith("/"):
            to = prefix + to
        status = int(request.query.get("status", "302"))
        return web.Response(status=status, headers={"Location": to})

    async def status(request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), text="status page")

    async def html(request: web.Request) -> web.Response:
        n = int(request.query.get("links", "10"))
        links = [f"{prefix}/html/page/{i}" for i in range(n)]
        return web.Response(text=_html(links), content_type="text/html")

    async def big(request: web.Request) -> web.StreamResponse:
        total = int(float(request.query.get("mb", "50")) * MB)
        response = web.StreamResponse(headers={"Content-Type": "text/html; charset=utf-8"})
        if request.query.get("length") == "1":
            response.content_length = total
        else:
            response.enable_chunked_encoding()
        chunk = (b"<p>" + b"big page " * (_CHUNK // 9) + b"</p>\n")[:_CHUNK]
        return await _stream(request, response, total, chunk)

    async def gzipbomb(request: web.Request) -> web.Response:
        size = int(float(request.query.get("mb", "100")) * MB)
        if size not in bombs:
            zipper = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: gzip container
            page = b"<html><body>" + b" " * (size - 12)
            bombs[size] = zipper.compress(page) + zipper.flush()
        return web.Response(
            body=bombs[size],
            headers={"Content-Type": "text/html", "Content-Encoding": "gzip"},
        )

    async def pdf(request: web.Request) -> web.StreamResponse:
        total = int(float(request.query.get("mb", "1")) * MB)
        response = web.StreamResponse(headers={"Content-Type": "application/pdf"})
        response.content_length = total
        chunk = (b"%PDF-1.4\n" + b"0" * _CHUNK)[:_CHUNK]
        return await _stream(request, response, total, chunk)

    async def badcharset(request: web.Request) -> web.Response:
        body = (
            b"<html><head><title>\xff\xfe bad \xc3</title></head><body>"
            b'<a href="/one">\xe9t\xe9 \xff</a>'
            b'<p>\x80\x81\xfe<a href="/tw\xffo">two</a></p>'
            b'<a href="three?q=\xc3\x28">three</a></body></html>'
        )
        return web.Response(
            body=body, headers={"Content-Type": "text/html; charset=x-unknown-garbage"}
        )

    async def slowbody(request: web.Request) -> web.StreamResponse:
        every = float(request.query.get("every", "1"))
        n = int(request.query.get("n", "30"))
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        response.content_length = n
        return await _drip(request, response, n, every)

    route(f"{prefix}/hang", hang)
    route(f"{prefix}/reset", reset)
    route(f"{prefix}/flaky", flaky)
    route(f"{prefix}/429", limited(429))
    route(f"{prefix}/503", limited(503))
    route(f"{prefix}/loop/a", loop_a)
    route(f"{prefix}/loop/b", loop_b)
    route(f"{prefix}/redirect", redirect)
    route(f"{prefix}/status/{{code:\\d{{3}}}}", status)
    route(f"{prefix}/html", html)
    route(f"{prefix}/big", big)
    route(f"{prefix}/gzipbomb", gzipbomb)
    route(f"{prefix}/pdf", pdf)
    route(f"{prefix}/badcharset", badcharset)
    route(f"{prefix}/slowbody", slowbody)
    return log


async def _drip(
    request: web.Request, response: web.StreamResponse, n: int, every: float
) -> web.StreamResponse:
    record: RequestRecord = request[_RECORD]
    await response.prepare(request)
    try:
        for _ in range(n):
            await asyncio.sleep(every)
            await response.write(b" ")
            record.bytes_sent += 1
        await response.write_eof()
        record.completed = True
    except (ConnectionError, RuntimeError):
        pass
    return response


def make_fault_app(**kwargs: object) -> web.Application:
    """A new app with only the fault routes (kwargs as for `add_fault_routes`)."""
    app = web.Application()
    add_fault_routes(app, **kwargs)  # type: ignore[arg-type]
    return app


@asynccontextmanager
async def serve(app: web.Application, *, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Run `app` on a free port of `host`; yields the base URL without a trailing slash."""
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, 0)
        await site.start()
        port = runner.addresses[0][1]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@dataclass(slots=True)
class FaultServer:
    base: str  # "http://127.0.0.1:<port>" + prefix
    log: RequestLog
    app: web.Application

    def url(self, path: str = "/") -> str:
        return self.base + path


@asynccontextmanager
async def fault_server(*, prefix: str = "", **kwargs: object) -> AsyncIterator[FaultServer]:
    """Start a fault-only server; yields a FaultServer (base URL, request log, app)."""
    app = web.Application()
    log = add_fault_routes(app, prefix=prefix, **kwargs)  # type: ignore[arg-type]
    async with serve(app) as base:
        yield FaultServer(base + prefix.rstrip("/"), log, app)


class HostMap(AbstractResolver):
    """A DNS resolver with a fixed table (hostname -> IP literal), for tests only;
    ``delay`` seconds before each answer (a slow or hanging DNS server)."""

    def __init__(self, table: dict[str, str], *, delay: float = 0.0) -> None:
        self.table = {k.lower().rstrip("."): v for k, v in table.items()}
        self.lookups: list[str] = []
        self.delay = delay

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups.append(host)
        if self.delay:
            await asyncio.sleep(self.delay)
        ip = self.table.get(host.lower().rstrip("."))
        if ip is None:
            raise OSError(socket.EAI_NONAME, f"HostMap: unknown host {host}")
        fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
        return [ResolveResult(hostname=host, host=ip, port=port, family=fam, proto=0, flags=0)]

    async def close(self) -> None:
        return None
