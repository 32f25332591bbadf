"""Recover what is readable of a damaged ledger: ``bloomcrawl repair DIR``.

Why a salvage and not a rebuild from the shards: the Bloom filter cannot list
its keys, and the ledger is the record of truth. Its tables but one are rowid
tables, so their rows are read by rowid range; a range that hits a damaged page
is split in two until the damage is fenced in, so one bad page costs only the
rows on it (SQLite's own ``.recover`` needs the sqlite3 shell, which a crawl host
may lack); ``contents`` (keyed by text) is read from both ends. Every value is
read as the bytes stored (text that is not UTF-8 included: the sqlite3 module
would refuse the whole read) and each row is judged by its checksum, so nothing
a damaged row holds can stop the salvage. The readable rows go to a scratch file
with the ledger's schema, and from there through the same portable row stream
that fleet merge and resize use into a new journal: seqs are re-issued (the
``notes`` runs follow their rows), counters kept by the journal itself, rows
whose admission was lost are dropped (a URL still queued whose text was lost
leaves the frontier: the caller may find it again, ``index_keys`` says which).
The damaged files are kept beside the new ledger, the fingerprint index and the
shard files are rebuilt. A WAL with a damaged frame is read as SQLite reads it,
up to that frame; the commits after it are lost (the crawl's pages.jsonl puts
its pages back).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dedup.base.atomic import fsync_dir
from dedup.base.errors import LedgerDamaged, StateFormatError
from dedup.index.fpindex import MANIFEST, read_manifest
from dedup.index.runs import TOMBSTONE, Run, RunFileError
from dedup.journal.format import (
    CHECKED_TABLES,
    CRC_TABLES,
    FORMAT,
    NOTES_TABLES,
    ROW_COLUMNS,
    SCHEMA,
    PortableRow,
    State,
    crc_ok,
)
from dedup.journal.journal import Journal
from dedup.journal.transfer import import_rows, rows
from dedup.journal.walcheck import check_wal
from dedup.store.ledger import INDEX_SUFFIX, Ledger
from dedup.store.statedir import ledger_path, lock

_MAX_ROWID = 1 << 62
_META_COLUMNS = ("key", "value")


@dataclass
class Damage:
    """What of a state directory's ledger is damaged: decided here, in one place, so
    that ``repair`` touches only that (and says what it kept)."""

    ledger: str = ""  # why the ledger file cannot be read or fails a row checksum
    wal: str = ""  # check_wal's complaint: committed frames past a damaged one

    @property
    def journal(self) -> bool:
        """Whether the journal (the file or its WAL) must be salvaged and rebuilt."""
        return bool(self.ledger or self.wal)


def classify(state_dir: str | os.PathLike[str]) -> Damage:
    """Read the ledger once, as a resume would before its first fetch (WAL frames,
    SQLite's structure check, every row and its checksum), and say what is damaged.
    O(ledger)."""
    path = ledger_path(Path(state_dir))
    damage = Damage()
    try:
        check_wal(path)
    except LedgerDamaged as exc:
        damage.wal = str(exc)
    try:
        with Journal(path, readonly=True) as journal:
            journal.verify()
    except (LedgerDamaged, StateFormatError) as exc:
        damage.ledger = str(exc)
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and "no such table" not in str(exc):
            raise  # locked, I/O error: not damage
        damage.ledger = f"{path}: {exc}"
    return damage


@dataclass
class RepairReport:
    """What ``repair`` kept, lost and set aside."""

    damage: Damage = field(default_factory=Damage)
    kept: dict[str, int] = field(default_factory=dict)  # readable rows per table
    bad_ranges: dict[str, int] = field(default_factory=dict)  # unreadable stretches of rowids
    bad_rows: dict[str, int] = field(default_factory=dict)  # rows failing their checksum
    probes: int = 0  # range reads the salvage made (bounded by the file's size)
    rows: int = 0  # seqs in the new ledger
    frontier_lost: int = 0  # queued URLs dropped: their text was unreadable
    dropped: dict[str, int] = field(default_factory=dict)  # rows the caller's filter refused
    wal_damage: str = ""  # what check_wal found; commits past the damage are lost
    lost_seqs: int = 0  # admissions/forgets whose log rows were unreadable
    orphans: list[tuple[str, int]] = field(default_factory=list)  # (url, depth) to re-admit
    meta_from: list[str] = field(default_factory=list)  # meta keys the caller's copy gave
    recovered: int = 0  # queued URLs the caller found again (the crawler: in its WARC)
    unaccounted: int = 0  # keys the old index held that the new ledger does not
    set_aside: list[Path] = field(default_factory=list)


class _Probes:
    """A table's budget of range reads: a few per page of the file (each damaged
    stretch costs O(log gap) of them, at most ~2 x 63), so the salvage ends in
    time proportional to the file whatever the damage, where splitting rowid
    ranges in two went down to single rowids over 2**63 of them."""

    def __init__(self, pages: int) -> None:
        self.left = 256 + 8 * pages
        self.spent = 0

    def spend(self) -> bool:
        self.spent += 1
        self.left -= 1
        return self.left >= 0


def salvage_table(src: sqlite3.Connection, dst: sqlite3.Connection, table: str,
                  crc: str = "crc", probes: _Probes | None = None) -> tuple[int, int, int]:
    """Copy every readable row of ``table`` whose checksum holds; returns (rows kept,
    unreadable stretches, rows failing their checksum).

    Rows are read in rowid order from a start; when a read fails, the rows before
    the damage are kept and the next readable rowid is found by galloping
    (start + 1, 2, 4, ... until a read succeeds, then bisecting back): O(log gap)
    reads per damaged stretch, and at most ~2 x 63 when nothing is readable."""
    probes = probes or _Probes(1 << 20)
    checked = table != "meta"
    cols = ROW_COLUMNS.get(table, _META_COLUMNS)
    select = (f"SELECT rowid, {', '.join(cols)}{f', {crc}' if checked else ''} FROM {table} "
              "WHERE rowid >= ? ORDER BY rowid")
    marks = ",".join("?" * (len(cols) + checked))
    names = ", ".join((*cols, "crc") if checked else cols)
    kept = stretches = bad = 0
    start: int | None = -_MAX_ROWID
    while start is not None and probes.spend():
        got: list[tuple] = []
        failed = False
        try:
            for row in src.execute(select, (start,)):
                if got and row[0] <= got[-1][0]:
                    raise sqlite3.DatabaseError("rowids out of order")
                got.append(row)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and "no such table" in str(exc):
                return kept, stretches + 1, bad
            failed = True
        good = [r[1:] for r in got if _row_ok(table, r[1:])]
        bad += len(got) - len(good)
        dst.executemany(f"INSERT OR IGNORE INTO {table} ({names}) VALUES ({marks})", good)
        kept += len(good)
        if not failed:
            break
        stretches += 1
        after = got[-1][0] if got else start - 1
        nxt = _next_readable(src, select, after, probes)
        start = None if nxt is None else max(nxt, start + 1)
    return kept, stretches, bad


def _row_ok(table: str, row: tuple) -> bool:
    """Whether a row read with :func:`_raw_text` is whole: every text UTF-8 (its bytes
    came back unchanged), then its crc (``meta``: its key text, its value JSON)."""
    if not all(v.__class__ is not str or v.isascii() or _is_utf8(v) for v in row):
        return False
    if table == "meta":
        try:
            json.loads(row[1])
        except (TypeError, ValueError):
            return False
        return isinstance(row[0], str)
    return crc_ok(row)


def _raw_text(raw: bytes) -> str:
    """The salvage's ``text_factory``: a TEXT value's bytes, whatever they are, as a
    str (bytes that are not UTF-8 become lone surrogates, ``surrogateescape``), so
    that no value can make a read fail; the row is then judged whole or not by
    :func:`_row_ok` (its checksum covers the text as written)."""
    return raw.decode("utf-8", "surrogateescape")


def _is_utf8(text: str) -> bool:
    """Whether ``text`` (read by :func:`_raw_text`) was UTF-8: it holds no lone surrogate."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _next_readable(src: sqlite3.Connection, select: str, after: int,
                   probes: _Probes) -> int | None:
    """The smallest rowid past ``after`` from which a read of a whole row succeeds
    (None: none): the row's every column, as an overflow page may be the damage."""
    sql = select + " LIMIT 1"

    def readable(at: int) -> tuple[bool, bool]:  # (read succeeded, a row was there)
        try:
            return True, src.execute(sql, (at,)).fetchone() is not None
        except sqlite3.DatabaseError:
            return False, False

    step = 1
    while after + step <= _MAX_ROWID:
        if not probes.spend():
            return None
        ok, found = readable(after + step)
        if ok:
            if not found:
                return None
            lo, hi = after + step // 2, after + step  # lo failed (or is ``after``), hi reads
            while hi - lo > 1 and probes.spend():
                mid = (lo + hi) // 2
                if readable(mid)[0]:
                    hi = mid
                else:
                    lo = mid
            return hi
        step *= 2
    return None


RowFilter = Callable[[dict[str, Any]], Callable[[PortableRow], str | None]]


def repair(state_dir: str | os.PathLike[str], *, fallback_meta: dict[str, Any] | None = None,
           row_filter: RowFilter | None = None) -> RepairReport:
    """Replace ``state_dir``'s ledger by what is readable of it, if ``classify`` finds it
    damaged (the directory must not be in use: its lock is taken); a ledger that
    reads and checks clean is kept as it is (``report.damage.journal`` is False).

    ``fallback_meta``: settings kept outside the ledger (the crawler's copy), used for
    every meta key the salvage could not read. ``row_filter(meta)`` gives a test
    that names why a salvaged row must not be carried over (None: keep it): the
    caller knows what its output says was done. Raises LedgerDamaged if the
    filter's geometry is known from neither. Nothing is left half-made: the new
    ledger is built under another name and swapped in with one rename; the old
    files are kept (hard links) as ``*.damaged-TIME``."""
    d = Path(state_dir)
    path = ledger_path(d)
    report = RepairReport()
    fd = lock(d)
    scratch = path.with_name(path.name + ".salvage")
    fresh = path.with_name(path.name + ".repaired")
    try:
        for p in (scratch, fresh):  # left by an interrupted repair
            _remove_db(p)
        report.damage = classify(d)
        report.wal_damage = report.damage.wal
        if not report.damage.journal:
            return report
        stamp = time.strftime("%Y%m%dT%H%M%S")
        _salvage(path, scratch, report)
        try:
            _rebuild_journal(scratch, fresh, report, fallback_meta or {}, row_filter)
        finally:
            _remove_db(scratch)
        _swap(path, fresh, stamp, report)
        with Ledger(path) as ledger:  # its seqs are new: the old index would mislead
            ledger.rebuild_index()
    finally:
        _remove_db(scratch)
        _remove_db(fresh)
        os.close(fd)
    return report


def index_keys(state_dir: str | os.PathLike[str]) -> np.ndarray:
    """The fingerprints (``(n, 2)`` uint64 halves) admitted and never forgotten in the
    fingerprint index's runs that still read: the seen-set as it stood at the index's
    mark, independent of the journal. Read before ``repair`` rebuilds the index, it
    says how many admitted URLs the new ledger lost (their text was only in the
    journal). A run that does not read is skipped."""
    directory = ledger_path(Path(state_dir)).with_name(
        ledger_path(Path(state_dir)).stem + INDEX_SUFFIX)
    try:
        names = read_manifest(directory / MANIFEST)[2]
    except (ValueError, OSError):
        names = sorted(p.name for p in directory.glob("run-*.fpr"))
    live, dead = [np.zeros((0, 2), dtype=np.uint64)], [np.zeros((0, 2), dtype=np.uint64)]
    for name in names:
        try:
            run = Run(directory / name)
        except (RunFileError, OSError):
            continue
        try:
            rec = run.records(0, run.count)
        finally:
            run.close()
        tomb = (rec[:, 2] & TOMBSTONE) != 0
        live.append(rec[~tomb, :2])
        dead.append(rec[tomb, :2])
    keys = np.unique(np.concatenate(live), axis=0)
    gone = np.concatenate(dead)
    if len(gone):  # forgotten (a key forgotten then admitted again is left out: rare)
        keys = keys[~_rows_in(keys, gone)]
    return keys


def _rows_in(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Which rows of ``a`` (n, 2) are rows of ``b``."""
    va = np.ascontiguousarray(a).view([("h", "<u8"), ("l", "<u8")]).ravel()
    vb = np.ascontiguousarray(b).view([("h", "<u8"), ("l", "<u8")]).ravel()
    return np.isin(va, vb)


def _swap(path: Path, fresh: Path, stamp: str, report: RepairReport) -> None:
    """Keep the damaged files (hard links: the originals stay in place until the
    rename), then put the new ledger in place with one rename."""
    for suffix in ("", "-wal"):
        old = Path(f"{path}{suffix}")
        if old.exists() and (suffix == "" or old.stat().st_size):
            aside = old.with_name(f"{old.name}.damaged-{stamp}")
            try:
                os.link(old, aside)
            except OSError:
                shutil.copy2(old, aside)
            report.set_aside.append(aside)
    fsync_dir(path.parent)
    # the old WAL would be replayed onto the new file: it goes first (its copy is kept)
    for suffix in ("-shm", "-wal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.replace(fresh, path)
    fsync_dir(path.parent)


def _salvage(path: Path, scratch: Path, report: RepairReport) -> None:
    try:
        src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        src = sqlite3.connect(":memory:")  # nothing readable: every table comes out empty
    src.text_factory = _raw_text
    dst = sqlite3.connect(scratch, isolation_level=None)
    pages = max(1, path.stat().st_size // 4096 if path.exists() else 1)
    spent = 0
    try:
        dst.executescript("BEGIN;" + SCHEMA + "COMMIT;")
        dst.execute("BEGIN")
        crc = {t: _crc_column(src, t) for t in CHECKED_TABLES}
        for table in ("meta", *CRC_TABLES, *NOTES_TABLES):
            if table in NOTES_TABLES and not _has_table(src, table):
                continue  # a ledger written before the notes tables
            probes = _Probes(pages)  # each table its own: one cannot starve the others
            if table == "contents":  # keyed by its digest text (WITHOUT ROWID)
                kept, stretches, bad = _salvage_keyed(src, dst, table, crc[table], probes)
            else:
                kept, stretches, bad = salvage_table(src, dst, table, crc.get(table, "crc"),
                                                     probes)
            spent += probes.spent
            report.kept[table], report.bad_ranges[table] = kept, stretches
            report.bad_rows[table] = bad
        dst.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (json.dumps(FORMAT),))
        dst.execute("COMMIT")
    finally:
        src.close()
        dst.close()
    report.probes = spent


def _salvage_keyed(src: sqlite3.Connection, dst: sqlite3.Connection, table: str, crc: str,
                   probes: _Probes) -> tuple[int, int, int]:
    """``salvage_table`` for a table without rowids: read in key order from the first
    key, and if a read fails, from the last key backwards, so one damaged stretch
    costs the rows in it (two reads)."""
    cols = ROW_COLUMNS[table]
    select = f"SELECT {', '.join(cols)}, {crc} FROM {table} ORDER BY {cols[0]} "
    insert = (f"INSERT OR IGNORE INTO {table} ({', '.join(cols)}, crc) "
              f"VALUES ({','.join('?' * (len(cols) + 1))})")
    kept_before = dst.total_changes
    bad: set[object] = set()
    stretches = 0
    for order in ("ASC", "DESC"):
        if not probes.spend():
            break
        got: list[tuple] = []
        try:
            got.extend(src.execute(select + order))
        except sqlite3.DatabaseError:
            stretches = 1
        good = [r for r in got if _row_ok(table, r)]
        bad.update(r[0] for r in got if not _row_ok(table, r))
        dst.executemany(insert, good)
        if not stretches:
            break
    return dst.total_changes - kept_before, stretches, len(bad)


def _has_table(src: sqlite3.Connection, table: str) -> bool:
    """Whether the damaged ledger's schema names ``table`` (an unreadable schema: yes,
    and the salvage finds out what of it reads)."""
    try:
        return src.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                           (table,)).fetchone() is not None
    except sqlite3.DatabaseError:
        return True


def _crc_column(src: sqlite3.Connection, table: str) -> str:
    """"crc" if the damaged ledger's table has one (readable), else "NULL"."""
    try:
        cols = [r[1] for r in src.execute(f"PRAGMA table_info({table})")]
    except sqlite3.DatabaseError:
        return "NULL"
    return "crc" if "crc" in cols else "NULL"


def _rebuild_journal(scratch: Path, fresh: Path, report: RepairReport,
                     fallback: dict[str, Any], row_filter: RowFilter | None) -> None:
    with Journal(scratch, readonly=True) as old, Journal(fresh, autocommit=False) as new:
        meta = old.meta_items()
        for key, value in fallback.items():
            if key not in meta and value is not None:
                meta[key] = value
                report.meta_from.append(key)
        if "geometry" not in meta:
            raise LedgerDamaged(f"{old.path}: not even the crawl's settings (table meta) are "
                                "readable, and no copy of them was found: nothing to repair "
                                "from; start a new crawl")
        _find_orphans(old, report)
        for key, value in meta.items():
            new.meta_set(key, value)
        test = row_filter(meta) if row_filter is not None else None
        notes = _Renumbered(old.notes(), new.last_seq() + 1)
        report.rows = import_rows(new, _kept(zip(rows(old), _seqs(old), strict=True), report,
                                             test, notes.keep))
        new.note_runs(notes.close())
        new.content_add(old.contents())
        new.commit()
    if Path(f"{fresh}-wal").exists():  # pragma: no cover - the last close checkpoints
        raise LedgerDamaged(f"{fresh}: the new ledger was not checkpointed")
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
        if not len(seqs):
            continue
        top = max(top, int(seqs.max()))
        i = np.searchsorted(starts, seqs, side="right") - 1
        covered_by = np.zeros(len(seqs), dtype=bool)
        ok = i >= 0
        covered_by[ok] = seqs[ok] < ends[i[ok]]
        for k in np.flatnonzero(~covered_by).tolist():
            if int(seqs[k]) not in done:
                report.orphans.append((urls[k], depth))
    report.lost_seqs = top - covered


def _seqs(journal: Journal) -> Iterator[int]:
    """The seq of each row ``rows(journal)`` yields, in the same order."""
    for b in journal.log_batches():
        yield from range(b.seq, b.seq + b.n)


def _kept(stream: Iterator[tuple[PortableRow, int]], report: RepairReport,
          test: Callable[[PortableRow], str | None] | None,
          keep: Callable[[int], None]) -> Iterator[PortableRow]:
    """The rows carried over (``keep`` told each one's old seq, in order)."""
    for row, seq in stream:
        if row.state is State.QUEUED and row.url is None:
            report.frontier_lost += 1  # admitted, never fetched, and its text is gone
            continue
        why = test(row) if test is not None else None
        if why is not None:
            report.dropped[why] = report.dropped.get(why, 0) + 1
            continue
        keep(seq)
        yield row


class _Renumbered:
    """The ``notes`` runs of the carried-over rows under their new seqs: the k-th row
    kept gets seq ``first + k`` (``import_rows`` appends them in order), so the kept
    seqs of one old run get one run of new seqs. A merge of two ordered streams: the
    old runs (by first seq) and the kept seqs."""

    def __init__(self, notes: Iterator[tuple[int, int, str | None]], first: int) -> None:
        self._notes = notes
        self._note = next(notes, None)
        self._next = first
        self._run: list[Any] | None = None  # [new first, new last, text] being built
        self._out: list[tuple[int, int, str | None]] = []

    def keep(self, old: int) -> None:
        new = self._next
        self._next += 1
        while self._note is not None and self._note[1] < old:
            self._end_run()
            self._note = next(self._notes, None)
        note = self._note
        if note is not None and note[0] <= old:
            if self._run is None:
                self._run = [new, new, note[2]]
            else:
                self._run[1] = new

    def _end_run(self) -> None:
        if self._run is not None:
            self._out.append((self._run[0], self._run[1], self._run[2]))
            self._run = None

    def close(self) -> list[tuple[int, int, str | None]]:
        self._end_run()
        return self._out


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
