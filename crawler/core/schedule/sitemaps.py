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
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from crawler.core.outputs.output import read_json, write_json_atomic
from dedup import host_of

__all__ = ["SITEMAPS_FILE", "SitemapFiles"]

SITEMAPS_FILE = "sitemaps.json"


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
