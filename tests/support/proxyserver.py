"""A real HTTP forward proxy on 127.0.0.1 that records what passes through it.

Why: "the crawl goes through the proxy" is only shown by a proxy that the
requests reach, over a real socket, in the absolute form a client sends to a
proxy (``GET http://host:port/path HTTP/1.1``). This one handles such GETs (all
an http target needs; no CONNECT), forwards them to the target and relays the
answer, and logs each one. ``routes`` maps a target authority to the address it
is forwarded to (``{"site.test:80": "127.0.0.1:41234"}``), so a test can name
hosts that do not resolve, and nothing leaves the machine: a target that is not
mapped and not on 127.0.0.1 gets a 502 without a connection being opened.

    async with forward_proxy() as proxy:
        ... fetch with proxy.url ...
        assert proxy.log[0].url == "http://127.0.0.1:8080/"
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

__all__ = ["ProxyRecord", "RunningProxy", "forward_proxy"]

# not forwarded either way (RFC 9110 7.6.1), and what aiohttp sets itself
_HOP = {"connection", "keep-alive", "proxy-authorization", "proxy-connection", "te",
        "trailer", "transfer-encoding", "upgrade", "content-length"}


@dataclass(frozen=True)
class ProxyRecord:
    method: str
    url: str  # the absolute-form target
    headers: dict[str, str]  # as received, Proxy-Authorization included


@dataclass
class RunningProxy:
    url: str  # "http://127.0.0.1:PORT"
    log: list[ProxyRecord] = field(default_factory=list)

    def urls(self) -> list[str]:
        return [r.url for r in self.log]


@asynccontextmanager
async def forward_proxy(routes: dict[str, str] | None = None) -> AsyncIterator[RunningProxy]:
    routes = dict(routes or {})
    running = RunningProxy("")
    client = aiohttp.ClientSession(auto_decompress=False,
                                   cookie_jar=aiohttp.DummyCookieJar())

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        target = request._message.path  # the request-target as sent
        running.log.append(ProxyRecord(request.method, target, dict(request.headers)))
        if request.method != "GET" or not target.startswith("http://"):
            return web.Response(status=405, text="absolute-form GETs only")
        url = URL(target, encoded=True)
        authority = f"{url.raw_host}:{url.port}"
        to = routes.get(authority)
        if to is None and url.raw_host != "127.0.0.1":
            return web.Response(status=502, text=f"no route to {authority}")
        forward = url.with_host(to.rsplit(":", 1)[0]).with_port(
            int(to.rsplit(":", 1)[1])) if to else url
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in _HOP)
        headers["Host"] = authority if url.port != 80 else url.raw_host or ""
        async with client.get(forward, headers=headers, allow_redirects=False) as resp:
            body = await resp.read()
            out = CIMultiDict((k, v) for k, v in resp.headers.items()
                              if k.lower() not in _HOP)
            return web.Response(status=resp.status, headers=out, body=body)

    runner = web.ServerRunner(web.Server(handle))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        running.url = f"http://127.0.0.1:{port}"
        yield running
    finally:
        await runner.cleanup()
        await client.close()
