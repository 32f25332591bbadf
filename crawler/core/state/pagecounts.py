"""What the pages taken from the frontier came to: responses and failures, the
failures by cause and by host, over every run of a crawl.

Why kept in the ledger's meta and counted by the group commit: the summary and
``bloomcrawl stats`` must add up to the pages committed, across kill -9 and
resume. Counting when a page is processed would count pages in flight at a
crash, which are fetched (and counted) again; counting in the transaction that
marks them counts each committed page exactly once (``crawler.core.durability.commit``).

"fetched" means an HTTP response was received, whatever its status (a 404 or a
500 is an answer: "with errors"); "failed" means none was (refused, timed out,
reset, DNS, TLS, a refused private address, robots.txt unavailable) or the body
was over the size limit. Why those, from the recorded (status, error):
``crawler.net.outcome.failure_cause``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from crawler.net.outcome import failure_cause
from dedup import State, host_of

__all__ = [
    "MAX_HOSTS",
    "OTHER_HOSTS",
    "PAGE_COUNTS_KEY",
    "UNKNOWN_HOST",
    "PageCounts",
    "Row",
    "format_host_failures",
    "recount",
    "top_failed_hosts",
]

# Ledger meta key: {"fetched", "fetched_with_errors", "failed", "causes": {cause: n},
# "hosts": {host: {cause: n}}} over every run.
PAGE_COUNTS_KEY = "page_counts"
# Hosts kept by name; failures of hosts past this many are counted under OTHER_HOSTS,
# so the value one commit rewrites stays small on a crawl of millions of hosts.
MAX_HOSTS = 500
OTHER_HOSTS = "(other hosts)"
# Done rows of a ledger written before these counts, counted once from its outcomes:
# their hosts are not known any more.
UNKNOWN_HOST = "(host not recorded)"

Row = tuple[str, State, int | None, str | None]  # (url, state, status, error)


def _empty() -> dict[str, Any]:
    return {"fetched": 0, "fetched_with_errors": 0, "failed": 0, "causes": {}, "hosts": {}}


class PageCounts:
    """The counts of a crawl's committed pages (``PAGE_COUNTS_KEY``).

    ``add`` joins the ledger's open transaction: the group commit calls it with
    the pages whose marks it is about to commit, so both are durable together.
    """

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger
        stored = ledger.meta_get(PAGE_COUNTS_KEY)
        self.counts: dict[str, Any] = _empty()
        if stored is not None:
            self.counts.update(stored)
        else:
            self._count_earlier(ledger)

    def _count_earlier(self, ledger: Any) -> None:
        """A ledger from before these counts: its done rows, once (their hosts unknown)."""
        c = ledger.counts()
        if not (c.get("fetched") or c.get("failed")):
            return
        for _seq, state, status, error, _at in ledger.outcomes():
            self._count(UNKNOWN_HOST, state, status, error)

    def add(self, rows: Iterable[Row]) -> None:
        """Count committed pages ``(url, state, status, error)`` (skipped ones are not
        pages fetched or failed) in the open transaction."""
        changed = False
        for url, state, status, error in rows:
            changed |= self._count(host_of(url), state, status, error)
        if changed:
            self._ledger.meta_set(PAGE_COUNTS_KEY, self.counts)

    def _count(self, host: str, state: State, status: int | None, error: str | None) -> bool:
        if state not in (State.FETCHED, State.FAILED):
            return False
        c = self.counts
        cause = failure_cause(status, error)
        if cause is None:
            c["fetched"] += 1
            if error is not None:
                c["fetched_with_errors"] += 1
            return True
        c["failed"] += 1
        c["causes"][cause] = c["causes"].get(cause, 0) + 1
        hosts = c["hosts"]
        if host not in hosts and len(hosts) >= MAX_HOSTS:
            host = OTHER_HOSTS
        by_cause = hosts.setdefault(host, {})
        by_cause[cause] = by_cause.get(cause, 0) + 1
        return True


def rows_of_records(records: Iterable[dict[str, Any]]) -> Iterator[Row]:
    """The rows ``add`` counts, from pages.jsonl records (one per committed page; a
    robots.txt refusal is the one skipped page with a record)."""
    for r in records:
        status, error = r.get("status"), r.get("error")
        skipped = status is None and error == "robots.txt"
        yield r["url"], State.SKIPPED if skipped else State.FETCHED, status, error


def recount(ledger: Any, rows: Iterable[Row]) -> None:
    """Count every committed page anew, in the ledger's open transaction: after
    ``repair`` (the ledger's rows rebuilt from what survived) or ``resize`` (pages
    moved with their hosts), from pages.jsonl, which holds one record per
    committed page."""
    ledger.meta_set(PAGE_COUNTS_KEY, _empty())
    PageCounts(ledger).add(rows)


def top_failed_hosts(hosts: dict[str, dict[str, int]], n: int = 5
                     ) -> list[tuple[str, int, dict[str, int]]]:
    """The ``n`` hosts with the most failures: (host, failures, {cause: n})."""
    rows = [(h, sum(by.values()), by) for h, by in hosts.items()]
    rows.sort(key=lambda r: (-r[1], r[0]))
    return rows[:n]


def format_host_failures(host: str, total: int, by_cause: dict[str, int]) -> str:
    """``127.0.0.1:9: 2 failed: connection refused`` (causes by count when several)."""
    causes = sorted(by_cause.items(), key=lambda kv: (-kv[1], kv[0]))
    what = (causes[0][0] if len(causes) == 1
            else ", ".join(f"{n} {cause}" for cause, n in causes))
    return f"{host}: {total} failed: {what}"
