"""Sitemap files (sitemaps.org): a ``<urlset>`` of page URLs or a
``<sitemapindex>`` of further sitemaps, plain or gzip.

Why its own parser and not the HTML one: a sitemap is XML from a stranger, so it
is read with caps at every step. The gzip stream is inflated only up to
``max_bytes`` (a gzip bomb costs at most that), a document that declares a DTD
is refused (sitemaps never need one, and entity expansion is how XML attacks
memory or reaches for external files), and at most ``max_urls`` locations are
kept, as the protocol allows per file. Pure: bytes in, URLs out.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from xml.etree.ElementTree import ParseError, XMLPullParser

__all__ = ["MAX_BYTES", "MAX_URLS", "Sitemap", "parse_sitemap"]

MAX_URLS = 50_000  # per file, sitemaps.org
MAX_BYTES = 50 * 1024 * 1024  # uncompressed, per file, sitemaps.org
_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class Sitemap:
    """What one sitemap file holds: ``index`` (its locs are sitemaps) or a urlset."""

    index: bool = False
    locs: list[str] = field(default_factory=list)
    error: str | None = None  # malformed, too large...: then ``locs`` is empty
    note: str | None = None  # read, but not all of it was used (over max_urls)


def _inflate(body: bytes, max_bytes: int) -> bytes | str:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(body, max_bytes + 1)
    except zlib.error:
        return "bad gzip"
    if len(out) > max_bytes:
        return f"too large (>{max_bytes} bytes uncompressed)"
    if not d.eof:
        return "bad gzip (truncated)"
    return out


def parse_sitemap(body: bytes, *, max_bytes: int = MAX_BYTES,
                  max_urls: int = MAX_URLS) -> Sitemap:
    """The locations a sitemap lists (at most ``max_urls``); an error, never an
    exception, for anything that is not a readable sitemap within the limits."""
    if body[:2] == b"\x1f\x8b":
        data = _inflate(body, max_bytes)
        if isinstance(data, str):
            return Sitemap(error=data)
    else:
        data = body
    if len(data) > max_bytes:
        return Sitemap(error=f"too large (>{max_bytes} bytes uncompressed)")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        return Sitemap(error="declares a DTD (refused)")
    parser = XMLPullParser(events=("start", "end"))
    root: str | None = None
    locs: list[str] = []
    note = None
    try:
        for i in range(0, len(data), _CHUNK):
            parser.feed(data[i:i + _CHUNK])
            for event, elem in parser.read_events():
                tag = elem.tag.rpartition("}")[2]
                if event == "start":
                    if root is None:
                        root = tag
                        if root not in ("urlset", "sitemapindex"):
                            return Sitemap(error=f"not a sitemap (<{root}>)")
                    continue
                if tag == "loc":
                    loc = (elem.text or "").strip()
                    if loc:
                        if len(locs) >= max_urls:
                            note = f"over {max_urls} URLs (the first {max_urls} kept)"
                            return Sitemap(root == "sitemapindex", locs, note=note)
                        locs.append(loc)
                elif tag in ("url", "sitemap"):
                    elem.clear()  # memory stays bounded by one entry
        parser.close()
    except ParseError as exc:
        return Sitemap(error=f"malformed xml ({exc})")
    if root is None:
        return Sitemap(error="malformed xml (empty)")
    return Sitemap(root == "sitemapindex", locs, note=note)
