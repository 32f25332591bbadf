"""Bring a format-1 state directory (one SQLite row per URL) to ledger format 2.

The old ledger is kept beside the new one as ``ledger.v1.sqlite`` (a backup, and
what a migration interrupted by a crash starts again from). Seqs are renumbered
(format 1 has gaps where rows were forgotten), so the shard snapshots' marks no
longer apply: the shards and the fingerprint index are rebuilt from the new ledger.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

from dedup.base.atomic import fsync_dir
from dedup.journal.journal import Journal
from dedup.journal.transfer import migrate_v1
from dedup.store.ledger import INDEX_SUFFIX
from dedup.store.seen import UrlSeen
from dedup.store.statedir import LEDGER_FILE, PathArg, ledger_path, lock, shards_dir

V1_BACKUP = "ledger.v1.sqlite"
_PARTIAL = "ledger.v2.partial"


def is_format1(path: PathArg) -> bool:
    """True for a format-1 ledger file (table ``urls`` and no ``log``)."""
    db = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        db.close()
    return "urls" in tables and "log" not in tables


def migrate(state_dir: PathArg) -> int:
    """Migrate ``state_dir`` in place; returns the rows moved. Refuses a directory in
    use (its lock) and one that is already format 2."""
    d = Path(state_dir)
    current, backup, partial = ledger_path(d), d / V1_BACKUP, d / _PARTIAL
    fd = lock(d)
    try:
        if current.is_file():
            if not is_format1(current):
                raise ValueError(f"{d}: the ledger is already format 2; nothing to migrate")
            if backup.exists():
                raise FileExistsError(f"{d}: {V1_BACKUP} exists beside a format-1 ledger; "
                                      "move one of them away first")
            _checkpoint(current)
            os.replace(current, backup)
            fsync_dir(d)
        elif not backup.is_file():
            raise FileNotFoundError(f"{d}: not a bloomcrawl state directory (no {LEDGER_FILE})")
        # else: an interrupted migration, started again from the kept format-1 ledger
        for name in (partial.name, partial.name + "-wal", partial.name + "-shm"):
            (d / name).unlink(missing_ok=True)
        # Old shard marks name old seqs: they go before the new ledger takes its
        # place, or a renumbered row at or below a mark would never be replayed.
        shutil.rmtree(current.with_name(current.stem + INDEX_SUFFIX), ignore_errors=True)
        shutil.rmtree(shards_dir(d), ignore_errors=True)
        with Journal(partial, autocommit=False) as journal:
            moved = migrate_v1(backup, journal)
        os.replace(partial, current)
        fsync_dir(d)
    finally:
        os.close(fd)
    UrlSeen.rebuild(d).close()
    return moved


def _checkpoint(path: Path) -> None:
    """Fold the old ledger's WAL into its file, so renaming the file moves every row."""
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
