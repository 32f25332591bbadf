"""bloomcrawl's crawler: ``from crawler import Crawler`` (``crawler.core.run.crawl``).

The names below are imported when first used, so importing any part of the
package (``crawler.config``, the command line) does not load the crawl loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawler.core.run.crawl import Crawler, CrawlError, HandlerError, Page

__all__ = ["CrawlError", "Crawler", "HandlerError", "Page"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from crawler.core.run import crawl

        return getattr(crawl, name)
    raise AttributeError(f"module 'crawler' has no attribute {name!r}")
