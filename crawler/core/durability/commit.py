"""Group commit: a group's links admitted, its output records, then its URLs' outcomes.

Durability, in this order, so a crash (even kill -9) never loses a URL:

1. a page's links are admitted at its group commit, not when it is processed:
   the group's pages go through the seen-test together (``Admission.admit_pages``:
   one Bloom probe, one index lookup, one journal row per depth), their new URLs go
   into the ledger's open transaction (and to the frontier once it is committed:
   the one place the frontier is fed), and each page's ``links_new`` is known
   before its record is written;
2. the group's pages.jsonl lines, items.jsonl lines (what page handlers returned,
   ``crawler.core.run.page``) and WARC records are written and fsynced, then
   the files' sizes (``CrawlState.committed``; the WARC's as the open file's serial
   and size, ``crawler.core.outputs.warc``), the dedup totals (``CrawlState.totals``),
   the pages' counts (fetched, failed by cause and host:
   ``crawler.core.state.pagecounts``), the first capture of each new body digest
   and the page each run of new URLs was found on (the ledger's ``contents`` and
   ``notes``: pages.jsonl's ``duplicate_of`` and ``referrer``, WARC revisits), the
   pages' content prints and what the rule learner and trap budgets made of them
   (``crawler.core.schedule.learning``: ``near_duplicate_of``, rules, held URLs),
   the decisions taken at queued URLs' turns (``turn``) and the pages' outcomes
   (fetched/failed/skipped) go into ONE ledger transaction with the new URLs (a
   committer task batches whatever finished meanwhile; nothing else commits the
   ledger during a crawl).
   Reopening cuts each file back to its committed size, so a record is in the
   output exactly when its page is marked done and its new URLs are in the
   ledger: nothing is duplicated or lost across kill -9, ``links_new`` adds up
   to the URLs the crawl admitted, and the totals count exactly the committed
   rows;
3. a worker takes its next URL only after its previous page is committed, so
   at any moment at most ``concurrency`` URLs are taken-but-unmarked — exactly
   the ones fetched again after a kill -9, which also rediscover their links.

pages.jsonl holds one record per URL taken from the frontier but sitemap files
(``crawler.core.schedule.sitemaps``: marked, counted and in the WARC, no record):
fetched pages (any status), failures (``status`` null or 5xx/429, ``error`` set) and URLs
robots.txt disallows (``status`` null, ``error`` "robots.txt", ledger state
skipped). Links over the per-host cap are marked skipped in the ledger without
a record; out-of-scope and too-deep links are never admitted at all. A
transient failure (refused, timed out, 5xx, robots.txt unavailable) is no
record yet: the URL goes back to the frontier for a later round (``crawler.core.schedule.retry``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from crawler.config.settings import OutputSettings
from crawler.core.outputs.output import ITEMS_FILE, PAGES_FILE, ItemLog, PageLog, iso_time
from crawler.core.outputs.warc import Blob, WarcFiles, build_records
from crawler.core.schedule.admission import Admission, Pairs
from crawler.core.schedule.frontier import Frontier, QueuedUrl
from crawler.core.schedule.learning import Learning
from crawler.core.schedule.sitemaps import SitemapCounts, SitemapFiles
from crawler.core.state.crawlstate import Committed, CrawlState
from crawler.core.state.pagecounts import PageCounts
from crawler.net.exchange import Exchange
from crawler.net.outcome import FetchResult
from dedup import Outcome, SeenPort, State, host_of

__all__ = ["GroupCommit", "Links", "items_file", "output_files"]

Links = tuple[Pairs, int]  # routed links to admit, and their depth
Content = tuple[str, str, str]  # (payload digest, url, date) of a page's 2xx body


@dataclass(slots=True)
class _Entry:
    """One page (or a fleet delivery, or robots.txt exchanges: no record, no outcome)
    handed in to the committer."""

    record: dict[str, Any] | None
    outcome: Outcome | None
    links: Sequence[Links]
    fut: asyncio.Future[None] | None = field(repr=False)
    exchanges: Sequence[Exchange] = ()  # for the WARC, in the order they happened
    content: Content | None = None  # the page's body, for revisits and duplicate_of
    page_exchange: Exchange | None = None  # the one of ``exchanges`` that is the page's
    items: bytes = b""  # items.jsonl lines of the page's handler
    source: str | None = None  # the URL ``links`` were found on (their referrer)
    # a sitemap file's (ledger state, error, URLs listed): counted, not recorded
    sitemap: tuple[State, str | None, int] | None = None
    new: int = 0  # of ``links``, the URLs admitted new
    text_print: tuple[int, int, int, int] | None = None  # its main text's (Learning.text_print)
    key: str | None = None  # the page's key, as the frontier had it (None: not known)
    # a queued URL's turn: decides, in the commit, whether it is fetched (None) or
    # why not (its seq then gets a skipped outcome with that reason)
    turn: tuple[QueuedUrl, Callable[[QueuedUrl], str | None]] | None = None
    reason: str | None = None


def output_files(state_dir: Path, state: CrawlState, output: OutputSettings
                 ) -> tuple[PageLog, WarcFiles | None]:
    """The crawl's pages.jsonl and WARC files (``output.warc`` = "" for none), to be
    cut back on opening to the sizes the ledger has committed."""
    committed = state.committed()
    warc = (WarcFiles(output.warc, committed.warc, max_size=output.warc_max_size)
            if output.warc else None)
    return PageLog(state_dir / PAGES_FILE, committed.pages), warc


def items_file(state_dir: Path, state: CrawlState) -> ItemLog:
    """The crawl's items.jsonl, to be cut back on opening to its committed size (0
    when no commit ever recorded one: every line past it is a killed run's)."""
    return ItemLog(state_dir / ITEMS_FILE, state.committed().items or 0)


def _build_all(records: Sequence[tuple[Exchange, tuple[str, str] | None]], gz: bool,
               spool_dir: Path) -> list[Blob]:
    out = []
    for ex, ref in records:
        out.append(build_records(ex, gzip=gz, refers_to=ref, spool_dir=spool_dir))
        ex.payload.close()  # its temp file, if any: the records hold it now
    return out


def _dedupable(ex: Exchange) -> bool:
    """A whole, non-empty 2xx body: what a later identical body is a revisit of."""
    return 200 <= ex.status < 300 and ex.truncated is None and bool(ex.payload)


class Syncable(Protocol):
    """A file a group commit makes durable before the outcomes it records (``sync``)."""

    async def sync(self) -> None: ...


class GroupCommit:
    """Group commit: pages.jsonl lines (and WARC records), then the outcomes in the ledger.

    Workers hand in one page each and wait; whatever accumulated while the
    previous group was being written goes out as the next group.
    """

    def __init__(self, pagelog: PageLog, warc: WarcFiles | None, seen: SeenPort,
                 state: CrawlState, frontier: Frontier, admission: Admission, *,
                 totals: Callable[[], dict[str, int]] | None = None,
                 before_commit: Callable[[list[int]], None] | None = None,
                 also_sync: Sequence[Syncable] = (),
                 counts: PageCounts | None = None, items: ItemLog | None = None,
                 sitemaps: SitemapFiles | None = None,
                 sitemap_counts: SitemapCounts | None = None,
                 learning: Learning | None = None) -> None:
        """A group's links go through ``admission`` and, once the group is committed,
        what it queued goes to ``frontier`` (the one place the frontier is fed);
        ``before_commit(seqs)`` runs in every group commit just before the outcomes
        of ``seqs`` go into the transaction, so what it writes commits with them;
        ``also_sync`` files are synced with pages.jsonl before the outcomes commit;
        ``counts`` counts the group's pages in the same transaction; ``items`` is
        items.jsonl (its size is committed with every group, written or not);
        a URL ``sitemaps`` knows is a sitemap file: marked and counted in
        ``sitemap_counts``, with no record; ``learning`` classifies the group's pages
        with content (None: --no-learn)."""
        self._learning = learning
        self._counts = counts
        self._sitemaps = sitemaps
        self._sitemap_counts = sitemap_counts
        self._items = items
        self._pagelog = pagelog
        self._before_commit = before_commit
        self._also_sync = list(also_sync)
        self._totals = totals
        self._warc = warc
        self._seen = seen
        self._state = state
        self._frontier = frontier
        self._admission = admission
        self._handed_in: list[_Entry] = []  # waiting for the next group
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="bloomcrawl-committer")

    async def commit(self, record: dict[str, Any] | None, outcome: Outcome | None,
                     links: Sequence[Links] = (), *, exchanges: Sequence[Exchange] = (),
                     content: Content | None = None, page_exchange: Exchange | None = None,
                     items: bytes = b"", source: str | None = None,
                     sitemap: tuple[State, str | None, int] | None = None,
                     text_print: tuple[int, int, int, int] | None = None,
                     key: str | None = None) -> None:
        """Hand in a page and wait for its group's commit. ``links`` come from
        ``Admission.route``, found on ``source`` (default: the record's URL);
        ``record["links_new"]``, ``record["duplicate_of"]`` and
        ``record["near_duplicate_of"]`` are set here."""
        if self.error is not None:
            raise self.error
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if source is None and record is not None:
            source = record["url"]
        self._handed_in.append(_Entry(record, outcome, links, fut, exchanges, content,
                                      page_exchange, items, source, sitemap,
                                      text_print=text_print, key=key))
        self._wake.set()
        await fut

    async def turn(self, queued: QueuedUrl, decide: Callable[[QueuedUrl], str | None]
                   ) -> str | None:
        """A queued URL's turn, decided in the next group commit by ``decide(queued)``:
        None, fetch it; else why not, and its seq is marked skipped with that reason
        in the same transaction as what ``decide`` wrote (held URLs, counters)."""
        if self.error is not None:
            raise self.error
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = _Entry(None, None, (), fut, turn=(queued, decide))
        self._handed_in.append(entry)
        self._wake.set()
        await fut
        return entry.reason

    def add_exchanges(self, exchanges: Sequence[Exchange]) -> None:
        """Exchanges of no page (robots.txt) for the WARC, written with the next
        group; nobody waits for them. A crash before that commit loses them with
        the cached rules, so robots.txt is fetched (and recorded) again."""
        if self._warc is None or not exchanges or self.error is not None:
            return
        self._handed_in.append(_Entry(None, None, (), None, exchanges))
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._flush()
            except Exception as exc:  # disk full, I/O error: fatal for the crawl
                self.error = exc
                for e in self._handed_in:
                    if e.fut is not None and not e.fut.done():
                        e.fut.set_exception(exc)
                self._handed_in.clear()
                return
            if self._closing and not self._handed_in:
                return

    async def _flush(self) -> None:
        while self._handed_in:
            batch, self._handed_in = self._handed_in, []
            try:
                self._admit_links(batch)
                records = self._contents(batch)
                if self._learning is not None:
                    self._learn(batch)
                await self._pagelog.append([e.record for e in batch if e.record is not None])
                if self._items is not None:
                    await self._items.append_bytes(b"".join(e.items for e in batch))
                if self._warc is not None and records:
                    # warcio and gzip take ms per MB: off the loop
                    blobs = await asyncio.to_thread(_build_all, records, self._warc.gzip,
                                                    self._warc.prefix.parent)
                    await self._warc.write(blobs)
                await self._sync()
                # from here to the commit: no await, so no other commit sneaks in
                for e in batch:
                    if e.turn is not None:
                        queued, decide = e.turn
                        e.reason = decide(queued)
                        if e.reason is not None:
                            e.outcome = (queued.seq, State.SKIPPED, None, e.reason)
                outcomes = [e.outcome for e in batch if e.outcome is not None]
                state = self._state
                state.set_committed(self.offsets())
                if self._totals is not None:
                    state.set_totals(self._totals())
                if self._before_commit is not None:
                    self._before_commit([o[0] for o in outcomes])
                if self._counts is not None:
                    self._counts.add((e.record["url"], *e.outcome[1:]) for e in batch
                                     if e.record is not None and e.outcome is not None)
                if self._sitemap_counts is not None:
                    self._sitemap_counts.add((*e.sitemap, e.new) for e in batch
                                             if e.sitemap is not None)
                state.record_outcomes(outcomes)
                self._seen.commit()
            except BaseException as exc:
                for e in batch:
                    if e.fut is not None and not e.fut.done():
                        e.fut.set_exception(exc)
                raise
            # committed: the new URLs may be handed out, the done ones leave for good
            self._frontier.add(self._admission.take_admitted())
            self._frontier.settled(o[0] for o in outcomes)
            for e in batch:
                if e.fut is not None and not e.fut.done():
                    e.fut.set_result(None)

    def _contents(self, batch: list[_Entry]
                  ) -> list[tuple[Exchange, tuple[str, str] | None]]:
        """Each record's ``duplicate_of`` and each exchange's WARC form: a body seen
        before (same payload digest, earlier in the crawl or in this group) is a
        revisit of its first capture ``(uri, date)``. New digests go into the ledger's
        ``contents`` in this group's transaction: exact across kill -9."""
        state = self._state
        # the pages' digests looked up in one query (the exchanges' are few: robots.txt)
        asked = {e.content[0] for e in batch if e.content is not None}
        group = state.first_captures(asked)  # and this group's first captures
        added: list[tuple[str, str, str]] = []

        def first(digest: str, url: str, date: str) -> tuple[str, str] | None:
            ref = group.get(digest)
            if ref is None and digest not in asked:
                ref = state.first_capture(digest)
            if ref is None:
                group[digest] = (url, date)
                added.append((digest, url, date))
            return ref

        out: list[tuple[Exchange, tuple[str, str] | None]] = []
        for e in batch:
            page_ref = first(*e.content) if e.content is not None else None
            if e.record is not None:
                e.record["duplicate_of"] = page_ref[0] if page_ref is not None else None
            for ex in e.exchanges:
                if ex is e.page_exchange:
                    ref = page_ref
                elif _dedupable(ex):
                    ref = first(ex.payload_digest(), ex.url, iso_time(ex.started))
                else:
                    ref = None
                out.append((ex, ref))
        state.note_captures(added)
        return out

    def _learn(self, batch: list[_Entry]) -> None:
        """The group's pages with a 2xx body through ``Learning.pages``, in order: each
        record's ``near_duplicate_of``; prints, rules and budgets in the transaction."""
        assert self._learning is not None
        pages = [e for e in batch if e.content is not None and e.record is not None
                 and e.outcome is not None]
        if not pages:
            return
        near = self._learning.pages([(e.outcome[0], host_of(e.record["url"]),  # type: ignore
                                      e.record["url"], e.key, e.content[0],  # type: ignore
                                      e.text_print) for e in pages])
        for e, url in zip(pages, near, strict=True):
            e.record["near_duplicate_of"] = url  # type: ignore[index]

    def _admit_links(self, batch: list[_Entry]) -> None:
        """Every page's links through the seen-test at once; each record's ``links_new``;
        the page each run of new URLs was found on (their ``referrer``)."""
        waiting = [e for e in batch if e.links]
        if not waiting:
            return
        pages = [links for e in waiting for links in e.links]
        sources = [e.source for e in waiting for _ in e.links]
        queued = iter(self._admission.admit_pages(pages, sources))
        for e in waiting:
            e.new = n = sum(next(queued) for _ in e.links)
            if e.record is not None:
                e.record["links_new"] = n

    async def _sync(self) -> None:
        files: list[Syncable] = [self._pagelog, *self._also_sync]
        if self._items is not None:
            files.append(self._items)
        if self._warc is not None:
            files.append(self._warc)
        await asyncio.gather(*(f.sync() for f in files))

    def offsets(self) -> Committed:
        """The output files' sizes as written: what a commit records as committed."""
        return Committed(pages=self._pagelog.size,
                         items=self._items.size if self._items is not None else None,
                         warc=self._warc.committed() if self._warc is not None else None)

    async def close(self) -> None:
        """Write everything handed in so far, then stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        if self.error is not None:
            raise self.error

    async def commit_page(self, queued: QueuedUrl, res: FetchResult | None, final_url: str | None,
                          links_found: int, links: Links | None, state: State,
                          error: str | None, *, warc: bool,
                          attempts: int | None = None, items: bytes = b"",
                          extra: dict[str, Any] | None = None,
                          text_print: tuple[int, int, int, int] | None = None) -> None:
        """One page's links (``links``, from ``Admission.route``: admitted at the
        commit), its pages.jsonl record (and WARC records with ``warc``), then its
        outcome. ``attempts``: the requests sent for the URL over every round and run
        (default: this fetch's). ``items``: its handler's items.jsonl lines;
        ``extra``: fields added to its record; ``text_print``: its main text's
        print (``Learning.text_print``). A sitemap file gets no record: its WARC
        records, its outcome, its links and its counts."""
        now = time.time()
        status = res.status if res is not None else None
        ex = res.exchange if warc and res is not None else None
        payload = ex.payload if ex is not None and ex.truncated is None else (
            res.body if res is not None else None)
        # streamed in with the body (``res.body`` may be only its head)
        digest = (None if payload is None or res is None
                  else ex.payload_digest() if ex is not None and payload is ex.payload
                  else res.digest)
        fetched_at = iso_time(now)
        content = None
        if digest is not None and payload and status is not None and 200 <= status < 300:
            content = (digest, ex.url if ex is not None else queued.url,
                       iso_time(ex.started) if ex is not None else fetched_at)
        outcome = (queued.seq, state, status, error)
        exchanges = (ex,) if ex is not None else ()
        if self._sitemaps is not None and self._sitemaps.level(queued.url) is not None:
            await self.commit(None, outcome, (links,) if links is not None else (),
                              exchanges=exchanges, content=content, page_exchange=ex,
                              source=queued.url, sitemap=(state, error, links_found))
            return
        record = {
            "url": queued.url,
            "final_url": final_url,
            "referrer": self._state.referrer_of(queued.seq) if queued.depth else None,
            "status": status,
            "content_type": res.content_type if res is not None else None,
            "bytes": res.nbytes if res is not None else 0,
            "payload_digest": digest,
            "duplicate_of": None,
            "near_duplicate_of": None,
            "depth": queued.depth,
            "links_found": links_found,
            "links_new": 0,
            "fetched_at": fetched_at,
            "error": error,
            "attempts": (attempts if attempts is not None
                         else res.attempts if res is not None else 0),
            "elapsed": round(res.elapsed, 3) if res is not None else 0.0,
        }
        if extra:
            record.update(extra)
        await self.commit(record, outcome, (links,) if links is not None else (),
                          exchanges=exchanges, content=content, page_exchange=ex, items=items,
                          text_print=text_print, key=getattr(queued, "key", None))
