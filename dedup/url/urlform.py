"""The uncached core of canonicalization: one WHATWG join, then the project's normal form.

Why a module of its own: ``dedup.url.canonical`` holds the public API and the cache;
this is the per-miss work, kept small because it is what every new link pays.

* ``join`` calls ada's C API (through the cffi module ``ada_url`` itself wraps)
  with the page URL encoded once per page: ``ada_url.join_url`` re-encodes the
  base and goes through ``ffi.gc`` for every link, about 0.5 µs more per call
  (measured in ``bench/canon_parsers.py``).
* ``simple_join`` resolves the commonest relative links (``story-12.html``,
  ``/s3/x.html?a=1``) without any parser, where the WHATWG result is provably the
  prefix plus the link: no dot segment, no percent sign, no character the
  standard would encode or treat specially.
* ``finish`` turns a serialized http(s) href into ``(fetch_url, key)``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from ada_url._ada_wrapper import ffi, lib

from dedup.native import compiled

_parse = lib.ada_parse
_parse_with_base = lib.ada_parse_with_base
_is_valid = lib.ada_is_valid
_get_href = lib.ada_get_href
_free = lib.ada_free
_unpack = ffi.unpack


class Rules(NamedTuple):
    """Compiled canonicalization rules (see ``dedup.url.canonical.CanonRules``)."""

    max_length: int
    sort_query: bool
    exact: frozenset[str]
    prefixes: tuple[str, ...]


@lru_cache(maxsize=64)
def fetch_rules(max_length: int) -> Rules:
    """Rules of the fetch form: keep every parameter, in order."""
    return Rules(max_length, False, frozenset(), ())


def join(link: str, base: bytes | None) -> str | None:
    """ada's WHATWG href of ``link`` against ``base`` (UTF-8), or None if it is invalid."""
    try:
        raw = link.encode()
    except UnicodeEncodeError:  # lone surrogates: no URL can hold them
        return None
    url = _parse(raw, len(raw)) if base is None else _parse_with_base(raw, len(raw), base,
                                                                       len(base))
    try:
        if not _is_valid(url):
            return None
        s = _get_href(url)
        return _unpack(s.data, s.length).decode()
    finally:
        _free(url)


def resolve(link: str, base_href: str | None, rules: Rules) -> tuple[str, str] | str:
    """``(fetch_url, key)``, or the reason the link is rejected. The uncached path."""
    href = join(link, None if base_href is None else base_href.encode())
    if href is None:
        # checked only now: a join that succeeds had a valid base
        if base_href is not None and join(base_href, None) is None:
            return "invalid base URL"
        return "unparsable URL"
    return finish(href, rules)


def finish(href: str, rules: Rules) -> tuple[str, str] | str:
    """``(fetch_url, key)`` of a serialized WHATWG href, or why it is rejected."""
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
    return href, dedup_key(href, rules)


# Characters the WHATWG parser copies unchanged into an http(s) path (outside the
# path percent-encode set, not ':' which could start a scheme, not '\' which is a
# slash, not '%' whose "%2e" is a dot) and into its query (outside the special-query
# set). Whatever follows '#' is dropped, so any fragment is fine.
_SIMPLE = re.compile(r"([A-Za-z0-9\-._~!$&()*+,;=@/]*)(\?[A-Za-z0-9\-._~!$&()*+,;=:@/?]*)?"
                     r"(?:#.*)?", re.DOTALL).fullmatch


def simple_join(link: str, prefix: str) -> str | None:
    """``prefix + link`` without its fragment, when that is exactly the WHATWG result.

    ``prefix`` is what the link is relative to, taken from the parsed page URL:
    its directory (ending in '/') for a path-relative link, its origin for one
    starting with a single '/', the page without its query for ``?q``. None when
    the link needs the real parser.
    """
    m = _SIMPLE(link)
    if m is None:
        return None
    path = m[1]
    if "." in path:
        segments = f"/{path}/"
        if "/./" in segments or "/../" in segments:
            return None
    query = m[2]
    return prefix + path + query if query else prefix + path


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


def dedup_key(href: str, rules: Rules) -> str:
    """The key form of a fetch URL: tracking parameters dropped, the rest sorted."""
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


class PageContexts(NamedTuple):
    """The parts of a page URL that a link's resolution can depend on."""

    scheme: str             # "http" / "https"; the rest are cache contexts
    scheme_ctx: str | None  # None: not an http(s) page, no caching
    origin_ctx: str
    dir_ctx: str
    base_ctx: str           # the page URL without fragment (also the join base)
    path_ctx: str           # base_ctx without its query (what "?q" replaces it after)


def page_contexts(base: str) -> PageContexts | None:
    """The contexts of the page URL ``base``; None if it is not a valid URL. An
    ordinary http(s) page URL is cut by the compiled canonicalizer
    (``dedup/native/_canon.c``), with the same answer: a call a page paid ~7 us here."""
    native = compiled.canon
    if native is not None:
        got = native.page_contexts(base)
        if got is not None:
            return PageContexts._make(got)
    href = join(base, None)
    if href is None:
        return None
    href = href.partition("#")[0]
    if href.startswith("http://"):
        scheme = "http"
    elif href.startswith("https://"):
        scheme = "https"
    else:
        return PageContexts("", None, "", "", href, href)
    # '/', '?' cannot occur unescaped in the userinfo or host of a serialized
    # http(s) URL, so the first ones after "scheme://" delimit path and query
    path_start = href.index("/", len(scheme) + 3)
    query = href.find("?")
    path_end = len(href) if query < 0 else query
    return PageContexts(scheme, scheme + ":", href[:path_start],
                        href[:href.rindex("/", path_start, path_end) + 1], href,
                        href[:path_end])
