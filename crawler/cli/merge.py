"""``bloomcrawl merge`` and ``bloomcrawl resize``: combine crawls, reshape a fleet."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from crawler.admin.merge import merge_shard_files, merge_state_dirs
from crawler.cli.args import describe, int_at_least, warn
from crawler.fleet.identity import LOCAL, REDIS_ENV, read_fleet_dir
from crawler.fleet.resize import resize_fleet

__all__ = ["add_merge", "add_resize"]


def add_merge(sub: Any) -> None:
    p = sub.add_parser("merge", help="OR shard files of several crawls/workers",
                       description=describe(cmd_merge))
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="directory to write the merged shard files to (a state "
                   "directory's shards/ if OUT is one)")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="shard files, directories of shard files or state directories")
    p.add_argument("--state", action="store_true",
                   help="make OUT a new, complete state directory: the OR of the filters and "
                   "the union of the ledgers and pages.jsonl files (INPUTs: state "
                   "directories of one crawl or fleet); 'bloomcrawl resume OUT' continues "
                   "it as one process (default: shard files only)")
    p.set_defaults(func=cmd_merge)


def cmd_merge(args: argparse.Namespace) -> int:
    """OR Bloom shard files of identical geometry, shard by shard: given a fleet's worker
    state directories, the fleet's seen-set. INPUT is a shard file, a directory of shard
    files, or a state directory (whose shards are first brought up to date with its
    ledger). OUT is a directory (its shards/ if it is a state directory)."""
    if args.state:
        m = merge_state_dirs(args.inputs, args.output)
        t = m.totals
        print(f"merged {len(args.inputs)} state directories into {Path(args.output)}: "
              f"{m.rows} URLs ({m.duplicates} present in several inputs), {m.pages} "
              f"pages.jsonl records on {m.hosts} host(s); dedup (whole crawl, every input): "
              f"{t.get('links', 0)} links checked: {t.get('new', 0)} new, "
              f"{t.get('repeats', 0)} repeats")
        return 0
    merged = merge_shard_files(args.inputs, args.output, warn)
    print(f"merged {merged.files} shard file(s) into {merged.shards} shard(s) in "
          f"{merged.output}")
    return 0


def add_resize(sub: Any) -> None:
    p = sub.add_parser("resize", help="halve or double a stopped fleet",
                       description=describe(cmd_resize))
    p.add_argument("--from-state", required=True, metavar="DIR", help="the fleet directory")
    p.add_argument("--to", required=True, type=int_at_least(1), metavar="W2",
                   help="the new number of workers: half or double the fleet's")
    p.add_argument("-o", "--output", required=True, metavar="NEWDIR",
                   help="new directory for the resized fleet")
    p.add_argument("--redis", metavar="URL",
                   help=f"the fleet's Redis (or ${REDIS_ENV}); default: the recorded one")
    p.set_defaults(func=cmd_resize)


def cmd_resize(args: argparse.Namespace) -> int:
    """Turn a stopped fleet of W workers (DIR/worker-I) into a new fleet directory of W/2
    workers (worker I and I + W/2 merged) or 2W (each worker's filter copied to both new
    owners, its ledger and pages.jsonl split by the new owner function). The fleet's
    un-acknowledged links in Redis are re-routed to their new owners. Continue with
    'bloomcrawl resume NEWDIR'."""
    fd = read_fleet_dir(args.from_state)
    url = args.redis or (os.environ.get(REDIS_ENV) if fd.redis != LOCAL else None)
    dirs = resize_fleet(fd, args.to, Path(args.output), redis_url=url,
                        progress=lambda m: print(m))
    print(f"resized {fd.workers} workers into {len(dirs)} in {args.output} (continue with: "
          f"bloomcrawl resume {args.output})")
    return 0
