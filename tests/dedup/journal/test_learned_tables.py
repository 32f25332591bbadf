"""The ledger's tables of what a crawl learns: written in the open transaction (so a
crash loses them with the marks they go with), read back after a reopen, checked."""

from __future__ import annotations

import sqlite3

import pytest

from dedup import HeldRow, LedgerDamaged, PrintRow, RuleRow, UrlSeen


def _admit(seen: UrlSeen, pairs: list[tuple[str, str]]) -> list:
    """One page of ``(url, key)`` pairs through the seen-test: its new URLs."""
    return seen.admit_pages([(pairs, 0)])[0]


def _rows(seen: UrlSeen) -> tuple[list, list, list]:
    return list(seen.records.prints()), seen.records.learned_rules(), list(seen.records.held())


def test_prints_rules_and_held_urls_commit_with_the_marks_and_read_back(tmp_path):
    with UrlSeen(tmp_path / "s", autocommit=False) as seen:
        new = _admit(seen, [("http://h/a", "http://h/a"), ("http://h/b", "~http://h/b")])
        records = seen.records
        records.note_prints([PrintRow(new[0].seq, "h", "http://h/a", "sha1:X", (1 << 64) - 1,
                                      None, new[0].seq, 1)])
        records.note_rules([RuleRow(7, "h", {"kind": "trailing_slash"}, "accepted", {"pairs": 4})])
        records.note_held([HeldRow(new[1].seq, "h", 1, "7", "http://h/b/", "~http://h/b", 1)])
        seen.commit()
        records.note_rules([RuleRow(7, "h", {"kind": "trailing_slash"}, "revoked", {"pairs": 4})])
        seen.ledger.journal.rollback()  # as a crash would: the revocation is gone
    with UrlSeen(tmp_path / "s", readonly=True) as seen:
        prints, rules, held = _rows(seen)
        assert prints == [PrintRow(1, "h", "http://h/a", "sha1:X", (1 << 64) - 1, None, 1, 1)]
        assert seen.records.print_of(1) == prints[0] and seen.records.print_of(2) is None
        assert rules == [RuleRow(7, "h", {"kind": "trailing_slash"}, "accepted", {"pairs": 4})]
        assert held == [HeldRow(2, "h", 1, "7", "http://h/b/", "~http://h/b", 1)]
        assert seen.records.held_of(2) == held[0] and list(seen.records.held(host="x")) == []
        assert seen.records.lookup_key("~http://h/b")["seq"] == 2
        assert seen.records.lookup_key("http://h/b") is None  # a rule key is its own key


def test_forgetting_a_rule_key_lets_it_be_admitted_again(tmp_path):
    with UrlSeen(tmp_path / "s") as seen:
        _admit(seen, [("http://h/b", "~http://h/b")])
        assert _admit(seen, [("http://h/b?x", "~http://h/b")]) == []
        assert seen.forget_keys(["~http://h/b"]) == 1
        seen.records.drop_held([1])
        assert [n.url for n in _admit(seen, [("http://h/b?x", "~http://h/b")])] == \
            ["http://h/b?x"]


def test_a_ledger_from_before_the_tables_gets_them_and_a_damaged_row_is_named(tmp_path):
    with UrlSeen(tmp_path / "s") as seen:
        _admit(seen, [("http://h/a", "http://h/a")])
    db = sqlite3.connect(tmp_path / "s" / "ledger.sqlite")
    db.executescript("DROP TABLE prints; DROP TABLE rules; DROP TABLE held;")
    db.close()
    with UrlSeen(tmp_path / "s", readonly=True) as seen:  # read-only: read as empty
        assert _rows(seen) == ([], [], [])
    with UrlSeen(tmp_path / "s") as seen:  # the writer adds them
        seen.records.note_prints([PrintRow(1, "h", "http://h/a", None, None, None, 1, 0)])
    db = sqlite3.connect(tmp_path / "s" / "ledger.sqlite")
    db.execute("UPDATE prints SET url = 'http://h/z'")
    db.commit()
    db.close()
    with UrlSeen(tmp_path / "s", readonly=True) as seen, \
            pytest.raises(LedgerDamaged, match="prints row 1"):
        list(seen.records.prints())


def test_a_write_to_no_learned_table_is_refused(tmp_path):
    with UrlSeen(tmp_path / "s") as seen, pytest.raises(ValueError, match="no learned table"):
        seen.ledger.journal.learned_write("printz", [1])
