"""The crawl loop: N worker coroutines pull URLs from the frontier, no callbacks.

Per page: robots.txt check -> one fetch (one hop) -> a redirect target, or the
HTML page's links, resolved in one batch, filtered by scope, depth and the
per-host cap -> ``UrlSeen.admit_resolved`` (one call per page) -> frontier.

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

pages.jsonl holds one record per URL taken from the frontier: fetched pages
(any status), failures (``status`` null or 5xx/429, ``error`` set) and URLs
robots.txt disallows (``status`` null, ``error`` "robots.txt", ledger state
skipped). Links over the per-host cap are marked skipped in the ledger without
a record; out-of-scope and too-deep links are never admitted at all.

Shard snapshots are written one shard per ``asyncio.to_thread`` call,
periodically (time and new-URL triggers) and at the end; they only make a
restart faster, since opening the state replays the ledger past each
snapshot's high-water mark.

As a fleet worker (``transport`` given: ``crawl --redis``), the engine fetches
only the hosts it owns (``hash(host) mod W``). A page's in-scope links for other
owners are forwarded *before* the page is marked — batched with the links of
pages that finished meanwhile, one ``RedisTransport.forward`` round trip per
batch — so a crash in between refetches the page and forwards again (the
owner's seen-test drops repeats). A receive task takes what other
workers forwarded: ``admit_resolved`` per depth -> ``seen.commit()`` ->
frontier -> ``ack`` — an entry leaves the owner's stream only once its URLs
are durable in the owner's ledger; an un-acked one is re-read after a crash.
Locally idle (nothing queued, in flight, being forwarded or being received)
is not the end: a fleet task reports idle and polls ``fleet_done`` (every
worker idle, every stream drained, in one atomic reading), and ends the crawl
only then; it also polls for a fleet-wide stop request, and a signal to this
worker makes that request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.fetch import Fetcher, FetchResult
from crawler.frontier import Frontier, Item
from crawler.links import extract_links
from crawler.netguard import check_literal_host
from crawler.output import (
    PAGES_FILE,
    PageLog,
    WarcWriter,
    iso_time,
    read_json,
    write_json_atomic,
)
from crawler.politeness import Politeness
from crawler.progress import Progress
from crawler.robots import RobotsCache
from crawler.scope import Scope, authority_of, hostname_of, read_seeds
from crawler.settings import Settings, settings_from_dict
from dedup import Canonicalizer, State, UrlSeen

if TYPE_CHECKING:
    from crawler.fleet.protocol import Delivery
    from crawler.fleet.transport import RedisTransport

__all__ = ["CONFIG_KEY", "FLEET_KEY", "SCOPE_KEY", "TOTALS_KEY", "CrawlError", "Engine",
           "check_new_state_dir", "create_crawl", "open_crawl", "run_crawl"]

log = logging.getLogger("crawler.engine")

CONFIG_KEY = "config"
SCOPE_KEY = "scope"
TOTALS_KEY = "dedup_totals"
FLEET_KEY = "fleet"  # a fleet worker's identity: crawl_id, workers, worker_id, redis
HOST_COUNTS_FILE = "host_counts.json"
_COUNTER_KEYS = ("links", "new", "repeats", "rejected", "bloom_definitely_new", "bloom_maybe",
                 "confirm_cache_hits", "ledger_queries", "false_positives")


class CrawlError(Exception):
    """A crawl cannot start or continue; the message is one line for the user."""


# -- state directories ------------------------------------------------------------------


def _open_seen(state_dir: Path, settings: Settings, *, create: bool,
               crawl_id: str | None = None) -> UrlSeen:
    d = settings.dedup
    if create:
        return UrlSeen(state_dir, capacity=d.capacity, error_rate=d.error_rate, shards=d.shards,
                       seed=d.seed, growth=d.growth, rules=settings.canonical.rules(),
                       confirm_cache_size=d.confirm_cache_size,
                       canon_cache_size=d.canon_cache_size, crawl_id=crawl_id, create=True,
                       autocommit=False)
    return UrlSeen(state_dir, confirm_cache_size=d.confirm_cache_size,
                   canon_cache_size=d.canon_cache_size, create=False, autocommit=False)


def check_new_state_dir(state_dir: str | Path) -> None:
    """Refuse a directory that holds a crawl or anything else (before touching Redis)."""
    state_dir = Path(state_dir)
    if (state_dir / "ledger.sqlite").exists():
        raise CrawlError(f"{state_dir} already holds a crawl; continue it with "
                         f"'bloomcrawl resume {state_dir}' or choose another --state directory")
    if state_dir.exists():
        if not state_dir.is_dir():
            raise CrawlError(f"state directory {state_dir}: exists and is not a directory")
        if any(state_dir.iterdir()):
            raise CrawlError(f"state directory {state_dir}: not empty and not a bloomcrawl "
                             "state directory; choose a new or empty directory")


def create_crawl(state_dir: str | Path, settings: Settings, seeds_file: str | Path, *,
                 crawl_id: str | None = None, owns: Callable[[str], bool] | None = None,
                 meta: dict[str, Any] | None = None) -> tuple[UrlSeen, Scope, list[str]]:
    """Start a new crawl in an empty (or new) ``state_dir`` from a seeds file.

    Freezes ``settings`` and the scope into the ledger and admits the seeds at
    depth 0 in one batch. A fleet worker passes the fleet's ``crawl_id`` (its
    filter must carry it to be merged with the others'), ``owns(host)`` (it
    admits only its own seeds; the scope is still every seed's host) and its
    identity as ``meta`` (stored under ``FLEET_KEY``).
    Returns (seen, scope, problems with seed lines).
    Raises CrawlError (directory in use or not empty) or SeedError.
    """
    state_dir = Path(state_dir)
    check_new_state_dir(state_dir)
    seeds, problems = read_seeds(seeds_file, Canonicalizer(settings.canonical.rules()))
    scope = Scope.for_seeds([url for url, _ in seeds], settings.crawl.allow_domains)
    if owns is not None:
        seeds = [(url, key) for url, key in seeds if owns(authority_of(url))]
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        probe = state_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise CrawlError(f"cannot write state directory {state_dir}: "
                         f"{exc.strerror or exc}") from None
    seen = _open_seen(state_dir, settings, create=True, crawl_id=crawl_id)
    try:
        seen.ledger.meta_set(CONFIG_KEY, settings.to_dict())
        seen.ledger.meta_set(SCOPE_KEY, scope.to_dict())
        if meta is not None:
            seen.ledger.meta_set(FLEET_KEY, meta)
        admitted = seen.admit_resolved(seeds, depth=0)
        if settings.crawl.max_pages_per_host:
            write_json_atomic(state_dir / HOST_COUNTS_FILE,
                              dict(Counter(n.host for n in admitted)))
        seen.ledger.meta_set(TOTALS_KEY, {k: seen.counters.get(k, 0) for k in _COUNTER_KEYS})
        seen.commit()
    except BaseException:
        seen.close()
        raise
    return seen, scope, problems


def open_crawl(state_dir: str | Path) -> tuple[UrlSeen, Settings, Scope]:
    """Reopen a crawl's state directory with its frozen settings (for resume)."""
    state_dir = Path(state_dir)
    if not state_dir.is_dir():
        raise CrawlError(f"state directory {state_dir}: not found")
    if not (state_dir / "ledger.sqlite").exists():
        raise CrawlError(f"{state_dir} is not a bloomcrawl state directory (no ledger.sqlite)")
    seen = UrlSeen(state_dir, create=False, autocommit=False)
    try:
        frozen = seen.ledger.meta_get(CONFIG_KEY)
        scope = seen.ledger.meta_get(SCOPE_KEY)
        if frozen is None or scope is None:
            raise CrawlError(f"{state_dir} holds a URL-seen ledger but no crawl configuration "
                             "(it was not created by 'bloomcrawl crawl')")
        settings = settings_from_dict(frozen, source=f"{state_dir} frozen config")
    except BaseException:
        seen.close()
        raise
    return seen, settings, Scope.from_dict(scope)


# -- the engine ----------------------------------------------------------------------------


class _Committer:
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
        self._pending: list[tuple[dict[str, Any], tuple[int, State, int | None, str | None],
                                  tuple[str, str, bytes, float] | None,
                                  asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self.groups = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="bloomcrawl-committer")

    async def commit(self, record: dict[str, Any],
                     mark: tuple[int, State, int | None, str | None],
                     warc_page: tuple[str, str, bytes, float] | None = None) -> None:
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
            self.groups += 1
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


class Engine:
    """One crawl process over an open ``UrlSeen`` state directory.

    The caller owns ``seen`` (opens and closes it); the engine owns the
    fetcher, the page log and the background tasks, and leaves the state
    directory snapshotted and consistent when ``run`` returns.
    """

    def __init__(self, seen: UrlSeen, settings: Settings, scope: Scope, *,
                 progress: Progress | None = None,
                 transport: RedisTransport | None = None) -> None:
        self.seen = seen
        self.settings = settings
        self.scope = scope
        self.state_dir = Path(seen.state_dir)
        self.progress = progress or Progress(enabled=False)
        c = settings.crawl
        self.politeness = Politeness(per_host=settings.politeness.per_host,
                                     delay=settings.politeness.delay,
                                     max_crawl_delay=settings.politeness.max_crawl_delay,
                                     max_backoff=settings.fetch.max_retry_after)
        counts = seen.ledger.counts()
        self._base = counts
        done_before = counts["fetched"] + counts["failed"]
        max_take = max(0, c.max_pages - done_before) if c.max_pages else None
        self.frontier = Frontier(seen.ledger, self.politeness, memory=c.frontier_memory,
                                 max_take=max_take)
        self._canon = seen.canonicalizer
        self._cap = c.max_pages_per_host
        self._max_depth = c.max_depth
        self._nofollow = c.honor_nofollow
        self._allow_private = settings.fetch.allow_private
        self._host_counts: dict[str, int] = {}
        if self._cap:
            self._host_counts = read_json(self.state_dir / HOST_COUNTS_FILE, {})
        self._totals_before: dict[str, int] = dict(seen.ledger.meta_get(TOTALS_KEY, {}) or {})
        self._counters_at_open = {k: seen.counters.get(k, 0) for k in _COUNTER_KEYS}
        # session counters
        self.pages = 0  # fetched this run (successes and failures)
        self.failed = 0
        self.skipped = 0
        self.queued_new = 0  # URLs queued this run
        self.stopping = False
        self.outcome = "finished"
        self._fatal: BaseException | None = None
        self._stop_event: asyncio.Event | None = None
        self._closing: asyncio.Event | None = None
        self._started = 0.0
        self._snap_lock: asyncio.Lock | None = None
        self._fetcher: Fetcher | None = None
        self._robots: RobotsCache | None = None
        self._committer: _Committer | None = None
        self._info: dict[str, Any] | None = None
        # -- fleet worker (None: the single-process crawl) --
        self.transport = transport
        self._is_local: Callable[[str], bool] | None = None
        self._processing = 0  # pages between frontier.get() and their commit
        self._receiving = False  # a delivery taken from the stream and not yet acked
        self._wake: asyncio.Event | None = None
        self._fleet_stop: asyncio.Task[None] | None = None
        self._forward_cache = _RecentKeys(settings.distributed.forward_cache_size)
        self._sending: dict[str, asyncio.Future[None]] = {}  # key -> the batch carrying it
        self._outbox: list[tuple[str, str, str, int]] = []  # the batch being filled
        self._outbox_done: asyncio.Future[None] | None = None
        self._outbox_wake: asyncio.Event | None = None
        self.forward_batches = 0
        self.forwarded = 0  # links sent to their owners this run
        self.received = 0  # links received from other workers this run
        if transport is not None:
            self._is_local = transport.is_local
            # Locally idle is not the end: the fleet decides (see _fleet_loop).
            self.frontier.on_idle = self._on_local_idle

    # -- control ---------------------------------------------------------------------

    def stop(self, reason: str = "stopped") -> None:
        """Graceful stop: take no new URL, let in-flight fetches finish (with a deadline)."""
        if self.stopping:
            return
        self.stopping = True
        self.outcome = reason
        self.frontier.close()
        if self._stop_event is not None:
            self._stop_event.set()

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if not self.stopping:
            self.progress.message(
                f"bloomcrawl: {name}: stopping — finishing in-flight fetches (up to "
                f"{self.settings.crawl.stop_grace:g} s); send it again to exit at once")
            self.stop(f"stopped by {name}")
            if self.transport is not None:  # every worker of the fleet stops too
                self._fleet_stop = asyncio.get_running_loop().create_task(
                    self._request_fleet_stop())
            return
        # Second signal: leave now. The ledger is the truth; everything taken
        # but not yet marked stays QUEUED and is fetched on resume.
        with contextlib.suppress(Exception):
            self.progress.message(f"bloomcrawl: {name} again: exiting now (resumable)")
        os._exit(128 + signum)

    # -- running ---------------------------------------------------------------------

    async def run(self, *, install_signals: bool = False) -> dict[str, Any]:
        """Crawl until the frontier is exhausted, max pages is reached, or ``stop()``."""
        loop = asyncio.get_running_loop()
        self._started = time.monotonic()
        self._stop_event = asyncio.Event()
        self._closing = asyncio.Event()
        self._snap_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._outbox_wake = asyncio.Event()
        signals = (signal.SIGINT, signal.SIGTERM) if install_signals else ()
        for sig in signals:
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            await self._crawl()
            await self.snapshot()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
        if self._fatal is not None:
            raise self._fatal
        summary = self.status(final=True)
        if self.transport is not None:
            await self._publish(summary)
        self.progress.summary(summary)
        return summary

    async def _crawl(self) -> None:
        s = self.settings
        pagelog = await PageLog(self.state_dir / PAGES_FILE).open()
        warc = await WarcWriter(s.output.warc).open() if s.output.warc else None
        fetcher = self._fetcher = Fetcher(s.fetch)
        if s.politeness.obey_robots:
            self._robots = RobotsCache(fetcher, s.fetch.user_agent,
                                       max_crawl_delay=s.politeness.max_crawl_delay)
        committer = self._committer = _Committer(pagelog, warc, self.seen, self.frontier)
        committer.start()
        snapshots = asyncio.create_task(self._snapshot_loop(), name="bloomcrawl-snapshots")
        progress = asyncio.create_task(self._progress_loop(), name="bloomcrawl-progress")
        workers: list[asyncio.Task[None]] = []
        fleet: list[asyncio.Task[None]] = []
        try:
            async with fetcher:
                self.frontier.load()
                workers = [asyncio.create_task(self._worker(), name=f"bloomcrawl-worker-{i}")
                           for i in range(s.crawl.concurrency)]
                if self.transport is not None:
                    fleet = [asyncio.create_task(self._guard(self._receive_loop()),
                                                 name="bloomcrawl-receive"),
                             asyncio.create_task(self._guard(self._forward_loop()),
                                                 name="bloomcrawl-forward"),
                             asyncio.create_task(self._guard(self._fleet_loop()),
                                                 name="bloomcrawl-fleet")]
                stop_wait = asyncio.create_task(self._stop_event.wait())
                all_done = asyncio.gather(*workers, return_exceptions=True)
                await asyncio.wait([stop_wait, all_done], return_when=asyncio.FIRST_COMPLETED)
                stop_wait.cancel()
                if not all_done.done():  # stopping: in-flight fetches get a deadline
                    _, pending = await asyncio.wait(workers, timeout=s.crawl.stop_grace)
                    for t in pending:
                        t.cancel()
                await all_done
                # A delivery being committed when cancelled stays un-acked: re-read on resume.
                for t in fleet:
                    t.cancel()
                await asyncio.gather(*fleet, return_exceptions=True)
                f = self.frontier
                if f.max_take is not None and f.taken >= f.max_take and not self.stopping:
                    self.outcome = "max pages reached"
            await committer.close()
        finally:
            for t in workers + fleet:
                t.cancel()
            if self._fleet_stop is not None:  # the other workers must hear of our stop
                await asyncio.wait([self._fleet_stop], timeout=self.settings.crawl.stop_grace)
            progress.cancel()
            # not cancelled: a shard being written in a thread is let finish
            self._closing.set()
            await asyncio.gather(snapshots, progress, return_exceptions=True)
            await pagelog.close()
            if warc is not None:
                await warc.close()

    async def _worker(self) -> None:
        frontier = self.frontier
        while True:
            item = await frontier.get()
            if item is None:
                return
            self._processing += 1
            try:
                await self._process(item)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._fatal is None:
                    self._fatal = exc
                    log.error("crawl aborted on %s: %r", item.url, exc)
                self.stop("aborted")
                return
            finally:
                self._processing -= 1
                if not self._processing and self._wake is not None:
                    self._wake.set()

    async def _process(self, item: Item) -> None:
        url = item.url
        frontier = self.frontier
        robots = self._robots
        if robots is not None and not self._allow_private and \
                check_literal_host(hostname_of(item.host)) is not None:
            robots = None  # the fetcher refuses it and says why; robots.txt would too, vaguely
        if robots is not None:
            try:
                allowed = await robots.allowed(url)
            except BaseException:
                frontier.done(item, requested=False, counted=False)
                raise
            self.politeness.set_crawl_delay(item.host, robots.crawl_delay(url))
            if not allowed:
                frontier.done(item, requested=False, counted=False)
                self.skipped += 1
                await self._commit(item, None, url, 0, 0, State.SKIPPED, "robots.txt")
                return
        assert self._fetcher is not None
        try:
            wait = self.politeness.reserve_send(item.host, asyncio.get_running_loop().time())
            if wait > 0:
                await asyncio.sleep(wait)
            res = await self._fetcher.fetch(url)
        except BaseException:
            frontier.done(item)
            raise
        links_found = links_new = 0
        remote: list[tuple[str, str, str, int]] = []
        final_url: str | None = url
        try:
            status = res.status
            if status is not None and 300 <= status < 400 and res.location is not None:
                links_found = 1
                target = self._canon.resolve_many((res.location,), url)[0]
                final_url = target[0] if target is not None else None
                if target is not None:
                    links_new, remote = self._admit((target,), item.depth)  # a hop, not a level
            elif res.body is not None:
                base, hrefs = extract_links(res.body, url, charset=res.charset,
                                            nofollow=self._nofollow)
                links_found = len(hrefs)
                if item.depth < self._max_depth and hrefs:
                    links_new, remote = self._admit(self._canon.resolve_many(hrefs, base),
                                                    item.depth + 1)
        finally:
            frontier.done(item, retry_after=res.retry_after if res.status in (429, 503)
                          else None)
        if remote:  # with their owners before this page counts as done
            await self._forward(remote)
        failed = _failed(res)
        self.pages += 1
        if failed:
            self.failed += 1
        await self._commit(item, res, final_url, links_found, links_new,
                           State.FAILED if failed else State.FETCHED, res.error)

    def _admit(self, pairs: Sequence[tuple[str, str] | None], depth: int
               ) -> tuple[int, list[tuple[str, str, str, int]]]:
        """Scope, per-host cap, URL-seen test (one batch), frontier.

        Returns (URLs queued, in-scope links of hosts another worker owns as
        ``(url, key, host, depth)`` — always empty for a single process). The
        owner alone applies the cap and the seen-test to its hosts' links.
        """
        allows = self.scope.allows_host
        cap = self._cap
        counts = self._host_counts
        local = self._is_local
        keep = []
        remote: list[tuple[str, str, str, int]] = []
        for pair in pairs:
            if pair is None:
                continue
            host = authority_of(pair[0])
            if not allows(host):
                continue
            if local is not None and not local(host):
                remote.append((pair[0], pair[1], host, depth))
                continue
            if cap and counts.get(host, 0) >= cap:
                continue
            keep.append(pair)
        if not keep:
            return 0, remote
        new = self.seen.admit_resolved(keep, depth=depth)
        if cap and new:
            ok = []
            over = []
            for n in new:
                c = counts.get(n.host, 0)
                if c >= cap:
                    over.append((n.seq, State.SKIPPED, None, "host page cap"))
                else:
                    counts[n.host] = c + 1
                    ok.append(n)
            if over:  # several links of one page went past the cap together
                self.seen.ledger.mark_many(over)
            new = ok
        if new:
            self.frontier.add(new)
            self.queued_new += len(new)
        return len(new), remote

    async def _commit(self, item: Item, res: FetchResult | None, final_url: str | None,
                      links_found: int, links_new: int, state: State,
                      error: str | None) -> None:
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
        if (self.settings.output.warc and res is not None and res.body is not None
                and status is not None and 200 <= status < 300):
            warc_page = (item.url, res.content_type or "text/html", res.body, now)
        assert self._committer is not None
        await self._committer.commit(record, (item.seq, state, status, error), warc_page)

    # -- the fleet (a worker of ``bloomcrawl crawl --redis``) ----------------------------
    #
    # A link of a host another worker owns is forwarded to that owner's stream
    # before the page that found it is marked (a crash in between refetches the
    # page and forwards it again; the owner's seen-test drops the repeat). The
    # receive task admits what others forward, commits it, and only then acks.

    async def _forward(self, items: list[tuple[str, str, str, int]]) -> None:
        """Hand a page's remote links to the forwarder; return once Redis holds them all.

        Group forwarding, like the group commit: links of pages finished while
        one batch is on the wire go out together in the next (one round trip).
        A key sent lately is skipped; a key already in a batch on its way is
        not added again, but that batch is waited for.
        """
        recent = self._forward_cache
        sending = self._sending
        waits: set[asyncio.Future[None]] = set()
        for item in items:
            key = item[1]
            if key in recent:
                continue
            fut = sending.get(key)
            if fut is None:
                if self._outbox_done is None:
                    self._outbox_done = asyncio.get_running_loop().create_future()
                fut = sending[key] = self._outbox_done
                self._outbox.append(item)
            waits.add(fut)
        if not waits:
            return
        assert self._outbox_wake is not None
        self._outbox_wake.set()
        await asyncio.wait(waits)  # not gather: a cancelled page must not cancel a batch
        for fut in waits:
            if fut.cancelled():
                raise asyncio.CancelledError
            if fut.exception() is not None:
                raise fut.exception()  # type: ignore[misc]

    async def _forward_loop(self) -> None:
        assert self.transport is not None and self._outbox_wake is not None
        sending = self._sending
        while True:
            await self._outbox_wake.wait()
            self._outbox_wake.clear()
            while self._outbox:
                batch, done = self._outbox, self._outbox_done
                self._outbox, self._outbox_done = [], None
                assert done is not None
                try:
                    await self.transport.forward(batch)
                except BaseException as exc:
                    for fut in (done, self._outbox_done):  # waiters fail, not hang
                        if fut is None or fut.done():
                            continue
                        if isinstance(exc, Exception):
                            fut.set_exception(exc)
                            fut.exception()  # retrieved: it may have no waiter left
                        else:
                            fut.cancel()
                    raise
                for item in batch:  # only once Redis holds them
                    self._forward_cache.add(item[1])
                    sending.pop(item[1], None)
                self.forwarded += len(batch)
                self.forward_batches += 1
                done.set_result(None)

    async def _receive_loop(self) -> None:
        t = self.transport
        assert t is not None
        block_ms = max(1, round(self.settings.distributed.receive_block * 1000))
        while True:
            deliveries = await t.receive(block_ms=block_ms)
            if not deliveries:
                continue
            self._receiving = True
            try:
                await self._take(deliveries)
            finally:
                self._receiving = False
                if self._wake is not None:
                    self._wake.set()

    async def _take(self, deliveries: list[Delivery]) -> None:
        """Admit forwarded links (one batch per depth), commit, then acknowledge."""
        t = self.transport
        assert t is not None
        by_depth: dict[int, list[tuple[str, str]]] = {}
        foreign: list[tuple[str, str, str, int]] = []
        n = 0
        for d in deliveries:
            for url, key, host, depth in d.items:
                n += 1
                if t.is_local(host):
                    by_depth.setdefault(depth, []).append((url, key))
                else:  # sent under another fleet size: pass it on, never admit it here
                    foreign.append((url, key, host, depth))
        if foreign:
            await t.forward(foreign)
        for depth in sorted(by_depth):
            self._admit(by_depth[depth], depth)
        self.seen.commit()  # never ack a link that is not durable in this worker's ledger
        self.received += n
        await t.ack(deliveries)

    def _locally_idle(self) -> bool:
        """Nothing to fetch, nothing in flight or being forwarded, no delivery un-acked."""
        return (self.frontier.finished() and not self._processing and not self._receiving
                and not self.stopping)

    def _on_local_idle(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _fleet_loop(self) -> None:
        """End the crawl when the whole fleet is done; stop when any worker asks to.

        Reports idle only when locally idle; ``set_idle`` refuses if an ack
        happened since (work arrived), and ``fleet_done`` is one atomic reading
        of every worker's flag and every stream, so a forward in flight (its
        sender is busy until Redis has it) cannot end the crawl early.
        """
        t = self.transport
        assert t is not None and self._wake is not None
        poll = self.settings.distributed.poll_interval
        loop = asyncio.get_running_loop()
        next_stop_check = 0.0
        while True:
            if loop.time() >= next_stop_check:
                next_stop_check = loop.time() + poll
                if await t.stop_requested():
                    if not self.stopping:
                        self.progress.message("bloomcrawl: stop requested by the fleet: "
                                              "stopping — finishing in-flight fetches")
                        self.stop("stopped by fleet request")
                    return
            if self._locally_idle() and await t.set_idle(True) and self._locally_idle() \
                    and await t.fleet_done():
                self.frontier.close()  # the workers see the end; the crawl is finished
                return
            self._wake.clear()
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await self._wake.wait()

    async def _guard(self, loop: Any) -> None:
        """A fleet task that fails (Redis gone for good) stops the crawl with its error."""
        try:
            await loop
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._fatal is None:
                self._fatal = exc
                log.error("fleet worker aborted: %s", exc)
            self.stop("aborted")

    async def _request_fleet_stop(self) -> None:
        assert self.transport is not None
        try:
            await self.transport.request_stop()
        except Exception as exc:  # the local stop goes on regardless
            log.error("could not ask the fleet to stop: %s", exc)

    async def _publish(self, status: dict[str, Any]) -> None:
        """This worker's figures for the fleet's combined progress line (best effort)."""
        assert self.transport is not None
        keys = ("outcome", "elapsed", "rate", "fetched", "errors", "skipped", "queued",
                "in_flight", "hosts", "new", "forwarded", "received", "redis_calls",
                "session_pages", "worker_id")
        try:
            await self.transport.publish_stats({k: status[k] for k in keys if k in status})
        except Exception as exc:
            log.debug("could not publish stats: %s", exc)

    # -- persistence -------------------------------------------------------------------

    async def snapshot(self) -> None:
        """Write every shard (one per thread hop) and the crawl's counters."""
        assert self._snap_lock is not None
        async with self._snap_lock:
            for i in range(self.seen.nshards):
                await asyncio.to_thread(self.seen.snapshot_shard, i)
            self.seen.ledger.meta_set(TOTALS_KEY, self._totals())
            if self._cap:
                # URLs admitted per host: approximate after a crash (counts since this
                # write are lost, so a trap host may get that many more), never blocking
                await asyncio.to_thread(write_json_atomic, self.state_dir / HOST_COUNTS_FILE,
                                        dict(self._host_counts))
            self.politeness.prune(asyncio.get_running_loop().time())

    def _totals(self) -> dict[str, int]:
        c = self.seen.counters
        return {k: self._totals_before.get(k, 0) + c.get(k, 0) - self._counters_at_open[k]
                for k in _COUNTER_KEYS}

    async def _snapshot_loop(self) -> None:
        snap = self.settings.snapshot
        last_t = time.monotonic()
        last_new = self.seen.counters.get("new", 0)
        assert self._closing is not None
        while True:
            try:
                await asyncio.wait_for(self._closing.wait(), min(1.0, snap.interval))
                return
            except TimeoutError:
                pass
            new = self.seen.counters.get("new", 0)
            if time.monotonic() - last_t >= snap.interval or new - last_new >= \
                    snap.every_new_urls:
                await self.snapshot()
                last_t = time.monotonic()
                last_new = new

    async def _progress_loop(self) -> None:
        interval = self.settings.output.progress_interval
        last_pages, last_t = 0, time.monotonic()
        while True:
            await asyncio.sleep(interval)
            # Fill counts bits over the whole filter: off the loop (it only reads).
            self._info = await asyncio.to_thread(self.seen.bloom.info)
            now = time.monotonic()
            status = self.status()
            status["rate"] = (self.pages - last_pages) / max(1e-9, now - last_t)
            last_pages, last_t = self.pages, now
            self.progress.update(status, now=now)
            if self.transport is not None:
                await self._publish(status)

    # -- reporting ---------------------------------------------------------------------

    def status(self, *, final: bool = False) -> dict[str, Any]:
        """Live figures (cheap: no ledger scan) for the status line and the summary."""
        b = self._base
        c = self.seen.counters
        info = self._info
        if final or info is None:
            info = self._info = self.seen.bloom.info()
        elapsed = time.monotonic() - self._started if self._started else 0.0
        marked = self.pages + self.skipped
        out: dict[str, Any] = {
            "outcome": self.outcome,
            "elapsed": elapsed,
            "session_pages": self.pages,
            "rate": self.pages / elapsed if elapsed else 0.0,
            "fetched": b["fetched"] + b["failed"] + self.pages,
            "errors": b["failed"] + self.failed,
            "skipped": b["skipped"] + self.skipped,
            "queued": max(0, b["queued"] + self.queued_new - marked),
            "in_flight": self.frontier.in_flight,
            "hosts": self.frontier.hosts,
            "fill": info["fill"],
            "estimated_count": info["estimated_count"],
            "expected_fpr": info["expected_fpr"],
            "layers": info["layers"],
            "shards": self.seen.nshards,
            "state_dir": str(self.state_dir),
        }
        out.update({k: c.get(k, 0) for k in _COUNTER_KEYS})
        t = self.transport
        if t is not None:
            out.update(worker_id=t.worker_id, workers=t.workers, forwarded=self.forwarded,
                       forward_batches=self.forward_batches, received=self.received,
                       redis_calls=t.stats["calls"])
        if final:
            out["totals"] = self._totals()
        return out


class _RecentKeys:
    """Keys forwarded lately (two generations: O(1) inserts, LRU-like eviction).

    Links to another host's pages repeat on many pages; the owner would drop
    the repeats, but each would still cost stream space and its seen-test.
    """

    def __init__(self, size: int) -> None:
        self._half = size // 2
        self._young: set[str] = set()
        self._old: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self._young or key in self._old

    def add(self, key: str) -> None:
        if self._half <= 0:
            return
        self._young.add(key)
        if len(self._young) >= self._half:
            self._old, self._young = self._young, set()


def _failed(res: FetchResult) -> bool:
    """No usable answer: nothing came back, or the server failed, or the transfer did.

    A 4xx, a non-HTML type and an over-cap body are answers (state FETCHED,
    with the reason in ``error``); a 5xx, 429, a timeout or a reset are not.
    """
    status = res.status
    if status is None or status >= 500 or status == 429:
        return True
    err = res.error
    return err is not None and err.startswith(("timeout", "connection", "retry-after"))


async def run_crawl(seen: UrlSeen, settings: Settings, scope: Scope, *,
                    progress: Progress | None = None, install_signals: bool = False,
                    transport: RedisTransport | None = None) -> dict[str, Any]:
    """Run an engine over an open state directory; returns the summary figures.

    With a connected ``transport`` the engine is one worker of a fleet: it
    fetches only the hosts it owns and ends when the whole fleet is done.
    """
    engine = Engine(seen, settings, scope, progress=progress, transport=transport)
    return await engine.run(install_signals=install_signals)
