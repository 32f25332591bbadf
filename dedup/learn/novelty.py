"""Trap budgets by novelty: stop fetching where fetches stopped bringing new content.

Heritrix budgets a crawl by novel bytes and URLs; here the measure is content:
per host, and per URL pattern within a host (``rules.pattern_of``: the first path
segment, the depth and the query's parameter names, so a calendar, a facet
combination or a level of a relative-link loop is one pattern), the share of the
last ``window`` fetched pages that brought new content (what is new is the
caller's to say: crawler.core.schedule.learning counts the shingles a page's text
has that the host's earlier pages did not). Duplicates that a URL rule explains
are the rule learner's and are not counted here.

When none of a budget's last ``window`` pages was new, it closes, or later if the
pattern brought new content before: it must then stay dry ``grace`` pages longer
for each new page it brought (a calendar whose months with events come mixed, in
breadth-first order, with empty ones must not close before its last event month).
Its URLs are then no longer fetched but *held* (the caller keeps them, visible and
re-admittable), except a probe now and then, after ``probe_first`` held URLs, then
twice as many each time. A probe that brings new content reopens the budget (the
caller admits what it held again); probes that do not make the next one twice as
far, so an endless calendar, whose months hold nothing new, is abandoned after a
handful of probes and the crawl ends by itself. A closed pattern also holds the
deeper patterns of its family (same first segment and parameter names, more
segments): a relative-link loop grows a level on every click, and each level
would otherwise need a window of its own. And a query pattern also counts in a
budget of the same parameters at the same depth in every section
(``/**/*/*?lang``): a parameter that brings nothing new (a language most pages
ignore, the comments page of articles, a facet) is one trap across the sections,
closed after one window instead of one window a section; where it does change
the pages (translated docs, a listing's next page) their novelty keeps it open,
as it keeps their own pattern open.

Why per pattern and per host: a pattern is where traps live (``/calendar/*/*``,
``/shop/*/*?color&size``), and it shares its window with the real pages of the
same pattern, which keep it open while they come; the host's window catches a
host whose every pattern is a trap.

Pure bookkeeping over keys and booleans. Windows are rebuilt after a restart by
``replay`` of the pages in commit order; closed budgets and their counters by
``restore`` of ``state()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from dedup.learn.rules import pattern_of

__all__ = ["FETCH", "HOLD", "HOST", "PROBE", "BudgetConfig", "Budgets"]

HOST = "*"  # the host-wide budget's pattern
ANY = "**"  # the first segment of a pattern of every section (``_any_section``)
FETCH, PROBE, HOLD = "fetch", "probe", "hold"


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """The budgets' thresholds (``[learn]`` in config/default.toml says why each)."""

    window: int = 12
    host_window: int = 200
    grace: int = 4
    probe_first: int = 8


@lru_cache(maxsize=1 << 12)  # once a page at commit; a host has a few dozen patterns
def _any_section(pattern: str) -> str | None:
    """The budget a query pattern shares with the same parameters in every section
    at its depth (``/news/*/*?lang`` -> ``/**/*/*?lang``), None for a pattern without
    a query (a calendar's ``/calendar/*/*`` is not the articles' ``/news/*/*``)."""
    path, sep, names = pattern.partition("?")
    if not sep or not path.startswith("/"):
        return None
    rest = path[1:].partition("/")
    return f"/{ANY}{rest[1]}{rest[2]}?{names}"


def _family(pattern: str) -> tuple[str, str, int]:
    """``(first segment, parameter names, depth)`` of a pattern."""
    path, _, names = pattern.partition("?")
    first, _, rest = path[1:].partition("/")
    return first, names, rest.count("/") + (1 if rest else 0)


@dataclass(slots=True)
class _Budget:
    size: int
    dry: int = 0  # pages since the last new one
    novel: int = 0  # new pages it brought, ever (since it last reopened)
    closed: bool = False
    held: int = 0  # URLs held since it closed
    probes: int = 0
    next_probe: int = 0  # ``held`` at which the next probe goes

    def push(self, novel: bool) -> None:
        if novel:
            self.dry = 0
            self.novel += 1
        else:
            self.dry += 1

    def spent(self, grace: int) -> bool:
        """Dry long enough to close: ``size`` pages, longer after new ones (at most
        eight windows)."""
        return self.dry >= self.size + min(grace * self.novel, 7 * self.size)


class Budgets:
    """Every host's and pattern's budget."""

    def __init__(self, config: BudgetConfig | None = None) -> None:
        self.config = config or BudgetConfig()
        self._b: dict[tuple[str, str], _Budget] = {}
        self._closed: dict[str, set[str]] = {}  # host -> its closed patterns (HOST too)
        # (host, pattern) -> the budgets a page of it counts in: the host's, the
        # pattern's and its any-section one (``_counted``)
        self._counts_in: dict[tuple[str, str], tuple[tuple[str, _Budget], ...]] = {}
        self.changed = False  # a budget closed, reopened, or held a URL since ``state()``

    def _get(self, host: str, pattern: str) -> _Budget:
        b = self._b.get((host, pattern))
        if b is None:
            cfg = self.config
            b = self._b[host, pattern] = _Budget(cfg.host_window if pattern == HOST
                                                 else cfg.window)
        return b

    def _counted(self, host: str, pattern: str) -> tuple[tuple[str, _Budget], ...]:
        """The budgets a page of ``pattern`` counts in, with their patterns (made once
        a pattern: a page looks them up at every commit)."""
        wide = _any_section(pattern)
        out = self._counts_in[host, pattern] = tuple(
            (p, self._get(host, p))
            for p in ((HOST, pattern) if wide is None else (HOST, pattern, wide)))
        return out

    def _closing(self, host: str, pattern: str) -> str | None:
        """The closed budget that holds ``pattern``'s URLs of ``host``, or None."""
        closed = self._closed.get(host)
        if not closed:
            return None
        if HOST in closed:
            return HOST
        if pattern in closed:
            return pattern
        wide = _any_section(pattern)
        if wide is not None and wide in closed:
            return wide
        first, names, depth = _family(pattern)
        for p in closed:
            f, n, d = _family(p)
            if f == first and n == names and d <= depth:
                return p
        return None

    def has_closed(self, host: str) -> bool:
        return bool(self._closed.get(host))

    def observe(self, host: str, key: str, novel: bool) -> list[tuple[str, str, str, int]]:
        """A fetched page with content, in commit order: ``(event, host, pattern, held)``
        for each budget that closes (``closed``) or that a new page reopens
        (``reopened``, with the URLs it held, which the caller admits again)."""
        out: list[tuple[str, str, str, int]] = []
        pattern = pattern_of(key)
        holder = self._closing(host, pattern) if novel and host in self._closed else None
        if holder is not None:  # a probe with new content: its budget reopens
            b = self._b[host, holder]
            out.append(("reopened", host, holder, b.held))
            b.closed = False
            b.dry = b.novel = 0
            b.held = b.probes = b.next_probe = 0
            self._closed[host].discard(holder)
            self.changed = True
        grace = self.config.grace
        for p, b in self._counts_in.get((host, pattern)) or self._counted(host, pattern):
            if novel:  # ``push``, inline: three budgets a page at every commit
                b.dry = 0
                b.novel += 1
                continue
            b.dry += 1
            if not b.closed and b.spent(grace):
                b.closed = True
                b.next_probe = self.config.probe_first
                self._closed.setdefault(host, set()).add(p)
                self.changed = True
                out.append(("closed", host, p, 0))
        return out

    def replay(self, host: str, key: str, novel: bool) -> None:
        """A page seen before a restart: into the windows only (``restore`` brings
        back which budgets were closed)."""
        pattern = pattern_of(key)
        for _, b in self._counts_in.get((host, pattern)) or self._counted(host, pattern):
            b.push(novel)

    def decide(self, host: str, key: str) -> tuple[str, str]:
        """At a queued URL's turn: ``(fetch | probe | hold, the closed budget's pattern)``
        (``fetch, ""`` when no budget of it is closed). A hold or probe is counted."""
        if not self._closed.get(host):
            return FETCH, ""
        which = self._closing(host, pattern_of(key))
        if which is None:
            return FETCH, ""
        b = self._b[host, which]
        self.changed = True
        b.held += 1
        if b.held >= b.next_probe:
            b.probes += 1
            b.next_probe = 2 * b.next_probe
            return PROBE, which
        return HOLD, which

    def closed(self) -> list[dict[str, Any]]:
        """Every closed budget: host, pattern, URLs held, probes sent."""
        out = []
        for host, patterns in sorted(self._closed.items()):
            for p in sorted(patterns):
                b = self._b[host, p]
                out.append({"host": host, "pattern": p, "held": b.held, "probes": b.probes})
        return out

    def state(self) -> dict[str, Any]:
        """The closed budgets and their counters, as JSON data (``restore``)."""
        self.changed = False
        return {f"{host} {p}": [self._b[host, p].held, self._b[host, p].probes,
                                self._b[host, p].next_probe]
                for host, patterns in self._closed.items() for p in patterns}

    def restore(self, state: dict[str, Any]) -> None:
        for name, (held, probes, next_probe) in state.items():
            host, _, pattern = name.partition(" ")
            b = self._get(host, pattern)
            b.closed = True
            b.held, b.probes, b.next_probe = int(held), int(probes), int(next_probe)
            self._closed.setdefault(host, set()).add(pattern)
