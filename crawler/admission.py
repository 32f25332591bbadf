"""Which links of a page become queued URLs: scope, the per-host cap, the
URL-seen test (one batch per page), then the frontier.

Why apart from the engine: it is the one step every link goes through, from a
page, a redirect or another fleet worker (``crawler.fleet.relay``), and it is
pure bookkeeping over the state dir, with no network.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from crawler.frontier import Frontier
from crawler.scope import Scope
from dedup import State, UrlSeen
from dedup.seen import host_of

__all__ = ["Admission", "Remote"]

Remote = tuple[str, str, str, int]  # a link for another worker: (url, key, host, depth)


class Admission:
    """Admits links into one crawl; ``host_counts`` (URLs admitted per host) is
    kept here and saved by the checkpoint."""

    def __init__(self, seen: UrlSeen, scope: Scope, frontier: Frontier, cap: int,
                 host_counts: dict[str, int]) -> None:
        self.seen = seen
        self.scope = scope
        self.frontier = frontier
        self.cap = cap
        self.host_counts = host_counts

    def admit(self, pairs: Sequence[tuple[str, str] | None], depth: int,
              local: Callable[[str], bool] | None = None) -> tuple[int, list[Remote]]:
        """Scope, per-host cap, URL-seen test (one batch), frontier.

        Returns (URLs queued, in-scope links of hosts another worker owns as
        ``(url, key, host, depth)`` — always empty for a single process). The
        owner alone applies the cap and the seen-test to its hosts' links;
        ``local(host)`` says which hosts this worker owns (None: all of them).
        """
        allows = self.scope.allows_host
        cap = self.cap
        counts = self.host_counts
        keep = []
        remote: list[Remote] = []
        for pair in pairs:
            if pair is None:
                continue
            host = host_of(pair[0])
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
        return len(new), remote
