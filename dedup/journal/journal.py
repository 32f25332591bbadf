"""The ledger, format 2: an append-only journal of batches, the record of truth.

Format 1 kept one SQLite row per URL behind a UNIQUE fingerprint index, so every
admission dirtied random B-tree pages (~14 KB written and 217 B stored per URL).
Here admitting a page's new URLs appends ONE ``log`` row (rowid = first seq of
the batch, the fingerprints as one blob): pages fill in order, and nothing on the
pure seen-set path reads or rewrites an old page. (With URL text, the queue's
``(host, id)`` index still takes one random insert per (batch, host): measured
in bench/README.md, "Ledger format 2".) The exact seen-set lives in the
fingerprint index (``dedup.index.fpindex``), which is rebuilt from this log; the log
never deletes, so seqs are never reused and snapshot high-water marks stay sound.

Tables (``SCHEMA``, ``dedup.journal.format``):

- ``meta``: geometry, rules, crawl id, ``format`` = 2 and the kept counters
  (``counters``), written in the same transaction as the rows they count; and a
  caller's JSON values (``meta_get``/``meta_set``).
- ``log(seq, n, kind, depth, fps)``: seqs ``seq .. seq+n-1``; kind 0 admits,
  kind 1 forgets (tombstones for the fingerprints).
- ``queue(id, host, depth, seqs, urls)``: the durable frontier text, one row per
  (batch, host); ``id`` is the group's smallest seq (unique, since a batch's
  groups partition its seqs), ``seqs`` the offsets from ``id`` (uint8 when they
  fit, else uint32), ``urls`` the newline-joined text behind a tag byte, zlib-
  deflated when that is smaller (a lone URL is not).
- ``outcomes(seq, state, status, error, at)``: fetch results; no row = queued.
- ``notes(first, last, text)``: a caller's text per run of seqs (the crawler: the
  page a run of URLs was found on, pages.jsonl's ``referrer``).
- ``contents(digest, name, at)``: the first ``(name, date)`` seen with each content
  digest (the crawler: WARC revisits and pages.jsonl's ``duplicate_of``).

Every row of ``log``, ``queue``, ``outcomes``, ``notes`` and ``contents`` carries
``crc``, a CRC-32 of its other columns (``row_crc``): SQLite checks its pages'
structure, never their contents, so a flipped byte inside a fingerprint blob
would otherwise be read as a different fingerprint (a page fetched twice). A
NULL crc (a row written before the column existed) is not checked.

Crawl-specific: ``log`` and ``meta`` are all a seen-set of plain keys needs
(``UrlSeen.filter_new`` writes nothing else). ``queue``, ``outcomes``, ``notes``
and ``contents`` hold crawler concepts (URL text and hosts, fetch states
FETCHED/FAILED/SKIPPED, referrers, body digests). They are kept here, not in a
layer above, because they must commit in the same transaction as the keys they
describe; the crawler reaches them only through ``dedup.store.crawl``.

One writer; readers (``stats`` while a crawl runs) open with ``readonly=True``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from dedup.base.errors import LedgerDamaged, StateFormatError
from dedup.journal.format import (
    ADMIT,
    CHECKED_TABLES,
    FORGET,
    FORMAT,
    FP,
    LEARN_SCHEMA,
    LEARN_TABLES,
    NOTES_SCHEMA,
    NOTES_TABLES,
    SCHEMA,
    Batch,
    JournalRow,
    QueuedRow,
    State,
    crc_ok,
    encode_group,
    groups_by_host,
    with_crc,
)
from dedup.journal.learned import LearnedTables
from dedup.journal.queue import QueueTable, select_in
from dedup.journal.verify import verify_ledger
from dedup.journal.walcheck import check_wal

# Measured with bench/journal_bench.py (bench/README.md, "Ledger format 2"): 1 KiB
# pages wrote no less than 4 KiB ones. Checkpointing every 1,000 WAL pages keeps the
# WAL near 4 MiB (10,000 let it reach 40 MiB, filling small disks long before the
# data did); it costs ~35% more bytes written per URL with URL text, whose host index
# pages get checkpointed more often. After a checkpoint the WAL is cut to 8 MiB.
PAGE_SIZE = 4096
WAL_AUTOCHECKPOINT = 1_000
JOURNAL_SIZE_LIMIT = 8 << 20

_NOTES_KEPT = 32_768  # runs note_of answers from RAM (~4 MB)
_DONE = tuple(s for s in State if s is not State.QUEUED)


def utf8_text(raw: bytes) -> str:
    """A TEXT value as the journal reads it (the connection's ``text_factory``): the
    journal only ever writes UTF-8, so anything else is a damaged page. The sqlite3
    module's own decoder reports it as an OperationalError, the class of a locked
    or unreadable file; here it is a DatabaseError, the class of a malformed page,
    so every caller that tells damage from a busy disk (``classify``, ``verify``,
    the open) names it damage and the way out (``bloomcrawl repair``)."""
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise sqlite3.DatabaseError(
            f"text that is not UTF-8 (byte {exc.start} of {raw[:48]!r})") from None


_COUNTER_KEYS = ("admitted", "forgotten", *(s.name.lower() for s in _DONE))


class Journal:
    """Append-only format-2 ledger (SQLite, WAL, synchronous=NORMAL).

    With ``autocommit=False`` writes accumulate in one transaction until
    ``commit()`` (group commit): a commit's WAL sync costs far more than a page's
    append, so a crawler commits a batch of pages and their outcomes atomically.
    Counters are kept in memory and written to ``meta`` right before COMMIT, so
    a crash loses them together with the rows they count, never apart.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False,
                 autocommit: bool = True, cache_kib: int | None = None) -> None:
        if cache_kib is not None and (isinstance(cache_kib, bool) or not isinstance(
                cache_kib, int) or cache_kib < 1):
            raise ValueError(f"cache_kib must be an integer >= 1, not {cache_kib!r}")
        self.path = Path(path)
        self.readonly = readonly
        self.autocommit = autocommit
        if readonly:
            if not self.path.exists():
                raise FileNotFoundError(f"no ledger at {self.path}")
            self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                       isolation_level=None, check_same_thread=False)
        else:
            check_wal(self.path)  # the writer holds the state dir's lock: no one appends
            self._db = sqlite3.connect(self.path, isolation_level=None,
                                       check_same_thread=False)
        self._db.text_factory = utf8_text
        self._db.execute("PRAGMA busy_timeout=5000")
        if cache_kib is not None:  # SQLite's page cache, else its default (2,000 KiB)
            self._db.execute(f"PRAGMA cache_size=-{cache_kib}")
        self._queue = QueueTable(self._db, self._damaged)
        self._learned = LearnedTables(self._db, self._damaged)
        self._note_firsts: list[int] = []  # the newest runs of ``notes`` (note_of's cache)
        self._note_runs: list[tuple[int, int, str | None]] = []
        self._notes_top: int | None = None  # the highest first seq in ``notes`` (None: not read)
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            if isinstance(exc, sqlite3.OperationalError):
                raise  # locked, I/O error, disk full: not damage
            raise LedgerDamaged(f"{self.path}: {exc}") from exc
        except BaseException:
            self._db.close()
            raise

    def _open(self) -> None:
        db = self._db
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "urls" in tables and "log" not in tables:
            raise StateFormatError(
                f"{self.path}: state dir format 1 (one row per URL); this version reads "
                f"format {FORMAT}: migrate with `bloomcrawl migrate DIR`")
        if tables:
            found = self.meta_get("format") if "meta" in tables else None
            if found != FORMAT:
                raise StateFormatError(f"{self.path}: ledger format {found!r}, this version "
                                       f"reads format {FORMAT}")
        elif self.readonly:
            raise StateFormatError(f"{self.path}: empty file, not a ledger")
        if not self.readonly:
            db.execute(f"PRAGMA page_size={PAGE_SIZE}")
            db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a process crash loses nothing committed; a power
            # loss may drop the last commits but never corrupts.
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT}")
            db.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
            if not tables:
                db.executescript("BEGIN;" + SCHEMA + "COMMIT;")
                db.execute("INSERT INTO meta VALUES ('format', ?)", (json.dumps(FORMAT),))
            elif not tables >= {*NOTES_TABLES, *LEARN_TABLES}:  # a ledger from before them
                db.executescript("BEGIN;" + NOTES_SCHEMA + LEARN_SCHEMA + "COMMIT;")
            for table in CHECKED_TABLES:  # a ledger from before row checksums: new rows get one
                if not self._has_crc(table):
                    db.execute(f"ALTER TABLE {table} ADD COLUMN crc INTEGER")
            tables |= {*NOTES_TABLES, *LEARN_TABLES}
        # a read-only ledger from before the notes tables has none to check
        self._checked_tables = [t for t in CHECKED_TABLES if t in tables]
        self._crc = {t: "crc" if self._has_crc(t) else "NULL" for t in CHECKED_TABLES}
        self._queue.crc = self._crc["queue"]
        self._learned.crc = {t: self._crc[t] for t in LEARN_TABLES}
        self._load_counters()

    def _has_crc(self, table: str) -> bool:
        return any(r[1] == "crc" for r in self._db.execute(f"PRAGMA table_info({table})"))

    def _damaged(self, table: str, rowid: object) -> LedgerDamaged:
        """The error a row failing its checksum raises: a damaged ledger and its way out."""
        return LedgerDamaged(f"{self.path}: {table} row {rowid} does not match its checksum: "
                             "the ledger is damaged")

    def _checked(self, table: str, row: tuple) -> tuple:
        """``row`` (its columns then its crc) without the crc, once it matches."""
        if not crc_ok(row):
            raise self._damaged(table, row[0])
        return row[:-1]

    def verify(self) -> int:
        """Check the whole ledger once: SQLite's structure, then every row of every table
        against its checksum (``dedup.journal.verify``); raise LedgerDamaged naming the
        first damage. Returns the rows read. O(ledger): a resume runs it before its
        first fetch, so damage is reported before it costs anything."""
        return verify_ledger(self._db, self.path,
                             {t: self._crc[t] for t in self._checked_tables},
                             self._damaged, self._json)

    def _load_counters(self) -> None:
        stored = self.meta_get("counters") or {}
        self._counts = {k: int(stored.get(k, 0)) for k in _COUNTER_KEYS}
        row = self._db.execute("SELECT seq + n - 1 FROM log ORDER BY seq DESC LIMIT 1").fetchone()
        self._hwm = int(row[0]) if row else 0

    # -- appending -------------------------------------------------------------

    def append(self, fps: bytes, *, depth: int, urls: Sequence[str | None] | None = None,
               hosts: Sequence[str] | None = None) -> range:
        """Admit a batch (a page's new keys): one ``log`` row, plus one ``queue`` row
        per host when the caller keeps the URL text (the crawler's frontier).

        The pure seen-set API passes no ``urls``: its caller already holds the
        keys, and keeping their text here would be waste. A None url keeps no text
        for its key (an import of a URL already fetched). Returns the seqs given.
        """
        if urls is not None and len(urls) != len(fps) // FP:
            raise ValueError(f"{len(urls)} urls for {len(fps) // FP} fingerprints")
        seqs = self._append(fps, ADMIT, depth, urls, hosts)
        self._end()
        return seqs

    def append_forget(self, fps: bytes) -> range:
        """Tombstones: a later "maybe seen" of these keys finds them forgotten.

        Old seqs keep their states; a caller that wants a forgotten URL out of the
        frontier marks its old seq (the fingerprint index gives it).
        """
        seqs = self._append(fps, FORGET, 0, None, None)
        self._end()
        return seqs

    def _append(self, fps: bytes, kind: int, depth: int,
                urls: Sequence[str | None] | None, hosts: Sequence[str] | None) -> range:
        n, rest = divmod(len(fps), FP)
        if rest:
            raise ValueError(f"fingerprints are {FP} bytes each; got {len(fps)} bytes")
        if n == 0:
            return range(0)
        seq = self._hwm + 1
        groups = groups_by_host(seq, urls, hosts) if urls is not None else []
        self._begin()  # only now: bad input above leaves no transaction open
        self._db.execute("INSERT INTO log VALUES (?,?,?,?,?,?)",
                         with_crc((seq, n, kind, depth, fps)))
        if groups:
            self._db.executemany("INSERT INTO queue VALUES (?,?,?,?,?,?)",
                                 [with_crc(encode_group(g, depth)) for g in groups])
        self._hwm += n
        self._counts["admitted" if kind == ADMIT else "forgotten"] += n
        return range(seq, seq + n)

    def mark_many(self, rows: Iterable[tuple[int, State, int | None, str | None]]) -> None:
        """Record fetch outcomes ``(seq, state, status, error)``; the per-state counters
        move by the seq's previous state, so marking a seq twice counts it once.
        A done seq may change its final state but not go back to QUEUED."""
        rows = [(seq, State(state), status, error) for seq, state, status, error in rows]
        if not rows:
            return
        prev = self._states([r[0] for r in rows])
        for seq, state, _, _ in rows:
            if state is State.QUEUED and prev.get(seq, State.QUEUED) is not State.QUEUED:
                # its queue row may be compacted away: re-admit it (forget + append)
                raise ValueError(f"seq {seq} is {prev[seq].name.lower()}: a done URL does "
                                 "not return to the frontier")
        now = time.time()
        self._begin()
        self._db.executemany("INSERT OR REPLACE INTO outcomes VALUES (?,?,?,?,?,?)",
                             [with_crc((seq, int(state), status, error, now))
                              for seq, state, status, error in rows])
        for seq, state, _, _ in rows:
            before, after = prev.get(seq, State.QUEUED), State(state)
            if before is not State.QUEUED:
                self._counts[before.name.lower()] -= 1
            if after is not State.QUEUED:
                self._counts[after.name.lower()] += 1
                self._queue.note_done(seq)
            prev[seq] = after
        self._end()

    def mark(self, seq: int, state: State, *, status: int | None = None,
             error: str | None = None) -> None:
        self.mark_many([(seq, state, status, error)])

    def _states(self, seqs: list[int]) -> dict[int, State]:
        """Current outcome state of each seq (absent = queued); refuses seqs that are
        not admissions, which would corrupt the counters."""
        batch: Batch | None = None
        for seq in sorted(set(seqs)):
            if batch is None or not batch.seq <= seq < batch.seq + batch.n:
                batch = self.batch_of(seq)
            if batch is None or batch.kind != ADMIT:
                raise ValueError(f"seq {seq} is not an admitted URL of this ledger")
        out: dict[int, State] = {}
        for row in select_in(self._db, f"SELECT seq, state, status, error, at, "
                             f"{self._crc['outcomes']} FROM outcomes WHERE seq IN ",
                             sorted(set(seqs))):
            seq, state, *_ = self._checked("outcomes", row)
            out[seq] = State(state)
        return out

    # -- reading ---------------------------------------------------------------

    def last_seq(self) -> int:
        """Highest seq ever handed out (writer: kept in memory; reader: last log row)."""
        if self.readonly:
            self._load_counters()
        return self._hwm

    def counts(self) -> dict[str, int]:
        """Per-state and admitted/forgotten counts from the kept counters: O(1)."""
        if self.readonly:
            self._load_counters()
        c = dict(self._counts)
        c["queued"] = c["admitted"] - sum(c[s.name.lower()] for s in _DONE)
        return c

    def recount(self) -> dict[str, int]:
        """The same numbers as ``counts()`` counted from the tables (a full scan):
        for ``check`` and tests, to prove the kept counters honest."""
        c = dict.fromkeys(_COUNTER_KEYS, 0)
        for kind, total in self._db.execute("SELECT kind, SUM(n) FROM log GROUP BY kind"):
            c["admitted" if kind == ADMIT else "forgotten"] = int(total)
        for state, total in self._db.execute(
                "SELECT state, COUNT(*) FROM outcomes WHERE state != 0 GROUP BY state"):
            c[State(state).name.lower()] = int(total)
        c["queued"] = c["admitted"] - sum(c[s.name.lower()] for s in _DONE)
        return c

    def batch_of(self, seq: int) -> Batch | None:
        """The log row holding ``seq`` (one B-tree seek), or None."""
        row = self._db.execute(f"SELECT seq, n, kind, depth, fps, {self._crc['log']} FROM log "
                               "WHERE seq <= ? ORDER BY seq DESC LIMIT 1", (seq,)).fetchone()
        if row is None or seq >= row[0] + row[1] or seq < 1:
            return None
        return Batch(*self._checked("log", row))

    def row(self, seq: int) -> JournalRow | None:
        """Everything about one seq: depth, kind, URL text if still queued, outcome."""
        batch = self.batch_of(seq)
        if batch is None:
            return None
        fp = batch.fps[(seq - batch.seq) * FP:(seq - batch.seq + 1) * FP]
        url, host = self._queue.text_of(seq, batch.seq)
        state = status = error = at = None
        if batch.kind == ADMIT:
            out = self._db.execute(f"SELECT seq, state, status, error, at, "
                                   f"{self._crc['outcomes']} FROM outcomes WHERE seq = ?",
                                   (seq,)).fetchone()
            if out is not None:
                out = self._checked("outcomes", out)[1:]
            state, status, error, at = (State(out[0]), *out[1:]) if out else (
                State.QUEUED, None, None, None)
        return JournalRow(seq, fp, batch.kind, batch.depth, url, host, state, status, error, at)

    def batches_after(self, seq: int, *, chunk: int = 65_536
                      ) -> Iterator[tuple[np.ndarray, bytes, np.ndarray]]:
        """Yield ``(seqs int64, fps, kinds uint8)`` for every seq past ``seq``, about
        ``chunk`` records at a time, by one sequential scan: the replay stream that
        brings the Bloom filter and the fingerprint index up to the ledger."""
        first = self.batch_of(seq + 1)
        cur = self._db.execute(f"SELECT seq, n, kind, depth, fps, {self._crc['log']} FROM log "
                               "WHERE seq >= ? ORDER BY seq", (first.seq if first else seq + 1,))
        rows: list[tuple] = []
        size = 0
        while True:
            more = cur.fetchmany(256)
            rows.extend((r[0], r[1], r[2], r[4]) for r in map(self._checked, repeat("log"), more))
            size += sum(r[1] for r in more)
            if more and size < chunk:
                continue
            if rows:
                seqs, fps, kinds = _flatten(rows)
                k = int(np.searchsorted(seqs, seq, side="right"))
                if k < len(seqs):
                    yield seqs[k:], fps[k * FP:], kinds[k:]
            if not more:
                return
            rows, size = [], 0

    def log_batches(self, after: int = 0) -> Iterator[Batch]:
        """Every log row whose seqs start past ``after``, in seq order (sequential)."""
        cur = self._db.execute(f"SELECT seq, n, kind, depth, fps, {self._crc['log']} FROM log "
                               "WHERE seq > ? ORDER BY seq", (after,))
        while rows := cur.fetchmany(1024):
            yield from (Batch(*self._checked("log", r)) for r in rows)

    def outcomes(self) -> Iterator[tuple[int, State, int | None, str | None, float]]:
        """Every outcome ``(seq, state, status, error, at)``, in seq order."""
        cur = self._db.execute(f"SELECT seq, state, status, error, at, {self._crc['outcomes']} "
                               "FROM outcomes ORDER BY seq")
        while rows := cur.fetchmany(4096):
            for row in rows:
                seq, st, *rest = self._checked("outcomes", row)
                yield (seq, State(st), *rest)

    # -- the frontier ------------------------------------------------------------

    def queued(self, limit: int, *, after_seq: int = 0,
               host: str | None = None) -> list[QueuedRow]:
        """Up to ``limit`` URLs not yet marked, past ``after_seq``, in seq order
        (optionally one host's, through the ``(host, id)`` index): the frontier's
        page-in, with ``after_seq`` = the last seq it got as the cursor."""
        return self._queue.queued(limit, after_seq, host)

    def queued_hosts(self) -> list[str]:
        """Hosts that have queue rows, sorted. Hosts whose rows are all done stay
        listed until ``compact_queue`` drops those rows."""
        return self._queue.hosts()

    def queue_groups(self) -> Iterator[tuple[str, int, np.ndarray, list[str]]]:
        """Every kept queue row as ``(host, depth, seqs, urls)``, in id order."""
        return self._queue.groups()

    def compact_queue(self, *, full: bool = False) -> int:
        """Delete queue rows all of whose URLs are marked done; return how many.

        Only rows holding seqs marked since the last call are examined (a few
        seeks per mark), so it is cheap at snapshot time; ``full=True`` scans the
        whole queue (after a crash lost that memory, or after a migration)."""
        ids = self._queue.done_rows(full=full)
        if ids:
            self._begin()
            self._queue.drop(ids)
            self._end()
        return len(ids)

    # -- notes: a caller's text on runs of seqs, and first holders of content ------

    def note_runs(self, rows: Iterable[tuple[int, int, str | None]]) -> None:
        """``(first seq, last seq, text)``: where a run of admitted keys came from
        (the crawler: the page its URLs were found on), in the open transaction."""
        rows = list(rows)
        if rows:
            self._begin()
            if self._notes_top is None:
                self._notes_top = self._db.execute(
                    "SELECT COALESCE(MAX(first), -1) FROM notes").fetchone()[0]
            self._db.executemany("INSERT OR REPLACE INTO notes VALUES (?,?,?,?)",
                                 [with_crc(r) for r in rows])
            self._remember_notes(rows)
            self._end()

    def _remember_notes(self, rows: list[tuple[int, int, str | None]]) -> None:
        """Keep the newest runs in RAM for ``note_of``: a crawl asks for the run of
        every page it fetches, mostly runs it noted minutes before, and a SQLite
        query a page was a visible share of the crawl loop's CPU. The cache holds
        every run whose first seq is at least its oldest one's (runs only ever come
        above every stored one; anything else empties it), so a hit or a miss in
        its range answers exactly as the table would."""
        firsts, runs = self._note_firsts, self._note_runs
        for r in sorted(rows, key=lambda r: r[0]):  # a group's runs come in page order
            first = r[0]
            assert self._notes_top is not None
            if first > self._notes_top:
                firsts.append(first)
                runs.append(r)
                self._notes_top = first
            else:  # a run at or below a stored one: the cache could miss a replacement
                firsts.clear()
                runs.clear()
        if len(firsts) > _NOTES_KEPT:
            del firsts[:_NOTES_KEPT // 2], runs[:_NOTES_KEPT // 2]

    def note_of(self, seq: int) -> str | None:
        """The text of the run holding ``seq`` (None: no run, or no text)."""
        firsts = self._note_firsts
        if firsts and seq >= firsts[0]:
            _, last, text = self._note_runs[bisect_right(firsts, seq) - 1]
            return text if last >= seq else None
        try:
            row = self._db.execute(f"SELECT first, last, text, {self._crc['notes']} FROM notes "
                                   "WHERE first <= ? ORDER BY first DESC LIMIT 1",
                                   (seq,)).fetchone()
        except sqlite3.OperationalError:  # a read-only ledger from before the table
            return None
        if row is None:
            return None
        _, last, text = self._checked("notes", row)
        return text if last >= seq else None

    def notes(self) -> Iterator[tuple[int, int, str | None]]:
        """Every run of ``notes`` as ``(first, last, text)``, in seq order (what repair
        carries over, renumbered); none in a read-only ledger from before the table."""
        yield from self._checked_rows("notes", "first, last, text", "first")

    def contents(self) -> Iterator[tuple[str, str, str]]:
        """Every ``contents`` row as ``(digest, name, date)``, in digest order."""
        yield from self._checked_rows("contents", "digest, name, at", "digest")

    def _checked_rows(self, table: str, columns: str, order: str) -> Iterator[tuple]:
        try:
            cur = self._db.execute(f"SELECT {columns}, {self._crc[table]} FROM {table} "
                                   f"ORDER BY {order}")
        except sqlite3.OperationalError:  # a read-only ledger from before the table
            return
        while rows := cur.fetchmany(4096):
            yield from (self._checked(table, r) for r in rows)

    def content_first(self, digest: str) -> tuple[str, str] | None:
        """``(name, date)`` stored with ``digest`` first (``content_add``), or None."""
        try:
            row = self._db.execute(f"SELECT digest, name, at, {self._crc['contents']} "
                                   "FROM contents WHERE digest = ?", (digest,)).fetchone()
        except sqlite3.OperationalError:
            return None
        if row is None:
            return None
        _, name, at = self._checked("contents", row)
        return name, at

    def content_firsts(self, digests: Iterable[str]) -> dict[str, tuple[str, str]]:
        """``content_first`` of many digests, by digest (the ones stored): one query a
        500 digests, where a group commit asked once a page."""
        wanted = list(dict.fromkeys(digests))
        out: dict[str, tuple[str, str]] = {}
        for i in range(0, len(wanted), 500):
            part = wanted[i:i + 500]
            try:
                rows = self._db.execute(
                    f"SELECT digest, name, at, {self._crc['contents']} FROM contents "
                    f"WHERE digest IN ({','.join('?' * len(part))})", part).fetchall()
            except sqlite3.OperationalError:
                return {}
            for row in rows:
                digest, name, at = self._checked("contents", row)
                out[digest] = (name, at)
        return out

    def content_add(self, rows: Iterable[tuple[str, str, str]]) -> None:
        """``(digest, name, date)``: the first holder of each digest (a later add of
        the same digest keeps the first), in the open transaction."""
        rows = list(rows)
        if rows:
            self._begin()
            self._db.executemany("INSERT OR IGNORE INTO contents VALUES (?,?,?,?)",
                                 [with_crc(r) for r in rows])
            self._end()

    # -- what a crawl learns: content prints, rules, held URLs (dedup.journal.learned) --

    @property
    def learned(self) -> LearnedTables:
        """The learned tables, to read (writes go through the methods below, which
        join the open transaction)."""
        return self._learned

    def learned_write(self, table: str, rows: Iterable[Any]) -> None:
        """Rows into a learned table (``LearnedTables.write``: ``prints``, ``rules``,
        ``held``; ``unheld``: held seqs to delete), in the open transaction."""
        rows = list(rows)
        if rows:
            self._begin()
            self._learned.write(table, rows)
            self._end()

    # -- metadata ----------------------------------------------------------------

    def meta_get(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else self._json(key, row[0])

    def meta_items(self) -> dict[str, Any]:
        """Every caller-set meta value (not the journal's own ``format``/``counters``)."""
        return {k: self._json(k, v) for k, v in self._db.execute(
            "SELECT key, value FROM meta WHERE key NOT IN ('format', 'counters')")}

    def _json(self, key: str, text: str) -> Any:
        """A meta value: the journal only writes JSON there, so text that is not is a
        damaged page (meta rows carry no checksum; this is their check)."""
        try:
            return json.loads(text)
        except ValueError as exc:
            raise LedgerDamaged(f"{self.path}: meta {key!r} is not JSON ({exc}): the ledger "
                                "is damaged") from None

    def meta_set(self, key: str, value: Any) -> None:
        """Store a JSON value; ``format`` and ``counters`` belong to the journal."""
        if key in ("format", "counters"):
            raise ValueError(f"meta key {key!r} is kept by the journal itself")
        self._begin()
        self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                         (key, json.dumps(value, sort_keys=True)))
        self._end()

    # -- transactions ------------------------------------------------------------

    def _begin(self) -> None:
        if self.readonly:
            raise PermissionError(f"{self.path}: opened read-only")
        if not self._db.in_transaction:
            self._db.execute("BEGIN IMMEDIATE")

    def _end(self) -> None:
        if self.autocommit:
            self.commit()

    def _forget_notes(self) -> None:
        self._note_firsts.clear()
        self._note_runs.clear()
        self._notes_top = None

    def commit(self) -> None:
        """Write the kept counters, then COMMIT: they become durable with their rows."""
        if self._db.in_transaction:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('counters', ?)",
                             (json.dumps(self._counts, sort_keys=True),))
            self._db.execute("COMMIT")

    def sync(self) -> None:
        """Make every committed transaction durable: fsync the WAL. A commit only
        writes it (``synchronous=NORMAL``: a kill -9 loses nothing committed, a power
        cut may lose the commits since the last checkpoint, which syncs the WAL then
        the file, and syncs the WAL's header when it starts it again). A caller that
        records elsewhere, durably, how far the ledger goes (a snapshot's mark) syncs
        it first. One fdatasync on its own descriptor: safe from another thread while
        this connection commits (what it writes after the call began may or may not
        be covered)."""
        wal = Path(f"{self.path}-wal")
        for path in (wal, self.path):  # no WAL (never written, or closed): the file
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            return

    def rollback(self) -> None:
        """Discard every uncommitted write, exactly as a crash would."""
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
        self._load_counters()
        self._forget_notes()

    @property
    def in_transaction(self) -> bool:
        """Writes are waiting for ``commit`` (the open transaction)."""
        return self._db.in_transaction

    def close(self, *, commit: bool = True) -> None:
        """Close the connection; pending group-commit writes are committed first, or
        with ``commit=False`` discarded, exactly as a crash would."""
        if not self.readonly:
            if commit:
                self.commit()
            elif self._db.in_transaction:
                self._db.execute("ROLLBACK")
        self._db.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _flatten(rows: list[tuple]) -> tuple[np.ndarray, bytes, np.ndarray]:
    """Log rows ``(seq, n, kind, fps)`` as one run of per-seq arrays."""
    starts = np.fromiter((r[0] for r in rows), np.int64, len(rows))
    ns = np.fromiter((r[1] for r in rows), np.int64, len(rows))
    kinds = np.repeat(np.fromiter((r[2] for r in rows), np.uint8, len(rows)), ns)
    before = np.cumsum(ns) - ns
    seqs = np.arange(int(ns.sum()), dtype=np.int64) + np.repeat(starts - before, ns)
    return seqs, b"".join(r[3] for r in rows), kinds
