"""Content-Encoding decoders for the lean client: gzip, deflate, br, zstd, undone
a bounded piece at a time.

Why its own: the lean client (``crawler.net.http1``) borrowed aiohttp's
decoders from ``aiohttp.compression_utils``, a module aiohttp does not export,
whose classes changed shape between minor releases. These wrap the same
libraries (zlib; brotli or brotlicffi; zstd from the standard library or
backports.zstd, found the way aiohttp finds them, so both clients offer the
same ``Accept-Encoding``), and decode as aiohttp does where a page could tell:
concatenated gzip/deflate/zstd members are one body (at most
``MAX_MEMBERS``), a deflate body without its zlib header is read raw, a
deflate body that stops before its end is an error. Output is bounded per call
(``most``), so a compression bomb is cut by the size cap like any body.
"""

from __future__ import annotations

import sys
import zlib
from typing import Any, Protocol

__all__ = ["ACCEPT_ENCODING", "MAX_MEMBERS", "DecodeError", "Decoder", "decoder_for"]

try:
    try:
        import brotlicffi as _brotli  # type: ignore[import-not-found]
    except ImportError:
        import brotli as _brotli  # type: ignore[import-not-found,no-redef]
except ImportError:
    _brotli = None

try:
    if sys.version_info >= (3, 14):
        from compression.zstd import ZstdDecompressor as _Zstd  # type: ignore[import-not-found]
    else:
        from backports.zstd import ZstdDecompressor as _Zstd  # type: ignore[import-not-found]
except ImportError:
    _Zstd = None

# The codings offered, in aiohttp's order: a server may use any of them.
ACCEPT_ENCODING: str = ", ".join(
    ["gzip", "deflate"] + (["br"] if _brotli is not None else [])
    + (["zstd"] if _Zstd is not None else []))
MAX_MEMBERS = 1024  # concatenated members one body may have (aiohttp's limit)


class DecodeError(Exception):
    """The body is not valid in its Content-Encoding (or not whole)."""


class Decoder(Protocol):
    @property
    def more(self) -> bool:
        """Output may be waiting: call ``decompress(b"", most)`` before feeding more."""

    def decompress(self, data: bytes, most: int) -> bytes:
        """Up to ``most`` bytes decoded from what was fed (``data`` included)."""

    def finish(self) -> None:
        """The body ended: DecodeError if the coding says it is not whole."""


def decoder_for(coding: str) -> Decoder | None:
    """A decoder for a Content-Encoding token (lowercase); None for one not
    decoded here (the body is then passed on as it came, as aiohttp does).
    DecodeError for br or zstd when their library is missing."""
    if coding == "gzip":
        return _Members(lambda: zlib.decompressobj(16 + zlib.MAX_WBITS), _ZLIB)
    if coding == "deflate":
        return _Deflate()
    if coding == "br":
        if _brotli is None:
            raise DecodeError("Can not decode content-encoding: brotli (br)")
        return _Brotli()
    if coding == "zstd":
        if _Zstd is None:
            raise DecodeError("Can not decode content-encoding: zstandard (zstd)")
        return _Members(_Zstd, _ZSTD)
    return None


_ZLIB, _ZSTD = 0, 1


class _Members:
    """A zlib or zstd stream that may be several members back to back.

    ``_in`` holds the input not yet decoded: zlib's ``unconsumed_tail`` when the
    output bound stopped it, or what follows a finished member."""

    __slots__ = ("_d", "_full", "_in", "_kind", "_members", "_new", "_seen")

    def __init__(self, new: Any, kind: int) -> None:
        self._new = new
        self._d = new()
        self._kind = kind
        self._in = b""
        self._full = False  # the last call stopped at its bound: output may be waiting
        self._members = 1
        self._seen = False  # any input at all

    @property
    def more(self) -> bool:
        return self._full or bool(self._in)

    def decompress(self, data: bytes, most: int) -> bytes:
        buf = self._in + data if self._in else data
        if data:
            self._seen = True
        parts = []
        got = 0
        d = self._d
        try:
            while got < most and (buf or self._full):
                self._full = False
                if d.eof:
                    if not buf:
                        break
                    self._members += 1  # what follows a member starts another
                    if self._members > MAX_MEMBERS:
                        raise DecodeError(f"more than {MAX_MEMBERS} members")
                    d = self._d = self._new()
                out = d.decompress(buf, most - got)
                if out:
                    parts.append(out)
                    got += len(out)
                if d.eof:
                    buf = d.unused_data
                elif self._kind == _ZLIB:
                    buf = d.unconsumed_tail
                else:  # zstd keeps unread input itself: only an empty call drains it
                    buf = b""
                    self._full = not d.needs_input
                if got >= most:
                    self._full = True
        except DecodeError:
            raise
        except Exception as e:
            raise DecodeError(str(e)) from None
        self._in = buf
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def finish(self) -> None:
        """A gzip or zstd body that stops inside a member keeps what it decoded, as
        aiohttp (and Scrapy's gunzip, and browsers) keep it."""


class _Deflate(_Members):
    """deflate: RFC 1950 (zlib header) as the standard says, or raw RFC 1951 as
    some servers send it, told apart by the first byte; and never cut short."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(lambda: zlib.decompressobj(zlib.MAX_WBITS), _ZLIB)

    def decompress(self, data: bytes, most: int) -> bytes:
        if not self._seen and data and data[0] & 0x0F != 8:  # no zlib header
            self._d = zlib.decompressobj(-zlib.MAX_WBITS)
            self._new = lambda: zlib.decompressobj(-zlib.MAX_WBITS)
        return super().decompress(data, most)

    def finish(self) -> None:
        if self._seen and not self._d.eof:
            raise DecodeError("deflate stream cut short")


class _Brotli:
    __slots__ = ("_d", "_last")

    def __init__(self) -> None:
        assert _brotli is not None
        self._d = _brotli.Decompressor()
        self._last = b""  # what the last call gave: b"" means drained

    @property
    def more(self) -> bool:
        return bool(self._last) and not self._d.is_finished()

    def decompress(self, data: bytes, most: int) -> bytes:
        d = self._d
        try:
            # brotlicffi calls it decompress, Google's brotli process; both take the bound
            out = d.decompress(data, most) if hasattr(d, "decompress") else d.process(data, most)
        except Exception as e:
            raise DecodeError(str(e)) from None
        self._last = out
        return out

    def finish(self) -> None:
        """A cut brotli body keeps what it decoded, as with aiohttp."""
