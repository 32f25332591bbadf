"""A deterministic, multi-host, interlinked web site to crawl (demo, tests, benchmark).

Why generated and not recorded: tests need to know the *exact* set of URLs a
correct crawl fetches, and that set is computed here from the same link
generator that renders the pages (``Site.reachable``), not by crawling.

Every page is a pure function of (spec, host, path). Each host serves:

* ``/`` and ``/p/1.html`` .. ``/p/{pages-1}.html``: navigation links repeated on
  every page (twice: header and footer), random in-site links written in
  different forms (root-relative, relative, absolute, with a ``#fragment``, with
  ``utm_*`` tracking parameters), links to other hosts, and now and then a
  ``mailto:``/``javascript:`` link, a link out of scope, a PDF, a redirect, a
  robots-disallowed page and a page with ``<base href>``;
* ``/d/{j}/``: pages whose links are relative to ``<base href="/p/">``;
* ``/old/{j}``: 301 to ``/p/{j}.html``; ``/out``: 302 to a host out of scope;
* ``/docs/{j}.pdf``: a small PDF; ``/private/...``: disallowed by robots.txt;
* with ``trap=True``, host 0 has an endless calendar (``/cal/{y}/{m}``, each
  month linking to the next) reachable only from its home page.

Hosts are distinct ports on 127.0.0.1, or distinct 127.0.0.x addresses on one
port (``serve_site(spec, ips=[...])``).
"""


from __future__ import annotations

import asyncio
import random
import re
import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from aiohttp import web

from dedup import host_of

__all__ = ["OUT_OF_SCOPE", "HostLog", "Reachable", "Site", "SiteSpec"]

OUT_OF_SCOPE = "http://127.0.0.9:9/elsewhere"
_LOREM = ["bloom", "filters", "answer", "membership", "queries", "in", "constant", "space",
          "with", "a", "tunable", "rate", "of", "false", "positives", "and", "no", "false",
          "negatives"]


@dataclass(frozen=True, slots=True)
class SiteSpec:
    hosts: int = 4
    pages: int = 500  # per host, home page included
    links: int = 8  # random in-site links per page
    nav: int = 6  # navigation links on every page (home + /p/1.. /p/nav-1)
    cross: int = 2  # links to other hosts per page
    seed: int = 0
    trap: bool = False
    delay: float = 0.0  # server-side seconds per response
    crawl_delay: float | None = None  # robots.txt Crawl-delay
    text_words: int = 60  # filler words per page


@dataclass(frozen=True, slots=True)
class Reachable:
    fetched: frozenset[str]  # dedup keys of every URL a correct crawl requests
    robots_blocked: frozenset[str]  # admitted but disallowed by robots.txt
    depth: dict[str, int] = field(compare=False)


@dataclass(slots=True)
class HostLog:
    """What one host's server saw."""

    counts: Counter[str] = field(default_factory=Counter)
    starts: list[tuple[float, str]] = field(default_factory=list)
    active: int = 0
    max_active: int = 0

    def pages(self) -> Counter[str]:
        """Requests per path, robots.txt excluded."""
        return Counter({p: n for p, n in self.counts.items() if p != "/robots.txt"})


_P = re.compile(r"/p/(\d+)\.html")
_D = re.compile(r"/d/(\d+)/")
_OLD = re.compile(r"/old/(\d+)")
_PDF = re.compile(r"/docs/(\d+)\.pdf")
_CAL = re.compile(r"/cal/(\d{4})/(\d{2})")


class Site:
    """The pages of a spec served at given origins (``http://host:port``)."""

    def __init__(self, spec: SiteSpec, origins: list[str]) -> None:
        if len(origins) != spec.hosts:
            raise ValueError(f"{spec.hosts} hosts need {spec.hosts} origins, got {len(origins)}")
        if spec.pages < 2 or spec.nav < 1:
            raise ValueError("need pages >= 2 and nav >= 1")
        self.spec = spec
        self.origins = list(origins)
        self.homes = [o + "/" for o in self.origins]
        self.nav = min(spec.nav, spec.pages)
        self._links = lru_cache(maxsize=8192)(self._links_uncached)

    # -- the link graph ------------------------------------------------------------

    def _rng(self, h: int, path: str) -> random.Random:
        return random.Random(f"{self.spec.seed}/{h}/{path}")

    def _n_docs(self) -> int:
        return max(1, self.spec.pages // 25)

    def _n_dirs(self) -> int:
        return max(1, self.spec.pages // 30)

    def kind(self, path: str) -> str | None:
        """Which kind of resource ``path`` is on any host (None: 404)."""
        n = self.spec.pages
        if path == "/":
            return "page"
        if (m := _P.fullmatch(path)) and 1 <= int(m[1]) < n and m[1] == str(int(m[1])):
            return "page"
        if (m := _D.fullmatch(path)) and int(m[1]) < self._n_dirs() and m[1] == str(int(m[1])):
            return "base"
        if (m := _OLD.fullmatch(path)) and 1 <= int(m[1]) < n and m[1] == str(int(m[1])):
            return "redirect"
        if path == "/out":
            return "redirect"
        if (m := _PDF.fullmatch(path)) and int(m[1]) < self._n_docs() and m[1] == str(int(m[1])):
            return "pdf"
        if path.startswith("/private/"):
            return "private"
        if self.spec.trap and (m := _CAL.fullmatch(path)) and 1 <= int(m[2]) <= 12:
            return "cal"
        return None

    def redirect_target(self, h: int, path: str) -> str:
        if path == "/out":
            return OUT_OF_SCOPE
        return f"{self.origins[h]}/p/{_OLD.fullmatch(path)[1]}.html"  # type: ignore[index]

    def links(self, h: int, path: str) -> list[tuple[str, str | None]]:
        """``(href as written in the page, dedup key it resolves to or None)`` per link."""
        return self._links(h, path)

    def _links_uncached(self, h: int, path: str) -> list[tuple[str, str | None]]:
        kind = self.kind(path)
        origin = self.origins[h]
        spec = self.spec
        out: list[tuple[str, str | None]] = []
        nav = [("/", origin + "/")] + [(f"/p/{i}.html", f"{origin}/p/{i}.html")
                                       for i in range(1, self.nav)]
        if kind == "base":  # hrefs relative to <base href="/p/">
            rng = self._rng(h, path)
            for i in sorted(rng.sample(range(1, spec.pages), min(5, spec.pages - 1))):
                out.append((f"{i}.html", f"{origin}/p/{i}.html"))
            out.append(("../", origin + "/"))
            return out
        if kind == "cal":
            m = _CAL.fullmatch(path)
            y, mo = int(m[1]), int(m[2])  # type: ignore[index]
            y, mo = (y + 1, 1) if mo == 12 else (y, mo + 1)
            return [*nav, (f"/cal/{y:04d}/{mo:02d}", f"{origin}/cal/{y:04d}/{mo:02d}")]
        if kind != "page":
            return []
        rng = self._rng(h, path)
        out.extend(nav)
        here = "/" if path == "/" else "/p/"
        for _ in range(spec.links):
            i = rng.randrange(1, spec.pages)
            key = f"{origin}/p/{i}.html"
            form = rng.randrange(6)
            if form == 0:
                href = f"/p/{i}.html"
            elif form == 1:
                href = f"p/{i}.html" if here == "/" else f"{i}.html"
            elif form == 2:
                href = key
            elif form == 3:
                href = f"/p/{i}.html#section-{rng.randrange(5)}"
            elif form == 4:
                href = f"/p/{i}.html?utm_source=site&utm_medium=link&gclid={rng.randrange(99)}"
            else:
                href = f"../p/{i}.html" if here == "/p/" else f"./p/{i}.html"
            out.append((href, key))
        for _ in range(spec.cross if spec.hosts > 1 else 0):
            o = rng.randrange(spec.hosts - 1)
            o = o + 1 if o >= h else o
            i = rng.randrange(0, spec.pages)
            target = f"{self.origins[o]}/" if i == 0 else f"{self.origins[o]}/p/{i}.html"
            href = target + ("#top" if rng.random() < 0.3 else "") + (
                "?utm_campaign=x" if rng.random() < 0.3 else "")
            if "#" in href and "?" in href:  # keep the fragment last
                href = target + "?utm_campaign=x#top"
            out.append((href, target))
        extras = rng.random()
        if path == "/" or extras < 0.10:
            j = rng.randrange(spec.pages)
            out.append((f"/private/{j}.html", f"{origin}/private/{j}.html"))
        if path == "/" or rng.random() < 0.05:
            j = rng.randrange(1, spec.pages)
            out.append((f"/old/{j}", f"{origin}/old/{j}"))
        if path == "/" or rng.random() < 0.04:
            j = rng.randrange(self._n_docs())
            out.append((f"/docs/{j}.pdf", f"{origin}/docs/{j}.pdf"))
        if path == "/" or rng.random() < 0.04:
            j = rng.randrange(self._n_dirs())
            out.append((f"/d/{j}/", f"{origin}/d/{j}/"))
        if path == "/" or rng.random() < 0.06:
            out.append((OUT_OF_SCOPE, OUT_OF_SCOPE))
        if path == "/":
            out.append(("/out", f"{origin}/out"))
            if spec.trap and h == 0:
                out.append(("/cal/2000/01", f"{origin}/cal/2000/01"))
        if rng.random() < 0.2:
            out.append(("mailto:someone@example.com", None))
            out.append(("javascript:void(0)", None))
        out.extend(nav)  # footer: the same navigation again
        return out

    def reachable(self, seeds: Iterable[str] | None = None, *, max_depth: int = 20,
                  obey_robots: bool = True, scope: Iterable[str] | None = None) -> Reachable:
        """What a correct crawl from ``seeds`` fetches, from the generator alone.

        ``scope``: in-scope authorities (``host:port``); default the seeds'. A
        page at depth d has its links followed when d < max_depth; a redirect
        target is a link like any other (depth d + 1, followed when d < max_depth).
        """
        seeds = list(seeds) if seeds is not None else list(self.homes)
        allowed = set(scope) if scope is not None else {host_of(s) for s in seeds}
        index = {o: h for h, o in enumerate(self.origins)}
        depth: dict[str, int] = {}
        queue: deque[str] = deque()
        for s in seeds:
            if s not in depth:
                depth[s] = 0
                queue.append(s)
        fetched: set[str] = set()
        blocked: set[str] = set()
        while queue:
            url = queue.popleft()
            d = depth[url]
            origin, path = _split(url)
            h = index.get(origin)
            if h is None:
                fetched.add(url)  # in scope but not ours: requested, fails
                continue
            if obey_robots and path.startswith("/private/"):
                blocked.add(url)
                continue
            fetched.add(url)
            kind = self.kind(path)
            if kind == "redirect" and d < max_depth:
                edges = [(self.redirect_target(h, path), d + 1)]
            elif kind in ("page", "base", "cal") and d < max_depth:
                edges = [(key, d + 1) for _, key in self.links(h, path) if key is not None]
            else:
                edges = []
            for key, nd in edges:
                if key in depth or host_of(key) not in allowed:
                    continue
                depth[key] = nd
                if nd == d:
                    queue.appendleft(key)
                else:
                    queue.append(key)
        return Reachable(frozenset(fetched), frozenset(blocked), depth)

    # -- rendering ------------------------------------------------------------------

    def robots_txt(self) -> str:
        lines = ["User-agent: *", "Disallow: /private/"]
        if self.spec.crawl_delay is not None:
            lines.append(f"Crawl-delay: {self.spec.crawl_delay:g}")
        return "\n".join(lines) + "\n"

    def render(self, h: int, path: str) -> web.Response:
        kind = self.kind(path)
        if path == "/robots.txt":
            return web.Response(text=self.robots_txt(), content_type="text/plain")
        if kind is None:
            return web.Response(status=404, text="not found", content_type="text/plain")
        if kind == "redirect":
            target = self.redirect_target(h, path)
            location = target[len(self.origins[h]):] if path != "/out" else target
            return web.Response(status=301 if path != "/out" else 302,
                                headers={"Location": location})
        if kind == "pdf":
            return web.Response(body=b"%PDF-1.4\n" + b"0" * 2000,
                                content_type="application/pdf")
        if kind == "private":
            return web.Response(text="<html><body>private</body></html>",
                                content_type="text/html")
        rng = self._rng(h, path + "#text")
        words = " ".join(rng.choice(_LOREM) for _ in range(self.spec.text_words))
        links = self.links(h, path)
        half = len(links) - self.nav
        body_links = "".join(f'<li><a href="{href}">link</a></li>' for href, _ in links[:half])
        footer = "".join(f'<a href="{href}">nav</a> ' for href, _ in links[half:])
        base = '<base href="/p/">' if kind == "base" else ""
        html = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{path}</title>'
                f"{base}</head><body><h1>host {h} {path}</h1><p>{words}</p><ul>{body_links}"
                f"</ul><footer>{footer}</footer></body></html>")
        return web.Response(text=html, content_type="text/html")

    def make_app(self, h: int, log: HostLog | None = None) -> web.Application:
        """The aiohttp app of host ``h`` (add more routes before it starts, if wanted)."""
        log = log if log is not None else HostLog()
        delay = self.spec.delay

        async def handler(request: web.Request) -> web.StreamResponse:
            path = request.path
            log.counts[path] += 1
            log.starts.append((time.monotonic(), path))
            log.active += 1
            log.max_active = max(log.max_active, log.active)
            try:
                if delay and path != "/robots.txt":
                    await asyncio.sleep(delay)
                return self.render(h, path)
            finally:
                log.active -= 1

        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", handler)
        return app



def _split(url: str) -> tuple[str, str]:
    scheme, _, rest = url.partition("://")
    auth, slash, path = rest.partition("/")
    return f"{scheme}://{auth}", slash + path

