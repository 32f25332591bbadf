"""``bloomcrawl fleet``: W local workers (and a local Redis) under one supervisor."""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import Any

from crawler.cli.args import (
    add_crawl_options,
    add_hook_options,
    add_quiet_option,
    add_seeded_command,
    crawl_id,
    crawl_settings,
    int_at_least,
    warn,
    worker_flags,
)
from crawler.cli.ui import add_ui_options, ui_socket
from crawler.config.settings import load_settings
from crawler.core.run.crawl import load_callable
from crawler.core.state.state import check_new_state_dir, seeds_and_scope
from crawler.fleet.launch import start_fleet
from crawler.wire.owner import owner_of
from dedup import host_of

__all__ = ["add_fleet"]


def add_fleet(sub: Any) -> None:
    p = add_seeded_command(sub, "fleet", "run W local fleet workers (and a local Redis)",
                           cmd_fleet, "new or empty directory for the fleet")
    p.add_argument("--workers", required=True, type=int_at_least(1), metavar="W",
                   help="number of worker processes")
    p.add_argument("--redis", metavar="URL", help="an existing Redis for the fleet "
                   "(default: a redis-server started for it, its data in DIR/redis)")
    p.add_argument("--crawl-id", type=crawl_id, metavar="ID",
                   help="the fleet's id (default: a new random one)")
    add_crawl_options(p)
    add_hook_options(p, resume=False, items="DIR/worker-I/items.jsonl (each worker's own)")
    add_quiet_option(p)
    add_ui_options(p)
    p.set_defaults(func=cmd_fleet)


def idle_workers(seeds: list[str], workers: int) -> list[int]:
    """The workers that own none of the seeds' hosts (``crawler.wire.owner``)."""
    owners = {owner_of(host_of(url), workers) for url in seeds}
    return [i for i in range(workers) if i not in owners]


def cmd_fleet(args: argparse.Namespace) -> int:
    """Start W worker processes on this machine, worker I in DIR/worker-I, sharing a Redis:
    --redis URL, or a redis-server this command starts on a free loopback port (its data in
    DIR/redis, so 'bloomcrawl resume DIR' continues the fleet). Shows one combined progress
    line; Ctrl-C stops every worker. Crawl options apply to each worker (--max-pages is per
    worker), and so does --handler: each worker writes its pages' items to its own
    DIR/worker-I/items.jsonl."""
    settings = load_settings(args.config)  # a bad config file fails here, not W times
    state = Path(args.state)
    check_new_state_dir(state)
    seeds, _, _ = seeds_and_scope(args.seeds, crawl_settings(args))  # bad flags and seeds too
    idle = idle_workers([url for url, _ in seeds], args.workers)
    if idle:
        warn(f"{len(idle)} of {args.workers} workers own no seed host (worker"
             f"{'s' if len(idle) > 1 else ''} {', '.join(map(str, idle))}): a fleet splits "
             "work by host, one worker per host, so they wait unless links lead to other "
             "hosts; fewer workers would do the same work")
    for spec in (args.handler, args.follow):  # an import error once, not W times
        if spec is not None:
            load_callable(spec)
    sock = ui_socket(args)  # one dashboard for the fleet, served by this process
    return start_fleet(state, str(Path(args.seeds).resolve()), workers=args.workers,
                       crawl_id=args.crawl_id or uuid.uuid4().hex, redis=args.redis,
                       settings=settings, quiet=args.quiet, ui=sock,
                       worker_flags=[worker_flags(args, i) for i in range(args.workers)])
