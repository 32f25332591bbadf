"""Link extraction from HTML with a real parser (selectolax's lexbor backend).

Why lexbor: bench/html_parsers.py measures it against lxml on realistic pages
(50-200 links, 20-100 KB) and it is the faster of the two; it is also an HTML5
(WHATWG) tree builder, so broken markup yields the links a browser would see.

This module only *finds* links. It returns the raw href values; resolving them
against the base URL, dropping non-http(s) schemes and canonicalizing is the
canonicalizer's job (done for a whole page in one batch by the caller).

``extract_page`` also gives the page's *main text*, from the same parse (a second
parse would cost as much as the first): the text of its ``<main>`` elements if it
has any, else of its ``<body>`` without the parts that repeat from page to page
or are not text (``BOILERPLATE``: navigation, header, footer, asides, scripts,
styles), and in either without lists of links (an ``<a>`` that is a list item's
child: "related", "more in this section", facet refinements, which differ between
views of one content). It is what the page's near-duplicate fingerprint is
computed from (``dedup.learn.simhash``): two pages whose menus, footers, scripts
or link lists differ but whose text is the same are the same content. A link
inside a paragraph stays: it is part of the text.
"""

from __future__ import annotations

import codecs
import os
import re
from typing import Any

import ada_url
from selectolax.lexbor import LexborHTMLParser

__all__ = ["BOILERPLATE", "extract_links", "extract_page", "page_meta_robots"]

# The WHATWG URL parser strips leading/trailing "C0 control or space"; doing the
# same here keeps the raw hrefs comparable across pages.
_URL_STRIP = "".join(map(chr, range(0x21)))
_HTML_SPACE = " \t\n\r\f"

_SELECT_ANCHORS = "a[href], area[href]"
# lexbor's id of <li> (an int compare per link, not a tag name made into a str)
_LI = LexborHTMLParser("<li>").css_first("li").tag_id
# Elements whose text is not the page's own content (or not text at all).
BOILERPLATE = ("script", "style", "noscript", "template", "svg", "nav", "header", "footer",
               "aside", "select", "button")
# what main_text may walk the tree for: the boilerplate, and <main>
_SCANNED = (*BOILERPLATE, "main")
# which of them a page's bytes can hold (crawler/net/_markup.c), None where it did not
# build or BLOOMCRAWL_NO_KERNEL is set: then every name is walked for, as it can be
_markup: Any = None
if not os.environ.get("BLOOMCRAWL_NO_KERNEL"):
    try:
        from crawler.net import _markup
    except ImportError:  # built without a C compiler
        _markup = None

# A page longer than PIECE bytes is parsed in pieces of about that size, each cut just
# before an <a or <area start tag (so every anchor's start tag is whole in one piece,
# TAG_ROOM bytes allowed for the one a cut falls in): lexbor's tree costs ~16-19x
# the HTML it holds (8 MiB of dense markup: 130-150 MB), one piece's ~10 MB.
PIECE = 512 * 1024
TAG_ROOM = 64 * 1024
_ANCHOR_START = re.compile(rb"<(?:a|area)[\s/>]", re.IGNORECASE)
_META_CHARSET = re.compile(rb"<meta[^>]*charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)",
                           re.IGNORECASE)


def _parse(body: bytes, charset: str | None) -> LexborHTMLParser:
    """Parse bytes without ever raising on a bad charset or invalid bytes.

    A valid header charset wins (HTTP beats <meta>, as in browsers). Without a
    usable one, lexbor sniffs a BOM or <meta charset> in the first 1024 bytes and
    otherwise reads UTF-8; invalid sequences become U+FFFD either way.
    """
    return _parse_source(body, charset)[0]


def _parse_source(body: bytes, charset: str | None
                  ) -> tuple[LexborHTMLParser, bytes | None]:
    """``_parse``'s tree, and the bytes lexbor read when ASCII in them is ASCII in the
    page (None: text decoded here, or UTF-16 by its byte order mark)."""
    if charset:
        try:
            name = codecs.lookup(charset).name
        except LookupError:
            name = None
        if name == "utf-8":
            return LexborHTMLParser(body), None if _utf16(body) else body
        if name is not None:
            try:
                return LexborHTMLParser(body.decode(name, "replace")), None
            except (LookupError, TypeError, ValueError):
                pass  # not a text encoding (e.g. "base64"): ignore the label
    return LexborHTMLParser(body, encoding=True), None if _utf16(body) else body


def _utf16(body: bytes) -> bool:
    return body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))


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
    base, hrefs, _ = extract_page(body, page_url, charset=charset, nofollow=nofollow, text=False)
    return base, hrefs


def extract_page(body: bytes, page_url: str, *, charset: str | None = None,
                 nofollow: bool = False, text: bool = True
                 ) -> tuple[str, list[str], str | None]:
    """``extract_links``'s ``(base_url, raw_hrefs)`` and the page's main text (None
    with ``text=False``), from one parse. The text is whitespace-separated words,
    not formatted: what a near-duplicate fingerprint needs; of a page parsed in
    pieces, the first piece's (its first ``PIECE`` bytes)."""
    if len(body) > PIECE:
        return _extract_in_pieces(body, page_url, charset, nofollow, text)
    tree, source = _parse_source(body, charset)
    listed: list[Any] | None = [] if text else None
    base, hrefs = _extract(tree, page_url, nofollow, listed)
    if not text:
        return base, hrefs, None
    names = _markup.start_tags(source, _SCANNED) if source is not None and \
        _markup is not None else None
    return base, hrefs, main_text(tree, listed, names)


def main_text(tree: LexborHTMLParser, listed: list[Any] | None = None,
              names: tuple[str, ...] | None = None) -> str:
    """The text of ``<main>`` if the page has one, else of the body without
    ``BOILERPLATE``; list items' links left out (``listed``: those links, as the walk
    over the links found them; None: found here). Removes what it leaves out from
    ``tree`` (its links are read first). ``names``: of ``main`` and ``BOILERPLATE``,
    those the page's bytes can hold (``_markup.start_tags``): the tree is walked for
    those only (None: for all)."""
    if listed is None:
        listed = [node for node in tree.tags("a")
                  if node.parent is not None and node.parent.tag == "li"]
    for node in listed:
        node.decompose()
    if names is None:
        names = _SCANNED
    mains = tree.tags("main") if "main" in names else None
    if mains:
        return " ".join(m.text(separator=" ") for m in mains)
    strip = [n for n in BOILERPLATE if n in names]
    if strip:  # each name's walk in C, no node object made for what it removes
        tree.strip_tags(strip, recursive=True)
    body = tree.body
    return body.text(separator=" ") if body is not None else ""


def _extract(tree: LexborHTMLParser, page_url: str, nofollow: bool,
             listed: list[Any] | None = None) -> tuple[str, list[str]]:
    base_url = page_url
    for node in tree.tags("base"):
        attrs = node.attrs
        if "href" in attrs:  # only the first <base href> counts (HTML "frozen base URL")
            base_url = _resolve_base(attrs.get("href") or "", page_url) or page_url
            break
    if nofollow and any(_is_nofollow_meta(node.attributes) for node in tree.tags("meta")):
        return base_url, []
    return base_url, _anchors(tree, nofollow, listed)


def _anchors(tree: LexborHTMLParser, nofollow: bool, listed: list[Any] | None = None
             ) -> list[str]:
    """The hrefs of a tree's links; with ``listed``, the links that are a list item's
    child are appended to it (for ``main_text``, so the tree is walked once)."""
    nodes = tree.css(_SELECT_ANCHORS) if tree.tags("area") else tree.tags("a")
    hrefs: list[str] = []
    append = hrefs.append
    strip = _URL_STRIP
    for node in nodes:
        if listed is not None:
            parent = node.parent
            if parent is not None and parent.tag_id == _LI:
                listed.append(node)
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
    return hrefs


def _extract_in_pieces(body: bytes, page_url: str, charset: str | None, nofollow: bool,
                       text: bool) -> tuple[str, list[str], str | None]:
    """``extract_links`` of a long page, a piece at a time (see ``PIECE``).

    The first piece holds the <head>: its <base> and <meta robots> count for the
    page, and a <meta charset> in its first 1024 bytes (what lexbor sniffs) is the
    charset of every later piece. Why a cut can differ from one whole parse: a cut
    that falls inside a comment, a <script> or an attribute value starts the next
    piece there, so an "<a href" written inside one is taken for a link."""
    if not charset:
        found = _META_CHARSET.search(body, 0, 1024)
        if found is not None:
            charset = found.group(1).decode("ascii")
    view = memoryview(body)
    n = len(body)
    start = 0
    hrefs: list[str] = []
    texts: list[str] = []
    base_url = page_url
    while start < n:
        end = start + PIECE
        nxt = _ANCHOR_START.search(body, end) if end < n else None
        stop = n if end >= n else min(nxt.start() if nxt else n, end + TAG_ROOM)
        tree = _parse(bytes(view[start:stop]), charset)
        if start == 0:
            base_url, found_hrefs = _extract(tree, page_url, nofollow)
            if nofollow and not found_hrefs and any(
                    _is_nofollow_meta(node.attributes) for node in tree.tags("meta")):
                return base_url, [], main_text(tree) if text else None
            hrefs += found_hrefs
        else:
            hrefs += _anchors(tree, nofollow)
        if text and start == 0:  # a fingerprint needs no more than the first piece's
            texts.append(main_text(tree))
        del tree  # one piece's tree at a time
        if nxt is None:
            break  # no anchor past this piece
        start = nxt.start()
    return base_url, hrefs, " ".join(texts) if text else None


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
