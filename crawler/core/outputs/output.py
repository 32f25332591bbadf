"""What a crawl leaves behind besides its state: pages.jsonl (and, with
``crawler.core.outputs.warc``, WARC files).

Why batched appends: the engine commits pages in groups (one write, then one
ledger transaction, per group), so the per-page cost is building a dict.

Why committed offsets: each group's lines and records are written and fsynced,
then the files' sizes are stored in the same ledger transaction that marks the
group's pages (``GroupCommit``). Reopening truncates each file to that size, so
whatever a crash (kill -9) left past it — torn or whole lines and WARC records
of pages the ledger does not count as done — is cut before those pages are
fetched and written again: every record appears exactly once.
"""

from __future__ import annotations

import abc
import json
import math
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from dedup import atomic_write_bytes, naming

__all__ = ["ITEMS_FILE", "PAGES_FILE", "ItemLog", "PageLog", "iso_time", "read_json", "read_pages",
           "repair_tail", "truncate_to", "write_json_atomic"]

PAGES_FILE = "pages.jsonl"
ITEMS_FILE = "items.jsonl"  # what page handlers returned (``crawler.core.run.page``)
_INLINE_WRITE = 64 * 1024  # PageLog appends up to this size skip the thread hop

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def iso_time(ts: float) -> str:
    """UTC ISO 8601 with milliseconds (what pages.jsonl's fetched_at holds).

    Called twice a page: the date and time to the second is formatted once a
    second; the microseconds are rounded as ``datetime.fromtimestamp`` rounds
    them (half to even), so the text is ``datetime``'s to the byte."""
    global _iso_second
    if not 0 <= ts < _YEAR_10000:  # not a fetch time (or NaN): datetime says what
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace(
            "+00:00", "Z")
    second = math.floor(ts)
    micro = round((ts - second) * 1e6)
    if micro >= 1_000_000:
        second += 1
        micro -= 1_000_000
    cached = _iso_second  # one tuple, read and replaced whole: threads may call this too
    if cached[0] != second:
        cached = _iso_second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{cached[1]}.{micro // 1000:03d}Z"


_YEAR_10000 = 253_402_300_800
_iso_second: tuple[int, str] = (-1, "")


def write_json_atomic(path: str | Path, value: Any) -> None:
    """Replace ``path`` with ``value`` as JSON: temp file, fsync, rename (never half-written)."""
    data = json.dumps(value, separators=(",", ":")).encode()
    atomic_write_bytes(path, data)


def read_json(path: str | Path, default: Any) -> Any:
    """``path`` parsed as JSON, or ``default`` when it does not exist."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return default


def repair_tail(path: str | Path) -> int:
    """Cut a partial last line (no trailing newline) off ``path``; returns bytes removed."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        pos = size
        step = 64 * 1024
        while pos > 0:
            start = max(0, pos - step)
            chunk = os.pread(fd, pos - start, start)
            if pos == size and chunk.endswith(b"\n"):
                return 0
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            pos = start
        else:
            keep = 0
        os.ftruncate(fd, keep)
        os.fsync(fd)
        return size - keep
    finally:
        os.close(fd)


def truncate_to(path: str | Path, size: int) -> int:
    """Cut ``path`` back to ``size`` bytes (durably); returns the bytes removed.

    A file shorter than ``size`` (or missing) is left alone: bytes the ledger
    counts cannot be recreated here, and appending continues at its end.
    """
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    try:
        extra = os.fstat(fd).st_size - size
        if extra <= 0:
            return 0
        os.ftruncate(fd, size)
        os.fsync(fd)
        return extra
    finally:
        os.close(fd)


class AppendFile(abc.ABC):
    """A file opened for appending with aiofiles (unbuffered), closed once.

    ``size`` is its length in bytes as written so far: the offset a commit
    records. ``committed`` (from the ledger) is where ``open`` cuts it back to.
    """

    def __init__(self, path: str | Path, committed: int | None = None) -> None:
        self.path = Path(path)
        self.committed = committed
        self.size = 0
        self._fh: Any = None

    @abc.abstractmethod
    async def open(self) -> Self:
        """Open for appending (after whatever repair or header the format needs)."""

    async def _open_append(self) -> None:
        if self.committed is not None:
            with naming("cutting back to its committed size", self.path):
                truncate_to(self.path, self.committed)
        # asyncio and aiofiles here and in sync(), not at the top: the state dir's
        # readers (bloomcrawl stats) import this module for its names and JSON helpers
        import aiofiles

        with naming("opening", self.path):
            self._fh = await aiofiles.open(self.path, "ab", buffering=0)
            self.size = os.fstat(self._fh.fileno()).st_size

    async def sync(self) -> None:
        """Make everything written so far durable (before a commit records ``size``)."""
        if self._fh is not None:
            import asyncio

            with naming("syncing", self.path):
                await asyncio.to_thread(os.fdatasync, self._fh.fileno())

    async def _write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        self.size += len(view)
        with naming("appending to", self.path):
            while view:
                n = await self._fh.write(view)
                view = view[n:]

    async def close(self) -> None:
        if self._fh is not None:
            fh, self._fh = self._fh, None
            with naming("closing", self.path):
                await fh.close()

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class PageLog(AppendFile):
    """Append-only JSON-lines file of page records (large appends written with aiofiles)."""

    async def open(self) -> PageLog:
        if self.committed is None:  # a state dir from before committed offsets
            repair_tail(self.path)
        await self._open_append()
        return self

    async def append(self, records: list[dict[str, Any]]) -> None:
        """Write records as lines, in one write call where the OS allows it."""
        if not records:
            return
        data = ("\n".join(map(_dumps, records)) + "\n").encode()
        view = memoryview(data)
        if len(data) <= _INLINE_WRITE:
            # A commit group's lines are a few KB: handing them to a thread costs
            # more than writing them to the page cache here (the engine commits the
            # same group to SQLite on the loop right after). Big appends still go
            # through aiofiles, so a congested disk cannot stall the loop for long.
            fd = self._fh.fileno()
            self.size += len(view)
            with naming("appending to", self.path):
                while view:
                    view = view[os.write(fd, view):]
        await self._write(view)


class ItemLog(AppendFile):
    """items.jsonl: the JSON lines page handlers returned, appended with their pages'
    group commit and cut back to its committed size like pages.jsonl.

    Opened only when it is written to or already exists (a crawl without a handler
    leaves no file); unopened, ``size`` stays the committed size, which every commit
    carries over, so a later run with a handler appends after the committed items."""

    def __init__(self, path: str | Path, committed: int | None = None) -> None:
        super().__init__(path, committed)
        self.size = committed or 0
        self._dirty = False

    async def open(self) -> ItemLog:
        await self._open_append()
        return self

    async def append_bytes(self, data: bytes) -> None:
        """Append encoded lines (each ending with a newline)."""
        if data:
            self._dirty = True
            await self._write(data)

    async def sync(self) -> None:
        if self._dirty:  # a group without items costs no fdatasync
            self._dirty = False
            await super().sync()


def complete_lines(path: str | Path, *, missing_ok: bool = False) -> list[bytes]:
    """The complete lines of a JSON-lines file, each with its newline.

    A torn last line (a crash mid-append) is left out: that page is fetched
    again on resume. ``missing_ok``: a file that does not exist has no lines.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        if missing_ok:
            return []
        raise
    return [ln + b"\n" for ln in data.split(b"\n")[:-1]]


def read_pages(path: str | Path) -> list[dict[str, Any]]:
    """Every complete record of a pages.jsonl file (a partial last line is ignored)."""
    return [json.loads(line) for line in complete_lines(path)]
