"""Which queued URLs are sitemap files, and at which level (0: named by
robots.txt or the /sitemap.xml fallback; 1: listed by a sitemap index).

Why a file in the state dir: a sitemap is admitted through the ledger like any
URL (so it is queued exactly once and, if a crash comes before its record is
committed, it is still QUEUED and fetched again on resume), but the ledger does
not say what kind of URL a row is. This file says it, and it is written
(atomically, fsynced) *before* the commit that admits the sitemap, so a
sitemap row in the ledger is always known as one after a restart. An entry
whose commit never came is harmless: it is only looked up for queued URLs.

The per-host bound (``max_per_host`` sitemap files) is counted here too, over
every run of the crawl.

Why a sitemap fetch is not a page: robots.txt, which the crawl also fetches on
its own, is not a pages.jsonl line either, and a crawl of N pages should leave N
lines. A sitemap's ledger row is still marked (fetched, failed, skipped) so that it
is fetched exactly once across kill -9, and its exchange goes to the WARC; what it
came to is counted in ``SitemapCounts`` (the ledger's meta, in the transaction that
marks it), which the summary and ``bloomcrawl stats`` show and which page counts
taken from the ledger's states leave out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from crawler.core.outputs.output import read_json, write_json_atomic
from dedup import State, host_of

__all__ = ["SITEMAPS_FILE", "SITEMAP_COUNTS_KEY", "SitemapCounts", "SitemapFiles",
           "without_sitemaps"]

SITEMAPS_FILE = "sitemaps.json"
# Ledger meta key: what the crawl's sitemap fetches came to, over every run:
# "fetched" (a response: ledger state fetched), "with_errors" (of those: an error
# status, or not a readable sitemap), "failed" (no usable answer after every retry:
# ledger state failed), "skipped" (disallowed by robots.txt), "urls" (the URLs the
# readable ones listed) and "new" (of those, the ones the seen-test admitted).
SITEMAP_COUNTS_KEY = "sitemap_counts"
_FIELDS = ("fetched", "with_errors", "failed", "skipped", "urls", "new")
Outcome = tuple[State, str | None, int, int]  # (ledger state, error, URLs listed, new)


class SitemapFiles:
    """The crawl's sitemap files: ``{fetch url: level}``, persisted."""

    def __init__(self, state_dir: str | Path, max_per_host: int) -> None:
        self.path = Path(state_dir) / SITEMAPS_FILE
        self.max_per_host = max_per_host
        self.levels: dict[str, int] = dict(read_json(self.path, {}))
        self._per_host: dict[str, int] = {}
        for url in self.levels:
            h = host_of(url)
            self._per_host[h] = self._per_host.get(h, 0) + 1

    def level(self, url: str) -> int | None:
        return self.levels.get(url)

    def register(self, pairs: Sequence[tuple[str, str] | None], level: int
                 ) -> list[tuple[str, str]]:
        """The sitemaps of ``pairs`` (resolved ``(url, key)``) that may be fetched:
        ones known already, and new ones while their host is under the bound,
        which are saved before this returns."""
        out: list[tuple[str, str]] = []
        added = False
        for pair in pairs:
            if pair is None:
                continue
            url = pair[0]
            if url in self.levels:
                out.append(pair)
                continue
            h = host_of(url)
            if self._per_host.get(h, 0) >= self.max_per_host:
                continue
            self._per_host[h] = self._per_host.get(h, 0) + 1
            self.levels[url] = level
            added = True
            out.append(pair)
        if added:
            write_json_atomic(self.path, self.levels)
        return out


class SitemapCounts:
    """The counts of a crawl's committed sitemap fetches (``SITEMAP_COUNTS_KEY``).

    ``add`` joins the ledger's open transaction: the group commit calls it with the
    sitemaps whose marks it is about to commit, so both are durable together and
    the counts are exact across kill -9."""

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger
        self.counts: dict[str, int] = dict.fromkeys(_FIELDS, 0)
        self.counts.update(ledger.meta_get(SITEMAP_COUNTS_KEY) or {})

    def add(self, outcomes: Iterable[Outcome]) -> None:
        c = self.counts
        changed = False
        for state, error, listed, new in outcomes:
            changed = True
            if state == State.FETCHED:
                c["fetched"] += 1
                c["with_errors"] += int(error is not None)
            elif state == State.FAILED:
                c["failed"] += 1
            else:
                c["skipped"] += 1
            c["urls"] += listed
            c["new"] += new
        if changed:
            self._ledger.meta_set(SITEMAP_COUNTS_KEY, c)


def without_sitemaps(ledger_counts: Mapping[str, int], sitemaps: Mapping[str, int]
                     ) -> dict[str, int]:
    """The ledger's counts of done rows (``fetched``, ``failed``, ``skipped``) without
    the sitemap files among them: the pages' (what ``max_pages``, "given up" and
    "skipped" count)."""
    out = dict(ledger_counts)
    for key in ("fetched", "failed", "skipped"):
        out[key] = max(0, int(out.get(key, 0)) - int(sitemaps.get(key, 0)))
    return out
