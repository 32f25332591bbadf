"""``bloomcrawl fleet`` and ``resume FLEETDIR``: a fleet directory's workers, started
under one supervisor, with a local redis-server when the fleet has no other Redis.

Why the cleanup on a failed start: a fleet dir whose Redis never came up must be
reusable, so nothing made here is left behind if the start fails.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
from collections.abc import Sequence
from pathlib import Path

from crawler.config.settings import Settings, load_settings
from crawler.core.state.state import CrawlError, check_new_state_dir
from crawler.core.state.statecreate import check_resources
from crawler.fleet.identity import (
    FLEET_FILE,
    LOCAL,
    REDIS_ENV,
    FleetDir,
    stored_redis,
    worker_dir,
    write_fleet_file,
)
from crawler.fleet.localredis import LocalRedis
from crawler.fleet.resize import refuse_if_resized
from crawler.fleet.supervisor import supervise
from crawler.wire.redis_url import password_of, redact

__all__ = ["resume_fleet", "start_fleet"]


def start_fleet(state: Path, seeds: str, *, workers: int, crawl_id: str, redis: str | None,
                settings: Settings, worker_flags: list[list[str]], quiet: bool,
                ui: socket.socket | None = None) -> int:
    """Create fleet dir ``state`` and run ``workers`` new workers; returns the exit status.

    ``worker_flags[i]``: the crawl options worker ``i`` is started with; ``ui``: the
    fleet dashboard's listening socket.
    """
    check_new_state_dir(state)
    check_resources(settings, state, CrawlError)
    if redis:  # before the fleet dir exists: an unreachable Redis leaves nothing behind
        asyncio.run(_reachable(redis))
    created = not state.exists()
    try:
        state.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CrawlError(f"cannot create fleet directory {state}: "
                         f"{exc.strerror or exc}") from None
    local: LocalRedis | None = None
    try:
        try:
            if redis:
                url = redis
            else:
                local = LocalRedis(state / "redis").start()
                url = local.url
            write_fleet_file(state, crawl_id, workers, LOCAL if local else url)
        except BaseException:  # nothing started: leave no half-made fleet dir behind
            if local is not None:
                local.stop()
                local = None
            if created:
                shutil.rmtree(state, ignore_errors=True)
            else:
                shutil.rmtree(state / "redis", ignore_errors=True)
                (state / FLEET_FILE).unlink(missing_ok=True)
            raise
        children = [["crawl", seeds, "--state", str(worker_dir(state, i)), "--workers",
                     str(workers), "--worker-id", str(i), "--crawl-id", crawl_id,
                     "--quiet", *worker_flags[i]] for i in range(workers)]
        return asyncio.run(supervise(children, redis_url=url, crawl_id=crawl_id, state=state,
                                     settings=settings, quiet=quiet, ui=ui))
    finally:
        if local is not None:
            local.stop()


async def _reachable(url: str) -> None:
    from crawler.wire.monitor import TRANSIENT, client, reason

    r = client(url)
    try:
        async with asyncio.timeout(10):
            await r.ping()
    except (TimeoutError, *TRANSIENT) as exc:
        raise CrawlError(f"cannot reach Redis at {redact(url)}: "
                         f"{reason(exc, password_of(url))}") from None
    finally:
        await r.aclose()


def resume_fleet(fd: FleetDir, *, redis: str | None, quiet: bool,
                 ui: socket.socket | None = None, worker_flags: Sequence[str] = ()) -> int:
    """Resume every worker of fleet dir ``fd``, each with ``worker_flags`` (the new limits
    ``resume`` stores, per worker); returns the exit status."""
    refuse_if_resized(fd.root)
    local: LocalRedis | None = None
    if fd.redis == LOCAL:
        if redis:
            raise CrawlError(f"{fd.root} runs its own local Redis; resume it without --redis")
        local = LocalRedis(fd.root / "redis").start()
        url = local.url
    else:
        url = redis or os.environ.get(REDIS_ENV) or stored_redis(
            {"redis": fd.redis, "redis_auth": fd.redis_auth}, str(fd.root))
    children = [["resume", str(fd.worker(i)), "--quiet", *worker_flags]
                for i in range(fd.workers)]
    try:
        return asyncio.run(supervise(children, redis_url=url, crawl_id=fd.crawl_id,
                                     state=fd.root, settings=load_settings(), quiet=quiet,
                                     ui=ui))
    finally:
        if local is not None:
            local.stop()
