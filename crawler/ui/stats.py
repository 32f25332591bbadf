"""The dashboard's figures: pages.jsonl records tallied, and the JSON document
(``/api/stats``, the report's embedded data) the page draws.

Why from pages.jsonl: it holds one record per committed page (status, bytes,
error, time), written by the group commit whatever else runs, so the live
dashboard (reading what is appended, ``Tail``) and the report of a finished
crawl (reading it whole, ``PageTally.feed``) count the same pages the same
way, and the crawl loop needs no hook for them.
"""

from __future__ import annotations

import heapq
import json
import os
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from crawler.net.outcome import failure_cause

__all__ = ["SCHEMA", "PageTally", "Tail", "bin_series", "confirm_hit_rate", "host_of_url",
           "storage_sizes"]

SCHEMA = 1  # /api/stats "schema": bumped when a field changes meaning
RECENT_ERRORS = 20
TOP_HOSTS = 10
TOP_KEPT = 4 * TOP_HOSTS  # hosts ranked as pages come: top_hosts(n <= this) is O(n)
# hosts counted by name; past this many the least fetched half is dropped (approximate
# counts for the tail of a crawl of millions of hosts, the top ones stay right)
MAX_HOST_ENTRIES = 50_000
_HOST_IDS_FOLD = 1 << 16  # hosts' hashes gathered in a set before the sorted array takes them


_decoder = json.JSONDecoder()


def host_of_url(url: str) -> str:
    """``host[:port]`` of an absolute URL (what pages.jsonl records)."""
    parts = url.split("/", 3)
    return parts[2].rpartition("@")[2] if len(parts) > 2 else url


def _epoch(iso: str) -> int:
    """Whole seconds of a pages.jsonl ``fetched_at`` (``...T12:00:01.123Z``)."""
    return int(datetime.fromisoformat(iso[:19] + "+00:00").timestamp())


def is_error(status: int | None, cause: str | None) -> bool:
    """A record the dashboard lists under "recent errors": no page came (``cause``,
    as ``stats`` counts failures: no response, too large, robots.txt unavailable,
    given up) or the server answered with an error status (4xx, 5xx). Not a
    response that came whole but is not parsed (``not html``: a PDF), a redirect,
    or a URL robots.txt disallows (a rule obeyed, not a failure)."""
    return cause is not None or (status is not None and status >= 400)


def status_class(status: int | None, error: str | None) -> str:
    """The status-code mix's key: the code itself, or what kept a response from coming."""
    if status is not None:
        return str(status)
    if error == "robots.txt":
        return "robots.txt"
    return "no response"


class PageTally:
    """Counts over pages.jsonl records: status codes, failure causes, hosts, bytes,
    and pages and bytes per second of ``fetched_at`` (UTC).

    Memory is bounded by the crawl's duration in seconds, ``MAX_HOST_ENTRIES`` and 8
    bytes a host crawled, not by its pages: a 1M-page report streams the file
    through this.
    """

    def __init__(self) -> None:
        self.pages = 0
        self.bytes = 0
        self.fetched = 0
        self.failed = 0
        self.skipped = 0
        self.links_new = 0
        self.statuses: Counter[str] = Counter()
        self.causes: Counter[str] = Counter()
        self.hosts: Counter[str] = Counter()
        self.host_failed: Counter[str] = Counter()
        self.per_second: dict[int, list[int]] = {}  # second -> [pages, bytes, links_new]
        self.recent_errors: deque[dict[str, Any]] = deque(maxlen=RECENT_ERRORS)
        self._time_cache: tuple[str, int] = ("", 0)
        self._cause_of: dict[tuple[int | None, str], tuple[str, str | None, bool]] = {}
        self._top: list[str] = []  # the TOP_KEPT hosts with the most pages, best first
        # every host with a record, as its hash: exact, unlike the counters above, in
        # 8 bytes a host (a sorted array, the latest ones in a set until folded in);
        # hash() is salted per process, and a tally lives in one
        self._host_ids = np.empty(0, np.int64)
        self._new_host_ids: set[int] = set()

    def add(self, r: dict[str, Any]) -> None:
        """Count one pages.jsonl record."""
        self.add_many((r,))

    def add_many(self, records: Iterable[dict[str, Any]]) -> None:
        """Count pages.jsonl records: the report's inner loop over millions of them, so
        attribute look-ups are hoisted and a failure's cause is looked up once per
        distinct (status, error)."""
        statuses, causes, hosts, host_failed = self.statuses, self.causes, self.hosts, \
            self.host_failed
        per_second, recent, cause_of = self.per_second, self.recent_errors, self._cause_of
        last_key, last_sec = self._time_cache
        pages = nbytes_total = fetched = failed = skipped = new_total = 0
        touched: set[str] = set()
        for r in records:
            status, error = r.get("status"), r.get("error")
            url = r.get("url") or ""
            nbytes = r.get("bytes") or 0
            new = r.get("links_new") or 0
            pages += 1
            nbytes_total += nbytes
            new_total += new
            parts = url.split("/", 3)
            host = parts[2].rpartition("@")[2] if len(parts) > 2 else url
            touched.add(host)
            if error is None:
                statuses[str(status)] = statuses.get(str(status), 0) + 1
                fetched += 1
                hosts[host] = hosts.get(host, 0) + 1
            else:
                key = (status, error)
                got = cause_of.get(key)
                if got is None:
                    cause = failure_cause(status, error)
                    got = cause_of[key] = (status_class(status, error), cause,
                                           is_error(status, cause))
                    if len(cause_of) > 10_000:
                        cause_of.clear()
                cls, cause, listed = got
                statuses[cls] = statuses.get(cls, 0) + 1
                if cls == "robots.txt":
                    skipped += 1
                else:
                    if listed:
                        recent.append({"at": r.get("fetched_at"), "url": url,
                                       "status": status, "error": error})
                    if cause is None:
                        fetched += 1
                        hosts[host] = hosts.get(host, 0) + 1
                    else:
                        failed += 1
                        causes[cause] = causes.get(cause, 0) + 1
                        host_failed[host] = host_failed.get(host, 0) + 1
            at = r.get("fetched_at")
            if at:
                key19 = at[:19]
                if key19 != last_key:
                    last_key, last_sec = key19, _epoch(at)
                slot = per_second.get(last_sec)
                if slot is None:
                    slot = per_second[last_sec] = [0, 0, 0]
                slot[0] += 1
                slot[1] += nbytes
                slot[2] += new
            if len(hosts) > MAX_HOST_ENTRIES:
                hosts = self.hosts = Counter(dict(hosts.most_common(MAX_HOST_ENTRIES // 2)))
            if len(host_failed) > MAX_HOST_ENTRIES:
                host_failed = self.host_failed = Counter(
                    dict(host_failed.most_common(MAX_HOST_ENTRIES // 2)))
        self._time_cache = (last_key, last_sec)
        self._new_host_ids.update(map(hash, touched))
        if len(self._new_host_ids) >= _HOST_IDS_FOLD:
            self._fold_host_ids()
        self._rank(touched)
        self.pages += pages
        self.bytes += nbytes_total
        self.fetched += fetched
        self.failed += failed
        self.skipped += skipped
        self.links_new += new_total

    def _rank(self, touched: Iterable[str]) -> None:
        """Keep ``_top`` the ``TOP_KEPT`` hosts with the most pages. Counts only grow,
        so a host that was not in it and got no page since cannot have passed one
        that was: ranking those and the hosts just counted is exact, and costs the
        pages counted, not the hosts known (a crawl of 50,000 hosts samples every
        second)."""
        self._top = _ranked(TOP_KEPT, {*touched, *self._top}, self.hosts, self.host_failed)

    def feed_lines(self, lines: Sequence[bytes]) -> int:
        """Count complete JSON lines; a line that does not parse (or is not an object)
        is skipped. Returns how many were counted."""
        try:  # one decode of them all (a quarter cheaper than one a line), if all parse
            records = json.loads(b"[" + b",".join(lines) + b"]")
        except ValueError:  # UnicodeDecodeError included
            pass
        else:
            if all(isinstance(r, dict) for r in records):
                self.add_many(records)
                return len(records)
        decode = _decoder.decode
        records = []
        for line in lines:
            try:
                r = decode(line.decode("utf-8"))
            except ValueError:  # UnicodeDecodeError included
                continue
            if isinstance(r, dict):
                records.append(r)
        self.add_many(records)
        return len(records)

    def feed(self, path: str | Path, *, chunk: int = 4 << 20) -> int:
        """Count every complete line of a pages.jsonl file, streamed in chunks (a torn
        last line of a running or crashed crawl is left out)."""
        n = 0
        try:
            fh = open(path, "rb")  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            return 0
        with fh:
            rest = b""
            while data := fh.read(chunk):
                data = rest + data
                cut = data.rfind(b"\n") + 1
                rest = data[cut:]
                n += self.feed_lines(data[:cut].splitlines())
        return n

    @property
    def hosts_crawled(self) -> int:
        """Hosts with at least one record counted (exact at any number of hosts)."""
        self._fold_host_ids()
        return len(self._host_ids)

    def _fold_host_ids(self) -> None:
        if self._new_host_ids:
            new = np.fromiter(self._new_host_ids, np.int64, len(self._new_host_ids))
            new.sort()
            self._host_ids = _sorted_union(self._host_ids, new)
            self._new_host_ids.clear()

    def top_hosts(self, n: int = TOP_HOSTS) -> list[tuple[str, int, int]]:
        """(host, fetched, failed) of the ``n`` hosts with the most pages (ties by name)."""
        hosts, failed = self.hosts, self.host_failed
        names = self._top[:n] if n <= TOP_KEPT else \
            _ranked(n, hosts.keys() | failed.keys(), hosts, failed)
        return [(h, hosts.get(h, 0), failed.get(h, 0)) for h in names]

    def merge(self, other: PageTally) -> None:
        """Add another tally (a fleet's workers) to this one."""
        for name in ("pages", "bytes", "fetched", "failed", "skipped", "links_new"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.statuses.update(other.statuses)
        self.causes.update(other.causes)
        self.hosts.update(other.hosts)
        self.host_failed.update(other.host_failed)
        self._new_host_ids |= other._new_host_ids
        self._fold_host_ids()
        self._host_ids = _sorted_union(self._host_ids, other._host_ids)
        self._top = []  # sums: a host may now pass any, so rank them all
        self._rank(self.hosts.keys() | self.host_failed.keys())
        for sec, (p, b, new) in other.per_second.items():
            slot = self.per_second.setdefault(sec, [0, 0, 0])
            slot[0] += p
            slot[1] += b
            slot[2] += new
        errors = sorted([*self.recent_errors, *other.recent_errors],
                        key=lambda e: e.get("at") or "")
        self.recent_errors = deque(errors[-RECENT_ERRORS:], maxlen=RECENT_ERRORS)


def _sorted_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The union of two sorted arrays of distinct values, sorted: a merge (a stable
    sort of two runs is one), not the full sort ``np.union1d`` does (80x slower here)."""
    both = np.concatenate([a, b])
    both.sort(kind="stable")
    keep = np.ones(len(both), bool)
    keep[1:] = both[1:] != both[:-1]
    return both[keep]


def _ranked(n: int, names: Iterable[str], hosts: Counter[str], failed: Counter[str]
            ) -> list[str]:
    """The ``n`` of ``names`` with the most pages (fetched + failed; ties by name)."""
    counted = ((hosts.get(h, 0) + failed.get(h, 0), h) for h in names)
    return [h for _, h in heapq.nsmallest(n, ((-c, h) for c, h in counted if c))]


class Tail:
    """What was appended to a file since the last ``read``, in complete lines.

    Starts at the file's end when it is opened (a resumed crawl's earlier pages are
    not re-read by the live dashboard) or at ``offset``. A file cut shorter (a
    resume truncating a torn tail) is followed from its new end.
    """

    def __init__(self, path: str | Path, *, from_end: bool = True) -> None:
        self.path = Path(path)
        self.offset = 0
        if from_end:
            try:
                self.offset = self.path.stat().st_size
            except FileNotFoundError:
                self.offset = 0
        self._rest = b""

    def read(self, limit: int = 8 << 20) -> list[bytes]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:
            self.offset, self._rest = size, b""
        if size == self.offset:
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read(min(limit, size - self.offset))
        self.offset += len(data)
        data = self._rest + data
        cut = data.rfind(b"\n") + 1
        self._rest = data[cut:]
        return data[:cut].splitlines()


def bin_series(per_second: dict[int, list[int]], *, max_points: int = 400
               ) -> dict[str, list[float]]:
    """Pages/s, bytes/s and new links per second over the whole span of
    ``per_second``, in at most ``max_points`` equal bins (empty seconds count as 0)."""
    if not per_second:
        return {"t": [], "pages_per_s": [], "bytes_per_s": [], "links_new": [], "bin_s": 1}
    first, last = min(per_second), max(per_second)
    span = last - first + 1
    width = max(1, -(-span // max_points))
    n = -(-span // width)
    pages = [0] * n
    nbytes = [0] * n
    new = [0] * n
    for sec, (p, b, ln) in per_second.items():
        i = (sec - first) // width
        pages[i] += p
        nbytes[i] += b
        new[i] += ln
    # the last bin may be short: rates over the seconds it covers
    widths = [width] * n
    widths[-1] = span - width * (n - 1)
    return {"t": [first + i * width for i in range(n)],
            "pages_per_s": [round(p / w, 3) for p, w in zip(pages, widths, strict=True)],
            "bytes_per_s": [round(b / w, 1) for b, w in zip(nbytes, widths, strict=True)],
            "links_new": new, "bin_s": width}


def confirm_hit_rate(counters: dict[str, Any]) -> float | None:
    """Share of Bloom "maybe seen" answers settled by the confirm cache, not the ledger."""
    hits = int(counters.get("confirm_cache_hits") or 0)
    queries = int(counters.get("ledger_queries") or 0)
    return hits / (hits + queries) if hits + queries else None


def _tree_size(d: Path) -> int:
    total = 0
    try:
        with os.scandir(d) as it:
            for e in it:
                try:
                    total += e.stat().st_size if e.is_file() else 0
                except OSError:
                    continue
    except OSError:
        return 0
    return total


def storage_sizes(state_dir: str | Path) -> dict[str, int]:
    """Bytes on disk of a state dir's ledger (with its WAL), fingerprint index and
    pages.jsonl: a few stat calls, cheap enough for every sample."""
    d = Path(state_dir)

    def size(name: str) -> int:
        try:
            return (d / name).stat().st_size
        except OSError:
            return 0
    return {"ledger_bytes": size("ledger.sqlite") + size("ledger.sqlite-wal"),
            "index_bytes": _tree_size(d / "ledger.index"),
            "pages_bytes": size("pages.jsonl")}
