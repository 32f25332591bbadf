"""A Scrapy crawl's items in a JSON-lines file committed with the seen-set's page
marks (``BLOOMCRAWL_ITEMS``): each page's items exactly once across kill -9.

Why not Scrapy's feeds: a feed exporter writes each item as it leaves the item
pipelines into a buffered file, never fsynced, and records nowhere how much of
it belongs to which page. A kill -9 then loses the items still in the buffer
(their pages may already be marked done: never fetched again) and keeps items
of pages not marked (fetched and exported again: duplicates). No marking order
fixes that from outside the exporter.

So this file is written the way bloomcrawl's own pages.jsonl is: a page's items
are appended (with ``os.write``: in the OS's cache at once, which a kill -9 does
not lose) together when the page is marked done, its new size goes into the
ledger's open transaction (``ITEMS_KEY``), and the group commit fdatasyncs the
file before the ledger commits. Reopening cuts the file back to the committed
size: what lies past it are items of pages whose marks were lost, which the
next run fetches (re-issues) and exports again.
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
from typing import Any

from scrapy.exporters import JsonLinesItemExporter

from dedup.store.seen import UrlSeen

__all__ = ["ITEMS_KEY", "ItemLog"]

logger = logging.getLogger(__name__)

ITEMS_KEY = "scrapy_items"  # ledger meta: {"path": absolute path, "size": committed bytes}


class ItemLog:
    """``path``, appended to page by page, its committed size kept in ``seen``'s ledger.

    ``encode(item)`` is the item's line as Scrapy's ``jsonlines`` feed writes it
    (``FEED_EXPORT_ENCODING``, ``FEED_EXPORT_FIELDS``)."""

    def __init__(self, path: str | Path, seen: UrlSeen, *, encoding: str | None = None,
                 fields: list[str] | None = None) -> None:
        self.path = Path(path).resolve()
        self._seen = seen
        self._buffer = io.BytesIO()
        self._exporter = JsonLinesItemExporter(self._buffer, encoding=encoding,
                                               fields_to_export=fields or None)
        self._fd = -1
        self._dirty = False
        self.size = 0

    def open(self) -> None:
        """Cut the file back to its committed size (a killed run's uncommitted pages'
        items) and open it for appending."""
        stored = self._seen.ledger.meta_get(ITEMS_KEY) or {}
        committed = stored.get("size") if stored.get("path") == str(self.path) else None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size
        if committed is None:
            if stored.get("path") and self.size:
                logger.warning("BLOOMCRAWL_ITEMS: %s was not this seen-set's items file "
                               "(%s was): items are appended after its %d bytes",
                               self.path, stored["path"], self.size)
        elif self.size > committed:
            logger.info("BLOOMCRAWL_ITEMS: %d bytes of items of pages a crash left unmarked "
                        "cut off %s (they are fetched again)", self.size - committed,
                        self.path)
            os.ftruncate(self._fd, committed)
            os.fsync(self._fd)
            self.size = committed
        elif self.size < committed:
            logger.warning("BLOOMCRAWL_ITEMS: %s holds %d bytes, its committed items %d: "
                           "the lost items' pages are not fetched again", self.path,
                           self.size, committed)
        self._record()

    def encode(self, item: Any) -> bytes:
        buf = self._buffer
        buf.seek(0)
        buf.truncate()
        self._exporter.export_item(item)
        return buf.getvalue()

    def append(self, data: bytes) -> None:
        """Write ``data`` (whole lines) and record the new size in the ledger's open
        transaction: the page marks made after this commit with it."""
        if not data:
            return
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        self.size += len(data)
        self._dirty = True
        self._record()

    def _record(self) -> None:
        self._seen.ledger.meta_set(ITEMS_KEY, {"path": str(self.path), "size": self.size})

    def sync(self) -> None:
        """Durable before the ledger commits the size (a power cut, not only kill -9)."""
        if self._dirty and self._fd >= 0:
            os.fdatasync(self._fd)
            self._dirty = False

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
