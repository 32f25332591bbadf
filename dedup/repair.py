"""Recover what is readable of a damaged ledger: ``bloomcrawl repair DIR``.

Why a salvage and not a rebuild from the shards: the Bloom filter cannot list
its keys, and the ledger is the record of truth. Every table is a rowid table,
so its rows are read by rowid range; a range that hits a damaged page is split
in two until the damage is fenced in, so one bad page costs only the rows on it
(SQLite's own ``.recover`` needs the sqlite3 shell, which a crawl host may lack).
The readable rows go to a scratch file with the ledger's schema, and from there
through the same portable row stream that fleet merge and resize use into a new
journal: seqs are re-issued, counters kept by the journal itself, rows whose
admission was lost are dropped (a URL still queued whose text was lost leaves
the frontier; it is new again if a page links to it). The damaged files are kept
beside the new ledger, the fingerprint index and the shard files are rebuilt.
A WAL with a damaged frame is read as SQLite reads it, up to that frame; the
commits after it are lost (the crawl's pages.jsonl puts its pages back).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dedup.errors import LedgerDamaged
from dedup.journal import Journal
from dedup.journal_format import FORMAT, SCHEMA, PortableRow, State
from dedup.journal_transfer import import_rows, rows
from dedup.ledger import Ledger
from dedup.statedir import ledger_path, lock
from dedup.walcheck import check_wal

COLUMNS = {"meta": "key, value", "log": "seq, n, kind, depth, fps",
           "queue": "id, host, depth, seqs, urls", "outcomes": "seq, state, status, error, at"}
_MAX_ROWID = 1 << 62


@dataclass
class RepairReport:
    """What ``repair`` kept, lost and set aside."""

    kept: dict[str, int] = field(default_factory=dict)  # readable rows per table
    bad_ranges: dict[str, int] = field(default_factory=dict)  # rowid ranges unreadable
    rows: int = 0  # seqs in the new ledger
    frontier_lost: int = 0  # queued URLs dropped: their text was unreadable
    wal_damage: str = ""  # what check_wal found; commits past the damage are lost
    lost_seqs: int = 0  # admissions/forgets whose log rows were unreadable
    orphans: list[tuple[str, int]] = field(default_factory=list)  # (url, depth) to re-admit
    set_aside: list[Path] = field(default_factory=list)


def salvage_table(src: sqlite3.Connection, dst: sqlite3.Connection, table: str) -> tuple[int, int]:
    """Copy every readable row of ``table``; returns (rows kept, rowid ranges lost)."""
    cols = COLUMNS[table]
    marks = ",".join("?" * (cols.count(",") + 1))
    kept = bad = 0
    todo = [(-_MAX_ROWID, _MAX_ROWID)]
    while todo:
        lo, hi = todo.pop()
        try:
            got = src.execute(f"SELECT {cols} FROM {table} WHERE rowid BETWEEN ? AND ? "
                              "ORDER BY rowid", (lo, hi)).fetchall()
        except sqlite3.DatabaseError:
            if lo == hi:
                bad += 1
            else:
                mid = (lo + hi) // 2
                todo += [(mid + 1, hi), (lo, mid)]  # low half first: rows stay in order
            continue
        dst.executemany(f"INSERT OR IGNORE INTO {table} ({cols}) VALUES ({marks})", got)
        kept += len(got)
    return kept, bad


def repair(state_dir: str | os.PathLike[str]) -> RepairReport:
    """Replace ``state_dir``'s ledger by what is readable of it (the directory must
    not be in use: its lock is taken). Raises LedgerDamaged if not even the
    ledger's settings (``meta``) can be read."""
    d = Path(state_dir)
    path = ledger_path(d)
    report = RepairReport()
    fd = lock(d)
    try:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        try:
            check_wal(path)
        except LedgerDamaged as exc:  # SQLite still reads the frames before the damage
            report.wal_damage = str(exc)
        scratch = path.with_name(path.name + ".salvage")
        fresh = path.with_name(path.name + ".repaired")
        for p in (scratch, fresh):
            _remove_db(p)
        _salvage(path, scratch, report)
        try:
            _rebuild_journal(scratch, fresh, report)
        finally:
            _remove_db(scratch)
        Path(f"{path}-shm").unlink(missing_ok=True)  # an index of the WAL, rebuilt on open
        for suffix in ("", "-wal"):
            old = Path(f"{path}{suffix}")
            if old.exists() and (suffix == "" or old.stat().st_size):
                aside = old.with_name(f"{old.name}.damaged-{stamp}")
                os.replace(old, aside)
                report.set_aside.append(aside)
        os.replace(fresh, path)
        _fsync_dir(d)
        with Ledger(path) as ledger:  # its seqs are new: the old index would mislead
            ledger.rebuild_index()
    finally:
        os.close(fd)
    return report


def _salvage(path: Path, scratch: Path, report: RepairReport) -> None:
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    dst = sqlite3.connect(scratch, isolation_level=None)
    try:
        dst.executescript("BEGIN;" + SCHEMA + "COMMIT;")
        dst.execute("BEGIN")
        for table in COLUMNS:
            try:
                report.kept[table], report.bad_ranges[table] = salvage_table(src, dst, table)
            except sqlite3.DatabaseError:  # not even the schema is readable
                report.kept[table], report.bad_ranges[table] = 0, 1
        dst.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (json.dumps(FORMAT),))
        dst.execute("COMMIT")
    finally:
        src.close()
        dst.close()
    if report.kept.get("meta", 0) == 0:
        raise LedgerDamaged(f"{path}: not even the crawl's settings (table meta) are readable: "
                            "nothing to repair from; start a new crawl")


def _rebuild_journal(scratch: Path, fresh: Path, report: RepairReport) -> None:
    with Journal(scratch, readonly=True) as old, Journal(fresh, autocommit=False) as new:
        _find_orphans(old, report)
        for key, value in old.meta_items().items():
            if key not in ("format", "counters"):
                new.meta_set(key, value)
        report.rows = import_rows(new, _kept(rows(old), report))
        new.commit()
    with open(fresh, "rb+") as f:
        os.fsync(f.fileno())


def _find_orphans(old: Journal, report: RepairReport) -> None:
    """Seqs no surviving log row covers: counted, and those whose frontier text
    survived (URL and depth) kept for the caller to admit again."""
    spans = [(b.seq, b.seq + b.n) for b in old.log_batches()]
    starts = np.array([a for a, _ in spans], dtype=np.int64)
    ends = np.array([b for _, b in spans], dtype=np.int64)
    top = int(ends[-1] - 1) if len(ends) else 0
    covered = int((ends - starts).sum())
    done = {seq for seq, state, *_ in old.outcomes() if state is not State.QUEUED}
    for _, depth, seqs, urls in old.queue_groups():
        for seq, url in zip(seqs.tolist(), urls, strict=True):
            top = max(top, seq)
            i = int(np.searchsorted(starts, seq, side="right")) - 1
            if (i < 0 or seq >= ends[i]) and seq not in done:
                report.orphans.append((url, depth))
    report.lost_seqs = top - covered


def _kept(stream: Iterator[PortableRow], report: RepairReport) -> Iterator[PortableRow]:
    for row in stream:
        if row.state is State.QUEUED and row.url is None:
            report.frontier_lost += 1  # admitted, never fetched, and its text is gone
            continue
        yield row


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
