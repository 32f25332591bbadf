"""A fleet worker's start: join the fleet in Redis, then run its ``Crawler`` (new or
resumed) with the fleet's transport.

Why joining comes first for a new worker: a refused or unreachable Redis, or a
worker that does not fit the fleet (size, geometry, rules, scope), must leave no
state dir. A resumed worker opens its state dir first: the fleet checks the
geometry it was created with.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawler.core.run.crawl import Crawler
from crawler.core.state.state import check_new_state_dir, seeds_and_scope
from crawler.fleet.identity import fleet_geometry, settings_geometry, transport_for

__all__ = ["crawl_as_worker", "resume_as_worker"]


async def crawl_as_worker(crawl: Crawler, seeds_file: str | Path, *, redis_url: str,
                          warn: Callable[[str], None]) -> dict[str, Any]:
    """Join the fleet as the new worker ``crawl`` (made with ``fleet=`` its identity and
    ``seeds_file`` as its seeds), create its state dir and crawl; returns the summary."""
    assert crawl.fleet is not None
    check_new_state_dir(crawl.state_dir)
    settings = crawl.settings
    _, _, scope = seeds_and_scope(seeds_file, settings)
    transport = transport_for(redis_url, crawl.fleet, settings, fleet_geometry(
        settings_geometry(settings), settings.canonical.rules(), scope))
    await transport.connect()
    try:
        crawl.open()
        try:
            for problem in crawl.problems:
                warn(f"{problem} (skipped)")
            await transport.attach_outbox(crawl.state_dir)
            return await crawl.run(transport=transport)
        finally:
            crawl.close()
    finally:
        await transport.close()


async def resume_as_worker(crawl: Crawler, redis_url: str) -> dict[str, Any]:
    """Rejoin the fleet as the resumed worker ``crawl`` (made with ``fleet=`` its
    identity, as reached through ``redis_url``) and go on crawling; returns the summary."""
    assert crawl.fleet is not None
    seen = crawl.open().seen
    transport = transport_for(redis_url, crawl.fleet, crawl.settings,
                              fleet_geometry(seen.geometry.to_dict(), seen.rules, crawl.scope))
    await transport.connect()
    try:
        await transport.attach_outbox(crawl.state_dir)
        return await crawl.run(transport=transport)
    finally:
        await transport.close()
