"""Finding a repaired ledger's lost frontier again, in the links of the recorded pages.

A queued URL whose text was only in the damaged ledger leaves no text behind, but
it leaves two traces: its fingerprint, in the fingerprint index (files apart from
the ledger, read before the repair rebuilds them: ``dedup.index_keys``), and the
page that admitted it, recorded in pages.jsonl (which is in crawl order). So the
lost URLs are looked for where the crawl found them: the redirects pages.jsonl
records, the pages' bodies in the crawl's WARC, and, for what is still missing,
the pages fetched again from the network.

Exact, not a guess: only a link whose fingerprint is one of the lost ones is
admitted (a page that changed since cannot bring in a URL the crawl never
admitted), with its referrer noted, at the depth the crawl gave it (a page
admits every unseen in-scope link it holds, so the first page in crawl order
that links to a lost URL is the one that admitted it), and the search stops as
soon as every lost fingerprint is found. Only pages whose record says they
admitted links (``links_new``) are fetched again, in crawl order, each once,
writing nothing to the output, one request at a time per host with the crawl's
delay between two, at most ``limit`` of them; what is still missing then is
counted exactly (a seed or a sitemap's URL that no page links to, a page that
changed or no longer answers).

When the old index is unreadable too, the lost set is unknown: every unseen
in-scope link of the WARC's pages and the redirects is admitted (as the crawl
would have), and no page is fetched (nothing would say when to stop).
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from crawler.config.scope import Scope
from crawler.config.settings import Settings
from crawler.core.outputs.output import complete_lines
from crawler.core.outputs.warc import serials, warc_path, warc_prefix
from crawler.net.fetch import Fetcher
from crawler.net.headers import parse_content_type
from crawler.net.links import extract_links
from crawler.net.outcome import FetchResult
from dedup import UrlSeen, fingerprint, host_of

__all__ = ["Refound", "read_warc", "records", "refind"]


@dataclass
class Refound:
    """What the search for the lost frontier found and did."""

    lost: int | None = None  # lost fingerprints looked for (None: unknown, no index)
    in_output: int = 0  # found in the redirects and the WARC's pages
    by_fetch: int = 0  # found in pages fetched again
    fetched: int = 0  # pages fetched again
    unanswered: int = 0  # of them, no HTML body came back (failed, moved, another type)
    left: int = 0  # recorded pages that could still have held one, not fetched: the limit
    missing: int = 0  # lost fingerprints still not found: these URLs stay lost

    @property
    def found(self) -> int:
        return self.in_output + self.by_fetch


class _Lost:
    """The fingerprints still to find (None: unknown, every unseen link is taken)."""

    def __init__(self, keys: np.ndarray | None, seed: int) -> None:
        self.seed = seed
        self.keys: set[bytes] | None = None
        if keys is not None:
            raw = np.ascontiguousarray(keys, dtype="<u8").tobytes()
            self.keys = {raw[i:i + 16] for i in range(0, len(raw), 16)}

    def __bool__(self) -> bool:
        return self.keys is None or bool(self.keys)

    def wanted(self, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The pairs to admit: those whose fingerprint is lost (once each)."""
        if self.keys is None:
            return pairs
        out = []
        for url, key in pairs:
            fp = fingerprint(key, self.seed)
            if fp in self.keys:
                self.keys.discard(fp)
                out.append((url, key))
        return out


class _Admitter:
    """Admits what a recorded page links to, as the crawl did: scope, depth limit,
    and (when the lost set is known) only the lost fingerprints."""

    def __init__(self, seen: UrlSeen, settings: Settings, scope: Scope, lost: _Lost) -> None:
        self.seen = seen
        self.lost = lost
        self.max_depth = settings.crawl.max_depth
        self.allows = scope.allows_host
        self.url_ok = scope.url_filter()

    def __call__(self, hrefs: list[str], base: str, depth: int, source: str) -> int:
        if depth >= self.max_depth or not self.lost:
            return 0
        pairs = [p for p in self.seen.canonicalizer.resolve_many(hrefs, base)
                 if p is not None and self.allows(host_of(p[0]))
                 and (self.url_ok is None or self.url_ok(p[1]))]
        (new,) = self.seen.admit_pages([(self.lost.wanted(pairs), depth + 1)])
        if new:
            self.seen.note_referrers([(new[0].seq, new[-1].seq, source)])
        return len(new)


def refind(seen: UrlSeen, settings: Settings, scope: Scope, pages: Path,
           lost_keys: np.ndarray | None, *, limit: int | None = None) -> Refound:
    """Admit again the lost frontier of ``seen`` (a repaired ledger): ``lost_keys``
    (``(n, 2)`` uint64 halves, None if unknown) looked for in the redirects and pages
    of pages.jsonl, their bodies from the WARC, then fetched again (at most
    ``limit`` pages; None: every page that admitted links)."""
    lost = _Lost(lost_keys, seen.seed)
    out = Refound(lost=None if lost.keys is None else len(lost.keys))
    admit = _Admitter(seen, settings, scope, lost)
    recs = list(records(pages))
    for r in recs:
        status, target = r.get("status"), r.get("final_url")
        if status is not None and 300 <= status < 400 and target and target != r["url"]:
            out.in_output += admit([target], r["url"], _depth(r), r["url"])
    depth_of = {r["url"]: _depth(r) for r in recs}
    read: set[str] = set()
    if settings.output.warc and lost:
        html = set(settings.fetch.html_types)
        for uri, ctype, body in read_warc(settings.output.warc, set(depth_of)):
            read.add(uri)
            media, charset = parse_content_type(ctype)
            if media in html and lost:
                base, hrefs = extract_links(body, uri, charset=charset,
                                            nofollow=settings.crawl.honor_nofollow)
                out.in_output += admit(hrefs, base, depth_of[uri], uri)
    if lost.keys is not None and lost.keys:
        todo = [r for r in recs if r["url"] not in read and _admitted_links(r, settings)]
        if limit is not None and len(todo) > limit:
            todo, out.left = todo[:limit], len(todo) - limit
        asyncio.run(_fetch_again(todo, settings, admit, out))
    out.missing = len(lost.keys) if lost.keys is not None else 0
    return out


def _depth(record: dict[str, Any]) -> int:
    return int(record.get("depth") or 0)


def _admitted_links(record: dict[str, Any], settings: Settings) -> bool:
    """Whether a record's page may have admitted links from its body: it says it did
    (``links_new``; a record without the field may have), it is not a redirect, and
    its depth let it."""
    status = record.get("status")
    if status is None or 300 <= status < 400 or _depth(record) >= settings.crawl.max_depth:
        return False
    new = record.get("links_new")
    return new is None or (isinstance(new, int) and new > 0)


async def _fetch_again(todo: list[dict[str, Any]], settings: Settings, admit: _Admitter,
                       out: Refound) -> None:
    """Fetch ``todo``'s pages, a window of them at once (the crawl's concurrency), and
    read their links in crawl order; stop as soon as nothing is lost any more."""
    hosts = _HostTurns(settings.politeness.delay)
    html = set(settings.fetch.html_types)
    async with Fetcher(settings.fetch) as fetcher:
        window: deque[tuple[dict[str, Any], asyncio.Task[FetchResult]]] = deque()
        queue = iter(todo)
        try:
            while True:
                while len(window) < max(1, settings.crawl.concurrency):
                    r = next(queue, None)
                    if r is None:
                        break
                    window.append((r, asyncio.create_task(hosts.fetch(fetcher, r["url"]))))
                if not window:
                    return
                r, task = window.popleft()
                res = await task
                out.fetched += 1
                if res.body is None or res.content_type not in html:
                    out.unanswered += 1
                    continue
                base, hrefs = extract_links(res.body, r["url"], charset=res.charset,
                                            nofollow=settings.crawl.honor_nofollow)
                out.by_fetch += admit(hrefs, base, _depth(r), r["url"])
                if not admit.lost:
                    return
        finally:
            for _, task in window:
                task.cancel()
            await asyncio.gather(*(t for _, t in window), return_exceptions=True)


class _HostTurns:
    """Politeness for fetching recorded pages again: one request at a time per host,
    ``delay`` seconds between the starts of two."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self._locks: dict[str, asyncio.Lock] = {}
        self._next: dict[str, float] = {}

    async def fetch(self, fetcher: Fetcher, url: str) -> FetchResult:
        host = host_of(url)
        loop = asyncio.get_running_loop()
        async with self._locks.setdefault(host, asyncio.Lock()):
            wait = self._next.get(host, 0.0) - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self._next[host] = loop.time() + self.delay
            return await fetcher.fetch(url)


def records(pages: Path) -> Iterator[dict[str, Any]]:
    """The records of pages.jsonl's complete lines; a line that is not a record (a
    damaged disk block) is skipped: its page is fetched again."""
    for line in complete_lines(pages, missing_ok=True):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("url"), str):
            yield record


def read_warc(path: str | Path, uris: set[str]) -> Iterator[tuple[str, str, bytes]]:
    """``(target URI, Content-Type, body)`` of each 2xx page of ``uris`` in the
    crawl's WARC files (every file of ``--warc path``'s prefix, in serial order): a
    ``response`` record's own body, a ``revisit``'s the body of the response with
    its payload digest (two passes: revisits hold no body). A torn or damaged
    record ends its file."""
    prefix, gz = warc_prefix(path)
    files = [warc_path(prefix, s, gz) for s in serials(prefix, gz)]
    revisits: dict[str, list[str]] = {}  # payload digest -> URIs that revisited it
    for uri, rec in _warc_records(files, "revisit"):
        digest = rec.rec_headers.get_header("WARC-Payload-Digest")
        if uri in uris and digest:
            revisits.setdefault(digest, []).append(uri)
    for uri, rec in _warc_records(files, "response"):
        digest = rec.rec_headers.get_header("WARC-Payload-Digest")
        wanted = revisits.get(digest or "", [])
        if uri not in uris and not wanted:
            continue
        ctype = rec.http_headers.get_header("Content-Type") or ""
        body = rec.content_stream().read()
        for target in ([uri] if uri in uris else []) + wanted:
            yield target, ctype, body


def _warc_records(files: Iterable[Path], kind: str) -> Iterator[tuple[str, Any]]:
    """``(target URI, warcio record)`` of the 2xx records of type ``kind``."""
    for path in files:
        try:
            with open(path, "rb") as fh:
                for rec in ArchiveIterator(fh):
                    if rec.rec_type != kind or rec.http_headers is None:
                        continue
                    uri = rec.rec_headers.get_header("WARC-Target-URI")
                    status = rec.http_headers.get_statuscode() or ""
                    if uri and status.startswith("2"):
                        yield uri, rec
        except (ArchiveLoadFailed, OSError, EOFError, ValueError, zlib.error):
            continue  # torn or damaged: the rest of this file is lost
