"""Which links of a page become queued URLs: scope (hosts, then the include/
exclude patterns over the canonical URL), the per-host cap, then the URL-seen test;
the group commit hands what it admitted to the frontier (``take_admitted``) once
the group is committed, the one place the frontier is fed.

Why apart from the engine: it is the one step every link goes through, from a
page, a redirect or another fleet worker (``crawler.wire.relay``), and it is
pure bookkeeping over the state dir, with no network.

Why two steps: ``route`` runs in the worker as soon as a page's links are
resolved (a fleet worker must forward other owners' links before the page counts
as done); ``admit_pages`` runs in the group commit for every page of the group
at once, so the seen-test pays its fixed costs (a Bloom probe and an index
lookup for the keys its confirm cache does not hold, a journal row) once per
group instead of once per page,
and a page's new URLs become durable in the same transaction as its record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from crawler.config.scope import Scope
from crawler.core.schedule.learning import Learning
from crawler.core.state.crawlstate import CrawlState
from dedup import NewUrl, SeenPort, State, host_of

if TYPE_CHECKING:  # a single process loads no fleet code (tests/crawler/cli/test_cli.py)
    from crawler.wire.protocol import RemoteLink

__all__ = ["Admission", "Pairs"]

Pairs = list[tuple[str, str]]  # resolved links: (fetch url, dedup key)


class Admission:
    """Admits links into one crawl; ``host_counts`` (URLs admitted per host) is
    kept here and saved by the checkpoint."""

    def __init__(self, seen: SeenPort, state: CrawlState, scope: Scope, cap: int,
                 host_counts: dict[str, int]) -> None:
        self.seen = seen
        self.state = state
        self.scope = scope
        self.cap = cap
        self.host_counts = host_counts
        self.queued = 0  # URLs this process queued
        self._admitted: list[NewUrl] = []  # queued, not yet taken for the frontier
        # learned rules rewrite links before the seen-test (None: --no-learn)
        self.learning: Learning | None = None

    def learn_with(self, learning: Learning | None) -> None:
        """Links go through ``learning``'s rules before the seen-test, and the URLs it
        admits again (a revoked rule's, a reopened budget's) come back through here."""
        self.learning = learning
        if learning is not None:
            learning.admit = self.admit_pages

    def route(self, pairs: Sequence[tuple[str, str] | None], depth: int,
              local: Callable[[str], bool] | None = None, *, patterns: bool = True
              ) -> tuple[tuple[Pairs, int] | None, list[RemoteLink]]:
        """``((links to admit here, depth) or None, in-scope links of hosts another
        worker owns as (url, key, host, depth))``: scope, ownership and the per-host
        cap as it stands. ``local(host)`` says which hosts this worker owns (None:
        all). ``patterns=False`` skips include/exclude (for sitemap files: the
        URLs they list are checked against them). The links are admitted by
        ``admit_pages`` at the page's group commit; until it returns the page is
        under way (``crawler.core.run.underway``), so the crawl cannot end before."""
        keep, remote = self._split(pairs, depth, local, patterns)
        if not keep:
            return None, remote
        return (keep, depth), remote

    def _split(self, pairs: Sequence[tuple[str, str] | None], depth: int,
               local: Callable[[str], bool] | None, patterns: bool = True
               ) -> tuple[Pairs, list[RemoteLink]]:
        allows = self.scope.allows_host
        url_ok = self.scope.url_filter() if patterns else None
        cap = self.cap
        if url_ok is None and local is None:  # a page's links, most crawls
            return self.scope.keep_hosts(pairs, self.host_counts if cap else None, cap), []
        counts = self.host_counts
        keep: Pairs = []
        remote: list[RemoteLink] = []
        for pair in pairs:
            if pair is None:
                continue
            host = host_of(pair[0])
            if not allows(host):
                continue
            if url_ok is not None and not url_ok(pair[1]):
                continue
            if local is not None and not local(host):
                remote.append((pair[0], pair[1], host, depth))
                continue
            if cap and counts.get(host, 0) >= cap:
                continue
            keep.append(pair)
        return keep, remote

    def admit_pages(self, pages: Sequence[tuple[Pairs, int]],
                    sources: Sequence[str | None] | None = None) -> list[int]:
        """The seen-test of routed ``(pairs, depth)`` pages in one batch, then the
        cap in page order: the number of URLs each page queued (recorded QUEUED in
        the open transaction; ``take_admitted`` hands them to the frontier).
        ``sources``: the URL each page's links were found on (None: not known, as
        for a fleet delivery), noted in the ledger per run of new seqs so that a
        page's record can name its referrer whenever it is fetched.

        The same URLs are queued as page by page in order, except that a host's
        links past its cap on two pages of one group are both recorded (skipped)
        where page by page the second would not be asked about: neither is fetched.
        With ``learning``, a link its host's learned rules rewrite is tested under its
        rule key (``crawler.core.schedule.learning``).
        """
        learning = self.learning
        rewrites = None
        if learning is not None:  # rule keys for the links the hosts' rules rewrite
            pages, rewrites = learning.rewrite(pages)
        per_page = self.seen.admit_pages(pages)
        if sources is not None:
            # a page's new seqs are one run: seqs ascend by depth, then page order
            self.state.note_referrers(
                (page[0].seq, page[-1].seq, source)
                for page, source in zip(per_page, sources, strict=True) if page)
        if rewrites is not None:  # duplicates under the rules: recorded, or checks queued
            assert learning is not None
            learning.settle(pages, per_page, rewrites, sources)
        cap = self.cap
        counts = self.host_counts
        queued = []
        new = []
        over = []
        for page in per_page:
            if cap:
                ok = 0
                for n in page:
                    c = counts.get(n.host, 0)
                    if c >= cap:
                        over.append((n.seq, State.SKIPPED, None, "host page cap"))
                    else:
                        counts[n.host] = c + 1
                        new.append(n)
                        ok += 1
                queued.append(ok)
            else:
                new.extend(page)
                queued.append(len(page))
        if over:  # several links of a group went past the cap together
            self.state.record_outcomes(over)
        if new:
            self._admitted += new
            self.queued += len(new)
        return queued

    def take_admitted(self) -> list[NewUrl]:
        """The URLs queued since the last call, in ascending seq (what ``Frontier.add``
        takes): the group commit feeds them to the frontier once they are committed."""
        out, self._admitted = self._admitted, []
        out.sort(key=lambda n: n.seq)  # several calls (a group's, learning's) interleave
        return out
