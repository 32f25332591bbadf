"""What a crawl left behind, judged from its output files alone (bench/reliability.py).

Why read the files independently of the crawler's own readers: the crawler's
``read_pages`` skips a torn last line and its WARC writer never reads back, so
the check must not share their assumptions. pages.jsonl is split on newlines and
every line parsed; the WARC file is read twice with warcio:

* sequentially, as any WARC reader would: how many records it yields, how many
  of them whole (declared length read, digest matching), and whether it reached
  the end of the file (after a torn record followed by appended records, a
  reader either stops there or reads the torn record's length into the next
  record and loses that one);
* record by record, resynchronizing at every ``WARC/1.x`` version line, so that
  every torn record is counted (not just the first) and the records after a
  tear still count towards duplicates. The sample site's pages never contain a
  WARC version line, so a split there is always a record boundary.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.recordloader import ArcWarcRecord

from dedup import canonicalize

__all__ = ["PagesCheck", "WarcCheck", "check_pages", "check_warc", "duplicates"]

_VERSION_LINE = re.compile(rb"WARC/1\.[01]\r\n")
_PAGE_TYPES = {"response", "resource"}  # records that carry a fetched page


def duplicates(counts: Counter[str]) -> int:
    """Occurrences beyond the first, summed over keys."""
    return sum(n - 1 for n in counts.values() if n > 1)


@dataclass(slots=True)
class PagesCheck:
    lines: int
    torn_lines: int  # lines that are not one JSON object with a "url"
    urls: Counter[str]  # canonical URL -> lines
    links_new: int  # the records' links_new, summed: the URLs their pages queued

    def lost(self, reachable: set[str]) -> list[str]:
        return sorted(reachable - set(self.urls))

    def unexpected(self, reachable: set[str]) -> list[str]:
        return sorted(set(self.urls) - reachable)


def check_pages(path: Path) -> PagesCheck:
    """Every line of pages.jsonl, keyed by the canonical form of its URL."""
    data = path.read_bytes() if path.exists() else b""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    urls: Counter[str] = Counter()
    torn = links_new = 0
    for line in lines:
        try:
            record = json.loads(line)
            urls[canonicalize(record["url"])] += 1
            links_new += int(record.get("links_new") or 0)
        except (ValueError, KeyError, TypeError):
            torn += 1
    return PagesCheck(len(lines), torn, urls, links_new)


@dataclass(slots=True)
class WarcCheck:
    size: int
    segments: int  # records found by resynchronizing at version lines
    torn: int  # of those, records warcio cannot read whole (or whose digest is wrong)
    targets: Counter[str]  # WARC-Target-URI -> intact page records
    sequential_records: int  # records a plain warcio pass yields before it stops
    sequential_intact: int  # of those, read whole with a matching digest
    sequential_reached_end: bool
    sequential_error: str | None

    def to_dict(self) -> dict:
        return {"bytes": self.size, "records_found": self.segments, "torn_records": self.torn,
                "page_records": sum(self.targets.values()),
                "duplicate_records": duplicates(self.targets),
                "sequential_read": {"records": self.sequential_records,
                                    "intact": self.sequential_intact,
                                    "reached_end": self.sequential_reached_end,
                                    "error": self.sequential_error}}


def _whole(record: ArcWarcRecord) -> bool:
    """Read the record's block: as long as its Content-Length says, digest matching?"""
    body = record.content_stream().read()
    declared = int(record.rec_headers.get_header("Content-Length") or -1)
    return len(body) == declared and record.digest_checker.passed is not False


def _sequential(data: bytes) -> tuple[int, int, bool, str | None]:
    """(records, intact records) warcio yields reading the file in one pass; EOF reached?"""
    it = ArchiveIterator(io.BytesIO(data), check_digests=True)
    n, intact, end = 0, 0, 0
    try:
        for record in it:
            intact += _whole(record)
            n += 1
            end = it.get_record_offset() + it.get_record_length()  # before the CRLFs
    except (ArchiveLoadFailed, ValueError, EOFError, OSError) as exc:
        return n, intact, False, f"{type(exc).__name__}: {str(exc)[:120]}"
    return n, intact, data[end:].strip(b"\r\n") == b"", None


def _intact(segment: bytes) -> tuple[bool, str | None, str | None]:
    """(whole, record type, target URI) of one record's bytes, read by warcio."""
    it = ArchiveIterator(io.BytesIO(segment), check_digests=True)
    try:
        records = [(record, _whole(record), it.get_record_offset() + it.get_record_length())
                   for record in it]
    except (ArchiveLoadFailed, ValueError, EOFError, OSError):
        return False, None, None
    if len(records) != 1:
        return False, None, None
    record, whole, end = records[0]
    whole = whole and segment[end:] == b"\r\n\r\n"
    return whole, record.rec_type, record.rec_headers.get_header("WARC-Target-URI")


def check_warc(path: Path) -> WarcCheck:
    """Torn and duplicate records of an uncompressed WARC file."""
    data = path.read_bytes() if path.exists() else b""
    n, intact, reached_end, error = _sequential(data)
    starts = [m.start() for m in _VERSION_LINE.finditer(data)]
    if data and (not starts or starts[0] != 0):
        starts.insert(0, 0)  # bytes before the first version line are a torn record too
    torn = 0
    targets: Counter[str] = Counter()
    for i, start in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else len(data)
        whole, kind, uri = _intact(data[start:stop])
        if not whole:
            torn += 1
        elif kind in _PAGE_TYPES and uri:
            targets[uri] += 1
    return WarcCheck(len(data), len(starts), torn, targets, n, intact, reached_end, error)
