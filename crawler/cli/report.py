"""``bloomcrawl report DIR -o FILE``: the dashboard's charts over a whole crawl, as one
HTML file that opens without a network."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from crawler.admin.htmlreport import write_report
from crawler.cli.args import describe
from crawler.core.state.state import CrawlError
from crawler.fleet.identity import is_fleet_dir, read_fleet_dir

__all__ = ["add_report"]


def add_report(sub: Any) -> None:
    p = sub.add_parser("report", help="write a crawl's charts as one self-contained HTML file",
                       description=describe(cmd_report))
    p.add_argument("dir", metavar="DIR", help="a crawl's state directory or a fleet directory")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the HTML file to write (replaced whole)")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    """Charts over the whole crawl (pages/s and bytes/s over time, status codes,
    failures by cause, top hosts, frontier size, Bloom filter fill, ledger and index
    size, recent errors) from its state dir and pages.jsonl, as one HTML file with
    everything inline: it opens from disk, sent on, without a network. Read-only,
    safe next to a running crawl; a fleet directory reports every worker."""
    d = Path(args.dir)
    if not d.is_dir():
        raise CrawlError(f"{d}: not a directory")
    out = Path(args.output)
    if out.is_dir():
        raise CrawlError(f"{out}: is a directory; give a file name (e.g. {out}/report.html)")
    started = time.monotonic()
    fleet = read_fleet_dir(d) if is_fleet_dir(d) else None
    dirs = [fleet.worker(i) for i in range(fleet.workers)] if fleet is not None else None
    doc = write_report(d, out, dirs)
    what = f"{len(doc['workers'])} workers" if fleet is not None else "crawl"
    pages = sum(doc["status_codes"].values())
    sys.stderr.write(f"bloomcrawl: wrote {out} ({what}, {pages} pages.jsonl records, "
                     f"{time.monotonic() - started:.1f} s)\n")
    return 0
