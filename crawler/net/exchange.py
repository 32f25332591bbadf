"""One HTTP hop as it went over the wire, and the digest of its payload.

Why a module of its own: the fetch (net) records each hop while it has the
response in hand, and the WARC writer (the crawl's output) turns hops into
records later, in the group commit. The hop is the net layer's fact; the WARC
file is the core's, so the record of the exchange lives here, below both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from crawler.net.body import Body, sha1_text

__all__ = ["Answer", "Exchange", "exchange_of", "payload_digest"]


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


class _Target(Protocol):
    @property
    def scheme(self) -> str: ...
    @property
    def raw_path_qs(self) -> str: ...


class _Request(Protocol):
    @property
    def url(self) -> _Target: ...
    @property
    def method(self) -> str: ...
    @property
    def headers(self) -> Mapping[str, str]: ...


class Answer(Protocol):
    """A response whose headers have arrived, from either HTTP client: aiohttp's
    ``ClientResponse`` or the lean client's ``http1.Response`` (which offers the
    same attributes)."""

    @property
    def url(self) -> object: ...
    @property
    def status(self) -> int: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def version(self) -> Sequence[int] | None: ...
    @property
    def raw_headers(self) -> Iterable[tuple[bytes, bytes]]: ...
    @property
    def request_info(self) -> _Request: ...


def exchange_of(resp: Answer, *, started: float, ip: str | None,
                proxied: bool = False) -> Exchange:
    """The hop ``resp`` answered, as sent and received, for either client: headers as
    on the wire (a ``request_info``'s headers are the ones the client wrote).

    Through a proxy (``proxied``) the connection's address is the proxy's, so there
    is no WARC-IP-Address; an http target is sent in absolute form (the whole URL
    on the request line, RFC 9112 3.2.2), an https one in origin form inside the
    CONNECT tunnel; the proxy's credentials stay out of the archive."""
    info = resp.request_info
    v = resp.version
    version = f"HTTP/{v[0]}.{v[1]}" if v is not None else "HTTP/1.1"
    absolute = proxied and info.url.scheme == "http"
    target = str(info.url) if absolute else info.url.raw_path_qs or "/"
    headers = [(k, val) for k, val in info.headers.items()
               if not (proxied and k.lower() == "proxy-authorization")]
    return Exchange(
        url=str(resp.url), started=started, method=info.method,
        target=target, request_headers=headers,
        version=version, status=resp.status, reason=resp.reason or "",
        response_headers=[(k.decode("latin-1"), val.decode("latin-1"))
                          for k, val in resp.raw_headers],
        ip=None if proxied else ip)
