"""``bloomcrawl`` command line: crawl, resume, and the dedup tools around a state dir.

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
import sqlite3
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from crawler.engine import (
    TOTALS_KEY,
    CrawlError,
    create_crawl,
    open_crawl,
    run_crawl,
)
from crawler.progress import Progress, format_stats
from crawler.scope import SeedError, normalize_domain
from crawler.settings import ConfigError, Settings, load_settings
from dedup import GeometryMismatch, SnapshotError, StateLocked, UrlRejected, UrlSeen
from dedup.shards import ShardedBloom
from dedup.snapshot import merge_files, read_header

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


def cmd_crawl(args: argparse.Namespace) -> int:
    settings = crawl_settings(args)
    seen, scope, problems = create_crawl(args.state, settings, args.seeds)
    for problem in problems:
        _warn(f"{problem} (skipped)")
    try:
        asyncio.run(run_crawl(seen, settings, scope, progress=_progress(settings, args.quiet),
                              install_signals=True))
    finally:
        seen.close()
    return 0


def add_resume(sub: Any) -> None:
    p = sub.add_parser("resume", help="continue a stopped or crashed crawl",
                       description="Continue a crawl with the configuration it was started "
                       "with: queued and interrupted URLs are fetched, nothing seen is "
                       "fetched again.")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--quiet", action="store_true", help="no status line, no summary")
    p.set_defaults(func=cmd_resume)


def cmd_resume(args: argparse.Namespace) -> int:
    seen, settings, scope = open_crawl(args.dir)
    try:
        asyncio.run(run_crawl(seen, settings, scope, progress=_progress(settings, args.quiet),
                              install_signals=True))
    finally:
        seen.close()
    return 0


# -- inspection and maintenance --------------------------------------------------------------


def _require_state_dir(path: str) -> Path:
    d = Path(path)
    if not d.is_dir():
        raise CrawlError(f"state directory {d}: not found")
    if not (d / "ledger.sqlite").exists():
        raise CrawlError(f"{d} is not a bloomcrawl state directory (no ledger.sqlite)")
    return d


def add_stats(sub: Any) -> None:
    p = sub.add_parser("stats", help="show a crawl's figures (also while it runs)")
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


def cmd_stats(args: argparse.Namespace) -> int:
    stats = state_stats(args.dir)
    if args.json:
        print(json.dumps(stats, sort_keys=True))
    else:
        print(format_stats(stats))
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
                       "shard. INPUT is a shard file, a directory of shard files, or a state "
                       "directory. OUT is a directory (its shards/ if it is a state directory).")
    p.add_argument("-o", "--output", required=True, metavar="OUT")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.set_defaults(func=cmd_merge)


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
    add_crawl, add_resume, add_stats, add_check, add_forget, add_merge, add_rebuild,
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
                OSError, ValueError)


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
    except _USER_ERRORS as exc:
        if os.environ.get("BLOOMCRAWL_DEBUG"):
            traceback.print_exc()
        _err(_describe(exc))
        return 1
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
