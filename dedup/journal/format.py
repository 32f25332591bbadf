"""The journal's on-disk format (ledger format 2): schema, row types, and how a
batch's frontier text is packed, one compressed row per host.

A page's new URLs are split by host (the frontier pages in per host). A group's
row id is its smallest seq; its seqs are stored as offsets from that id, one byte
each when the batch is small (the usual case: ~10 new URLs a page), else four;
its URLs are newline-joined (canonical URLs never hold a raw newline: it is
percent-encoded) and zlib-compressed when that is smaller, behind one tag byte.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple

import numpy as np

from dedup.native import compiled
from dedup.url.host import host_of

FP = 16  # bytes per fingerprint
FORMAT = 2
ADMIT, FORGET = 0, 1
# The tables and their crc column are described in dedup.journal.journal's docstring
# (``Journal._open`` adds the crc column to a ledger written before it).
SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE log (seq INTEGER PRIMARY KEY, n INTEGER NOT NULL, kind INTEGER NOT NULL,
                  depth INTEGER NOT NULL, fps BLOB NOT NULL, crc INTEGER);
CREATE TABLE queue (id INTEGER PRIMARY KEY, host TEXT NOT NULL, depth INTEGER NOT NULL,
                    seqs BLOB NOT NULL, urls BLOB NOT NULL, crc INTEGER);
CREATE INDEX queue_host ON queue(host, id);
CREATE TABLE outcomes (seq INTEGER PRIMARY KEY, state INTEGER NOT NULL, status INTEGER,
                       error TEXT, at REAL NOT NULL, crc INTEGER);
"""
# Notes a caller keeps beside the keys, in the same transactions: ``notes``, a
# text per run of seqs (the crawler: the page a run of URLs was found on);
# ``contents``, the first (name, date) seen with each content digest (the
# crawler: WARC revisits and pages.jsonl's duplicate_of). Added to older
# format-2 ledgers on open; their rows carry a crc too, checked on read and by
# verify() (so classify and repair judge them); repair carries them (the notes
# renumbered with their seqs), resize and merge do not.
NOTES_SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (first INTEGER PRIMARY KEY, last INTEGER NOT NULL, text TEXT,
                                  crc INTEGER);
CREATE TABLE IF NOT EXISTS contents (digest TEXT PRIMARY KEY, name TEXT NOT NULL,
                                     at TEXT NOT NULL, crc INTEGER) WITHOUT ROWID;
"""
NOTES_TABLES = ("notes", "contents")
SCHEMA += NOTES_SCHEMA
# What a crawl learns about its hosts' content (dedup.journal.learned): ``prints``, a
# fetched page's content fingerprints (payload digest, SimHash of its main text, the
# first page within the near-duplicate distance, its content class); ``rules``, the
# URL rewrite rules proposed, accepted or revoked per host with their evidence;
# ``held``, the URLs a rule or a trap budget kept from being fetched (and the keys a
# rule made), so that revoking the rule admits them again. Added to older format-2
# ledgers on open, like the notes tables, with the same crc; repair, resize and
# merge do not carry them (a repaired crawl learns again).
LEARN_SCHEMA = """
CREATE TABLE IF NOT EXISTS prints (seq INTEGER PRIMARY KEY, host TEXT NOT NULL,
                                   url TEXT NOT NULL, digest TEXT, simhash INTEGER,
                                   near INTEGER, cls INTEGER NOT NULL, novel INTEGER NOT NULL,
                                   crc INTEGER);
CREATE TABLE IF NOT EXISTS rules (id INTEGER PRIMARY KEY, host TEXT NOT NULL,
                                  rule TEXT NOT NULL, state TEXT NOT NULL,
                                  evidence TEXT NOT NULL, crc INTEGER);
CREATE TABLE IF NOT EXISTS held (seq INTEGER PRIMARY KEY, host TEXT NOT NULL,
                                 kind INTEGER NOT NULL, why TEXT NOT NULL, url TEXT NOT NULL,
                                 key TEXT NOT NULL, depth INTEGER NOT NULL, crc INTEGER);
"""
LEARN_TABLES = ("prints", "rules", "held")
SCHEMA += LEARN_SCHEMA
CRC_TABLES = ("log", "queue", "outcomes")
# the columns a row's crc covers, in order (the crc is the last column of each table)
ROW_COLUMNS = {"log": ("seq", "n", "kind", "depth", "fps"),
               "queue": ("id", "host", "depth", "seqs", "urls"),
               "outcomes": ("seq", "state", "status", "error", "at"),
               "notes": ("first", "last", "text"),
               "contents": ("digest", "name", "at"),
               "prints": ("seq", "host", "url", "digest", "simhash", "near", "cls", "novel"),
               "rules": ("id", "host", "rule", "state", "evidence"),
               "held": ("seq", "host", "kind", "why", "url", "key", "depth")}
# every table whose rows carry a crc
CHECKED_TABLES = (*CRC_TABLES, *NOTES_TABLES, *LEARN_TABLES)


def row_crc(values: Sequence[object]) -> int:
    """CRC-32 of one row's columns: the repr of the row with each blob replaced by its
    length (so types and column boundaries count), then the blobs' bytes."""
    crc = zlib.crc32(repr([len(v) if v.__class__ is bytes else v for v in values]).encode())
    for v in values:
        if v.__class__ is bytes:
            crc = zlib.crc32(v, crc)
    return crc


def with_crc(row: Sequence[object]) -> tuple[object, ...]:
    """``row`` followed by its crc: what the journal inserts."""
    return (*row, row_crc(row))


def with_crcs(rows: Sequence[Sequence[object]]) -> list[tuple[object, ...]]:
    """``with_crc`` of each row, in one compiled call where the kernel built (a group
    commit's rows: the list's repr and its CRC cost more than the insert in Python)."""
    kernel = compiled.rowcrc  # looked up at each call: the tests switch it off
    if kernel is not None:
        return kernel.with_crcs(rows)  # type: ignore[no-any-return]
    return [(*row, row_crc(row)) for row in rows]


def crc_ok(row: Sequence[object]) -> bool:
    """Whether a row read as ``(*columns, crc)`` matches its crc (NULL: unchecked)."""
    crc = row[-1]
    return crc is None or crc == row_crc(row[:-1])


class State(IntEnum):
    """Life cycle of an admitted URL; QUEUED ones are the durable frontier."""

    QUEUED = 0
    FETCHED = 1
    FAILED = 2
    SKIPPED = 3


@dataclass(frozen=True, slots=True)
class QueuedRow:
    """A frontier entry paged in from the ledger."""

    seq: int
    url: str
    host: str
    depth: int


@dataclass(frozen=True, slots=True)
class Batch:
    """One ``log`` row: seqs ``seq .. seq+n-1`` with their fingerprints in order."""

    seq: int
    n: int
    kind: int
    depth: int
    fps: bytes


@dataclass(frozen=True, slots=True)
class JournalRow:
    """Everything the journal knows about one seq (for ``check``)."""

    seq: int
    fp: bytes
    kind: int
    depth: int
    url: str | None  # only while its queue row is kept
    host: str | None
    state: State | None  # None for a tombstone
    status: int | None
    error: str | None
    at: float | None


class PortableRow(NamedTuple):
    """One seq in the form fleet merge/resize move between journals, in seq order.

    ``state`` None marks a tombstone (a forget); ``url``/``host`` are None once the
    URL left the frontier (its text lives in the crawl output by then).
    """

    fp: bytes
    url: str | None
    host: str | None
    depth: int
    state: State | None
    status: int | None
    error: str | None


# The rows of what a crawl learns (its tables: ``dedup.journal.learned``).

# What a held row records: a URL a rule judged a duplicate (admitted SKIPPED under
# its own key); a rule key (the rewritten key a URL was admitted under, to forget
# if the rule goes); a URL fetched anyway to check a rule; a URL a trap budget kept
# from being fetched (SKIPPED); a rule key made for a page fetched before the rule
# (an alias: SKIPPED).
HELD_KINDS = {"suppressed": 0, "key": 1, "check": 2, "budget": 3, "alias": 4}


# A page to the trap budgets: it brought new content, it did not, or it was a
# duplicate a URL rule explains (left to the learner: budgets do not count it).
NOVELTY = {"old": 0, "new": 1, "explained": 2}


class PrintRow(NamedTuple):
    seq: int
    host: str
    url: str
    digest: str | None
    simhash: int | None  # unsigned
    near: int | None
    cls: int
    novel: int  # NOVELTY


class RuleRow(NamedTuple):
    id: int
    host: str
    rule: dict[str, Any]
    state: str
    evidence: dict[str, Any]


class HeldRow(NamedTuple):
    seq: int
    host: str
    kind: int
    why: str  # the rules' ids ("3,5"; an alias: "3,5@SEQ", the page it stands for) or
    # a budget's pattern
    url: str  # the URL to fetch
    key: str  # the key it was admitted under (a rule key for "key" and "alias" rows)
    depth: int


ZLIB_LEVEL = 6
_RAW, _DEFLATED = b"\x00", b"\x01"

# (first seq, host, seqs, urls) of one host's URLs in one batch
Group = tuple[int, str, list[int], list[str]]


def groups_by_host(first: int, urls: Sequence[str | None],
                   hosts: Sequence[str] | None) -> list[Group]:
    """Split a batch starting at seq ``first`` by host; None urls keep no text."""
    if hosts is not None and len(hosts) != len(urls):
        raise ValueError(f"{len(hosts)} hosts for {len(urls)} urls")
    by_host: dict[str, tuple[list[int], list[str]]] = {}
    for i, url in enumerate(urls):
        if url is None:
            continue
        if "\n" in url:
            raise ValueError(f"a URL holds a raw newline: {url!r}")
        host = hosts[i] if hosts is not None else host_of(url)
        seqs, texts = by_host.setdefault(host, ([], []))
        seqs.append(first + i)
        texts.append(url)
    return [(seqs[0], host, seqs, texts) for host, (seqs, texts) in by_host.items()]


def encode_group(group: Group, depth: int) -> tuple[int, str, int, bytes, bytes]:
    """The ``queue`` row ``(id, host, depth, seqs, urls)`` of one group.

    The text is deflated only when that makes it smaller (a lone URL grows by
    the zlib header); its first byte says which. Plain ``bytes`` for small
    offsets: numpy's per-call cost dominated a group of a few URLs."""
    first, host, seqs, urls = group
    offsets = [s - first for s in seqs]
    packed = (bytes(offsets) if offsets[-1] < 256
              else np.asarray(offsets, dtype="<u4").tobytes())
    raw = "\n".join(urls).encode()
    if len(urls) > 1:
        deflated = zlib.compress(raw, ZLIB_LEVEL)
        if len(deflated) < len(raw):
            return first, host, depth, packed, _DEFLATED + deflated
    return first, host, depth, packed, _RAW + raw


def decode_group(first: int, seqs: bytes, urls: bytes) -> tuple[np.ndarray, list[str]]:
    """Inverse of ``encode_group``: (seqs int64, urls) of one queue row."""
    body = zlib.decompress(urls[1:]) if urls[:1] == _DEFLATED else urls[1:]
    texts = body.decode().split("\n")
    dtype = np.uint8 if len(seqs) == len(texts) else np.dtype("<u4")
    return np.frombuffer(seqs, dtype=dtype).astype(np.int64) + first, texts
