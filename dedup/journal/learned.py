"""The journal's tables of what a crawl learns about its hosts' content.

- ``prints(seq, host, url, digest, simhash, near, cls, novel)``: one row per
  fetched page with content (a 2xx body): its payload digest, the SimHash of its
  main text (NULL when it has too little text to judge by), the seq of the first
  page of its host within the near-duplicate distance (NULL: none, or no SimHash),
  its content class (the seq of the first page with the same content: the page's
  own when it is new) and what it was to the trap budgets (``NOVELTY``). Written
  in the transaction that marks the page, so ``near_duplicate_of`` in pages.jsonl
  and what the rule learner was told stay
  exact across kill -9; read back in seq order at a resume to rebuild the
  near-duplicate index, the learners' recent pages and the novelty windows.
- ``rules(id, host, rule, state, evidence)``: every rule a host's learner proposed
  and decided (JSON), rewritten when its state or evidence changes.
- ``held(seq, host, kind, why, url, key, depth)``: the admissions a rule or a trap
  budget made or stopped (``HELD_KINDS``), with their URL text, which the frontier
  does not keep once a row is done, and the key they were admitted under: revoking
  a rule (or reopening a budget) forgets those keys and admits the URLs again,
  exactly.

Append-mostly: ``prints`` and ``held`` take rows in ascending seq (pages in commit
order, admissions as they are made), so their B-trees fill in order.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from dedup.journal.format import HeldRow, PrintRow, RuleRow, crc_ok, with_crcs

__all__ = ["LearnedTables", "signed64", "unsigned64"]

def signed64(x: int | None) -> int | None:
    """An unsigned 64-bit value as SQLite's signed INTEGER."""
    return None if x is None else x - (1 << 64) if x >= 1 << 63 else x


def unsigned64(x: int | None) -> int | None:
    return None if x is None else x + (1 << 64) if x < 0 else x


class LearnedTables:
    """The three tables on one journal connection: the journal owns the transaction
    (it begins one before these writes and commits it); this only reads and writes
    rows. A read-only ledger from before the tables reads them as empty."""

    def __init__(self, db: sqlite3.Connection,
                 damaged: Callable[[str, object], Exception]) -> None:
        self._db = db
        self._damaged = damaged
        self.crc = {"prints": "crc", "rules": "crc", "held": "crc"}

    def write(self, table: str, rows: list[Any]) -> None:
        """``add_prints``, ``put_rules``, ``add_held`` or ``drop_held`` (``unheld``) of
        ``rows``: the journal's one entry for writes, inside its transaction."""
        writers = {"prints": self.add_prints, "rules": self.put_rules,
                   "held": self.add_held, "unheld": self.drop_held}
        if table not in writers:
            raise ValueError(f"no learned table {table!r}")
        writers[table](rows)

    def _rows(self, table: str, sql: str, args: tuple = ()) -> Iterator[tuple]:
        try:
            cur = self._db.execute(sql, args)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return
            raise
        while rows := cur.fetchmany(1024):
            for row in rows:
                if not crc_ok(row):
                    raise self._damaged(table, row[0])
                yield row[:-1]

    # -- prints ------------------------------------------------------------------

    def add_prints(self, rows: Iterable[PrintRow]) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO prints VALUES (?,?,?,?,?,?,?,?,?)",
            with_crcs([(r.seq, r.host, r.url, r.digest, signed64(r.simhash), r.near, r.cls,
                        r.novel) for r in rows]))

    def prints(self, after: int = 0) -> Iterator[PrintRow]:
        """Every row past seq ``after``, in seq order."""
        for seq, host, url, digest, simhash, near, cls, novel in self._rows(
                "prints", f"SELECT seq, host, url, digest, simhash, near, cls, novel, "
                          f"{self.crc['prints']} FROM prints WHERE seq > ? ORDER BY seq",
                (after,)):
            yield PrintRow(seq, host, url, digest, unsigned64(simhash), near, cls, novel)

    def print_of(self, seq: int) -> PrintRow | None:
        for seq_, host, url, digest, simhash, near, cls, novel in self._rows(
                "prints", f"SELECT seq, host, url, digest, simhash, near, cls, novel, "
                          f"{self.crc['prints']} FROM prints WHERE seq = ?", (seq,)):
            return PrintRow(seq_, host, url, digest, unsigned64(simhash), near, cls, novel)
        return None

    # -- rules -------------------------------------------------------------------

    def put_rules(self, rows: Iterable[RuleRow]) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO rules VALUES (?,?,?,?,?,?)",
            with_crcs([(r.id, r.host, json.dumps(r.rule, sort_keys=True), r.state,
                        json.dumps(r.evidence, sort_keys=True)) for r in rows]))

    def rules(self, host: str | None = None) -> list[RuleRow]:
        where, args = ("WHERE host = ? ", (host,)) if host is not None else ("", ())
        return [RuleRow(i, h, json.loads(rule), state, json.loads(evidence))
                for i, h, rule, state, evidence in self._rows(
                    "rules", f"SELECT id, host, rule, state, evidence, {self.crc['rules']} "
                             f"FROM rules {where}ORDER BY id", args)]

    # -- held ----------------------------------------------------------------------

    def add_held(self, rows: Iterable[HeldRow]) -> None:
        self._db.executemany("INSERT OR REPLACE INTO held VALUES (?,?,?,?,?,?,?,?)",
                             with_crcs(list(rows)))

    def held(self, host: str | None = None, kinds: Iterable[int] | None = None
             ) -> Iterator[HeldRow]:
        """Held rows in seq order (one host's, some kinds'): a scan, for the rare
        revocation and for ``explain``."""
        conds, args = [], []
        if host is not None:
            conds.append("host = ?")
            args.append(host)
        if kinds is not None:
            kinds = list(kinds)
            conds.append(f"kind IN ({','.join('?' * len(kinds))})")
            args.extend(kinds)
        where = f"WHERE {' AND '.join(conds)} " if conds else ""
        for row in self._rows("held", f"SELECT seq, host, kind, why, url, key, depth, "
                                      f"{self.crc['held']} FROM held {where}ORDER BY seq",
                              tuple(args)):
            yield HeldRow(*row)

    def held_of(self, seq: int) -> HeldRow | None:
        for row in self._rows("held", f"SELECT seq, host, kind, why, url, key, depth, "
                                      f"{self.crc['held']} FROM held WHERE seq = ?", (seq,)):
            return HeldRow(*row)
        return None

    def drop_held(self, seqs: Iterable[int]) -> None:
        self._db.executemany("DELETE FROM held WHERE seq = ?", [(s,) for s in seqs])
