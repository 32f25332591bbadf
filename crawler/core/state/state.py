"""A crawl's state directory: create one from a seed list, or reopen one to resume.

A crawl dir is a ``UrlSeen`` state dir (ledger, shard snapshots) plus what the
crawl froze into the ledger at creation: its settings (``CONFIG_KEY``), its
scope (``SCOPE_KEY``), the dedup counters of earlier runs (``TOTALS_KEY``) and,
for a fleet worker, its identity (``FLEET_KEY``). Everything here is checked
before anything is created, so a refused start leaves the directory as it was.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from crawler.config.scope import Scope, UrlPatterns, read_seeds, seed_lines
from crawler.config.settings import Settings, settings_from_dict
from crawler.core.outputs.output import ITEMS_FILE, PAGES_FILE, read_json, write_json_atomic
from crawler.core.outputs.warc import warc_start
from crawler.core.state.statecreate import building, check_resources
from dedup import LEDGER_FILE, Canonicalizer, Ledger, UrlSeen, host_of, is_state_dir

__all__ = ["CONFIG_KEY", "COUNTER_KEYS", "FLEET_KEY", "HOOKS_KEY", "HOST_COUNTS_FILE",
           "OUTPUTS_KEY", "REWRITE_FILE", "REWRITE_KEY",
           "SCOPE_KEY", "SETTINGS_COPY_FILE", "TOTALS_KEY", "CrawlError", "check_new_state_dir",
           "committed_pages", "create_crawl", "fleet_identity", "open_crawl", "read_settings_copy",
           "readmit_seeds",
           "require_state_dir", "save_settings_copy", "seeds_and_scope", "set_committed_pages",
           "store_changes"]

CONFIG_KEY = "config"
SCOPE_KEY = "scope"
TOTALS_KEY = "dedup_totals"
# committed sizes of pages.jsonl ("pages"), items.jsonl ("items") and the WARC ("warc")
OUTPUTS_KEY = "outputs"
HOOKS_KEY = "hooks"  # a crawl's --handler/--follow/--on-error, as given to 'crawl'
# pages.jsonl rewritten without the lines of URLs put back in the frontier
# (``crawler.core.state.reopen``): the copy, and the ledger's word that it is committed
REWRITE_FILE = ".pages.jsonl.rewrite"
REWRITE_KEY = "pages_rewrite"

FLEET_KEY = "fleet"  # a fleet worker's identity: crawl_id, workers, worker_id, redis
HOST_COUNTS_FILE = "host_counts.json"
# A copy of what the ledger's meta holds that nothing else in the directory does (the
# frozen settings, the scope, the filter's geometry and rules, the crawl and fleet
# identity): ``bloomcrawl repair`` rebuilds a ledger whose meta is unreadable from it.
SETTINGS_COPY_FILE = "crawl-settings.json"
_COPIED_KEYS = (CONFIG_KEY, SCOPE_KEY, FLEET_KEY, "geometry", "canon_rules", "crawl_id")
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


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except FileNotFoundError:
        return 0


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


Seeds = str | Path | Sequence[str]  # a seeds file, or the URLs themselves (a list)


def seeds_and_scope(seeds_file: Seeds, settings: Settings
                    ) -> tuple[list[tuple[str, str]], list[str], Scope]:
    """A seeds file's (or a list's) usable seeds, its problems (bad lines, seeds out of
    scope by the include/exclude patterns) and the crawl's scope; SeedError if no seed
    is usable."""
    c = settings.crawl
    canon = Canonicalizer(settings.canonical.rules())
    patterns = UrlPatterns(c.include, c.exclude)
    if isinstance(seeds_file, str | Path):
        seeds, problems = read_seeds(seeds_file, canon, patterns)
    else:
        seeds, problems = seed_lines(seeds_file, "seeds", "seed", canon, patterns)
    scope = Scope.for_seeds([url for url, _ in seeds], c.allow_domains, c.include, c.exclude)
    return seeds, problems, scope


def create_crawl(state_dir: str | Path, settings: Settings, seeds_file: Seeds, *,
                 crawl_id: str | None = None, owns: Callable[[str], bool] | None = None,
                 meta: dict[str, Any] | None = None, hooks: dict[str, str] | None = None
                 ) -> tuple[UrlSeen, Scope, list[str]]:
    """Start a new crawl in an empty (or new) ``state_dir`` from a seeds file.

    Freezes ``settings`` and the scope into the ledger and admits the seeds at
    depth 0 in one batch. A fleet worker passes the fleet's ``crawl_id`` (its
    filter must carry it to be merged with the others'), ``owns(host)`` (it
    admits only its own seeds; the scope is still every seed's host) and its
    identity as ``meta`` (stored under ``FLEET_KEY``); ``hooks`` are the handler and
    follow named as ``module:function`` (stored under ``HOOKS_KEY`` for resume).
    Returns (seen, scope, problems with seed lines).
    The directory is built beside ``state_dir`` and renamed into place complete
    (``crawler.core.state.statecreate``): a failed or killed start leaves no half-made crawl.
    Raises CrawlError (directory in use or not empty), ConfigError (the machine
    cannot hold or write it) or SeedError — all before anything is created.
    """
    state_dir = Path(state_dir)
    check_new_state_dir(state_dir)
    check_resources(settings, state_dir, CrawlError)
    seeds, problems, scope = seeds_and_scope(seeds_file, settings)
    if owns is not None:
        seeds = [(url, key) for url, key in seeds if owns(host_of(url))]
    with building(state_dir, CrawlError) as tmp:
        seen = _open_seen(tmp, settings, create=True, crawl_id=crawl_id)
        try:
            seen.meta_set(CONFIG_KEY, settings.to_dict())
            seen.meta_set(SCOPE_KEY, scope.to_dict())
            outputs: dict[str, Any] = {"pages": 0, "items": 0}
            if settings.output.warc:
                outputs["warc"] = warc_start(settings.output.warc)
            seen.meta_set(OUTPUTS_KEY, outputs)
            if meta is not None:
                seen.meta_set(FLEET_KEY, meta)
            if hooks:
                seen.meta_set(HOOKS_KEY, hooks)
            admitted = seen.admit_pages([(seeds, 0)])[0]
            if settings.crawl.max_pages_per_host:
                write_json_atomic(tmp / HOST_COUNTS_FILE,
                                  dict(Counter(n.host for n in admitted)))
            seen.meta_set(TOTALS_KEY, {k: seen.counters.get(k, 0) for k in COUNTER_KEYS})
            seen.commit()
            save_settings_copy(tmp, seen)
            counters = dict(seen.counters)
        finally:
            seen.close()
    seen = _open_seen(state_dir, settings, create=False)
    seen.carry_counts(counters)  # one session: the seeds count in this run's figures
    return seen, scope, problems


def readmit_seeds(seen: UrlSeen, settings: Settings, scope: Scope, seeds_file: Seeds
                  ) -> list[str]:
    """The seeds of a crawl given again (``crawler.Crawler`` run again on its state
    dir): the seen-test admits the ones it has not seen at depth 0, committed (with
    the dedup totals) before the crawl goes on; a seed the crawl's frozen scope does
    not hold is skipped. Returns the problems with seed lines."""
    seeds, problems, _ = seeds_and_scope(seeds_file, settings)
    keep = []
    for url, key in seeds:
        if scope.allows_host(host_of(url)):
            keep.append((url, key))
        else:
            problems.append(f"seed {url!r}: out of the crawl's scope (its hosts were frozen "
                            "when it started)")
    before = {k: seen.counters.get(k, 0) for k in COUNTER_KEYS}
    admitted = seen.admit_pages([(keep, 0)])[0]
    totals = seen.meta_get(TOTALS_KEY) or {}
    seen.meta_set(TOTALS_KEY, {k: int(totals.get(k, 0)) + seen.counters.get(k, 0) - before[k]
                               for k in COUNTER_KEYS})
    seen.commit()
    if admitted and settings.crawl.max_pages_per_host:  # approximate, as the engine's
        path = Path(seen.state_dir) / HOST_COUNTS_FILE
        counts = Counter(read_json(path, {}))
        counts.update(n.host for n in admitted)
        write_json_atomic(path, dict(counts))
    return problems


def open_crawl(state_dir: str | Path) -> tuple[UrlSeen, Settings, Scope]:
    """Reopen a crawl's state directory with its frozen settings (for resume)."""
    state_dir = require_state_dir(state_dir)
    seen = UrlSeen(state_dir, create=False, autocommit=False)
    try:
        # every row and its checksum, before the first fetch: O(ledger), measured in
        # bench/README.md ("Damaged ledger"); the error names `bloomcrawl repair DIR`
        seen.verify()
        frozen = seen.meta_get(CONFIG_KEY)
        scope = seen.meta_get(SCOPE_KEY)
        if frozen is None or scope is None:
            raise CrawlError(f"{state_dir} holds a URL-seen ledger but no crawl configuration "
                             "(it was not created by 'bloomcrawl crawl')")
        settings = settings_from_dict(frozen, source=f"{state_dir} frozen config")
    except BaseException:
        seen.close()
        raise
    return seen, settings, Scope.from_dict(scope)


def store_changes(seen: UrlSeen, settings: Settings,
                  changes: dict[str, dict[str, Any]]) -> Settings:
    """``settings`` with ``changes`` (limits, politeness) frozen into the ledger as the new
    values, committed before the crawl continues so every later resume keeps them."""
    changed = settings.with_values(**changes)
    seen.meta_set(CONFIG_KEY, changed.to_dict())
    seen.commit()
    save_settings_copy(seen.state_dir, seen)
    return changed


def save_settings_copy(state_dir: Path, ledger: Ledger | UrlSeen) -> None:
    """Write ``SETTINGS_COPY_FILE`` from the ledger's meta (atomically), after the
    ledger committed them: the copy never holds settings the ledger does not."""
    write_json_atomic(Path(state_dir) / SETTINGS_COPY_FILE,
                      {k: ledger.meta_get(k) for k in _COPIED_KEYS})


def read_settings_copy(state_dir: Path) -> dict[str, Any]:
    """The settings ``save_settings_copy`` kept ({} if none, or unreadable)."""
    try:
        copy = read_json(Path(state_dir) / SETTINGS_COPY_FILE, {})
    except ValueError:
        return {}
    return copy if isinstance(copy, dict) else {}


def fleet_identity(state_dir: str | Path) -> dict[str, Any] | None:
    """A fleet worker's identity (``FLEET_KEY``) read without opening the crawl, or None
    for a single-process crawl; CrawlError if ``state_dir`` holds no crawl."""
    d = require_state_dir(state_dir)
    with Ledger.in_dir(d, readonly=True) as ledger:
        meta = ledger.meta_get(FLEET_KEY)
    return meta if isinstance(meta, dict) else None


def committed_pages(state_dir: Path) -> list[bytes]:
    """The pages.jsonl lines of ``state_dir`` its ledger counts as committed (each with
    its newline): what a merge or resize carries over, never a line of a page that a
    crash left unmarked (it is fetched again)."""
    return _committed_lines(state_dir, PAGES_FILE, "pages", None)


def committed_items(state_dir: Path) -> list[bytes]:
    """The items.jsonl lines of ``state_dir`` its ledger counts as committed, as
    ``committed_pages``: never an item of a page a crash left unmarked (its handler
    runs again). In the order of the pages.jsonl records whose ``items`` count them."""
    return _committed_lines(state_dir, ITEMS_FILE, "items", 0)


def _committed_lines(state_dir: Path, name: str, key: str, unrecorded: int | None
                     ) -> list[bytes]:
    """``name``'s lines up to the size committed under ``key`` (``unrecorded``: the
    size when none is, None for the whole file)."""
    with Ledger.in_dir(state_dir, readonly=True) as ledger:
        size = (ledger.meta_get(OUTPUTS_KEY) or {}).get(key, unrecorded)
        rewritten = name == PAGES_FILE and ledger.meta_get(REWRITE_KEY)
    path = state_dir / name
    if rewritten and (state_dir / REWRITE_FILE).exists():  # committed, not yet renamed
        path = state_dir / REWRITE_FILE
    try:
        with open(path, "rb") as fh:
            data = fh.read() if size is None else fh.read(size)
    except FileNotFoundError:
        return []
    return [ln + b"\n" for ln in data.split(b"\n")[:-1]]


def set_committed_pages(state_dir: Path, *, new_warc: bool = False) -> None:
    """Record ``state_dir``'s pages.jsonl, as it now is, as committed (after a merge,
    resize or repair wrote it whole); its WARC offset is dropped (resume cuts a torn
    record off the WARC's end and appends after it).

    ``new_warc`` (a merge's or resize's new state dir): a WARC file belongs to the
    crawl that writes it, and the settings copied from a source still name the
    source's file; the new crawl gets its own file of that name in ``state_dir``."""
    size = _size(state_dir / PAGES_FILE)
    items = _size(state_dir / ITEMS_FILE)
    with Ledger.in_dir(state_dir) as ledger:
        ledger.meta_set(OUTPUTS_KEY, {"pages": size, "items": items})
        config = ledger.meta_get(CONFIG_KEY)
        if new_warc and config and config.get("output", {}).get("warc"):
            warc = (state_dir / Path(config["output"]["warc"]).name).resolve()
            config["output"]["warc"] = str(warc)
            ledger.meta_set(CONFIG_KEY, config)
            ledger.meta_set(OUTPUTS_KEY, {"pages": size, "items": items,
                                          "warc": warc_start(warc)})
        save_settings_copy(state_dir, ledger)


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
