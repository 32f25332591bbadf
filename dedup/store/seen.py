"""The URL-seen test: canonicalize, Bloom filter, exact ledger confirmation.

``UrlSeen`` owns a state directory::

    ledger        every admitted URL (the truth, and the durable frontier)
    shards/       one snapshot per filter shard
    lock          held while a process writes the directory

(file names and the lock: :mod:`dedup.store.statedir`).

The seen-test itself is the core (:mod:`dedup.store.seencore`: the compiled
``SeenCore`` or its Python twin): it owns the cache of recent keys, the pending
keys, the counters and the flush rule, and calls back here only through the
callables ``UrlSeen`` hands it: the canonicalizer's, the Bloom filter's probe, the
index's ``held_among`` and :meth:`UrlSeen._write_pending`. Three entry points ask
it: :meth:`UrlSeen.add` (one URL), :meth:`UrlSeen.filter_new` (a page's links) and
:meth:`UrlSeen.filter_new_pages` (many pages); the crawler's admissions, which keep
the URL text for the frontier (:meth:`UrlSeen.admit`, :meth:`UrlSeen.admit_pages`,
:meth:`UrlSeen.admit_one`), are thin layers over the same core call (``pairs``).

Order of writes: a batch of new URLs is appended to the ledger and its bits are
set in the same call (its last seq is ``_appended_seq``); ``_covered_seq`` moves
up to it only once the ledger has committed those rows: in that call with
``autocommit``, at :meth:`UrlSeen.commit` in a group commit (so there the bits are
set first). A commit survives a kill -9 but not a power cut (the WAL is synced
at checkpoints), so the seq a snapshot records as covered (its header's ``hwm``,
``_durable_seq`` here) is the one :meth:`UrlSeen.sync` read before it synced the
ledger: a snapshot's mark never names a row the disk may not keep (a row lost
in a cut gives its seq to the next admission, which a mark above it would keep
from ever being replayed). A snapshot records the mark it read *before* copying
bits, and loading replays ledger rows past each shard's (a mark past the
ledger's end is cut back to it: ``dedup.store.restore``), so a crash at any point
leaves no false negative (the bits of rows a crash lost are only extra bits).

Pending admissions: the keys the seen-test answers "new" are held by the core
(answered "seen" by every later call, so answers stay exact) and written together,
bits first then one ledger append, by size (``pending_keys``) or age
(``pending_seconds``), at ``commit()`` and ``close()``, and before any other path
reads or writes the ledger. A page's call then pays a group's costs (the probe of
its dozen unknown keys) and not a transaction, an index add and the filter's batch
set each. Crash contract: a key answered "new" may be answered "new" again after a
crash, never "seen" without being recorded. :meth:`UrlSeen.admit_one` does the same
for one ``(url, key)`` whose URL text the ledger keeps (a frontier row): its rows
are written first, in answer order, so the seq it answers is the one the ledger
gives; every ``CrawlRecords`` method writes them before it touches the ledger (an
outcome follows its URL's row).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dedup.filter.bloom import write_snapshot
from dedup.filter.shards import ShardedBloom
from dedup.store.crawl import CrawlRecords
from dedup.store.identity import settle
from dedup.store.ledger import INDEX_BUFFER, Ledger, State
from dedup.store.restore import load_shards, replay
from dedup.store.seencore import HOLD, seen_core
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
# Keys the core's cache of recent keys holds at most (16 bytes each, in buckets of
# four: dedup/store/seencore.py): 5 * 2**20, 80 MB once full. A "maybe seen" key the
# cache misses costs a Bloom probe and an index read (a pread), ~10x a hit, and past a
# few million URLs such keys are the seen-test's cost that grows (bench/README.md,
# "Where the time goes").
CONFIRM_CACHE_SIZE = 5 << 20


@dataclass(frozen=True, slots=True)
class NewUrl:
    """A URL admitted by the seen-test: fetch it at ``url``; it is deduplicated as ``key``."""

    seq: int
    url: str
    key: str
    host: str
    depth: int


class UrlSeen:
    """Exact "have we seen this URL?" for a crawl, backed by a state directory.

    ``filter_new`` is the generic seen-test (keys in, new keys out); ``admit_pages``
    and :attr:`records` (:class:`~dedup.store.crawl.CrawlRecords`: the frontier's
    text, outcomes, referrers, captures, named values) are the crawl-specific part.

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
        self._pending_keys = pending_keys
        self._pending_seconds = float(pending_seconds)
        # admit_one's pending rows, with their text: runs of one depth in answer order,
        # [depth, fps, urls, hosts]; their seqs are promised, from _rows_first on
        self._pending_rows: list[list[Any]] = []
        self._pending_row_count = 0
        self._rows_first = 0
        self._viewed: object = None  # the filter's layers the core was last shown
        self._compiled_folded = 0  # the core's "compiled" count given to the canonicalizer
        self._carried: dict[str, int] = {}  # carry_counts'
        self._forgotten_met = 0  # maybe-seen keys that were forgotten: not false positives
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
            # what a crawler keeps beside its keys, in the same transaction
            self.records = CrawlRecords(self.ledger, self._flush_pending)
            self._open({"capacity": capacity, "error_rate": error_rate, "shards": shards,
                        "seed": seed, "growth": growth}, rules, crawl_id,
                       confirm_cache_size, canon_cache_size)
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
        if isinstance(confirm_cache_size, bool) or not isinstance(confirm_cache_size, int) \
                or confirm_cache_size < 0:
            raise ValueError("confirm_cache_size must be an integer >= 0, "
                             f"not {confirm_cache_size!r}")
        canon = self.canonicalizer
        self._core = seen_core(
            self.seed, cache_bytes=16 * confirm_cache_size, pending_keys=self._pending_keys,
            pending_seconds=self._pending_seconds, fast_page=canon.fast_page,
            resolve=canon.resolve_many, probe=self._probe, lookup=self._lookup,
            write=self._write_pending)
        canon.count_compiled_by(self._fold_compiled)
        if not self.readonly:  # a call a URL with no Python frame of ours (add's docstring)
            self.__dict__["add"] = self._core.add
        self._covered_seq, self.damaged_shards = load_shards(
            self.bloom, self.ledger, shards_dir(self.state_dir), self.crawl_id,
            writable=not self.readonly)
        self._appended_seq = self._covered_seq  # > _covered_seq: appended, not committed
        self._durable_seq = 0  # what a snapshot may record: set by sync()
        self._show_filter()

    # -- what the core is given -----------------------------------------------------

    def _probe(self, fps: bytes) -> list[int]:
        """The core's ``probe``: the Bloom filter's maybe-seen keys among ``fps``."""
        return self.bloom.maybe_fingerprints(fps)

    def _lookup(self, fps: bytes) -> list[int]:
        """The core's ``lookup``: the keys among ``fps`` the ledger holds.

        The core counts a maybe-seen key the ledger does not hold as a Bloom false
        positive; a forgotten key met again is not one (its bits were set by its own
        admission), so those are counted here, to be taken out of that figure. The
        ledger knows them by their tombstones, which the index keeps while it holds
        anything older (a key forgotten before a crawl's first index run, met again
        after a restart, still counts as one)."""
        found = self.ledger.held_among(fps)
        if 16 * len(found) < len(fps):
            held = set(found)
            rest = b"".join(fps[i:i + 16] for i in range(0, len(fps), 16) if i // 16 not in held)
            self._forgotten_met += len(self.ledger.forgotten_among(rest))
        return found

    def _show_filter(self) -> None:
        """Hand the core the filter's buffers again if its layers changed (a new
        arena, or a new filter): the compiled core probes them itself."""
        stack = self.bloom.stack
        if stack.probe_layers is not self._viewed:
            self._core.view(stack.rows, stack.probe_layers, stack.nlayers)
            self._viewed = stack.probe_layers

    def _fold_compiled(self) -> None:
        """The links the compiled core resolved, into the canonicalizer's count."""
        n = self._core.counts()["compiled"]
        self.canonicalizer.count_compiled(n - self._compiled_folded)
        self._compiled_folded = n

    @property
    def counters(self) -> dict[str, int]:
        """This session's counts (links, new, repeats, ... as :meth:`stats` shows
        them), kept by the core (a copy: exact at every read), plus what
        :meth:`carry_counts` carried over."""
        counts = self._core.counts()
        del counts["compiled"]
        counts["false_positives"] -= self._forgotten_met
        for k, v in self._carried.items():
            counts[k] = counts.get(k, 0) + v
        return counts

    def carry_counts(self, counts: dict[str, int]) -> None:
        """Count ``counts`` (an earlier session's :attr:`counters`, e.g. the one that
        admitted a crawl's seeds) in this session's figures."""
        for k, v in counts.items():
            self._carried[k] = self._carried.get(k, 0) + v

    # -- opening -----------------------------------------------------------------

    def _empty_filter(self) -> ShardedBloom:
        g = self.geometry
        return ShardedBloom(shards=g.shards, capacity=g.capacity, error_rate=g.error_rate,
                            seed=g.seed, growth=g.growth)

    def shard_path(self, i: int) -> Path:
        return ShardedBloom.shard_path(shards_dir(self.state_dir), i)

    # -- the seen-test -------------------------------------------------------------

    def add(self, url: str, base_url: str | None = None, *, depth: int = 0) -> bool:
        """True if ``url`` (resolved against ``base_url``) was never seen before, and
        record it, as a set's add that says whether it added: :meth:`filter_new` of
        one link, for a caller that meets URLs one at a time (a dupefilter's
        request), with the same crash contract. A link the canonicalizer rejects
        (``mailto:``, an unparsable URL) is never new: False, counted as rejected.

        On a writable store this is the core's ``add`` itself, set on the instance
        when it opens: a call a URL then runs no Python of this class (this method
        remains for a read-only store, which refuses a new URL)."""
        new = self._core.add(url, base_url, depth=depth)
        if new and self.readonly:
            self._refuse()
        return new  # type: ignore[no-any-return]

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
        new = self._core.page(links, base_url, depth)
        if new and self.readonly:
            self._refuse()
        return new  # type: ignore[no-any-return]

    def filter_new_pages(self, pages: Iterable[tuple[str | None, Iterable[str]]], *,
                         depth: int = 0) -> list[list[str]]:
        """:meth:`filter_new` of many ``(base_url, links)`` pages, page by page in
        order (a key new on two pages is new on the first), for a caller that has
        pages in hand (a group commit's worth, a crawl dump). Its new keys are
        written before it returns (and committed, with ``autocommit``)."""
        out = [self.filter_new(links, base_url, depth=depth) for base_url, links in pages]
        self._core.flush()
        return out

    def _refuse(self) -> None:
        """A read-only store answered "new": nothing may be recorded."""
        self._core.take_pending()
        raise PermissionError(f"{self.state_dir}: opened read-only")

    # -- admissions that keep the URL text (the crawler's frontier) ---------------------

    def admit(self, links: Iterable[str], base_url: str | None = None, *, depth: int = 0,
              state: State = State.QUEUED) -> list[NewUrl]:
        """Resolve raw links against ``base_url`` and admit the new ones, keeping their
        URL text in the ledger's frontier (in ``state``): :meth:`admit_pages` of their
        ``(fetch_url, key)`` pairs (a rejected link, None, is skipped and counted)."""
        if isinstance(links, str):
            raise TypeError("links must be an iterable of links, not one str")
        resolved = self.canonicalizer.resolve_many(links, base_url)
        (got,) = self.admit_pages([(resolved, depth)], state=state)
        return got

    def admit_pages(self, pages: Sequence[tuple[Sequence[tuple[str, str] | None], int]], *,
                    state: State = State.QUEUED) -> list[list[NewUrl]]:
        """The new ``(fetch_url, key)`` pairs of many ``(pairs, depth)`` pages, for a
        crawler's group commit: the same URLs are new as page by page in order (a key
        on two pages is new on the first; it keeps its first URL; None, a rejected
        link, is skipped and counted), written before it
        returns with their URL text, pending admissions first.

        The core answers each page (``pairs``, its new keys held pending so a later
        page sees them); their rows are then one ledger append per depth, shallowest
        first (a breadth-first frontier wants shallow URLs first): seqs ascend with
        depth, then page order."""
        core = self._core
        core.flush()
        answers = []
        try:
            for pairs, depth in pages:
                idx, fps = core.pairs(pairs, depth, HOLD)
                answers.append((pairs, depth, idx, fps))
            if any(a[2] for a in answers) and self.readonly:
                raise PermissionError(f"{self.state_dir}: opened read-only")
            out = self._write_admitted(answers, state)
        finally:
            core.take_pending()  # the held keys: written above, or answered again
        core.learn(b"".join(a[3] for a in answers))
        return out

    def _write_admitted(self, answers: list[tuple[Sequence[Any], int, list[int], bytes]],
                        state: State) -> list[list[NewUrl]]:
        """:meth:`admit_pages`'s rows: one append per depth, shallowest first."""
        out: list[list[NewUrl]] = [[] for _ in answers]
        for depth in sorted({a[1] for a in answers if a[2]}):
            blob = bytearray()
            made: list[tuple[int, str, str, str]] = []  # (page, url, key, host)
            for at, (pairs, d, idx, fps) in enumerate(answers):
                if d == depth and idx:
                    blob += fps
                    for i in idx:
                        url, key = pairs[i]
                        made.append((at, url, key, host_of(url)))
            seqs = self._write(bytes(blob), depth, [m[1] for m in made],
                               [m[3] for m in made])
            for seq, (at, url, key, host) in zip(seqs, made, strict=True):
                out[at].append(NewUrl(seq, url, key, host, depth))
        if state is not State.QUEUED:
            self.ledger.mark_many([(n.seq, state, None, None) for page in out for n in page])
        return out

    def admit_one(self, url: str, key: str, *, depth: int = 0) -> int | None:
        """:meth:`admit` of one ``(fetch_url, key)`` pair as a pending admission: the
        seq it will have if ``key`` is new (queued, with its URL text), None if it was
        seen. For a caller that meets requests one at a time (a Scrapy dupefilter)
        and must keep each URL to re-issue after a crash: its rows are written
        together (one journal append, one frontier row per host) by size or age, at
        :meth:`commit`, and before any path that reads or writes the ledger
        (:meth:`record_outcomes` of a seq answered here writes it first), with
        :meth:`filter_new`'s crash contract.

        The seq is promised now: pending rows are the next appends, in answer
        order, before anything else reaches the journal."""
        if "\n" in url:
            raise ValueError(f"a URL holds a raw newline: {url!r}")
        host = host_of(url)
        idx, fp = self._core.pairs(((url, key),), depth, HOLD)
        if not idx:
            return None
        if self.readonly:
            self._refuse()
        self._pend_row(depth, fp, url, host)
        seq = self._rows_first + self._pending_row_count - 1
        self._core.tick()
        return seq

    def _pend_row(self, depth: int, fp: bytes, url: str, host: str) -> None:
        """Queue one :meth:`admit_one` row; its seq is the next promised one."""
        rows = self._pending_rows
        if not rows:
            self._rows_first = self.ledger.last_seq() + 1
        if not rows or rows[-1][0] != depth:
            rows.append([depth, bytearray(), [], []])
        run = rows[-1]
        run[1] += fp
        run[2].append(url)
        run[3].append(host)
        self._pending_row_count += 1

    # -- writing what the core answered -------------------------------------------------

    def _flush_pending(self) -> None:
        """Write the pending admissions (the core's flush, which calls
        :meth:`_write_pending`)."""
        self._core.flush()

    def _write_pending(self, batches: list[tuple[int, bytes]]) -> None:
        """The core's ``write``: :meth:`admit_one`'s rows first, in answer order (their
        seqs were promised), then the core's batches one depth at a time (shallowest
        first); each bits first, then one ledger append (committed at once with
        ``autocommit``)."""
        if self.readonly:
            raise PermissionError(f"{self.state_dir}: opened read-only")
        rows, self._pending_rows = self._pending_rows, []
        self._pending_row_count = 0
        for depth, fps, urls, hosts in rows:
            first = self._rows_first
            self._rows_first += len(urls)
            seqs = self._write(bytes(fps), depth, urls, hosts)
            if seqs.start != first:  # a real check, not an assert
                raise RuntimeError(f"{self.state_dir}: pending rows promised seq {first}, "
                                   f"the ledger gave {seqs.start}")
        for depth, fps in batches:
            if fps:
                self._write(fps, depth, None, None)

    def _write(self, blob: bytes, depth: int, urls: list[str] | None,
               hosts: list[str] | None) -> range:
        """One batch of new keys: bits first, then one ledger append."""
        h = halves(blob)
        self.bloom.add_hashes(h)
        self._show_filter()
        seqs = self.ledger.append(blob, depth=depth, urls=urls, hosts=hosts, h=h)
        if len(seqs):
            self._appended_seq = seqs.stop - 1
            if self.ledger.autocommit:
                self._covered_seq = self._appended_seq
        return seqs

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

        Their Bloom bits stay set: the next "maybe seen" finds the ledger's
        tombstone and the URL is admitted again (not counted as a Bloom false
        positive). No counting filter needed.
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
            self._core.forget_all()  # it may hold them: a hit would answer "seen"
        return self.ledger.forget(fps)

    def reopen(self, rows: Iterable[tuple[int, str, str, int]], *, note: str) -> list[int]:
        """Put URLs whose fetch is settled back in the frontier: ``(seq, url, key, depth)``
        of rows marked done. Returns their new seqs, in order.

        Why new seqs: a done seq never returns to QUEUED (its frontier text may be
        compacted away). So each old seq is marked skipped with ``note``, its key
        forgotten and admitted again with its text at ``depth``, as :meth:`forget`
        then a link would, but without counting it in :attr:`counters` (no page
        linked to it again). Its Bloom bits are set already. In the open transaction
        (durable at :meth:`commit`)."""
        self._flush_pending()
        rows = list(rows)
        if not rows:
            return []
        self.ledger.mark_many([(seq, State.SKIPPED, None, note) for seq, _, _, _ in rows])
        fps = [fingerprint(key, self.seed) for _, _, key, _ in rows]
        self.ledger.forget(fps)
        self._core.forget_all()  # it may hold them: a hit would answer "seen"
        by_depth: dict[int, list[tuple[str, bytes]]] = {}
        for (_, url, _, depth), fp in zip(rows, fps, strict=True):
            by_depth.setdefault(depth, []).append((url, fp))
        new: dict[bytes, int] = {}
        for depth, group in sorted(by_depth.items()):
            seqs = self._write(b"".join(fp for _, fp in group), depth,
                               [url for url, _ in group], [host_of(url) for url, _ in group])
            new.update((fp, seq) for (_, fp), seq in zip(group, seqs, strict=True))
        return [new[fp] for fp in fps]

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

    def verify(self) -> int:
        """Check the journal's structure (SQLite's quick_check), then read every row
        once and check its checksum; raises :class:`~dedup.base.errors.LedgerDamaged`
        naming the first damage.
        O(ledger): a resume runs it before its first fetch. Returns the rows read."""
        return self.ledger.journal.verify()

    def index_stats(self) -> dict[str, Any]:
        """The fingerprint index's figures (runs and their records, buffer, bytes, mark)."""
        self._flush_pending()
        return self.ledger.index_stats()

    def held_among(self, fps: bytes | bytearray | memoryview) -> list[int]:
        """Indexes, ascending, of the fingerprints (16 bytes each) the ledger holds
        (its index, not the filter; pending admissions written first)."""
        self._flush_pending()
        return self.ledger.held_among(fps)

    def __len__(self) -> int:
        """URLs admitted and not forgotten (kept counters: O(1))."""
        self._flush_pending()
        return len(self.ledger)

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

    def sync(self) -> int:
        """Make the ledger durable up to the rows committed so far, and let snapshots
        record them as covered; returns that mark. Safe to run in a thread while one
        other thread admits and commits: the mark is read before the sync."""
        if self.readonly:
            raise PermissionError(f"{self.state_dir}: opened read-only")
        mark = self._covered_seq
        self.ledger.sync()
        self._durable_seq = max(self._durable_seq, mark)
        return mark

    def snapshot_shard(self, i: int) -> None:
        """Write shard ``i`` atomically, marked with what the last :meth:`sync` made
        durable. Safe to run in a thread while one other thread admits URLs: the
        mark is read before the bits are copied, and every row at or below it
        already has its bits set."""
        if self.readonly:
            raise PermissionError(f"{self.state_dir}: opened read-only")
        hwm = self._durable_seq
        write_snapshot(self.shard_path(i), self.bloom.shards[i], shard_index=i,
                       shard_count=self.nshards, hwm=hwm, crawl_id=self.crawl_id)

    def snapshot_steps(self) -> list[Callable[[], None]]:
        """A snapshot as steps, for a caller that runs each in a thread so that no
        step holds it long (a crawl's checkpoint): the ledger's sync, then one step
        per shard, each recording what that sync made durable. Run in order, they
        are :meth:`snapshot`."""
        return [self.sync, *(partial(self.snapshot_shard, i) for i in range(self.nshards))]

    def snapshot(self) -> None:
        """Sync the ledger, then write every shard."""
        for step in self.snapshot_steps():
            step()

    def filter_info(self) -> dict[str, Any]:
        """The filter's health (``ShardedBloom.info``: fill, estimated count, expected
        false-positive rate, layers, bytes, shards) with the capacity this directory
        was created for. Counts every bit: O(filter), off any hot path."""
        return {**self.bloom.info(), "capacity": self.geometry.capacity}

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
                seen._show_filter()
                seen.snapshot()
        except BaseException:
            seen.close()
            raise
        return seen

    def close(self, *, commit: bool = True) -> None:
        """Write pending admissions, commit pending rows and release the directory
        (no snapshot is implied). ``commit=False`` discards what is not committed
        yet, as a crash would: for a caller that failed halfway through a group of
        writes that must commit together."""
        try:
            if not self.readonly and commit:
                self._flush_pending()
        finally:
            self.canonicalizer.count_compiled_by(None)
            self._fold_compiled()
            self.ledger.close(commit=commit)
            self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> UrlSeen:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

