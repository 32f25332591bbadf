"""A crawl's state directory: create one from a seed list, or reopen one to resume.

A crawl dir is a ``UrlSeen`` state dir (ledger, shard snapshots) plus what the
crawl froze into the ledger at creation: its settings (``CONFIG_KEY``), its
scope (``SCOPE_KEY``), the dedup counters of earlier runs (``TOTALS_KEY``) and,
for a fleet worker, its identity (``FLEET_KEY``). Everything here is checked
before anything is created, so a refused start leaves the directory as it was.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawler.output import write_json_atomic
from crawler.scope import Scope, read_seeds
from crawler.settings import Settings, settings_from_dict
from dedup import Canonicalizer, UrlSeen
from dedup.seen import host_of
from dedup.statedir import LEDGER_FILE, is_state_dir

__all__ = ["CONFIG_KEY", "COUNTER_KEYS", "FLEET_KEY", "HOST_COUNTS_FILE", "SCOPE_KEY",
           "TOTALS_KEY", "CrawlError", "check_new_state_dir", "create_crawl", "open_crawl",
           "require_state_dir"]

CONFIG_KEY = "config"
SCOPE_KEY = "scope"
TOTALS_KEY = "dedup_totals"
FLEET_KEY = "fleet"  # a fleet worker's identity: crawl_id, workers, worker_id, redis
HOST_COUNTS_FILE = "host_counts.json"
COUNTER_KEYS = ("links", "new", "repeats", "rejected", "bloom_definitely_new", "bloom_maybe",
                "confirm_cache_hits", "ledger_queries", "false_positives")


class CrawlError(Exception):
    """A crawl cannot start or continue; the message is one line for the user."""


def _open_seen(state_dir: Path, settings: Settings, *, create: bool,
               crawl_id: str | None = None) -> UrlSeen:
    d = settings.dedup
    if create:
        return UrlSeen(state_dir, capacity=d.capacity, error_rate=d.error_rate, shards=d.shards,
                       seed=d.seed, growth=d.growth, rules=settings.canonical.rules(),
                       confirm_cache_size=d.confirm_cache_size,
                       canon_cache_size=d.canon_cache_size, crawl_id=crawl_id, create=True,
                       autocommit=False)
    return UrlSeen(state_dir, confirm_cache_size=d.confirm_cache_size,
                   canon_cache_size=d.canon_cache_size, create=False, autocommit=False)


def check_new_state_dir(state_dir: str | Path) -> None:
    """Refuse a directory that holds a crawl or anything else (before touching Redis)."""
    state_dir = Path(state_dir)
    if is_state_dir(state_dir):
        raise CrawlError(f"{state_dir} already holds a crawl; continue it with "
                         f"'bloomcrawl resume {state_dir}' or choose another --state directory")
    if state_dir.exists():
        if not state_dir.is_dir():
            raise CrawlError(f"state directory {state_dir}: exists and is not a directory")
        if any(state_dir.iterdir()):
            raise CrawlError(f"state directory {state_dir}: not empty and not a bloomcrawl "
                             "state directory; choose a new or empty directory")


def create_crawl(state_dir: str | Path, settings: Settings, seeds_file: str | Path, *,
                 crawl_id: str | None = None, owns: Callable[[str], bool] | None = None,
                 meta: dict[str, Any] | None = None) -> tuple[UrlSeen, Scope, list[str]]:
    """Start a new crawl in an empty (or new) ``state_dir`` from a seeds file.

    Freezes ``settings`` and the scope into the ledger and admits the seeds at
    depth 0 in one batch. A fleet worker passes the fleet's ``crawl_id`` (its
    filter must carry it to be merged with the others'), ``owns(host)`` (it
    admits only its own seeds; the scope is still every seed's host) and its
    identity as ``meta`` (stored under ``FLEET_KEY``).
    Returns (seen, scope, problems with seed lines).
    Raises CrawlError (directory in use or not empty) or SeedError.
    """
    state_dir = Path(state_dir)
    check_new_state_dir(state_dir)
    seeds, problems = read_seeds(seeds_file, Canonicalizer(settings.canonical.rules()))
    scope = Scope.for_seeds([url for url, _ in seeds], settings.crawl.allow_domains)
    if owns is not None:
        seeds = [(url, key) for url, key in seeds if owns(host_of(url))]
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        probe = state_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise CrawlError(f"cannot write state directory {state_dir}: "
                         f"{exc.strerror or exc}") from None
    seen = _open_seen(state_dir, settings, create=True, crawl_id=crawl_id)
    try:
        seen.ledger.meta_set(CONFIG_KEY, settings.to_dict())
        seen.ledger.meta_set(SCOPE_KEY, scope.to_dict())
        if meta is not None:
            seen.ledger.meta_set(FLEET_KEY, meta)
        admitted = seen.admit_resolved(seeds, depth=0)
        if settings.crawl.max_pages_per_host:
            write_json_atomic(state_dir / HOST_COUNTS_FILE,
                              dict(Counter(n.host for n in admitted)))
        seen.ledger.meta_set(TOTALS_KEY, {k: seen.counters.get(k, 0) for k in COUNTER_KEYS})
        seen.commit()
    except BaseException:
        seen.close()
        raise
    return seen, scope, problems


def open_crawl(state_dir: str | Path) -> tuple[UrlSeen, Settings, Scope]:
    """Reopen a crawl's state directory with its frozen settings (for resume)."""
    state_dir = require_state_dir(state_dir)
    seen = UrlSeen(state_dir, create=False, autocommit=False)
    try:
        frozen = seen.ledger.meta_get(CONFIG_KEY)
        scope = seen.ledger.meta_get(SCOPE_KEY)
        if frozen is None or scope is None:
            raise CrawlError(f"{state_dir} holds a URL-seen ledger but no crawl configuration "
                             "(it was not created by 'bloomcrawl crawl')")
        settings = settings_from_dict(frozen, source=f"{state_dir} frozen config")
    except BaseException:
        seen.close()
        raise
    return seen, settings, Scope.from_dict(scope)


def require_state_dir(path: str | Path) -> Path:
    """``path`` if it is a crawl's (or any ``UrlSeen``) state directory, else CrawlError."""
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise CrawlError(f"{d} is a file, not a bloomcrawl state directory")
    if not d.is_dir():
        raise CrawlError(f"state directory {d}: not found")
    if not is_state_dir(d):
        raise CrawlError(f"{d} is not a bloomcrawl state directory (no {LEDGER_FILE})")
    return d
