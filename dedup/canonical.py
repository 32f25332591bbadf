"""Turn a raw link into the URL to fetch and the key to deduplicate it on.

Parsing follows the WHATWG URL standard (the one browsers implement) through
``ada_url``: it was measured the fastest of ada, yarl, ``urllib.parse.urljoin`` and
w3lib (``bench/canon_parsers.py``), and only a WHATWG parser resolves links the way
the pages' authors saw them resolve (``urljoin`` agrees on a third of the
standard's http(s) test cases).

Two forms, kept apart on purpose:

* ``normalize`` gives the *fetch* form: resolved absolute http(s) URL, no fragment,
  percent-escapes normalized. Query order and every parameter are kept, because
  the server may care about them.
* ``canonicalize`` gives the *dedup key*: the fetch form with query parameters
  sorted and tracking parameters dropped, so links that differ only in those
  count as one URL.

``Canonicalizer`` does both for every link of every page, with a cache keyed by
the part of the page URL a link's resolution actually depends on, so navigation
repeated on every page is parsed once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from ada_url import check_url, join_url, parse_url

__all__ = [
    "DEFAULT_RULES",
    "DEFAULT_TRACKING_PARAMS",
    "CanonRules",
    "Canonicalizer",
    "UrlRejected",
    "canonicalize",
    "normalize",
]


class UrlRejected(ValueError):
    """A link the crawler will not fetch; the message is a short human reason."""


DEFAULT_TRACKING_PARAMS: tuple[str, ...] = (
    "utm_*", "gclid", "gclsrc", "dclid", "fbclid", "msclkid", "yclid", "mc_cid",
    "mc_eid", "_ga", "_gl", "igshid", "twclid", "ttclid", "li_fat_id", "wbraid",
    "gbraid", "_hsenc", "_hsmi", "mkt_tok", "oly_anon_id", "oly_enc_id", "vero_id",
)


def _check_max_length(max_length: int) -> None:
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"max_length must be a positive integer, not {max_length!r}")


@dataclass(frozen=True, slots=True)
class CanonRules:
    """What the dedup key ignores. Part of a crawl's identity: keys made under
    different rules do not match, so a crawl keeps the rules it started with."""

    sort_query: bool = True
    # exact parameter names, or "prefix*"; matched case-insensitively
    strip_params: tuple[str, ...] = DEFAULT_TRACKING_PARAMS
    max_length: int = 2083

    def __post_init__(self) -> None:
        if not isinstance(self.sort_query, bool):
            raise TypeError(f"sort_query must be a bool, not {self.sort_query!r}")
        if not isinstance(self.strip_params, tuple):
            raise TypeError("strip_params must be a tuple of parameter names, "
                            f"not {type(self.strip_params).__name__}")
        for name in self.strip_params:
            if not isinstance(name, str) or not name:
                raise ValueError(f"strip_params entries must be non-empty strings: {name!r}")
            if "*" in name[:-1]:
                raise ValueError(f"'*' is only allowed at the end of a name: {name!r}")
        _check_max_length(self.max_length)


DEFAULT_RULES = CanonRules()


def normalize(url: str, base: str | None = None, *, max_length: int = 2083) -> str:
    """The URL to fetch for ``url`` found on page ``base``. Raises UrlRejected.

    WHATWG-resolved absolute http(s) URL without fragment, with percent-escapes
    normalized (hex uppercased, unreserved characters decoded, a stray ``%``
    written ``%25`` so that decoding cannot form a new escape). Query order and
    parameters are kept.
    """
    _check_max_length(max_length)
    result = _resolve(_require_str(url), _require_base(base), _fetch_rules(max_length))
    if type(result) is str:
        raise UrlRejected(result)
    return result[0]


def canonicalize(url: str, base: str | None = None, rules: CanonRules = DEFAULT_RULES) -> str:
    """The dedup key for ``url`` found on page ``base``. Raises UrlRejected.

    ``normalize`` plus, per ``rules``, query parameters sorted by name (stable)
    and tracking parameters dropped (and the ``?`` when nothing is left).
    """
    if rules is DEFAULT_RULES:
        compiled = _DEFAULT_COMPILED
    elif isinstance(rules, CanonRules):
        compiled = _compile(rules)
    else:
        raise TypeError(f"rules must be CanonRules, not {type(rules).__name__}")
    result = _resolve(_require_str(url), _require_base(base), compiled)
    if type(result) is str:
        raise UrlRejected(result)
    return result[1]


class Canonicalizer:
    """Cached resolver used on the hot path (every link of every page).

    A link's resolution depends on only part of the page URL: nothing for an
    absolute link, the scheme for ``//host/x``, scheme and authority for ``/x``,
    the page's directory for ``x``, the whole page URL (minus fragment) for
    ``?q`` and ``""``. The cache is keyed by (that part, link), so the navigation
    repeated on every page of a site is resolved once per site or directory.

    Two generations of dicts approximate LRU at plain-dict cost: lookups hit the
    young one; when it is full it becomes the old one, and entries still in use
    are promoted back on their next hit. Rejections are cached too (every page
    has its ``javascript:void(0)``). Not thread-safe: one per thread.
    """

    __slots__ = ("_half", "_hits", "_misses", "_old", "_rules", "_young", "rules")

    def __init__(self, rules: CanonRules = DEFAULT_RULES, cache_size: int = 100_000) -> None:
        if not isinstance(rules, CanonRules):
            raise TypeError(f"rules must be CanonRules, not {type(rules).__name__}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an integer >= 0, not {cache_size!r}")
        self.rules = rules
        self._rules = _compile(rules)
        self._half = cache_size // 2
        # (context, link) -> (fetch_url, key), or None for a rejected link
        self._young: dict[tuple[str, str], tuple[str, str] | None] = {}
        self._old: dict[tuple[str, str], tuple[str, str] | None] = {}
        self._hits = 0
        self._misses = 0

    def resolve(self, url: str, base: str | None = None) -> tuple[str, str]:
        """``(fetch_url, key)`` for one link. Raises UrlRejected."""
        _require_str(url)
        (result,) = self.resolve_many((url,), _require_base(base))
        if result is None:
            # the cache keeps no reasons; rejections here are rare enough to redo
            reason = _resolve(url, base, self._rules)
            raise UrlRejected(reason if type(reason) is str else "rejected")
        return result

    def resolve_many(self, links: Iterable[str],
                     base: str | None = None) -> list[tuple[str, str] | None]:
        """``(fetch_url, key)`` per link, None where rejected; never raises for a bad link.

        ``base`` (the page URL, or its ``<base href>``) is parsed once per call;
        if it is invalid every link is rejected.
        """
        if isinstance(links, str):
            raise TypeError("links must be an iterable of links, not one str")
        rules = self._rules
        try:
            page = _page_contexts(base)
        except (UrlRejected, TypeError):
            return [None for _ in links]
        out: list[tuple[str, str] | None] = []
        append = out.append
        if self._half == 0 or (page is not None and page.scheme_ctx is None):
            # no cache, or a page that is not http(s) (rare: about:blank, file:)
            href = None if page is None else page.base_ctx
            for link in links:
                result = _resolve(link, href, rules) if type(link) is str else None
                append(result if type(result) is tuple else None)
            self._misses += len(out)
            return out

        if page is None:  # no base: every link is context-free
            absolute_only = True
            scheme = scheme_ctx = origin_ctx = dir_ctx = base_ctx = ""
            base_href = None
        else:
            absolute_only = False
            scheme, scheme_ctx, origin_ctx, dir_ctx, base_ctx = page
            base_href = base_ctx
        young = self._young
        old = self._old
        half = self._half
        misses = 0
        bad = 0
        missing = _MISSING
        scheme_match = _SCHEME_RE.match
        # Classify each link by what its resolution depends on. When unsure, a
        # finer context (ultimately base_ctx, the whole page URL) is always
        # correct, only less shared.
        for link in links:
            try:
                c = link[:1]
                if c <= " ":  # also TypeError for anything but a str
                    # WHATWG strips these (and tab/newline anywhere) before
                    # parsing; do it first so the link is classified as parsed
                    link = _clean(link)
                    c = link[:1]
            except TypeError:
                bad += 1
                append(None)
                continue
            if absolute_only:
                ctx = ""
            elif c == "/" or c == "\\":
                c = link[1:2]
                ctx = scheme_ctx if c == "/" or c == "\\" else origin_ctx
            elif c == "#":
                # any fragment-only link is the page itself once the fragment is
                # dropped: one cache entry per page for all of them
                ctx = base_ctx
                link = ""
            elif c == "?" or not c:
                ctx = base_ctx
            elif ":" not in link:
                ctx = dir_ctx
            elif link.startswith(("http://", "https://")):
                ctx = ""
            else:
                m = scheme_match(link)
                if m is None:
                    # a tab inside the scheme ("ht\ttp:?q") hides it from the
                    # regex but not from the parser
                    ctx = base_ctx if _has_tab_newline(link) else dir_ctx
                else:
                    end = m.end()
                    # "http:x" on an http page is relative to it ("special
                    # relative or authority state"); "http://x" is not
                    if link[:end - 1].lower() == scheme and (
                            link[end:end + 1] not in _SLASHES
                            or link[end + 1:end + 2] not in _SLASHES):
                        ctx = base_ctx
                    else:
                        ctx = ""
            key = (ctx, link)
            result = young.get(key, missing)
            if result is missing:
                result = old.pop(key, missing)
                if result is missing:
                    misses += 1
                    result = _resolve(link, base_href, rules)
                    if type(result) is str:
                        result = None
                    if len(link) > _UNCACHED_LINK_LENGTH:
                        append(result)
                        continue
                if len(young) >= half:
                    self._old = old = young
                    self._young = young = {}
                young[key] = result
            append(result)
        self._hits += len(out) - misses - bad
        self._misses += misses
        return out

    def cache_info(self) -> dict[str, int]:
        """Hits, misses and current size of the resolution cache."""
        return {"hits": self._hits, "misses": self._misses,
                "size": len(self._young) + len(self._old), "maxsize": 2 * self._half}

    def cache_clear(self) -> None:
        """Forget every cached resolution (the counters are kept)."""
        self._young = {}
        self._old = {}


# -- internals -------------------------------------------------------------------------

_C0_SPACE = "".join(map(chr, range(0x21)))
_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")
_SLASHES = ("/", "\\")
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_HREF = ("href",)
_MISSING = object()
# Links longer than this are resolved but not cached, so the cache's memory
# stays bounded whatever a hostile page contains.
_UNCACHED_LINK_LENGTH = 4096

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PCT_RE = re.compile(r"%([0-9A-Fa-f]{2})?")
_PCT_TABLE: dict[str | None, str] = {}
for _hi in "0123456789abcdefABCDEF":
    for _lo in "0123456789abcdefABCDEF":
        _char = chr(int(_hi + _lo, 16))
        _PCT_TABLE[_hi + _lo] = _char if _char in _UNRESERVED else f"%{(_hi + _lo).upper()}"
_PCT_TABLE[None] = "%25"  # a "%" that starts no escape


def _pct_sub(match: re.Match[str]) -> str:
    return _PCT_TABLE[match[1]]


class _Rules(NamedTuple):
    max_length: int
    sort_query: bool
    exact: frozenset[str]
    prefixes: tuple[str, ...]


class _Page(NamedTuple):
    scheme: str             # "http" / "https"; the rest are cache contexts
    scheme_ctx: str | None  # None: not an http(s) page, no caching
    origin_ctx: str
    dir_ctx: str
    base_ctx: str           # the page URL without fragment (also the join base)


@lru_cache(maxsize=64)
def _compile(rules: CanonRules) -> _Rules:
    names = [p.lower() for p in rules.strip_params]
    return _Rules(rules.max_length, rules.sort_query,
                  frozenset(n for n in names if not n.endswith("*")),
                  tuple(n[:-1] for n in names if n.endswith("*")))


_DEFAULT_COMPILED = _compile(DEFAULT_RULES)


@lru_cache(maxsize=64)
def _fetch_rules(max_length: int) -> _Rules:
    return _Rules(max_length, False, frozenset(), ())


def _require_str(url: object) -> str:
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__name__}")
    return url


def _clean(link: str) -> str:
    """What the WHATWG parser reads: no surrounding C0/space, no tab or newline."""
    return link.strip(_C0_SPACE).translate(_TAB_NEWLINE)


def _require_base(base: object) -> str | None:
    if base is not None and not isinstance(base, str):
        raise TypeError(f"base must be a str or None, not {type(base).__name__}")
    return base


def _has_tab_newline(link: str) -> bool:
    return "\t" in link or "\n" in link or "\r" in link


def _page_contexts(base: str | None) -> _Page | None:
    """The cache contexts of a page URL; UrlRejected if it is not a valid URL."""
    if _require_base(base) is None:
        return None
    try:
        href = parse_url(base, _HREF)["href"].partition("#")[0]
    except ValueError:
        raise UrlRejected("invalid base URL") from None
    if href.startswith("http://"):
        scheme = "http"
    elif href.startswith("https://"):
        scheme = "https"
    else:
        return _Page("", None, "", "", href)
    # '/', '?' cannot occur unescaped in the userinfo or host of a serialized
    # http(s) URL, so the first ones after "scheme://" delimit path and query
    path_start = href.index("/", len(scheme) + 3)
    query = href.find("?")
    path_end = len(href) if query < 0 else query
    return _Page(scheme, scheme + ":", href[:path_start],
                 href[:href.rindex("/", path_start, path_end) + 1], href)


def _resolve(link: str, base_href: str | None, rules: _Rules) -> tuple[str, str] | str:
    """``(fetch_url, key)``, or the reason the link is rejected. The uncached core."""
    try:
        href = parse_url(link, _HREF)["href"] if base_href is None else join_url(base_href, link)
    except ValueError:
        # checked only now: a join that succeeds had a valid base
        if base_href is not None and not check_url(base_href):
            return "invalid base URL"
        return "unparsable URL"
    if not href.startswith(("http://", "https://")):
        return f"unsupported scheme {href[:href.index(':')]!r}"
    # '#' and '?' are percent-encoded everywhere before them in a serialized
    # http(s) URL, so the first of each is the delimiter.
    hash_at = href.find("#")
    if hash_at >= 0:
        href = href[:hash_at]
    if "%" in href:
        href = _PCT_RE.sub(_pct_sub, href)
    if len(href) > rules.max_length:
        return f"longer than {rules.max_length} characters"
    return href, _dedup_key(href, rules)


def _dedup_key(href: str, rules: _Rules) -> str:
    query_at = href.find("?")
    if query_at < 0:
        return href
    exact = rules.exact
    prefixes = rules.prefixes
    params = []
    for param in href[query_at + 1:].split("&"):
        if not param:
            continue
        name = param.partition("=")[0].lower()
        if name in exact or (prefixes and name.startswith(prefixes)):
            continue
        params.append(param)
    if not params:
        return href[:query_at]
    if rules.sort_query:
        params.sort(key=_param_name)
    return href[:query_at + 1] + "&".join(params)


def _param_name(param: str) -> str:
    return param.partition("=")[0]
