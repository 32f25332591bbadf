"""The host of a URL: what the frontier groups by and a fleet routes by.

A URL-layer helper of its own so that every layer that needs a host (the
journal's per-host frontier rows, ``UrlSeen``'s ``NewUrl``, the crawler's scope
and politeness) asks one parser, and none of them imports the journal for it.
"""

from __future__ import annotations

__all__ = ["host_of"]


def host_of(url: str) -> str:
    """``host[:port]`` of a normalized absolute URL, without userinfo."""
    return url.split("/", 3)[2].rpartition("@")[2]
