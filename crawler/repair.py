"""``bloomcrawl repair DIR``: the crawler's half of recovering a damaged ledger.

``dedup.repair`` salvages the readable rows into a new ledger. What it cannot
know is the crawl's output: a page whose outcome row was lost (or sat in a WAL
past a damaged frame) is still in pages.jsonl, and resuming would fetch and
write it again. So every complete line of pages.jsonl is taken as the record
of a page done: its URL is admitted if the ledger lost it, and marked done if
the ledger still had it queued; a queued URL whose text survived its admission
is admitted again. Then the output as it now stands is what the
ledger counts (the WARC's offset is dropped: resume cuts a torn record off its
end and appends after it), and the shard files are rebuilt from the new ledger.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crawler.output import PAGES_FILE, complete_lines, repair_tail
from crawler.state import set_committed_pages
from dedup import State, UrlRejected, UrlSeen
from dedup.repair import RepairReport, repair

__all__ = ["repair_state_dir"]


def repair_state_dir(state_dir: Path) -> tuple[RepairReport, int]:
    """Repair ``state_dir``'s ledger and reconcile it with pages.jsonl; returns the
    ledger report and how many pages.jsonl records had to be put back."""
    report = repair(state_dir)
    repair_tail(state_dir / PAGES_FILE)
    UrlSeen.rebuild(state_dir).close()  # new seqs: the old snapshots' marks mean nothing
    with UrlSeen(state_dir, create=False, autocommit=False) as seen:
        restored = _restore_pages(seen, state_dir / PAGES_FILE)
        for url, depth in report.orphans:  # queued, their admission unreadable
            seen.admit([url], depth=depth)
        seen.commit()
        seen.snapshot()
    set_committed_pages(state_dir)
    return report, restored


def _state_of(record: dict[str, Any]) -> State:
    """The outcome a pages.jsonl record stands for (as the engine commits them)."""
    if record.get("status") is None:
        return State.SKIPPED if record.get("error") == "robots.txt" else State.FAILED
    return State.FAILED if record["status"] >= 500 else State.FETCHED


def _restore_pages(seen: UrlSeen, pages: Path) -> int:
    restored = 0
    for line in complete_lines(pages, missing_ok=True):
        record = json.loads(line)
        url = record["url"]
        try:
            _, row = seen.check(url)
        except UrlRejected:  # pragma: no cover - it was admitted with these rules
            continue
        if row is None:
            admitted = seen.admit([url], depth=int(record.get("depth") or 0))
            seq = admitted[0].seq
        elif row["state"] == "queued":
            seq = row["seq"]
        else:
            continue
        seen.ledger.mark_many([(seq, _state_of(record), record.get("status"),
                                record.get("error"))])
        restored += 1
    return restored
