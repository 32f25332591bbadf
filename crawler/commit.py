"""Group commit: a page's output record, then its ledger mark, many pages per commit.

Durability, in this order, so a crash (even kill -9) never loses a URL:

1. the ledger runs in group-commit mode: a page's new URLs go into the open
   transaction when it is processed, and are committed together with the
   marks of the pages that found them (one SQLite commit per group of pages,
   not one per page: a commit costs a few hundred microseconds of WAL writes);
2. a page's pages.jsonl line is written before its ledger row is marked
   fetched/failed/skipped and the group is committed (a committer task
   batches whatever finished meanwhile);
3. a worker takes its next URL only after its previous page is committed, so
   at any moment at most ``concurrency`` URLs are taken-but-unmarked — exactly
   the ones fetched again after a kill -9, which also rediscover any link whose
   row was not committed yet. A kill between steps of 2 may also repeat the
   page's line in pages.jsonl (the same bound applies).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from crawler.frontier import Frontier, Item
from crawler.outcome import FetchResult
from crawler.output import PageLog, WarcWriter, iso_time
from dedup import State, UrlSeen

__all__ = ["GroupCommit"]

Mark = tuple[int, State, int | None, str | None]  # (seq, state, status, error)
WarcPage = tuple[str, str, bytes, float]  # (url, content type, body, fetched at)


class GroupCommit:
    """Group commit: pages.jsonl lines (and WARC records), then ledger marks.

    Workers hand in one page each and wait; whatever accumulated while the
    previous group was being written goes out as the next group.
    """

    def __init__(self, pagelog: PageLog, warc: WarcWriter | None, seen: UrlSeen,
                 frontier: Frontier) -> None:
        self._pagelog = pagelog
        self._warc = warc
        self._seen = seen
        self._frontier = frontier
        self._pending: list[tuple[dict[str, Any], Mark, WarcPage | None,
                                  asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="bloomcrawl-committer")

    async def commit(self, record: dict[str, Any], mark: Mark,
                     warc_page: WarcPage | None = None) -> None:
        if self.error is not None:
            raise self.error
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((record, mark, warc_page, fut))
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
                for *_, fut in self._pending:
                    if not fut.done():
                        fut.set_exception(exc)
                self._pending.clear()
                return
            if self._closing and not self._pending:
                return

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await self._pagelog.append([b[0] for b in batch])
                if self._warc is not None:
                    pages = [b[2] for b in batch if b[2] is not None]
                    if pages:
                        await self._warc.write_pages(pages)
                marks = [b[1] for b in batch]
                self._seen.ledger.mark_many(marks)
                self._seen.commit()
            except BaseException as exc:
                for *_, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                raise
            self._frontier.settled(m[0] for m in marks)
            for *_, fut in batch:
                if not fut.done():
                    fut.set_result(None)

    async def close(self) -> None:
        """Write everything handed in so far, then stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        if self.error is not None:
            raise self.error

    async def commit_page(self, item: Item, res: FetchResult | None, final_url: str | None,
                          links_found: int, links_new: int, state: State,
                          error: str | None, *, warc: bool) -> None:
        """One page's pages.jsonl record (and WARC record with ``warc``), then its mark."""
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
            "links_new": links_new,
            "fetched_at": iso_time(now),
            "error": error,
            "attempts": res.attempts if res is not None else 0,
            "elapsed": round(res.elapsed, 3) if res is not None else 0.0,
        }
        warc_page = None
        if (warc and res is not None and res.body is not None
                and status is not None and 200 <= status < 300):
            warc_page = (item.url, res.content_type or "text/html", res.body, now)
        await self.commit(record, (item.seq, state, status, error), warc_page)
