"""What a crawl keeps in its state directory beside the seen-test's keys, each by name.

The seen-store commits all of it in one transaction with the admissions
(``UrlSeen.commit``): the frontier's text, the fetch outcomes, the referrers and
the first captures (``dedup.CrawlRecords``), and the crawl's own values, which
dedup stores as JSON without knowing what they mean. ``CrawlState`` is the
crawler's one door to them: a method for each, so that the names they are
stored under (part of the state directory's format: existing crawls resume
with them) are written down once, here, and a caller never passes a string key.

What each value is (who writes it, who reads it):

- the crawl's identity, frozen when it starts (``crawler.core.state.state``):
  ``settings`` (``Settings.to_dict``), ``scope`` (``Scope.to_dict``), ``hooks``
  (the handler and follow as ``module:function``), ``fleet`` (a fleet worker's
  identity: crawl id, W, I, the Redis URL without its password);
- counts over every run, written by the group commit or a checkpoint in the
  transaction that marks the pages they count: ``totals`` (the seen-test's
  counters), ``page_counts`` (``crawler.core.state.pagecounts``),
  ``sitemap_counts`` (``crawler.core.schedule.sitemaps``), ``retry_attempts``
  (``crawler.core.schedule.retry``);
- ``committed``: the sizes of pages.jsonl, items.jsonl and the WARC that the
  ledger counts as written (``crawler.core.durability.commit``); reopening cuts
  each file back to it; ``pages_rewrite``: a rewritten pages.jsonl committed and
  not yet put in place (``crawler.core.state.reopen``);
- what learning keeps (``crawler.core.schedule.learning``), written in the group
  commit's transaction: ``learn_budgets`` (the closed budgets and their counters),
  ``learn_counts`` (the URLs learning marked skipped, by why and by host), and
  dedup's learned records (content prints, rules, held URLs) with ``lookup_key``,
  the ledger's row of a key as it is (a rule key is no URL to canonicalize).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dedup import CrawlRecords, HeldRow, PrintRow, QueuedRow, RuleRow, State, open_records

__all__ = ["Committed", "CrawlState"]

# The names the values are stored under (the state directory's format).
_SETTINGS = "config"
_SCOPE = "scope"
_HOOKS = "hooks"
_FLEET = "fleet"
_TOTALS = "dedup_totals"
_PAGE_COUNTS = "page_counts"
_SITEMAP_COUNTS = "sitemap_counts"
_RETRY_ATTEMPTS = "retry_attempts"
_COMMITTED = "outputs"
_PAGES_REWRITE = "pages_rewrite"
_LEARN_BUDGETS = "learn_budgets"
_LEARN_COUNTS = "learn_counts"


@dataclass(frozen=True, slots=True)
class Committed:
    """The output files' sizes a group commit recorded: a file is cut back to its size
    when the crawl reopens. None: never recorded (for pages.jsonl: keep it whole; for
    items.jsonl, a crawl that never committed one: empty)."""

    pages: int | None = None
    items: int | None = None
    warc: dict[str, Any] | None = None  # the open WARC file's serial and size

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("pages", self.pages), ("items", self.items),
                                  ("warc", self.warc)) if v is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Committed:
        d = d or {}
        return cls(d.get("pages"), d.get("items"), d.get("warc"))


class CrawlState:
    """A crawl's records and values in its ledger, in the seen-store's open transaction."""

    __slots__ = ("_records",)

    def __init__(self, records: CrawlRecords) -> None:
        self._records = records

    @classmethod
    @contextmanager
    def stopped(cls, state_dir: str | os.PathLike[str], *, readonly: bool = True
                ) -> Iterator[CrawlState]:
        """The state of a directory no crawl holds open (or, ``readonly``, one a crawl
        may be running in): its ledger alone, without the filter; each write is
        committed at once (``dedup.open_records``)."""
        with open_records(state_dir, readonly=readonly) as records:
            yield cls(records)

    # -- what the crawl was started with ------------------------------------------------

    def settings(self) -> dict[str, Any] | None:
        """The crawl's frozen settings (``Settings.to_dict``), None if it has none."""
        return self._records.value(_SETTINGS)

    def set_settings(self, settings: Mapping[str, Any]) -> None:
        self._records.set_value(_SETTINGS, dict(settings))

    def scope(self) -> dict[str, Any] | None:
        """The crawl's frozen scope (``Scope.to_dict``)."""
        return self._records.value(_SCOPE)

    def set_scope(self, scope: Mapping[str, Any]) -> None:
        self._records.set_value(_SCOPE, dict(scope))

    def hooks(self) -> dict[str, Any]:
        """The hooks a resume runs with (``crawler.core.run.crawl``), {} if none."""
        return self._records.value(_HOOKS) or {}

    def set_hooks(self, hooks: Mapping[str, Any] | None) -> None:
        self._records.set_value(_HOOKS, dict(hooks) if hooks else None)

    def fleet(self) -> dict[str, Any] | None:
        """A fleet worker's identity, None for a single-process crawl."""
        meta = self._records.value(_FLEET)
        return meta if isinstance(meta, dict) else None

    def set_fleet(self, identity: Mapping[str, Any] | None) -> None:
        self._records.set_value(_FLEET, dict(identity) if identity is not None else None)

    def settings_copy(self) -> dict[str, Any]:
        """What a copy beside the ledger keeps so that ``repair`` can rebuild a ledger
        whose values are unreadable: the crawl's settings, scope and fleet identity,
        and the directory's own (filter geometry, canonicalization rules, crawl id)."""
        return {_SETTINGS: self.settings(), _SCOPE: self.scope(),
                _FLEET: self._records.value(_FLEET), **self._records.identity()}

    # -- counts over every run ------------------------------------------------------------

    def totals(self) -> dict[str, int]:
        """The seen-test's counters over every earlier run ({} before the first)."""
        return dict(self._records.value(_TOTALS) or {})

    def set_totals(self, totals: Mapping[str, int]) -> None:
        self._records.set_value(_TOTALS, dict(totals))

    def page_counts(self) -> dict[str, Any] | None:
        """The committed pages' counts (None: a ledger from before they were kept)."""
        return self._records.value(_PAGE_COUNTS)

    def set_page_counts(self, counts: Mapping[str, Any]) -> None:
        self._records.set_value(_PAGE_COUNTS, dict(counts))

    def sitemap_counts(self) -> dict[str, int]:
        """What the committed sitemap fetches came to ({} if none was)."""
        return dict(self._records.value(_SITEMAP_COUNTS) or {})

    def set_sitemap_counts(self, counts: Mapping[str, int] | None) -> None:
        self._records.set_value(_SITEMAP_COUNTS, dict(counts) if counts else None)

    def retry_attempts(self) -> dict[int, list[Any]]:
        """``{seq: [tries, requests, last error]}`` of the URLs tried and not settled."""
        return {int(seq): list(v)
                for seq, v in (self._records.value(_RETRY_ATTEMPTS) or {}).items()}

    def set_retry_attempts(self, attempts: Mapping[int, Sequence[Any]]) -> None:
        self._records.set_value(_RETRY_ATTEMPTS,
                                {str(k): list(v) for k, v in attempts.items()})

    # -- the output files' committed sizes ----------------------------------------------

    def committed(self) -> Committed:
        return Committed.from_dict(self._records.value(_COMMITTED))

    def set_committed(self, committed: Committed) -> None:
        self._records.set_value(_COMMITTED, committed.to_dict())

    def pages_rewrite(self) -> int | None:
        """The size of a rewritten copy of pages.jsonl that is committed but not yet
        put in place (``crawler.core.state.reopen``), None when there is none."""
        mark = self._records.value(_PAGES_REWRITE)
        return int(mark["size"]) if mark else None

    def set_pages_rewrite(self, size: int | None) -> None:
        self._records.set_value(_PAGES_REWRITE, {"size": size} if size is not None else None)

    # -- what learning keeps (crawler.core.schedule.learning) ------------------------------

    def learn_budgets(self) -> dict[str, Any]:
        """The trap budgets' state (``dedup.Budgets.state``): {} before any closed."""
        return self._records.value(_LEARN_BUDGETS) or {}

    def set_learn_budgets(self, budgets: Mapping[str, Any]) -> None:
        self._records.set_value(_LEARN_BUDGETS, dict(budgets))

    def learn_counts(self) -> dict[str, Any]:
        """The URLs learning marked skipped, by why (``suppressed``, ``budget``,
        ``aliases``) and by host (``hosts``): {} before any."""
        return self._records.value(_LEARN_COUNTS) or {}

    def set_learn_counts(self, counts: Mapping[str, Any]) -> None:
        self._records.set_value(_LEARN_COUNTS, dict(counts))

    def note_prints(self, rows: Iterable[PrintRow]) -> None:
        """Fetched pages' content prints, in the open transaction."""
        self._records.note_prints(rows)

    def prints(self, after: int = 0) -> Iterator[PrintRow]:
        """Every page's content print past seq ``after``, in seq order."""
        return self._records.prints(after)

    def print_of(self, seq: int) -> PrintRow | None:
        return self._records.print_of(seq)

    def note_rules(self, rows: Iterable[RuleRow]) -> None:
        """Learned rules as they now stand, in the open transaction."""
        self._records.note_rules(rows)

    def learned_rules(self, host: str | None = None) -> list[RuleRow]:
        """Every learned rule (one host's), by id."""
        return self._records.learned_rules(host)

    def note_held(self, rows: Iterable[HeldRow]) -> None:
        """URLs a rule or a budget held (or admitted as aliases, or as checks)."""
        self._records.note_held(rows)

    def held(self, host: str | None = None, kinds: Iterable[int] | None = None
             ) -> Iterator[HeldRow]:
        """Held rows (one host's, some kinds'), in seq order."""
        return self._records.held(host, kinds)

    def held_of(self, seq: int) -> HeldRow | None:
        return self._records.held_of(seq)

    def drop_held(self, seqs: Iterable[int]) -> None:
        """Held rows done with (admitted again, or their keys forgotten)."""
        self._records.drop_held(seqs)

    def lookup_key(self, key: str) -> dict[str, Any] | None:
        """The ledger's row of a key as it is (seq, url, host, depth, state, ...), or None."""
        return self._records.lookup_key(key)

    # -- the frontier, outcomes, referrers and captures (dedup.CrawlRecords) ---------------

    def queued(self, limit: int, *, after_seq: int = 0, host: str | None = None
               ) -> list[QueuedRow]:
        """Page in the durable frontier, oldest first (optionally one host's)."""
        return self._records.queued(limit, after_seq=after_seq, host=host)

    def queued_hosts(self) -> list[str]:
        """Hosts with frontier text kept (an upper bound)."""
        return self._records.queued_hosts()

    def record_outcomes(self, rows: Iterable[tuple[int, State, int | None, str | None]]
                        ) -> None:
        """Mark ``(seq, state, status, error)`` rows done, in the open transaction."""
        self._records.record_outcomes(rows)

    def outcomes(self) -> Iterator[tuple[int, State, int | None, str | None, float]]:
        """``(seq, state, status, error, at)`` of every row marked done, in seq order."""
        return self._records.outcomes()

    def counts(self) -> dict[str, int]:
        """The ledger's per-state counts (admitted, queued, fetched, ...): O(1)."""
        return self._records.counts()

    def note_referrers(self, runs: Iterable[tuple[int, int, str | None]]) -> None:
        """``(first seq, last seq, url)``: the page each run of new seqs was found on."""
        self._records.note_referrers(runs)

    def referrer_of(self, seq: int) -> str | None:
        """The page ``seq``'s URL was found on, None if unknown."""
        return self._records.referrer_of(seq)

    def first_captures(self, digests: Iterable[str]) -> dict[str, tuple[str, str]]:
        """``(url, date)`` of the first body with each payload digest (known ones)."""
        return self._records.first_captures(digests)

    def first_capture(self, digest: str) -> tuple[str, str] | None:
        return self._records.first_capture(digest)

    def note_captures(self, rows: Iterable[tuple[str, str, str]]) -> None:
        """``(digest, url, date)``: first captures, in the open transaction."""
        self._records.note_captures(rows)

    def last_seq(self) -> int:
        """The highest seq the ledger handed out (what a full snapshot must cover)."""
        return self._records.last_seq()
