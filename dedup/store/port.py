"""The seen-test's ports: what a caller of the seen-store uses, written down once.

``UrlSeen`` has more (inspection, rebuilding, snapshots shard by shard, the
ledger's figures) for tests and administration; a caller that only asks "new or
seen?" needs these, and a crawl needs a few more. Like Scrapy's dupefilter
(``request_seen``, ``open``, ``close``, ``log``) or Heritrix's ``UriUniqFilter``
(``add``, ``note``, ``forget``), the port is small so that the store behind it can
change without its callers: the crawler is typed against :class:`CrawlPort`
(``crawler.core``), and ``tests/crawler/core/state/test_port.py`` runs a crawl against a
``UrlSeen`` that exposes nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dedup.journal.format import State

if TYPE_CHECKING:
    from dedup.store.crawl import CrawlRecords
    from dedup.store.seen import NewUrl
    from dedup.url.canonical import Canonicalizer

__all__ = ["CrawlPort", "SeenPort"]


class SeenPort(Protocol):
    """The seen-test: three verbs that answer and record, the crawler's admission that
    also keeps the URL text, forgetting, and the transaction."""

    def add(self, url: str, base_url: str | None = None, *, depth: int = 0) -> bool:
        """True if ``url`` was never seen, and record it (one URL)."""
        ...

    def filter_new(self, links: Iterable[str], base_url: str | None = None, *,
                   depth: int = 0) -> list[str]:
        """The canonical keys of a page's links never seen before, recorded."""
        ...

    def filter_new_pages(self, pages: Iterable[tuple[str | None, Iterable[str]]], *,
                         depth: int = 0) -> list[list[str]]:
        """``filter_new`` of many pages in one pass, with page-by-page answers."""
        ...

    def admit_pages(self, pages: Sequence[tuple[Sequence[tuple[str, str] | None], int]], *,
                    state: State = State.QUEUED) -> list[list[NewUrl]]:
        """The new ``(fetch url, key)`` pairs of many ``(pairs, depth)`` pages, kept with
        their URL text (the crawler's frontier)."""
        ...

    def forget(self, urls: Iterable[str]) -> int:
        """Forget URLs so that they count as new again; returns how many were held."""
        ...

    def forget_keys(self, keys: Iterable[str]) -> int:
        """``forget`` of keys as they are, not canonicalized (a learned rule's keys)."""
        ...

    def commit(self) -> None:
        """Make every answer and every write of the open transaction durable."""
        ...

    def close(self) -> None:
        """Commit and release the state directory."""
        ...


class CrawlPort(SeenPort, Protocol):
    """What a running crawl needs besides the verbs: how links become keys, the records
    it keeps in the same transaction, its figures and its checkpoints."""

    state_dir: Path
    canonicalizer: Canonicalizer  # the rules that make a link its key
    records: CrawlRecords  # the frontier's text, outcomes, referrers, named values

    @property
    def counters(self) -> dict[str, int]:
        """This session's seen-test counts (links, new, repeats, ...)."""
        ...

    def filter_info(self) -> dict[str, Any]:
        """The filter's health: fill, estimated count, expected false-positive rate,
        layers, bytes, capacity, shards (counts every bit: not for a hot path)."""
        ...

    def snapshot_steps(self) -> list[Callable[[], None]]:
        """A snapshot as steps a caller may run one at a time in a thread (the ledger
        synced first, then each shard); run in order, they are ``snapshot()``."""
        ...
