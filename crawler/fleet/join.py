"""A fleet worker's start: join the fleet in Redis, then crawl (new) or resume.

Why joining comes first: a refused or unreachable Redis, or a worker that does
not fit the fleet (size, geometry, rules, scope), must leave no state dir.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawler.config.scope import Scope
from crawler.config.settings import Settings
from crawler.core.run.engine import Watcher, run_crawl
from crawler.core.run.progress import Progress
from crawler.core.state.state import FLEET_KEY, check_new_state_dir, create_crawl, seeds_and_scope
from crawler.fleet.identity import (
    derive_crawl_id,
    fleet_geometry,
    settings_geometry,
    transport_for,
    worker_meta,
)
from dedup import UrlSeen

__all__ = ["crawl_as_worker", "resume_as_worker"]


async def crawl_as_worker(state: str | Path, settings: Settings, seeds_file: str | Path, *,
                          redis_url: str, workers: int, worker_id: int, crawl_id: str | None,
                          progress: Progress, warn: Callable[[str], None],
                          watch: Watcher | None = None) -> dict[str, Any]:
    """Start worker ``worker_id`` of ``workers`` in a new ``state`` dir and crawl;
    returns the crawl's summary."""
    check_new_state_dir(state)
    _, _, scope = seeds_and_scope(seeds_file, settings)
    crawl_id = crawl_id or derive_crawl_id(seeds_file, workers)
    meta = worker_meta(crawl_id, workers, worker_id, redis_url)
    transport = transport_for(redis_url, meta, settings, fleet_geometry(
        settings_geometry(settings), settings.canonical.rules(), scope))
    await transport.connect()
    try:
        seen, scope, problems = create_crawl(state, settings, seeds_file,
                                             crawl_id=crawl_id, owns=transport.is_local,
                                             meta=meta)
        for problem in problems:
            warn(f"{problem} (skipped)")
        try:
            await transport.attach_outbox(seen.state_dir)
            return await run_crawl(seen, settings, scope, progress=progress,
                                   install_signals=True, transport=transport, watch=watch)
        finally:
            seen.close()
    finally:
        await transport.close()


async def resume_as_worker(seen: UrlSeen, settings: Settings, scope: Scope,
                           meta: dict[str, Any], redis_url: str, progress: Progress,
                           *, watch: Watcher | None = None) -> dict[str, Any]:
    """Rejoin the fleet recorded in ``meta`` and go on crawling (``seen`` stays open);
    returns the crawl's summary."""
    transport = transport_for(redis_url, meta, settings,
                              fleet_geometry(seen.geometry.to_dict(), seen.rules, scope))
    await transport.connect()
    try:
        now = worker_meta(meta["crawl_id"], meta["workers"], meta["worker_id"], redis_url)
        if now != meta:  # Redis moved: remember where (without a password)
            seen.meta_set(FLEET_KEY, now)
            seen.commit()
        await transport.attach_outbox(seen.state_dir)
        return await run_crawl(seen, settings, scope, progress=progress, install_signals=True,
                               transport=transport, watch=watch)
    finally:
        await transport.close()
