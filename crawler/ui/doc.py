"""The one JSON document the dashboard page draws: ``GET /api/stats`` of a running
crawl, or embedded in a report file. Its fields are listed in README.md
("Dashboard"); ``SCHEMA`` changes when one changes meaning.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from crawler.core.schedule.learning import merge_figures
from crawler.ui.stats import SCHEMA, PageTally, confirm_hit_rate

__all__ = ["SERIES_KEYS", "document", "totals_of_workers"]

# the time series, one list per key, all as long as "t" (epoch seconds)
SERIES_KEYS = ("t", "pages_per_s", "bytes_per_s", "queued", "fill", "ledger_bytes",
               "index_bytes")
DEDUP_KEYS = ("links", "new", "repeats", "rejected", "confirm_cache_hits", "ledger_queries",
              "false_positives")


def document(*, mode: str, status: dict[str, Any], tally: PageTally,
             series: dict[str, Sequence[float | None]], storage: dict[str, int],
             top_hosts: list[dict[str, Any]], workers: Sequence[dict[str, Any]] = (),
             status_scope: str = "this run", pages_per_s: float = 0.0,
             bytes_per_s: float = 0.0) -> dict[str, Any]:
    """The document: ``status`` is a crawl's figures (``crawler.core.run.progress.crawl_status``
    or ``bloomcrawl stats``'s), ``tally`` its pages.jsonl records counted."""
    causes = dict(status.get("failed_causes") or {}) or dict(tally.causes)
    return {
        "schema": SCHEMA,
        "mode": mode,
        "generated_at": round(time.time(), 3),
        "state_dir": status.get("state_dir"),
        "outcome": status.get("outcome"),
        "elapsed": round(float(status.get("elapsed") or 0.0), 3),
        "totals": {
            "fetched": int(status.get("fetched") or 0),
            "failed": int(status.get("failed") or 0),
            "given_up": int(status.get("given_up") or 0),
            "skipped": int(status.get("skipped") or 0),
            "queued": int(status.get("queued") or 0),
            "in_flight": int(status.get("in_flight") or 0),
            "hosts": int(status.get("hosts") or 0),
            "hosts_crawled": tally.hosts_crawled,
            "session_pages": int(status.get("session_pages") or 0),
            "bytes": tally.bytes,
            "pages_per_s": round(pages_per_s, 3),
            "bytes_per_s": round(bytes_per_s, 1),
        },
        "series": {k: list(series.get(k, ())) for k in SERIES_KEYS},
        "status_codes": dict(tally.statuses.most_common()),
        "status_codes_scope": status_scope,
        "errors_by_cause": dict(sorted(causes.items(), key=lambda kv: -kv[1])),
        "top_hosts": top_hosts,
        "filter": {
            "fill": status.get("fill"),
            "expected_fpr": status.get("expected_fpr"),
            "estimated_count": status.get("estimated_count"),
            "capacity": status.get("capacity"),
            "layers": status.get("layers"),
            "shards": status.get("shards"),
        },
        "dedup": {**{k: int(status.get(k) or 0) for k in DEDUP_KEYS},
                  "confirm_cache_hit_rate": confirm_hit_rate(status)},
        "storage": storage,
        "recent_errors": list(reversed(tally.recent_errors)),
        "workers": list(workers),
        # what learning did (crawler.core.schedule.learning.learning_figures), or None
        "learning": status.get("learn"),
    }


def totals_of_workers(stats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A fleet's figures from its workers' (each its own filter and ledger): counts
    summed, the filters' fill and expected false-positive rate averaged."""
    out: dict[str, Any] = {}
    for key in ("fetched", "failed", "given_up", "skipped", "queued", "in_flight", "hosts",
                "session_pages", "estimated_count", "capacity", "shards", "rate", *DEDUP_KEYS):
        out[key] = sum(int(s.get(key) or 0) if key != "rate" else float(s.get(key) or 0.0)
                       for s in stats)
    fills = [s["fill"] for s in stats if s.get("fill") is not None]
    fprs = [s["expected_fpr"] for s in stats if s.get("expected_fpr") is not None]
    out["fill"] = sum(fills) / len(fills) if fills else None
    out["expected_fpr"] = sum(fprs) / len(fprs) if fprs else None
    out["layers"] = max((int(s.get("layers") or 0) for s in stats), default=0)
    causes: dict[str, int] = {}
    for s in stats:
        for c, n in (s.get("failed_causes") or {}).items():
            causes[c] = causes.get(c, 0) + int(n)
    out["failed_causes"] = causes
    learns = [s["learn"] for s in stats if s.get("learn")]
    if learns:
        out["learn"] = merge_figures(learns)
    outcomes = sorted({str(s.get("outcome")) for s in stats if s.get("outcome")})
    out["outcome"] = ", ".join(outcomes) or None
    out["elapsed"] = max((float(s.get("elapsed") or 0.0) for s in stats), default=0.0)
    return out
