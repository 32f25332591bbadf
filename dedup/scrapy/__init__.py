"""Scrapy's duplicate filter on dedup's exact URL-seen test (``pip install bloomcrawl[scrapy]``).

::

    DUPEFILTER_CLASS = "dedup.scrapy.UrlSeenDupeFilter"
    SPIDER_MIDDLEWARES = {"dedup.scrapy.UrlSeenSpiderMiddleware": 10}
    DOWNLOADER_MIDDLEWARES = {"dedup.scrapy.UrlSeenDownloaderMiddleware": 10}
    BLOOMCRAWL_SEEN_DIR = "crawl-seen"   # else JOBDIR/bloomcrawl-seen, else a temp dir
    BLOOMCRAWL_ITEMS = "items.jsonl"     # the items, exactly once across kill -9

Scrapy's own ``RFPDupeFilter`` keeps every fingerprint in a Python set (RAM grows
with the crawl) and, with ``JOBDIR``, in a file read whole at start. This filter
answers from :class:`~dedup.store.seen.UrlSeen`: a Bloom filter whose every "maybe"
is confirmed against the ledger, so it is exact (a false positive never drops a
request), its RAM is bounded by the filter's geometry, and its state directory
persists across runs and a kill -9.

**The key** of a request: its canonical URL (dedup's canonicalizer: tracking
parameters dropped, query sorted) for a GET without a body, so the seen-set is
the one a bloomcrawl crawl keeps; for anything else ``"<METHOD> <canonical URL>"``
followed by ``" sha256:<hex digest of the body>"`` when there is a body, so POSTs
with different bodies are distinct and a HEAD never hides the GET of its URL.
A URL the canonicalizer refuses (not http(s), over 2,083 characters) has no key:
such a request is never filtered. ``dont_filter`` requests are never recorded.

**Never lost after a kill -9.** A seen-set alone cannot promise it: a request
answered "new" waits in Scrapy's scheduler, which a kill -9 empties (with JOBDIR
too: its disk queue is only consistent after a clean close), and a page that
linked to it is "seen" on the next run, so nothing would find it again. So the
ledger also keeps each admitted GET's URL as *queued* until its response has been
through the spider (marked by :class:`UrlSeenSpiderMiddleware` once the callback's
output is exhausted, the pages it found being admitted before that mark), and the
next run re-issues the queued URLs of earlier runs when the spider goes idle:
``Request(url)`` to the spider's default callback, or what the
spider's ``recover_request(url)`` returns (None skips it). After a clean close
with ``JOBDIR`` Scrapy's own queue resumes them and nothing is re-issued. A request
that Scrapy drops before its scheduler (off site) or a downloader middleware
ignores (``IgnoreRequest``: robots.txt) is marked done (skipped), the latter by
:class:`UrlSeenDownloaderMiddleware`; one that fails to download
after Scrapy's retries reaches no spider middleware, stays queued and is offered
again on the next run. A non-GET request is recorded as done at
once: its body is not kept, so it is not re-issued after a crash.

**Items exactly once** (``BLOOMCRAWL_ITEMS``, with the spider middleware): a
page is marked done only when its callback's output is through *and* every item
it yielded has left the item pipelines (``item_scraped``, ``item_dropped``,
``item_error``); with ``BLOOMCRAWL_ITEMS`` its items are then appended to that
JSON-lines file in the same ledger transaction as its mark
(:mod:`dedup.scrapy.items`), so a kill -9 leaves each page's items in it exactly
once: the pages whose marks were lost are re-issued and their items cut off the
file's end. Scrapy's own feeds (``FEEDS``, ``-o``) get no such promise: they
buffer items in an unsynced file that records nothing of which page they came
from, so a kill -9 loses some items of pages marked done and keeps some of
pages fetched again (see that module).

Writes are group-committed (``BLOOMCRAWL_COMMIT_INTERVAL`` seconds, default 1.0,
or every ``BLOOMCRAWL_COMMIT_EVERY`` new admissions); ``close()`` commits and
snapshots. A kill -9 loses at most the last group: those requests count as new
again on the next run (fetched twice, never lost).

**RAM** is small and grows with the distinct keys only through the Bloom
filter's layers and the index runs' directories (~1.5 B a key): the filter of a
new dir is planned for 1M keys at a 5% error rate (0.8 MB) and grows by layers of
twice the last (3.3 MB at 2.4M keys; ``BLOOMCRAWL_SEEN_CAPACITY`` and
``BLOOMCRAWL_SEEN_ERROR_RATE`` plan another, and a dir keeps the geometry it was
made with: a false positive only costs an index lookup); the confirm cache
(``BLOOMCRAWL_CONFIRM_CACHE`` keys, default 65,536, 2 MB: the recent keys a repeat
is answered from, most of the speed; a bloomcrawl crawl keeps 500,000, 16.8 MB);
the fingerprint index's newest records (``BLOOMCRAWL_INDEX_BUFFER``, default
16,384, 0.75 MB; older ones are in run files read with ``pread``; a bloomcrawl
crawl keeps 786,432, 25 MB); SQLite's page cache of the ledger, 256 KiB (its
default is 2,000).

Without the middleware the filter marks a request done when its response
arrives (``response_received``): a kill -9 while a callback is still yielding can
then lose the pages it had not yet yielded. A warning says so.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import shutil
import tempfile
import time
import weakref
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.dupefilters import BaseDupeFilter
from scrapy.exceptions import DontCloseSpider, IgnoreRequest
from scrapy.utils.request import referer_str

from dedup.scrapy.items import ItemLog
from dedup.store.ledger import State
from dedup.store.seen import UrlSeen
from dedup.store.statedir import ledger_path
from dedup.url.canonical import Canonicalizer, UrlRejected

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.spiders import Spider

__all__ = ["SEQS_META", "ItemLog", "UrlSeenDownloaderMiddleware", "UrlSeenDupeFilter",
           "UrlSeenSpiderMiddleware", "request_key"]

logger = logging.getLogger(__name__)

SEQS_META = "bloomcrawl_seqs"  # ledger seqs a request answers for (its redirect chain's)
_DONE_META = "bloomcrawl_done"  # ... moved aside while its response is in the spider
MIDDLEWARE = "dedup.scrapy.UrlSeenSpiderMiddleware"
_CLEAN = "scrapy_closed_cleanly"  # ledger meta: False from open() until close()
_RECOVER_PAGE = 1000
# RAM over speed (issue 26: a quarter of RFPDupeFilter's peak RSS, at least its
# requests/s): the confirm cache holds 65,536 keys (two 1 MB tables) where a
# bloomcrawl crawl's holds 500,000 (16.8 MB; ~1.4x the requests/s); the index
# buffer 16,384 records (0.75 MB: a 32,768-slot table, room for the ~14,000 records
# a commit interval adds before the flush), not a crawl's 786,432 (25 MB): smaller
# runs and more merges of them, which cost the background thread, not RAM
# (bench/README.md, "Scrapy dupefilter")
CONFIRM_CACHE = 1 << 16
INDEX_BUFFER = 1 << 14
# SQLite's page cache of the ledger, KiB (its default: 2,000): the filter appends
# rows and marks recent ones done, so the pages it touches are a B-tree's right
# edges; re-reads come from the OS page cache
LEDGER_CACHE_KIB = 256
# a new seen dir's filter is planned for 1M keys and grows by layers of 2x (2M, 4M,
# ...): 1.3 MB for a crawl of under a million requests' keys, 4.6 MB at 2.4M (the 10M
# requests of bench/scrapy_dupefilter.py), at 1%, where UrlSeen's 10M plan holds 12.7 MB
# from the first request; past ~7M keys the layers cost more than a 10M plan would
# (BLOOMCRAWL_SEEN_CAPACITY sets it; an existing dir keeps what it was made with)
CAPACITY = 1_000_000
# ... at a 5% error rate, not UrlSeen's 1%: a false positive only sends a key to
# the index (its run filters and, rarely, a bucket read), and each layer tightens
# the rate 5x, so the 2M layer of the 10M bench's 2.4M keys took 3.4 MB at 1%
# (4.6 MB in all) and takes 2.5 MB at 5% (3.3 MB in all)
ERROR_RATE = 0.05

_filters: weakref.WeakKeyDictionary[Any, UrlSeenDupeFilter] = weakref.WeakKeyDictionary()


class _Page:
    """A response whose callback output or items are still under way: its request's
    seqs are marked done once both are through (``UrlSeenDupeFilter._finish``)."""

    __slots__ = ("items", "lines", "seqs", "status", "through")

    def __init__(self) -> None:
        self.items = 0  # yielded, not yet out of the item pipelines
        self.lines: list[bytes] = []  # the items' BLOOMCRAWL_ITEMS lines, in order
        self.through = False  # the callback's output is exhausted (or it raised)
        self.seqs: tuple[int, ...] = ()
        self.status: int | None = None


def request_key(request: Request, canonicalizer: Canonicalizer) -> str | None:
    """The dedup key of ``request`` (module docstring), None if its URL is refused."""
    try:
        _, canon = canonicalizer.resolve(request.url)
    except UrlRejected:
        return None
    method = request.method.upper()
    body = request.body
    if method == "GET" and not body:
        return canon
    key = f"{method} {canon}"
    return f"{key} sha256:{hashlib.sha256(body).hexdigest()}" if body else key


class UrlSeenDupeFilter(BaseDupeFilter):
    """``DUPEFILTER_CLASS`` backed by a :class:`UrlSeen` state directory (module docstring)."""

    def __init__(self, path: str | Path | None = None, *, debug: bool = False,
                 crawler: Crawler | None = None, capacity: int | None = None,
                 error_rate: float | None = None,
                 commit_interval: float = 1.0, commit_every: int = 10_000,
                 recover: bool = True, confirm_cache_size: int = CONFIRM_CACHE,
                 index_buffer: int = INDEX_BUFFER, items: str | Path | None = None) -> None:
        self._temporary = path is None
        self.path = Path(tempfile.mkdtemp(prefix="bloomcrawl-seen-")) if path is None \
            else Path(path)
        self.debug = debug
        self.logdupes = True
        self.crawler = crawler
        self.capacity = capacity
        self.error_rate = error_rate
        self.commit_interval = commit_interval
        self.commit_every = commit_every
        self.recover = recover
        self.confirm_cache_size = confirm_cache_size
        self.index_buffer = index_buffer
        self.seen: UrlSeen | None = None
        # requests answered before they reach request_seen (admitted from a callback's
        # output, or re-issued): the answer, and what marks their seqs skipped if
        # they are dropped before the scheduler (off site) and so never come back
        self._pending: weakref.WeakKeyDictionary[
            Request, tuple[bool, weakref.finalize | None]] = weakref.WeakKeyDictionary()
        self._dropped: list[int] = []
        self._uncommitted = 0
        self._last_commit = time.monotonic()
        self._recover_upto = 0
        self._recover_cursor = 0
        self.recovered = 0
        self.items_path = items
        self.items: ItemLog | None = None
        self._pages: dict[Any, _Page] = {}  # by response
        self._tracks_items = False  # item signals connected: pages wait for their items

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> UrlSeenDupeFilter:
        s = crawler.settings
        path = s.get("BLOOMCRAWL_SEEN_DIR")
        if not path and s.get("JOBDIR"):
            path = str(Path(s["JOBDIR"], "bloomcrawl-seen"))
        if not path:
            logger.warning("UrlSeenDupeFilter: neither BLOOMCRAWL_SEEN_DIR nor JOBDIR is set: "
                           "the seen-set lives in a temporary directory and will not persist")
        df = cls(path or None, debug=s.getbool("DUPEFILTER_DEBUG"), crawler=crawler,
                 capacity=s.getint("BLOOMCRAWL_SEEN_CAPACITY") or None,
                 error_rate=s.getfloat("BLOOMCRAWL_SEEN_ERROR_RATE") or None,
                 commit_interval=s.getfloat("BLOOMCRAWL_COMMIT_INTERVAL", 1.0),
                 commit_every=s.getint("BLOOMCRAWL_COMMIT_EVERY", 10_000),
                 recover=s.getbool("BLOOMCRAWL_RECOVER", True),
                 confirm_cache_size=s.getint("BLOOMCRAWL_CONFIRM_CACHE", CONFIRM_CACHE),
                 index_buffer=s.getint("BLOOMCRAWL_INDEX_BUFFER", INDEX_BUFFER),
                 items=s.get("BLOOMCRAWL_ITEMS") or None)
        _filters[crawler] = df
        return df

    # -- life cycle --------------------------------------------------------------

    def open(self) -> None:
        """Open (or create) the state directory; plan the re-issue of earlier runs'
        queued requests (module docstring)."""
        capacity, error_rate = self.capacity, self.error_rate
        if not ledger_path(self.path).exists():  # a stored geometry is not re-asked
            capacity = CAPACITY if capacity is None else capacity
            error_rate = ERROR_RATE if error_rate is None else error_rate
        self.seen = UrlSeen(self.path, capacity=capacity, error_rate=error_rate,
                            autocommit=False,
                            confirm_cache_size=self.confirm_cache_size,
                            index_buffer=self.index_buffer,
                            ledger_cache_kib=LEDGER_CACHE_KIB)
        ledger = self.seen.ledger
        clean = ledger.meta_get(_CLEAN, True)
        jobdir = self.crawler is not None and bool(self.crawler.settings.get("JOBDIR"))
        if self.recover and not (clean and jobdir):
            self._recover_upto = ledger.last_seq()
        ledger.meta_set(_CLEAN, False)
        if self.items_path is not None:
            s = self.crawler.settings if self.crawler is not None else None
            self.items = ItemLog(self.items_path, self.seen,
                                 encoding=s.get("FEED_EXPORT_ENCODING") if s else None,
                                 fields=s.getlist("FEED_EXPORT_FIELDS") if s else None)
            self.items.open()
        self.commit()
        if self.crawler is None:
            return
        self.crawler.signals.connect(self._on_idle, signal=signals.spider_idle)
        mws = self.crawler.settings.getwithbase("SPIDER_MIDDLEWARES")
        if mws.get(MIDDLEWARE) is not None:
            self._tracks_items = True
            self.crawler.signals.connect(self._on_item, signal=signals.item_scraped)
            self.crawler.signals.connect(self._on_item_gone, signal=signals.item_dropped)
            self.crawler.signals.connect(self._on_item_gone, signal=signals.item_error)
        else:
            if self.items is not None:
                raise RuntimeError(f"BLOOMCRAWL_ITEMS needs {MIDDLEWARE} in "
                                   "SPIDER_MIDDLEWARES: it tells which page an item is of")
            logger.warning("UrlSeenDupeFilter: %s is not in SPIDER_MIDDLEWARES: requests are "
                           "marked done when their response arrives, so a kill -9 while a "
                           "callback runs can lose the requests it had not yet yielded",
                           MIDDLEWARE)
            self.crawler.signals.connect(self._on_response, signal=signals.response_received)

    def close(self, reason: str) -> None:
        """Commit, record the clean close, snapshot the filter: durable."""
        if self.seen is None:
            return
        seen, self.seen = self.seen, None
        try:
            gc.collect()  # requests dropped before the scheduler: their marks (_expect)
            if self._dropped:
                seen.record_outcomes([(seq, State.SKIPPED, None, "dropped")
                                      for seq in self._dropped])
            seen.ledger.meta_set(_CLEAN, True)
            if self.items is not None:
                self.items.sync()
            seen.commit()
            seen.snapshot()
            if self.crawler is not None and self.crawler.stats is not None:
                st = seen.stats()
                for name in ("new", "repeats", "bloom_definitely_new", "bloom_maybe",
                             "confirm_cache_hits", "ledger_queries", "false_positives",
                             "fill", "expected_fpr"):
                    self.crawler.stats.set_value(f"bloomcrawl/{name}", st[name])
                self.crawler.stats.set_value("bloomcrawl/recovered", self.recovered)
        finally:
            seen.close()
            if self.items is not None:
                self.items.close()
            if self._temporary:
                shutil.rmtree(self.path, ignore_errors=True)

    # -- the seen-test -----------------------------------------------------------

    def request_seen(self, request: Request) -> bool:
        """True if a request with the same key was recorded (this run or an earlier
        one); otherwise record it and answer False. ``dont_filter`` requests are
        never recorded (Scrapy does not ask for them; this says so again).

        Scrapy calls it once per request, so a GET without a body (nearly every
        request) takes one straight path: canonicalize, ``UrlSeen.admit_one``."""
        if request.dont_filter:
            return False
        if self._pending.data:  # the dict under it: len() of a WeakKeyDictionary is a call
            pending = self._pending.pop(request, None)
            if pending is not None:
                answer, dropped = pending
                if dropped is not None:
                    dropped.detach()
                return not answer
        seen = self.seen
        if seen is None:
            raise RuntimeError("UrlSeenDupeFilter used before open() or after close()")
        url = request.url
        if request.body or request.method.upper() != "GET":
            key = request_key(request, seen.canonicalizer)
            if key is None or self._admit(request, key):
                return False
            self.done(request)
            return True
        (resolved,) = seen.canonicalizer.resolve_many((url,))
        if resolved is None:
            return False
        seq = seen.admit_one(url, resolved[1])
        meta = request.meta
        if seq is not None:
            meta[SEQS_META] = (*meta.get(SEQS_META, ()), seq)
            self._tick(1)
            return False
        if SEQS_META in meta:
            self.done(request)  # a redirect chain that ends at a seen URL ends here
        else:
            self._tick(0)
        return True

    def preadmit(self, request: Request) -> None:
        """Record ``request`` now, before it leaves the callback's output, so that the
        callback's "done" mark follows it in the ledger; ``request_seen`` then gives
        the answer found here."""
        if request.dont_filter or request in self._pending:
            return
        key = self._key(request)
        if key is not None:
            self._expect(request, self._admit(request, key))

    def _expect(self, request: Request, new: bool) -> None:
        """``request_seen(request)`` is to answer ``not new`` without asking again."""
        seqs = request.meta.get(SEQS_META) if new else None
        self._pending[request] = (new, weakref.finalize(request, self._dropped.extend, seqs)
                                  if seqs else None)

    def _key(self, request: Request) -> str | None:
        seen = self._require_open()
        return request_key(request, seen.canonicalizer)

    def _admit(self, request: Request, key: str) -> bool:
        """Record ``key``: True if it is new. A GET without a body is a pending
        admission whose seq (its URL kept to re-issue after a crash) goes into the
        request's meta; anything else is recorded done at once (its body is not kept)."""
        seen = self._require_open()
        if request.method.upper() == "GET" and not request.body:
            # a pending admission (UrlSeen.admit_one): no journal write per request
            seq = seen.admit_one(request.url, key)
            if seq is not None:
                meta = request.meta
                meta[SEQS_META] = (*meta.get(SEQS_META, ()), seq)
            self._tick(seq is not None)
            return seq is not None
        got = bool(seen.admit_pages([([(request.url, key)], 0)], state=State.FETCHED)[0])
        self._tick(got)
        return got

    def done(self, request: Request, status: int | None = None, *,
             state: State = State.FETCHED) -> None:
        """Mark the request's admitted seqs done: a later run does not re-issue it."""
        self.mark_done(request.meta.pop(SEQS_META, ()), status, state=state)

    def mark_done(self, seqs: Iterable[int], status: int | None = None, *,
                  state: State = State.FETCHED) -> None:
        """Mark ledger seqs done (see :meth:`done`)."""
        if not seqs:
            return
        rows = [(seq, state, status, None) for seq in seqs]
        if self.seen is not None:
            self.seen.record_outcomes(rows)  # writes pending admissions first
            self._tick(0)

    def _tick(self, n: int) -> None:
        """Count ``n`` new admissions; commit every ``commit_every`` of them or
        ``commit_interval`` seconds (a repeat writes nothing, so only time counts)."""
        self._uncommitted += n
        if self._dropped and self.seen is not None:
            dropped, self._dropped = self._dropped, []
            self.seen.record_outcomes([(seq, State.SKIPPED, None, "dropped")
                                       for seq in dropped])
        if (self._uncommitted >= self.commit_every
                or time.monotonic() - self._last_commit >= self.commit_interval):
            self.commit()

    def commit(self) -> None:
        """Make every admission and mark so far durable (a group commit), the items
        file synced first: the marks commit with the size it has for them."""
        if self.seen is not None:
            if self.items is not None:
                self.items.sync()
            self.seen.commit()
        self._uncommitted = 0
        self._last_commit = time.monotonic()

    def _require_open(self) -> UrlSeen:
        if self.seen is None:
            raise RuntimeError("UrlSeenDupeFilter used before open() or after close()")
        return self.seen

    # -- Scrapy's hooks ----------------------------------------------------------

    def log(self, request: Request, spider: Spider) -> None:
        """Log a filtered request as RFPDupeFilter does: the first one, or all of them
        with DUPEFILTER_DEBUG; count it in ``dupefilter/filtered``."""
        if self.debug:
            logger.debug("Filtered duplicate request: %(request)s (referer: %(referer)s)",
                         {"request": request, "referer": referer_str(request)},
                         extra={"spider": spider})
        elif self.logdupes:
            logger.debug("Filtered duplicate request: %(request)s - no more duplicates will "
                         "be shown (see DUPEFILTER_DEBUG to show all duplicates)",
                         {"request": request}, extra={"spider": spider})
            self.logdupes = False
        spider.crawler.stats.inc_value("dupefilter/filtered")

    def _on_response(self, response: Response, request: Request, spider: Spider) -> None:
        self.done(request, response.status)

    # -- pages and their items (with the spider middleware) -------------------------

    def item_yielded(self, response: Response) -> None:
        """``response``'s callback yielded an item: its page waits for it."""
        if self._tracks_items:
            self._pages.setdefault(response, _Page()).items += 1

    def page_through(self, response: Response, seqs: Iterable[int]) -> None:
        """``response``'s callback output is exhausted (or it raised): its request's
        ``seqs`` are marked done once its items are out of the pipelines too."""
        page = self._pages.get(response)
        if page is None:
            self.mark_done(seqs, response.status)
            return
        page.through, page.seqs, page.status = True, tuple(seqs), response.status
        self._finish(response, page)

    def _on_item(self, item: Any, response: Response | None, spider: Spider) -> None:
        self._item_out(response, self.items.encode(item) if self.items is not None else None)

    def _on_item_gone(self, item: Any, response: Response | None, spider: Spider,
                      **kw: Any) -> None:
        self._item_out(response, None)

    def _item_out(self, response: Response | None, line: bytes | None) -> None:
        page = self._pages.get(response) if response is not None else None
        if page is None:  # not a page's (yielded by start(), say): written with no mark
            if line is not None and self.items is not None and self.seen is not None:
                self.items.append(line)
            return
        page.items -= 1
        if line is not None:
            page.lines.append(line)
        self._finish(response, page)

    def _finish(self, response: Any, page: _Page) -> None:
        """A page whose output and items are all through: its items appended, then its
        mark, both in the ledger's open transaction."""
        if not page.through or page.items > 0:
            return
        del self._pages[response]
        if page.lines and self.items is not None and self.seen is not None:
            self.items.append(b"".join(page.lines))
        self.mark_done(page.seqs, page.status)

    def _on_idle(self, spider: Spider) -> None:
        """Re-issue a page of the queued requests earlier runs left behind."""
        if self.seen is None or self._recover_cursor >= self._recover_upto:
            return
        rows = [r for r in self.seen.ledger.queued(_RECOVER_PAGE, after_seq=self._recover_cursor)
                if r.seq <= self._recover_upto]
        self._recover_cursor = rows[-1].seq if rows else self._recover_upto
        fed = 0
        make = getattr(spider, "recover_request", None)
        for row in rows:
            req = make(row.url) if make is not None else Request(row.url)
            if req is None:
                self.seen.record_outcomes([(row.seq, State.SKIPPED, None, "not recovered")])
                continue
            req.meta[SEQS_META] = (*req.meta.get(SEQS_META, ()), row.seq)
            self._expect(req, True)  # not dont_filter: the off-site check still applies
            assert self.crawler is not None and self.crawler.engine is not None
            self.crawler.engine.crawl(req)
            fed += 1
        self.recovered += fed
        if rows or self._recover_cursor < self._recover_upto:
            raise DontCloseSpider


class UrlSeenSpiderMiddleware:
    """Admits the requests a callback yields before they leave it, then marks the
    response's request done once the output is exhausted (or the callback raised):
    in the ledger every page's finds precede its "done" mark, which is what lets a
    run after a kill -9 re-issue exactly what was not finished. Put it closest to
    the engine (the lowest order), so that it sees the output the engine will get."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> UrlSeenSpiderMiddleware:
        return cls(crawler)

    def _filter(self) -> UrlSeenDupeFilter | None:
        return _filters.get(self.crawler)

    def process_spider_input(self, response: Response) -> None:
        """Move the request's seqs aside before the callback runs: a request the
        callback builds with ``meta=response.meta`` must not carry them (its own
        "done" or "seen" would mark this page done before its output is through)."""
        request = response.request
        if request is not None:
            request.meta[_DONE_META] = request.meta.pop(SEQS_META, ())

    async def process_spider_output(self, response: Response, result: AsyncIterator[Any]
                                    ) -> AsyncIterator[Any]:
        df = self._filter()
        async for out in result:
            if df is not None:
                if isinstance(out, Request):
                    df.preadmit(out)
                elif out is not None:
                    df.item_yielded(response)
            yield out
        self._done(df, response)

    def process_spider_exception(self, response: Response, exception: BaseException) -> None:
        """The callback (or a middleware before it, e.g. HttpError) raised: Scrapy is
        done with this request, so is the ledger."""
        self._done(self._filter(), response)

    @staticmethod
    def _done(df: UrlSeenDupeFilter | None, response: Response) -> None:
        request = response.request
        if df is not None and request is not None:
            df.page_through(response, request.meta.pop(_DONE_META, ()))


class UrlSeenDownloaderMiddleware:
    """Marks a request that a downloader middleware ignored (``IgnoreRequest``: off
    site, disallowed by robots.txt) as done, skipped: it never reaches a callback,
    and without this mark every later run would offer it again."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> UrlSeenDownloaderMiddleware:
        return cls(crawler)

    def process_exception(self, request: Request, exception: BaseException) -> None:
        df = _filters.get(self.crawler)
        if df is not None and isinstance(exception, IgnoreRequest):
            df.done(request, state=State.SKIPPED)
