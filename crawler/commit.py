"""Group commit: a group's links admitted, its output records, then its ledger marks.

Durability, in this order, so a crash (even kill -9) never loses a URL:

1. a page's links are admitted at its group commit, not when it is processed:
   the group's pages go through the seen-test together (``Admission.admit_pages``:
   one fingerprint batch, one Bloom probe, one index lookup), their new URLs go
   into the ledger's open transaction and to the frontier, and each page's
   ``links_new`` is known before its record is written;
2. the group's pages.jsonl lines and WARC records are written and fsynced, then
   the files' sizes (``OUTPUTS_KEY``), the dedup totals (``TOTALS_KEY``) and the
   pages' marks (fetched/failed/skipped) go into ONE ledger transaction with
   the new URLs (a committer task batches whatever finished meanwhile; nothing
   else commits the ledger during a crawl). Reopening cuts each file back to its
   committed size, so a record is in the output exactly when its page is marked
   done and its new URLs are in the ledger: nothing is duplicated or lost across
   kill -9, ``links_new`` adds up to the URLs the crawl admitted, and the totals
   count exactly the committed rows;
3. a worker takes its next URL only after its previous page is committed, so
   at any moment at most ``concurrency`` URLs are taken-but-unmarked — exactly
   the ones fetched again after a kill -9, which also rediscover their links.

pages.jsonl holds one record per URL taken from the frontier: fetched pages
(any status), failures (``status`` null or 5xx/429, ``error`` set) and URLs
robots.txt disallows (``status`` null, ``error`` "robots.txt", ledger state
skipped). Links over the per-host cap are marked skipped in the ledger without
a record; out-of-scope and too-deep links are never admitted at all. A
transient failure (refused, timed out, 5xx, robots.txt unavailable) is no
record yet: the URL goes back to the frontier for a later round (``crawler.retry``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from crawler.admission import Pairs
from crawler.frontier import Frontier, Item
from crawler.outcome import FetchResult
from crawler.output import PAGES_FILE, PageLog, WarcWriter, iso_time
from crawler.state import OUTPUTS_KEY, TOTALS_KEY
from dedup import State, UrlSeen

__all__ = ["GroupCommit", "Links", "output_files"]

Mark = tuple[int, State, int | None, str | None]  # (seq, state, status, error)
WarcPage = tuple[str, str, bytes, float]  # (url, content type, body, fetched at)
Links = tuple[Pairs, int]  # routed links to admit, and their depth


@dataclass(slots=True)
class _Entry:
    """One page (or a fleet delivery: no record, no mark) handed to the committer."""

    record: dict[str, Any] | None
    mark: Mark | None
    warc_page: WarcPage | None
    links: Sequence[Links]
    fut: asyncio.Future[None] = field(repr=False)


def output_files(seen: UrlSeen, warc: str) -> tuple[PageLog, WarcWriter | None]:
    """The crawl's pages.jsonl and WARC (``warc`` = "" for none), to be cut back on
    opening to the sizes the ledger has committed."""
    committed = seen.ledger.meta_get(OUTPUTS_KEY) or {}
    return (PageLog(Path(seen.state_dir) / PAGES_FILE, committed.get("pages")),
            WarcWriter(warc, committed.get("warc")) if warc else None)


class Syncable(Protocol):
    """A file a group commit makes durable before its ledger marks (``sync``)."""

    async def sync(self) -> None: ...


class GroupCommit:
    """Group commit: pages.jsonl lines (and WARC records), then ledger marks.

    Workers hand in one page each and wait; whatever accumulated while the
    previous group was being written goes out as the next group.
    """

    def __init__(self, pagelog: PageLog, warc: WarcWriter | None, seen: UrlSeen,
                 frontier: Frontier, admit: Callable[[Sequence[Links]], list[int]], *,
                 totals: Callable[[], dict[str, int]] | None = None,
                 before_commit: Callable[[list[int]], None] | None = None,
                 also_sync: Sequence[Syncable] = ()) -> None:
        """``before_commit(seqs)`` runs in every group commit just before the marks
        of ``seqs`` go into the transaction, so what it writes commits with them;
        ``also_sync`` files are synced with pages.jsonl before the marks commit."""
        self._pagelog = pagelog
        self._before_commit = before_commit
        self._also_sync = list(also_sync)
        self._totals = totals
        self._warc = warc
        self._seen = seen
        self._frontier = frontier
        self._admit = admit
        self._pending: list[_Entry] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="bloomcrawl-committer")

    async def commit(self, record: dict[str, Any] | None, mark: Mark | None,
                     warc_page: WarcPage | None = None, links: Sequence[Links] = ()) -> None:
        """Hand in a page and wait for its group's commit. ``links`` come from
        ``Admission.route`` (which has the frontier expect each one);
        ``record["links_new"]`` is set here."""
        if self.error is not None:
            raise self.error
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Entry(record, mark, warc_page, links, fut))
        self._wake.set()
        await fut

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._flush()
            except Exception as exc:  # disk full, I/O error: fatal for the crawl
                self.error = exc
                for e in self._pending:
                    if not e.fut.done():
                        e.fut.set_exception(exc)
                self._pending.clear()
                return
            if self._closing and not self._pending:
                return

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                self._admit_links(batch)
                await self._pagelog.append([e.record for e in batch if e.record is not None])
                if self._warc is not None:
                    pages = [e.warc_page for e in batch if e.warc_page is not None]
                    if pages:
                        await self._warc.write_pages(pages)
                await self._sync()
                # from here to the commit: no await, so no other commit sneaks in
                marks = [e.mark for e in batch if e.mark is not None]
                ledger = self._seen.ledger
                ledger.meta_set(OUTPUTS_KEY, self.offsets())
                if self._totals is not None:
                    ledger.meta_set(TOTALS_KEY, self._totals())
                if self._before_commit is not None:
                    self._before_commit([m[0] for m in marks])
                ledger.mark_many(marks)
                self._seen.commit()
            except BaseException as exc:
                for e in batch:
                    if not e.fut.done():
                        e.fut.set_exception(exc)
                raise
            self._frontier.settled(m[0] for m in marks)
            for e in batch:
                if not e.fut.done():
                    e.fut.set_result(None)

    def _admit_links(self, batch: list[_Entry]) -> None:
        """Every page's links through the seen-test at once; each record's ``links_new``."""
        waiting = [e for e in batch if e.links]
        if not waiting:
            return
        pages = [links for e in waiting for links in e.links]
        queued = iter(self._admit(pages))
        for e in waiting:
            n = sum(next(queued) for _ in e.links)
            if e.record is not None:
                e.record["links_new"] = n
        self._frontier.arrived(len(pages))  # each was expected once (``Admission.route``)

    async def _sync(self) -> None:
        files: list[Syncable] = [self._pagelog, *self._also_sync]
        if self._warc is not None:
            files.append(self._warc)
        await asyncio.gather(*(f.sync() for f in files))

    def offsets(self) -> dict[str, int]:
        """The output files' sizes as written: what a commit records as committed."""
        out = {"pages": self._pagelog.size}
        if self._warc is not None:
            out["warc"] = self._warc.size
        return out

    async def close(self) -> None:
        """Write everything handed in so far, then stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        if self.error is not None:
            raise self.error

    async def commit_page(self, item: Item, res: FetchResult | None, final_url: str | None,
                          links_found: int, links: Links | None, state: State,
                          error: str | None, *, warc: bool,
                          attempts: int | None = None) -> None:
        """One page's links (``links``, from ``Admission.route``: admitted at the
        commit), its pages.jsonl record (and WARC record with ``warc``), then its
        mark. ``attempts``: the requests sent for the URL over every round and run
        (default: this fetch's)."""
        now = time.time()
        status = res.status if res is not None else None
        record = {
            "url": item.url,
            "final_url": final_url,
            "status": status,
            "content_type": res.content_type if res is not None else None,
            "bytes": res.nbytes if res is not None else 0,
            "depth": item.depth,
            "links_found": links_found,
            "links_new": 0,
            "fetched_at": iso_time(now),
            "error": error,
            "attempts": (attempts if attempts is not None
                         else res.attempts if res is not None else 0),
            "elapsed": round(res.elapsed, 3) if res is not None else 0.0,
        }
        warc_page = None
        if (warc and res is not None and res.body is not None
                and status is not None and 200 <= status < 300):
            warc_page = (item.url, res.content_type or "text/html", res.body, now)
        await self.commit(record, (item.seq, state, status, error), warc_page,
                          (links,) if links is not None else ())
