"""What one fetch came to: the result the engine reads, and failures classified by type.

Why a result object instead of exceptions: on the open web failures are the
normal case, and a crawl loop that has to catch a dozen aiohttp exception types
per page is how workers die. Why classified here, by exception type: whether a
failure is retried, and whether the page counts as fetched or failed, must not
depend on the wording of an error message.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawler.net.refused import PRIVATE_REFUSED, REFUSED

if TYPE_CHECKING:
    from crawler.net.exchange import Exchange

__all__ = ["BadResponse", "ConnectError", "Failure", "FetchResult", "ResolveError",
           "classify_error", "failure_cause"]


@dataclass(frozen=True, slots=True)
class FetchResult:
    url: str
    status: int | None  # None when no HTTP response (error)
    content_type: str | None  # media type only, lowercased ("text/html")
    charset: str | None
    # only for HTML responses within the cap, and of those only the first
    # ``parse_limit`` bytes (a sitemap's: all of it up to its cap); None otherwise
    body: bytes | None
    nbytes: int  # body bytes received, or the declared Content-Length when not read
    location: str | None  # raw Location header for 3xx (engine resolves it)
    retry_after: float | None
    error: str | None  # None on success; short reason ("timeout", "http 500", ...)
    attempts: int
    elapsed: float
    # The transfer broke (a timeout, a refused or reset connection), whatever the
    # status line said: set from the exception's type, never read off ``error``.
    interrupted: bool = False
    # The last attempt failed in a way that may pass (a timeout, a refused
    # connection, a 5xx, a 429): the crawl tries the URL again later, with backoff.
    retryable: bool = False
    # What was sent and received, for the WARC (only when the fetcher records).
    exchange: Exchange | None = None
    # ``sha1:BASE32`` of the whole body when ``body`` is set (``body`` may be its head)
    digest: str | None = None
    # The response's headers (case-insensitive names), for page handlers.
    headers: Mapping[str, str] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def failed(self) -> bool:
        """No usable answer: nothing came back, the server failed, or the transfer did.

        A 4xx, a non-HTML type and an over-cap body are answers (the page counts
        as fetched, with the reason in ``error``); a 5xx, a 429, a timeout or a
        reset are not.
        """
        status = self.status
        return status is None or status >= 500 or status == 429 or self.interrupted


class BadResponse(Exception):
    """A response that breaks HTTP/1.1 or its limits, from the lean client
    (``crawler.net.http1``); aiohttp raises its ``HttpProcessingError``."""


class ConnectError(OSError):
    """The lean client found no connection to ``host``:``port``; ``os_error`` says
    why. aiohttp's ``ClientConnectorError`` is the same fact, but can only be made
    from a key of aiohttp's connection pool."""

    def __init__(self, host: str, port: int, os_error: OSError) -> None:
        super().__init__(os_error.errno, os_error.strerror)
        self.host = host
        self.port = port
        self.os_error = os_error

    def __str__(self) -> str:
        return f"Cannot connect to host {self.host}:{self.port} [{self.strerror or self.os_error}]"


class ResolveError(ConnectError):
    """The host's name did not resolve, or only to addresses the guard refuses."""


@dataclass(frozen=True, slots=True)
class Failure:
    """A request that raised instead of answering."""

    reason: str  # short text for pages.jsonl's ``error`` ("timeout", "dns error", ...)
    retryable: bool  # worth another attempt (with backoff)
    interrupted: bool  # the transfer itself broke: timeout, refused or reset connection


def classify_error(exc: BaseException) -> Failure:
    """What a request that raised ``exc`` came to, decided by the exception's type."""
    # here, not at the top: ``failure_cause`` (bloomcrawl stats) needs no HTTP client
    import aiohttp
    from aiohttp.http_exceptions import HttpProcessingError

    from crawler.net.netguard import PrivateAddressError

    if isinstance(exc, TimeoutError):  # asyncio.TimeoutError is TimeoutError
        return Failure("timeout", True, True)
    if isinstance(exc, aiohttp.ClientConnectorDNSError | ResolveError):
        cause = exc.os_error
        if isinstance(cause, PrivateAddressError):
            return Failure(str(cause), False, False)
        return Failure("dns error", getattr(cause, "errno", None) == socket.EAI_AGAIN, False)
    if isinstance(exc, aiohttp.ClientSSLError):
        return Failure("tls error", False, False)
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectError):
        if exc.os_error.errno == errno.ECONNREFUSED:
            return Failure("connection refused", True, True)
        return Failure(f"connect error: {exc.os_error.strerror or exc.os_error}", True, False)
    if isinstance(exc, aiohttp.ServerDisconnectedError | ConnectionResetError | BrokenPipeError):
        return Failure("connection reset", True, True)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return Failure("connection reset (incomplete body)", True, True)
    if isinstance(exc, aiohttp.InvalidURL | ValueError):
        return Failure("invalid url", False, False)
    if isinstance(exc, aiohttp.ClientResponseError | HttpProcessingError | BadResponse):
        return Failure("bad http response", False, False)
    if isinstance(exc, OSError):
        if exc.errno in (errno.ECONNRESET, errno.EPIPE):
            return Failure("connection reset", True, True)
        return Failure(f"os error: {exc.strerror or type(exc).__name__}", True, False)
    return Failure(f"client error: {type(exc).__name__}", False, False)


# The first words of each reason this package and the engine record for a page that
# got no response, and the cause it is counted under (``failure_cause``).
_CAUSES = (
    ("connection refused", "connection refused"),
    ("dns error", "dns error"),
    ("timeout", "timeout"),
    ("connection reset", "connection reset"),
    ("tls error", "tls error"),
    (REFUSED, PRIVATE_REFUSED),
    ("retries exhausted", "given up (retry budget spent)"),
    ("connect error", "connect error"),
    ("os error", "os error"),
    ("invalid url", "invalid url"),
    ("bad http response", "bad http response"),
    ("client error", "client error"),
)
_TOO_LARGE = ("too large", "over the limit", "over limit")
_ROBOTS = "robots.txt unavailable: "
_NO_RESPONSE = frozenset({"connection refused", "dns error", "timeout", "connection reset",
                          "tls error", PRIVATE_REFUSED, "connect error"})


def failure_cause(status: int | None, error: str | None) -> str | None:
    """What a recorded page failed of, or None: it counts as fetched (a response).

    Why from the recorded ``(status, error)`` and not the exception: a URL given up
    after a restart, or whose robots.txt was unavailable, has only its recorded
    reason left, and every page must be counted the same way. Any HTTP status is
    a response (a 404 or a 500 counts as fetched, with an error), except a body
    over the size limit: its page was not received, so it counts as failed.
    """
    if error is None:
        return None
    if error.startswith(_TOO_LARGE):
        return "too large"
    if status is not None:
        return None
    robots, _, why = error.partition(_ROBOTS)
    if not robots and why:
        # no robots.txt because its host gave no response: the page failed of that
        inner = failure_cause(None, why)
        return inner if inner in _NO_RESPONSE else "robots.txt unavailable"
    for prefix, cause in _CAUSES:
        if error.startswith(prefix):
            return cause
    return error
