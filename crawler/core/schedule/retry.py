"""Transient failures over a crawl: when a URL is tried again, when it is given up,
and the count of what was given up.

Why over the crawl and not only inside one fetch: a host that is down for a
minute (a restart, a deploy) outlasts a fetch's own quick retries. Such a URL
is not an answer; turning it into a permanent "failed" (or a robots.txt
"skipped") loses it. So it goes back to the frontier for a later round, with
exponential backoff; only when its budget is spent is it given up, and what
was given up is counted where ``bloomcrawl stats`` and the exit status see it
(the ledger's failed state; its cause in ``crawler.core.state.pagecounts``).

Why one budget per URL (``[crawl] max_retries``, like Scrapy's RETRY_TIMES and
Crawlee's maxRequestRetries): quick retries within a fetch times rounds over
the crawl multiplied (a resetting server got 18 requests for one URL). Here a
URL is *tried* at most ``1 + max_retries`` times: each request sent for it
counts (a fetch that ran into its total timeout is one), and so does a round
lost to its host's robots.txt being unavailable. The count is kept in the
ledger (``CrawlState.retry_attempts``), so a resumed crawl, even after kill -9,
goes on from it instead of granting the budget anew.
"""

from __future__ import annotations

from typing import NamedTuple

from crawler.config.settings import Settings
from crawler.core.schedule.frontier import Frontier, QueuedUrl
from crawler.core.state.crawlstate import CrawlState

__all__ = ["Retries", "Tried"]


class Tried(NamedTuple):
    """What a URL has cost so far, over every run of the crawl."""

    tries: int = 0  # requests sent for it, plus rounds lost to robots.txt
    requests: int = 0  # requests sent for it: pages.jsonl's ``attempts``
    error: str | None = None  # why its last try failed


class Retries:
    """Each URL's tries (by ledger ``seq``) against ``[crawl] max_retries``.

    The counts live in the ledger (``CrawlState.retry_attempts``: each URL tried but
    not settled yet, deferred to a later round or in a round when the crawl
    stopped), written by the
    group commit (``before_commit``); the engine has them committed before the
    URL is deferred, and before a retry round sends anything (that round's
    requests counted in advance), so neither a crash nor a resume lets a URL
    exceed its budget. A URL's first round is not committed in advance (that
    would cost a commit per page): like every URL in flight at a kill -9, it is
    sent again. One value holds every URL waiting for a retry, rewritten by
    each commit that changes it: cheap for thousands of such URLs, not millions.
    """

    def __init__(self, settings: Settings, frontier: Frontier, state: CrawlState) -> None:
        self.crawl = settings.crawl
        self.quick = settings.fetch.retries
        self.frontier = frontier
        self._state = state
        self._tried: dict[int, Tried] = {
            seq: Tried(*v) for seq, v in state.retry_attempts().items()}
        self._stored = set(self._tried)  # seqs whose totals go into the ledger
        self._dirty = False
        self._rounds: dict[int, int] = {}  # rounds handed out this run: the backoff exponent
        self.retried = 0  # rounds handed out this run

    @property
    def budget(self) -> int:
        """The most tries of one URL."""
        return 1 + self.crawl.max_retries

    def tried(self, seq: int) -> Tried:
        return self._tried.get(seq, Tried())

    def allowance(self, seq: int) -> int:
        """Requests the next fetch of ``seq`` may send (0: its budget is spent)."""
        return max(0, min(1 + self.quick, self.budget - self.tried(seq).tries))

    def reserve(self, seq: int, n: int) -> bool:
        """Count ``n`` requests about to be sent for ``seq``, when it was tried before;
        True: the caller commits before sending (a retry round is counted first)."""
        t = self._tried.get(seq)
        if t is None:
            return False
        self._store(seq, Tried(t.tries + n, t.requests + n, t.error))
        return True

    def spent(self, seq: int, reserved: int, sent: int, error: str | None) -> Tried:
        """A fetch of ``seq`` sent ``sent`` requests (``reserved`` were counted
        before); returns its totals. Kept in memory until ``later`` stores them."""
        t = self.tried(seq)
        t = Tried(t.tries - reserved + sent, t.requests - reserved + sent, error)
        self._tried[seq] = t
        return t

    def lost_round(self, seq: int, error: str) -> Tried:
        """A round of ``seq`` that sent nothing (its robots.txt was unavailable)."""
        t = self.tried(seq)
        t = self._tried[seq] = Tried(t.tries + 1, t.requests, error)
        return t

    def can_retry(self, seq: int) -> bool:
        return self.tried(seq).tries < self.budget

    def keep(self, seq: int) -> None:
        """Store ``seq``'s totals in the open transaction (it stays queued)."""
        self._store(seq, self.tried(seq))

    def later(self, queued: QueuedUrl, *, hold_host: bool, requested: bool = True,
              at_least: float = 0.0) -> bool:
        """Defer ``queued`` to its next round (its host held back with ``hold_host``);
        False when its budget is spent. The caller commits the stored totals first."""
        seq = queued.seq
        if not self.can_retry(seq):
            return False
        c = self.crawl
        n = self._rounds.get(seq, 0)
        self._rounds[seq] = n + 1
        self.retried += 1
        delay = max(at_least, min(c.retry_delay_max, c.retry_delay * 2 ** n))
        self.frontier.defer(queued, delay, hold_host=hold_host, requested=requested)
        return True

    def forget(self, seq: int) -> None:
        """``seq`` is settled (fetched, or given up) and handed to the group commit.
        A count in the ledger stays there until its mark is committed."""
        self._rounds.pop(seq, None)
        if seq not in self._stored:
            self._tried.pop(seq, None)

    def before_commit(self, seqs: list[int]) -> None:
        """A group commit is about to mark ``seqs``: their counts leave the ledger
        in the same transaction (a kill -9 before it keeps both, so none is
        counted anew), and the counts stored since the last commit go in."""
        for seq in seqs:
            if seq in self._stored:
                self._stored.discard(seq)
                self._tried.pop(seq, None)
                self._dirty = True
        if self._dirty:
            self._dirty = False
            tried = self._tried
            self._state.set_retry_attempts({k: tried[k] for k in self._stored})

    def _store(self, seq: int, t: Tried) -> None:
        self._tried[seq] = t
        self._stored.add(seq)
        self._dirty = True

