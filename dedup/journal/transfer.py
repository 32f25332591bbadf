"""Moving a ledger's contents between journals: the portable row stream used by
fleet merge and resize, and the one-way migration from ledger format 1.

Union by fingerprint is the caller's job: the journal has no fingerprint lookup
(that is the fingerprint index's), so a merge drops the rows whose fingerprint
its index already holds before ``import_rows``, and feeds the new seqs to the
index. Tombstones travel as rows too (state None), in seq order, so replaying a
stream reproduces the same seen-set: a forget after an admission hides it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from itertools import repeat
from pathlib import Path
from typing import Any

from dedup.base.errors import StateFormatError
from dedup.journal.format import FORGET, FP, PortableRow, State
from dedup.journal.journal import Journal
from dedup.url.host import host_of

IMPORT_BATCH = 4096  # rows per log row on import: big batches keep the log compact


def rows(journal: Journal) -> Iterator[PortableRow]:
    """Every seq of ``journal`` in seq order as a ``PortableRow`` (URL text for
    rows whose text is still kept); three sequential scans (log, queue, outcomes) merged, since
    each is ordered by seq."""
    groups = journal.queue_groups()
    group = next(groups, None)
    outcomes = journal.outcomes()
    outcome = next(outcomes, None)
    for b in journal.log_batches():
        end = b.seq + b.n
        text: dict[int, tuple[str, str]] = {}
        while group is not None and group[2][0] < end:
            host, _, seqs, urls = group
            text.update(zip(seqs.tolist(), zip(urls, repeat(host)), strict=True))
            group = next(groups, None)
        done: dict[int, tuple[Any, ...]] = {}
        while outcome is not None and outcome[0] < end:
            done[outcome[0]] = outcome
            outcome = next(outcomes, None)
        for i in range(b.n):
            fp = b.fps[i * FP:(i + 1) * FP]
            if b.kind == FORGET:
                yield PortableRow(fp, None, None, 0, None, None, None)
                continue
            _, state, status, error, _ = done.get(b.seq + i, (0, State.QUEUED, None, None, 0))
            url, host = text.get(b.seq + i, (None, None))
            yield PortableRow(fp, url, host, b.depth, state, status, error)


def import_rows(journal: Journal, source: Iterable[tuple]) -> int:
    """Append rows in the form ``rows()`` yields (7-tuples work too), in order;
    returns how many. URL text is kept wherever the row carries it (a done URL
    whose queue text was compacted has none: it lives in the crawl output).
    Open ``journal`` with ``autocommit=False`` and commit after to make the import
    one transaction."""
    count = 0
    chunk: list[PortableRow] = []
    for raw in source:
        row = PortableRow(*raw)
        if chunk and (_key(row) != _key(chunk[0]) or len(chunk) >= IMPORT_BATCH):
            _flush(journal, chunk)
            chunk = []
        chunk.append(row)
        count += 1
    if chunk:
        _flush(journal, chunk)
    return count


def _key(row: PortableRow) -> tuple[bool, int]:
    return row.state is None, row.depth


def _flush(journal: Journal, chunk: list[PortableRow]) -> None:
    fps = b"".join(r.fp for r in chunk)
    if chunk[0].state is None:
        journal.append_forget(fps)
        return
    urls = [r.url for r in chunk]
    hosts = [r.host or (host_of(u) if u else "") for r, u in zip(chunk, urls, strict=True)]
    seqs = journal.append(fps, depth=chunk[0].depth, urls=urls, hosts=hosts)
    marks = [(seq, State(r.state), r.status, r.error)
             for seq, r in zip(seqs, chunk, strict=True)
             if r.state != State.QUEUED or r.status is not None or r.error is not None]
    journal.mark_many(marks)


def migrate_v1(path_v1: str | Path, journal: Journal) -> int:
    """Stream a format-1 ledger (table ``urls``) into an empty format-2 ``journal``:
    seq order kept, URL text kept for every row, outcomes for the done ones, meta
    (geometry, rules, crawl id, ...) copied. Returns the rows moved.

    Seqs are renumbered (format 1 has gaps where rows were forgotten), so the
    shard snapshots' high-water marks no longer apply: rebuild the shards after.
    """
    if journal.last_seq() != 0:
        raise ValueError(f"{journal.path}: migrate into an empty ledger only")
    src = sqlite3.connect(f"file:{Path(path_v1)}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "urls" not in tables:
            raise StateFormatError(f"{path_v1}: not a format-1 ledger (no table urls)")
        for key, value in src.execute("SELECT key, value FROM meta"):
            if key not in ("format", "counters"):
                journal.meta_set(key, json.loads(value))
        cur = src.execute("SELECT fp, url, host, depth, state, status, error FROM urls "
                          "ORDER BY seq")
        moved = import_rows(journal, _iter(cur))
        journal.commit()
        return moved
    finally:
        src.close()


def _iter(cur: sqlite3.Cursor) -> Iterator[tuple]:
    while batch := cur.fetchmany(10_000):
        yield from batch

