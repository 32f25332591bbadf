"""A response body as it streams in: its SHA-1 and size on the way, its bytes in
memory while small and in an anonymous temp file past that.

Why: a page is only ever needed whole by the WARC writer, which streams it from
here into a record; the link parser needs its first bytes (the parse limit) and
pages.jsonl its digest. Holding the body whole in memory made a crawl's RSS grow
with its largest page, so the default size limit had to stay small enough to
drop real pages. The temp file has no name (``tempfile.TemporaryFile``), so
nothing is left behind however the process ends.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from typing import BinaryIO

from dedup import naming

__all__ = ["MEMORY", "Body", "sha1_text"]

MEMORY = 1 << 20  # bytes kept in memory before a body moves to a temp file


class Body:
    """The bytes of one response body: ``write`` each chunk as it arrives.

    ``keep``: store only the first ``keep`` bytes (the digest and ``size`` still
    cover every byte written); None: store all. ``spool_dir``: where the temp file
    goes (None: the system's temp directory).
    """

    __slots__ = ("_buf", "_fd", "_file", "_keep", "_sha1", "_spool_dir", "size", "stored")

    def __init__(self, keep: int | None = None, *, spool_dir: str | None = None) -> None:
        self._keep = keep
        self._spool_dir = spool_dir
        self._sha1 = hashlib.sha1()
        self._buf = bytearray()
        self._file: io.FileIO | None = None
        self._fd = -1
        self.size = 0  # bytes written
        self.stored = 0  # bytes kept (``size`` unless ``keep`` cut them)

    @classmethod
    def of(cls, data: bytes) -> Body:
        """A body already received whole (a small one)."""
        body = cls()
        body.write(data)
        return body

    def __len__(self) -> int:
        return self.stored

    def write(self, chunk: bytes) -> None:
        self._sha1.update(chunk)
        self.size += len(chunk)
        room = len(chunk) if self._keep is None else min(len(chunk), self._keep - self.stored)
        if room <= 0:
            return
        data = memoryview(chunk)[:room]
        self.stored += room
        if self._file is None:
            self._buf += data
            if len(self._buf) <= MEMORY:
                return
            # written on the loop: a page-cache write of one chunk costs less than a
            # thread hop, and the file never fsyncs. Closed by ``close``.
            with naming("creating a temporary file for a response body in", self._where()):
                self._file = tempfile.TemporaryFile(  # noqa: SIM115
                    dir=self._spool_dir, buffering=0)
            self._fd = self._file.fileno()
            data, self._buf = memoryview(self._buf), bytearray()
        # the crawl's own disk, not the server's doing: a FileError stops the crawl
        # (crawler.net.fetch), where a network error would only fail this fetch
        with naming("writing a response body to a temporary file in", self._where()):
            while data:
                data = data[os.write(self._fd, data):]

    def _where(self) -> str:
        return self._spool_dir or tempfile.gettempdir()

    def digest(self) -> str:
        """``sha1:BASE32`` of every byte written, as WARC-Payload-Digest and
        pages.jsonl write it."""
        return sha1_text(self._sha1.digest())

    def head(self, n: int) -> bytes:
        """The first ``n`` stored bytes (in one allocation, read back from the file)."""
        n = min(n, self.stored)
        if self._file is None:
            return bytes(memoryview(self._buf)[:n])  # one copy, not a slice and a copy
        parts = []
        got = 0
        while got < n:
            part = os.pread(self._fd, n - got, got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def reader(self) -> BinaryIO:
        """A stream of the stored bytes from the start (one reader at a time)."""
        if self._file is None:
            return io.BytesIO(self._buf)
        self._file.seek(0)
        return self._file  # type: ignore[return-value]

    def close(self) -> None:
        """Free the temp file once nothing will read the body again (reading it
        then raises ValueError); a body in memory is left to the garbage collector."""
        if self._file is not None:
            self._fd = -1  # never a number the OS may hand to another file
            self._file.close()


_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_B32_PAIRS = [_B32[i >> 5] + _B32[i & 31] for i in range(1024)]  # 10 bits -> 2 letters


def sha1_text(digest: bytes) -> str:
    """``sha1:BASE32`` of a 20-byte SHA-1 digest (RFC 4648 base32, no padding needed:
    160 bits are 32 letters), the text ``base64.b32encode`` makes at half its cost:
    computed for every page's body."""
    n = int.from_bytes(digest)
    t = _B32_PAIRS
    return "sha1:" + "".join((
        t[n >> 150], t[(n >> 140) & 1023], t[(n >> 130) & 1023], t[(n >> 120) & 1023],
        t[(n >> 110) & 1023], t[(n >> 100) & 1023], t[(n >> 90) & 1023], t[(n >> 80) & 1023],
        t[(n >> 70) & 1023], t[(n >> 60) & 1023], t[(n >> 50) & 1023], t[(n >> 40) & 1023],
        t[(n >> 30) & 1023], t[(n >> 20) & 1023], t[(n >> 10) & 1023], t[n & 1023]))
