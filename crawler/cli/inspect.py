"""``bloomcrawl stats``, ``check``, ``forget`` and ``rebuild``: look into a state dir,
or repair it, without crawling."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from crawler.admin.report import fleet_stats, is_shard_dir, shard_dir_stats, state_stats
from crawler.cli.args import describe, int_at_least, warn
from crawler.core.run.progress import format_filter_stats, format_fleet_stats, format_stats
from crawler.core.state.state import require_state_dir
from crawler.fleet.identity import is_fleet_dir, read_fleet_dir
from dedup import Diagnosis, IndexDamaged, StateLocked, UrlRejected, UrlSeen, diagnose, in_use

__all__ = ["add_check", "add_forget", "add_migrate", "add_rebuild", "add_repair", "add_stats"]


def add_stats(sub: Any) -> None:
    p = sub.add_parser("stats", help="show a crawl's figures (also while it runs)",
                       description=describe(cmd_stats))
    p.add_argument("dir", metavar="DIR",
                   help="a crawl's state directory, a fleet directory or a directory of "
                   "shard files")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (default: lines of text)")
    p.set_defaults(func=cmd_stats)


def cmd_stats(args: argparse.Namespace) -> int:
    """Figures of a state directory (also while its crawl runs), of a fleet directory (the
    fleet's totals and a line per worker), or of a directory of shard files such as
    `merge -o OUT` writes (the filter's figures only: there is no ledger).
    Every file of the fingerprint index is checked: a damaged one is an error (exit
    status 1) after the figures."""
    d = Path(args.dir)
    if is_fleet_dir(d):
        fd = read_fleet_dir(d)
        stats = fleet_stats(d, fd.crawl_id, [fd.worker(i) for i in range(fd.workers)])
        text = format_fleet_stats(stats)
    elif is_shard_dir(args.dir):
        stats = shard_dir_stats(args.dir)
        text = format_filter_stats(stats)
    else:
        stats = state_stats(args.dir)
        text = format_stats(stats)
    print(json.dumps(stats, sort_keys=True) if args.json else text)
    if stats.get("index_damage"):
        raise IndexDamaged(stats["index_damage"])
    return 0


def _add_url_command(sub: Any, name: str, help: str, func: Any) -> None:
    """A command over a state dir and some URLs (``check``, ``forget``)."""
    p = sub.add_parser(name, help=help, description=describe(func))
    p.add_argument("dir", metavar="DIR", help="a crawl's state directory")
    p.add_argument("urls", nargs="+", metavar="URL",
                   help="URLs, canonicalized with the crawl's rules")
    p.set_defaults(func=func)


def add_check(sub: Any) -> None:
    _add_url_command(sub, "check", "Bloom and ledger answer for URLs", cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    """For each URL: its canonical form and key, the Bloom filter's answer (new or
    maybe-seen) and the ledger's (absent, or its state, depth, status and error).
    Read-only, safe next to a running crawl; exit status 1 if a URL is rejected."""
    rc = 0
    with UrlSeen(require_state_dir(args.dir), readonly=True) as seen:
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
    _add_url_command(sub, "forget", "forget URLs in the ledger so they count as new", cmd_forget)


def cmd_forget(args: argparse.Namespace) -> int:
    """Re-crawl: append a tombstone for each URL to the ledger, so that the next time a
    page links to one it counts as new (the Bloom filter's 'maybe seen' is confirmed in the
    ledger, which now says forgotten); a forgotten URL still queued leaves the frontier.
    The crawl must be stopped."""
    rc = 0
    with UrlSeen(require_state_dir(args.dir), create=False) as seen:
        usable = []
        for url in args.urls:
            try:
                seen.canonicalizer.resolve(url)
            except UrlRejected as exc:
                warn(f"{url}: rejected: {exc}")
                rc = 1
                continue
            usable.append(url)
        n = seen.forget(usable)
    print(f"forgot {n} of {len(args.urls)} URL(s)")
    return rc


def _add_dir_command(sub: Any, name: str, help: str, func: Any) -> None:
    """A maintenance command on one stopped crawl's state directory."""
    p = sub.add_parser(name, help=help, description=describe(func))
    p.add_argument("dir", metavar="DIR", help="a crawl's state directory")
    p.set_defaults(func=func)


def add_rebuild(sub: Any) -> None:
    _add_dir_command(sub, "rebuild", "recreate the fingerprint index and the shard files "
                     "from the ledger", cmd_rebuild)


def cmd_rebuild(args: argparse.Namespace) -> int:
    """Recreate what is derived from a stopped crawl's ledger (the record of truth): the
    fingerprint index (ledger.index/) and every shard file, without reading the old ones:
    after a damaged or deleted run, MANIFEST or shard file. Each is replaced atomically.
    The crawl must be stopped."""
    d = require_state_dir(args.dir)
    seen = UrlSeen.rebuild(d)
    try:
        n = len(seen)
        shards = seen.nshards
        index = seen.index_stats()
    finally:
        seen.close()
    print(f"rebuilt the fingerprint index ({sum(index['run_records'])} record(s) in "
          f"{index['runs']} run(s)) and {shards} shard file(s) in {d} from {n} ledger row(s)")
    return 0


def add_migrate(sub: Any) -> None:
    _add_dir_command(sub, "migrate", "bring a state dir written by bloomcrawl 0.1 (ledger "
                     "format 1) to format 2", cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    """Rewrite a format-1 ledger as format 2 in place, keeping the old one as
    ledger.v1.sqlite, and rebuild the shard files. Safe to run again after an interruption.
    The crawl must be stopped."""
    from dedup import V1_BACKUP, migrate

    n = migrate(args.dir)
    print(f"migrated {n} ledger row(s) in {args.dir} to format 2 "
          f"(the format-1 ledger is kept as {V1_BACKUP})")
    return 0


def add_repair(sub: Any) -> None:
    p = sub.add_parser("repair", help="recover a damaged ledger (database disk image is "
                       "malformed, a damaged WAL); rebuild a damaged index or shard file",
                       description=describe(cmd_repair))
    p.add_argument("dir", metavar="DIR", help="a crawl's state directory")
    p.add_argument("--refetch", type=int_at_least(0), metavar="N", default=None,
                   help="fetch at most N recorded pages again to find queued URLs the "
                   "ledger lost (default: as many as it takes; 0: none, offline)")
    p.set_defaults(func=cmd_repair)


def cmd_repair(args: argparse.Namespace) -> int:
    """Check a stopped crawl's ledger (SQLite's structure check, every row against its
    checksum, the WAL's frames) and, if it is damaged, copy every readable row that
    agrees with pages.jsonl into a new one (the damaged files are kept beside it as
    *.damaged-TIME), put back every page pages.jsonl records, and rebuild the index
    and the shard files; then 'bloomcrawl resume DIR' goes on. Always ends, in time
    proportional to the file. A ledger of which nothing is readable is rebuilt from
    pages.jsonl and the settings copy the crawl keeps (crawl-settings.json). Queued
    URLs whose text was lost are found again in the links of the recorded pages
    (the fingerprint index says which URLs; the WARC's copy of a page, else the page
    fetched again, politely, writing nothing to the output, at most --refetch of
    them), and what stays lost is counted. A whole ledger is kept as it is, and only
    a damaged fingerprint index or shard file is rebuilt from it (nothing lost)."""
    from crawler.admin.repair import DAMAGED, UNRECORDED, repair_state_dir

    d = require_state_dir(args.dir)
    if in_use(d):  # checked before reading: a live writer's WAL may look torn
        raise StateLocked(f"{d}: in use by another bloomcrawl process")
    found = diagnose(d)
    if not found.ledger_damaged:
        return _repair_derived(d, found)
    done = repair_state_dir(d, refetch=getattr(args, "refetch", None))
    report, restored = done.report, done.restored
    if not report.damage.journal:
        print(f"checked {d}: the ledger reads and every row matches its checksum: kept as "
              "it is; the shard files were rebuilt")
        if restored:
            print(f"  {restored} page(s) put back from pages.jsonl")
        print(f"next: bloomcrawl resume {args.dir}")
        return 0
    kept = ", ".join(f"{t} {n}" for t, n in report.kept.items())
    print(f"repaired {d}: {report.rows} URL(s) in the new ledger (rows read: {kept}; "
          f"{report.probes} range reads)")
    if report.damage.ledger:
        print(f"  damage: {report.damage.ledger}")
    lost = {t: n for t, n in report.bad_ranges.items() if n}
    if lost:
        print("  unreadable: " + ", ".join(f"{t} {n} stretch(es) of rows" for t, n in lost.items()))
    bad = {t: n for t, n in report.bad_rows.items() if n}
    if bad:
        print("  failing their checksum (dropped): "
              + ", ".join(f"{t} {n} row(s)" for t, n in bad.items()))
    if report.meta_from and "config" in report.meta_from:
        print(f"  the crawl's settings ({', '.join(report.meta_from)}) came from its "
              "crawl-settings.json: the ledger's were unreadable; the dedup totals of "
              "earlier runs (links, repeats) start again from 0")
    elif report.meta_from:
        print(f"  the ledger's settings were unreadable and there is no crawl-settings.json: "
              f"{', '.join(report.meta_from)} came from the shard files; the crawl's frozen "
              "configuration and scope are lost (resume refuses without them: stats, check "
              "and merge work; start a new crawl with the same seeds and config, or restore "
              "the ledger from a backup)")
    if report.wal_damage:
        print(f"  {report.wal_damage}: the transactions after that frame are lost (their "
              "pages are put back from pages.jsonl, their queued URLs looked for below)")
    if report.orphans:
        print(f"  {len(report.orphans)} queued URL(s) whose admission was unreadable were "
              "queued again")
    if report.lost_seqs:
        print(f"  {report.lost_seqs} admission(s) unreadable: their URLs are put back where "
              "their queued text, pages.jsonl or the WARC hold them")
    if report.bad_ranges.get("notes") or report.bad_rows.get("notes"):
        print("  notes rows were damaged: the pages.jsonl records of the queued URLs they "
              "covered will name no referrer")
    if report.dropped.get(UNRECORDED):
        print(f"  {report.dropped[UNRECORDED]} URL(s) marked done with no record in "
              "pages.jsonl were dropped (their rows were damaged)")
    if restored:
        print(f"  {restored} page(s) put back from pages.jsonl")
    _print_refound(done, report.frontier_lost + report.dropped.get(DAMAGED, 0))
    for p in report.set_aside:
        print(f"  kept the damaged file as {p}")
    print(f"next: bloomcrawl resume {args.dir}")
    return 0


def _print_refound(done: Any, dropped: int) -> None:
    """What the search for the lost frontier found, and exactly what stays lost."""
    found = done.refound
    if dropped:
        print(f"  {dropped} queued URL(s) lost their text (their rows were damaged)")
    if found is None:
        if done.config_lost:
            print("  queued URLs whose text was lost were not looked for: the crawl's "
                  "configuration is lost")
        return
    if found.in_output:
        print(f"  {found.in_output} queued URL(s) found again in the links of the recorded "
              "pages (the WARC's pages, redirects) and queued again")
    if found.fetched:
        print(f"  {found.fetched} recorded page(s) fetched again (nothing written to the "
              f"output): {found.by_fetch} queued URL(s) found again in their links and queued "
              f"again" + (f"; {found.unanswered} gave no HTML page" if found.unanswered else ""))
    if found.lost is None:
        print("  the fingerprint index is unreadable too: how many queued URLs left the "
              "frontier is unknown (a page linking to one admits it again)")
    elif found.missing:
        why = (f"{found.left} more recorded page(s) could hold them: repair again with a "
               "higher --refetch" if found.left else
               "no recorded page links to them any more (seeds, sitemap URLs, pages that "
               "changed or did not answer)")
        print(f"  {found.missing} queued URL(s) stay lost: {why}")
    elif found.lost:
        print(f"  all {found.lost} queued URL(s) the ledger lost were found again")


def _repair_derived(d: Path, found: Diagnosis) -> int:
    """``repair`` of a state dir whose ledger is whole: it is kept as it is, and only
    the damaged derived parts (index, shard files) are rebuilt from it."""
    print(f"checked {d}: the ledger reads and every row matches its checksum (the WAL's "
          "frames too): kept as it is")
    if not found.derived_damaged:
        print(f"  the fingerprint index ({found.index_records} record(s)) and the shard "
              "files are whole too: nothing to repair, nothing changed")
        return 0
    if found.index:
        print(f"  damaged fingerprint index: {found.index}")
    for line in found.shards:
        print(f"  unusable shard file: {line}")
    UrlSeen.rebuild(d, index=bool(found.index), shards=bool(found.shards)).close()
    parts = (["the fingerprint index"] if found.index else []) + (
        ["the shard files"] if found.shards else [])
    print(f"rebuilt {' and '.join(parts)} from the ledger: nothing was lost")
    print(f"next: bloomcrawl resume {d}")
    return 0
