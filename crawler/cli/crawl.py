"""``bloomcrawl crawl`` and ``bloomcrawl resume``: one process, a fleet worker, or a
whole fleet directory (``resume FLEETDIR``).

The fleet's modules (supervisor, local Redis, resize, the wire protocol) are imported
by the commands that use them: a single-process ``crawl`` does not pay for them."""

from __future__ import annotations

import argparse
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from crawler.cli.args import (
    CRAWL_OPTIONS,
    FROZEN_FLAGS,
    FROZEN_WHY,
    UsageError,
    add_crawl_options,
    add_hook_options,
    add_quiet_option,
    add_resume_options,
    add_seeded_command,
    crawl_id,
    crawl_options,
    describe,
    int_at_least,
    note,
    resume_flags,
    resume_help,
    warn,
)
from crawler.cli.loop import add_loop_option, run
from crawler.cli.ui import add_ui_options, ui_socket, ui_watch
from crawler.config.exits import exit_status
from crawler.core.run.crawl import RESUME_OPTIONS, Crawler
from crawler.core.run.page import HandlerError
from crawler.core.state.state import CrawlError, check_new_state_dir, fleet_identity
from crawler.fleet.identity import (
    REDIS_ENV,
    derive_crawl_id,
    is_fleet_dir,
    read_fleet_dir,
    stored_redis,
    worker_meta,
)

__all__ = ["add_crawl", "add_resume"]


def add_crawl(sub: Any) -> None:
    p = add_seeded_command(sub, "crawl", "start a crawl from a seeds file", cmd_crawl,
                           "new or empty directory for the crawl's state (resumable)")
    add_crawl_options(p)
    add_quiet_option(p)
    add_loop_option(p)
    add_hook_options(p, resume=False)
    add_ui_options(p)
    g = p.add_argument_group(
        "fleet worker", "Crawl as worker I of W sharing a Redis: each host has one owner "
        "(hash(host) mod W) that alone fetches and deduplicates it; links for other owners "
        "are forwarded through Redis Streams. Every worker reads the same seeds file.")
    g.add_argument("--redis", metavar="URL",
                   help=f"redis://[:PASSWORD@]HOST:PORT/DB (or ${REDIS_ENV}); the password "
                   "is never stored or shown (default: none, a single process)")
    g.add_argument("--workers", type=int_at_least(1), metavar="W",
                   help="fleet size (default: none, a single process)")
    g.add_argument("--worker-id", type=int_at_least(0), metavar="I",
                   help="0 <= I < W (default: none, a single process)")
    g.add_argument("--crawl-id", type=crawl_id, metavar="ID",
                   help="the fleet's id in Redis and in its filters (default: derived from "
                   "the seeds file's content and W, so every worker agrees)")
    p.set_defaults(func=cmd_crawl)


def _run(crawl: Crawler, loop: str, crawling: Coroutine[Any, Any, dict[str, Any]] | None = None
         ) -> int:
    """Run a crawl (``crawling``, default ``crawl.run()``) to its exit status; a handler
    that stopped it has its traceback shown."""
    try:
        return exit_status(run(crawling if crawling is not None else crawl.run(), loop))
    except HandlerError as exc:
        warn("the page handler raised:\n" + exc.traceback.rstrip())
        raise
    finally:
        crawl.close()


def _fleet_args(args: argparse.Namespace) -> tuple[str, int, int] | None:
    """(Redis URL, W, I) for a fleet worker, None for a single-process crawl."""
    if args.redis is None and args.workers is None and args.worker_id is None:
        if args.crawl_id is not None:
            raise UsageError("--crawl-id is for fleet workers (with --redis, --workers, "
                             "--worker-id)")
        return None
    url = args.redis or os.environ.get(REDIS_ENV)
    if not url:
        raise UsageError(f"a fleet worker needs --redis URL (or ${REDIS_ENV})")
    if args.workers is None or args.worker_id is None:
        raise UsageError("a fleet worker needs --workers W and --worker-id I")
    if args.worker_id >= args.workers:
        raise UsageError(f"--worker-id must be below --workers {args.workers}, "
                         f"not {args.worker_id}")
    return url, args.workers, args.worker_id


def cmd_crawl(args: argparse.Namespace) -> int:
    """Start a new crawl. SEEDS_FILE holds one URL per line (# comments and blank lines
    ignored)."""
    fleet = _fleet_args(args)
    watch = ui_watch(ui_socket(args))
    identity = None
    if fleet is not None:
        url, workers, worker_id = fleet
        identity = worker_meta(args.crawl_id or derive_crawl_id(args.seeds, workers),
                               workers, worker_id, url)
    if fleet is None:  # `crawl` starts a crawl; `resume` continues one (Crawler does both)
        check_new_state_dir(args.state)
    crawl = Crawler(Path(args.seeds), state=args.state, handler=args.handler,
                    follow=args.follow, on_error=args.on_error,
                    progress=not args.quiet, handle_signals=True, watch=watch,
                    fleet=identity, **crawl_options(args))
    if fleet is not None:
        from crawler.fleet.join import crawl_as_worker  # a single process needs no fleet code

        return _run(crawl, args.loop, crawl_as_worker(crawl, args.seeds, redis_url=fleet[0],
                                                      warn=warn))
    crawl.open()
    for problem in crawl.problems:
        warn(f"{problem} (skipped)")
    return _run(crawl, args.loop)


def add_resume(sub: Any) -> None:
    p = sub.add_parser("resume", help="continue a stopped or crashed crawl (or fleet)",
                       description=describe(cmd_resume))
    p.add_argument("dir", metavar="DIR", help="a crawl's state directory or a fleet directory")
    p.add_argument("--redis", metavar="URL",
                   help=f"the fleet's Redis (or ${REDIS_ENV}); needed when its URL had a "
                   "password, which is never stored (default: the recorded one)")
    add_quiet_option(p)
    add_loop_option(p)
    add_hook_options(p, resume=True)
    add_ui_options(p)
    g = p.add_argument_group(
        "changing limits", "Stored as the crawl's new values (later resumes keep them). "
        "--allow-private also queues again the URLs the crawl refused as private addresses. "
        "What decides which URLs are the same or in scope (filter geometry, "
        "canonicalization, allowed domains, include/exclude patterns) and what the requests "
        "say (user agent, headers, cookies) are frozen at 'crawl' and cannot change.")
    add_resume_options(g)
    crawl_help = {flag: kwargs["help"] for flag, kwargs in CRAWL_OPTIONS}
    for flag in FROZEN_FLAGS:
        g.add_argument(flag, dest=f"frozen_{flag.strip('-').replace('-', '_')}",
                       action="append", nargs="?", metavar="X",
                       help="refused: DIR is the state directory (default: DIR)"
                       if flag == "--state" else
                       resume_help("refused: frozen when the crawl started (default: "
                                   + _shown_default(crawl_help.get(flag))))
    p.set_defaults(func=cmd_resume)


def _shown_default(text: str | None) -> str:
    """What a crawl option's help says its default is ("none)" for ``--state``)."""
    return text.rpartition("default: ")[2] if text and "default: " in text else "none)"


def _refuse_frozen(args: argparse.Namespace) -> None:
    for flag in FROZEN_FLAGS:
        if getattr(args, f"frozen_{flag.strip('-').replace('-', '_')}") is not None:
            why = FROZEN_WHY.get(flag, "it decides which URLs are the same or in scope")
            raise UsageError(f"resume cannot change {flag}: it is frozen when the crawl "
                             f"starts ({why}); start a new crawl with 'bloomcrawl crawl' "
                             "to change it")


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue a crawl with the configuration it was started with: queued and interrupted
    URLs are fetched, nothing seen is fetched again. DIR is a state directory (a fleet
    worker's rejoins its fleet) or a fleet directory (every worker is resumed, and new
    limits are each worker's, as 'fleet' gives them)."""
    _refuse_frozen(args)
    sock = ui_socket(args)
    from crawler.fleet.join import resume_as_worker
    from crawler.fleet.launch import resume_fleet
    from crawler.fleet.resize import refuse_if_resized

    if is_fleet_dir(Path(args.dir)):  # limits apply to each worker, as with 'fleet'
        return resume_fleet(read_fleet_dir(args.dir), redis=args.redis, quiet=args.quiet,
                            ui=sock, worker_flags=resume_flags(args))
    refuse_if_resized(Path(args.dir).resolve().parent)  # a worker of a retired fleet
    meta = fleet_identity(args.dir)
    if meta is None and args.redis:
        raise CrawlError(f"{args.dir} is a single-process crawl, not a fleet "
                         "worker's; resume it without --redis")
    url = None
    identity = None
    if meta is not None:
        url = args.redis or os.environ.get(REDIS_ENV) or stored_redis(meta, args.dir)
        identity = worker_meta(meta["crawl_id"], meta["workers"], meta["worker_id"], url)
    crawl = Crawler(state=args.dir, handler=args.handler, follow=args.follow,
                    on_error=args.on_error, progress=not args.quiet,
                    handle_signals=True, watch=ui_watch(sock), fleet=identity,
                    **{name: getattr(args, name) for name in RESUME_OPTIONS})
    if url is None:
        crawl.open()
        if crawl.reopened and not args.quiet:
            note(f"{crawl.reopened} URL(s) refused as private addresses are queued again "
                 "(--allow-private)")
    return _run(crawl, args.loop, resume_as_worker(crawl, url) if url is not None else None)
