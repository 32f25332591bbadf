"""The compiled row checksum pass (dedup/native/_rowcrc.c) against the Python path.

``Journal.verify`` checks each table with ``_rowcrc.scan`` first; the pass answers
"every row matched" (a count) or None, and on None the table goes through the Python
loop. So the two must agree on every row: the pass computes ``row_crc`` byte for
byte (every kind of SQLite value, text that Python's repr escapes, floats, long
values), never confirms a row the Python loop refuses, and ``verify`` ends the same
way (same count, same error) whichever runs. Its guards refuse wrong arguments."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from enum import IntEnum
from pathlib import Path

import pytest

from dedup.base.errors import LedgerDamaged
from dedup.journal.format import (
    ROW_COLUMNS,
    HeldRow,
    PrintRow,
    RuleRow,
    row_crc,
    with_crc,
    with_crcs,
)
from dedup.journal.journal import Journal
from dedup.native import compiled
from dedup.store.ledger import State
from tests.dedup.conftest import require_kernel

TEXTS = ["", "plain", "it's", 'say "hi"', "both ' and \"", "back\\slash", "tab\there",
         "new\nline", "nul\x00byte", "del\x7f", "café", "日本語", "emoji \U0001f600",
         "\u200b zero width", "\x85 next line", "x" * 10_000, "é" * 5_000]
FLOATS = [0.0, -0.0, 1.0, 0.1, 1 / 3, -2.5, 1e16, 1e15, 123456789.123, 1e-5, 1e-4, 5e-324,
          1.7976931348623157e308, float("inf"), float("-inf"), 1764093000.123456]
INTS = [0, 1, -1, 255, 2**31, 2**32 - 1, 2**63 - 1, -(2**63), 10**18]
BLOBS = [b"", b"\x00", bytes(range(256)), b"\xff" * 5_000, os.urandom(100_000)]


@pytest.fixture(autouse=True)
def _kernel() -> None:
    require_kernel()


def scan(path: Path, sql: str) -> int | None:
    return compiled.rowcrc.scan(os.fsencode(path), sql)


def table_of(path: Path, rows: list[tuple]) -> None:
    """A table ``t(a, b, c, crc)`` holding ``rows`` with their crcs computed by
    row_crc from the values as the sqlite3 module reads them back."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a, b, c, crc INTEGER)")
    con.executemany("INSERT INTO t (a, b, c) VALUES (?, ?, ?)", rows)
    for rowid, *values in con.execute("SELECT rowid, a, b, c FROM t").fetchall():
        con.execute("UPDATE t SET crc = ? WHERE rowid = ?", (row_crc(values), rowid))
    con.commit()
    con.close()


def every_value() -> list[tuple]:
    values = [*TEXTS, *FLOATS, *INTS, *BLOBS, None]
    rng = random.Random(7)
    rows = [(v, None, 1) for v in values]
    rows += [tuple(rng.choice(values) for _ in range(3)) for _ in range(300)]
    return rows


def test_the_compiled_crc_is_row_crc_on_every_kind_of_value(tmp_path: Path) -> None:
    """Each row's crc, written by row_crc, is confirmed by the pass: ints at the
    int64 ends, floats whose repr goes exponent or not, -0.0, infinities, text
    repr quotes with '"' or escapes, non-ASCII and long values (past the pass's
    4 KiB repr buffer), empty and long blobs."""
    db = tmp_path / "t.sqlite"
    rows = every_value()
    table_of(db, rows)
    assert scan(db, "SELECT a, b, c, crc FROM t") == len(rows)


class _Level(IntEnum):
    LOW = 1


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_with_crcs_is_with_crc_on_every_kind_of_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal's batch of rows (``with_crcs``) gives what ``with_crc`` gives row by
    row, compiled or not: every value above, and the ones only a Python row holds
    (ints past 64 bits, bool and IntEnum, whose repr is not their int's; a str or int
    subclass), rows of every length, the empty one included, lists as rows."""
    odd = [True, False, _Level.LOW, 2**64, -(2**70), float("nan"), type("S", (str,), {})("s"),
           type("I", (int,), {})(7)]
    values = [*TEXTS, *FLOATS, *INTS, *BLOBS, None, *odd]
    rng = random.Random(11)
    rows: list = [(v,) for v in values] + [()]
    rows += [tuple(rng.choice(values) for _ in range(rng.randrange(1, 9))) for _ in range(2000)]
    rows += [list(r) for r in rows[-50:]]
    expected = [with_crc(r) for r in rows]
    assert compiled.rowcrc.with_crcs(rows) == expected
    assert with_crcs(rows) == expected
    monkeypatch.setattr(compiled, "rowcrc", None)
    assert with_crcs(rows) == expected


def test_with_crcs_raises_what_repr_raises() -> None:
    """A value whose repr fails fails the batch as it fails ``with_crc`` (no row is
    written with a crc that was not computed); so does a row that is no sequence."""
    with pytest.raises(RuntimeError, match="no repr"):
        compiled.rowcrc.with_crcs([(1, "a"), (2, _BadRepr())])
    with pytest.raises(TypeError):
        compiled.rowcrc.with_crcs([(1, "a"), 5])
    with pytest.raises(TypeError):
        compiled.rowcrc.with_crcs(5)


def test_a_crc_off_by_one_bit_is_never_confirmed(tmp_path: Path) -> None:
    """Any row whose crc differs from row_crc makes the pass answer None (the Python
    loop then names it); so does a crc that is text, a blob or a float."""
    db = tmp_path / "t.sqlite"
    rows = every_value()[:60]
    table_of(db, rows)
    con = sqlite3.connect(db)
    crcs = con.execute("SELECT rowid, crc FROM t").fetchall()
    for rowid, crc in crcs[::3]:
        for bad in (crc ^ 1, crc ^ 0x80000000, str(crc) + "x", b"\x00", crc + 0.5):
            con.execute("UPDATE t SET crc = ? WHERE rowid = ?", (bad, rowid))
            con.commit()
            assert scan(db, "SELECT a, b, c, crc FROM t") is None, (rowid, bad)
        con.execute("UPDATE t SET crc = ? WHERE rowid = ?", (crc, rowid))
        con.commit()
    con.execute("UPDATE t SET crc = NULL WHERE rowid = 1")  # from before the column
    con.commit()
    con.close()
    assert scan(db, "SELECT a, b, c, crc FROM t") == len(rows)


def test_text_that_is_not_utf8_is_left_to_the_python_loop(tmp_path: Path) -> None:
    """The sqlite3 module refuses such text when it reads it; the pass does not
    confirm its row, even with a NULL crc, so verify raises what it always raised."""
    db = tmp_path / "t.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (a, crc INTEGER)")
    con.execute("INSERT INTO t VALUES (CAST(x'61ff62' AS TEXT), NULL)")
    con.commit()
    con.close()
    assert scan(db, "SELECT a, crc FROM t") is None


def ledger(path: Path) -> None:
    """A small ledger with rows in every checked table, committed and closed."""
    with Journal(path) as j:
        for page in range(40):
            urls = [f"http://h{page % 3}.test/{page}/{i}?q='{i}'" for i in range(5)]
            urls.append(f"http://xn--caf-dma.test/é/{page}")
            fps = b"".join(bytes([page, i]) * 8 for i in range(len(urls)))
            j.append(fps, depth=page % 4, urls=urls)
        j.mark_many([(s, State.FETCHED, 200, None) for s in range(1, 60)])
        j.mark_many([(s, State.FAILED, None, "timeout 'x' \u2014") for s in range(60, 90)])
        j.note_runs([(1, 6, "http://h0.test/from"), (7, 12, "http://h1.test/é")])
        j.content_add([("sha1:AAAA", "http://h0.test/0/0", "2026-11-25T00:00:00Z")])
        j.learned_write("prints", [
            PrintRow(s, "h0.test", f"http://h0.test/{s}", "sha1:B", (1 << 63) + s,
                     None if s % 2 else s - 1, s, s % 3) for s in range(1, 7)])
        j.learned_write("rules", [
            RuleRow(i, "h0.test", {"kind": "drop_params", "names": [f"p{i}"]}, "accepted",
                    {"pairs": i}) for i in range(1, 4)])
        j.learned_write("held", [
            HeldRow(s, "h1.test", 0, "1", f"http://h1.test/{s}?sid=é",
                    f"http://h1.test/{s}?sid=%C3%A9", 1) for s in range(60, 66)])
        j.commit()


def outcome(path: Path, impl: str, monkeypatch: pytest.MonkeyPatch) -> object:
    """How ``verify`` on ``path`` ends: its count, or its error's type and text."""
    with monkeypatch.context() as m:
        if impl == "python":
            m.setattr(compiled, "rowcrc", None)
        try:
            with Journal(path, readonly=True) as j:
                return j.verify()
        except (sqlite3.Error, LedgerDamaged, ValueError) as exc:
            return type(exc).__name__, str(exc)


def test_verify_ends_the_same_both_ways_for_every_changed_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every column of a row of every table changed behind the journal's back (its
    crc left as it was): verify names the same row both ways; unchanged, both read
    the same count of rows. The compiled pass runs (it confirms the clean ledger)."""
    db = tmp_path / "ledger.sqlite"
    ledger(db)
    clean = outcome(db, "python", monkeypatch)
    assert isinstance(clean, int) and clean > 100
    assert outcome(db, "compiled", monkeypatch) == clean
    with Journal(db, readonly=True) as j:
        for table in ROW_COLUMNS:
            assert scan(db, f"SELECT {', '.join(ROW_COLUMNS[table])}, crc FROM {table}") \
                == j._db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    con = sqlite3.connect(db)
    for table, columns in ROW_COLUMNS.items():
        key = columns[0]
        first = con.execute(f"SELECT {key} FROM {table} ORDER BY {key} LIMIT 1 OFFSET "
                            f"(SELECT count(*) / 2 FROM {table})").fetchone()[0]
        for column in columns:
            (old,) = con.execute(f"SELECT {column} FROM {table} WHERE {key} = ?", (first,))
            old = old[0]
            new = (old + b"\x00" if isinstance(old, bytes) else
                   old + "x" if isinstance(old, str) else
                   old + 1 if old is not None else 7)
            if column == key:  # a key no other row holds
                new = old[:-1] + "B" if isinstance(old, str) else old + 10**6
            con.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (new, first))
            con.commit()
            where = new if column == key else first
            got = outcome(db, "compiled", monkeypatch)
            assert got == outcome(db, "python", monkeypatch), (table, column)
            assert got[0] == "LedgerDamaged" and f"{table} row {where}" in got[1]
            con.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (old, where))
            con.commit()
    con.close()
    assert outcome(db, "compiled", monkeypatch) == clean


def test_verify_ends_the_same_both_ways_for_flipped_bytes_in_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A byte flipped anywhere in the ledger file past its schema page: verify gives
    the same count or the same error both ways (a row's checksum, a page SQLite
    cannot read, text that is not UTF-8), and finds at least the flips inside rows."""
    db = tmp_path / "ledger.sqlite"
    ledger(db)
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0
    data = db.read_bytes()
    bad = tmp_path / "bad.sqlite"
    rng = random.Random(11)
    positions = rng.sample(range(4096, len(data)), min(400, len(data) - 4096))
    damaged = 0
    for pos in positions:
        flipped = bytearray(data)
        flipped[pos] ^= 1 << rng.randrange(8)
        bad.write_bytes(flipped)
        got = outcome(bad, "compiled", monkeypatch)
        assert got == outcome(bad, "python", monkeypatch), pos
        damaged += not isinstance(got, int)
        for extra in ("-wal", "-shm"):
            Path(f"{bad}{extra}").unlink(missing_ok=True)
    assert damaged > 20


def test_verify_in_an_open_transaction_reads_its_uncommitted_rows(tmp_path: Path) -> None:
    """The pass's own connection sees only what is committed: with a transaction
    open, verify runs the Python loop over this connection, so the rows it just
    appended count (and are checked) as before."""
    db = tmp_path / "ledger.sqlite"
    ledger(db)
    with Journal(db, autocommit=False) as j:
        before = j.verify()
        j.append(b"\x01" * 32, depth=0, urls=["http://new.test/1", "http://new.test/2"])
        assert j.verify() == before + 2  # a log row and a queue row
        j.commit()
        assert j.verify() == before + 2


def test_verify_checks_the_file_its_connection_has_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A journal opened by a relative path keeps its file when the working directory
    changes: the pass opens the connection's file, not the path again (a sound
    ledger of that name elsewhere would otherwise be the one confirmed)."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    ledger(here / "ledger.sqlite")
    shutil.copy(here / "ledger.sqlite", there / "ledger.sqlite")
    con = sqlite3.connect(here / "ledger.sqlite")
    con.execute("UPDATE log SET depth = depth + 1 WHERE seq = 1")
    con.commit()
    con.close()
    monkeypatch.chdir(here)
    with Journal("ledger.sqlite", readonly=True) as j:
        monkeypatch.chdir(there)
        with pytest.raises(LedgerDamaged, match="log row 1 does not match"):
            j.verify()


# -- the guards ---------------------------------------------------------------------------


@pytest.fixture
def small(tmp_path: Path) -> Path:
    db = tmp_path / "t.sqlite"
    table_of(db, [(1, "a", b"b")])
    return db


def test_scan_refuses_a_path_that_is_not_bytes(small: Path) -> None:
    with pytest.raises(TypeError):
        compiled.rowcrc.scan(str(small), "SELECT a, b, c, crc FROM t")


def test_scan_refuses_a_path_with_a_nul_byte(small: Path) -> None:
    with pytest.raises(ValueError, match="NUL"):
        compiled.rowcrc.scan(os.fsencode(small) + b"\x00x", "SELECT a, b, c, crc FROM t")


def test_scan_refuses_sql_that_is_not_str(small: Path) -> None:
    with pytest.raises(TypeError):
        compiled.rowcrc.scan(os.fsencode(small), b"SELECT a, b, c, crc FROM t")


def test_scan_refuses_sql_with_a_nul_byte(small: Path) -> None:
    with pytest.raises(ValueError, match="NUL"):
        compiled.rowcrc.scan(os.fsencode(small), "SELECT a, b, c, crc FROM t\x00; DROP")


def test_scan_refuses_more_than_one_statement(small: Path) -> None:
    """Only the first would run: the rows of the rest would go unchecked."""
    with pytest.raises(ValueError, match="more than one statement"):
        scan(small, "SELECT a, b, c, crc FROM t; SELECT a, b, c, crc FROM t")
    assert scan(small, "SELECT a, b, c, crc FROM t \n") == 1


def test_scan_refuses_rows_of_fewer_than_two_columns(small: Path) -> None:
    """One column would be a crc of nothing: a caller's mistake, not a mismatch."""
    with pytest.raises(ValueError, match="not 1 column"):
        scan(small, "SELECT crc FROM t")


def test_scan_refuses_a_wrong_count_of_arguments(small: Path) -> None:
    with pytest.raises(TypeError):
        compiled.rowcrc.scan(os.fsencode(small))
    with pytest.raises(TypeError):
        compiled.rowcrc.scan(os.fsencode(small), "SELECT a, b, c, crc FROM t", 1)


def test_scan_leaves_what_it_cannot_run_to_the_caller(tmp_path: Path, small: Path) -> None:
    """No file, no such table, not SQL: None (the Python loop raises its error)."""
    assert scan(tmp_path / "absent.sqlite", "SELECT a, crc FROM t") is None
    assert scan(small, "SELECT a, crc FROM nothing") is None
    assert scan(small, "not sql at all") is None
    assert not (tmp_path / "absent.sqlite").exists()  # opened read-only: never created


def test_same_sqlite_refuses_a_path_that_is_not_bytes() -> None:
    import _sqlite3
    with pytest.raises(TypeError):
        compiled.rowcrc.same_sqlite(_sqlite3.__file__)
    with pytest.raises(ValueError, match="NUL"):
        compiled.rowcrc.same_sqlite(os.fsencode(_sqlite3.__file__) + b"\x00")


def test_same_sqlite_knows_the_sqlite3_modules_library(tmp_path: Path) -> None:
    """True for the sqlite3 module's _sqlite3; False for a file that is not a loaded
    module (it is not loaded to find out) and for a module without SQLite."""
    import _sqlite3
    assert compiled.rowcrc.same_sqlite(os.fsencode(_sqlite3.__file__))
    assert not compiled.rowcrc.same_sqlite(os.fsencode(tmp_path / "absent.so"))
    assert not compiled.rowcrc.same_sqlite(os.fsencode(compiled.kernel.__file__))


def test_a_resumes_verify_takes_the_compiled_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a resume runs (the seen-store reopened with autocommit off, then
    ``verify``) goes through the compiled pass, one scan a checked table: opening
    leaves no transaction open that would send it to the Python loop."""
    from dedup import UrlSeen
    with UrlSeen(tmp_path, capacity=64, shards=2, crawl_id="crawl") as seen:
        seen.filter_new([f"http://a.test/{i}" for i in range(10)])
    scans: list[str] = []
    real = compiled.rowcrc.scan
    monkeypatch.setattr(compiled.rowcrc, "scan", lambda path, sql: scans.append(sql)
                        or real(path, sql))
    seen = UrlSeen(tmp_path, create=False, autocommit=False)
    try:
        assert seen.verify() > 0
    finally:
        seen.close()
    assert [sql.rsplit(" ", 1)[-1] for sql in scans] == list(ROW_COLUMNS)
