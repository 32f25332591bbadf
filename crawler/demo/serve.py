"""Serving the generated site: every host on its own port of 127.0.0.1, or on one
port of several 127.0.0.x addresses, for as long as a block runs."""

from __future__ import annotations

import contextlib
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from aiohttp import web

from crawler.demo.site import HostLog, Site, SiteSpec

__all__ = ["RunningSite", "bind_hosts", "serve_site"]


@dataclass(slots=True)
class RunningSite:
    site: Site
    logs: list[HostLog]

    @property
    def origins(self) -> list[str]:
        return self.site.origins

    @property
    def seeds(self) -> list[str]:
        return self.site.homes

    def total_pages(self) -> Counter[str]:
        """Requests per URL (``origin + path``) over all hosts, robots.txt excluded."""
        out: Counter[str] = Counter()
        for origin, log in zip(self.site.origins, self.logs, strict=True):
            for path, n in log.pages().items():
                out[origin + path] += n
        return out


def bind_hosts(ips: list[str] | None, n: int) -> list[socket.socket]:
    """n listening sockets: one shared port on each of ``ips`` (one address per host),
    or n ports on 127.0.0.1 without ``ips``. OSError if no port is free on every address."""
    if not ips:
        socks = []
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return socks
    if len(ips) != n:
        raise ValueError(f"{n} hosts need {n} addresses, got {len(ips)}")
    for _ in range(50):  # find one port free on every address
        socks = []
        try:
            for ip in ips:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind((ip, socks[0].getsockname()[1] if len(socks) > 1 else 0))
            return socks
        except OSError:
            for s in socks:
                s.close()
    raise OSError("no port free on every address")


@contextlib.asynccontextmanager
async def serve_site(spec: SiteSpec, *, ips: list[str] | None = None,
                     setup: Callable[[int, web.Application], None] | None = None
                     ) -> AsyncIterator[RunningSite]:
    """Serve every host of ``spec`` until the block exits.

    ``ips``: one address per host on a shared port (default: distinct ports on
    127.0.0.1). ``setup(h, app)`` may add routes to host h's app before it starts.
    """
    socks = bind_hosts(ips, spec.hosts)
    origins = [f"http://{s.getsockname()[0]}:{s.getsockname()[1]}" for s in socks]
    site = Site(spec, origins)
    logs = [HostLog() for _ in range(spec.hosts)]
    runners: list[web.AppRunner] = []
    try:
        for h, sock in enumerate(socks):
            app = site.make_app(h, logs[h])
            if setup is not None:
                setup(h, app)
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True,
                                   shutdown_timeout=0.5)
            await runner.setup()
            runners.append(runner)
            await web.SockSite(runner, sock).start()
        yield RunningSite(site, logs)
    finally:
        for runner in runners:
            await runner.cleanup()
        for s in socks:
            s.close()
