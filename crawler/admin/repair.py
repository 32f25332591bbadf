"""``bloomcrawl repair DIR``: the crawler's half of recovering a damaged ledger.

``dedup.admin.repair`` salvages the readable rows into a new ledger. What it cannot
know is the crawl's output, which is the record of the pages done: pages.jsonl.
So the salvage keeps a row only if the output agrees with it: a URL marked
fetched, failed or refused by robots.txt must have its record (else its
fingerprint or its outcome is damaged: the record puts the page back), and a
queued URL's text must give its fingerprint (else one of them is damaged: it
leaves the frontier, reported). Then every complete line of pages.jsonl is taken
as a page done: its URL is admitted if the ledger lost it, marked done if the
ledger still had it queued; a queued URL whose text survived its admission is
admitted again. The output as it now stands is what the ledger counts (the
WARC's offset is dropped: resume cuts a torn record off its end and appends
after it), and the shard files are rebuilt from the new ledger.

When not even the ledger's meta is readable, the crawl's settings come from the
copy the crawl keeps beside it (``crawler.core.state.state.SETTINGS_COPY_FILE``). Queued
URLs whose text was lost are found again where the crawl found them
(``crawler.admin.refind``): the fingerprint index read before the repair says
which, the redirects pages.jsonl records, the pages its WARC holds and, failing
that, the recorded pages fetched again say where; what stays lost is counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from crawler.admin.refind import Refound, records, refind
from crawler.config.scope import Scope
from crawler.config.settings import settings_from_dict
from crawler.core.outputs.output import PAGES_FILE, read_json, repair_tail
from crawler.core.schedule.sitemaps import SITEMAPS_FILE
from crawler.core.state.pagecounts import recount
from crawler.core.state.state import CONFIG_KEY, SCOPE_KEY, read_settings_copy, set_committed_pages
from dedup import (
    Canonicalizer,
    CanonRules,
    PortableRow,
    RepairReport,
    SnapshotError,
    State,
    UrlRejected,
    UrlSeen,
    fingerprint,
    index_keys,
    planned_capacity,
    read_header,
    repair,
    shards_dir,
)

__all__ = ["Repaired", "repair_state_dir"]

DAMAGED = "damaged"  # a queued URL whose text does not give its fingerprint
UNRECORDED = "unrecorded"  # a page marked done that pages.jsonl has no record of


@dataclass
class Repaired:
    """What ``repair_state_dir`` did: the ledger's salvage, the pages put back from
    pages.jsonl, and the search for the lost frontier (None: nothing was lost)."""

    report: RepairReport
    restored: int = 0
    refound: Refound | None = None
    config_lost: bool = False  # no frozen config: the frontier was not searched


def repair_state_dir(state_dir: Path, *, refetch: int | None = None) -> Repaired:
    """Repair ``state_dir``'s ledger, reconcile it with pages.jsonl and find its lost
    frontier again (fetching at most ``refetch`` recorded pages again; None: as many
    as it takes, 0: none)."""
    pages = state_dir / PAGES_FILE
    repair_tail(pages)
    before = index_keys(state_dir)  # the seen-set as the old index holds it
    report = repair(state_dir, fallback_meta=_fallback_meta(state_dir),
                    row_filter=lambda meta: _row_test(meta, pages))
    UrlSeen.rebuild(state_dir).close()  # new seqs: the old snapshots' marks mean nothing
    done = Repaired(report)
    with UrlSeen(state_dir, create=False, autocommit=False) as seen:
        done.restored = _restore_pages(seen, pages)
        for url, depth in report.orphans:  # queued, their admission unreadable
            seen.admit([url], depth=depth)
        if report.damage.journal:
            lost = None
            if len(before):
                unheld = np.ones(len(before), dtype=bool)
                unheld[seen.held_among(before.tobytes())] = False
                lost = before[unheld]
            frozen, scope = seen.meta_get(CONFIG_KEY), seen.meta_get(SCOPE_KEY)
            if frozen is None or scope is None:
                done.config_lost = True
            elif lost is None or len(lost):
                done.refound = refind(seen, settings_from_dict(frozen), Scope.from_dict(scope),
                                      pages, lost, limit=refetch)
                report.recovered = done.refound.found
        # the pages' counts, from the records that now match the ledger's marks
        recount(seen, ((r["url"], _state_of(r), r.get("status"), r.get("error"))
                              for r in records(pages)))
        seen.commit()
        if len(before):
            report.unaccounted = len(before) - len(seen.held_among(before.tobytes()))
        seen.snapshot()
    set_committed_pages(state_dir)
    return done


def _fallback_meta(state_dir: Path) -> dict[str, Any]:
    """Settings for a ledger whose meta is unreadable: the crawl's copy of them, and
    for a crawl that kept none (made before the copy), the filter's geometry and
    crawl id from the first shard file that reads (its planned capacity is the
    largest its shards' size gives). The frozen config and scope are only in the
    copy: without it the seen-set and the pages come back, and resume says the
    configuration is missing."""
    meta = read_settings_copy(state_dir)
    if "geometry" in meta:
        return meta
    for path in sorted(shards_dir(state_dir).glob("shard-*.bloom")):
        try:
            h = read_header(path)
        except (SnapshotError, OSError, ValueError):
            continue
        meta["geometry"] = {"capacity": planned_capacity(h.capacity, h.shard_count),
                            "error_rate": h.error_rate, "shards": h.shard_count,
                            "seed": h.seed, "growth": h.growth}
        meta.setdefault("crawl_id", h.crawl_id)
        break
    return meta


def _has_record(state: State, error: str | None) -> bool:
    """Whether the engine writes a pages.jsonl record for a URL it marks so (a URL over
    its host's cap, or forgotten, is marked skipped without one)."""
    return state in (State.FETCHED, State.FAILED) or (state is State.SKIPPED
                                                       and error == "robots.txt")


def _row_test(meta: dict[str, Any], pages: Path) -> Callable[[PortableRow], str | None]:
    """The test a salvaged row must pass to be carried over (see the module doc)."""
    rules = meta.get("canon_rules")
    canon = Canonicalizer(CanonRules(sort_query=rules["sort_query"],
                                     strip_params=tuple(rules["strip_params"]),
                                     max_length=rules["max_length"]) if rules else CanonRules())
    seed = int(meta["geometry"]["seed"])

    def fp_of(url: str) -> bytes | None:
        try:
            return fingerprint(canon.resolve(url)[1], seed)
        except UrlRejected:
            return None

    recorded = {fp_of(r["url"]) for r in records(pages)}
    # sitemap files are marked done with no record (crawler.core.schedule.sitemaps)
    recorded |= {fp_of(url) for url in _sitemap_files(pages.parent)}

    def test(row: PortableRow) -> str | None:
        if row.state is None:
            return None  # a tombstone
        if row.state is State.QUEUED:
            return None if row.url is None or fp_of(row.url) == row.fp else DAMAGED
        if _has_record(row.state, row.error) and row.fp not in recorded:
            return UNRECORDED
        return None

    return test


def _sitemap_files(state_dir: Path) -> list[str]:
    """The sitemap files ``DIR/sitemaps.json`` names (none if it is unreadable)."""
    try:
        levels = read_json(state_dir / SITEMAPS_FILE, {})
    except (OSError, ValueError):
        return []
    return [u for u in levels if isinstance(u, str)] if isinstance(levels, dict) else []


def _state_of(record: dict[str, Any]) -> State:
    """The outcome a pages.jsonl record stands for (as the engine commits them)."""
    if record.get("status") is None:
        return State.SKIPPED if record.get("error") == "robots.txt" else State.FAILED
    return State.FAILED if record["status"] >= 500 else State.FETCHED


def _restore_pages(seen: UrlSeen, pages: Path) -> int:
    restored = 0
    for record in records(pages):
        url = record["url"]
        try:
            _, row = seen.check(url)
        except UrlRejected:  # pragma: no cover - it was admitted with these rules
            continue
        if row is None:
            admitted = seen.admit([url], depth=int(record.get("depth") or 0))
            seq = admitted[0].seq
        elif row["state"] == "queued":
            seq = row["seq"]
        else:
            continue
        seen.record_outcomes([(seq, _state_of(record), record.get("status"),
                                record.get("error"))])
        restored += 1
    return restored
