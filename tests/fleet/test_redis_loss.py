"""A fleet whose Redis restarts empty (no persistence) mid-crawl (issue 28, item 4).

Links forwarded to an owner that has not read them yet live only in its Redis
stream; a Redis that comes back empty has lost them. The fleet must either
recover them (every sender re-sends what it forwarded) or stop non-zero with a
way out that recovers them: never exit 0 with URLs missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from aiohttp import web

from crawler.core.outputs.output import read_pages
from crawler.wire.owner import owner_of
from dedup.store.seen import host_of
from tests.support.faultserver import RequestLog, add_request_log, serve
from tests.support.fleetrun import finish, fleet_files, start_fleet, worker_pid, worker_settings
from tests.support.helpers import run_cli, until

pytestmark = pytest.mark.redis

CRAWL_ID = "lossy"
PAGES = 100


def settings_of_test():
    """The fleet's settings: host B's pages are all the same empty leaf, which a trap
    budget would rightly stop fetching; here every one of them is the point."""
    return worker_settings().with_values(learn={"enabled": False})


def _page(links: list[str]) -> web.Response:
    body = "".join(f'<a href="{h}">{h}</a> ' for h in links)
    return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")


async def _leaf(request: web.Request) -> web.Response:
    return _page([])


@contextlib.asynccontextmanager
async def two_hosts() -> AsyncIterator[tuple[str, str, RequestLog, RequestLog]]:
    """Host A (owned by worker 1): ``/a/I`` each link to ``B/b/I`` on host B (owned by
    worker 0), which nothing else links to. So every link A forwards is the only way to
    its page: one lost link is one URL never fetched."""
    for _ in range(50):
        async with contextlib.AsyncExitStack() as stack:
            b_app = web.Application()
            b_log = add_request_log(b_app)
            b_app.router.add_get("/", _leaf)
            b_app.router.add_get("/b/{i}", _leaf)
            b = await stack.enter_async_context(serve(b_app))
            a_app = web.Application()
            a_log = add_request_log(a_app)

            async def a_page(request: web.Request, b: str = b) -> web.Response:
                await asyncio.sleep(0.03)  # A's links trickle out over ~1.5 s
                return _page([f"{b}/b/{request.match_info['i']}"])

            async def a_home(request: web.Request) -> web.Response:
                return _page([f"/a/{i}" for i in range(PAGES)])

            a_app.router.add_get("/", a_home)
            a_app.router.add_get("/a/{i}", a_page)
            a = await stack.enter_async_context(serve(a_app))
            if owner_of(host_of(a + "/"), 2) == 1 and owner_of(host_of(b + "/"), 2) == 0:
                yield a, b, a_log, b_log
                return
    raise RuntimeError("no port assignment gives host A to worker 1 and B to worker 0")


async def undelivered(url: str, worker: int) -> int:
    """Entries in ``worker``'s stream that its owner has not read yet."""
    r = aioredis.Redis.from_url(url)
    try:
        stream = f"bloomcrawl:{{{CRAWL_ID}}}:in:{worker}"
        length = await r.xlen(stream)
        try:
            pending = (await r.xpending(stream, "owner"))["pending"]
        except aioredis.ResponseError:  # no group yet
            pending = 0
        return length - pending
    finally:
        await r.aclose()


def fetched_once(root: Path, a: str, b: str, a_log: RequestLog, b_log: RequestLog, *,
                 max_refetches: int = 0) -> None:
    """Every URL of the site is in exactly one record of the workers' pages.jsonl, and
    the servers saw every page (at most ``max_refetches`` requests more: a killed worker
    fetches again what it had in flight)."""
    want = {a + "/", b + "/"} | {f"{a}/a/{i}" for i in range(PAGES)} | {
        f"{b}/b/{i}" for i in range(PAGES)}
    recorded = Counter(r["url"] for i in range(2)
                       for r in read_pages(root / f"worker-{i}" / "pages.jsonl"))
    missing = want - set(recorded)
    assert not missing, f"{len(missing)} URLs never fetched, e.g. {sorted(missing)[:3]}"
    assert set(recorded) == want
    assert recorded.most_common(1)[0][1] == 1, recorded.most_common(3)
    served = Counter((n, r.path) for n, log in enumerate((a_log, b_log)) for r in log.records
                     if r.path != "/robots.txt")
    assert len(served) == len(want)
    assert sum(n - 1 for n in served.values()) <= max_refetches, served.most_common(3)


async def lose_waiting_links(tmp_path: Path, server, seeds_of: list[str], b_log: RequestLog,
                             settings, *, restart: bool) -> tuple[asyncio.subprocess.Process, Path]:
    """Start ``fleet --workers 2``, stop worker 0 from reading (SIGSTOP) until at least 3
    links worker 1 forwarded wait unread in its stream, then kill -9 Redis with them
    (and start it again, empty, on the same port if ``restart``). Returns the fleet's
    process and its directory."""
    seeds, config = fleet_files(tmp_path, seeds_of, settings)
    root = tmp_path / "f"
    proc = await start_fleet(seeds, root, 2, config, "--redis", server.url, "--crawl-id",
                             CRAWL_ID, "--quiet")
    pid = None
    try:
        await until(lambda: b_log.count("/") > 0, timeout=30, what="worker 0 to start")
        pid = worker_pid(proc.pid, 0)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while await undelivered(server.url, 0) < 3:
            assert loop.time() < deadline, "no links waiting for worker 0"
            await asyncio.sleep(0.01)
        server.stop(force=True)  # kill -9: the waiting links are gone with it
        if restart:
            server.start()  # same port, empty
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    return proc, root


async def test_a_fleet_whose_redis_restarts_empty_loses_no_url(tmp_path, redis_factory):
    server = redis_factory()  # no persistence: a restart comes back empty
    async with two_hosts() as (a, b, a_log, b_log):
        proc, root = await lose_waiting_links(tmp_path, server, [a + "/", b + "/"], b_log,
                                              settings_of_test(), restart=True)
        ((rc, text),) = await finish([proc], timeout=60)
        assert rc == 0, text  # recovered, not stopped
        fetched_once(root, a, b, a_log, b_log)
        assert "lost fleet lossy's data" in text and "re-sending the" in text, text


async def test_a_fleet_stopped_by_its_lost_redis_resumes_exactly(tmp_path, redis_factory):
    """Redis gone longer than retry_for: the workers give up, the fleet exits non-zero
    with the way out, and resume (Redis back, empty) re-sends what was lost."""
    server = redis_factory()
    async with two_hosts() as (a, b, a_log, b_log):
        settings = settings_of_test().with_values(
            distributed={"retry_for": 0.5, "max_restarts": 1})
        proc, root = await lose_waiting_links(tmp_path, server, [a + "/", b + "/"], b_log,
                                              settings, restart=False)
        ((rc, text),) = await finish([proc], timeout=60)
        assert rc != 0, text
        assert f"continue with: bloomcrawl resume {root}" in text, text
        server.start()  # same port, empty
        done = await run_cli("resume", str(root), "--quiet")
        assert done.rc == 0, done.stderr
        fetched_once(root, a, b, a_log, b_log, max_refetches=8)
        assert "lost its data since this worker last ran" in done.stderr, done.stderr
