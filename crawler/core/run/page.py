"""What a crawl hands to user code for each page, and how it runs that code.

Why the hooks run inside the engine's worker, before the page's group commit:
the items a handler returns are written to items.jsonl in the same group commit
as the page's pages.jsonl line and ledger mark, so a kill -9 leaves either both
or neither (the page is fetched again and its handler runs again on resume),
and ``follow`` decides which links the commit admits.

Errors in user code are data, not crashes: the traceback goes into the page's
pages.jsonl record (``handler_error``) and the crawl goes on, unless the hooks
were made with ``on_error="stop"``: then the page is not committed (it stays
queued, so a resume with a fixed handler handles it) and the crawl stops.
"""

from __future__ import annotations

import inspect
import json
import traceback
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from crawler.core.state.state import CrawlError

__all__ = ["Follow", "Handler", "HandlerError", "Hooks", "Outcome", "Page"]


@dataclass(slots=True)
class Page:
    """One fetched page: a response of any status (a 404 and a redirect are pages
    too). URLs that got no response (refused, timed out, given up) or that
    robots.txt disallows are not pages; they are only in pages.jsonl."""

    url: str  # the URL fetched
    final_url: str | None  # a redirect's target (one hop), else ``url``
    status: int
    headers: Mapping[str, str]  # the response's headers (case-insensitive names)
    depth: int  # hops from a seed
    referrer: str | None  # the page this URL was first found on (None for a seed)
    content_type: str | None  # the media type only, lowercased ("text/html")
    # the HTML body as received: its first [fetch] parse_limit bytes (the part links
    # are taken from) for a bigger page; b"" when not HTML or not read
    body: bytes
    text: str | None  # ``body`` decoded with its charset (None when not HTML)
    # absolute, normalized URLs in the crawl's scope (hosts, include/exclude) that
    # the page links to (a redirect: its target), each once, in page order
    links: list[str] = field(default_factory=list)
    error: str | None = None  # why the body is not there ("http 404", "not html", ...)
    # a sitemap file, shown to ``follow`` alone (no handler, not delivered: not a page);
    # ``links`` are the URLs it lists in the crawl's scope, ``body`` the file as received
    sitemap: bool = False


Item = Mapping[str, Any]
# page -> URLs to enqueue (relative ones resolve against the page; out of scope dropped)
Follow = Callable[[Page], Iterable[str]]
# page -> items (dicts) for items.jsonl, or None; may be async, or an (async) generator
Handler = Callable[[Page], Any]
OnError = Literal["continue", "stop"]
Deliver = Callable[[Page], Awaitable[None]]

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class HandlerError(CrawlError):
    """A handler (or follow) raised with ``on_error="stop"``: the crawl stopped
    cleanly and resumes where it stopped, the page that failed included."""

    def __init__(self, url: str, tb: str) -> None:
        last = tb.rstrip().rpartition("\n")[2]
        super().__init__(f"the page handler failed on {url}: {last}; the crawl stopped "
                         "(resume it to go on: that page is handled again)")
        self.url = url
        self.traceback = tb


@dataclass(slots=True)
class Outcome:
    """What the hooks made of one page."""

    items: bytes = b""  # items.jsonl lines
    count: int = 0  # how many items
    error: str | None = None  # the traceback when the handler or follow raised
    follow: list[str] | None = None  # URLs to enqueue; None: all of ``page.links``


class Hooks:
    """A crawl's user code: ``handler`` (items), ``follow`` (links to enqueue),
    ``on_error`` (go on, or stop at the first error), and ``deliver``, awaited with
    each page once it is committed (``Crawler``'s iteration)."""

    def __init__(self, handler: Handler | None = None, follow: Follow | None = None, *,
                 on_error: OnError = "continue", deliver: Deliver | None = None) -> None:
        if on_error not in ("continue", "stop"):
            raise ValueError(f"on_error must be 'continue' or 'stop', not {on_error!r}")
        if handler is not None and not callable(handler):
            raise TypeError(f"handler must be callable, not {type(handler).__name__}")
        if follow is not None and not callable(follow):
            raise TypeError(f"follow must be callable, not {type(follow).__name__}")
        self.handler = handler
        self.follow = follow
        self.on_error: OnError = on_error
        self.deliver = deliver
        self.errors = 0  # pages whose handler or follow raised, this run
        self.items = 0  # items written (handed to the commit), this run

    @property
    def stops(self) -> bool:
        return self.on_error == "stop"

    @property
    def records(self) -> bool:
        """Pages get ``items`` and ``handler_error`` fields (there is user code)."""
        return self.handler is not None or self.follow is not None

    async def run(self, page: Page, *, follow: bool, handle: bool = True) -> Outcome:
        """The handler's items (encoded) when ``handle``, then ``follow``'s URLs when
        ``follow`` (the page's links are enqueued at all). Never raises for user
        code's errors."""
        out = Outcome()
        try:
            if handle and self.handler is not None:
                lines = [_dumps(_item(x)) for x in await _collect(self.handler(page))]
                if lines:
                    out.items = ("\n".join(lines) + "\n").encode()
                    out.count = len(lines)
            if follow and self.follow is not None:
                urls = self.follow(page)
                if inspect.isawaitable(urls):
                    urls = await urls
                out.follow = [_url(u) for u in (urls or ())]
        except Exception:
            self.errors += 1
            return Outcome(error=traceback.format_exc())
        self.items += out.count
        return out


async def _collect(result: Any) -> list[Any]:
    """A handler's result as a list: None, one dict, an iterable or async iterable of
    them, or an awaitable of any of those."""
    if inspect.isawaitable(result):
        result = await result
    if result is None:
        return []
    if isinstance(result, Mapping):
        return [result]
    if isinstance(result, AsyncIterable):
        return [x async for x in result]
    if isinstance(result, str | bytes) or not isinstance(result, Iterable):
        raise TypeError(f"a handler returns dicts (or an iterable of them) or None, "
                        f"not {type(result).__name__}")
    return list(result)


def _item(x: Any) -> Item:
    if not isinstance(x, Mapping):
        raise TypeError(f"an item is a dict, not {type(x).__name__}: {x!r:.100}")
    return x if isinstance(x, dict) else dict(x)


def _url(u: Any) -> str:
    if not isinstance(u, str):
        raise TypeError(f"follow returns URLs (str), not {type(u).__name__}: {u!r:.100}")
    return u

