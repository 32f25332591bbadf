"""``bloomcrawl`` command line: crawl, resume, fleets, and the dedup tools around a state dir.

Fleet commands: ``crawl --redis URL --workers W --worker-id I`` (one worker),
``resume DIR [--redis URL]`` (a worker rejoins; DIR may also be a fleet dir),
``fleet`` (W local workers under one supervisor), ``merge`` (the fleet's
seen-set) and ``resize`` (W -> W/2 or 2W). See ``crawler.fleet``.

One function per subcommand (``cmd_*``) and one registration function per
subcommand (``add_*``), so new subcommands are a pair of functions added to
``COMMANDS``. Errors the user can fix (bad arguments, bad files, a directory in
use) are one ``bloomcrawl: error: ...`` line on stderr and exit status 2 for
usage, 1 otherwise — never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import sqlite3
import sys
import traceback
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from crawler.engine import run_crawl
from crawler.fleet.identity import (
    FLEET_FILE,
    LOCAL,
    REDIS_ENV,
    FleetError,
    derive_crawl_id,
    fleet_geometry,
    read_fleet_dir,
    settings_geometry,
    stored_redis,
    transport_for,
    worker_dir,
    worker_meta,
    write_fleet_file,
)
from crawler.fleet.localredis import LocalRedis
from crawler.fleet.resize import resize_fleet
from crawler.fleet.supervisor import supervise
from crawler.output import PAGES_FILE
from crawler.progress import Progress, format_filter_stats, format_stats
from crawler.scope import Scope, SeedError, normalize_domain, read_seeds
from crawler.settings import ConfigError, Settings, load_settings
from crawler.state import (
    FLEET_KEY,
    TOTALS_KEY,
    CrawlError,
    check_new_state_dir,
    create_crawl,
    open_crawl,
)
from dedup import (
    Canonicalizer,
    GeometryMismatch,
    Ledger,
    SnapshotError,
    StateLocked,
    UrlRejected,
    UrlSeen,
)
from dedup.atomic import atomic_write_bytes
from dedup.shards import ShardedBloom
from dedup.snapshot import CRAWL_ID_BYTES, merge_files, read_header

__all__ = ["COMMANDS", "build_parser", "main"]

PROG = "bloomcrawl"


class UsageError(Exception):
    """Bad command-line arguments (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _err(message: str) -> None:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()


def _warn(message: str) -> None:
    sys.stderr.write(f"{PROG}: warning: {message}\n")
    sys.stderr.flush()


# -- argument types ------------------------------------------------------------------------


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}: {text!r}")
        return value
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0: {text!r}")
    return value


def _domain(text: str) -> str:
    try:
        return normalize_domain(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _crawl_id(text: str) -> str:
    if not text or any(c in text for c in "{} \t\r\n\0") or \
            len(text.encode()) > CRAWL_ID_BYTES:
        raise argparse.ArgumentTypeError(f"a crawl id is 1..{CRAWL_ID_BYTES} bytes without "
                                         f"spaces or braces: {text!r}")
    return text


# -- crawl / resume ------------------------------------------------------------------------


def add_crawl(sub: Any) -> None:
    p = sub.add_parser("crawl", help="start a crawl from a seeds file",
                       description="Start a new crawl. SEEDS_FILE holds one URL per line "
                       "(# comments and blank lines ignored).")
    p.add_argument("seeds", metavar="SEEDS_FILE")
    p.add_argument("--state", required=True, metavar="DIR",
                   help="new or empty directory for the crawl's state (resumable)")
    p.add_argument("--config", metavar="FILE", help="TOML file overlaying the defaults")
    p.add_argument("--max-pages", type=_int_at_least(0), metavar="N",
                   help="stop after N fetched pages (0: no limit)")
    p.add_argument("--max-depth", type=_int_at_least(0), metavar="D",
                   help="do not follow links deeper than D hops from a seed")
    p.add_argument("--allow-domain", type=_domain, action="append", default=[], metavar="D",
                   help="also crawl domain D and its subdomains on any port (repeatable)")
    p.add_argument("--concurrency", type=_int_at_least(1), metavar="N",
                   help="fetches in flight at once")
    p.add_argument("--per-host", type=_int_at_least(1), metavar="N",
                   help="fetches in flight at once per host")
    p.add_argument("--delay", type=_seconds, metavar="S",
                   help="minimum seconds between fetch starts per host")
    p.add_argument("--allow-private", action="store_true",
                   help="allow private, loopback and link-local addresses")
    p.add_argument("--warc", metavar="FILE", help="also write fetched HTML to a WARC file")
    p.add_argument("--quiet", action="store_true", help="no status line, no summary")
    g = p.add_argument_group(
        "fleet worker", "Crawl as worker I of W sharing a Redis: each host has one owner "
        "(hash(host) mod W) that alone fetches and deduplicates it; links for other owners "
        "are forwarded through Redis Streams. Every worker reads the same seeds file.")
    g.add_argument("--redis", metavar="URL",
                   help=f"redis://[:PASSWORD@]HOST:PORT/DB (or ${REDIS_ENV}); the password "
                   "is never stored or shown")
    g.add_argument("--workers", type=_int_at_least(1), metavar="W", help="fleet size")
    g.add_argument("--worker-id", type=_int_at_least(0), metavar="I", help="0 <= I < W")
    g.add_argument("--crawl-id", type=_crawl_id, metavar="ID",
                   help="the fleet's id in Redis and in its filters (default: derived from "
                   "the seeds file's content and W, so every worker agrees)")
    p.set_defaults(func=cmd_crawl)


def crawl_settings(args: argparse.Namespace) -> Settings:
    """Defaults < --config < flags."""
    settings = load_settings(args.config)
    crawl: dict[str, Any] = {}
    if args.max_pages is not None:
        crawl["max_pages"] = args.max_pages
    if args.max_depth is not None:
        crawl["max_depth"] = args.max_depth
    if args.concurrency is not None:
        crawl["concurrency"] = args.concurrency
    if args.allow_domain:
        crawl["allow_domains"] = list(dict.fromkeys(
            [*settings.crawl.allow_domains, *args.allow_domain]))
    politeness: dict[str, Any] = {}
    if args.per_host is not None:
        politeness["per_host"] = args.per_host
    if args.delay is not None:
        politeness["delay"] = args.delay
    fetch = {"allow_private": True} if args.allow_private else {}
    warc = args.warc or settings.output.warc
    # frozen absolute: `resume` may run from another directory
    output = {"warc": str(Path(warc).resolve())} if warc else {}
    return settings.with_values(crawl=crawl, politeness=politeness, fetch=fetch, output=output)


def _progress(settings: Settings, quiet: bool) -> Progress:
    return Progress(interval=settings.output.progress_interval,
                    plain_interval=settings.output.plain_progress_interval, enabled=not quiet)


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
    settings = crawl_settings(args)
    fleet = _fleet_args(args)
    if fleet is not None:
        asyncio.run(_crawl_worker(args, settings, *fleet))
        return 0
    seen, scope, problems = create_crawl(args.state, settings, args.seeds)
    for problem in problems:
        _warn(f"{problem} (skipped)")
    try:
        asyncio.run(run_crawl(seen, settings, scope, progress=_progress(settings, args.quiet),
                              install_signals=True))
    finally:
        seen.close()
    return 0


async def _crawl_worker(args: argparse.Namespace, settings: Settings, url: str, workers: int,
                        worker_id: int) -> None:
    """Join the fleet first (a refused or unreachable Redis leaves no state dir), then crawl."""
    check_new_state_dir(args.state)
    seeds, _ = read_seeds(args.seeds, Canonicalizer(settings.canonical.rules()))
    scope = Scope.for_seeds([u for u, _ in seeds], settings.crawl.allow_domains)
    crawl_id = args.crawl_id or derive_crawl_id(args.seeds, workers)
    meta = worker_meta(crawl_id, workers, worker_id, url)
    transport = transport_for(url, meta, settings, fleet_geometry(
        settings_geometry(settings), settings.canonical.rules(), scope))
    await transport.connect()
    try:
        seen, scope, problems = create_crawl(args.state, settings, args.seeds,
                                             crawl_id=crawl_id, owns=transport.is_local,
                                             meta=meta)
        for problem in problems:
            _warn(f"{problem} (skipped)")
        try:
            await run_crawl(seen, settings, scope, progress=_progress(settings, args.quiet),
                            install_signals=True, transport=transport)
        finally:
            seen.close()
    finally:
        await transport.close()


def add_resume(sub: Any) -> None:
    p = sub.add_parser("resume", help="continue a stopped or crashed crawl (or fleet)",
                       description="Continue a crawl with the configuration it was started "
                       "with: queued and interrupted URLs are fetched, nothing seen is "
                       "fetched again. DIR is a state directory (a fleet worker's rejoins "
                       "its fleet) or a fleet directory (every worker is resumed).")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--redis", metavar="URL",
                   help=f"the fleet's Redis (or ${REDIS_ENV}); needed when its URL had a "
                   "password, which is never stored")
    p.add_argument("--quiet", action="store_true", help="no status line, no summary")
    p.set_defaults(func=cmd_resume)


def _is_fleet_dir(path: Path) -> bool:
    return (path / FLEET_FILE).is_file() or (
        not (path / "ledger.sqlite").exists() and (path / "worker-0" / "ledger.sqlite").exists())


def cmd_resume(args: argparse.Namespace) -> int:
    if _is_fleet_dir(Path(args.dir)):
        return _resume_fleet(args)
    seen, settings, scope = open_crawl(args.dir)
    try:
        meta = seen.ledger.meta_get(FLEET_KEY)
        if meta is None:
            if args.redis:
                raise CrawlError(f"{args.dir} is a single-process crawl, not a fleet "
                                 "worker's; resume it without --redis")
            asyncio.run(run_crawl(seen, settings, scope,
                                  progress=_progress(settings, args.quiet),
                                  install_signals=True))
        else:
            url = args.redis or os.environ.get(REDIS_ENV) or stored_redis(meta, args.dir)
            asyncio.run(_resume_worker(seen, settings, scope, meta, url, args.quiet))
    finally:
        seen.close()
    return 0


async def _resume_worker(seen: UrlSeen, settings: Settings, scope: Scope, meta: dict[str, Any],
                         url: str, quiet: bool) -> None:
    transport = transport_for(url, meta, settings,
                              fleet_geometry(seen.geometry, seen.rules, scope))
    await transport.connect()
    try:
        now = worker_meta(meta["crawl_id"], meta["workers"], meta["worker_id"], url)
        if now != meta:  # Redis moved: remember where (without a password)
            seen.ledger.meta_set(FLEET_KEY, now)
            seen.commit()
        await run_crawl(seen, settings, scope, progress=_progress(settings, quiet),
                        install_signals=True, transport=transport)
    finally:
        await transport.close()


def _resume_fleet(args: argparse.Namespace) -> int:
    fd = read_fleet_dir(args.dir)
    local: LocalRedis | None = None
    if fd.redis == LOCAL:
        if args.redis:
            raise CrawlError(f"{fd.root} runs its own local Redis; resume it without --redis")
        local = LocalRedis(fd.root / "redis").start()
        url = local.url
    else:
        url = args.redis or os.environ.get(REDIS_ENV) or stored_redis(
            {"redis": fd.redis, "redis_auth": fd.redis_auth}, str(fd.root))
    children = [["resume", str(fd.worker(i)), "--quiet"] for i in range(fd.workers)]
    try:
        return asyncio.run(supervise(children, redis_url=url, crawl_id=fd.crawl_id,
                                     state=fd.root, settings=load_settings(),
                                     quiet=args.quiet))
    finally:
        if local is not None:
            local.stop()


# -- fleet ---------------------------------------------------------------------------------


def add_fleet(sub: Any) -> None:
    p = sub.add_parser("fleet", help="run W local fleet workers (and a local Redis)",
                       description="Start W worker processes on this machine, worker I in "
                       "DIR/worker-I, sharing a Redis: --redis URL, or a redis-server this "
                       "command starts on a free loopback port (its data in DIR/redis, so "
                       "'bloomcrawl resume DIR' continues the fleet). Shows one combined "
                       "progress line; Ctrl-C stops every worker. Crawl options apply to "
                       "each worker (--max-pages is per worker).")
    p.add_argument("seeds", metavar="SEEDS_FILE")
    p.add_argument("--state", required=True, metavar="DIR",
                   help="new or empty directory for the fleet")
    p.add_argument("--workers", required=True, type=_int_at_least(1), metavar="W")
    p.add_argument("--redis", metavar="URL", help="an existing Redis for the fleet")
    p.add_argument("--crawl-id", type=_crawl_id, metavar="ID",
                   help="the fleet's id (default: a new random one)")
    for flag in ("--config", "--warc"):
        p.add_argument(flag, metavar="FILE")
    p.add_argument("--max-pages", type=_int_at_least(0), metavar="N")
    p.add_argument("--max-depth", type=_int_at_least(0), metavar="D")
    p.add_argument("--allow-domain", type=_domain, action="append", default=[], metavar="D")
    p.add_argument("--concurrency", type=_int_at_least(1), metavar="N")
    p.add_argument("--per-host", type=_int_at_least(1), metavar="N")
    p.add_argument("--delay", type=_seconds, metavar="S")
    p.add_argument("--allow-private", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no status line, no summary")
    p.set_defaults(func=cmd_fleet)


def _worker_flags(args: argparse.Namespace, i: int) -> list[str]:
    """The crawl options of ``fleet`` as one worker's command-line flags."""
    out: list[str] = []
    if args.config:
        out += ["--config", str(Path(args.config).resolve())]
    if args.warc:  # one WARC file per worker: writers must not share a file
        w = Path(args.warc).resolve()
        suffix = "".join(w.suffixes)
        out += ["--warc", str(w.with_name(f"{w.name[:len(w.name) - len(suffix)]}-worker-{i}"
                                          f"{suffix}"))]
    for flag, value in (("--max-pages", args.max_pages), ("--max-depth", args.max_depth),
                        ("--concurrency", args.concurrency), ("--per-host", args.per_host),
                        ("--delay", args.delay)):
        if value is not None:
            out += [flag, str(value)]
    for d in args.allow_domain:
        out += ["--allow-domain", d]
    if args.allow_private:
        out.append("--allow-private")
    return out


def cmd_fleet(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)  # a bad config file fails here, not W times
    state = Path(args.state)
    check_new_state_dir(state)
    read_seeds(args.seeds, Canonicalizer(settings.canonical.rules()))
    seeds = str(Path(args.seeds).resolve())
    crawl_id = args.crawl_id or uuid.uuid4().hex
    created = not state.exists()
    try:
        state.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CrawlError(f"cannot create fleet directory {state}: "
                         f"{exc.strerror or exc}") from None
    local: LocalRedis | None = None
    try:
        try:
            if args.redis:
                url = args.redis
            else:
                local = LocalRedis(state / "redis").start()
                url = local.url
            write_fleet_file(state, crawl_id, args.workers, LOCAL if local else url)
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
                     str(args.workers), "--worker-id", str(i), "--crawl-id", crawl_id,
                     "--quiet", *_worker_flags(args, i)] for i in range(args.workers)]
        return asyncio.run(supervise(children, redis_url=url, crawl_id=crawl_id, state=state,
                                     settings=settings, quiet=args.quiet))
    finally:
        if local is not None:
            local.stop()


# -- inspection and maintenance --------------------------------------------------------------


def _require_state_dir(path: str) -> Path:
    d = Path(path)
    if not d.is_dir():
        raise CrawlError(f"state directory {d}: not found")
    if not (d / "ledger.sqlite").exists():
        raise CrawlError(f"{d} is not a bloomcrawl state directory (no ledger.sqlite)")
    return d


def add_stats(sub: Any) -> None:
    p = sub.add_parser("stats", help="show a crawl's figures (also while it runs)",
                       description="Figures of a state directory (also while its crawl "
                       "runs), or of a directory of shard files such as `merge -o OUT` "
                       "writes (the filter's figures only: there is no ledger).")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_stats)


def state_stats(state_dir: str | Path) -> dict[str, Any]:
    """Figures of a state directory, read-only (safe next to a running crawl)."""
    d = _require_state_dir(str(state_dir))
    with UrlSeen(d, readonly=True) as seen:
        st = seen.stats()
        totals = seen.ledger.meta_get(TOTALS_KEY) or {}
        hosts = len(seen.ledger.queued_hosts())
        config = seen.ledger.meta_get("config")
    out: dict[str, Any] = {"state_dir": str(d), "hosts": hosts}
    out.update(st)
    out.update({k: v for k, v in totals.items() if isinstance(v, int)})
    if config is not None:
        out["config"] = config
    return out


def shard_dir_stats(directory: str | Path) -> dict[str, Any]:
    """Figures of a directory of shard files alone (what ``merge -o OUT`` writes from
    several workers: the fleet's seen-set), so that it can be inspected too."""
    d = Path(directory)
    bloom = ShardedBloom.load(d)
    head = read_header(ShardedBloom.shard_path(d, 0))
    return {"shard_dir": str(d), "crawl_id": head.crawl_id, "hwm": head.hwm, **bloom.info()}


def cmd_stats(args: argparse.Namespace) -> int:
    d = Path(args.dir)
    if (d.is_dir() and not (d / "ledger.sqlite").exists()
            and ShardedBloom.shard_path(d, 0).exists()):
        stats = shard_dir_stats(d)
        text = format_filter_stats(stats)
    else:
        stats = state_stats(args.dir)
        text = format_stats(stats)
    print(json.dumps(stats, sort_keys=True) if args.json else text)
    return 0


def add_check(sub: Any) -> None:
    p = sub.add_parser("check", help="Bloom and ledger answer for URLs")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("urls", nargs="+", metavar="URL")
    p.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    rc = 0
    with UrlSeen(_require_state_dir(args.dir), readonly=True) as seen:
        for url in args.urls:
            try:
                _, key = seen.canonicalizer.resolve(url)
                maybe, row = seen.check(url)
            except UrlRejected as exc:
                print(f"{url}\trejected: {exc}")
                rc = 1
                continue
            bloom = "maybe-seen" if maybe else "new"
            if row is None:
                ledger = "absent"
            else:
                ledger = f"{row['state']} seq={row['seq']} depth={row['depth']}"
                if row.get("status") is not None:
                    ledger += f" status={row['status']}"
                if row.get("error"):
                    ledger += f" error={row['error']!r}"
            print(f"{url}\tkey={key}\tbloom={bloom}\tledger={ledger}")
    return rc


def add_forget(sub: Any) -> None:
    p = sub.add_parser("forget", help="delete URLs from the ledger so they count as new")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("urls", nargs="+", metavar="URL")
    p.set_defaults(func=cmd_forget)


def cmd_forget(args: argparse.Namespace) -> int:
    rc = 0
    with UrlSeen(_require_state_dir(args.dir), create=False) as seen:
        usable = []
        for url in args.urls:
            try:
                seen.canonicalizer.resolve(url)
            except UrlRejected as exc:
                _warn(f"{url}: rejected: {exc}")
                rc = 1
                continue
            usable.append(url)
        n = seen.forget(usable)
    print(f"forgot {n} of {len(args.urls)} URL(s)")
    return rc


def add_merge(sub: Any) -> None:
    p = sub.add_parser("merge", help="OR shard files of several crawls/workers",
                       description="OR Bloom shard files of identical geometry, shard by "
                       "shard: given a fleet's worker state directories, the fleet's "
                       "seen-set. INPUT is a shard file, a directory of shard files, or a "
                       "state directory (whose shards are first brought up to date with its "
                       "ledger). OUT is a directory (its shards/ if it is a state directory).")
    p.add_argument("-o", "--output", required=True, metavar="OUT")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.add_argument("--state", action="store_true",
                   help="make OUT a new, complete state directory: the OR of the filters and "
                   "the union of the ledgers and pages.jsonl files (INPUTs: state "
                   "directories of one crawl or fleet); 'bloomcrawl resume OUT' continues "
                   "it as one process")
    p.set_defaults(func=cmd_merge)


def _catch_up(state_dir: Path) -> None:
    """Snapshot a state dir whose shard files lag its ledger (after a crash or kill)."""
    with Ledger(state_dir / "ledger.sqlite", readonly=True) as ledger:
        hwm = ledger.hwm()
    files = sorted((state_dir / "shards").glob("shard-*.bloom"))
    if files and all(read_header(f).hwm >= hwm for f in files):
        return
    try:
        with UrlSeen(state_dir, create=False) as seen:
            seen.snapshot()
    except StateLocked:
        _warn(f"{state_dir} is in use: its shard files may lack its newest URLs")


def _shard_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise CrawlError(f"merge input {path}: not found")
    folder = path / "shards" if (path / "shards").is_dir() else path
    files = sorted(folder.glob("shard-*.bloom"))
    if not files:
        raise CrawlError(f"merge input {path}: no shard files (shard-*.bloom)")
    return files


def cmd_merge(args: argparse.Namespace) -> int:
    if args.state:
        return _merge_states(args)
    for raw in args.inputs:
        if (Path(raw) / "ledger.sqlite").is_file():
            _catch_up(Path(raw))
    groups: dict[int, list[Path]] = {}
    counts: dict[int, Path] = {}
    dir_sets: dict[Path, set[int]] = {}
    for raw in args.inputs:
        path = Path(raw)
        for f in _shard_files(path):
            h = read_header(f)
            counts.setdefault(h.shard_count, f)
            groups.setdefault(h.shard_index, []).append(f)
            if path.is_dir():
                dir_sets.setdefault(path, set()).add(h.shard_index)
    if len(counts) > 1:
        (c1, f1), (c2, f2) = list(counts.items())[:2]
        raise GeometryMismatch(f"shard count differs: {f1} is one of {c1} shards, {f2} one of "
                               f"{c2}")
    if len({frozenset(s) for s in dir_sets.values()}) > 1:
        want = set().union(*dir_sets.values())
        for d, have in dir_sets.items():
            if have != want:
                raise CrawlError(f"merge input {d}: lacks shard(s) "
                                 f"{sorted(want - have)[:10]} that other inputs have")
    out = Path(args.output)
    if (out / "ledger.sqlite").exists():
        out = out / "shards"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CrawlError(f"output directory {out}: {exc.strerror or exc}") from None
    nfiles = sum(len(g) for g in groups.values())
    for index in sorted(groups):
        merge_files(ShardedBloom.shard_path(out, index), groups[index])
    print(f"merged {nfiles} shard file(s) into {len(groups)} shard(s) in {out}")
    return 0


def _merge_states(args: argparse.Namespace) -> int:
    from dedup.resize import merge_states

    ins = [_require_state_dir(raw) for raw in args.inputs]
    out = Path(args.output)
    result = merge_states(out, ins)
    with Ledger(out / "ledger.sqlite") as ledger:
        ledger.meta_set(FLEET_KEY, None)  # the union is no fleet worker: resumed alone
    pages = b"".join(_complete_lines(d / PAGES_FILE) for d in ins)
    atomic_write_bytes(out / PAGES_FILE, pages)
    print(f"merged {len(ins)} state directories into {out}: {result.rows} URLs "
          f"({result.duplicates} present in several inputs)")
    return 0


def _complete_lines(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return b""
    return data[:data.rfind(b"\n") + 1]


# -- resize ------------------------------------------------------------------------------------


def add_resize(sub: Any) -> None:
    p = sub.add_parser("resize", help="halve or double a stopped fleet",
                       description="Turn a stopped fleet of W workers (DIR/worker-I) into a "
                       "new fleet directory of W/2 workers (worker I and I + W/2 merged) or "
                       "2W (each worker's filter copied to both new owners, its ledger and "
                       "pages.jsonl split by the new owner function). The fleet's "
                       "un-acknowledged links in Redis are re-routed to their new owners. "
                       "Continue with 'bloomcrawl resume NEWDIR'.")
    p.add_argument("--from-state", required=True, metavar="DIR", help="the fleet directory")
    p.add_argument("--to", required=True, type=_int_at_least(1), metavar="W2")
    p.add_argument("-o", "--output", required=True, metavar="NEWDIR")
    p.add_argument("--redis", metavar="URL",
                   help=f"the fleet's Redis (or ${REDIS_ENV}); default: the recorded one")
    p.set_defaults(func=cmd_resize)


def cmd_resize(args: argparse.Namespace) -> int:
    fd = read_fleet_dir(args.from_state)
    url = args.redis or (os.environ.get(REDIS_ENV) if fd.redis != LOCAL else None)
    dirs = resize_fleet(fd, args.to, Path(args.output), redis_url=url,
                        progress=lambda m: print(m))
    print(f"resized {fd.workers} workers into {len(dirs)} in {args.output} (continue with: "
          f"bloomcrawl resume {args.output})")
    return 0


def add_rebuild(sub: Any) -> None:
    p = sub.add_parser("rebuild", help="recreate the shard files from the ledger")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(func=cmd_rebuild)


def cmd_rebuild(args: argparse.Namespace) -> int:
    d = _require_state_dir(args.dir)
    seen = UrlSeen.rebuild(d)
    try:
        n = len(seen.ledger)
        shards = seen.nshards
    finally:
        seen.close()
    print(f"rebuilt {shards} shard file(s) in {d / 'shards'} from {n} ledger row(s)")
    return 0


# -- entry point -------------------------------------------------------------------------------

COMMANDS: list[Callable[[Any], None]] = [
    add_crawl, add_resume, add_fleet, add_stats, add_check, add_forget, add_merge, add_resize,
    add_rebuild,
]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="A crawler whose URL-seen test is a persistent, "
                     "sharded Bloom filter confirmed by an exact SQLite ledger.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for register in COMMANDS:
        register(sub)
    return parser


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename is not None else ""
        return f"{where}: {exc.strerror}" if where else exc.strerror
    return str(exc) or type(exc).__name__


_USER_ERRORS = (CrawlError, SeedError, ConfigError, SnapshotError, StateLocked, sqlite3.Error,
                OSError, ValueError, FleetError)


def _user_errors() -> tuple[type[BaseException], ...]:
    """The error types shown as one line; the Redis ones only if Redis was used (imported)."""
    transport = sys.modules.get("crawler.fleet.monitor")
    return _USER_ERRORS + ((transport.TransportError,) if transport is not None else ())


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format=f"{PROG}: warning: %(message)s",
                        stream=sys.stderr)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        _err(str(exc))
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    try:
        return int(args.func(args))
    except UsageError as exc:
        _err(str(exc))
        return 2
    except Exception as exc:
        if not isinstance(exc, _user_errors()):
            raise
        if os.environ.get("BLOOMCRAWL_DEBUG"):
            traceback.print_exc()
        _err(_describe(exc))
        return 1
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
