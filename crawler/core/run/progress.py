"""The live status line and the final summary (stderr), and their data.

Why a plain dict of numbers in between: the same figures are shown live, in
the summary, by ``bloomcrawl stats DIR`` for a stopped crawl, and as JSON, so
the formatting functions take a dict and never reach into the engine.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from crawler.core.state.pagecounts import (
    format_host_failures,
    refused,
    reopened,
    top_failed_hosts,
)
from crawler.core.state.state import COUNTER_KEYS

__all__ = [
    "LIMIT_REACHED",
    "THIS_RUN",
    "WHOLE_CRAWL",
    "Progress",
    "SessionCounts",
    "crawl_status",
    "format_filter_stats",
    "format_fleet_stats",
    "format_stats",
    "format_status",
    "format_summary",
    "label",
    "refused_lines",
    "si",
    "write_text",
]

LIMIT_REACHED = "max pages reached"  # the outcome of a crawl stopped by --max-pages


def write_text(stream: TextIO, text: str, *, tries: int = 5) -> bool:
    """Write ``text`` to ``stream`` (stderr) now, trying again when a write fails: a
    write error on stderr must not lose the one line that says what went wrong.
    False if it still fails.

    Why to its file descriptor: stderr's text layer may write straight to the file
    (unbuffered, as with ``python -u``), where a failed write is simply lost, or
    through a buffer, where it is kept for the next flush; which one is not known
    here, so the stream's own buffer is flushed and the text goes to the descriptor
    with ``os.write``, each byte once. A stream with no descriptor (a test's) is
    written to as a stream."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = -1
    if fd < 0:
        with contextlib.suppress(OSError):
            stream.write(text)
            stream.flush()
            return True
        return False
    for _ in range(tries):
        try:
            stream.flush()
            break
        except OSError:
            continue
    data = memoryview(text.encode(getattr(stream, "encoding", None) or "utf-8",
                                  "backslashreplace"))
    failed = 0
    while data:
        try:
            data = data[os.write(fd, data):]
        except OSError:
            failed += 1
            if failed >= tries:
                return False
    return True


def si(n: float) -> str:
    """A count in at most five characters: 950, 12.3k, 4.5M."""
    n = float(n)
    for unit in ("", "k", "M", "G"):
        if abs(n) < 1000 or unit == "G":
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}G"  # pragma: no cover


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%" if x < 0.1 else f"{100 * x:.1f}%"


def format_status(s: dict[str, Any]) -> str:
    """One line of at most 80 columns: rate, pages, failures, new URLs, filter fill.

    Every count is at most five characters (``si``), so the line never grows past
    80 columns whatever the crawl's size; the rest is in the summary and ``stats``.
    """
    rate = s.get("rate", 0.0)
    rate_text = f"{rate:5.1f}" if rate < 1000 else f"{si(rate):>5}"
    return (
        f"{rate_text}/s | fetched {si(s['fetched'])} failed "
        f"{si(s.get('failed', s.get('errors', 0)))} queued {si(s['queued'])} | "
        f"new {si(s['new'])} fill {_pct(s['fill'])}"
    )


# hosts named with their failures' causes in the summary and ``stats``
TOP_HOSTS = 5


def _pages_line(s: dict[str, Any]) -> str:
    """Pages fetched (responses, any status) and failed (no response, by cause)."""
    causes = sorted((s.get("failed_causes") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    why = ", ".join(f"{n} {cause}" for cause, n in causes)
    given_up = s.get("given_up", 0)
    return (f"{s['fetched']} fetched (responses received, {s.get('fetched_with_errors', 0)} "
            f"with errors: 4xx, 5xx, not HTML), {s['failed']} failed"
            + (f" ({why})" if why else "")
            + (f", {given_up} given up (retries spent, or an error no retry mends)"
               if given_up else ""))


# What a figure of a summary counts: every run of the crawl, or this run (process)
# only. Every summary line says which with ``label`` (a crawl's summary, ``stats``, a
# fleet's), so that a resume never shows this run's links beside the whole crawl's
# pages without saying so.
WHOLE_CRAWL = "whole crawl"
THIS_RUN = "this run"


def label(name: str, span: str) -> str:
    """The start of a summary line: ``"  pages (whole crawl): "``; ``span`` is
    ``WHOLE_CRAWL`` or ``THIS_RUN``."""
    return f"  {name} ({span}): "


def _sitemap_lines(s: dict[str, Any]) -> list[str]:
    """What the sitemap files came to (they are no pages), when the crawl reads them."""
    c = s.get("sitemaps")
    if not c:
        return []
    return [f"{label('sitemaps', WHOLE_CRAWL)}{c['fetched']} fetched ({c['with_errors']} "
            f"with errors), {c['failed']} failed, {c['skipped']} disallowed by robots.txt: "
            f"{c['urls']} URLs listed, {c['new']} of them new"]


def _host_lines(s: dict[str, Any]) -> list[str]:
    """The hosts with the most failures, each with its causes."""
    hosts = s.get("failed_hosts") or {}
    top = top_failed_hosts(hosts, TOP_HOSTS)
    lines = [f"  host:   {format_host_failures(*row)}" for row in top]
    if len(hosts) > len(top):
        lines.append(f"          ... and {len(hosts) - len(top)} more host(s) with failures")
    return lines


def _learn_lines(s: dict[str, Any]) -> list[str]:
    """What learning did: rules, fetches it saved, trap budgets it closed."""
    learn = s.get("learn")
    if not learn or not (learn["rules"] or learn["revoked"] or learn["budgets"]
                         or learn["saved_by_rules"] or learn["saved_by_budgets"]):
        return []
    line = (f"{label('learn', WHOLE_CRAWL)}{learn['rules']} URL rule(s) on "
            f"{learn['hosts']} host(s)"
            + (f" ({learn['revoked']} revoked)" if learn["revoked"] else "")
            + f": {learn['saved_by_rules']} duplicate(s) not fetched ({learn['checks']} "
            f"fetched anyway as checks), {learn['saved_by_budgets']} URL(s) held by "
            f"{len(learn['budgets'])} trap budget(s)")
    sk = learn.get("skipped") or {}
    if sk.get("aliases"):
        line += f"; skipped also counts {sk['aliases']} learned rule key(s) of fetched pages"
    lines = [line]
    budgets = sorted(learn["budgets"], key=lambda b: -b["held"])
    if budgets:
        shown = ", ".join(f"{b['host']} {b['pattern']} ({b['held']} held)"
                          for b in budgets[:TOP_HOSTS])
        more = f", ... and {len(budgets) - TOP_HOSTS} more" if len(budgets) > TOP_HOSTS else ""
        lines.append(f"          no new content, stopped: {shown}{more} "
                     "(bloomcrawl rules DIR lists them)")
    return lines


def _dedup_figures(c: dict[str, Any]) -> str:
    """The seen-test's counters: links checked, new, repeats, false positives."""
    return (f"{c.get('links', 0)} links checked: {c.get('new', 0)} new, "
            f"{c.get('repeats', 0)} repeats")


def refused_lines(s: dict[str, Any]) -> list[str]:
    """The pages refused as private addresses, and the command that fetches them
    (``state_dir``: a crawl's, or a fleet's directory)."""
    n = s.get("refused", 0)
    if not n:
        return []
    where = s.get("state_dir") or "DIR"
    return [f"{label('refused', WHOLE_CRAWL)}{n} URL(s) on private, loopback or link-local "
            f"addresses; fetch them with: bloomcrawl resume {where} --allow-private"]


def format_summary(s: dict[str, Any]) -> str:
    """Multi-line end-of-run report: each line labelled with what it counts (``label``)."""
    elapsed = s.get("elapsed", 0.0)
    totals = s.get("totals")
    lines = [
        f"bloomcrawl: {s.get('outcome', 'done')} after {elapsed:.1f} s: "
        f"{s['session_pages']} pages this run ({s['session_pages'] / elapsed if elapsed else 0:.1f}"
        f" pages/s)",
        f"{label('pages', WHOLE_CRAWL)}{_pages_line(s)}, {s['skipped']} skipped, "
        f"{s['queued']} still queued",
        *_host_lines(s),
        *_sitemap_lines(s),
        *refused_lines(s),
        *([f"{label('items', THIS_RUN)}{s['items']} written to items.jsonl, "
           f"{s['handler_errors']} page(s) whose handler raised (handler_error in "
           "pages.jsonl)"] if "items" in s else []),
        f"{label('dedup', THIS_RUN)}{_dedup_figures(s)} "
        f"({s['confirm_cache_hits']} confirmed from cache, {s['ledger_queries']} ledger "
        f"queries), {s['false_positives']} Bloom false positives, {s['rejected']} rejected",
        *_learn_lines(s),
        *([f"{label('dedup', WHOLE_CRAWL)}{_dedup_figures(totals)}"]
          if totals and totals.get("links") != s.get("links") else []),
        f"{label('filter', WHOLE_CRAWL)}fill {_pct(s['fill'])}, ~{s['estimated_count']} URLs, "
        f"expected FPR {s['expected_fpr']:.2e}, {s['layers']} layer(s), {s['shards']} shards",
    ]
    if s.get("state_dir"):
        lines.append(f"  state:  {s['state_dir']}" + _continue_with(s))
    return "\n".join(lines)


def _continue_with(s: dict[str, Any]) -> str:
    """How to go on: a crawl stopped by its page limit goes on only with a higher one."""
    if s.get("outcome") == LIMIT_REACHED and s["queued"]:
        return (f"  (its page limit is reached; continue with a higher one: bloomcrawl "
                f"resume {s['state_dir']} --max-pages N)")
    return f"  (continue with: bloomcrawl resume {s['state_dir']})" if s["queued"] else ""


def format_stats(s: dict[str, Any]) -> str:
    """``bloomcrawl stats DIR`` for a stopped (or running) crawl."""
    lines = [
        f"crawl {s['crawl_id']} in {s['state_dir']}",
        f"{label('pages', WHOLE_CRAWL)}{_pages_line(s)}, {s['skipped']} skipped, "
        f"{s['queued']} queued, {s['hosts']} host(s) with queued URLs",
        *_host_lines(s),
        *_sitemap_lines(s),
        *refused_lines(s),
        _dedup_stats_line(s),
        *_learn_lines(s),
        f"{label('filter', WHOLE_CRAWL)}fill {_pct(s['fill'])}, ~{s['estimated_count']} URLs "
        f"(capacity {s['capacity']}), expected FPR {s['expected_fpr']:.2e} "
        f"(target {s['error_rate']}), {s['layers']} layer(s), {s['shards']} shards",
    ]
    if s.get("damaged_shards"):
        lines.append(f"  damaged shard files (rebuilt from the ledger in memory): "
                     f"{s['damaged_shards']}")
    return "\n".join(lines)


def _dedup_stats_line(s: dict[str, Any]) -> str:
    return (f"{label('dedup', WHOLE_CRAWL)}{_dedup_figures(s)}, {s['false_positives']} Bloom "
            f"false positives, {s['rejected']} rejected")


def format_fleet_stats(f: dict[str, Any]) -> str:
    """``bloomcrawl stats FLEETDIR``: the fleet's totals, then a line per worker
    (``crawler.admin.report.fleet_stats``)."""
    t = f["totals"]
    fills = [w["fill"] for w in f["per_worker"]]
    lines = [
        f"fleet {f['crawl_id']} of {f['workers']} workers in {f['fleet_dir']}",
        f"{label('pages', WHOLE_CRAWL)}{_pages_line(t)}, {t['skipped']} skipped, "
        f"{t['queued']} queued, {t['hosts']} host(s) with queued URLs",
        *_host_lines(t),
        *_sitemap_lines(t),
        _dedup_stats_line(t),
        f"{label('filter', WHOLE_CRAWL)}{f['workers']} filters, one per worker: fill "
        f"{_pct(min(fills))} to "
        f"{_pct(max(fills))}, ~{t['estimated_count']} URLs in all (capacity "
        f"{t['capacity']} in all), expected FPR {t['expected_fpr']:.2e} (mean), "
        f"{t['shards']} shards each",
    ]
    for i, w in enumerate(f["per_worker"]):
        limit = int((w.get("config") or {}).get("crawl", {}).get("max_pages") or 0)
        reached = limit and w["fetched"] + w["failed"] >= limit
        lines.append(
            f"  worker {i}: {w['fetched']} fetched, {w['failed']} failed, {w['skipped']} "
            f"skipped, {w['queued']} queued ({w['hosts']} host(s)), {w['links']} links "
            f"checked, {w['new']} new, fill {_pct(w['fill'])}"
            + (f", page limit {limit} reached" if reached else "")
            + ("" if w["links"] or w["queued"] else "  (no work: it owns no host reached)"))
    return "\n".join(lines)


def format_filter_stats(s: dict[str, Any]) -> str:
    """``bloomcrawl stats DIR`` for a directory of shard files only (no ledger)."""
    crawl = f"crawl {s['crawl_id']}" if s["crawl_id"] else "no crawl id"
    return "\n".join([
        f"shard files of {crawl} in {s['shard_dir']} (no ledger: the filter alone)",
        f"  filter: fill {_pct(s['fill'])} (shards {_pct(s['fill_min'])} to "
        f"{_pct(s['fill_max'])}), ~{s['estimated_count']} URLs (capacity {s['capacity']}), "
        f"expected FPR {s['expected_fpr']:.2e} (target {s['error_rate']}), "
        f"{s['layers']} layer(s), {s['shards']} shards, {s['bytes']} bytes",
    ])


class Progress:
    """Writes the status line: redrawn in place on a TTY, periodic plain lines otherwise."""

    def __init__(self, stream: TextIO | None = None, *, interval: float = 1.0,
                 plain_interval: float = 10.0, enabled: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        try:
            self.tty = self.stream.isatty()
        except (AttributeError, ValueError):
            self.tty = False
        self.interval = interval if self.tty else plain_interval
        self._last = 0.0
        self._width = 0

    def due(self, now: float) -> bool:
        """Would ``show`` draw a line at ``now``: is it worth working out the figures."""
        return self.enabled and now - self._last >= self.interval * 0.95

    def update(self, status: dict[str, Any], *, now: float | None = None) -> None:
        """The crawl's status line, at most once per interval."""
        self.show(format_status(status), now=now)

    def show(self, line: str, *, now: float | None = None) -> None:
        """Any status line (a fleet's, say), at most once per interval."""
        now = time.monotonic() if now is None else now
        if not self.due(now):
            return
        self._last = now
        self._draw(line)

    def _draw(self, line: str) -> None:
        # a status line that cannot be written is skipped: the next one says it all
        if self.tty:
            pad = max(0, self._width - len(line))
            write_text(self.stream, "\r" + line + " " * pad)
            self._width = len(line)
        else:
            write_text(self.stream, line + "\n")

    def message(self, text: str) -> None:
        """A line that must not be overwritten by the status line (always shown)."""
        self.clear()
        write_text(self.stream, text + "\n")

    def clear(self) -> None:
        if self.enabled and self.tty and self._width:
            write_text(self.stream, "\r" + " " * self._width + "\r")
            self._width = 0

    def summary(self, summary: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.clear()
        if not write_text(self.stream, format_summary(summary) + "\n"):
            raise OSError("cannot write the summary to stderr")


@dataclass(slots=True)
class SessionCounts:
    """What this run of a crawl did (the ledger's counts cover every run)."""

    pages: int = 0  # taken and settled this run (fetched and failed)
    failed: int = 0  # given up this run (the ledger's failed state)
    skipped: int = 0
    sitemaps: int = 0  # sitemap files marked this run (no pages)


def crawl_status(*, outcome: str, elapsed: float, base: dict[str, int], session: SessionCounts,
                 queued_new: int, in_flight: int, hosts: int, counters: dict[str, int],
                 info: dict[str, Any], shards: int, state_dir: str,
                 pages: dict[str, Any] | None = None) -> dict[str, Any]:
    """Live figures (cheap: no ledger scan) for the status line and the summary.

    ``base`` is the ledger's counts when the run started; ``queued_new`` the URLs
    this run queued; ``counters`` the
    URL-seen test's counters (only ``COUNTER_KEYS`` are shown); ``pages`` the
    committed pages over every run, fetched and failed by cause and host
    (``crawler.core.state.pagecounts.PageCounts``). ``given_up`` is the URLs with no
    usable answer after every retry (the ledger's failed state: exit status 3).
    """
    marked = session.pages + session.skipped + session.sitemaps
    pages = pages or {}
    out: dict[str, Any] = {
        "outcome": outcome,
        "elapsed": elapsed,
        "session_pages": session.pages,
        "rate": session.pages / elapsed if elapsed else 0.0,
        "fetched": pages.get("fetched", 0),
        "fetched_with_errors": pages.get("fetched_with_errors", 0),
        "failed": pages.get("failed", 0),
        "errors": pages.get("failed", 0),
        "failed_causes": dict(pages.get("causes", {})),
        "failed_hosts": {h: dict(by) for h, by in pages.get("hosts", {}).items()},
        # refused private addresses are failed (no response) but not given up: a resume
        # with --allow-private fetches them
        "given_up": max(0, base["failed"] + session.failed - refused(pages)),
        "refused": refused(pages),
        "skipped": base["skipped"] + session.skipped - reopened(pages),
        "queued": max(0, base["queued"] + queued_new - marked),
        "in_flight": in_flight,
        "hosts": hosts,
        "fill": info["fill"],
        "estimated_count": info["estimated_count"],
        "expected_fpr": info["expected_fpr"],
        "layers": info["layers"],
        "shards": shards,
        "state_dir": state_dir,
    }
    out.update({k: counters.get(k, 0) for k in COUNTER_KEYS})
    return out
