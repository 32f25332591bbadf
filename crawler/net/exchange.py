"""One HTTP hop as it went over the wire, and the digest of its payload.

Why a module of its own: the fetch (net) records each hop while it has the
response in hand, and the WARC writer (the crawl's output) turns hops into
records later, in the group commit. The hop is the net layer's fact; the WARC
file is the core's, so the record of the exchange lives here, below both.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from crawler.net.body import Body, sha1_text

__all__ = ["Exchange", "payload_digest"]


def payload_digest(body: bytes) -> str:
    """``sha1:BASE32`` of ``body``, as WARC-Payload-Digest and pages.jsonl write it."""
    return sha1_text(hashlib.sha1(body).digest())


@dataclass(slots=True)
class Exchange:
    """One HTTP hop as sent and received (what a request + response record hold)."""

    url: str
    started: float  # time.time() when the request was sent: the records' WARC-Date
    method: str
    target: str  # the request target as sent ("/path?query")
    request_headers: list[tuple[str, str]]
    version: str  # "HTTP/1.1"
    status: int
    reason: str
    response_headers: list[tuple[str, str]]  # as received, in order
    ip: str | None = None
    # the body as received (bytes are taken too, for a body already in hand)
    payload: Body = field(default_factory=Body)
    truncated: str | None = None  # WARC-Truncated: "length" (the body was cut or not read)

    def __post_init__(self) -> None:
        if isinstance(self.payload, bytes | bytearray):
            self.payload = Body.of(self.payload)

    def payload_digest(self) -> str:
        return self.payload.digest()
