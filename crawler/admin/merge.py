"""``bloomcrawl merge``: OR the shard files of several crawls or fleet workers, or
unite their whole state directories into one that resumes as a single process.

Why inputs are grouped and checked before anything is written: shard files of
different counts, or a directory lacking shards the others have, would give a
filter that silently answers "new" for URLs some input has seen.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from crawler.core.outputs.output import ITEMS_FILE, PAGES_FILE, read_json, write_json_atomic
from crawler.core.schedule.figures import Figures, merged
from crawler.core.schedule.sitemaps import SITEMAPS_FILE
from crawler.core.state.crawlstate import CrawlState
from crawler.core.state.pagecounts import recount, rows_of_records
from crawler.core.state.state import (
    HOST_COUNTS_FILE,
    CrawlError,
    committed_items,
    committed_pages,
    require_state_dir,
    set_committed_pages,
)
from dedup import (
    GeometryMismatch,
    ShardedBloom,
    StateLocked,
    UrlSeen,
    atomic_write_bytes,
    host_of,
    is_state_dir,
    shards_dir,
)
from dedup.admin import merge_files, merge_states, read_header

__all__ = ["MERGE_MARK", "MergedFiles", "MergedState", "check_merge_output",
           "merge_shard_files", "merge_state_dirs"]

MERGE_MARK = "MERGED.json"  # in a merge's output: what it is, so a later merge may replace it


@dataclass(frozen=True, slots=True)
class MergedFiles:
    files: int  # shard files read
    shards: int  # shard files written
    output: Path  # the directory they are in


def catch_up(state_dir: Path, warn: Callable[[str], None]) -> None:
    """Snapshot a state dir whose shard files lag its ledger (after a crash or kill)."""
    with CrawlState.stopped(state_dir) as state:
        hwm = state.last_seq()
    files = sorted(shards_dir(state_dir).glob("shard-*.bloom"))
    if files and all(read_header(f).hwm >= hwm for f in files):
        return
    try:
        with UrlSeen(state_dir, create=False) as seen:
            seen.snapshot()
    except StateLocked:
        warn(f"{state_dir} is in use: its shard files may lack its newest URLs")


def check_merge_output(output: Path) -> None:
    """Refuse an output that is not new, empty or an earlier merge's output: writing shard
    files into a crawl's state directory (stopped or live) would replace its filter, and
    into an unrelated directory would mix them with whatever is there."""
    if not output.exists():
        return
    if not output.is_dir():
        raise CrawlError(f"merge output {output}: exists and is not a directory")
    if is_state_dir(output):
        raise CrawlError(f"merge output {output}: is a crawl's state directory; merging into "
                         "it would replace its filter. Choose a new directory (or use "
                         "'merge --state -o NEW' to unite crawls)")
    if any(output.iterdir()) and not (output / MERGE_MARK).is_file():
        raise CrawlError(f"merge output {output}: not empty and not an earlier merge's "
                         "output; choose a new or empty directory")


def _shard_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise CrawlError(f"merge input {path}: not found")
    folder = shards_dir(path) if shards_dir(path).is_dir() else path
    files = sorted(folder.glob("shard-*.bloom"))
    if not files:
        raise CrawlError(f"merge input {path}: no shard files (shard-*.bloom)")
    return files


def merge_shard_files(inputs: Sequence[str | Path], output: str | Path,
                      warn: Callable[[str], None]) -> MergedFiles:
    """OR every input's shard files, shard by shard, into ``output`` (its shards/ if it is
    a state directory). An input is a shard file, a directory of them or a state dir."""
    check_merge_output(Path(output))
    for raw in inputs:
        if is_state_dir(raw):
            catch_up(Path(raw), warn)
    groups: dict[int, list[Path]] = {}
    counts: dict[int, Path] = {}
    dir_sets: dict[Path, set[int]] = {}
    for raw in inputs:
        path = Path(raw)
        for f in _shard_files(path):
            h = read_header(f)
            counts.setdefault(h.shard_count, f)
            groups.setdefault(h.shard_index, []).append(f)
            if path.is_dir():
                dir_sets.setdefault(path, set()).add(h.shard_index)
    if len(counts) > 1:
        (c1, f1), (c2, f2) = list(counts.items())[:2]
        raise GeometryMismatch(f"shard count differs: {f1} is one of {c1} shards, {f2} one of "
                               f"{c2}")
    if len({frozenset(s) for s in dir_sets.values()}) > 1:
        want = set().union(*dir_sets.values())
        for d, have in dir_sets.items():
            if have != want:
                raise CrawlError(f"merge input {d}: lacks shard(s) "
                                 f"{sorted(want - have)[:10]} that other inputs have")
    out = Path(output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CrawlError(f"output directory {out}: {exc.strerror or exc}") from None
    write_json_atomic(out / MERGE_MARK, {"merged_from": [str(Path(p).resolve())
                                                         for p in inputs]})
    for index in sorted(groups):
        merge_files(ShardedBloom.shard_path(out, index), groups[index])
    return MergedFiles(sum(len(g) for g in groups.values()), len(groups), out)


@dataclass(frozen=True, slots=True)
class MergedState:
    rows: int  # URLs in the merged ledger
    duplicates: int  # URLs present in several inputs (kept once)
    pages: int  # pages.jsonl records carried over
    hosts: int  # distinct hosts of those records
    totals: dict[str, int]  # the dedup counters of every input, every run, summed


def merge_state_dirs(inputs: Sequence[str | Path], output: str | Path) -> MergedState:
    """A new state dir ``output``: the OR of the filters, the union of the ledgers and of
    the pages.jsonl and items.jsonl files (their committed lines, in the same input
    order, so each page's items stay in step with its record); no fleet identity (it
    resumes as one process).

    What the ledgers' union does not carry is made whole here: the dedup counters
    (links checked, new, repeats: the inputs' sums), the page counts (``stats``,
    counted anew from the merged pages.jsonl), the sitemap fetches' counts and
    learning's savings and trap budgets (``crawler.core.schedule.figures``), the
    per-host admission counts (the ``max_pages_per_host`` cap's) and the queued
    sitemaps."""
    ins = [require_state_dir(raw) for raw in inputs]
    out = Path(output)
    result = merge_states(out, ins)
    lines = [ln for d in ins for ln in committed_pages(d)]
    records = [json.loads(ln) for ln in lines]
    parts = []
    for d in ins:
        with CrawlState.stopped(d) as src:
            parts.append(Figures.of(src))
    with CrawlState.stopped(out, readonly=False) as state:
        state.set_fleet(None)  # the union is no fleet worker: resumed alone
        # the inputs' counters, sitemap counts and learning figures, summed (stats takes
        # the sitemap files out of the ledger's done rows by those counts)
        figures = merged(parts)
        figures.write(state)
        recount(state, rows_of_records(records))
    atomic_write_bytes(out / PAGES_FILE, b"".join(lines))
    items = b"".join(b"".join(committed_items(d)) for d in ins)
    if items:
        atomic_write_bytes(out / ITEMS_FILE, items)
    counts: dict[str, int] = {}
    for d in ins:
        for host, n in read_json(d / HOST_COUNTS_FILE, {}).items():
            counts[host] = counts.get(host, 0) + int(n)
    write_json_atomic(out / HOST_COUNTS_FILE, counts)
    sitemaps: dict[str, int] = {}
    for d in ins:
        sitemaps.update(read_json(d / SITEMAPS_FILE, {}))
    if sitemaps:
        write_json_atomic(out / SITEMAPS_FILE, sitemaps)
    set_committed_pages(out, new_warc=True)
    hosts = {host_of(r["url"]) for r in records if r.get("url")}
    return MergedState(result.rows, result.duplicates, len(records), len(hosts),
                       figures.totals)
