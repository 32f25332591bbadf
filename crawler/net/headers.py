"""What a response's headers and first bytes say: media type and charset, how long
to wait (Retry-After), how long the body is, whether an untyped body is HTML.

Pure functions apart from the fetch loop (``crawler.net.fetch``), which calls them
on every hop: they are where servers send malformed values.
"""

from __future__ import annotations

import email.utils
import math
from datetime import UTC, datetime

__all__ = ["content_length", "looks_like_html", "parse_content_type",
           "parse_retry_after"]

# WHATWG MIME sniffing: patterns that make an untyped body HTML, each followed by
# a tag-terminating byte (space or ">").
_HTML_SNIFF = tuple(
    p.encode()
    for p in (
        "<!doctype html", "<html", "<head", "<script", "<iframe", "<h1", "<div", "<font",
        "<table", "<a", "<style", "<title", "<b", "<body", "<br", "<p", "<!--",
    )
)  # fmt: skip


def parse_content_type(value: str | None) -> tuple[str | None, str | None]:
    """(media type lowercased, charset lowercased) from a Content-Type header value."""
    if not value:
        return None, None
    media, *params = value.split(";")
    media = media.strip().lower() or None
    charset = None
    for param in params:
        key, sep, val = param.partition("=")
        if sep and key.strip().lower() == "charset":
            charset = val.strip().strip("\"'").strip().lower() or None
            break
    return media, charset


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After value (delta-seconds or HTTP-date); None if invalid."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def looks_like_html(head: bytes) -> bool:
    """WHATWG MIME sniffing of an untyped body's first bytes."""
    head = head[:512].lstrip(b" \t\n\r\f").lower()
    for pat in _HTML_SNIFF:
        if head.startswith(pat) and head[len(pat) : len(pat) + 1] in (b" ", b">", b"\t", b"\n"):
            return True
    return False


def content_length(value: str | None) -> int | None:
    """A Content-Length value as a number of bytes; None if absent or malformed."""
    if value is None or not value.strip().isdigit():
        return None
    return int(value.strip())
