"""What a crawl left behind, judged from its output files alone (bench/reliability.py).

Why read the files independently of the crawler's own readers: the crawler's
``read_pages`` skips a torn last line and its WARC writer never reads back, so
the check must not share their assumptions. pages.jsonl is split on newlines and
every line parsed; each WARC file (the crawl rotates them: all files of the
prefix, in serial order) is read twice with warcio:

* sequentially, as any WARC reader would: how many records it yields, how many
  of them whole (declared length read, digest matching), and whether it reached
  the end of the file (after a torn record followed by appended records, a
  reader either stops there or reads the torn record's length into the next
  record and loses that one);
* record by record, resynchronizing at every ``WARC/1.x`` version line, so that
  every torn record is counted (not just the first) and the records after a
  tear still count towards duplicates. The sample site's pages never contain a
  WARC version line, so a split there is always a record boundary. A gzip file
  (one member per record) is split at its members instead: a member that does
  not inflate whole is a torn record, and the next member is found at the next
  gzip header.

Response and revisit records count per target URI (robots.txt apart: a restart
fetches it again, a new capture, not a duplicate); every request record must
name, by WARC-Concurrent-To, a response or revisit in the same file; and every
page pages.jsonl records as answered (a status) must have its record.
"""

from __future__ import annotations

import io
import json
import re
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.recordloader import ArcWarcRecord

from dedup import canonicalize

__all__ = ["PagesCheck", "WarcCheck", "check_pages", "check_warc", "duplicates"]

_VERSION_LINE = re.compile(rb"WARC/1\.[01]\r\n")
_PAGE_TYPES = {"response", "resource", "revisit"}  # records that carry a fetched page
_GZIP_MAGIC = b"\x1f\x8b\x08"


def duplicates(counts: Counter[str]) -> int:
    """Occurrences beyond the first, summed over keys."""
    return sum(n - 1 for n in counts.values() if n > 1)


@dataclass(slots=True)
class PagesCheck:
    lines: int
    torn_lines: int  # lines that are not one JSON object with a "url"
    urls: Counter[str]  # canonical URL -> lines
    links_new: int  # the records' links_new, summed: the URLs their pages queued
    answered: set[str]  # canonical URLs of records with a status (a response came back)

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
    answered: set[str] = set()
    torn = links_new = 0
    for line in lines:
        try:
            record = json.loads(line)
            url = canonicalize(record["url"])
            urls[url] += 1
            links_new += int(record.get("links_new") or 0)
            if record.get("status") is not None:
                answered.add(url)
        except (ValueError, KeyError, TypeError):
            torn += 1
    return PagesCheck(len(lines), torn, urls, links_new, answered)


@dataclass(slots=True)
class WarcCheck:
    files: int
    size: int
    segments: int  # records found by resynchronizing at version lines / gzip members
    torn: int  # of those, records warcio cannot read whole (or whose digest is wrong)
    targets: Counter[str]  # canonical WARC-Target-URI -> intact page records (not robots.txt)
    robots: int  # intact robots.txt response/revisit records
    unpaired: int  # request records whose WARC-Concurrent-To is no record of their file
    sequential_records: int  # records a plain warcio pass yields before it stops
    sequential_intact: int  # of those, read whole with a matching digest
    sequential_reached_end: bool  # in every file
    sequential_error: str | None

    def missing(self, answered: set[str]) -> list[str]:
        """Answered pages (pages.jsonl says a response came) without a record."""
        return sorted(answered - set(self.targets))

    def to_dict(self) -> dict:
        return {"files": self.files, "bytes": self.size, "records_found": self.segments,
                "torn_records": self.torn, "page_records": sum(self.targets.values()),
                "duplicate_records": duplicates(self.targets), "robots_records": self.robots,
                "unpaired_requests": self.unpaired,
                "sequential_read": {"records": self.sequential_records,
                                    "intact": self.sequential_intact,
                                    "reached_end": self.sequential_reached_end,
                                    "error": self.sequential_error}}


def _whole(record: ArcWarcRecord) -> bool:
    """Read the record's block: as long as its Content-Length says, digest matching?
    (The HTTP header block, which warcio parsed already, counts in the length.)"""
    body = record.raw_stream.read()
    http = record.http_headers.total_len if record.http_headers is not None else 0
    declared = int(record.rec_headers.get_header("Content-Length") or -1)
    return http + len(body) == declared and record.digest_checker.passed is not False


def _sequential(data: bytes) -> tuple[int, int, bool, str | None]:
    """(records, intact records) warcio yields reading the file in one pass; EOF reached?"""
    it = ArchiveIterator(io.BytesIO(data), check_digests=True)
    n, intact, end = 0, 0, 0
    try:
        for record in it:
            intact += _whole(record)
            n += 1
            end = it.get_record_offset() + it.get_record_length()  # before the CRLFs
    except (ArchiveLoadFailed, ValueError, EOFError, OSError, zlib.error) as exc:
        return n, intact, False, f"{type(exc).__name__}: {str(exc)[:120]}"
    if data.startswith(_GZIP_MAGIC):
        return n, intact, end == len(data), None
    return n, intact, data[end:].strip(b"\r\n") == b"", None


@dataclass(slots=True)
class _Record:
    whole: bool
    kind: str | None = None
    uri: str | None = None
    record_id: str | None = None
    concurrent_to: str | None = None


def _intact(segment: bytes) -> _Record:
    """One record's bytes, read by warcio."""
    it = ArchiveIterator(io.BytesIO(segment), check_digests=True)
    try:
        records = [(record, _whole(record), it.get_record_offset() + it.get_record_length())
                   for record in it]
    except (ArchiveLoadFailed, ValueError, EOFError, OSError):
        return _Record(False)
    if len(records) != 1:
        return _Record(False)
    record, whole, end = records[0]
    whole = whole and segment[end:] == b"\r\n\r\n"
    h = record.rec_headers
    return _Record(whole, record.rec_type, h.get_header("WARC-Target-URI"),
                   h.get_header("WARC-Record-ID"), h.get_header("WARC-Concurrent-To"))


def _segments(data: bytes) -> list[bytes]:
    """The file's records as bytes: split at version lines, or inflated gzip members
    (a member that does not inflate whole is returned as its raw, unreadable bytes)."""
    if not data.startswith(_GZIP_MAGIC):
        starts = [m.start() for m in _VERSION_LINE.finditer(data)]
        if data and (not starts or starts[0] != 0):
            starts.insert(0, 0)  # bytes before the first version line are a torn record too
        return [data[a:b] for a, b in zip(starts, [*starts[1:], len(data)], strict=True)]
    out = []
    pos = 0
    while pos < len(data):
        d = zlib.decompressobj(zlib.MAX_WBITS | 16)
        try:
            inflated = d.decompress(data[pos:])
            ok = d.eof
        except zlib.error:
            ok = False
        if ok:
            out.append(inflated)
            pos = len(data) - len(d.unused_data)
            continue
        nxt = data.find(_GZIP_MAGIC, pos + 1)
        stop = nxt if nxt >= 0 else len(data)
        out.append(b"")  # unreadable: a torn record
        pos = stop
    return out


def warc_files(where: Path) -> list[Path]:
    """The WARC files of a directory (the crawl's rotated files), or one file."""
    if where.is_dir():
        return sorted(p for p in where.iterdir() if ".warc" in p.name)
    return [where] if where.exists() else []


def check_warc(where: Path) -> WarcCheck:
    """Torn, duplicate and unpaired records of the WARC files in ``where``."""
    files = warc_files(where)
    size = segments = torn = robots = unpaired = 0
    seq_n = seq_intact = 0
    reached_end, error = True, None
    targets: Counter[str] = Counter()
    for path in files:
        data = path.read_bytes()
        size += len(data)
        n, intact, end, err = _sequential(data)
        seq_n += n
        seq_intact += intact
        reached_end = reached_end and end
        error = error or (f"{path.name}: {err}" if err else None)
        ids: set[str] = set()
        pointers: list[str | None] = []
        for segment in _segments(data):
            segments += 1
            rec = _intact(segment)
            if not rec.whole:
                torn += 1
                continue
            ids.add(rec.record_id or "")
            if rec.kind == "request":
                pointers.append(rec.concurrent_to)
            elif rec.kind in _PAGE_TYPES and rec.uri:
                if rec.uri.endswith("/robots.txt"):
                    robots += 1
                else:
                    targets[canonicalize(rec.uri)] += 1
        unpaired += sum(p not in ids for p in pointers)
    return WarcCheck(len(files), size, segments, torn, targets, robots, unpaired, seq_n,
                     seq_intact, reached_end, error)
