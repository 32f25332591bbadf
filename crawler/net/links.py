"""Link extraction from HTML with a real parser (selectolax's lexbor backend).

Why lexbor: bench/html_parsers.py measures it against lxml on realistic pages
(50-200 links, 20-100 KB) and it is the faster of the two; it is also an HTML5
(WHATWG) tree builder, so broken markup yields the links a browser would see.

This module only *finds* links. It returns the raw href values; resolving them
against the base URL, dropping non-http(s) schemes and canonicalizing is the
canonicalizer's job (done for a whole page in one batch by the caller).
"""

from __future__ import annotations

import codecs

import ada_url
from selectolax.lexbor import LexborHTMLParser

__all__ = ["extract_links", "page_meta_robots"]

# The WHATWG URL parser strips leading/trailing "C0 control or space"; doing the
# same here keeps the raw hrefs comparable across pages.
_URL_STRIP = "".join(map(chr, range(0x21)))
_HTML_SPACE = " \t\n\r\f"

_SELECT_ANCHORS = "a[href], area[href]"


def _parse(body: bytes, charset: str | None) -> LexborHTMLParser:
    """Parse bytes without ever raising on a bad charset or invalid bytes.

    A valid header charset wins (HTTP beats <meta>, as in browsers). Without a
    usable one, lexbor sniffs a BOM or <meta charset> in the first 1024 bytes and
    otherwise reads UTF-8; invalid sequences become U+FFFD either way.
    """
    if charset:
        try:
            name = codecs.lookup(charset).name
        except LookupError:
            name = None
        if name == "utf-8":
            return LexborHTMLParser(body)
        if name is not None:
            try:
                return LexborHTMLParser(body.decode(name, "replace"))
            except (LookupError, TypeError, ValueError):
                pass  # not a text encoding (e.g. "base64"): ignore the label
    return LexborHTMLParser(body, encoding=True)


def _robots_directives(content: str | None) -> set[str]:
    if not content:
        return set()
    return {d.strip(_HTML_SPACE).lower() for d in content.split(",")}


def _is_nofollow_meta(attrs: dict[str, str | None]) -> bool:
    name = (attrs.get("name") or "").strip(_HTML_SPACE).lower()
    if name != "robots":
        return False
    directives = _robots_directives(attrs.get("content"))
    return "nofollow" in directives or "none" in directives


def _resolve_base(href: str, page_url: str) -> str | None:
    try:
        url = ada_url.join_url(page_url, href.strip(_URL_STRIP))
    except ValueError:
        return None
    return url if url.startswith(("http://", "https://")) else None


def extract_links(
    body: bytes,
    page_url: str,
    *,
    charset: str | None = None,
    nofollow: bool = False,
) -> tuple[str, list[str]]:
    """Return (base_url, raw_hrefs) for one HTML page.

    base_url is page_url, or the first <base href> resolved against page_url when
    that yields an http(s) URL. raw_hrefs are the href values of <a> and <area>
    in document order, stripped of surrounding whitespace/control characters,
    empty ones (self-links) dropped, otherwise untouched — `javascript:` and
    `mailto:` included. With nofollow=True, links with rel~=nofollow are dropped,
    and a page whose <meta name=robots> says nofollow (or none) yields no links.
    Never raises on bad charsets or invalid bytes.

    Why ``tags()`` and not one CSS selector: lexbor compiles a selector on every
    ``css()`` call, which cost more than parsing the page itself; a by-name walk
    of the tree does not. Image-map <area> links are rare: only a page that has
    some goes through the selector, which keeps <a> and <area> in document order.
    """
    tree = _parse(body, charset)
    base_url = page_url
    for node in tree.tags("base"):
        attrs = node.attrs
        if "href" in attrs:  # only the first <base href> counts (HTML "frozen base URL")
            base_url = _resolve_base(attrs.get("href") or "", page_url) or page_url
            break
    if nofollow and any(_is_nofollow_meta(node.attributes) for node in tree.tags("meta")):
        return base_url, []
    nodes = tree.css(_SELECT_ANCHORS) if tree.tags("area") else tree.tags("a")
    hrefs: list[str] = []
    append = hrefs.append
    strip = _URL_STRIP
    for node in nodes:
        attrs = node.attrs
        href = attrs.get("href")
        if not href:
            continue
        if nofollow:
            rel = attrs.get("rel")
            if rel and "nofollow" in rel.lower().split():
                continue
        href = href.strip(strip)
        if href:
            append(href)
    return base_url, hrefs


def page_meta_robots(body: bytes, *, charset: str | None = None) -> frozenset[str]:
    """Directives of all <meta name=robots> tags, lowercased ("noindex", "nofollow", ...).

    For callers that want more than nofollow (e.g. record noindex pages).
    """
    tree = _parse(body, charset)
    out: set[str] = set()
    for node in tree.css("meta[name]"):
        attrs = node.attributes
        if (attrs.get("name") or "").strip(_HTML_SPACE).lower() == "robots":
            out |= _robots_directives(attrs.get("content"))
    out.discard("")
    return frozenset(out)
