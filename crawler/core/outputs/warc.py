"""WARC output the standard way: request, response and revisit records written
with warcio, gzip per record, rotated by size, exactly once across kill -9.

Why request + response records: replay and indexing tools (warcio, pywb, Common
Crawl pipelines) read the HTTP status line and headers from a ``response``
record and pair it with its ``request`` through ``WARC-Concurrent-To``; a bare
``resource`` record of the body is not replayable. ``Exchange`` holds what one
HTTP hop sent and received, as aiohttp exposes it: the request line and headers
actually sent (``request_info`` after ``send``), the response's version, status,
reason and raw header lines, and the payload.

The payload is the body as aiohttp hands it over: de-chunked and, when the
server compressed it, decompressed. The stored headers say so instead of
lying about the bytes that follow them: ``Transfer-Encoding``/``Content-Encoding``
are kept as ``X-Crawler-Transfer-Encoding``/``X-Crawler-Content-Encoding`` and
``Content-Length`` is the stored payload's (the original as
``X-Crawler-Content-Length``), the convention wget and pywb's recorder use.

Why big records go through a temp file: a payload is streamed from its spool
(``crawler.net.body``) into the records, and a record pair over ``MEMORY`` bytes
is built in an anonymous temp file and copied into the WARC file a MiB at a
time, so a 50 MB page costs the crawl a few MB of memory, not its size.

Why revisits: a body identical to one archived earlier (same SHA-1 payload
digest) is written as a ``revisit`` record with the identical-payload-digest
profile, naming the earlier capture — content dedup as Heritrix does it. The
digest -> (URI, date) map lives in the ledger (``digests`` table), written in
the same transaction as the pages, so it is exact across kill -9.

Why serials and committed offsets: ``--warc FILE`` names a prefix (``FILE``
without ``.gz`` and ``.warc``); files are ``PREFIX-00000.warc.gz``,
``PREFIX-00001.warc.gz``, ... (no ``.gz``: uncompressed). A file is closed for
a new one when the next record would take it past ``max_size``. Each group
commit stores ``{"serial": n, "size": bytes}`` of the open file in the ledger
transaction that marks the group's pages; reopening cuts file ``n`` back to
that size and deletes every later serial (a rotation whose group never
committed), so a record is in some file exactly when its page is done.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crawler.core.outputs.output import AppendFile, iso_time, truncate_to
from crawler.net.body import MEMORY
from crawler.net.exchange import Exchange
from dedup import fsync_dir, naming

__all__ = ["RecordFile", "WarcFiles", "build_records", "first_warc", "warc_prefix",
           "warc_start"]

_RENAMED = {"transfer-encoding", "content-encoding"}
_SERIAL = "{prefix}-{serial:05d}.warc{gz}"


def _response_headers(ex: Exchange) -> list[tuple[str, str]]:
    """The received header lines, with the transfer and content codings aiohttp
    undid (and the length they change) renamed: see the module docstring."""
    out: list[tuple[str, str]] = []
    length = None
    for name, value in ex.response_headers:
        low = name.lower()
        if low in _RENAMED:
            out.append(("X-Crawler-" + name, value))
        elif low == "content-length":
            length = value
        else:
            out.append((name, value))
    real = str(ex.payload.stored)
    if length is not None and length != real:
        out.append(("X-Crawler-Content-Length", length))
    out.append(("Content-Length", real))
    return out


class RecordFile:
    """Records too big to hold in memory: an anonymous temp file, ``len`` bytes long."""

    __slots__ = ("file", "size")

    def __init__(self, file: io.FileIO, size: int) -> None:
        self.file = file
        self.size = size

    def __len__(self) -> int:
        return self.size

    def close(self) -> None:
        self.file.close()


Blob = bytes | RecordFile


def build_records(ex: Exchange, *, gzip: bool, refers_to: tuple[str, str] | None = None,
                  spool_dir: str | Path | None = None) -> Blob:
    """The request and response (or revisit, with ``refers_to`` = the earlier
    capture's (URI, WARC-Date)) records of one exchange, each its own gzip member
    with ``gzip``: request first, pointing at the response by WARC-Concurrent-To.
    Bytes, or a ``RecordFile`` (in ``spool_dir``; None: the system's temp directory)
    when the payload written is over ``MEMORY`` bytes."""
    big = refers_to is None and ex.payload.stored > MEMORY
    # the RecordFile owns it: closed when written (WarcFiles.write)
    out: Any = (tempfile.TemporaryFile(dir=spool_dir, buffering=0)  # noqa: SIM115
                if big else io.BytesIO())
    try:
        _write_records(out, ex, gzip=gzip, refers_to=refers_to)
    except BaseException:
        out.close()
        raise
    if big:
        return RecordFile(out, out.tell())
    return out.getvalue()


def _write_records(out: Any, ex: Exchange, *, gzip: bool,
                   refers_to: tuple[str, str] | None) -> None:
    # warcio and asyncio where used, not at the top: a state dir's readers (bloomcrawl
    # stats) import this module through crawler.core.state for first_warc and warc_start
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    writer = WARCWriter(out, gzip=gzip, warc_version="1.1")
    date = iso_time(ex.started)
    common = {"WARC-Date": date}
    if ex.ip:
        common["WARC-IP-Address"] = ex.ip
    resp_headers = StatusAndHeaders(f"{ex.status} {ex.reason}".rstrip(), _response_headers(ex),
                                    protocol=ex.version)
    if refers_to is None:
        # the digest streamed in with the body: warcio need not read it for that
        extra = {**common, "WARC-Payload-Digest": ex.payload_digest()}
        if ex.truncated:
            extra["WARC-Truncated"] = ex.truncated
        resp = writer.create_warc_record(ex.url, "response", payload=ex.payload.reader(),
                                         length=ex.payload.stored, http_headers=resp_headers,
                                         warc_headers_dict=extra)
    else:
        resp = writer.create_revisit_record(ex.url, ex.payload_digest(), refers_to[0],
                                            refers_to[1], http_headers=resp_headers,
                                            warc_headers_dict=dict(common))
    # is_http_request: warcio splits the method off and writes the line as given
    req_headers = StatusAndHeaders(f"{ex.method} {ex.target} {ex.version}",
                                   list(ex.request_headers), is_http_request=True)
    req = writer.create_warc_record(ex.url, "request", payload=io.BytesIO(b""), length=0,
                                    http_headers=req_headers, warc_headers_dict=dict(common))
    req.rec_headers.add_header("WARC-Concurrent-To",
                               resp.rec_headers.get_header("WARC-Record-ID"))
    writer.write_record(req)
    writer.write_record(resp)


def warcinfo(filename: str, *, gzip: bool) -> bytes:
    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    writer = WARCWriter(out, gzip=gzip, warc_version="1.1")
    writer.write_record(writer.create_warcinfo_record(filename, {
        "software": "bloomcrawl", "format": "WARC File Format 1.1",
        "conformsTo": "https://iipc.github.io/warc-specifications/specifications/"
                      "warc-format/warc-1.1/"}))
    return out.getvalue()


def warc_prefix(path: str | Path) -> tuple[Path, bool]:
    """``(prefix, gzip)`` of a ``--warc`` name: ``out/crawl.warc.gz`` ->
    (``out/crawl``, True), so its files are ``out/crawl-00000.warc.gz``, ..."""
    p = Path(path)
    name = p.name
    gz = name.endswith(".gz")
    if gz:
        name = name[:-3]
    if name.endswith(".warc"):
        name = name[:-5]
    return p.with_name(name or "crawl"), gz


def warc_path(prefix: Path, serial: int, gz: bool) -> Path:
    return prefix.with_name(_SERIAL.format(prefix=prefix.name, serial=serial,
                                           gz=".gz" if gz else ""))


def serials(prefix: Path, gz: bool) -> list[int]:
    """The serials of the files of ``prefix`` on disk, ascending."""
    pat = re.compile(re.escape(prefix.name) + r"-(\d{5,})\.warc" + (r"\.gz" if gz else "") + "$")
    found = []
    if prefix.parent.is_dir():
        for entry in os.scandir(prefix.parent):
            m = pat.match(entry.name)
            if m:
                found.append(int(m.group(1)))
    return sorted(found)


def _next_serial(prefix: Path, gz: bool) -> int:
    found = serials(prefix, gz)
    return found[-1] + 1 if found else 0


def warc_start(path: str | Path) -> dict[str, int]:
    """The offsets a new crawl commits first: a serial past every file of the prefix
    already on disk (another crawl's files are never cut), size 0."""
    prefix, gz = warc_prefix(path)
    return {"serial": _next_serial(prefix, gz), "size": 0}


def first_warc(path: str | Path) -> Path:
    """The file a new crawl with ``--warc path`` writes first."""
    prefix, gz = warc_prefix(path)
    return warc_path(prefix, _next_serial(prefix, gz), gz)


class _File(AppendFile):
    info_end = 0  # where its warcinfo record ends, when this process wrote it

    async def open(self) -> _File:
        await self._open_append()
        return self

    async def copy_from(self, blob: RecordFile) -> None:
        """Append ``blob``'s bytes, a MiB at a time in a thread (no sendfile: it
        refuses a file opened for appending)."""
        def copy() -> None:
            buf = memoryview(bytearray(MEMORY))
            src, dst = blob.file.fileno(), self._fh.fileno()
            done = 0
            while done < blob.size:
                n = os.preadv(src, [buf[:min(MEMORY, blob.size - done)]], done)
                if n == 0:
                    raise OSError(f"WARC record temp file ended at {done} of {blob.size}")
                view = buf[:n]
                while view:
                    view = view[os.write(dst, view):]
                done += n

        self.size += blob.size
        import asyncio

        with naming("appending a WARC record to", self.path):
            await asyncio.to_thread(copy)


class WarcFiles:
    """The crawl's WARC files: appends record blobs, rotates by size, and says
    what a commit records (``committed()``); see the module docstring."""

    def __init__(self, path: str | Path, committed: Any = None, *, max_size: int = 0) -> None:
        self.prefix, self.gzip = warc_prefix(path)
        self.max_size = max_size
        self.records = 0
        self._committed = committed
        self._serial = 0
        self._file: _File | None = None
        self._dirty: list[_File] = []  # written since the last sync, oldest first

    @property
    def path(self) -> Path:
        return warc_path(self.prefix, self._serial, self.gzip)

    @property
    def size(self) -> int:
        return self._file.size if self._file is not None else 0

    def files(self) -> list[Path]:
        return [warc_path(self.prefix, s, self.gzip) for s in serials(self.prefix, self.gzip)]

    async def open(self) -> WarcFiles:
        with naming("creating the WARC directory", self.prefix.parent):
            self.prefix.parent.mkdir(parents=True, exist_ok=True)
        c = self._committed
        if isinstance(c, dict):
            serial, size = int(c["serial"]), int(c["size"])
            removed = False
            for s in serials(self.prefix, self.gzip):
                if s > serial:  # opened by a rotation whose group never committed
                    with naming("deleting", warc_path(self.prefix, s, self.gzip)):
                        warc_path(self.prefix, s, self.gzip).unlink()
                    removed = True
            if removed:
                fsync_dir(self.prefix.parent)
        else:  # no offsets (a state dir from before them, or repaired): a new file
            serial, size = _next_serial(self.prefix, self.gzip), 0
        self._serial = serial
        with naming("cutting back to its committed size", self.path):
            truncate_to(self.path, size)
        await self._open_file()
        return self

    async def _open_file(self) -> None:
        f = _File(self.path)
        await f.open()
        self._file = f
        if f.size == 0:
            await f._write(warcinfo(self.path.name, gzip=self.gzip))
            f.info_end = f.size
            fsync_dir(self.prefix.parent)  # the new name survives a crash once committed
        self._dirty.append(f)

    async def write(self, records: Sequence[Blob]) -> None:
        """Append each record blob (a request + response pair), rotating first when
        it would take the open file past ``max_size`` (never leaving one empty);
        the blobs bound for one file go out in one write, a ``RecordFile`` copied
        a MiB at a time (and closed)."""
        assert self._file is not None
        if self._file not in self._dirty:
            self._dirty.append(self._file)
        batch: list[bytes] = []
        size = self._file.size
        try:
            for blob in records:
                if (self.max_size and size + len(blob) > self.max_size
                        and size > self._file.info_end):
                    await self._file._write(b"".join(batch))
                    batch = []
                    self._serial += 1
                    await self._open_file()
                    size = self._file.size
                if isinstance(blob, RecordFile):
                    await self._file._write(b"".join(batch))
                    batch = []
                    await self._file.copy_from(blob)
                else:
                    batch.append(blob)
                size += len(blob)
            if batch:
                await self._file._write(b"".join(batch))
        finally:
            for blob in records:
                if isinstance(blob, RecordFile):
                    blob.close()
        self.records += len(records)

    async def sync(self) -> None:
        """Make every written byte durable; files left for a newer one are closed."""
        dirty, self._dirty = self._dirty, []
        import asyncio

        await asyncio.gather(*(f.sync() for f in dirty))
        for f in dirty:
            if f is not self._file:
                await f.close()

    def committed(self) -> dict[str, int]:
        """What a commit records: the open file's serial and size."""
        return {"serial": self._serial, "size": self.size}

    async def __aenter__(self) -> WarcFiles:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for f in self._dirty:
            if f is not self._file:
                await f.close()
        self._dirty = []
        if self._file is not None:
            f, self._file = self._file, None
            await f.close()
