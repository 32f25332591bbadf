"""The crawl-specific half of the seen-store: what a crawler keeps beside its keys.

``UrlSeen.filter_new`` needs nothing of this: it keeps fingerprints and a depth,
never URL text, hosts or fetch outcomes. A crawler needs more of the same
directory, in the same transactions as its admissions (so a crash never splits
them): the frontier's text (URL and host of each queued key), fetch outcomes
(the ledger's ``State``: QUEUED, FETCHED, FAILED, SKIPPED), where each run of
new URLs was found (its referrer), the first capture of each body digest, and
JSON metadata. Those are crawler concepts kept by dedup's journal: this mixin is
the one door the crawler goes through for them, with the names a crawler
engineer looks for, so that nothing outside dedup drives the ledger's internals
(``seen.ledger.journal...``).

Why a mixin of ``UrlSeen`` and not a crawler-side layer: the rows it reads and
writes are the journal's own, committed by the seen-store's group commit; a
second object over the same SQLite connection would add a second owner of that
transaction, not a boundary.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from dedup.journal.format import QueuedRow, State
from dedup.journal.learned import HeldRow, PrintRow, RuleRow
from dedup.store.ledger import Ledger
from dedup.url.fingerprint import fingerprint

__all__ = ["CrawlRecords", "Outcome"]

Outcome = tuple[int, State, int | None, str | None]  # (seq, state, status, error)


class CrawlRecords:
    """Crawler-facing methods of :class:`~dedup.store.seen.UrlSeen` (``self.ledger``)."""

    ledger: Ledger
    seed: int

    def _flush_pending(self) -> None:
        """Write the pending admissions (``UrlSeen``'s): every method here that reads
        or writes the ledger calls it first, so a seq ``admit_one`` promised exists
        before it is marked, and a pending key is in every answer."""

    # -- metadata: the crawl's settings, output sizes, totals (JSON values) ----------

    def meta_get(self, key: str, default: Any = None) -> Any:
        """The JSON value stored under ``key`` (``default`` if none)."""
        return self.ledger.meta_get(key, default)

    def meta_set(self, key: str, value: Any) -> None:
        """Store a JSON value, in the open transaction (durable at ``commit``)."""
        self.ledger.meta_set(key, value)

    # -- the frontier: queued URLs with their text -----------------------------------

    def queued(self, limit: int, *, after_seq: int = 0, host: str | None = None
               ) -> list[QueuedRow]:
        """Page in the durable frontier, oldest first (optionally one host's)."""
        self._flush_pending()
        return self.ledger.queued(limit, after_seq=after_seq, host=host)

    def queued_hosts(self) -> list[str]:
        """Hosts with frontier text kept (an upper bound: done rows are compacted lazily)."""
        self._flush_pending()
        return self.ledger.queued_hosts()

    # -- outcomes ---------------------------------------------------------------------

    def record_outcomes(self, rows: Iterable[Outcome]) -> None:
        """Mark fetched/failed/skipped ``(seq, state, status, error)`` rows, in the open
        transaction (the crawler's group commit makes them durable with its output)."""
        self._flush_pending()
        self.ledger.mark_many(rows)

    def outcomes(self) -> Iterator[tuple[int, State, int | None, str | None, float]]:
        """``(seq, state, status, error, at)`` of every row marked done, in seq order."""
        self._flush_pending()
        return self.ledger.outcomes()

    def counts(self) -> dict[str, int]:
        """Per-state counts (admitted, forgotten, queued, fetched, ...): O(1), kept."""
        self._flush_pending()
        return self.ledger.counts()

    # -- referrers and captures --------------------------------------------------------

    def note_referrers(self, runs: Iterable[tuple[int, int, str | None]]) -> None:
        """``(first seq, last seq, url)``: the page each run of new seqs was found on."""
        self._flush_pending()
        self.ledger.journal.note_runs(runs)

    def referrer_of(self, seq: int) -> str | None:
        """The page ``seq``'s URL was found on (``note_referrers``), None if unknown."""
        return self.ledger.journal.note_of(seq)

    def first_capture(self, digest: str) -> tuple[str, str] | None:
        """``(url, date)`` of the first body with this payload digest, or None."""
        return self.ledger.journal.content_first(digest)

    def first_captures(self, digests: Iterable[str]) -> dict[str, tuple[str, str]]:
        """``first_capture`` of many digests at once, by digest (unknown ones left out)."""
        return self.ledger.journal.content_firsts(digests)

    def note_captures(self, rows: Iterable[tuple[str, str, str]]) -> None:
        """``(digest, url, date)``: first captures, in the open transaction (a digest
        already known keeps its first)."""
        self.ledger.journal.content_add(rows)

    # -- what the crawl learns: content prints, rules, held URLs ----------------------

    def note_prints(self, rows: Iterable[PrintRow]) -> None:
        """Fetched pages' content prints, in the open transaction (with their marks)."""
        self.ledger.journal.learned_write("prints", rows)

    def prints(self, after: int = 0) -> Iterator[PrintRow]:
        """Every page's content print past seq ``after``, in seq order."""
        return self.ledger.journal.learned.prints(after)

    def print_of(self, seq: int) -> PrintRow | None:
        """The content print of the page with this seq, or None."""
        return self.ledger.journal.learned.print_of(seq)

    def note_rules(self, rows: Iterable[RuleRow]) -> None:
        """Learned rules as they now stand, in the open transaction."""
        self.ledger.journal.learned_write("rules", rows)

    def learned_rules(self, host: str | None = None) -> list[RuleRow]:
        """Every learned rule (one host's), by id."""
        return self.ledger.journal.learned.rules(host)

    def note_held(self, rows: Iterable[HeldRow]) -> None:
        """Admissions a rule or a budget made or held, in the open transaction."""
        self._flush_pending()
        self.ledger.journal.learned_write("held", rows)

    def held(self, host: str | None = None, kinds: Iterable[int] | None = None
             ) -> Iterator[HeldRow]:
        """Held rows (one host's, some kinds'), in seq order: a scan."""
        return self.ledger.journal.learned.held(host, kinds)

    def held_of(self, seq: int) -> HeldRow | None:
        return self.ledger.journal.learned.held_of(seq)

    def drop_held(self, seqs: Iterable[int]) -> None:
        """Held rows done with (admitted again, or their keys forgotten)."""
        self.ledger.journal.learned_write("unheld", seqs)

    def lookup_key(self, key: str) -> dict[str, Any] | None:
        """What the ledger holds for a key as it is (not canonicalized: a rule's
        rewritten key), or None."""
        self._flush_pending()
        return self.ledger.get(fingerprint(key, self.seed))

    # -- checks and figures ------------------------------------------------------------

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
