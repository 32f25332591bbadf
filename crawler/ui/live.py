"""``--ui [HOST:]PORT``: the live dashboard, served by aiohttp.web in the crawl's own
event loop, read-only (GET only: nothing on it changes the crawl).

Why it samples on a timer and serves the cached result: the crawl's cost must
not depend on how many clients poll, so one sample a second (a few dict reads,
the new pages.jsonl lines, three stat calls) is encoded once and every request
gets those bytes. Why loopback unless ``--ui-public``: the page shows the
crawl's URLs, hosts and errors to whoever can reach the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from crawler.core.outputs.output import PAGES_FILE
from crawler.ui.address import ui_url
from crawler.ui.doc import SERIES_KEYS, document, totals_of_workers
from crawler.ui.page import render_page
from crawler.ui.stats import TOP_HOSTS, PageTally, Tail, storage_sizes

if TYPE_CHECKING:
    from crawler.core.run.engine import Engine

__all__ = ["COST", "Dashboard", "EngineProbe", "FleetProbe", "UiCost", "serving",
           "watch_engine"]

HISTORY = 900  # samples kept for the charts (15 minutes at one a second)


class UiCost:
    """CPU seconds the dashboards of this process took from the event loop's thread
    (``time.thread_time``), against that thread's CPU while they ran.

    Why: the dashboard must cost the crawl < 3% of its pages/s, a difference the
    noise of a shared machine hides in a with/without comparison; counted inside one
    crawl, the share is exact. ``bench/crawl_bench.py --ui`` reads ``COST`` at exit.
    A sample of an ``EngineProbe`` never awaits, so its time is its own; a fleet's
    probe awaits Redis, and its figure includes whatever ran meanwhile.
    """

    def __init__(self) -> None:
        self.sample_s = 0.0  # sampling: probe, document, JSON
        self.serve_s = 0.0  # requests: the handler, its response written
        self.loop_s = 0.0  # the loop thread's CPU while a dashboard was up
        self.samples = 0
        self.requests = 0

    def figures(self) -> dict[str, float]:
        ui = self.sample_s + self.serve_s
        return {"sample_s": self.sample_s, "serve_s": self.serve_s, "loop_s": self.loop_s,
                "samples": self.samples, "requests": self.requests,
                "share": ui / self.loop_s if self.loop_s else 0.0}


COST = UiCost()


class Budgeted:
    """``fn()``'s last result, called again only once the time since its last call is
    ``1 / share`` times what that call cost (CPU): a figure whose cost grows with the
    crawl (the frontier's hosts) is refreshed less often instead of taking more of it."""

    def __init__(self, fn: Callable[[], Any], share: float) -> None:
        self.fn, self.share = fn, share
        self._due = 0.0
        self._value: Any = None

    def __call__(self) -> Any:
        now = time.monotonic()
        if now >= self._due:
            t0 = time.thread_time()
            self._value = self.fn()
            self._due = now + (time.thread_time() - t0) / self.share
        return self._value


class Probe(Protocol):
    """Where a dashboard's figures come from: one engine, or a fleet's workers."""

    title: str

    async def read(self) -> dict[str, Any]:
        """The current document minus its time series (``document``'s arguments)."""
        ...


class EngineProbe:
    """Figures of an engine running in this process: its status (what the status
    line shows), its frontier's biggest hosts, the pages it appended to pages.jsonl
    since the dashboard started, and its files' sizes."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.title = f"bloomcrawl: {engine.state_dir.name}"
        self.tally = PageTally()
        self._tail = Tail(engine.state_dir / PAGES_FILE)
        self._last: tuple[float, int, int] | None = None
        # O(hosts queued): at most 0.2% of the time, every sample below ~2 ms
        self._queued = Budgeted(lambda: dict(engine.frontier.top_hosts(TOP_HOSTS * 20)),
                                share=0.002)

    async def read(self) -> dict[str, Any]:
        e = self.engine
        self.tally.feed_lines(self._tail.read())
        status = e.status()
        pages, nbytes = e.session.pages, self.tally.bytes
        now = time.monotonic()
        rate = brate = 0.0
        if self._last is not None and now > self._last[0]:
            dt = now - self._last[0]
            rate, brate = (pages - self._last[1]) / dt, (nbytes - self._last[2]) / dt
        self._last = (now, pages, nbytes)
        loop_now = asyncio.get_running_loop().time()
        queued = self._queued()
        fetched = {h: (f, x) for h, f, x in self.tally.top_hosts(TOP_HOSTS * 2)}
        names = list(dict.fromkeys([*fetched, *queued]))
        rows = []
        for h in names:
            q = queued.get(h, 0)
            held = q if e.politeness.held_until(h) > loop_now else 0
            f, x = fetched.get(h, (0, 0))
            rows.append({"host": h, "fetched": f, "failed": x, "queued": q, "held_back": held})
        rows.sort(key=lambda r: (-(r["fetched"] + r["failed"] + r["queued"]), r["host"]))
        return {"status": status, "tally": self.tally, "storage": storage_sizes(e.state_dir),
                "top_hosts": rows[:TOP_HOSTS], "pages_per_s": rate, "bytes_per_s": brate}


class FleetProbe:
    """Figures of a fleet: each worker's last published status (Redis, what the
    fleet's progress line sums), and the pages its workers append to their
    pages.jsonl files (``DIR/worker-I``)."""

    def __init__(self, fleet_stats: Callable[[], Any], state: Path, workers: int) -> None:
        self._fleet_stats = fleet_stats
        self.state = Path(state)
        self.title = f"bloomcrawl fleet: {self.state.name}"
        self.workers = workers
        self.tallies = [PageTally() for _ in range(workers)]
        self._tails = [Tail(self.state / f"worker-{i}" / PAGES_FILE) for i in range(workers)]
        self._last: tuple[float, int] | None = None

    async def read(self) -> dict[str, Any]:
        for tail, tally in zip(self._tails, self.tallies, strict=True):
            tally.feed_lines(tail.read())
        try:
            stats = await self._fleet_stats()
        except Exception:  # Redis away for a moment: the pages still count
            stats = {}
        # a worker that has not published yet this run is starting (the supervisor
        # cleared the last run's figures)
        per = [stats.get(i) or {"outcome": "starting"} for i in range(self.workers)]
        status = totals_of_workers(per)
        status["state_dir"] = str(self.state)
        status["outcome"] = fleet_outcome([str(s.get("outcome")) for s in per])
        total = PageTally()
        for t in self.tallies:
            total.merge(t)
        now = time.monotonic()
        brate = 0.0
        if self._last is not None and now > self._last[0]:
            brate = (total.bytes - self._last[1]) / (now - self._last[0])
        self._last = (now, total.bytes)
        storage: dict[str, int] = {}
        for i in range(self.workers):
            for k, v in storage_sizes(self.state / f"worker-{i}").items():
                storage[k] = storage.get(k, 0) + v
        workers = [{"worker": i, "outcome": s.get("outcome"),
                    "pages_per_s": round(float(s.get("rate") or 0.0), 2),
                    "fetched": int(s.get("fetched") or 0), "failed": int(s.get("failed") or 0),
                    "queued": int(s.get("queued") or 0), "fill": s.get("fill"),
                    "forwarded": int(s.get("forwarded") or 0),
                    "bytes": self.tallies[i].bytes}
                   for i, s in enumerate(per)]
        rows = [{"host": h, "fetched": f, "failed": x, "queued": 0, "held_back": 0}
                for h, f, x in total.top_hosts(TOP_HOSTS)]
        return {"status": status, "tally": total, "storage": storage, "top_hosts": rows,
                "pages_per_s": float(status.get("rate") or 0.0), "bytes_per_s": brate,
                "workers": workers}


def fleet_outcome(outcomes: list[str]) -> str:
    """A fleet runs while any of its workers does (or is starting); then its outcome is
    its workers' (``finished``, or ``finished, max pages reached``)."""
    if any(o in ("running", "starting") for o in outcomes):
        return "running"
    return ", ".join(sorted(set(outcomes))) or "running"


class Dashboard:
    """The server: ``GET /`` the page, ``GET /api/stats`` the document (refreshed
    every ``interval`` seconds, with the last ``HISTORY`` samples as time series)."""

    def __init__(self, probe: Probe, sock: socket.socket, *, interval: float = 1.0) -> None:
        self.probe = probe
        self.sock = sock
        self.interval = interval
        self.series: dict[str, deque[float | None]] = {
            k: deque(maxlen=HISTORY) for k in SERIES_KEYS}
        # the same points as JSON, each encoded once: the series are most of the
        # document (15 minutes of 7 figures), and floats are the slow part of dumps
        self._encoded: dict[str, deque[str]] = {k: deque(maxlen=HISTORY) for k in SERIES_KEYS}
        self._page = render_page(None, title=probe.title).encode()
        self._doc = b"{}"
        self._runner: web.AppRunner | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop_t0: float | None = None
        self.url = ui_url(sock)

    async def sample(self) -> dict[str, Any]:
        t0 = time.thread_time()
        try:
            return await self._sample()
        finally:
            COST.sample_s += time.thread_time() - t0
            COST.samples += 1

    async def _sample(self) -> dict[str, Any]:
        got = await self.probe.read()
        st, storage = got["status"], got["storage"]
        point = {"t": round(time.time(), 3), "pages_per_s": round(got["pages_per_s"], 3),
                 "bytes_per_s": round(got["bytes_per_s"], 1), "queued": st.get("queued"),
                 "fill": st.get("fill"), "ledger_bytes": storage.get("ledger_bytes"),
                 "index_bytes": storage.get("index_bytes")}
        for k in SERIES_KEYS:
            self.series[k].append(point[k])
            self._encoded[k].append(json.dumps(point[k]))
        doc = document(mode="live", status=st, tally=got["tally"], series=self.series,
                       storage=storage, top_hosts=got["top_hosts"],
                       workers=got.get("workers", ()), pages_per_s=got["pages_per_s"],
                       bytes_per_s=got["bytes_per_s"])
        doc["title"] = self.probe.title
        doc["interval"] = self.interval
        rest = json.dumps({k: v for k, v in doc.items() if k != "series"},
                          separators=(",", ":"))
        series = ",".join(f'"{k}":[{",".join(v)}]' for k, v in self._encoded.items())
        self._doc = f'{rest[:-1]},"series":{{{series}}}}}'.encode()
        return doc

    async def _sampling(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.sample()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a dashboard problem must never stop the crawl
                self._doc = json.dumps({"error": repr(exc)}).encode()

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return await _sent(request, self._page, content_type="text/html", charset="utf-8",
                           headers=_HEADERS)

    async def _stats(self, request: web.Request) -> web.StreamResponse:
        return await _sent(request, self._doc, content_type="application/json",
                           headers=_STATS_HEADERS)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/api/stats", self._stats)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     shutdown_timeout=0.5)
        await self._runner.setup()
        await web.SockSite(self._runner, self.sock).start()
        self._loop_t0 = time.thread_time()
        await self.sample()
        self._task = asyncio.create_task(self._sampling(), name="bloomcrawl-ui")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._runner is not None:
            await self._runner.cleanup()
        self.sock.close()
        if self._loop_t0 is not None:
            COST.loop_s += time.thread_time() - self._loop_t0
            self._loop_t0 = None


async def _sent(request: web.Request, body: bytes, **kw: Any) -> web.Response:
    """A response of ``body``, written out here so that ``COST`` counts the writing
    too (a small body on a local socket: the writes do not wait)."""
    t0 = time.thread_time()
    resp = web.Response(body=body, **kw)
    await resp.prepare(request)
    await resp.write_eof()
    COST.serve_s += time.thread_time() - t0
    COST.requests += 1
    return resp


# The page loads nothing from anywhere (no CDN, no fonts): say so to the browser too.
_HEADERS = {"Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; "
            "style-src 'unsafe-inline'; img-src data:; connect-src 'self'",
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
_STATS_HEADERS = {**_HEADERS, "Cache-Control": "no-store"}


@contextlib.asynccontextmanager
async def serving(probe: Probe, sock: socket.socket, *, interval: float = 1.0,
                  say: Callable[[str], None] | None = None) -> AsyncIterator[Dashboard]:
    """A dashboard of ``probe`` on ``sock`` for as long as the block runs."""
    dash = Dashboard(probe, sock, interval=interval)
    await dash.start()
    if say is not None:
        say(f"dashboard at {dash.url} (read-only)")
    try:
        yield dash
    finally:
        await dash.stop()


def watch_engine(sock: socket.socket, *, say: Callable[[str], None] | None = None
                 ) -> Callable[[Engine], contextlib.AbstractAsyncContextManager[object]]:
    """``Crawler``'s ``watch``: the dashboard on ``sock`` for as long as the engine
    runs, sampling as often as the status line (1 to 2 s)."""
    return lambda engine: serving(
        EngineProbe(engine), sock, say=say,
        interval=max(1.0, min(2.0, engine.settings.output.progress_interval)))
