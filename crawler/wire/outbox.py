"""A fleet worker's durable record of the links it forwarded: at-least-once from the sender.

Why: a forwarded link lives only in its owner's Redis stream until the owner
commits it, and the sender marks the page that found it done right after the
forward. A Redis that loses its data (restarted without persistence, flushed)
would take such links with it, and nothing would ever find them again. So the
sender appends every batch here before the XADD, and the group commit that
marks the page syncs it with pages.jsonl (``crawler.core.durability.commit``); when the
fleet's Redis turns out to have lost data (its epoch changed, see
``crawler.wire.transport``), the sender forwards everything here again, and
the owners' seen-tests drop what they already committed.

Files in the worker's state dir::

    outbox          frames: u32 length, u32 crc32, msgpack([[url, key, host, depth]...])
    outbox.epoch    the fleet epoch whose Redis holds (or held until committed) every
                    link in ``outbox`` (written atomically)

A torn last frame (a crash mid-append) is cut off at open: its forward never
completed, so its page was never marked and is fetched again. The file is
emptied when the whole fleet is done (every link committed by its owner).
"""

from __future__ import annotations

import asyncio
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgpack

from crawler.wire.protocol import RemoteLink, decode
from dedup import atomic_write_bytes

__all__ = ["EPOCH_FILE", "OUTBOX_FILE", "Outbox"]

OUTBOX_FILE = "outbox"
EPOCH_FILE = "outbox.epoch"
_HEAD = struct.Struct("<II")


class Outbox:
    """Append-only, checksummed batches of forwarded links, and the epoch they were sent in."""

    def __init__(self, state_dir: str | Path) -> None:
        self.path = Path(state_dir) / OUTBOX_FILE
        self.epoch_path = Path(state_dir) / EPOCH_FILE
        self.size, self.links = self._scan()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if os.fstat(fd).st_size > self.size:  # a torn tail: that forward never completed
                os.ftruncate(fd, self.size)
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        self._dirty = False  # appended since the last sync

    # -- reading ----------------------------------------------------------------------

    def _frames(self) -> Iterator[tuple[int, bytes]]:
        """``(end offset, payload)`` of each intact frame, up to the first bad one
        (read as a stream: an outbox may be larger than memory)."""
        try:
            f = open(self.path, "rb")  # noqa: SIM115 (a generator holds it)
        except FileNotFoundError:
            return
        with f:
            pos = 0
            while len(head := f.read(_HEAD.size)) == _HEAD.size:
                length, crc = _HEAD.unpack(head)
                payload = f.read(length)
                if len(payload) != length or zlib.crc32(payload) != crc:
                    return
                pos += _HEAD.size + length
                yield pos, payload

    def _scan(self) -> tuple[int, int]:
        """The length of the intact frames and the number of links they hold."""
        end = links = 0
        for end, payload in self._frames():  # noqa: B007 (the last one is wanted)
            links += len(decode(payload))
        return end, links

    def batches(self) -> Iterator[list[RemoteLink]]:
        """Every batch recorded, oldest first."""
        for _, payload in self._frames():
            yield decode(payload)

    def epoch(self) -> str | None:
        """The fleet epoch this outbox was last known to be held by, if any."""
        try:
            return self.epoch_path.read_text(encoding="utf-8").strip() or None
        except FileNotFoundError:
            return None

    def set_epoch(self, epoch: str) -> None:
        if epoch != self.epoch():
            atomic_write_bytes(self.epoch_path, epoch.encode() + b"\n")

    # -- writing ----------------------------------------------------------------------

    def append(self, links: Sequence[RemoteLink]) -> None:
        """Record a batch (written, not yet durable: see ``sync``)."""
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        payload = msgpack.packb([[u, k, h, int(d)] for u, k, h, d in links])
        frame = _HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        view = memoryview(frame)
        while view:
            view = view[os.write(self._fd, view):]
        self.size += len(frame)
        self.links += len(links)
        self._dirty = True

    async def sync(self) -> None:
        """Make every appended batch durable (before the pages that found them are marked)."""
        if self._fd is not None and self._dirty:
            self._dirty = False  # a batch appended meanwhile sets it again
            await asyncio.to_thread(os.fdatasync, self._fd)

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        return self._fd

    def clear(self) -> None:
        """Forget every batch: the whole fleet is done, each link committed by its owner."""
        if self._fd is None or not self.size:
            return
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        self.size = self.links = 0

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
