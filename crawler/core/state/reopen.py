"""URLs refused as private addresses, put back in the frontier once the crawl may
fetch them (``bloomcrawl resume DIR --allow-private``).

Why: a first crawl of one's own test site (127.0.0.1, localhost) without
``--allow-private`` refuses every page, and its record says so
(``crawler.net.refused.refusal``). The crawl must not be a dead end: a resume
that allows private addresses fetches those pages, and the pages they link to.
A refused page is then a retried URL, not a second fetch of one: like every URL
retried over the crawl (``crawler.core.schedule.retry``) it ends with ONE line in
pages.jsonl, its final one, so its refusal's line leaves the file.

How, crash-safely (the order is what makes it so):

1. the committed part of pages.jsonl is copied without the refused pages' lines
   to ``REWRITE_FILE``, fsynced;
2. one ledger transaction: each refused URL is admitted again with its text
   (``UrlSeen.reopen``; its old row marked skipped), the page counts lose its
   failure (``PageCounts.take_back``), pages.jsonl's committed size becomes the
   copy's, and ``REWRITE_KEY`` says a copy is to be put in place;
3. the copy is renamed over pages.jsonl, then ``REWRITE_KEY`` is cleared.

A crash before 2 leaves the old state (the copy is deleted when the crawl is
next opened, ``finish_rewrite``); after 2, opening the crawl finishes 3. Every
resume calls ``finish_rewrite`` before pages.jsonl is read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from crawler.core.outputs.output import PAGES_FILE
from crawler.core.state.pagecounts import PAGE_COUNTS_KEY, PageCounts, refused
from crawler.core.state.state import OUTPUTS_KEY, REWRITE_FILE, REWRITE_KEY
from crawler.net.outcome import failure_cause
from crawler.net.refused import PRIVATE_REFUSED, REFUSED
from dedup import State, UrlRejected, UrlSeen, fsync_dir

__all__ = ["finish_rewrite", "reopen_refused"]

NOTE = "reopened: refused as a private address, allowed now"  # the old rows' error
_REFUSED = REFUSED.encode()


def reopen_refused(seen: UrlSeen) -> int:
    """Put every URL the crawl refused as a private address back in the frontier, its
    refusal's line out of pages.jsonl (the module docstring says how); returns how
    many. O(1) when the page counts hold no refusal; else one pass over pages.jsonl."""
    finish_rewrite(seen)
    if not refused(seen.meta_get(PAGE_COUNTS_KEY) or {}):
        return 0
    d = Path(seen.state_dir)
    outputs = dict(seen.meta_get(OUTPUTS_KEY) or {})
    copy = d / REWRITE_FILE
    found: dict[int, dict[str, Any]] = {}
    with open(copy, "wb") as out:
        try:
            for line in _committed(d / PAGES_FILE, outputs.get("pages")):
                record = _refusal(seen, line) if _REFUSED in line else None
                if record is not None and record["seq"] not in found:
                    found[record["seq"]] = record
                else:
                    out.write(line)
            out.flush()
            os.fsync(out.fileno())
            size = out.tell()
        except BaseException:
            out.close()
            copy.unlink(missing_ok=True)
            raise
    if not found:
        copy.unlink()
        return 0
    rows = sorted(found.values(), key=lambda r: r["seq"])
    PageCounts(seen).take_back((r["url"], State.FAILED, r["status"], r["error"]) for r in rows)
    new = seen.reopen(((r["seq"], r["url"], r["key"], r["depth"]) for r in rows), note=NOTE)
    seen.note_referrers(sorted((seq, seq, r["referrer"]) for seq, r in zip(new, rows, strict=True)
                               if r["referrer"]))
    seen.meta_set(OUTPUTS_KEY, {**outputs, "pages": size})
    seen.meta_set(REWRITE_KEY, {"size": size})
    seen.commit()
    finish_rewrite(seen)
    return len(rows)


def finish_rewrite(seen: UrlSeen) -> None:
    """Put a committed copy of pages.jsonl in place, or delete an uncommitted one (a
    crash in ``reopen_refused``). Cheap when there is none: one meta read, one stat."""
    d = Path(seen.state_dir)
    copy = d / REWRITE_FILE
    if seen.meta_get(REWRITE_KEY):
        if copy.exists():
            os.replace(copy, d / PAGES_FILE)
            fsync_dir(d)
        seen.meta_set(REWRITE_KEY, None)
        seen.commit()
    elif copy.exists():
        copy.unlink()


def _committed(path: Path, size: int | None) -> Iterator[bytes]:
    """The complete lines of pages.jsonl within its committed ``size`` (all complete
    lines for a state dir from before committed sizes)."""
    try:
        fh: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return
    with fh:
        left = size
        for line in fh:
            if left is not None:
                if left <= 0:
                    return
                line = line[:left]
                left -= len(line)
            if line.endswith(b"\n"):
                yield line


def _refusal(seen: UrlSeen, line: bytes) -> dict[str, Any] | None:
    """The record of a page refused as a private address whose ledger row still says
    so (with its seq and key), or None: a line to keep."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("status") is not None or \
            failure_cause(None, record.get("error")) != PRIVATE_REFUSED:
        return None
    try:
        _, key = seen.canonicalizer.resolve(record["url"])
        _, row = seen.check(record["url"])
    except (KeyError, TypeError, UrlRejected):
        return None
    if row is None or row["state"] != State.FAILED.name.lower() or \
            failure_cause(row["status"], row["error"]) != PRIVATE_REFUSED:
        return None
    return {"seq": row["seq"], "url": record["url"], "key": key, "depth": row["depth"],
            "referrer": record.get("referrer"), "status": None, "error": record["error"]}
