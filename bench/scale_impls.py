"""The URL-seen implementations the scale benchmark compares, behind one small interface.

Each is driven only through public APIs: ``UrlSeen(dir)`` / ``filter_new`` /
``snapshot`` / ``close`` for the project, ``dedup.Canonicalizer`` and
``dedup.url.fingerprint`` for the peers that reuse its canonicalization. ``feed``
takes one page and returns how many of its links were new (distinct URLs never
counted before), which is what the benchmark asserts is equal across them.
"""

from __future__ import annotations

import hashlib
import inspect
import sqlite3
from pathlib import Path
from urllib.parse import urljoin

from crawlstream import TRACKING
from procstats import proc_io
from w3lib.url import canonicalize_url, url_query_cleaner

from dedup import Canonicalizer, UrlSeen, fingerprint


class Impl:
    """One URL-seen implementation: state (if any) lives under ``state``."""

    name = ""
    durable = False
    snapshot_bytes = 0  # of the process's write_bytes, those written by snapshots

    def __init__(self, state: Path) -> None:
        self.state = state

    def feed(self, base: str, hrefs: list[str]) -> int:
        raise NotImplementedError

    def feed_group(self, pages: list[tuple[str, list[str]]]) -> int:
        """A group of pages (one commit's worth) at once, where the implementation can
        batch across pages; the same count as feeding them one by one."""
        return sum(self.feed(base, hrefs) for base, hrefs in pages)

    def feed_urls(self, base: str, hrefs: list[str]) -> int:
        """One page's links one call each, where the implementation has a per-URL call."""
        return self.feed(base, hrefs)

    def commit(self, distinct: int) -> None:
        """End of a group of pages (100 by default); ``distinct`` counted so far."""

    def close(self) -> None:
        """Make everything durable and release the state."""

    def counters(self) -> dict[str, int]:
        """The implementation's own counts so far (UrlSeen's: cache hits, "maybe
        seen" keys, ...), untimed; none for the peers."""
        return {}

    def files(self) -> list[Path]:
        """Every file of the state (what ``du`` would count)."""
        return [p for p in self.state.rglob("*") if p.is_file()] if self.state.exists() else []


class Seen(Impl):
    """The project: ``UrlSeen``, with a snapshot every ``snapshot_every`` new URLs (the
    crawler's ``[snapshot] every_new_urls``). Fed in groups it runs as the crawler
    does, group commit (``autocommit=False``, ``commit()`` a group); fed page by page
    or URL by URL, as a plain caller (a script, a dupefilter) does: ``UrlSeen(dir)``
    as it comes, which decides itself when to write, and ``close()`` at the end."""

    name = "UrlSeen"
    durable = True

    def __init__(self, state: Path, snapshot_every: int, capacity: int | None = None,
                 feed: str = "group") -> None:
        super().__init__(state)
        group = feed == "group" and "autocommit" in inspect.signature(UrlSeen).parameters
        planned = {"capacity": capacity} if capacity else {}
        self.seen = (UrlSeen(state, autocommit=False, **planned) if group
                     else UrlSeen(state, **planned))
        self.group_commit = group and callable(getattr(self.seen, "commit", None))
        self.snapshot_every = snapshot_every
        self._snapped = 0

    def feed(self, base: str, hrefs: list[str]) -> int:
        return len(self.seen.filter_new(hrefs, base_url=base))

    def feed_urls(self, base: str, hrefs: list[str]) -> int:
        add = getattr(self.seen, "add", None)
        if add is None:  # an older UrlSeen: a page of one link
            return sum(len(self.seen.filter_new([h], base_url=base)) for h in hrefs)
        return sum(add(h, base) for h in hrefs)

    def feed_group(self, pages: list[tuple[str, list[str]]]) -> int:
        if not hasattr(self.seen, "filter_new_pages"):  # an older UrlSeen
            return super().feed_group(pages)
        return sum(map(len, self.seen.filter_new_pages(pages)))

    def commit(self, distinct: int) -> None:
        if self.group_commit:
            self.seen.commit()
        if self.snapshot_every and distinct - self._snapped >= self.snapshot_every:
            self._snapshot()
            self._snapped = distinct

    def _snapshot(self) -> None:
        before = proc_io()["write_bytes"]
        self.seen.snapshot()
        self.snapshot_bytes += proc_io()["write_bytes"] - before

    def counters(self) -> dict[str, int]:
        return dict(getattr(self.seen, "counters", {}))

    def close(self) -> None:
        if callable(getattr(self.seen, "commit", None)):
            self.seen.commit()  # the snapshot covers every answer
        self._snapshot()
        self.seen.close()


class SqlitePeer(Impl):
    """(a) The project's canonicalization + fingerprint + ``INSERT OR IGNORE`` into a
    ``WITHOUT ROWID`` table keyed by the 16-byte fingerprint: WAL, synchronous=NORMAL
    (as the project's ledger), one transaction per group of pages."""

    name = "(a) canon+fp+SQLite"
    durable = True

    def __init__(self, state: Path) -> None:
        super().__init__(state)
        state.mkdir(parents=True, exist_ok=True)
        self.canon = Canonicalizer()
        self.db = sqlite3.connect(state / "seen.sqlite", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS seen (fp BLOB PRIMARY KEY) WITHOUT ROWID")
        self.db.execute("BEGIN")

    def feed(self, base: str, hrefs: list[str]) -> int:
        return self.feed_group([(base, hrefs)])

    def feed_group(self, pages: list[tuple[str, list[str]]]) -> int:
        before = self.db.total_changes
        self.db.executemany("INSERT OR IGNORE INTO seen VALUES (?)",
                            [(fingerprint(r[1]),) for base, hrefs in pages
                             for r in self.canon.resolve_many(hrefs, base) if r is not None])
        return self.db.total_changes - before

    def commit(self, distinct: int) -> None:
        self.db.execute("COMMIT")
        self.db.execute("BEGIN")

    def close(self) -> None:
        self.db.execute("COMMIT")
        self.db.close()


class SetPeer(Impl):
    """(b) The project's canonicalization + fingerprint + a Python set of digests:
    in RAM, unbounded, not durable."""

    name = "(b) canon+fp+set"

    def __init__(self, state: Path) -> None:
        super().__init__(state)
        self.canon = Canonicalizer()
        self.seen: set[bytes] = set()

    def feed(self, base: str, hrefs: list[str]) -> int:
        return self.feed_group([(base, hrefs)])

    def feed_group(self, pages: list[tuple[str, list[str]]]) -> int:
        seen = self.seen
        before = len(seen)
        seen.update([fingerprint(r[1]) for base, hrefs in pages
                     for r in self.canon.resolve_many(hrefs, base) if r is not None])
        return len(seen) - before


class ScrapyPeer(Impl):
    """(c) Scrapy's path: ``urljoin`` to resolve, w3lib ``canonicalize_url``, sha1 of
    the canonical URL in a set (the RFPDupeFilter's approach). Scrapy keeps tracking
    parameters by default; w3lib's ``url_query_cleaner`` strips the stream's
    (:data:`crawlstream.TRACKING`) so that it counts the same URLs as the others."""

    name = "(c) w3lib+sha1+set"

    def __init__(self, state: Path) -> None:
        super().__init__(state)
        self.seen: set[bytes] = set()

    def feed(self, base: str, hrefs: list[str]) -> int:
        seen = self.seen
        before = len(seen)
        for href in hrefs:
            url = urljoin(base, href)
            if url.startswith(("http://", "https://")):
                url = canonicalize_url(url_query_cleaner(url, TRACKING, remove=True,
                                                         keep_fragments=True))
                seen.add(hashlib.sha1(url.encode()).digest())
        return len(seen) - before


IMPLS = {"urlseen": Seen, "sqlite": SqlitePeer, "set": SetPeer, "scrapy": ScrapyPeer}
COLD_IMPLS = ("urlseen", "sqlite")  # the ones with state on disk


def make(key: str, state: Path, *, snapshot_every: int, capacity: int | None = None,
         feed: str = "group") -> Impl:
    if key == "urlseen":
        return Seen(state, snapshot_every, capacity, feed)
    return IMPLS[key](state)
