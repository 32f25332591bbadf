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
from crawler.net.refused import PRIVATE_REFUSED
from dedup import State, host_of

__all__ = [
    "MAX_HOSTS",
    "OTHER_HOSTS",
    "PAGE_COUNTS_KEY",
    "REOPENED",
    "UNKNOWN_HOST",
    "PageCounts",
    "Row",
    "format_host_failures",
    "recount",
    "refused",
    "reopened",
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
# URLs refused as private addresses that a resume with --allow-private put back in the
# frontier (``crawler.core.state.reopen``): their first takings are marked skipped in
# the ledger and have no pages.jsonl line any more, so they are not counted as skipped.
REOPENED = "reopened"

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

    def take_back(self, rows: Iterable[Row]) -> None:
        """Uncount committed failed pages ``(url, state, status, error)`` whose records
        leave pages.jsonl because their URLs are put back in the frontier (a resume
        with --allow-private: ``crawler.core.state.reopen``), in the open transaction;
        each is counted under ``REOPENED``."""
        c = self.counts
        hosts = c["hosts"]
        for url, _state, status, error in rows:
            cause = failure_cause(status, error)
            if cause is None:
                raise ValueError(f"{url} got a response: it is not put back")
            c["failed"] -= 1
            _drop(c["causes"], cause)
            host = host_of(url)
            key = host if host in hosts else OTHER_HOSTS  # as ``_count`` counted it
            by_cause = hosts.get(key)
            if by_cause is not None:
                _drop(by_cause, cause)
                if not by_cause:
                    del hosts[key]
            c[REOPENED] = c.get(REOPENED, 0) + 1
        self._ledger.meta_set(PAGE_COUNTS_KEY, c)

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


def _drop(counts: dict[str, int], key: str) -> None:
    """One less of ``key`` (gone at 0)."""
    n = counts.get(key, 0) - 1
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)


def refused(counts: dict[str, Any]) -> int:
    """Pages refused as private addresses: failed, but not given up after retries (a
    resume with --allow-private fetches them)."""
    return int((counts.get("causes") or {}).get(PRIVATE_REFUSED, 0))


def reopened(counts: dict[str, Any]) -> int:
    """Ledger rows marked skipped only because their URL was put back (``REOPENED``)."""
    return int(counts.get(REOPENED, 0))


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
