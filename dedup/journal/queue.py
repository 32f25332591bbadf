"""The journal's frontier text: paging queued URLs in per host, dropping done rows.

Queue rows are one per (batch, host), keyed by the group's smallest seq; a URL
is queued while it has no outcome (or an outcome of state QUEUED). The table is
read through the ``(host, id)`` index for one host, by id for all hosts.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator

import numpy as np

from dedup.journal.format import QueuedRow, crc_ok, decode_group

_PARAMS = 30_000  # below SQLite's 32766 host parameters
_DONE_IN = "SELECT seq FROM outcomes WHERE seq IN "


def select_in(db: sqlite3.Connection, sql: str, values: list[int],
              suffix: str = "") -> Iterator[tuple]:
    """``sql (?, ?, ...) suffix`` over ``values`` in chunks SQLite accepts."""
    for i in range(0, len(values), _PARAMS):
        chunk = values[i:i + _PARAMS]
        yield from db.execute(f"{sql}({','.join('?' * len(chunk))}){suffix}", chunk)


def _batch_start(db: sqlite3.Connection, seq: int) -> int:
    """First seq of the log row holding ``seq`` (``seq`` itself past the log):
    a batch's groups all have ids in [its first seq, its last seq]."""
    row = db.execute("SELECT seq FROM log WHERE seq <= ? ORDER BY seq DESC LIMIT 1",
                     (seq,)).fetchone()
    return int(row[0]) if row else seq


class QueueTable:
    """The ``queue`` table of one journal connection (the journal owns the
    transaction; this class only reads and writes rows inside it)."""

    def __init__(self, db: sqlite3.Connection,
                 damaged: Callable[[str, object], Exception]) -> None:
        self._db = db
        self._damaged = damaged  # the journal's error for a row failing its checksum
        self.crc = "crc"  # the crc column, "NULL" in a ledger from before row checksums
        self._dirty: set[int] = set()  # seqs marked done since the last compaction

    def _checked(self, rows: list[tuple]) -> list[tuple]:
        """Rows read as ``(id, host, depth, seqs, urls, crc)``, crc dropped once checked."""
        for row in rows:
            if not crc_ok(row):
                raise self._damaged("queue", row[0])
        return [row[:-1] for row in rows]

    def queued(self, limit: int, after_seq: int, host: str | None) -> list[QueuedRow]:
        """Groups of one batch interleave in seq order, so rows are cut only below
        the last group id read: every unread group holds larger seqs."""
        cursor = _batch_start(self._db, after_seq)
        where, args = ("AND host = ? ", [host]) if host is not None else ("", [])
        found: list[QueuedRow] = []
        while True:
            groups = self._checked(self._db.execute(
                f"SELECT id, host, depth, seqs, urls, {self.crc} FROM queue WHERE id >= ? {where}"
                "ORDER BY id LIMIT ?", [cursor, *args, max(64, limit)]).fetchall())
            found.extend(self._unmarked(groups, after_seq))
            found.sort(key=lambda r: r.seq)
            if not groups:
                return found[:limit]
            cursor = groups[-1][0] + 1
            if sum(1 for r in found if r.seq < cursor) >= limit:
                return [r for r in found if r.seq < cursor][:limit]

    def _unmarked(self, groups: list[tuple], after_seq: int) -> list[QueuedRow]:
        rows: list[QueuedRow] = []
        for first, host, depth, packed, texts in groups:
            seqs, urls = decode_group(first, packed, texts)
            rows.extend(QueuedRow(int(s), u, host, depth)
                        for s, u in zip(seqs, urls, strict=True) if s > after_seq)
        done = {r[0] for r in select_in(self._db, _DONE_IN, [r.seq for r in rows],
                                        " AND state != 0")}
        return [r for r in rows if r.seq not in done]

    def hosts(self) -> list[str]:
        """A loose index scan, one seek per host (DISTINCT would read every row)."""
        hosts: list[str] = []
        row = self._db.execute("SELECT min(host) FROM queue").fetchone()
        while row is not None and row[0] is not None:
            hosts.append(row[0])
            row = self._db.execute("SELECT min(host) FROM queue WHERE host > ?",
                                   (row[0],)).fetchone()
        return hosts

    def text_of(self, seq: int, batch_seq: int) -> tuple[str | None, str | None]:
        """``(url, host)`` of ``seq`` if its queue row is kept, else ``(None, None)``."""
        for first, host, _, packed, texts in self._checked(self._db.execute(
                f"SELECT id, host, depth, seqs, urls, {self.crc} FROM queue WHERE id BETWEEN ? "
                "AND ?", (batch_seq, seq)).fetchall()):
            seqs, urls = decode_group(first, packed, texts)
            hits = np.flatnonzero(seqs == seq)
            if hits.size:
                return urls[int(hits[0])], host
        return None, None

    def groups(self) -> Iterator[tuple[str, int, np.ndarray, list[str]]]:
        cur = self._db.execute(f"SELECT id, host, depth, seqs, urls, {self.crc} FROM queue "
                               "ORDER BY id")
        while rows := cur.fetchmany(1024):
            for first, host, depth, packed, texts in self._checked(rows):
                yield (host, depth, *decode_group(first, packed, texts))

    def note_done(self, seq: int) -> None:
        self._dirty.add(seq)

    def done_rows(self, *, full: bool) -> list[int]:
        """Ids of queue rows all of whose seqs have a final outcome: the rows holding
        seqs marked since the last call (or every row with ``full``)."""
        if full:
            candidates = self._db.execute("SELECT id, seqs, urls FROM queue").fetchall()
        else:
            seen_ids: set[int] = set()
            candidates = []
            for seq in sorted(self._dirty):
                for g in self._db.execute("SELECT id, seqs, urls FROM queue WHERE id BETWEEN ? "
                                          "AND ?", (_batch_start(self._db, seq), seq)):
                    if g[0] not in seen_ids and seq in decode_group(*g)[0]:
                        seen_ids.add(g[0])
                        candidates.append(g)
        self._dirty.clear()
        drop: list[int] = []
        for first, packed, texts in candidates:
            seqs = [int(s) for s in decode_group(first, packed, texts)[0]]
            done = sum(1 for _ in select_in(self._db, _DONE_IN, seqs, " AND state != 0"))
            if done == len(seqs):
                drop.append(first)
        return drop

    def drop(self, ids: list[int]) -> None:
        self._db.executemany("DELETE FROM queue WHERE id = ?", [(i,) for i in ids])
