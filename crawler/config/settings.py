"""Every knob of a crawl, as one frozen tree of dataclasses.

Why dataclasses and not a dict: a typo in a config file must be an error that
names the key, not a silently ignored setting, and a crawl freezes its
effective configuration into its state directory so that ``bloomcrawl resume``
continues with exactly the values it started with. The defaults here are the
ones documented in ``config/default.toml`` (a test keeps the two identical).

Precedence: dataclass defaults < ``--config FILE`` (only the keys it sets) <
command-line flags.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from crawler.config.requestopts import check_proxy_url, parse_header_line
from crawler.config.scope import check_pattern
from dedup import CONFIRM_CACHE_SIZE, DEFAULT_TRACKING_PARAMS, CanonRules

__all__ = [
    "CanonicalSettings",
    "ConfigError",
    "CrawlSettings",
    "DedupSettings",
    "DistributedSettings",
    "FetchSettings",
    "LearnSettings",
    "OutputSettings",
    "PolitenessSettings",
    "Settings",
    "SnapshotSettings",
    "did_you_mean",
    "load_settings",
    "settings_from_dict",
]


class ConfigError(ValueError):
    """A configuration value or key that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class CrawlSettings:
    concurrency: int = 32
    max_pages: int = 0
    max_depth: int = 20
    max_pages_per_host: int = 100_000
    allow_domains: tuple[str, ...] = ()
    include: tuple[str, ...] = ()  # regexes over the canonical URL: one must match (if any)
    exclude: tuple[str, ...] = ()  # ... and none of these
    honor_nofollow: bool = False
    sitemaps: bool = False  # opt-in: robots.txt Sitemap: lines (else /sitemap.xml) of seed hosts
    sitemap_max_files: int = 50  # sitemap files fetched per host (indexes and their children)
    sitemap_max_bytes: int = 50 * 1024 * 1024  # per file, uncompressed (sitemaps.org)
    frontier_memory: int = 20_000
    stop_grace: float = 10.0
    max_retries: int = 5
    retry_delay: float = 5.0
    retry_delay_max: float = 300.0


@dataclass(frozen=True, slots=True)
class PolitenessSettings:
    per_host: int = 2
    delay: float = 1.0
    obey_robots: bool = True
    max_crawl_delay: float = 30.0


@dataclass(frozen=True, slots=True)
class SnapshotSettings:
    interval: float = 300.0
    every_new_urls: int = 500_000


@dataclass(frozen=True, slots=True)
class OutputSettings:
    warc: str = ""
    warc_max_size: int = 1_000_000_000
    warc_content_types: str = ""
    progress_interval: float = 1.0
    plain_progress_interval: float = 10.0


@dataclass(frozen=True, slots=True)
class DedupSettings:
    capacity: int = 10_000_000
    error_rate: float = 0.01
    shards: int = 64
    seed: int = 0
    growth: int = 2
    confirm_cache_size: int = CONFIRM_CACHE_SIZE
    canon_cache_size: int = 100_000


@dataclass(frozen=True, slots=True)
class CanonicalSettings:
    sort_query: bool = True
    strip_params: tuple[str, ...] = DEFAULT_TRACKING_PARAMS
    max_url_length: int = 2083

    def rules(self) -> CanonRules:
        return CanonRules(sort_query=self.sort_query, strip_params=self.strip_params,
                          max_length=self.max_url_length)


@dataclass(frozen=True, slots=True)
class DistributedSettings:
    forward_batch: int = 500
    forward_cache_size: int = 100_000
    receive_count: int = 64
    receive_block: float = 1.0
    claim_idle: float = 60.0
    retry_for: float = 60.0
    poll_interval: float = 0.2
    max_restarts: int = 3


@dataclass(frozen=True, slots=True)
class LearnSettings:
    """``[learn]``: content fingerprints, learned URL rules, trap budgets (default.toml)."""

    enabled: bool = True
    shingle: int = 3
    near_distance: int = 3
    near_min_words: int = 8
    history: int = 1000
    min_pairs: int = 4
    min_contents: int = 3
    check_first: int = 4
    check_rate: float = 0.02
    budget_window: int = 12
    budget_host_window: int = 200
    budget_grace: int = 4
    budget_probe_first: int = 8
    budget_new_shingles: int = 8


@dataclass(frozen=True, slots=True)
class FetchSettings:
    user_agent: str = "bloomcrawl/0.1 (+https://github.com/bloomcrawl)"
    connect_timeout: float = 10.0
    read_timeout: float = 20.0  # max gap between body chunks / headers
    total_timeout: float = 60.0  # one fetch: every attempt, its body and backoff included
    max_bytes: int = 64 * 1024 * 1024  # body cap; streamed, stop reading past it
    parse_limit: int = 8 * 1024 * 1024  # links come from a page's first this many bytes
    # quick extra attempts within one fetch on connection errors, timeouts and 5xx; a
    # crawl caps them with what is left of the URL's budget ([crawl] max_retries)
    retries: int = 0
    backoff_base: float = 0.5  # exponential backoff base seconds, full jitter
    backoff_max: float = 30.0
    max_retry_after: float = 60.0  # longer Retry-After (429/503) => error "retry-after too long"
    html_types: tuple[str, ...] = ("text/html", "application/xhtml+xml")
    allow_private: bool = False  # refuse private/loopback/link-local/reserved targets unless True
    max_connections: int = 100
    dns_cache_ttl: float = 300.0
    headers: tuple[str, ...] = ()  # extra request headers, "Name: value" each
    cookies: bool = False  # keep cookies the servers set and send them back (per host)
    proxy: str = ""  # http(s)://[user:pass@]host:port; empty: HTTP(S)_PROXY from the env
    # "fast": plain http:// GETs (direct, no cookies) go through crawler.net.http1, WARC too;
    # "aiohttp": every request through aiohttp
    client: str = "fast"


@dataclass(frozen=True, slots=True)
class Settings:
    crawl: CrawlSettings = field(default_factory=CrawlSettings)
    fetch: FetchSettings = field(default_factory=FetchSettings)
    politeness: PolitenessSettings = field(default_factory=PolitenessSettings)
    snapshot: SnapshotSettings = field(default_factory=SnapshotSettings)
    output: OutputSettings = field(default_factory=OutputSettings)
    dedup: DedupSettings = field(default_factory=DedupSettings)
    canonical: CanonicalSettings = field(default_factory=CanonicalSettings)
    distributed: DistributedSettings = field(default_factory=DistributedSettings)
    learn: LearnSettings = field(default_factory=LearnSettings)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Plain JSON/TOML-shaped data (tuples become lists)."""
        out: dict[str, dict[str, Any]] = {}
        for f in fields(self):
            section = getattr(self, f.name)
            out[f.name] = {k.name: _plain(getattr(section, k.name)) for k in fields(section)}
        return out

    def overlay(self, data: Mapping[str, Any], *, source: str = "overrides") -> Settings:
        """A copy with the sections/keys of ``data`` replaced (validated, typed)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: expected a table of sections")
        changes: dict[str, Any] = {}
        known = {f.name: f for f in fields(self)}
        for name, values in data.items():
            if name not in known:
                hint = did_you_mean(name, known, form="[{}]")
                raise ConfigError(f"{source}: unknown section [{name}]"
                                  + (f"; {hint}" if hint else f" (known: {', '.join(known)})"))
            if not isinstance(values, Mapping):
                raise ConfigError(f"{source}: [{name}] must be a table")
            section = getattr(self, name)
            changes[name] = _overlay_section(section, name, values, source)
        return dataclasses.replace(self, **changes)

    def with_values(self, **sections: Mapping[str, Any]) -> Settings:
        """Overlay keyword sections: ``s.with_values(crawl={"max_pages": 10})``."""
        return self.overlay(sections, source="command line")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


_TYPES: dict[type, dict[str, Any]] = {}


def _types_of(cls: type) -> dict[str, Any]:
    if cls not in _TYPES:
        _TYPES[cls] = get_type_hints(cls)
    return _TYPES[cls]


# Keys that are gone, and what to set instead: named in the error, not "unknown key".
_REPLACED: dict[tuple[str, str], str] = {
    ("crawl", "retry_rounds"): (
        "is replaced by [crawl] max_retries: one budget per URL (a URL is requested "
        "at most 1 + max_retries times over the crawl, every retry round and quick "
        "retry included)"),
}


def _overlay_section(section: Any, name: str, values: Mapping[str, Any], source: str) -> Any:
    types = _types_of(type(section))
    known = {f.name for f in fields(section)}
    typed: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            if (name, key) in _REPLACED:
                raise ConfigError(f"{source}: [{name}] {key} {_REPLACED[name, key]}")
            hint = _key_hint(key, name, known)
            raise ConfigError(f"{source}: unknown key '{key}' in [{name}]"
                              + (f"; {hint}" if hint else ""))
        typed[key] = _coerce(value, types[key], f"{source}: [{name}] {key}")
    new = dataclasses.replace(section, **typed)
    _validate(new, name, source)
    return new


def did_you_mean(word: str, known: Iterable[str], *, form: str = "'{}'") -> str:
    """"did you mean 'concurrency'?" for a misspelt name, the nearest of ``known``
    (those as near as the nearest, up to three), or "" when none is near."""
    known = list(known)
    scored = sorted(((difflib.SequenceMatcher(None, word, k).ratio(), k) for k in known),
                    reverse=True)
    if not scored or scored[0][0] < 0.6:
        return ""
    best = [form.format(k) for score, k in scored[:3] if score >= scored[0][0] - 0.05]
    names = best[0] if len(best) == 1 else f"{', '.join(best[:-1])} or {best[-1]}"
    return f"did you mean {names}?"


def _key_hint(key: str, section: str, known: set[str]) -> str:
    """Where a key that ``section`` does not have probably belongs: the same key in
    another section ("[crawl] delay" is ``[politeness] delay``), else the nearest
    key of this section, else of any section."""
    defaults = Settings()
    others = {f.name: {k.name for k in fields(getattr(defaults, f.name))}
              for f in fields(defaults) if f.name != section}
    homes = [name for name, keys in others.items() if key in keys]
    if homes:
        return f"did you mean [{homes[0]}] {key}?"
    return did_you_mean(key, sorted(known)) or did_you_mean(
        key, sorted(f"[{name}] {k}" for name, keys in others.items() for k in keys),
        form="{}")


def _coerce(value: Any, hint: Any, where: str) -> Any:
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, not {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, not {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, not {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, not {value!r}")
        return value
    if hint == tuple[str, ...]:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings, not {value!r}")
        return tuple(value)
    raise ConfigError(f"{where}: unsupported setting type {hint!r}")  # pragma: no cover


# (section, key) -> (predicate, description) for values that type checks cannot catch
_RULES: dict[tuple[str, str], tuple[Any, str]] = {
    ("crawl", "concurrency"): (lambda v: v >= 1, ">= 1"),
    ("crawl", "max_pages"): (lambda v: v >= 0, ">= 0 (0: no limit)"),
    ("crawl", "max_depth"): (lambda v: v >= 0, ">= 0"),
    ("crawl", "max_pages_per_host"): (lambda v: v >= 0, ">= 0 (0: no limit)"),
    ("crawl", "frontier_memory"): (lambda v: v >= 1, ">= 1"),
    ("crawl", "sitemap_max_files"): (lambda v: v >= 1, ">= 1"),
    ("crawl", "sitemap_max_bytes"): (lambda v: v >= 1, ">= 1"),
    ("crawl", "stop_grace"): (lambda v: v >= 0, ">= 0"),
    ("crawl", "max_retries"): (lambda v: v >= 0, ">= 0"),
    ("crawl", "retry_delay"): (lambda v: v >= 0, ">= 0"),
    ("crawl", "retry_delay_max"): (lambda v: v >= 0, ">= 0"),
    ("politeness", "per_host"): (lambda v: v >= 1, ">= 1"),
    ("politeness", "delay"): (lambda v: v >= 0, ">= 0"),
    ("politeness", "max_crawl_delay"): (lambda v: v >= 0, ">= 0"),
    ("snapshot", "interval"): (lambda v: v > 0, "> 0"),
    ("snapshot", "every_new_urls"): (lambda v: v >= 1, ">= 1"),
    ("output", "progress_interval"): (lambda v: v > 0, "> 0"),
    ("output", "plain_progress_interval"): (lambda v: v > 0, "> 0"),
    ("output", "warc_max_size"): (lambda v: v == 0 or v >= 4096, ">= 4096 bytes (0: one file)"),
    ("output", "warc_content_types"): (lambda v: _compiles(v), "a valid regular expression"),
    ("fetch", "connect_timeout"): (lambda v: v > 0, "> 0"),
    ("fetch", "read_timeout"): (lambda v: v > 0, "> 0"),
    ("fetch", "total_timeout"): (lambda v: v > 0, "> 0"),
    ("fetch", "max_bytes"): (lambda v: v >= 1, ">= 1"),
    ("fetch", "parse_limit"): (lambda v: v >= 1, ">= 1"),
    ("fetch", "retries"): (lambda v: v >= 0, ">= 0"),
    ("fetch", "backoff_base"): (lambda v: v >= 0, ">= 0"),
    ("fetch", "backoff_max"): (lambda v: v >= 0, ">= 0"),
    ("fetch", "max_retry_after"): (lambda v: v >= 0, ">= 0"),
    ("fetch", "max_connections"): (lambda v: v >= 1, ">= 1"),
    ("fetch", "user_agent"): (lambda v: bool(v.strip()) and _no_ctl(v), "non-empty, one line"),
    ("fetch", "headers"): (lambda v: all(_ok(parse_header_line, h) for h in v),
                           "'Name: value' lines (a token, a colon, a value; not User-Agent)"),
    ("fetch", "client"): (lambda v: v in ("fast", "aiohttp"), '"fast" or "aiohttp"'),
    ("fetch", "proxy"): (lambda v: not v or _ok(check_proxy_url, v),
                         "empty or an http(s)://HOST:PORT URL"),
    ("crawl", "include"): (lambda v: all(_ok(check_pattern, p) for p in v),
                           "regular expressions"),
    ("crawl", "exclude"): (lambda v: all(_ok(check_pattern, p) for p in v),
                           "regular expressions"),
    ("dedup", "capacity"): (lambda v: v >= 1, ">= 1"),
    ("dedup", "error_rate"): (lambda v: 0 < v < 1, "between 0 and 1"),
    ("dedup", "shards"): (lambda v: 1 <= v <= 65536, "1..65536"),
    ("dedup", "growth"): (lambda v: v >= 1, ">= 1"),
    ("dedup", "confirm_cache_size"): (lambda v: v >= 0, ">= 0"),
    ("dedup", "canon_cache_size"): (lambda v: v >= 0, ">= 0"),
    ("canonical", "max_url_length"): (lambda v: v >= 1, ">= 1"),
    ("distributed", "forward_batch"): (lambda v: v >= 1, ">= 1"),
    ("distributed", "max_restarts"): (lambda v: v >= 0, ">= 0"),
    ("distributed", "forward_cache_size"): (lambda v: v >= 0, ">= 0 (0: off)"),
    ("distributed", "receive_count"): (lambda v: v >= 1, ">= 1"),
    ("distributed", "receive_block"): (lambda v: 0 < v <= 20, "between 0 and 20 seconds"),
    ("distributed", "claim_idle"): (lambda v: v > 0, "> 0"),
    ("distributed", "retry_for"): (lambda v: v >= 0, ">= 0"),
    ("distributed", "poll_interval"): (lambda v: v > 0, "> 0"),
    ("learn", "shingle"): (lambda v: 1 <= v <= 8, "1..8 words"),
    ("learn", "near_distance"): (lambda v: 0 <= v <= 15, "0..15 bits"),
    ("learn", "near_min_words"): (lambda v: v >= 1, ">= 1"),
    ("learn", "history"): (lambda v: v >= 2, ">= 2"),
    ("learn", "min_pairs"): (lambda v: v >= 1, ">= 1"),
    ("learn", "min_contents"): (lambda v: v >= 1, ">= 1"),
    ("learn", "check_first"): (lambda v: v >= 0, ">= 0"),
    ("learn", "check_rate"): (lambda v: 0 <= v <= 1, "between 0 and 1"),
    ("learn", "budget_window"): (lambda v: v >= 1, ">= 1"),
    ("learn", "budget_host_window"): (lambda v: v >= 1, ">= 1"),
    ("learn", "budget_grace"): (lambda v: v >= 0, ">= 0"),
    ("learn", "budget_probe_first"): (lambda v: v >= 1, ">= 1"),
    ("learn", "budget_new_shingles"): (lambda v: v >= 1, ">= 1"),
}


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def _ok(check: Any, value: str) -> bool:
    try:
        check(value)
    except ValueError:
        return False
    return True


def _no_ctl(text: str) -> bool:
    return not any(c in text for c in "\r\n\0")


def _validate(section: Any, name: str, source: str) -> None:
    for f in fields(section):
        rule = _RULES.get((name, f.name))
        if rule is not None and not rule[0](getattr(section, f.name)):
            raise ConfigError(f"{source}: [{name}] {f.name} must be {rule[1]}, "
                              f"not {getattr(section, f.name)!r}")


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; a missing or malformed file is a ConfigError naming it.
    (tomllib imported here: a crawl without --config never parses TOML.)"""
    import tomllib

    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: invalid TOML: {exc}") from None


def load_settings(config_file: str | Path | None = None) -> Settings:
    """Defaults, overlaid with ``config_file`` when given."""
    settings = Settings()
    if config_file is not None:
        settings = settings.overlay(read_toml(config_file), source=f"config file {config_file}")
    return settings


def settings_from_dict(data: Mapping[str, Any], *, source: str = "frozen config") -> Settings:
    """Rebuild settings frozen with ``Settings.to_dict`` (unknown keys are an error)."""
    return Settings().overlay(_upgrade_frozen(data), source=source)


def _upgrade_frozen(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A configuration frozen by an older bloomcrawl, in today's keys.

    Why mapped and not refused: a crawl must resume with what it started with.
    Its ``[crawl] retry_rounds`` R and ``[fetch] retries`` r allowed up to
    (1 + r) x (1 + R) requests per URL; ``max_retries`` keeps that total (and r,
    the quick retries within one fetch), and now it is a real bound. A crawl
    frozen before ``[crawl] sitemaps`` existed read none, and resumes so; one frozen
    before ``[learn]`` learned nothing, and resumes so.
    """
    if "learn" not in data:
        data = {**data, "learn": {"enabled": False}}
    crawl = data.get("crawl")
    if isinstance(crawl, Mapping) and "sitemaps" not in crawl:
        # it started without sitemaps: they are frozen with the crawl, so it goes on without
        crawl = {**crawl, "sitemaps": False}
        data = {**data, "crawl": crawl}
    if not isinstance(crawl, Mapping) or "retry_rounds" not in crawl:
        return data
    fetch = data.get("fetch")
    quick = fetch.get("retries", 2) if isinstance(fetch, Mapping) else 2
    rounds = crawl["retry_rounds"]
    new = {k: v for k, v in crawl.items() if k != "retry_rounds"}
    if isinstance(rounds, int) and isinstance(quick, int) and "max_retries" not in new:
        new["max_retries"] = (1 + quick) * (1 + rounds) - 1
    return {**data, "crawl": new}
