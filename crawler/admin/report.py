"""The figures of a stopped (or running) crawl's state dir, or of a directory of shard
files alone, for ``bloomcrawl stats``: read-only, so safe next to a running crawl."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crawler.admin.learned import learning_summary
from crawler.core.schedule.sitemaps import SitemapCounts, without_sitemaps
from crawler.core.state.crawlstate import CrawlState
from crawler.core.state.pagecounts import (
    MAX_HOSTS,
    OTHER_HOSTS,
    PageCounts,
    refused,
    reopened,
)
from crawler.core.state.state import require_state_dir
from crawler.ui.doc import totals_of_workers
from dedup import ShardedBloom, UrlSeen, is_state_dir
from dedup.admin import index_damage, read_header

__all__ = ["fleet_stats", "is_shard_dir", "shard_dir_stats", "state_stats"]


def state_stats(state_dir: str | Path) -> dict[str, Any]:
    """Figures of a state directory, read-only (safe next to a running crawl)."""
    d = require_state_dir(state_dir)
    with UrlSeen(d, readonly=True) as seen:
        st = seen.stats()
        state = CrawlState(seen.records)
        totals = state.totals()
        # hosts with frontier text kept (an upper bound: done rows are compacted
        # lazily); none when nothing is queued
        hosts = len(state.queued_hosts()) if st.get("queued") else 0
        config = state.settings()
        pages = PageCounts(state).counts  # O(1): kept in the ledger
        learn = learning_summary(state)  # O(rules): kept in the ledger
        sitemaps = SitemapCounts(state).counts
    out: dict[str, Any] = {"state_dir": str(d), "hosts": hosts}
    # the ledger's done rows without the sitemap files among them (no pages)
    out.update(without_sitemaps(st, sitemaps))
    out.update({k: v for k, v in totals.items() if isinstance(v, int)})
    # pages: fetched = responses received (any status), failed = none (by cause and
    # host); given_up = the ledger's failed state (no usable answer after every retry)
    # (refused private addresses are failed, not given up: --allow-private fetches them);
    # skipped: without the first takings of URLs put back by a resume (pagecounts.REOPENED)
    out["given_up"] = max(0, int(out.get("failed", 0)) - refused(pages))
    out["refused"] = refused(pages)
    out["skipped"] = max(0, int(out.get("skipped", 0)) - reopened(pages))
    out["fetched"] = int(pages.get("fetched", 0))
    out["fetched_with_errors"] = int(pages.get("fetched_with_errors", 0))
    out["failed"] = int(pages.get("failed", 0))
    out["failed_causes"] = dict(pages.get("causes", {}))
    out["failed_hosts"] = dict(pages.get("hosts", {}))
    if any(sitemaps.values()):
        out["sitemaps"] = sitemaps
    # the figures come from the journal, but a crawl could not resume on a damaged
    # index: the manifest and each run's header and size (O(runs)); a run's records
    # are checked by the writer's open, `rebuild` and `repair`
    out["index_damage"] = index_damage(d, records=False)
    if config is not None:
        out["config"] = config
    if learn is not None:
        out["learn"] = learn
    return out


def is_shard_dir(path: str | Path) -> bool:
    """A directory of shard files with no ledger (what ``merge -o OUT`` writes)."""
    d = Path(path)
    return (d.is_dir() and not is_state_dir(d)
            and ShardedBloom.shard_path(d, 0).exists())


def shard_dir_stats(directory: str | Path) -> dict[str, Any]:
    """Figures of a directory of shard files alone (what ``merge -o OUT`` writes from
    several workers: the fleet's seen-set), so that it can be inspected too."""
    d = Path(directory)
    bloom = ShardedBloom.load(d)
    head = read_header(ShardedBloom.shard_path(d, 0))
    return {"shard_dir": str(d), "crawl_id": head.crawl_id, "hwm": head.hwm, **bloom.info()}


def fleet_stats(root: str | Path, crawl_id: str, worker_dirs: Sequence[Path]
                ) -> dict[str, Any]:
    """Figures of a fleet directory: each worker's (``state_stats``, read-only) and the
    fleet's totals. Each worker owns its hosts, so counts add up exactly; the
    filters' fill and expected false-positive rate are the workers' mean (a URL is
    tested against its owner's filter alone)."""
    workers = [state_stats(d) for d in worker_dirs]
    totals = totals_of_workers(workers)
    totals["fetched_with_errors"] = sum(int(w.get("fetched_with_errors") or 0)
                                        for w in workers)
    hosts: dict[str, dict[str, int]] = {}
    for w in workers:
        for host, by in (w.get("failed_hosts") or {}).items():
            if host not in hosts and len(hosts) >= MAX_HOSTS:
                host = OTHER_HOSTS
            into = hosts.setdefault(host, {})
            for cause, n in by.items():
                into[cause] = into.get(cause, 0) + int(n)
    totals["failed_hosts"] = hosts
    sitemaps: dict[str, int] = {}
    for w in workers:
        for k, n in (w.get("sitemaps") or {}).items():
            sitemaps[k] = sitemaps.get(k, 0) + int(n)
    if sitemaps:
        totals["sitemaps"] = sitemaps
    totals["shards"] = workers[0].get("shards") if workers else 0  # each worker's
    totals["error_rate"] = workers[0].get("error_rate") if workers else None
    damage = [f"worker {i}: {w['index_damage']}" for i, w in enumerate(workers)
              if w.get("index_damage")]
    for key in ("outcome", "elapsed", "session_pages", "rate", "in_flight"):
        totals.pop(key, None)  # a running crawl's figures: stats reads the state
    return {"fleet_dir": str(root), "crawl_id": crawl_id, "workers": len(workers),
            "totals": totals, "per_worker": workers,
            "index_damage": "; ".join(damage) or None}
