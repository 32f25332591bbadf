"""The crawl loop: N worker coroutines pull URLs from the frontier.

Per page: its turn (learned rules and trap budgets may skip it) -> robots.txt
check -> one fetch (one hop) -> its links, found in one function whatever the
response (``Engine._links_of``: a sitemap's URLs, a redirect's target, or the
HTML page's links and its main text's fingerprint, as ``follow`` chooses them),
resolved in one batch -> routed in one place (``Admission.route``: scope, depth,
owner and the per-host cap) -> the group commit, where the pages of a group go through the
learned rules and ``UrlSeen.admit_pages`` together (one call per group)
-> frontier. What is learned, and where it acts: ``crawler.core.schedule.learning``.

Durability (why a crash, even kill -9, never loses a URL) and what pages.jsonl
holds for each URL are ``crawler.core.durability.commit``'s; snapshots
(``crawler.core.durability.checkpoint``) only make a restart faster.

With ``hooks`` (``crawler.core.run.page``: what ``crawler.Crawler`` runs), each page
with a response also becomes a ``Page``: its handler's items are committed with
it (items.jsonl), ``follow`` chooses which of its links are admitted, and the
page is handed on (``deliver``) once committed.

Whether anything is left is decided in one place, ``crawler.core.run.underway``
(the frontier, the pages under way and, in a fleet, the deliveries being
received: ``UnderWay.idle``). The crawl ends in one place, ``Engine.end``: the
frontier closes, every worker returns after its current page, and ``run``
snapshots. Three things call it: ``UnderWay.idle`` turning true in a single
process, the fleet being done (``crawler.wire.relay``), and ``stop`` (a signal,
a fleet-wide stop request, an error).

As a fleet worker (``transport`` given: ``crawl --redis``), the engine fetches
only the hosts it owns (``hash(host) mod W``); a page's in-scope links for
other owners are forwarded *before* the page is marked, and locally idle is not
the end (``crawler.wire.relay`` says how).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.config.scope import Scope, hostname_of
from crawler.config.settings import Settings
from crawler.core.durability.checkpoint import Checkpoint
from crawler.core.durability.commit import GroupCommit, Links, items_file, output_files
from crawler.core.outputs.output import read_json
from crawler.core.run.page import HandlerError, HookResult, Hooks, Page
from crawler.core.run.progress import LIMIT_REACHED, Progress, SessionCounts, crawl_status
from crawler.core.run.signals import stop_on_signals
from crawler.core.run.underway import UnderWay
from crawler.core.schedule.admission import Admission
from crawler.core.schedule.frontier import Frontier, QueuedUrl
from crawler.core.schedule.learning import LATER, Learning
from crawler.core.schedule.politeness import Politeness
from crawler.core.schedule.retry import Retries
from crawler.core.schedule.sitemaps import SitemapCounts, SitemapFiles, without_sitemaps
from crawler.core.state.crawlstate import CrawlState
from crawler.core.state.pagecounts import PageCounts
from crawler.core.state.state import HOST_COUNTS_FILE
from crawler.net.fetch import Fetcher, FetchResult, decode_text
from crawler.net.links import extract_page
from crawler.net.netguard import check_literal_host
from crawler.net.robots import RobotsCache, origin_of
from crawler.net.sitemap import MAX_URLS, parse_sitemap
from dedup import CrawlPort, State, host_of

if TYPE_CHECKING:  # a single process loads no fleet code (tests/crawler/cli/test_cli.py)
    from crawler.wire.protocol import RemoteLink
    from crawler.wire.relay import Relay
    from crawler.wire.transport import RedisTransport

__all__ = ["Engine", "Watcher"]

log = logging.getLogger("crawler.core.engine")  # the name users configure; kept across moves


@dataclass(slots=True)
class _Found:
    """The links of one response (``Engine._links_of``), before routing."""

    final_url: str | None
    depth: int  # of the URLs they lead to
    count: int = 0  # links found (pages.jsonl's ``links_found``)
    pairs: Sequence[tuple[str, str] | None] = ()  # to route (none past max_depth)
    patterns: bool = True  # include/exclude apply (sitemaps: to the URLs they list)
    forward: bool = True  # other fleet workers' links are forwarded (not sitemaps)
    error: str | None = None  # a sitemap's: what was wrong with it
    page: Page | None = None  # the page the hooks saw
    hooked: HookResult | None = None  # what they made of it
    text_print: tuple[int, int, int, int] | None = None  # Learning.text_print


class Engine:
    """One crawl process over an open state directory (``seen``: a ``UrlSeen``, used
    only through its ``CrawlPort``).

    The caller owns ``seen`` (opens and closes it); the engine owns the
    fetcher, the page log and the background tasks, and leaves the state
    directory snapshotted and consistent when ``run`` returns.
    """

    def __init__(self, seen: CrawlPort, settings: Settings, scope: Scope, *,
                 progress: Progress | None = None,
                 transport: RedisTransport | None = None,
                 hooks: Hooks | None = None) -> None:
        self.seen = seen
        self.state = state = CrawlState(seen.records)
        self.hooks = hooks
        self.settings = settings
        self.scope = scope
        self.state_dir = Path(seen.state_dir)
        self.progress = progress or Progress(enabled=False)
        c = settings.crawl
        self.politeness = Politeness(per_host=settings.politeness.per_host,
                                     delay=settings.politeness.delay,
                                     max_crawl_delay=settings.politeness.max_crawl_delay,
                                     max_backoff=settings.fetch.max_retry_after)
        self.sitemap_counts = SitemapCounts(state)
        # the pages' counts: sitemap files are marked in the ledger too, but are no pages
        self._base = without_sitemaps(state.counts(), self.sitemap_counts.counts)
        done_before = self._base["fetched"] + self._base["failed"]
        max_take = max(0, c.max_pages - done_before) if c.max_pages else None
        self.frontier = Frontier(state, self.politeness, memory=c.frontier_memory,
                                 max_take=max_take, on_idle=self._maybe_end)
        self.under_way = UnderWay(self.frontier, self._maybe_end)
        self._canon = seen.canonicalizer
        cap = c.max_pages_per_host
        host_counts: dict[str, int] = (
            read_json(self.state_dir / HOST_COUNTS_FILE, {}) if cap else {})
        self.admission = Admission(seen, state, scope, cap, host_counts)
        self.checkpoint = Checkpoint(seen, state, settings.snapshot, self.politeness,
                                     host_counts if cap else None)
        out = settings.output
        self.fetcher = Fetcher(settings.fetch, record=bool(out.warc),
                               record_types=out.warc_content_types,
                               spool_dir=str(self.state_dir))
        # robots.txt that had no answer is asked again when its URL's next round comes
        self.robots = (RobotsCache(self.fetcher, settings.fetch.user_agent,
                                   max_crawl_delay=settings.politeness.max_crawl_delay,
                                   error_ttl=c.retry_delay)
                       if settings.politeness.obey_robots else None)
        self.pagelog, self.warc = output_files(self.state_dir, state, settings.output)
        self.items = items_file(self.state_dir, state)
        self.sitemaps = (SitemapFiles(self.state_dir, c.sitemap_max_files)
                         if c.sitemaps else None)
        self._sitemap_hosts: set[str] = set()  # seed hosts whose sitemaps this run queued
        self.retries = Retries(settings, self.frontier, state)
        # a fleet worker's outbox (links it forwarded) is synced with each group, before
        # the group marks the pages that found them
        outbox = transport.outbox if transport is not None else None
        self.pages = PageCounts(state)
        self.learning = Learning.of_crawl(seen, state, settings.learn, self.frontier)
        self.admission.learn_with(self.learning)
        self.committer = GroupCommit(self.pagelog, self.warc, seen, state, self.frontier,
                                     self.admission,
                                     totals=self.checkpoint.totals,
                                     before_commit=self.retries.before_commit,
                                     also_sync=[outbox] if outbox is not None else [],
                                     counts=self.pages, items=self.items,
                                     sitemaps=self.sitemaps,
                                     sitemap_counts=self.sitemap_counts,
                                     learning=self.learning)
        self._warc_pages = self.warc is not None
        if self.robots is not None and self.warc is not None:
            self.robots.on_fetch = self.committer.add_exchanges
        self.session = SessionCounts()
        self.stopping = False
        self.outcome = "finished"
        self._fatal: BaseException | None = None
        self._ended = asyncio.Event()
        self._closing = asyncio.Event()
        self._started = 0.0
        self._info: dict[str, Any] | None = None
        self._asked = False  # status() was called since the filter's fill was counted
        self.relay: Relay | None = None
        self._local = None  # which hosts this worker fetches: all, unless in a fleet
        if transport is not None:
            from crawler.wire.relay import Relay  # imports the Redis client

            self.relay = Relay(transport, settings.distributed, self)
            self._local = self.relay.is_local

    # -- control ---------------------------------------------------------------------

    def end(self) -> None:
        """The one place a crawl ends: take no new URL; each worker returns after its page."""
        if not self.stopping:
            f = self.frontier
            if f.max_take is not None and f.taken >= f.max_take:
                self.outcome = LIMIT_REACHED
        self.frontier.close()
        self._ended.set()

    def stop(self, reason: str = "stopped") -> None:
        """Graceful stop: take no new URL, let in-flight fetches finish (with a deadline)."""
        if self.stopping:
            return
        self.stopping = True
        self.outcome = reason
        self.end()

    def abort(self, exc: BaseException) -> bool:
        """Stop the crawl with an error that ``run`` raises; True for the first one."""
        first = self._fatal is None
        if first:
            self._fatal = exc
        self.stop("aborted")
        return first

    def message(self, text: str) -> None:
        self.progress.message(text)

    def _on_signal(self, name: str) -> None:
        self.stop(f"stopped by {name}")
        if self.relay is not None:  # every worker of the fleet stops too
            self.relay.request_stop()

    def _maybe_end(self) -> None:
        """The frontier ran dry, or a page or a delivery finished: a single process
        ends the crawl if nothing is under way; locally idle is not the end of a fleet
        worker, whose relay asks the fleet (see crawler.wire.relay)."""
        if self.relay is not None:
            self.relay.wake()
        elif self.under_way.idle():
            self.end()

    def locally_idle(self) -> bool:
        """Nothing to fetch, nothing in flight or being forwarded, no delivery un-acked."""
        return self.under_way.idle() and not self.stopping

    def receiving(self) -> AbstractContextManager[None]:
        """Held by the relay while a delivery is read, admitted and acked."""
        return self.under_way.delivery()

    async def admit_received(self, by_depth: Sequence[Links]) -> None:
        """Admit links another fleet worker forwarded, with the next group commit,
        and return once they are durable (only then may the relay ack them)."""
        links = [x for pairs, depth in by_depth
                 if (x := self.admission.route(pairs, depth)[0]) is not None]
        if links:
            await self.committer.commit(None, None, links)

    # -- running ---------------------------------------------------------------------

    async def run(self, *, install_signals: bool = False) -> dict[str, Any]:
        """Crawl until the frontier is exhausted, max pages is reached, or ``stop()``."""
        self._started = time.monotonic()
        with stop_on_signals(self._on_signal, lambda: self.stopping, self.progress.message,
                             grace=self.settings.crawl.stop_grace, install=install_signals):
            await self._crawl()
            await self.checkpoint.snapshot()
        if self._fatal is not None and not isinstance(self._fatal, HandlerError):
            raise self._fatal  # e.g. Redis lost: publishing would only wait for it
        summary = self.status(final=True)
        if self.relay is not None:  # after a handler error too: the fleet's summary
            await self.relay.publish(summary)  # then counts this worker's queue
        if self._fatal is not None:
            raise self._fatal
        self.progress.summary(summary)
        return summary

    async def _crawl(self) -> None:
        s = self.settings
        await self.pagelog.open()
        if (self.hooks is not None and self.hooks.handler is not None) or \
                self.items.path.exists():  # cut back to its committed size
            await self.items.open()
        if self.warc is not None:
            await self.warc.open()
        self.committer.start()
        snapshots = asyncio.create_task(self.checkpoint.run(self._closing),
                                        name="bloomcrawl-snapshots")
        progress = asyncio.create_task(self._progress_loop(), name="bloomcrawl-progress")
        workers: list[asyncio.Task[None]] = []
        fleet: list[asyncio.Task[None]] = []
        try:
            async with self.fetcher:
                self.frontier.load()
                workers = [asyncio.create_task(self._worker(), name=f"bloomcrawl-worker-{i}")
                           for i in range(s.crawl.concurrency)]
                if self.relay is not None:
                    fleet = self.relay.tasks()
                all_done = asyncio.gather(*workers, return_exceptions=True)
                ended = asyncio.create_task(self._ended.wait())
                await asyncio.wait([ended, all_done], return_when=asyncio.FIRST_COMPLETED)
                ended.cancel()
                if self.stopping and not all_done.done():  # in-flight fetches get a deadline
                    _, late = await asyncio.wait(workers, timeout=s.crawl.stop_grace)
                    if late:  # said, so that a resume's refetches are not a surprise
                        self.message(
                            f"bloomcrawl: {len(late)} page(s) still under way after "
                            f"{s.crawl.stop_grace:g} s (crawl.stop_grace): cut short; a "
                            "resume fetches again those not yet committed")
                    for t in late:
                        t.cancel()
                await all_done
                # A delivery being committed when cancelled stays un-acked: re-read on resume.
                for t in fleet:
                    t.cancel()
                await asyncio.gather(*fleet, return_exceptions=True)
            await self.committer.close()
        finally:
            for t in workers + fleet:
                t.cancel()
            if self.relay is not None:  # the other workers must hear of our stop
                await self.relay.stop_request_sent(timeout=s.crawl.stop_grace)
            progress.cancel()
            # not cancelled: a shard being written in a thread is let finish
            self._closing.set()
            await asyncio.gather(snapshots, progress, return_exceptions=True)
            await self.pagelog.close()
            await self.items.close()
            if self.warc is not None:
                await self.warc.close()

    async def _worker(self) -> None:
        frontier = self.frontier
        while True:
            queued = await frontier.get()
            if queued is None:
                return
            with self.under_way.page():
                try:
                    await self._process(queued)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # run() raises it: said once, by whoever runs it
                    self.abort(exc)
                    return

    async def _process(self, queued: QueuedUrl) -> None:
        url = queued.url
        frontier = self.frontier
        learning = self.learning
        if learning is not None and learning.busy(queued.host) and \
                (why := await learning.turn(queued, self.committer.turn)):
            if why != LATER:  # not fetched: a duplicate under a learned rule, a closed budget
                self.session.skipped += 1
                self.retries.forget(queued.seq)
            return
        robots = self.robots
        refused = not self.settings.fetch.allow_private and \
            check_literal_host(hostname_of(queued.host)) is not None
        if refused:
            robots = None  # the fetcher refuses it and says why; robots.txt would too, vaguely
        sitemap_level = self.sitemaps.level(url) if self.sitemaps is not None else None
        if robots is not None:
            try:
                answer = await robots.check(url)
            except BaseException:
                frontier.done(queued, requested=False, counted=False)
                raise
            self.politeness.set_crawl_delay(queued.host, robots.crawl_delay(url))
            if not answer.allowed:
                await self._not_allowed(queued, answer.unavailable, answer.retryable)
                return
        if self.sitemaps is not None and sitemap_level is None and queued.depth == 0 and \
                not refused and queued.host not in self._sitemap_hosts:
            self._sitemap_hosts.add(queued.host)
            try:
                await self._queue_sitemaps(url)
            except BaseException:
                frontier.done(queued, requested=False, counted=False)
                raise
        retries = self.retries
        seq = queued.seq
        allowed = retries.allowance(seq)
        if allowed == 0:  # spent before a restart (its last round counted in advance)
            frontier.done(queued, requested=False, counted=sitemap_level is None)
            await self._give_up(queued, retries.tried(seq).error or "retries exhausted")
            return
        reserved = allowed if retries.reserve(seq, allowed) else 0
        try:
            if reserved:  # a retry round: its requests are durable before they are sent
                await self.committer.commit(None, None)
            wait = self.politeness.reserve_send(queued.host, asyncio.get_running_loop().time())
            if wait > 0:
                await asyncio.sleep(wait)
            if sitemap_level is None:
                res = await self.fetcher.fetch(url, attempts=allowed)
            else:
                res = await self.fetcher.fetch_raw(
                    url, limit=self.settings.crawl.sitemap_max_bytes + 1, attempts=allowed)
        except BaseException:
            frontier.done(queued)
            raise
        tried = retries.spent(seq, reserved, res.attempts, res.error)
        if res.failed and res.retryable and await self._retry_later(
                queued, hold_host=res.status is None or res.interrupted,
                at_least=res.retry_after or 0.0):
            return
        error = res.error
        failed = res.failed
        links: Links | None = None
        remote: list[RemoteLink] = []
        try:
            found = await self._links_of(queued, res, sitemap_level)
            if found.pairs:  # the one place a response's links are routed
                links, remote = self.admission.route(found.pairs, found.depth, self._local,
                                                     patterns=found.patterns)
                if not found.forward:
                    remote = []
            if found.error is not None:  # a sitemap, answered but unreadable
                error = f"sitemap: {found.error}"
                log.warning("sitemap %s: %s", url, found.error)  # no pages.jsonl line says it
        finally:
            frontier.done(queued, retry_after=res.retry_after if res.status in (429, 503)
                          else None, counted=sitemap_level is None)
        links_found, final_url, page, hooked = found.count, found.final_url, found.page, \
            found.hooked
        if hooked is not None and hooked.error is not None and self.hooks is not None \
                and self.hooks.stops:
            # not committed: the URL stays queued, and a resume handles it again
            retries.forget(seq)
            self.abort(HandlerError(url, hooked.error))
            return
        if remote:  # with their owners before this page counts as done
            assert self.relay is not None  # only a fleet worker has remote links
            await self.relay.forward(remote)
        self._count_done(queued, State.FAILED if failed else State.FETCHED)
        retries.forget(seq)
        hooks = self.hooks
        extra = ({"items": hooked.count, "handler_error": hooked.error}
                 if hooked is not None and hooks is not None and hooks.records else None)
        await self.committer.commit_page(queued, res, final_url, links_found, links,
                                         State.FAILED if failed else State.FETCHED, error,
                                         warc=self._warc_pages, attempts=tried.requests,
                                         items=hooked.items if hooked is not None else b"",
                                         extra=extra, text_print=found.text_print)
        if page is not None and hooks is not None and hooks.deliver is not None:
            await hooks.deliver(page)

    async def _links_of(self, queued: QueuedUrl, res: FetchResult, sitemap_level: int | None
                        ) -> _Found:
        """The links of a response, whatever it is: a sitemap's URLs, a redirect's
        target or a page's links, as the hooks see them (``follow`` may choose others):
        the one function that finds them, for ``_process`` to route. A redirect target
        is a level deeper, like a link: an endless chain of unique redirects ends at
        max_depth like an endless chain of links."""
        if sitemap_level is not None:
            return await self._sitemap_links(queued, res, sitemap_level)
        url = queued.url
        status = res.status
        hooks = self.hooks if status is not None else None
        deeper = queued.depth < self.settings.crawl.max_depth
        out = _Found(final_url=url, depth=queued.depth + 1)
        base = url
        pairs: list[tuple[str, str] | None] = []
        text = None
        if status is not None and 300 <= status < 400 and res.location is not None:
            out.count = 1
            pairs = self._canon.resolve_many((res.location,), url)
            out.final_url = pairs[0][0] if pairs[0] is not None else None
        elif res.body is not None:
            learning = self.learning
            base, hrefs, main = extract_page(res.body, url, charset=res.charset,
                                             nofollow=self.settings.crawl.honor_nofollow,
                                             text=learning is not None)
            if learning is not None:
                out.text_print = learning.text_print(queued.host, main)
            out.count = len(hrefs)
            if hrefs and (deeper or hooks is not None):
                pairs = self._canon.resolve_many(hrefs, base)
            if hooks is not None:
                text = decode_text(res.body, res.charset)
        if hooks is not None:
            out.page = self._page(queued, res, out.final_url, self._in_scope(pairs),
                                  body=res.body or b"", text=text)
            out.hooked = hooked = await hooks.run(out.page, follow=deeper)
            if hooked.error is not None and hooks.stops:
                return out  # not committed: nothing is routed
            if hooked.follow is not None:
                pairs = self._canon.resolve_many(hooked.follow, base) if hooked.follow else []
        if deeper:
            out.pairs = pairs
        return out

    def _page(self, queued: QueuedUrl, res: FetchResult, final_url: str | None, links: list[str],
              *, body: bytes, text: str | None, sitemap: bool = False) -> Page:
        assert res.status is not None
        return Page(url=queued.url, final_url=final_url, status=res.status,
                    headers=res.headers or {}, depth=queued.depth,
                    referrer=self.state.referrer_of(queued.seq) if queued.depth else None,
                    content_type=res.content_type, body=body, text=text, links=links,
                    error=res.error, sitemap=sitemap)

    def _in_scope(self, pairs: Sequence[tuple[str, str] | None], *,
                  patterns: bool = True) -> list[str]:
        """The URLs of resolved ``pairs`` in the crawl's scope (hosts, and include/exclude
        with ``patterns``), each once, in order: a ``Page``'s ``links``."""
        allows = self.scope.allows_host
        url_ok = self.scope.url_filter() if patterns else None
        return list(dict.fromkeys(
            p[0] for p in pairs
            if p is not None and allows(host_of(p[0])) and (url_ok is None or url_ok(p[1]))))

    async def _queue_sitemaps(self, url: str) -> None:
        """Queue the sitemaps of a seed's host (its robots.txt's ``Sitemap:`` lines,
        else /sitemap.xml) at depth 1, through the ledger like links: durable before
        the seed is fetched, and exactly once (the seen-test) when a resume does it
        again for a seed whose record a crash lost."""
        assert self.sitemaps is not None
        if self.settings.crawl.max_depth < 1:
            return
        found = self.robots.sitemaps(url) if self.robots is not None else []
        if not found:
            origin = origin_of(url)
            if origin is None:
                return
            found = [origin + "/sitemap.xml"]
        pairs = self.sitemaps.register(self._canon.resolve_many(found, url), 0)
        links, _ = self.admission.route(pairs, 1, self._local, patterns=False)
        # a sitemap on a host another fleet worker owns is not read (not forwarded:
        # the owner would not know it for a sitemap)
        if links is not None:
            await self.committer.commit(None, None, [links])

    async def _sitemap_links(self, queued: QueuedUrl, res: FetchResult, level: int
                             ) -> _Found:
        """A fetched sitemap's URLs, at the sitemap's own depth (``error``: what was
        wrong with it). An index's sitemaps are queued (level 1) only from a level-0
        sitemap; a redirect's target is a sitemap of the same level. With a
        ``follow`` hook, it decides which of them are queued, as for a page's links
        (it sees the sitemap as a ``Page`` with ``sitemap=True``; no handler runs)."""
        assert self.sitemaps is not None
        c = self.settings.crawl
        url = queued.url
        status = res.status
        out = _Found(final_url=url, depth=queued.depth)
        if queued.depth > c.max_depth:
            return out
        child: int | None = level  # what the URLs are: sitemaps of this level, or pages
        if status is not None and 300 <= status < 400 and res.location is not None:
            pairs = self._canon.resolve_many((res.location,), url)
            out.count, out.final_url = 1, pairs[0][0] if pairs[0] is not None else None
        elif res.body is None or status is None or not 200 <= status < 300:
            return out  # the fetch's own error says why
        elif res.nbytes > c.sitemap_max_bytes:
            out.error = f"too large (>{c.sitemap_max_bytes} bytes)"
            return out
        else:
            parsed = parse_sitemap(res.body, max_bytes=c.sitemap_max_bytes, max_urls=MAX_URLS)
            if parsed.error is not None:
                out.error = parsed.error
                return out
            out.count, out.error = len(parsed.locs), parsed.note
            if parsed.index and level >= 1:
                out.error = "an index listed by an index (not read)"
                return out
            child = level + 1 if parsed.index else None
            pairs = self._canon.resolve_many(parsed.locs, url)
        hooks = self.hooks
        if hooks is not None and hooks.follow is not None:
            page = self._page(queued, res, out.final_url,
                              self._in_scope(pairs, patterns=child is None),
                              body=res.body or b"", text=None, sitemap=True)
            out.hooked = hooked = await hooks.run(page, follow=True, handle=False)
            if hooked.error is not None:
                log.warning("follow raised on the sitemap %s%s", url,
                            "" if hooks.stops else " (its URLs are all queued)")
            elif hooked.follow is not None:
                pairs = self._canon.resolve_many(hooked.follow, url) if hooked.follow else []
        if child is not None:  # sitemaps: checked against the patterns by their URLs;
            # one on a host another fleet worker owns is not read (not forwarded: the
            # owner would not know it for a sitemap)
            out.pairs = self.sitemaps.register(pairs, child)
            out.patterns = out.forward = False
        else:
            out.pairs = pairs
        return out

    async def _not_allowed(self, queued: QueuedUrl, unavailable: str | None,
                           retryable: bool) -> None:
        """robots.txt says no: skipped for good, retried later, or given up (failed)."""
        frontier = self.frontier
        if unavailable is None:  # a real Disallow
            frontier.done(queued, requested=False, counted=False)
            self._count_done(queued, State.SKIPPED)
            tried = self.retries.tried(queued.seq)
            self.retries.forget(queued.seq)
            await self.committer.commit_page(queued, None, queued.url, 0, None, State.SKIPPED,
                                             "robots.txt", warc=self._warc_pages,
                                             attempts=tried.requests)
            return
        if retryable:
            error = f"robots.txt unavailable: {unavailable}"
            self.retries.lost_round(queued.seq, error)
            if await self._retry_later(queued, hold_host=True, requested=False):
                return
        else:  # refused for good (an SSRF refusal names itself, not robots.txt:
            error = unavailable  # the page would be refused just the same)
        frontier.done(queued, requested=False, counted=not self._is_sitemap(queued))
        await self._give_up(queued, error)

    async def _give_up(self, queued: QueuedUrl, error: str) -> None:
        """Record ``queued`` failed without a fetch this round (its frontier slot released)."""
        tried = self.retries.tried(queued.seq)
        self.retries.forget(queued.seq)
        self._count_done(queued, State.FAILED)
        await self.committer.commit_page(queued, None, queued.url, 0, None, State.FAILED, error,
                                         warc=self._warc_pages, attempts=tried.requests)

    def _is_sitemap(self, queued: QueuedUrl) -> bool:
        return self.sitemaps is not None and self.sitemaps.level(queued.url) is not None

    def _count_done(self, queued: QueuedUrl, state: State) -> None:
        """This run's figures, for a URL about to be marked ``state``: a page, or a
        sitemap file (no page: ``crawler.core.schedule.sitemaps``)."""
        s = self.session
        if self._is_sitemap(queued):
            s.sitemaps += 1
        elif state == State.SKIPPED:
            s.skipped += 1
        else:
            s.pages += 1
            s.failed += int(state == State.FAILED)

    async def _retry_later(self, queued: QueuedUrl, *, hold_host: bool, requested: bool = True,
                           at_least: float = 0.0) -> bool:
        """Put ``queued`` back for a later round; False: its budget is spent, give it up.

        Its tries so far are committed first, so a restart goes on from them.
        While stopping, nothing is retried: the URL just stays QUEUED for resume.
        """
        retries = self.retries
        if not self.stopping and not retries.can_retry(queued.seq):
            return False
        retries.keep(queued.seq)
        try:
            await self.committer.commit(None, None)
        except BaseException:
            self.frontier.done(queued, requested=requested, counted=False)
            raise
        if self.stopping:
            self.frontier.done(queued, requested=requested, counted=False)
            return True
        return retries.later(queued, hold_host=hold_host, requested=requested,
                             at_least=at_least)

    async def _progress_loop(self) -> None:
        interval = self.settings.output.progress_interval
        last_pages, last_t = 0, time.monotonic()
        while True:
            await asyncio.sleep(interval)
            if not (self.progress.due(time.monotonic()) or self.relay is not None
                    or self._asked):
                continue  # no line due, no fleet, no reader: the figures would go unread
            self._asked = False
            # Fill counts bits over the whole filter (ms for a default one): off the
            # loop (it only reads), and only for a reader.
            self._info = await asyncio.to_thread(self.seen.filter_info)
            now = time.monotonic()
            status = self._status()
            pages = self.session.pages
            status["rate"] = (pages - last_pages) / max(1e-9, now - last_t)
            last_pages, last_t = pages, now
            self.progress.update(status, now=now)
            if self.relay is not None:
                await self.relay.publish(status)

    def status(self, *, final: bool = False) -> dict[str, Any]:
        """Live figures (cheap: no ledger scan) for the status line and the summary;
        the filter's fill as the progress loop last counted it (the next tick counts
        it again because this asked)."""
        self._asked = True
        return self._status(final=final)

    def _status(self, *, final: bool = False) -> dict[str, Any]:
        info = self._info
        if final or info is None:
            info = self._info = self.seen.filter_info()
        out = crawl_status(
            # the outcome is decided when the crawl ends; a reader before that (the
            # dashboard, a fleet's supervisor) sees it running
            outcome=self.outcome if self.frontier.closed else "running",
            elapsed=time.monotonic() - self._started if self._started else 0.0,
            base=self._base, session=self.session, queued_new=self.admission.queued,
            in_flight=self.frontier.in_flight,
            hosts=self.frontier.hosts, counters=self.seen.counters, info=info,
            shards=info["shards"], state_dir=str(self.state_dir), pages=self.pages.counts)
        out["capacity"] = info["capacity"]
        if self.relay is not None:
            out.update(self.relay.status())
        if self.hooks is not None and self.hooks.records:
            out["items"] = self.hooks.items
            out["handler_errors"] = self.hooks.errors
        if self.learning is not None:
            out["learn"] = self.learning.status()
        if self.sitemaps is not None or any(self.sitemap_counts.counts.values()):
            out["sitemaps"] = dict(self.sitemap_counts.counts)
        if final:
            out["totals"] = self.checkpoint.totals()
        return out


# Something that runs alongside an engine for as long as it crawls, reading it (the
# dashboard, ``crawler.ui``): given the engine, an async context manager.
Watcher = Callable[["Engine"], AbstractAsyncContextManager[object]]
