"""A worker's figures as its hosts move: what ``resize`` and ``merge --state`` do with
the counts a worker keeps in its ledger's metadata.

A split copies an input's metadata to both new workers and a merge keeps its first
input's (``dedup.admin.resizing``): left so, ``stats FLEETDIR`` (the workers' sums)
would count a split worker's figures twice and lose a merged one's. Here each figure
goes where its hosts go, so the fleet's sums are the same before and after:

- per-host figures (the trap budgets' state, learning's savings by host) follow
  their host's new owner;
- the sitemap files' fetched, failed and skipped counts are the sitemap files each
  new ledger holds (``stats`` takes those rows out of its pages);
- the figures of no host (the seen-test's counters, the sitemaps' errors and URLs
  listed, learning's totals beyond its per-host table) stay with the first worker
  of a split, and add up in a merge.

The learned tables themselves (rules, page fingerprints, held URLs) are not carried
(the ledger keeps them by seq, and a resize numbers rows anew): a resized crawl
learns again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawler.core.schedule.learning import MAX_HOSTS, OTHER_HOSTS
from crawler.core.state.crawlstate import CrawlState
from dedup import UrlSeen

__all__ = ["Figures", "merged", "split"]

_DONE = ("fetched", "failed", "skipped")  # a sitemap file's ledger states, as counted


@dataclass
class Figures:
    """The figures a worker keeps in its ledger (``CrawlState``'s values of that name)."""

    totals: dict[str, int] = field(default_factory=dict)
    sitemaps: dict[str, int] = field(default_factory=dict)
    learn_counts: dict[str, Any] = field(default_factory=dict)
    learn_budgets: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, state: CrawlState) -> Figures:
        return cls(state.totals(), state.sitemap_counts(), state.learn_counts(),
                   state.learn_budgets())

    def write(self, state: CrawlState) -> None:
        state.set_totals(self.totals)
        state.set_sitemap_counts(self.sitemaps)
        state.set_learn_counts(self.learn_counts)
        state.set_learn_budgets(self.learn_budgets)


def merged(parts: Iterable[Figures]) -> Figures:
    """The figures of a worker that took over every part's hosts (disjoint hosts)."""
    out = Figures()
    for f in parts:
        _add(out.totals, f.totals)
        _add(out.sitemaps, f.sitemaps)
        out.learn_budgets.update(f.learn_budgets)
        if f.learn_counts:
            _add_learn_counts(out.learn_counts, f.learn_counts)
    return out


def split(f: Figures, to_second: Callable[[str], bool], second_sitemaps: dict[str, int]
          ) -> tuple[Figures, Figures]:
    """``f`` as the two workers of a split: the second owns the hosts ``to_second``
    picks, and holds ``second_sitemaps`` (sitemap files counted by ledger state);
    the first keeps the rest, so the two add up to ``f``."""
    second = Figures()
    if f.sitemaps:
        second.sitemaps = {k: int(second_sitemaps.get(k, 0)) for k in _DONE}
    second.learn_budgets = {k: v for k, v in f.learn_budgets.items()
                            if to_second(k.partition(" ")[0])}
    hosts = {h: list(v) for h, v in (f.learn_counts.get("hosts") or {}).items()
             if h != OTHER_HOSTS and to_second(h)}
    if hosts:
        second.learn_counts = {"suppressed": sum(v[0] for v in hosts.values()),
                               "budget": sum(v[1] for v in hosts.values()), "aliases": 0,
                               "hosts": hosts}
    first = Figures(totals=dict(f.totals), sitemaps=_minus(f.sitemaps, second.sitemaps),
                    learn_budgets={k: v for k, v in f.learn_budgets.items()
                                   if k not in second.learn_budgets})
    if f.learn_counts:
        first.learn_counts = _minus(
            {k: v for k, v in f.learn_counts.items() if k != "hosts"},
            {k: v for k, v in second.learn_counts.items() if k != "hosts"})
        first.learn_counts["hosts"] = {h: list(v) for h, v in
                                       (f.learn_counts.get("hosts") or {}).items()
                                       if h not in hosts}
    return first, second


def sitemap_states(state_dir: Path, urls: Iterable[str]) -> dict[str, int]:
    """How many of the sitemap files ``urls`` the ledger of ``state_dir`` holds as
    fetched, failed and skipped (the others are still queued)."""
    out = dict.fromkeys(_DONE, 0)
    with UrlSeen(state_dir, readonly=True) as seen:
        for url in urls:
            _, row = seen.check(url)
            if row is not None and row["state"] in out:
                out[row["state"]] += 1
    return out


def _add(into: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + int(v)


def _minus(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: int(v) - int(b.get(k, 0)) for k, v in a.items()} if a else {}


def _add_learn_counts(into: dict[str, Any], more: dict[str, Any]) -> None:
    _add(into, {k: v for k, v in more.items() if k != "hosts"})
    hosts = into.setdefault("hosts", {})
    for h, (rules, budgets) in (more.get("hosts") or {}).items():
        if h not in hosts and len(hosts) >= MAX_HOSTS:
            h = OTHER_HOSTS
        row = hosts.setdefault(h, [0, 0])
        row[0] += rules
        row[1] += budgets
