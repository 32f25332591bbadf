"""Format-1 ledger (bloomcrawl 0.1), kept only so tests can build old state dirs and
check that format 2 refuses or migrates them. Its original docstring follows.

The exact truth behind the Bloom filter: one SQLite row per canonical URL.

The Bloom filter may say "maybe seen" for a URL it never saw; the ledger is what
turns that into an exact answer. It is also the durable frontier (rows in state
QUEUED) and the crash-recovery log: every row has a monotonically increasing
``seq`` and each shard snapshot records the highest ``seq`` whose bits it holds,
so rows past that mark are replayed into the filter on load.

``seq`` is an AUTOINCREMENT key on purpose: a plain rowid may be reused after the
newest row is deleted (``forget``), and a reused number at or below a snapshot's
high-water mark would never be replayed — a false negative.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dedup.journal.format import QueuedRow, State  # the same values as format 1's

# SQLite >= 3.32 allows 32766 host parameters; stay well below it.
_CHUNK = 30_000
# Rows per multi-row INSERT (6 parameters each).
_INSERT_ROWS = 1000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS urls (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    fp            BLOB    NOT NULL UNIQUE,
    url           TEXT    NOT NULL,
    host          TEXT    NOT NULL,
    depth         INTEGER NOT NULL DEFAULT 0,
    state         INTEGER NOT NULL DEFAULT 0,
    status        INTEGER,
    error         TEXT,
    discovered_at REAL    NOT NULL,
    updated_at    REAL
);
CREATE INDEX IF NOT EXISTS urls_queued_host ON urls(host, seq) WHERE state = 0;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_COLUMNS = "fp, url, host, depth, state, status, error, discovered_at, updated_at"


class Ledger:
    """SQLite (WAL) table of every URL ever admitted, keyed by its 16-byte fingerprint.

    One writer (the process that owns the state dir); readers such as
    ``bloomcrawl stats`` may open it concurrently with ``readonly=True``.

    With ``autocommit=False`` writes accumulate in one open transaction until
    ``commit()`` (group commit): a commit costs a few hundred microseconds of WAL
    writes here, far more than a page's worth of inserts, so a crawler commits
    a batch of pages — their links and their fetch outcomes — atomically.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False,
                 autocommit: bool = True) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.autocommit = autocommit
        if readonly:
            if not self.path.exists():
                raise FileNotFoundError(f"no ledger at {self.path}")
            uri = f"file:{self.path}?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, isolation_level=None,
                                       check_same_thread=False)
        else:
            self._db = sqlite3.connect(self.path, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a process crash loses nothing; a power loss may
            # lose the last commits but never corrupts (and the filter only ever
            # errs towards "maybe seen", which the ledger then answers).
            self._db.execute("PRAGMA synchronous=NORMAL")
            # The fingerprint index takes random inserts, so every group commit
            # dirties pages all over it; checkpointing every 1000 WAL pages (the
            # default) copies and fsyncs the same pages back many times over.
            self._db.execute("PRAGMA wal_autocheckpoint=10000")
            self._db.executescript(_SCHEMA)
        self._db.execute("PRAGMA busy_timeout=5000")

    # -- the URL-seen hot path -------------------------------------------------

    def find(self, fps: Sequence[bytes]) -> set[bytes]:
        """Return the subset of ``fps`` present in the ledger: one query per batch."""
        found: set[bytes] = set()
        for i in range(0, len(fps), _CHUNK):
            chunk = fps[i:i + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(f"SELECT fp FROM urls WHERE fp IN ({marks})", chunk)
            found.update(r[0] for r in rows)
        return found

    def insert(self, rows: Sequence[tuple[bytes, str, str, int, int]]) -> range:
        """Insert new rows ``(fp, url, host, depth, state)`` in one transaction.

        Returns the range of ``seq`` numbers given to them, in order. The caller
        guarantees the fingerprints are absent (it just asked ``find``), and this
        connection is the only writer, so the numbers are consecutive.
        """
        if not rows:
            return range(0)
        now = time.time()
        flat = [v for fp, url, host, depth, state in rows
                for v in (fp, url, host, depth, int(state), now)]
        if len(rows) <= _INSERT_ROWS:
            # One multi-row INSERT is atomic by itself (a failing statement is
            # backed out whole): no savepoint, and its last rowid is the last seq.
            # Measured 1.4x faster for a page's ~10 rows than executemany in a
            # savepoint plus a sqlite_sequence query.
            self._begin()
            last = self._insert_rows(flat)
        else:
            with self._transaction():
                step = _INSERT_ROWS * 6
                for i in range(0, len(flat), step):
                    last = self._insert_rows(flat[i:i + step])
        return range(last - len(rows) + 1, last + 1)

    def _insert_rows(self, flat: list[Any]) -> int:
        """INSERT the rows whose 6 values each ``flat`` holds; the last row's seq."""
        cur = self._db.execute(
            "INSERT INTO urls (fp, url, host, depth, state, discovered_at) VALUES "
            + ",".join(["(?,?,?,?,?,?)"] * (len(flat) // 6)), flat)
        return int(cur.lastrowid)  # type: ignore[arg-type]

    def last_seq(self) -> int:
        """Highest ``seq`` ever handed out (deleted rows included)."""
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'urls'").fetchone()
        return int(row[0]) if row else 0

    def fps_after(self, seq: int, *, chunk: int = 65_536) -> Iterator[tuple[list[int], bytes]]:
        """Yield ``(seqs, concatenated fingerprints)`` of rows past ``seq``, in chunks.

        This is the replay stream that closes the gap between a shard snapshot
        and the ledger after a crash.
        """
        cur = self._db.execute("SELECT seq, fp FROM urls WHERE seq > ? ORDER BY seq", (seq,))
        while batch := cur.fetchmany(chunk):
            yield [r[0] for r in batch], b"".join(r[1] for r in batch)

    # -- rows ------------------------------------------------------------------

    def get(self, fp: bytes) -> dict[str, Any] | None:
        cur = self._db.execute(
            "SELECT seq, url, host, depth, state, status, error, discovered_at, updated_at "
            "FROM urls WHERE fp = ?", (fp,))
        row = cur.fetchone()
        if row is None:
            return None
        names = [d[0] for d in cur.description]
        out = dict(zip(names, row, strict=True))
        out["state"] = State(out["state"]).name.lower()
        return out

    def forget(self, fps: Iterable[bytes]) -> int:
        """Delete rows so that the URLs count as new again (re-crawl / expiry)."""
        fps = list(fps)
        deleted = 0
        with self._transaction():
            for i in range(0, len(fps), _CHUNK):
                chunk = fps[i:i + _CHUNK]
                marks = ",".join("?" * len(chunk))
                deleted += self._db.execute(
                    f"DELETE FROM urls WHERE fp IN ({marks})", chunk).rowcount
        return deleted

    def mark(self, seq: int, state: State, *, status: int | None = None,
             error: str | None = None) -> None:
        self.mark_many([(seq, state, status, error)])

    def mark_many(self, rows: Iterable[tuple[int, State, int | None, str | None]]) -> None:
        """Record fetch outcomes in one transaction."""
        now = time.time()
        with self._transaction():
            self._db.executemany(
                "UPDATE urls SET state = ?, status = ?, error = ?, updated_at = ? WHERE seq = ?",
                [(int(state), status, error, now, seq) for seq, state, status, error in rows],
            )

    def queued(self, limit: int, *, after_seq: int = 0, host: str | None = None) -> list[QueuedRow]:
        """Page in the durable frontier, oldest first (optionally for one host).

        Without ``host`` this walks the primary key from ``after_seq``; callers
        page forward with a cursor, so the walk does not revisit old rows."""
        if host is None:
            cur = self._db.execute(
                "SELECT seq, url, host, depth FROM urls WHERE state = 0 AND seq > ? "
                "ORDER BY seq LIMIT ?", (after_seq, limit))
        else:
            cur = self._db.execute(
                "SELECT seq, url, host, depth FROM urls WHERE state = 0 AND host = ? "
                "AND seq > ? ORDER BY seq LIMIT ?", (host, after_seq, limit))
        return [QueuedRow(*r) for r in cur]

    def queued_hosts(self) -> list[str]:
        return [r[0] for r in self._db.execute(
            "SELECT DISTINCT host FROM urls WHERE state = 0 ORDER BY host")]

    def counts(self) -> dict[str, int]:
        """Rows per state. A full scan: for reports, not for a per-page path."""
        out = {s.name.lower(): 0 for s in State}
        for state, n in self._db.execute("SELECT state, COUNT(*) FROM urls GROUP BY state"):
            out[State(state).name.lower()] = n
        return out

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM urls").fetchone()[0]

    # -- bulk copy (fleet merge / resize) --------------------------------------

    def rows(self, *, chunk: int = 10_000) -> Iterator[tuple]:
        """Every row as ``(fp, url, host, depth, state, status, error, discovered_at,
        updated_at)``, in ``seq`` order: the portable form used to merge and split ledgers."""
        cur = self._db.execute(f"SELECT {_COLUMNS} FROM urls ORDER BY seq")
        while batch := cur.fetchmany(chunk):
            yield from batch

    def import_rows(self, rows: Iterable[tuple]) -> int:
        """Insert rows in the form ``rows()`` yields; fingerprints already present are
        kept as they are (union by fingerprint). Returns how many were added."""
        added = 0
        batch: list[tuple] = []
        with self._transaction():
            for row in rows:
                batch.append(tuple(row))
                if len(batch) >= 10_000:
                    added += self._import(batch)
                    batch.clear()
            added += self._import(batch)
        return added

    def _import(self, batch: list[tuple]) -> int:
        before = self._db.total_changes
        self._db.executemany(
            f"INSERT OR IGNORE INTO urls ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", batch)
        return self._db.total_changes - before

    # -- metadata --------------------------------------------------------------

    def meta_get(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def meta_set(self, key: str, value: Any) -> None:
        with self._transaction():
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                             (key, json.dumps(value, sort_keys=True)))

    # -- plumbing --------------------------------------------------------------

    def _begin(self) -> None:
        """In group-commit mode, open the transaction the next ``commit()`` ends."""
        if not self.autocommit and not self._db.in_transaction:
            self._db.execute("BEGIN IMMEDIATE")

    def _transaction(self) -> _Transaction:
        self._begin()
        return _Transaction(self._db)

    def commit(self) -> None:
        """Make every pending write durable (a no-op in autocommit mode)."""
        if self._db.in_transaction:
            self._db.execute("COMMIT")

    @property
    def pending(self) -> bool:
        return self._db.in_transaction

    def close(self) -> None:
        """Close the connection; pending group-commit writes are committed first."""
        if not self.readonly:
            self.commit()
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Transaction:
    """A savepoint: all of one batch or none of it.

    Outside a transaction a savepoint is itself a transaction (committed on
    release); inside the group-commit transaction it only undoes its own batch.
    """

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("SAVEPOINT batch")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type:
            self._db.execute("ROLLBACK TO batch")
        self._db.execute("RELEASE batch")
