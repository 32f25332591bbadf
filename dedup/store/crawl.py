"""The crawl-specific half of the seen-store: what a crawler keeps beside its keys.

``UrlSeen.filter_new`` needs nothing of this: it keeps fingerprints and a depth,
never URL text, hosts or fetch outcomes. A crawler needs more of the same
directory, in the same transactions as its admissions (so a crash never splits
them): the frontier's text (URL and host of each queued key), fetch outcomes
(the ledger's ``State``: QUEUED, FETCHED, FAILED, SKIPPED), where each run of
new URLs was found (its referrer), the first capture of each body digest, and
its own named JSON values (settings, counts: dedup does not know what they
mean). Those are crawler concepts kept by dedup's journal: ``CrawlRecords`` is
the one door a crawler goes through for them (``UrlSeen.records``, or
:func:`open_records` for a stopped directory), so that nothing outside dedup
drives the ledger (``seen.ledger.journal...``).

Why an object over the seen-store's ledger and not a crawler-side store: the
rows it reads and writes are the journal's own, committed by the seen-store's
group commit (``UrlSeen.commit``); a second SQLite connection would add a second
owner of that transaction, not a boundary.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dedup.journal.format import HeldRow, PrintRow, QueuedRow, RuleRow, State
from dedup.store.ledger import Ledger
from dedup.store.statedir import lock, require_state_dir
from dedup.url.fingerprint import fingerprint

__all__ = ["IDENTITY_KEYS", "CrawlRecords", "Outcome", "open_records"]

Outcome = tuple[int, State, int | None, str | None]  # (seq, state, status, error)
# The values dedup itself stores with a state directory (``dedup.store.identity``):
# readable through ``identity``, never written by a caller of ``set_value``.
IDENTITY_KEYS = ("geometry", "canon_rules", "crawl_id")


def _no_flush() -> None:
    """A ledger opened alone has no pending admissions to write first."""


class CrawlRecords:
    """The crawler's records in one state directory's ledger, in its open transaction.

    ``flush`` is the seen-store's: it writes the pending admissions, and every
    method here that reads or writes the frontier or the outcomes calls it first,
    so a seq ``admit_one`` promised exists before it is marked, and a pending key
    is in every answer.
    """

    def __init__(self, ledger: Ledger, flush: Callable[[], None] = _no_flush) -> None:
        self._ledger = ledger
        self._flush = flush
        self._seed: int | None = None  # the fingerprint seed (``lookup_key``)

    # -- named JSON values: the crawler's settings, output sizes, totals ----------------

    def value(self, name: str, default: Any = None) -> Any:
        """The JSON value stored under ``name`` (``default`` if none)."""
        return self._ledger.meta_get(name, default)

    def set_value(self, name: str, value: Any) -> None:
        """Store a JSON value, in the open transaction (durable at ``commit``). The
        directory's identity (``IDENTITY_KEYS``) is dedup's own: refused."""
        if name in IDENTITY_KEYS:
            raise ValueError(f"{name!r} is the state directory's own (fixed at creation)")
        self._ledger.meta_set(name, value)

    def identity(self) -> dict[str, Any]:
        """What the directory was created with (filter geometry, canonicalization rules,
        crawl id), as stored: what a copy kept for ``repair`` must hold."""
        return {k: self._ledger.meta_get(k) for k in IDENTITY_KEYS}

    # -- the frontier: queued URLs with their text -----------------------------------

    def queued(self, limit: int, *, after_seq: int = 0, host: str | None = None
               ) -> list[QueuedRow]:
        """Page in the durable frontier, oldest first (optionally one host's)."""
        self._flush()
        return self._ledger.queued(limit, after_seq=after_seq, host=host)

    def queued_hosts(self) -> list[str]:
        """Hosts with frontier text kept (an upper bound: done rows are compacted lazily)."""
        self._flush()
        return self._ledger.queued_hosts()

    # -- outcomes ---------------------------------------------------------------------

    def record_outcomes(self, rows: Iterable[Outcome]) -> None:
        """Mark fetched/failed/skipped ``(seq, state, status, error)`` rows, in the open
        transaction (the crawler's group commit makes them durable with its output)."""
        self._flush()
        self._ledger.mark_many(rows)

    def outcomes(self) -> Iterator[tuple[int, State, int | None, str | None, float]]:
        """``(seq, state, status, error, at)`` of every row marked done, in seq order."""
        self._flush()
        return self._ledger.outcomes()

    def counts(self) -> dict[str, int]:
        """Per-state counts (admitted, forgotten, queued, fetched, ...): O(1), kept."""
        self._flush()
        return self._ledger.counts()

    # -- referrers and captures --------------------------------------------------------

    def note_referrers(self, runs: Iterable[tuple[int, int, str | None]]) -> None:
        """``(first seq, last seq, url)``: the page each run of new seqs was found on."""
        self._flush()
        self._ledger.journal.note_runs(runs)

    def referrer_of(self, seq: int) -> str | None:
        """The page ``seq``'s URL was found on (``note_referrers``), None if unknown."""
        return self._ledger.journal.note_of(seq)

    def first_capture(self, digest: str) -> tuple[str, str] | None:
        """``(url, date)`` of the first body with this payload digest, or None."""
        return self._ledger.journal.content_first(digest)

    def first_captures(self, digests: Iterable[str]) -> dict[str, tuple[str, str]]:
        """``first_capture`` of many digests at once, by digest (unknown ones left out)."""
        return self._ledger.journal.content_firsts(digests)

    def note_captures(self, rows: Iterable[tuple[str, str, str]]) -> None:
        """``(digest, url, date)``: first captures, in the open transaction (a digest
        already known keeps its first)."""
        self._ledger.journal.content_add(rows)

    # -- what the crawl learns: content prints, rules, held URLs ----------------------

    def note_prints(self, rows: Iterable[PrintRow]) -> None:
        """Fetched pages' content prints, in the open transaction (with their outcomes)."""
        self._ledger.journal.learned_write("prints", rows)

    def prints(self, after: int = 0) -> Iterator[PrintRow]:
        """Every page's content print past seq ``after``, in seq order."""
        return self._ledger.journal.learned.prints(after)

    def print_of(self, seq: int) -> PrintRow | None:
        """The content print of the page with this seq, or None."""
        return self._ledger.journal.learned.print_of(seq)

    def note_rules(self, rows: Iterable[RuleRow]) -> None:
        """Learned rules as they now stand, in the open transaction."""
        self._ledger.journal.learned_write("rules", rows)

    def learned_rules(self, host: str | None = None) -> list[RuleRow]:
        """Every learned rule (one host's), by id."""
        return self._ledger.journal.learned.rules(host)

    def note_held(self, rows: Iterable[HeldRow]) -> None:
        """Admissions a rule or a budget made or held, in the open transaction."""
        self._flush()
        self._ledger.journal.learned_write("held", rows)

    def held(self, host: str | None = None, kinds: Iterable[int] | None = None
             ) -> Iterator[HeldRow]:
        """Held rows (one host's, some kinds'), in seq order: a scan."""
        return self._ledger.journal.learned.held(host, kinds)

    def held_of(self, seq: int) -> HeldRow | None:
        """The held row of this seq, or None."""
        return self._ledger.journal.learned.held_of(seq)

    def drop_held(self, seqs: Iterable[int]) -> None:
        """Held rows done with (admitted again, or their keys forgotten)."""
        self._ledger.journal.learned_write("unheld", seqs)

    def lookup_key(self, key: str) -> dict[str, Any] | None:
        """What the ledger holds for a key as it is (not canonicalized: a learned
        rule's rewritten key), or None: its seq, url, host, depth, state, status."""
        self._flush()
        if self._seed is None:  # fixed at creation: read once
            self._seed = int(self._ledger.meta_get("geometry")["seed"])
        return self._ledger.get(fingerprint(key, self._seed))

    # -- a stopped directory's -------------------------------------------------------------

    def last_seq(self) -> int:
        """Highest seq the ledger ever handed out: what a snapshot covering every row
        must record."""
        return self._ledger.last_seq()


@contextmanager
def open_records(state_dir: str | os.PathLike[str], *, readonly: bool = True
                 ) -> Iterator[CrawlRecords]:
    """The records of a state directory alone, without its filter or index: for tools
    that read a directory beside a running crawl (``readonly``) or fix a stopped one's
    values (each write committed at once; the directory's lock is held meanwhile, so
    a running crawl is refused with ``StateLocked``)."""
    d = require_state_dir(state_dir)
    fd = None if readonly else lock(d)
    try:
        with Ledger.in_dir(Path(d), readonly=readonly) as ledger:
            yield CrawlRecords(ledger)
    finally:
        if fd is not None:
            os.close(fd)
