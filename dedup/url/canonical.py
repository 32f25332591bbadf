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
repeated on every page is parsed once. The per-miss work lives in
``dedup.url.urlform``. Where it is built, the compiled ``dedup.native._canon`` resolves
the ordinary http(s) links first (in C, the same bytes, ~14x faster, no cache needed)
and leaves the rest (non-ASCII, IP and IDNA hosts, userinfo, backslashes, ...) to
that cached Python path.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType

from dedup.native import compiled
from dedup.url.urlform import PageContexts, finish, join, page_contexts, resolve, simple_join
from dedup.url.urlform import Rules as _Rules
from dedup.url.urlform import fetch_rules as _fetch_rules

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
    result = resolve(_require_str(url), _require_base(base), _fetch_rules(max_length))
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
    result = resolve(_require_str(url), _require_base(base), compiled)
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
    are promoted back on their next hit (this cache maps to values; the
    seen-test's cache of fingerprints, ``dedup.store.seencore``, is another).
    Rejections are cached too (every page has its ``javascript:void(0)``). The
    links the compiled fast path resolves never reach the cache: it is cheaper
    than a lookup (``cache_info()["compiled"]`` counts them).
    Entries are tuples of strings, which the garbage collector stops tracking:
    mutable entries made every collection walk the whole cache (measured 1.7x
    slower). Not thread-safe: one per thread.
    """

    __slots__ = ("_base", "_compiled", "_fold", "_half", "_hits", "_misses", "_native",
                 "_old", "_page", "_rules", "_young", "rules", "seed")

    def __init__(self, rules: CanonRules = DEFAULT_RULES, cache_size: int = 100_000,
                 seed: int = 0) -> None:
        if not isinstance(rules, CanonRules):
            raise TypeError(f"rules must be CanonRules, not {type(rules).__name__}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an integer >= 0, not {cache_size!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
            raise ValueError(f"seed must be an integer in [0, 2**32), not {seed!r}")
        self.rules = rules
        self.seed = seed
        self._rules = _compile(rules)
        self._half = cache_size // 2
        # (context, link) -> (fetch_url, key), or None for a rejected link
        self._young: dict[tuple[str, str], tuple[str, str] | None] = {}
        self._old: dict[tuple[str, str], tuple[str, str] | None] = {}
        self._hits = 0
        self._misses = 0
        self._compiled = 0
        self._fold: Callable[[], None] | None = None  # count_compiled_by's
        # the last base and its contexts: a caller adding a page's links one call
        # each (UrlSeen.add) passes the same base every time; parsing it cost more
        # than resolving the link
        self._base: str | None = None
        self._page: PageContexts | None = None
        self._native: object = None  # the rules as the compiled path reads them

    def resolve(self, url: str, base: str | None = None) -> tuple[str, str]:
        """``(fetch_url, key)`` for one link. Raises UrlRejected."""
        _require_str(url)
        (result,) = self.resolve_many((url,), _require_base(base))
        if result is None:
            # the cache keeps no reasons; rejections here are rare enough to redo
            reason = resolve(url, base, self._rules)
            raise UrlRejected(reason if type(reason) is str else "rejected")
        return result

    def resolve_many(self, links: Iterable[str],
                     base: str | None = None) -> list[tuple[str, str] | None]:
        """``(fetch_url, key)`` per link, None where rejected; never raises for a bad link.

        ``base`` (the page URL, or its ``<base href>``) is parsed once per call;
        if it is invalid every link is rejected. Where the compiled fast path
        (``dedup/native/_canon.c``) is built, it resolves the ordinary http(s)
        links of an http(s) page, cheaper than a cache lookup here, and hands the
        rest (and every link where it is not built) to the cached Python path.
        """
        if isinstance(links, str):
            raise TypeError("links must be an iterable of links, not one str")
        if base is None:
            page = None
        elif base is self._base:
            page = self._page
        else:
            if not isinstance(base, str):
                return [None for _ in links]
            page = page_contexts(base)
            self._base, self._page = base, page
        if base is not None and page is None:
            return [None for _ in links]  # an invalid base: every link is rejected
        native = compiled.canon
        if native is None or (page is not None and page.scheme_ctx is None):
            return self._resolve_python(links, page)
        if self._native is None:
            self._native = _native_rules(native, self._rules)
        out, pending = native.resolve_links(links, self._native, page)
        self._compiled += len(out) - len(pending)
        if pending:
            rest = self._resolve_python([out[i] for i in pending], page)
            for i, result in zip(pending, rest, strict=True):
                out[i] = result
        return out

    def fast_page(self, base: str | None) -> tuple[object, PageContexts | None] | None:
        """``(rules, page)`` as ``dedup.native._canon.confirm_links`` takes them, for a
        caller that resolves ``base``'s links and looks their keys up in one compiled
        pass (``UrlSeen``'s confirm cache); None where only :meth:`resolve_many` can
        (no compiled module, a page that is not http(s), an invalid base). The links
        that pass leaves over go back through :meth:`resolve_many`; it reports the
        ones it resolved with :meth:`count_compiled`."""
        native = compiled.canon
        if native is None:
            return None
        if base is None:
            page = None
        elif base is self._base:
            page = self._page
        elif isinstance(base, str):
            page = page_contexts(base)
            self._base, self._page = base, page
        else:
            return None
        if base is not None and (page is None or page.scheme_ctx is None):
            return None
        if self._native is None:
            self._native = _native_rules(native, self._rules)
        return self._native, page

    def count_compiled(self, n: int) -> None:
        """``n`` links resolved by the compiled pass of :meth:`fast_page` (``cache_info``)."""
        self._compiled += n

    def count_compiled_by(self, fold: Callable[[], None] | None) -> None:
        """A compiled caller of :meth:`fast_page` that counts the links it resolves
        itself (``UrlSeen.add``'s, a count a call would cost it more than the rest) and
        adds them to this count when ``fold`` is called: :meth:`cache_info` calls it
        first, so its count is exact. None: no such caller."""
        self._fold = fold

    def _resolve_python(self, links: Iterable[object],
                        page: PageContexts | None) -> list[tuple[str, str] | None]:
        """``resolve_many``'s Python path: WHATWG join by ada, cached per context."""
        rules = self._rules
        cache = self._half > 0
        if page is None:  # no base: every link is context-free
            absolute_only = True
            scheme = scheme_ctx = origin_ctx = dir_ctx = base_ctx = path_ctx = ""
            base_bytes = None
        else:
            scheme, scheme_ctx, origin_ctx, dir_ctx, base_ctx, path_ctx = page
            base_bytes = base_ctx.encode()
            absolute_only = False
            if scheme_ctx is None:
                # a page that is not http(s) (rare: about:blank, file:): not classified
                cache = False
        young = self._young
        old = self._old
        half = self._half
        out: list[tuple[str, str] | None] = []
        append = out.append
        misses = bad = 0
        missing = _MISSING
        scheme_match = _SCHEME_RE.match
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
            # Classify the link by what its resolution depends on (ctx) and,
            # where it may be a plain suffix, what it is relative to (prefix).
            # When unsure, a finer context (ultimately base_ctx, the whole page
            # URL) is always correct, only less shared.
            prefix = None
            if absolute_only:
                ctx = ""
            elif scheme_ctx is None:
                ctx = base_ctx
            elif c == "/" or c == "\\":
                c = link[1:2]
                if c == "/" or c == "\\":
                    ctx = scheme_ctx
                else:
                    ctx = origin_ctx
                    if link[0] == "/":
                        prefix = origin_ctx
            elif c == "#":
                # any fragment-only link is the page itself once the fragment is
                # dropped: one cache entry per page for all of them
                ctx = prefix = base_ctx
                link = ""
            elif c == "?":
                ctx = base_ctx
                prefix = path_ctx
            elif not c:
                ctx = prefix = base_ctx
            elif ":" not in link:
                ctx = prefix = dir_ctx
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
            result = young.get(key, missing) if cache else missing
            if result is missing:
                result = old.pop(key, missing) if cache else missing
                if result is missing:
                    misses += 1
                    href = None if prefix is None else simple_join(link, prefix)
                    if href is None:
                        # a context-free link needs no base: parsing it alone is cheaper
                        href = join(link, base_bytes if ctx else None)
                    result = None if href is None else finish(href, rules)
                    if type(result) is str:
                        result = None
                    if not cache or len(link) > _UNCACHED_LINK_LENGTH:
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
        """Hits, misses and current size of the resolution cache, and how many links
        the compiled fast path resolved without it."""
        if self._fold is not None:
            self._fold()
        return {"hits": self._hits, "misses": self._misses,
                "size": len(self._young) + len(self._old), "maxsize": 2 * self._half,
                "compiled": self._compiled}

    def cache_clear(self) -> None:
        """Forget every cached resolution (the counters are kept)."""
        self._young = {}
        self._old = {}


# -- internals -------------------------------------------------------------------------

_C0_SPACE = "".join(map(chr, range(0x21)))
_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")
_SLASHES = ("/", "\\")
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_MISSING = object()
# Links longer than this are resolved but not cached, so the cache's memory
# stays bounded whatever a hostile page contains.
_UNCACHED_LINK_LENGTH = 4096


@lru_cache(maxsize=64)
def _compile(rules: CanonRules) -> _Rules:
    names = [p.lower() for p in rules.strip_params]
    return _Rules(rules.max_length, rules.sort_query,
                  frozenset(n for n in names if not n.endswith("*")),
                  tuple(n[:-1] for n in names if n.endswith("*")))


_DEFAULT_COMPILED = _compile(DEFAULT_RULES)


@lru_cache(maxsize=64)
def _native_rules(native: ModuleType, rules: _Rules) -> object:
    """``rules`` as the compiled fast path reads them (made once per rules)."""
    return native.compile_rules(rules.max_length, rules.sort_query,
                                tuple(sorted(rules.exact)), rules.prefixes)


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
