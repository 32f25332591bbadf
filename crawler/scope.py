"""What a crawl may fetch: the seeds and the hosts they put in scope.

Default scope is the seeds' hosts exactly (``host[:port]``, as the ledger names
hosts: ``www.example.com`` does not admit ``example.com``). Each allowed domain
widens it to that domain and all its subdomains on any port, like Scrapy's
``allowed_domains``. The answer is cached per host, so the per-link cost is one
string split and one dict lookup.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dedup import Canonicalizer, UrlRejected
from dedup.seen import host_of

__all__ = ["Scope", "SeedError", "hostname_of", "normalize_domain", "read_seeds"]


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
    if d.startswith("[") or _is_ip(d):
        return d
    try:
        d = d.encode("idna").decode("ascii")
    except UnicodeError:
        raise ValueError(f"not a domain name: {domain!r}") from None
    return d


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Scope:
    """Hosts (exact authorities) and domains (with subdomains, any port) in scope."""

    hosts: frozenset[str] = frozenset()
    domains: tuple[str, ...] = ()
    _cache: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

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

    def to_dict(self) -> dict[str, list[str]]:
        return {"hosts": sorted(self.hosts), "domains": list(self.domains)}

    @classmethod
    def from_dict(cls, data: dict[str, list[str]]) -> Scope:
        return cls(frozenset(data.get("hosts", ())), tuple(data.get("domains", ())))

    @classmethod
    def for_seeds(cls, seed_urls: Iterable[str], domains: Iterable[str] = ()) -> Scope:
        return cls(frozenset(host_of(u) for u in seed_urls),
                   tuple(dict.fromkeys(normalize_domain(d) for d in domains)))


def read_seeds(path: str | Path, canonicalizer: Canonicalizer
               ) -> tuple[list[tuple[str, str]], list[str]]:
    """``([(fetch_url, key)...], [problem...])`` from a seeds file.

    One URL per line; blank lines and ``#`` comments are ignored. A bad line is
    reported (``file:line: reason``) and skipped. Raises SeedError when the file
    cannot be read or holds no valid URL.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise SeedError(f"seeds file {path}: not found") from None
    except IsADirectoryError:
        raise SeedError(f"seeds file {path}: is a directory") from None
    except UnicodeDecodeError as exc:
        raise SeedError(f"seeds file {path}: not UTF-8 text ({exc.reason} at byte "
                        f"{exc.start})") from None
    except OSError as exc:
        raise SeedError(f"seeds file {path}: {exc.strerror or exc}") from None
    seeds: list[tuple[str, str]] = []
    problems: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if " #" in line:
            line = line.split(" #", 1)[0].strip()
        if not line.lower().startswith(("http://", "https://")):
            problems.append(f"{path}:{lineno}: not an absolute http(s) URL: {line[:100]!r}")
            continue
        try:
            seeds.append(canonicalizer.resolve(line))
        except UrlRejected as exc:
            problems.append(f"{path}:{lineno}: {exc}: {line[:100]!r}")
    if not seeds:
        raise SeedError(f"seeds file {path}: no valid URL"
                        + (f" ({len(problems)} bad line(s))" if problems else ""))
    return seeds, problems
