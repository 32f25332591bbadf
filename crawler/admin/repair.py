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
URLs whose text was lost are found again where the crawl found them: the links
of the pages its WARC holds and the redirects pages.jsonl records, admitted
with the crawl's scope and depth limit (a link already seen stays seen). Without
a WARC they are lost, and counted: the old fingerprint index says how many
admitted URLs the new ledger does not hold.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from crawler.config.scope import Scope
from crawler.config.settings import settings_from_dict
from crawler.core.outputs.output import PAGES_FILE, complete_lines, read_json, repair_tail
from crawler.core.outputs.warc import serials, warc_path, warc_prefix
from crawler.core.schedule.sitemaps import SITEMAPS_FILE
from crawler.core.state.pagecounts import recount
from crawler.core.state.state import CONFIG_KEY, SCOPE_KEY, read_settings_copy, set_committed_pages
from crawler.net.headers import parse_content_type
from crawler.net.links import extract_links
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
    host_of,
    index_keys,
    planned_capacity,
    read_header,
    repair,
    shards_dir,
)

__all__ = ["repair_state_dir"]

DAMAGED = "damaged"  # a queued URL whose text does not give its fingerprint
UNRECORDED = "unrecorded"  # a page marked done that pages.jsonl has no record of


def repair_state_dir(state_dir: Path) -> tuple[RepairReport, int]:
    """Repair ``state_dir``'s ledger and reconcile it with pages.jsonl; returns the
    ledger report and how many pages.jsonl records had to be put back."""
    pages = state_dir / PAGES_FILE
    repair_tail(pages)
    before = index_keys(state_dir)  # the seen-set as the old index holds it
    report = repair(state_dir, fallback_meta=_fallback_meta(state_dir),
                    row_filter=lambda meta: _row_test(meta, pages))
    UrlSeen.rebuild(state_dir).close()  # new seqs: the old snapshots' marks mean nothing
    with UrlSeen(state_dir, create=False, autocommit=False) as seen:
        restored = _restore_pages(seen, pages)
        for url, depth in report.orphans:  # queued, their admission unreadable
            seen.admit([url], depth=depth)
        if report.damage.journal:
            report.recovered = _recover_frontier(seen, pages)
        # the pages' counts, from the records that now match the ledger's marks
        recount(seen, ((r["url"], _state_of(r), r.get("status"), r.get("error"))
                              for r in _records(pages)))
        seen.commit()
        if len(before):
            report.unaccounted = len(before) - len(seen.held_among(before.tobytes()))
        seen.snapshot()
    set_committed_pages(state_dir)
    return report, restored


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


def _recover_frontier(seen: UrlSeen, pages: Path) -> int:
    """Admit again the links of the recorded pages, as the crawl admitted them (scope,
    depth limit): the ones the ledger still knows are seen, the others are the
    queued URLs whose text was lost. Links are read from the WARC's pages (2xx HTML
    pages) and the redirects pages.jsonl records; returns how many were admitted."""
    frozen, scope = seen.meta_get(CONFIG_KEY), seen.meta_get(SCOPE_KEY)
    if frozen is None or scope is None:
        return 0
    settings = settings_from_dict(frozen)
    allows = Scope.from_dict(scope).allows_host
    canon = seen.canonicalizer
    max_depth = settings.crawl.max_depth
    depth_of: dict[str, int] = {}
    redirects: list[tuple[str, str, int]] = []
    for r in _records(pages):
        depth_of[r["url"]] = int(r.get("depth") or 0)
        status, target = r.get("status"), r.get("final_url")
        if status is not None and 300 <= status < 400 and target and target != r["url"]:
            redirects.append((r["url"], target, depth_of[r["url"]]))
    admitted = 0

    def admit(hrefs: list[str], base: str, depth: int) -> None:
        nonlocal admitted
        if depth >= max_depth:
            return
        pairs = [p for p in canon.resolve_many(hrefs, base)
                 if p is not None and allows(host_of(p[0]))]
        admitted += len(seen.admit_pages([(pairs, depth + 1)])[0])

    for url, target, depth in redirects:
        admit([target], url, depth)
    if settings.output.warc:
        html = set(settings.fetch.html_types)
        for uri, ctype, body in read_warc(settings.output.warc, set(depth_of)):
            media, charset = parse_content_type(ctype)
            if media in html:
                base, hrefs = extract_links(body, uri, charset=charset,
                                            nofollow=settings.crawl.honor_nofollow)
                admit(hrefs, base, depth_of[uri])
    return admitted


def read_warc(path: str | Path, uris: set[str]) -> Iterator[tuple[str, str, bytes]]:
    """``(target URI, Content-Type, body)`` of each 2xx page of ``uris`` in the
    crawl's WARC files (every file of ``--warc path``'s prefix, in serial order): a
    ``response`` record's own body, a ``revisit``'s the body of the response with
    its payload digest (two passes: revisits hold no body). A torn or damaged
    record ends its file."""
    prefix, gz = warc_prefix(path)
    files = [warc_path(prefix, s, gz) for s in serials(prefix, gz)]
    revisits: dict[str, list[str]] = {}  # payload digest -> URIs that revisited it
    for uri, rec in _warc_records(files, "revisit"):
        digest = rec.rec_headers.get_header("WARC-Payload-Digest")
        if uri in uris and digest:
            revisits.setdefault(digest, []).append(uri)
    for uri, rec in _warc_records(files, "response"):
        digest = rec.rec_headers.get_header("WARC-Payload-Digest")
        wanted = revisits.get(digest or "", [])
        if uri not in uris and not wanted:
            continue
        ctype = rec.http_headers.get_header("Content-Type") or ""
        body = rec.content_stream().read()
        for target in ([uri] if uri in uris else []) + wanted:
            yield target, ctype, body


def _warc_records(files: list[Path], kind: str) -> Iterator[tuple[str, Any]]:
    """``(target URI, warcio record)`` of the 2xx records of type ``kind``."""
    for path in files:
        try:
            with open(path, "rb") as fh:
                for rec in ArchiveIterator(fh):
                    if rec.rec_type != kind or rec.http_headers is None:
                        continue
                    uri = rec.rec_headers.get_header("WARC-Target-URI")
                    status = rec.http_headers.get_statuscode() or ""
                    if uri and status.startswith("2"):
                        yield uri, rec
        except (ArchiveLoadFailed, OSError, EOFError, ValueError, zlib.error):
            continue  # torn or damaged: the rest of this file is lost


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

    recorded = {fp_of(r["url"]) for r in _records(pages)}
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


def _records(pages: Path) -> Iterator[dict[str, Any]]:
    """The records of pages.jsonl's complete lines; a line that is not a record (a
    damaged disk block) is skipped: its page is fetched again."""
    for line in complete_lines(pages, missing_ok=True):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("url"), str):
            yield record


def _state_of(record: dict[str, Any]) -> State:
    """The outcome a pages.jsonl record stands for (as the engine commits them)."""
    if record.get("status") is None:
        return State.SKIPPED if record.get("error") == "robots.txt" else State.FAILED
    return State.FAILED if record["status"] >= 500 else State.FETCHED


def _restore_pages(seen: UrlSeen, pages: Path) -> int:
    restored = 0
    for record in _records(pages):
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
