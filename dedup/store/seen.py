"""The URL-seen test: canonicalize, Bloom filter, exact ledger confirmation.

``UrlSeen`` owns a state directory::

    ledger        every admitted URL (the truth, and the durable frontier)
    shards/       one snapshot per filter shard
    lock          held while a process writes the directory

(file names and the lock: :mod:`dedup.store.statedir`).

Order of writes: a batch of new URLs is appended to the ledger and its bits are
set in the same call (its last seq is ``_appended_seq``); the seq a snapshot
records as covered (its header's ``hwm``, ``_covered_seq`` here) moves up to it
only once the ledger has made those rows durable: in that call with
``autocommit``, at :meth:`UrlSeen.commit` in a group commit (so there the bits are
set first). A snapshot records the seq it read *before* copying bits, and
loading replays ledger rows past each shard's, so a crash at any point leaves
no false negative (the bits of rows a crash lost are only extra bits).

Pending admissions: the keys :meth:`UrlSeen.filter_new` and :meth:`UrlSeen.add`
answer "new" are held in RAM (:class:`~dedup.store.pending.PendingKeys`, consulted
before the Bloom filter by every later call, so answers stay exact) and written together, bits
first then one ledger append, by size (``pending_keys``) or age
(``pending_seconds``, checked at each call), at ``commit()`` and ``close()``, and
before any other path reads or writes the ledger. A page's call then pays a
group's costs (the probe of its dozen unknown keys) and not a transaction, an
index add and the filter's batch set each. Where the compiled modules are built, a
page's seen-test is one compiled call (``OneLink.page``, through
``ConfirmCache.seen_page``): its links are resolved, fingerprinted and checked against
the confirm cache and the pending keys in one pass that makes no Python object for a
repeat, its misses probed in the Bloom filter, the "maybe seen" ones asked of the
index (one ``held_among`` call), and the new ones made pending; Python counts what it
answers and takes only the rare steps (a full young generation, links the compiled
canonicalizer leaves over, a flush). :meth:`UrlSeen.add` is compiled whole
(``OneLink.add``, bound on the instance): a repeat, a pending key and a key the
Bloom filter never saw are answered with no Python at all; it calls Python for the
index (a "maybe seen" key), a flush and a table to grow.
Crash contract: a key answered "new"
may be answered "new" again after a crash, never "seen" without being recorded.
:meth:`UrlSeen.admit_one` does the same for one ``(url, key)`` whose URL text the
ledger keeps (a frontier row): its rows are written first, in answer order, so
the seq it answers is the one the ledger gives; every ``CrawlRecords`` method
writes them before it touches the ledger (an outcome follows its URL's row).
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dedup.filter.bloom import write_snapshot
from dedup.filter.shards import ShardedBloom
from dedup.index.fpindex import FingerprintIndex
from dedup.native import compiled as _compiled
from dedup.store.confirmed import PENDED, CacheMisses, ConfirmCache
from dedup.store.crawl import CrawlRecords
from dedup.store.identity import settle
from dedup.store.ledger import INDEX_BUFFER, Ledger, State
from dedup.store.pending import PendingKeys
from dedup.store.restore import load_shards, replay
from dedup.store.statedir import ledger_path, lock, require_state_dir, shards_dir
from dedup.url.canonical import Canonicalizer, CanonRules, UrlRejected
from dedup.url.fingerprint import fingerprint, halves
from dedup.url.host import host_of

__all__ = ["CONFIRM_CACHE_SIZE", "PENDING_KEYS", "PENDING_SECONDS", "NewUrl", "UrlSeen"]

# Pending admissions written together (see the module docstring): 4,096 keys are one
# 64 KB journal row, ~300 pages of the scale stream; a second bounds how long a slow
# caller's answers stay in RAM only.
PENDING_KEYS = 4096
PENDING_SECONDS = 1.0
_NO_KEY = bytes(16)  # the fingerprint (0, 0): no table holds it
# Keys the confirm cache holds (dedup/store/confirmed.py): 3 * 2**20, two tables of
# 2**21 16-byte slots at most 3/4 full, 64 MB once full. A "maybe seen" key the cache
# misses costs a Bloom probe and an index read (a pread), ~10x a hit, and past a few
# million URLs such keys are the seen-test's cost that grows. On the page feed, per 1M
# new URLs: 463k of them from 2M to 3M URLs with 2**21 keys (half-full tables), 167k
# with 3 * 2**20; 1.02M and 0.90M from 9M to 10M (bench/README.md, "Where the time
# goes"). 3 * 2**20 + 1 would need tables twice the size.
CONFIRM_CACHE_SIZE = 3 << 20


@dataclass(frozen=True, slots=True)
class NewUrl:
    """A URL admitted by the seen-test: fetch it at ``url``; it is deduplicated as ``key``."""

    seq: int
    url: str
    key: str
    host: str
    depth: int


class UrlSeen(CrawlRecords):
    """Exact "have we seen this URL?" for a crawl, backed by a state directory.

    ``filter_new`` is the generic seen-test (keys in, new keys out); ``admit``
    and the methods of :class:`~dedup.store.crawl.CrawlRecords` are the
    crawl-specific part (frontier text, outcomes, referrers, metadata).

    Geometry (capacity, error rate, shards, seed, growth) and the
    canonicalization rules are frozen into the ledger the first time a directory
    is created; reopening uses the stored values, and an explicit different
    value is refused rather than silently producing a filter that cannot be
    merged or a key that no longer matches the ledger.

    A writer opens (and so checks whole) the fingerprint index at once: a damaged
    run or manifest raises :class:`~dedup.base.errors.IndexDamaged` here, before the
    caller acts on anything, not at the first "maybe seen" of a crawl under way.
    ``open_index=False`` leaves it closed (:meth:`rebuild` replaces it unread).
    A reader opens it at its first lookup.

    As a set of canonical URLs: :meth:`add` (one URL, True if it was new) and
    :meth:`filter_new` (a page's links, the new ones) record what they answer "new";
    they hold it in RAM until ``pending_keys`` keys or ``pending_seconds`` seconds
    (the module docstring). ``pending_keys=1`` writes at every call.

    ``ledger_cache_kib`` bounds SQLite's page cache of the ledger (its default,
    2,000 KiB, if None): a caller that only appends and marks recent rows (a
    dupefilter) needs a few hundred KiB.
    """

    def __init__(self, state_dir: str | Path, *, capacity: int | None = None,
                 error_rate: float | None = None, shards: int | None = None,
                 seed: int | None = None, growth: int | None = None,
                 rules: CanonRules | None = None, confirm_cache_size: int = CONFIRM_CACHE_SIZE,
                 canon_cache_size: int = 100_000, crawl_id: str | None = None,
                 create: bool = True, readonly: bool = False,
                 autocommit: bool = True, index_buffer: int = INDEX_BUFFER,
                 open_index: bool = True, pending_keys: int = PENDING_KEYS,
                 pending_seconds: float = PENDING_SECONDS,
                 ledger_cache_kib: int | None = None) -> None:
        if isinstance(pending_keys, bool) or not isinstance(pending_keys, int) \
                or pending_keys < 1:
            raise ValueError(f"pending_keys must be an integer >= 1, not {pending_keys!r}")
        if not isinstance(pending_seconds, int | float) or not pending_seconds >= 0:
            raise ValueError(f"pending_seconds must be a number >= 0, not {pending_seconds!r}")
        self._adder: Any = None  # the compiled add (_bind_add), None where it is not
        self._pending_keys = pending_keys
        self._pending_seconds = float(pending_seconds)
        self._pending = PendingKeys()  # fingerprints answered "new", not yet written
        self._pending_n = 0  # how many (what is to write: the table skips a (0, 0) one)
        self._pending_fps: dict[int, bytearray] = {}  # the same, by depth, in answer order
        self._pending_since = 0.0  # time.monotonic() of the oldest
        # admit_one's pending rows, with their text: runs of one depth in answer order,
        # [depth, fps, urls, hosts]; their seqs are promised, from _rows_first on
        self._pending_rows: list[list[Any]] = []
        self._pending_row_count = 0
        self._rows_first = 0
        # the confirm cache's passes of add and admit_one (one key) and of filter_new
        # (by table size): reset per call, not reallocated
        self._one = CacheMisses(4)
        self._scratch: dict[int, CacheMisses] = {}
        self.state_dir = Path(state_dir)
        self.readonly = readonly
        if not create or readonly:
            require_state_dir(self.state_dir)
        self._lock_fd: int | None = None
        if not readonly:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            shards_dir(self.state_dir).mkdir(exist_ok=True)
            self._lock_fd = lock(self.state_dir)
        try:
            self.ledger = Ledger(ledger_path(self.state_dir), readonly=readonly,
                                 autocommit=autocommit, index_buffer=index_buffer,
                                 cache_kib=ledger_cache_kib)
            if open_index and not readonly:
                self.ledger.index  # noqa: B018 - opened (checked) now, not mid-crawl
            self._open({"capacity": capacity, "error_rate": error_rate, "shards": shards,
                        "seed": seed, "growth": growth}, rules, crawl_id,
                       confirm_cache_size, canon_cache_size)
            self._bind_add()
        except BaseException:
            if hasattr(self, "ledger"):
                self.ledger.close()
            self._unlock()
            raise

    def _open(self, asked: dict[str, Any], rules: CanonRules | None, crawl_id: str | None,
              confirm_cache_size: int, canon_cache_size: int) -> None:
        self.geometry, self.rules, self.crawl_id = settle(
            self.ledger, f"{self.state_dir}: ", asked, rules, crawl_id, write=not self.readonly)
        self.seed: int = self.geometry.seed
        self.nshards: int = self.geometry.shards
        self.bloom = self._empty_filter()
        self.canonicalizer = Canonicalizer(self.rules, cache_size=canon_cache_size,
                                          seed=self.seed)
        self._confirmed = ConfirmCache(confirm_cache_size, self.seed)
        self._counters = {"links": 0, "new": 0, "repeats": 0, "rejected": 0,
                         "bloom_definitely_new": 0, "bloom_maybe": 0, "confirm_cache_hits": 0,
                         "ledger_queries": 0, "false_positives": 0}
        self._covered_seq, self.damaged_shards = load_shards(
            self.bloom, self.ledger, shards_dir(self.state_dir), self.crawl_id)
        self._appended_seq = self._covered_seq  # > _covered_seq: appended, not committed

    def _bind_add(self) -> None:
        """Where the compiled modules are built, :meth:`add` is ``OneLink.add``
        (``dedup/native/_canon.c``), bound on this instance: a call a URL then runs no
        Python for a repeat, a pending key or a key the Bloom filter never saw (its
        steps are this class's, in C, on this object's state); it calls back into
        Python only for the rare steps and hands what it does not take to the
        Python :meth:`add`. Its counts are folded into :attr:`counters` when read.
        A "maybe seen" key asks the ledger's index: where the ledger and its index are
        these classes, whose ``held_among`` asks the index's kept compiled parts, the
        compiled add asks those parts itself (as ``FingerprintIndex.held_among``
        would, falling back to it whenever they are not kept)."""
        canon = _compiled.canon
        if self.readonly or type(self).add is not UrlSeen.add or canon is None \
                or not hasattr(canon.OneLink, "bind") or self._confirmed.one is None \
                or self._pending.table is None:
            return
        adder = canon.OneLink(self.seed)
        direct: tuple[Any, ...] = ()
        if type(self.ledger) is Ledger and hasattr(_compiled.lookup, "held_api"):
            direct = (self.ledger, FingerprintIndex)
        adder.bind(self, self._confirmed, self._pending, self.canonicalizer,
                   self.ledger.held_among, UrlSeen.add.__get__(self), self._counters, *direct)
        self.canonicalizer.count_compiled_by(adder.fold)
        self._adder = adder
        self.__dict__["add"] = adder.add

    @property
    def counters(self) -> dict[str, int]:
        """This session's counts (links, new, repeats, ... as :meth:`stats` shows them),
        exact at every read: the compiled :meth:`add`'s are folded in first."""
        if self._adder is not None:
            self._adder.fold()
        return self._counters

    # -- opening -----------------------------------------------------------------

    def _empty_filter(self) -> ShardedBloom:
        g = self.geometry
        return ShardedBloom(shards=g.shards, capacity=g.capacity, error_rate=g.error_rate,
                            seed=g.seed, growth=g.growth)

    def shard_path(self, i: int) -> Path:
        return ShardedBloom.shard_path(shards_dir(self.state_dir), i)

    # -- the seen-test -------------------------------------------------------------

    def filter_new(self, links: Iterable[str], base_url: str | None = None, *,
                   depth: int = 0) -> list[str]:
        """Canonical keys of the links never seen before, in first-seen order.

        Asking again answers "seen" at once. They are pending admissions (the
        module docstring): written with others by size or age, at :meth:`commit`
        and at :meth:`close`, so a call per page costs about a group's share.
        Crash contract: a key answered "new" may be answered "new" again after a
        crash, never "seen" without being recorded; after :meth:`commit` or
        :meth:`close` every answer is durable.

        Only their fingerprints are kept: the caller holds the keys, and storing
        their text too would be the largest cost per URL (use ``admit`` for a
        frontier that keeps the URLs to fetch).
        """
        if type(links) is not tuple:
            if isinstance(links, str):
                raise TypeError("links must be an iterable of links, not one str")
            links = tuple(links)
        if not self.readonly:
            batch = self._batch(depth)
            got = self._confirmed.seen_page(links, base_url, self.canonicalizer, self._pending,
                                            batch, self.bloom.stack, self.ledger.held_among)
            if got is not None:
                return self._count_page(len(links), *got)
        slots = 4
        while slots < 2 * len(links) and slots < 4096:  # a page's table, not a group's
            slots *= 2
        misses = self._scratch.get(slots)
        if misses is None:
            misses = self._scratch[slots] = CacheMisses(slots)
        else:
            misses.reset()
        counted = self._confirmed.count_links(links, base_url, self.canonicalizer, misses,
                                              self._pending.table)
        if counted is None:
            pairs, n_links = self._resolve(links, base_url)
            hits = self._confirmed.count_hits(pairs, misses)
            screened = False
        else:
            hits, rejected, screened = counted
            self._counters["rejected"] += rejected
            n_links = len(links) - rejected
        keys = misses.keys
        return [keys[i] for i in self._admit_pending(bytes(misses.fps), n_links, hits, depth,
                                                     screened=screened)]

    def _count_page(self, n: int, new: list[str], hits: int, rejected: int, misses: int,
                    maybe: int, found: int, pended: int, rest: bytes | None) -> list[str]:
        """:meth:`filter_new`'s steps after its compiled call (``ConfirmCache.seen_page``)
        for ``n`` links: its ``new`` keys are pending already, so they are counted first
        (a flush writes them whatever fails next), then the counters, as
        :meth:`_admit_pending` counts them."""
        if new:
            if not self._pending_n:
                self._pending_since = time.monotonic()
            self._pending_n += len(new)
        self._pending.held_more(pended)
        self._confirmed.learn(rest)
        counters = self._counters
        n_links = n - rejected
        counters["links"] += n_links
        counters["rejected"] += rejected
        counters["confirm_cache_hits"] += hits
        counters["bloom_maybe"] += maybe
        counters["bloom_definitely_new"] += misses - maybe
        if maybe:
            counters["ledger_queries"] += 1
            counters["false_positives"] += maybe - found
        counters["new"] += len(new)
        counters["repeats"] += n_links - len(new)
        if self._pending_n:
            self._flush_if_due()
        return new

    def add(self, url: str, base_url: str | None = None, *, depth: int = 0) -> bool:
        """True if ``url`` (resolved against ``base_url``) was never seen before, and
        record it, as a set's add that says whether it added: :meth:`filter_new` of
        one link, for a caller that meets URLs one at a time (a dupefilter's
        request), with the same crash contract. A link the canonicalizer rejects
        (``mailto:``, an unparsable URL) is never new: False, counted as rejected,
        as :meth:`filter_new` skips it.

        Where compiled, this is ``OneLink.add`` (:meth:`_bind_add`), which takes these
        steps in C and hands this method what they do not take (a link or base the
        compiled canonicalizer leaves to Python, an unusual argument); here one
        compiled call (``ConfirmCache.count_link``) answers a repeat, a pending key and
        a key the Bloom filter never saw, and only a "maybe seen" key comes back for
        the index. Under ``BLOOMCRAWL_NO_KERNEL`` it is all Python, with the same
        answers and counters."""
        pending = self._pending
        batch = None
        if not self.readonly:
            batch = self._batch(depth)
        got = self._confirmed.count_link(url, base_url, self.canonicalizer, pending.table,
                                         pending.held, batch, self.bloom.stack)
        counters = self._counters
        if got is PENDED:  # new, and pending now: _admit_pending's steps for it, inline
            if not self._pending_n:
                self._pending_since = time.monotonic()
            self._pending_n += 1  # first: whatever fails next, the flush writes its batch
            pending.held_more(1)
            counters["links"] += 1
            counters["new"] += 1
            counters["bloom_definitely_new"] += 1
            self._flush_if_due()
            return True
        if got is False:  # not the compiled path's: the two steps
            got = self._count_one(url, base_url)
            if type(got) is tuple:  # a miss neither the pending keys nor the filter saw
                return bool(self._admit_pending(got[2], 1, 0, depth))
        if got is True:
            counters["links"] += 1
            counters["confirm_cache_hits"] += 1
            counters["repeats"] += 1
            if self._pending_n:
                self._flush_if_due()
            return False
        if got is None:
            counters["rejected"] += 1
            return bool(self._admit_pending(b"", 0, 0, depth))
        fp = got[2]  # type: ignore[index]
        if batch is None or fp == _NO_KEY:  # read-only, or a key no table holds
            return bool(self._admit_pending(fp, 1, 0, depth, screened=True))
        # a miss the filter may hold (it said so): _admit_pending's steps for one key
        counters["links"] += 1
        counters["bloom_maybe"] += 1
        counters["ledger_queries"] += 1
        if self.ledger.held_among(fp):
            self._confirmed.add(halves(fp))
            counters["repeats"] += 1
            if self._pending_n:
                self._flush_if_due()
            return False
        counters["false_positives"] += 1
        counters["new"] += 1
        if not self._pending_n:
            self._pending_since = time.monotonic()
        self._pending_n += 1  # first, as above; then written, then answered "seen"
        batch += fp
        pending.add(fp)
        self._flush_if_due()
        return True

    def _count_one(self, url: str, base_url: str | None) -> bool | tuple[None, None, bytes] | None:
        """:meth:`ConfirmCache.count_link`'s answer by ``resolve_many`` and ``count_hits``
        (its miss is not screened against the pending keys)."""
        pairs = self.canonicalizer.resolve_many((url,), base_url)
        if pairs[0] is None:
            return None
        misses = self._one  # one key: a page's 4,096-slot table would cost more
        misses.reset()
        if self._confirmed.count_hits(pairs, misses):
            return True
        return None, None, bytes(misses.fps)

    def admit_one(self, url: str, key: str, *, depth: int = 0) -> int | None:
        """:meth:`admit_resolved` of one ``(fetch_url, key)`` pair as a pending
        admission: the seq it will have if ``key`` is new (queued, with its URL
        text), None if it was seen. For a caller that meets requests one at a
        time (a Scrapy dupefilter) and must keep each URL to re-issue after a
        crash: its rows are written together (one journal append, one frontier
        row per host) by size or age, at :meth:`commit`, and before any path that
        reads or writes the ledger (:meth:`record_outcomes` of a seq answered here
        writes it first), with :meth:`filter_new`'s crash contract.

        The seq is promised now: pending rows are the next appends, in answer
        order, before anything else reaches the journal."""
        if "\n" in url:
            raise ValueError(f"a URL holds a raw newline: {url!r}")
        host = host_of(url)
        misses = self._one
        misses.reset()
        hits = self._confirmed.count_hits([(url, key)], misses)
        if not self._admit_pending(bytes(misses.fps), 1, hits, depth, ((url, host),)):
            return None
        return self._rows_first + self._pending_row_count - 1

    def _admit_pending(self, blob: bytes, n_links: int, hits: int, depth: int,
                       text: Sequence[tuple[str, str]] | None = None, *,
                       screened: bool = False) -> list[int]:
        """The seen-test of :meth:`filter_new` once the confirm cache has answered:
        indexes in ``blob`` (the fingerprints of the keys it did not hold, 16 bytes
        each) of the new keys, which join the pending admissions
        (as rows with ``text``, their ``(url, host)``, for :meth:`admit_one`: one key).

        A pending key is answered "seen" from the pending keys (its bits are not set
        yet): ``screened`` says the compiled pass did that already (``hits`` counts
        them); the others are probed in one call (compiled where built, no numpy),
        and the "maybe seen" ones looked up in the ledger's index in one batch.
        Keys stay in one ``bytes`` (16 each) throughout: a ``bytes`` object a key
        cost more than the rest of a page's call."""
        counters = self._counters
        counters["links"] += n_links
        m = len(blob) // 16
        if not m:
            counters["confirm_cache_hits"] += hits
            counters["repeats"] += n_links
            if self._pending_n:
                self._flush_if_due()
            return []
        new: Sequence[int] = range(m)  # indexes into misses of the keys still in question
        if self._pending_n and not screened:
            keep = self._pending.absent(blob)
            if len(keep) < m:
                new = keep
                blob = b"".join([blob[16 * j:16 * j + 16] for j in keep])
        n_ask = len(new)
        counters["confirm_cache_hits"] += hits + m - n_ask  # answered from memory
        at = self.bloom.maybe_fingerprints(blob) if n_ask else []
        counters["bloom_maybe"] += len(at)
        counters["bloom_definitely_new"] += n_ask - len(at)
        if at:
            counters["ledger_queries"] += 1
            maybe = b"".join([blob[16 * j:16 * j + 16] for j in at])
            found = self.ledger.held_among(maybe)
            counters["false_positives"] += len(at) - len(found)
            if found:
                self._confirmed.add(halves(b"".join([maybe[16 * j:16 * j + 16]
                                                     for j in found])))
                gone = {at[j] for j in found}
                kept = [k for k in range(n_ask) if k not in gone]
                new = [new[k] for k in kept]
                blob = b"".join([blob[16 * k:16 * k + 16] for k in kept])
        n_new = len(new)
        counters["new"] += n_new
        counters["repeats"] += n_links - n_new
        if not n_new:
            if self._pending_n:
                self._flush_if_due()
            return []
        if self.readonly:
            raise PermissionError(f"{self.state_dir}: opened read-only")
        if not self._pending_n:
            self._pending_since = time.monotonic()
        self._pending.add(blob)
        self._pending_n += n_new
        if text is not None:  # admit_one: m == 1, and it is new
            self._pend_row(depth, blob, text[0])
        else:
            batch = self._batch(depth)
            batch += blob
        # the confirm cache learns them when they are written (one call a group): until
        # then a repeat is answered from the pending keys, as cheaply
        self._flush_if_due()
        return list(new)

    def _batch(self, depth: int) -> bytearray:
        """The pending fingerprints of ``depth``'s new keys (written at the flush),
        made empty at its first key."""
        batch = self._pending_fps.get(depth)
        if batch is None:
            batch = self._pending_fps[depth] = bytearray()
        return batch

    def _pend_row(self, depth: int, fp: bytes, text: tuple[str, str]) -> None:
        """Queue one :meth:`admit_one` row; its seq is the next promised one."""
        rows = self._pending_rows
        if not rows:
            self._rows_first = self.ledger.last_seq() + 1
        if not rows or rows[-1][0] != depth:
            rows.append([depth, bytearray(), [], []])
        run = rows[-1]
        run[1] += fp
        run[2].append(text[0])
        run[3].append(text[1])
        self._pending_row_count += 1

    def _flush_if_due(self) -> None:
        """Write the pending admissions if there are ``pending_keys`` of them or the
        oldest has waited ``pending_seconds`` (so an answer's age is bounded by the
        next call after it, not by a timer thread sharing the connection)."""
        if self._pending_n >= self._pending_keys or \
                time.monotonic() - self._pending_since >= self._pending_seconds:
            self._flush_pending()

    def _flush_pending(self) -> None:
        """Write the pending admissions: :meth:`admit_one`'s rows first, in answer
        order (their seqs were promised), then the others one depth at a time
        (shallowest first, as :meth:`admit_resolved_pages`); each batch bits first,
        then one ledger append (committed at once with ``autocommit``)."""
        if not self._pending_n:
            return
        rows, self._pending_rows = self._pending_rows, []
        self._pending_row_count = 0
        for depth, fps, urls, hosts in rows:
            self._write_pending(bytes(fps), depth, urls, hosts, self._rows_first)
            self._rows_first += len(urls)
        batches = self._pending_fps
        while batches:
            depth = min(batches)
            if batches[depth]:  # (add makes its depth's batch before it knows of a key)
                self._write_pending(bytes(batches[depth]), depth, None, None, None)
            del batches[depth]
        self._pending.clear()  # every key is written: answered by the confirm cache
        self._pending_n = 0

    def _write_pending(self, blob: bytes, depth: int, urls: list[str] | None,
                       hosts: list[str] | None, first: int | None) -> None:
        h = halves(blob)
        self.bloom.add_hashes(h)
        seqs = self.ledger.append(blob, depth=depth, urls=urls, hosts=hosts, h=h)
        if first is not None and seqs.start != first:  # a real check, not an assert
            raise RuntimeError(f"{self.state_dir}: pending rows promised seq {first}, "
                               f"the ledger gave {seqs.start}")
        # a pending key's repeat is then a confirm-cache hit, not a miss
        self._confirmed.add(h)
        self._appended_seq = seqs.stop - 1
        if self.ledger.autocommit:
            self._covered_seq = self._appended_seq

    def filter_new_pages(self, pages: Iterable[tuple[str | None, Iterable[str]]], *,
                         depth: int = 0) -> list[list[str]]:
        """:meth:`filter_new` of many ``(base_url, links)`` pages at once: the same
        answers as calling it page by page in order (a key new on two pages is new
        on the first), with one Bloom probe, one index lookup and one ledger row for
        them all. For a caller that has pages in hand (a group commit's worth, a
        crawl dump): the dozen keys of a page that the confirm cache misses
        otherwise pay each step's fixed cost alone. Its new keys are written before
        it returns (and committed, with ``autocommit``), pending ones first."""
        self._flush_pending()
        misses, ends, n_links, hits = self._misses_of_pages(
            self._resolve(page_links, base_url) for base_url, page_links in pages)
        idx, _, _ = self._admit_misses(misses, n_links, hits, [(len(misses), depth)],
                                       State.QUEUED, keep_urls=False)
        keys = misses.keys
        return [[keys[i] for i in part] for part in _split(idx, ends)]

    def _misses_of_pages(self, pages: Iterable[tuple[Sequence[tuple[str, str] | None], int]]
                         ) -> tuple[CacheMisses, list[int], int, int]:
        """The confirm cache's answer for pages of ``(pairs, n_links)`` (Nones skipped),
        in one pass: ``(the keys it does not hold, each once in first-seen order;
        how many there are after each page; how many links; hits)``."""
        misses = CacheMisses()
        ends: list[int] = []
        n_links = hits = 0
        for pairs, n in pages:
            n_links += n
            hits += self._confirmed.count_hits(pairs, misses)
            ends.append(len(misses))  # keys are in first-seen order: page by page
        return misses, ends, n_links, hits

    def admit(self, links: Iterable[str], base_url: str | None = None, *, depth: int = 0,
              state: State = State.QUEUED) -> list[NewUrl]:
        """Resolve raw links against ``base_url`` and admit the new ones, keeping their
        URL text in the ledger's frontier."""
        pairs = [p for p in self._resolve(links, base_url)[0] if p is not None]
        return self.admit_resolved(pairs, depth=depth, state=state)

    def _resolve(self, links: Iterable[str], base_url: str | None
                 ) -> tuple[list[tuple[str, str] | None], int]:
        """``(fetch_url, key)`` per link, None where rejected, and how many are not:
        the confirm cache skips the Nones, so they need no pass of their own."""
        resolved = self.canonicalizer.resolve_many(links, base_url)
        rejected = resolved.count(None)
        self._counters["rejected"] += rejected
        return resolved, len(resolved) - rejected

    def admit_resolved(self, pairs: Sequence[tuple[str, str]], *, depth: int = 0,
                       state: State = State.QUEUED) -> list[NewUrl]:
        """Admit already-canonical ``(fetch_url, key)`` pairs: one ledger append."""
        misses, idx, seqs, hosts = self._admit(pairs, len(pairs), depth, state, keep_urls=True)
        keys, urls = misses.keys, misses.values
        return [NewUrl(seq, urls[i], keys[i], host, depth)
                for seq, i, host in zip(seqs, idx, hosts, strict=True)]

    def admit_resolved_pages(self, pages: Sequence[tuple[Sequence[tuple[str, str]], int]]
                             ) -> list[list[NewUrl]]:
        """:meth:`admit_resolved` of many ``(pairs, depth)`` pages at once, for a
        crawler's group commit: the same URLs are new as page by page in order (a
        key on two pages is new on the first), with one confirm-cache pass per page
        (which fingerprints each link as it checks it), then one Bloom probe, one
        index lookup and one ledger row per depth for the keys it did not hold.

        Seqs ascend with depth, then page order: the rows of one depth are one
        journal batch, and a breadth-first frontier wants shallow URLs first."""
        self._flush_pending()
        misses, ends, n_links, hits = self._misses_of_pages(
            (pairs, len(pairs)) for pairs, _ in pages)
        depths = [depth for _, depth in pages]
        idx, seqs, hosts = self._admit_misses(misses, n_links, hits,
                                              list(zip(ends, depths, strict=True)),
                                              State.QUEUED, keep_urls=True)
        keys, urls = misses.keys, misses.values
        out: list[list[NewUrl]] = []
        j = 0  # each page's new keys are the next slice of idx (and of seqs, hosts)
        for part, depth in zip(_split(idx, ends), depths, strict=True):
            k = j + len(part)
            out.append([NewUrl(seq, urls[i], keys[i], host, depth)
                        for i, seq, host in zip(part, seqs[j:k], hosts[j:k], strict=True)])
            j = k
        return out

    def _admit(self, pairs: Sequence[tuple[str, str] | None], n_links: int, depth: int,
               state: State, *, keep_urls: bool
               ) -> tuple[CacheMisses, list[int], Sequence[int], list[str]]:
        """The seen-test for one page's ``pairs`` (``n_links`` links; Nones skipped):
        ``(the keys the confirm cache did not hold, with their first URLs; indexes
        of the new ones among them; their seqs; their hosts, with keep_urls)``.

        Keys confirmed or admitted lately are answered from memory: navigation
        repeats on every page, so most links never reach the filter or the ledger.
        "Definitely new" keys are appended with no read at all; only "maybe seen"
        ones go to the ledger's index, in one batch. A key keeps its first URL.
        """
        self._flush_pending()
        misses = CacheMisses()
        hits = self._confirmed.count_hits(pairs, misses)
        return (misses, *self._admit_misses(misses, n_links, hits, [(len(misses), depth)],
                                            state, keep_urls=keep_urls))

    def _admit_misses(self, misses: CacheMisses, n_links: int, hits: int,
                      spans: Sequence[tuple[int, int]], state: State, *, keep_urls: bool
                      ) -> tuple[list[int], Sequence[int], list[str]]:
        """:meth:`_admit` once the confirm cache has answered: ``misses`` holds the
        keys it did not, of ``n_links`` links of which ``hits`` it did: ``(indexes of
        the new ones, their seqs, their hosts)``; the hosts (with ``keep_urls``, else
        empty) are computed here once, for the journal's frontier rows and the
        caller's ``NewUrl``. ``spans``: ``(end, depth)`` of consecutive runs
        of its keys; the new keys of a depth are one ledger append, shallowest first."""
        counters = self._counters
        counters["links"] += n_links
        confirmed = self._confirmed
        counters["confirm_cache_hits"] += hits
        if not len(misses):
            counters["repeats"] += n_links
            return [], range(0), []
        h = halves(misses.fps)
        probed = self.bloom.probe_hashes(h)
        new_mask = ~probed.found
        maybe = np.flatnonzero(probed.found)
        counters["bloom_maybe"] += len(maybe)
        counters["bloom_definitely_new"] += len(misses) - len(maybe)
        if len(maybe):
            counters["ledger_queries"] += 1
            present = self.ledger.contains_hashes(h[maybe])
            absent = maybe[~present]
            new_mask[absent] = True
            counters["false_positives"] += len(absent)
            confirmed.add(h[maybe[present]])
        new = np.flatnonzero(new_mask)
        counters["new"] += len(new)
        counters["repeats"] += n_links - len(new)
        if not len(new):
            return [], range(0), []
        if self.readonly:
            raise PermissionError(f"{self.state_dir}: opened read-only")
        idx = new.tolist()
        values = misses.values
        hosts = [host_of(values[i]) for i in idx] if keep_urls else []
        depths = {d for _, d in spans}
        if len(depths) == 1:
            seqs: Sequence[int] = self._append(new, misses, h, depths.pop(), hosts)
            last = seqs[-1]
        else:  # one append per depth; idx keeps key order, seqs follow it
            depth_of = np.array([d for _, d in spans])[
                np.searchsorted([e for e, _ in spans], new, side="right")]
            seq_arr = np.empty(len(new), dtype=np.int64)
            for d in sorted(depths):
                at = np.flatnonzero(depth_of == d)
                if len(at):
                    got = self._append(new[at], misses, h, d,
                                       [hosts[j] for j in at.tolist()] if keep_urls else [])
                    seq_arr[at] = np.arange(got.start, got.stop)
                    last = got.stop - 1
            seqs = seq_arr.tolist()
        if state is not State.QUEUED:
            self.ledger.mark_many([(seq, state, None, None) for seq in seqs])
        self.bloom.add_probed(probed, new)
        self._appended_seq = last
        if self.ledger.autocommit:
            self._covered_seq = self._appended_seq
        confirmed.add(h[new])
        return idx, seqs, hosts

    def _append(self, new: np.ndarray, misses: CacheMisses, h: np.ndarray, depth: int,
                hosts: list[str]) -> range:
        """One ledger append of the keys at ``new`` (indexes into ``misses``), with
        their URL text and ``hosts`` (the frontier's) if given, none if empty."""
        blob = np.frombuffer(misses.fps, dtype="V16")[new].tobytes()
        urls = None
        if hosts:
            values = misses.values
            urls = [values[i] for i in new.tolist()]
        return self.ledger.append(blob, depth=depth, urls=urls, hosts=hosts or None,
                                  h=h[new])

    # -- inspection and forgetting ----------------------------------------------------

    def _fp_of(self, url: str) -> bytes:
        _, key = self.canonicalizer.resolve(url)
        return fingerprint(key, self.seed)

    def check(self, url: str) -> tuple[bool, dict[str, Any] | None]:
        """(Bloom says maybe-seen, ledger row or None) for one URL. Raises UrlRejected."""
        self._flush_pending()
        fp = self._fp_of(url)
        maybe = bool(self.bloom.contains_hashes(halves(fp))[0])
        return maybe, self.ledger.get(fp)

    def forget(self, urls: Iterable[str]) -> int:
        """Delete URLs from the ledger so the next encounter counts as new.

        Their Bloom bits stay set: the next "maybe seen" finds no row and the
        URL is admitted again (counted as a false positive). No counting filter needed.
        """
        keys = []
        for url in urls:
            try:
                _, key = self.canonicalizer.resolve(url)
            except UrlRejected:
                continue
            keys.append(key)
        return self.forget_keys(keys)

    def forget_keys(self, keys: Iterable[str]) -> int:
        """``forget`` of keys as they are, not canonicalized (a learned rule's keys)."""
        self._flush_pending()
        fps = [fingerprint(key, self.seed) for key in keys]
        if fps:
            self._confirmed.clear()  # it may hold them: a hit would answer "seen"
        return self.ledger.forget(fps)

    def stats(self) -> dict[str, Any]:
        """Counters of this session, the filter's health, and the ledger's states."""
        self._flush_pending()
        info = self.bloom.info()
        out: dict[str, Any] = dict(self.counters)
        out.update({
            "fill": info["fill"], "estimated_count": info["estimated_count"],
            "expected_fpr": info["expected_fpr"], "layers": info["layers"],
            "capacity": self.geometry.capacity, "error_rate": self.geometry.error_rate,
            "shards": self.nshards, "bytes": info["bytes"], "crawl_id": self.crawl_id,
            "damaged_shards": list(self.damaged_shards),
        })
        out.update(self.ledger.counts())
        return out

    # -- persistence -----------------------------------------------------------------

    def commit(self) -> None:
        """Group commit (``autocommit=False``): make pending rows durable, then let
        snapshots cover them. Never the other way round: an uncommitted row lost
        in a crash gives its ``seq`` back to the next insert, and a snapshot mark
        above it would keep that new row from ever being replayed. Pending
        admissions are written first: after it every answer is durable."""
        self._flush_pending()
        self.ledger.commit()
        self._covered_seq = self._appended_seq

    def snapshot_shard(self, i: int) -> None:
        """Write shard ``i`` atomically. Safe to run in a thread while one other
        thread admits URLs: the mark is read before the bits are copied, and
        every row at or below it already has its bits set."""
        if self.readonly:
            raise PermissionError(f"{self.state_dir}: opened read-only")
        hwm = self._covered_seq
        write_snapshot(self.shard_path(i), self.bloom.shards[i], shard_index=i,
                       shard_count=self.nshards, hwm=hwm, crawl_id=self.crawl_id)

    def snapshot(self) -> None:
        for i in range(self.nshards):
            self.snapshot_shard(i)

    @classmethod
    def rebuild(cls, state_dir: str | Path, *, index: bool = True,
                shards: bool = True) -> UrlSeen:
        """Recreate what is derived from the journal: the fingerprint index and every
        shard file (damaged or lost runs, manifest or snapshots), never reading them;
        ``index=False`` / ``shards=False`` leave that part as it is.

        The directory is opened (and locked) first, so a running crawl is refused
        before anything is touched; the old files are replaced atomically."""
        seen = cls(state_dir, create=False, open_index=False)
        try:
            if index:
                seen.ledger.rebuild_index()
            if shards:
                seen.bloom = seen._empty_filter()
                replay(seen.bloom, seen.ledger, np.zeros(seen.nshards, dtype=np.int64))
                seen.snapshot()
        except BaseException:
            seen.close()
            raise
        return seen

    def close(self) -> None:
        """Write pending admissions, commit pending rows and release the directory
        (no snapshot is implied)."""
        try:
            if not self.readonly:
                self._flush_pending()
        finally:
            self._unbind_add()
            self.ledger.close()
            self._unlock()

    def _unbind_add(self) -> None:
        """Back to the Python :meth:`add` (which then finds the ledger closed); the
        compiled one's counts folded, and the cycle through this instance broken."""
        adder, self._adder = self._adder, None
        if adder is not None:
            self.__dict__.pop("add", None)
            self.canonicalizer.count_compiled_by(None)
            adder.unbind()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> UrlSeen:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _split(idx: list[int], ends: Sequence[int]) -> Iterator[list[int]]:
    """``idx`` (ascending) cut at each of ``ends``: the new keys of each page."""
    j = 0
    for end in ends:
        k = bisect_left(idx, end, j)
        yield idx[j:k]
        j = k
