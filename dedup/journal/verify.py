"""Checking a whole ledger before it is trusted: SQLite's structure, then every row.

Why both: SQLite checks the structure of its pages, never what the rows hold (a
flipped byte inside a fingerprint blob reads back as another key), so every row
carries a checksum (``dedup.journal.format.row_crc``) and each is read once; and
a row scan never reads some pages (the queue's ``(host, id)`` index the frontier
pages in by, the free-page list the next insert takes from), whose damage would
otherwise show only in the middle of a crawl, so ``PRAGMA quick_check`` runs
first (one sequential pass, about a third of the rows' time).

A table goes through the compiled pass first (``dedup/native/_rowcrc.c``: ~7x
faster, no Python object a row: bench/README.md, "Ledger verify"); a table it does
not confirm, and every table where it did not build, through the Python loop,
which names the damaged row or raises what SQLite or the sqlite3 module raised.
"""

from __future__ import annotations

import functools
import importlib
import os
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from dedup.base.errors import LedgerDamaged
from dedup.journal.format import ROW_COLUMNS, crc_ok
from dedup.native import compiled

__all__ = ["verify_ledger"]


def verify_ledger(db: sqlite3.Connection, path: Path, tables: Mapping[str, str],
                  damaged: Callable[[str, object], LedgerDamaged],
                  meta_value: Callable[[str, str], Any]) -> int:
    """Check the ledger open on ``db`` (the file ``path``): its structure, then every
    row of ``tables`` (name -> its crc column, "NULL" where it has none) against its
    checksum and every ``meta`` value (``meta_value(key, text)`` raises if it is not
    one). ``damaged(table, rowid)`` is the error of a row failing its checksum.
    Raises LedgerDamaged at the first damage; returns the rows read."""
    _check_structure(db, path)
    n = 0
    for table, crc in tables.items():
        sql = f"SELECT {', '.join(ROW_COLUMNS[table])}, {crc} FROM {table}"
        rows = _scan_compiled(db, sql)
        n += rows if rows is not None else _verify_rows(db, path, table, sql, damaged,
                                                       meta_value)
    return n + _verify_rows(db, path, "meta", "SELECT key, value FROM meta", damaged,
                            meta_value)


def _check_structure(db: sqlite3.Connection, path: Path) -> None:
    """Raise LedgerDamaged with SQLite's first complaint unless quick_check says ok."""
    try:
        found = db.execute("PRAGMA quick_check(1)").fetchone()
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError):
            raise
        raise LedgerDamaged(f"{path}: {exc}") from exc
    if found is None or found[0] != "ok":
        what = " ".join(str(found[0] if found else "no answer").split())
        raise LedgerDamaged(f"{path}: SQLite's structure check: {what}")


@functools.cache
def _same_sqlite(rowcrc: ModuleType) -> bool:
    """Whether the compiled checksum pass links the SQLite library the sqlite3 module
    uses: it opens its own connection, and two copies of SQLite in one process do
    not see each other's locks."""
    module = getattr(importlib.import_module("_sqlite3"), "__file__", None)
    return module is not None and rowcrc.same_sqlite(os.fsencode(module))


def _scan_compiled(db: sqlite3.Connection, sql: str) -> int | None:
    """The compiled pass's row count, None where it did not confirm every row or
    cannot run: it opens the ledger on its own connection, which sees only what
    is committed, so not while ``db`` holds an open transaction."""
    rowcrc = compiled.rowcrc  # looked up at each call, as the store's kernels are
    if rowcrc is None or db.in_transaction or not _same_sqlite(rowcrc):
        return None
    # the file this connection has open (a relative path would follow the cwd)
    file = next(r[2] for r in db.execute("PRAGMA database_list") if r[1] == "main")
    return rowcrc.scan(os.fsencode(file), sql) if file else None


def _verify_rows(db: sqlite3.Connection, path: Path, table: str, sql: str,
                 damaged: Callable[[str, object], LedgerDamaged],
                 meta_value: Callable[[str, str], Any]) -> int:
    """The Python loop over one table (``meta``: its JSON values)."""
    n = 0
    try:
        cur = db.execute(sql)
        while rows := cur.fetchmany(4096):
            n += len(rows)
            for row in rows:
                if table == "meta":
                    meta_value(*row)
                elif not crc_ok(row):
                    raise damaged(table, row[0])
    except (sqlite3.DatabaseError, ValueError) as exc:
        if isinstance(exc, LedgerDamaged | sqlite3.OperationalError):
            raise
        raise LedgerDamaged(f"{path}: {exc}") from exc
    return n
