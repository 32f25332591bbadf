"""What a crawl may fetch: the seeds, the hosts they put in scope, URL patterns.

Default scope is the seeds' hosts exactly (``host[:port]``, as the ledger names
hosts: ``www.example.com`` does not admit ``example.com``). Each allowed domain
widens it to that domain and all its subdomains on any port, like Scrapy's
``allowed_domains``. The answer is cached per host, so the per-link cost is one
string split and one dict lookup.

Include/exclude patterns (``--include``/``--exclude``) then narrow it per URL:
a URL's canonical form (its dedup key) must contain a match of some include
pattern, if any is given, and of no exclude pattern (``re.search``). Why the
key: it is what the seen-test decides on, so one URL gets one verdict however a
page spelled it. Each list is compiled once into one alternation, so a link
costs at most two ``search`` calls whatever the number of patterns, and a link
seen recently costs a dict lookup (``UrlPatterns``).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from crawler.config.ipliteral import ip_literal
from dedup import Canonicalizer, UrlRejected, host_of

__all__ = [
    "Scope",
    "SeedError",
    "Undecodable",
    "UrlPatterns",
    "check_pattern",
    "decode_lines",
    "hostname_of",
    "normalize_domain",
    "read_seeds",
    "seed_lines",
]


class SeedError(ValueError):
    """A seeds file that cannot be used at all."""


def hostname_of(authority: str) -> str:
    """The host part of ``host[:port]`` (IPv6 literals keep their brackets)."""
    if authority.endswith("]"):
        return authority
    host, sep, port = authority.rpartition(":")
    return host if sep and port.isdigit() else authority


def normalize_domain(domain: str) -> str:
    """``--allow-domain`` value to the form hosts are compared in; ValueError if empty.

    Accepts ``example.com``, ``.example.com``, ``*.example.com``,
    ``Example.COM:8080`` (the port is ignored) and internationalized names.
    """
    d = domain.strip().lower()
    if "://" in d:
        d = d.split("://", 1)[1]
    d = d.split("/", 1)[0]
    for prefix in ("*.", "."):
        if d.startswith(prefix):
            d = d[len(prefix):]
    d = hostname_of(d).rstrip(".")
    if not d:
        raise ValueError(f"not a domain name: {domain!r}")
    if d.startswith("[") or ip_literal(d) is not None:
        return d
    try:
        d = d.encode("idna").decode("ascii")
    except UnicodeError:
        raise ValueError(f"not a domain name: {domain!r}") from None
    return d


def check_pattern(pattern: str) -> str:
    """``pattern`` if it is a regular expression Python compiles, else ValueError naming it."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {pattern!r} ({exc})") from None
    return pattern


# A numbered backreference or group condition means another number once the
# pattern sits behind others in one alternation (conservative: an escaped
# backslash before a digit counts too, and only costs the single alternation).
_NUMBERED_REF = re.compile(r"\\[1-9]|\(\?\([0-9]")


def _searcher(patterns: tuple[str, ...]) -> Callable[[str], object] | None:
    """One ``search`` for "does any pattern occur in the string", or None for no patterns."""
    if not patterns:
        return None
    if len(patterns) > 1 and not any(_NUMBERED_REF.search(p) for p in patterns):
        try:
            return re.compile("|".join(f"(?:{p})" for p in patterns)).search
        except re.error:  # flags not at the start, a group name used twice: one at a time
            pass
    compiled = [re.compile(p) for p in patterns]
    if len(compiled) == 1:
        return compiled[0].search
    return lambda text: any(c.search(text) for c in compiled)


class UrlPatterns:
    """Include/exclude regular expressions over a URL, each list compiled once.

    Why a verdict cache: a search costs 0.2-5 us a URL depending on the patterns
    (an alternation of character classes scans every position), and most links of
    a page are the navigation repeated on every page; a repeated key costs one
    dict lookup. Bounded: emptied when full, like the host cache."""

    __slots__ = ("_cache", "_exclude", "_include")

    CACHE_SIZE = 32_768

    def __init__(self, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> None:
        self._include = _searcher(tuple(include))
        self._exclude = _searcher(tuple(exclude))
        self._cache: dict[str, bool] = {}

    def __bool__(self) -> bool:
        return self._include is not None or self._exclude is not None

    def why_not(self, url: str) -> str | None:
        """None when ``url`` is in scope, else which rule keeps it out."""
        if self._include is not None and not self._include(url):
            return "matches no --include pattern"
        if self._exclude is not None and self._exclude(url):
            return "matches an --exclude pattern"
        return None

    def allows(self, url: str) -> bool:
        ok = self._cache.get(url)
        if ok is None:
            inc, exc = self._include, self._exclude
            ok = (inc is None or bool(inc(url))) and (exc is None or not exc(url))
            if len(self._cache) >= self.CACHE_SIZE:
                self._cache.clear()
            self._cache[url] = ok
        return ok


@dataclass(frozen=True)
class Scope:
    """Hosts (exact authorities) and domains (with subdomains, any port) in scope, and
    the URL patterns that narrow them."""

    hosts: frozenset[str] = frozenset()
    domains: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    _cache: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)
    patterns: UrlPatterns = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", UrlPatterns(self.include, self.exclude))

    def url_filter(self) -> Callable[[str], bool] | None:
        """``allows(url)`` for a canonical URL (its dedup key), or None: no patterns."""
        return self.patterns.allows if self.patterns else None

    def allows_host(self, authority: str) -> bool:
        ok = self._cache.get(authority)
        if ok is None:
            ok = authority in self.hosts
            if not ok and self.domains:
                name = hostname_of(authority)
                ok = any(name == d or name.endswith("." + d) for d in self.domains)
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[authority] = ok
        return ok

    def keep_hosts(self, pairs: Iterable[tuple[str, str] | None],
                   counts: Mapping[str, int] | None = None, cap: int = 0
                   ) -> list[tuple[str, str]]:
        """The ``(url, key)`` pairs whose URL's host ``allows_host`` allows (None items
        dropped), and, given ``counts`` (URLs admitted per host), whose host is under
        ``cap``: a page's links in one loop, without a call a link (each would cost as
        much as the test)."""
        cache = self._cache
        allows = self.allows_host
        out = []
        for pair in pairs:
            if pair is None:
                continue
            host = pair[0].split("/", 3)[2].rpartition("@")[2]  # dedup.host_of
            ok = cache.get(host)
            if ok is None:
                ok = allows(host)
            if ok and (counts is None or counts.get(host, 0) < cap):
                out.append(pair)
        return out

    def to_dict(self) -> dict[str, list[str]]:
        # patterns only when set: a fleet's identity hashes this, and it must not
        # change for a crawl created without them
        out = {"hosts": sorted(self.hosts), "domains": list(self.domains)}
        if self.include:
            out["include"] = list(self.include)
        if self.exclude:
            out["exclude"] = list(self.exclude)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, list[str]]) -> Scope:
        return cls(frozenset(data.get("hosts", ())), tuple(data.get("domains", ())),
                   tuple(data.get("include", ())), tuple(data.get("exclude", ())))

    @classmethod
    def for_seeds(cls, seed_urls: Iterable[str], domains: Iterable[str] = (),
                  include: Iterable[str] = (), exclude: Iterable[str] = ()) -> Scope:
        return cls(frozenset(host_of(u) for u in seed_urls),
                   tuple(dict.fromkeys(normalize_domain(d) for d in domains)),
                   tuple(dict.fromkeys(include)), tuple(dict.fromkeys(exclude)))


def read_seeds(path: str | Path, canonicalizer: Canonicalizer,
               patterns: UrlPatterns | None = None
               ) -> tuple[list[tuple[str, str]], list[str]]:
    """``([(fetch_url, key)...], [problem...])`` from a seeds file.

    One URL per line; blank lines and ``#`` comments are ignored. A bad line is
    reported (``file:line: reason``) and skipped, and so is a seed the include/
    exclude ``patterns`` keep out of scope (its host is then not in scope either:
    the user is told rather than the seed silently never fetched). Raises
    SeedError when the file cannot be read or holds no usable URL.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SeedError(f"seeds file {path}: not found") from None
    except IsADirectoryError:
        raise SeedError(f"seeds file {path}: is a directory") from None
    except OSError as exc:
        raise SeedError(f"seeds file {path}: {exc.strerror or exc}") from None
    try:
        lines = decode_lines(data)
    except UnicodeDecodeError as exc:
        raise SeedError(f"seeds file {path}: not UTF-16 text as its byte order mark says "
                        f"({exc.reason} at byte {exc.start})") from None
    return seed_lines(lines, f"seeds file {path}", str(path), canonicalizer, patterns)


class Undecodable(bytes):
    """A line of a text file that is not UTF-8: skipped and reported with its number."""


def decode_lines(data: bytes) -> list[str | Undecodable]:
    """The lines of a text file, each decoded on its own (UnicodeDecodeError only for a
    file whose UTF-16 byte order mark lies).

    Why line by line: one Latin-1 byte (a URL pasted from an old page) must cost its
    line, not the whole file. A UTF-8 byte order mark is dropped; a file that starts
    with a UTF-16 one (Windows' "Unicode" text) is read as UTF-16."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return list(data.decode("utf-16").splitlines())
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    lines: list[str | Undecodable] = []
    for raw in data.splitlines():
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append(Undecodable(raw))
    return lines


def _not_utf8(raw: bytes) -> str:
    """Why ``raw`` is not UTF-8: the first bad byte and where it is."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
    return "not UTF-8 text"  # pragma: no cover - only undecodable lines are asked


def seed_lines(lines: Iterable[str | Undecodable], source: str, where: str,
               canonicalizer: Canonicalizer, patterns: UrlPatterns | None = None
               ) -> tuple[list[tuple[str, str]], list[str]]:
    """``read_seeds`` for seeds already in memory (``crawler.Crawler``'s list):
    problems are named ``where:N``, and the SeedError ``source``."""
    path = where
    seeds: list[tuple[str, str]] = []
    problems: list[str] = []
    excluded = 0
    for lineno, raw in enumerate(lines, 1):
        if isinstance(raw, Undecodable):
            problems.append(f"{path}:{lineno}: {_not_utf8(raw)}: {bytes(raw[:100])!r}")
            continue
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if " #" in line:
            line = line.split(" #", 1)[0].strip()
        if not line.lower().startswith(("http://", "https://")):
            problems.append(f"{path}:{lineno}: not an absolute http(s) URL: {line[:100]!r}")
            continue
        try:
            seed = canonicalizer.resolve(line)
        except UrlRejected as exc:
            problems.append(f"{path}:{lineno}: {exc}: {line[:100]!r}")
            continue
        why = patterns.why_not(seed[1]) if patterns else None
        if why is not None:
            excluded += 1
            problems.append(f"{path}:{lineno}: out of scope, {why}: {seed[1][:100]!r}")
            continue
        seeds.append(seed)
    if not seeds:
        bad = len(problems) - excluded
        why = [f"{bad} bad line(s)"] if bad else []
        if excluded:
            why.append(f"{excluded} out of scope by --include/--exclude")
        raise SeedError(f"{source}: no valid URL"
                        + (f" ({', '.join(why)})" if why else ""))
    return seeds, problems
