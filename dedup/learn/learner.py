"""The online rule learner: per host, rewrite rules from pages with the same content.

Told, page by page in the order they were committed, a fetched page's key and
its content class (the first page of the host with the same content: exact or
near-duplicate, ``dedup.learn.nearindex``), a host's learner

1. proposes rules (``dedup.learn.rules.propose``) from each new page and the
   recent pages of its class: the ways two keys of one content differ;
2. keeps evidence for each proposal over the host's recent pages (``history``):
   two pages whose keys the rule makes one are a pair *for* it when their
   content is the same and a counter-example when it is not. A proposal with a
   counter-example is rejected for good: a parameter that changes the content of
   one page of a host is never dropped on that host;
3. accepts a proposal once it has ``min_pairs`` pairs for it from ``min_contents``
   different contents, and no counter-example;
4. keeps checking accepted rules: a page whose rewritten key is that of an earlier
   page with other content is a counter-example, and the rules that made the two
   keys one are revoked. The caller fetches some of the URLs a rule would suppress
   (``judge``) so that this keeps happening while the rule saves fetches: the
   first URL of each *check key* (the rule, the URL pattern of the page, and the
   values the rule removes where a parameter has few of them, as ``?lang=de``)
   that the rule's evidence did not cover, so a parameter that is ignored on the
   pages the rule was learned from but changes the docs section is caught there,
   on the first doc it would drop; and a share of the rest. A check whose partner
   page left the history is compared through ``lookup`` (the caller's record of
   the rewritten key's page).

Evidence is computed on keys already rewritten by the host's accepted rules, so
rules compose (a session id dropped, then ``index.html`` found on what is left).
An acceptance or revocation rebuilds the open proposals' evidence maps from the
history under the new rules.

Pure and synchronous: keys, classes and seqs in, events out; no I/O. Its durable
form is the rules with their evidence (``RuleState.row``) plus the pages it saw:
``restore`` replays the recent pages after a restart without counting them again,
so a resumed learner holds the same maps, counts and rules as the one that stopped.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dedup.learn.rules import (
    Rule,
    UrlParts,
    apply_rules,
    decompose,
    parse_key,
    propose,
    rule_from_spec,
    shape_of,
)

__all__ = ["ACCEPTED", "CANDIDATE", "DEAD_STATES", "EXPIRED", "REJECTED", "REVOKED",
           "LearnConfig", "RuleLearner", "RuleState"]

CANDIDATE, ACCEPTED, REJECTED, REVOKED = "candidate", "accepted", "rejected", "revoked"
# an open proposal dropped to make room for newer ones (it may be proposed again)
EXPIRED = "expired"
DEAD_STATES = (REJECTED, REVOKED)
_EXAMPLES = 3


@dataclass(frozen=True, slots=True)
class LearnConfig:
    """The learner's thresholds (``[learn]`` in config/default.toml says why each)."""

    history: int = 1000
    min_pairs: int = 4
    min_contents: int = 3
    check_first: int = 4
    check_rate: float = 0.02
    max_candidates: int = 24
    per_class: int = 4  # recent pages of a class a new page is compared with


@dataclass(slots=True)
class RuleState:
    """One rule of one host and its evidence."""

    id: int
    host: str
    rule: Rule
    state: str = CANDIDATE
    pairs: int = 0  # pairs of URLs it makes one whose content is the same
    classes: set[int] = field(default_factory=set)  # the contents of those pairs
    covered: set[tuple[str, tuple]] = field(default_factory=set)  # check keys with evidence
    against: int = 0  # pairs it makes one whose content differs
    examples: list[list[str]] = field(default_factory=list)
    counter: list[str] | None = None  # the first counter-example
    suppressed: int = 0  # URLs it kept from being fetched (``judge``)
    sent: int = 0  # URLs it would have kept, fetched as checks
    checks: int = 0  # checks fetched that agreed
    proposed: float = 0.0
    decided: float = 0.0  # accepted, rejected or revoked at
    reason: str = ""

    def row(self) -> tuple[int, str, dict[str, Any], str, dict[str, Any]]:
        """``(id, host, rule spec, state, evidence)``: the durable form."""
        return (self.id, self.host, self.rule.spec(), self.state, {
            "pairs": self.pairs, "classes": sorted(self.classes)[:64],
            "nclasses": len(self.classes), "against": self.against,
            "examples": self.examples, "counter": self.counter,
            "suppressed": self.suppressed, "sent": self.sent, "checks": self.checks,
            "proposed": self.proposed, "decided": self.decided, "reason": self.reason})

    @classmethod
    def from_row(cls, rid: int, host: str, spec: dict[str, Any], state: str,
                 ev: dict[str, Any]) -> RuleState:
        s = cls(rid, host, rule_from_spec(spec), state)
        s.pairs = int(ev.get("pairs", 0))
        s.classes = set(ev.get("classes", ()))
        s.against = int(ev.get("against", 0))
        s.examples = [list(x) for x in ev.get("examples", [])]
        s.counter = ev.get("counter")
        s.suppressed = int(ev.get("suppressed", 0))
        s.sent = int(ev.get("sent", 0))
        s.checks = int(ev.get("checks", 0))
        s.proposed = float(ev.get("proposed", 0.0))
        s.decided = float(ev.get("decided", 0.0))
        s.reason = ev.get("reason", "")
        return s


@dataclass(slots=True)
class _Page:
    key: str
    parts: UrlParts
    cls: int
    seq: int
    rkey: str  # under the accepted rules
    applied: tuple[int, ...]


_FEW = 8  # a parameter with more values than this on a host is an id (its value unchecked)
_COVERED = 4096  # check keys kept per rule


class _Host:
    """One host's learner."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.values: dict[str, set[str | None]] = {}  # parameter -> values seen (up to _FEW+1)
        self.accepted: list[tuple[int, Rule]] = []  # in application order
        self.states: dict[int, RuleState] = {}
        self.by_rule: dict[Rule, int] = {}  # every rule ever proposed, dead ones included
        self.history: deque[_Page] = deque()
        self.by_class: dict[int, list[_Page]] = {}  # the class's most recent pages
        # accepted rules' keys: rewritten key -> latest page with it
        self.seen_rkeys: dict[str, _Page] = {}
        # open proposals: rule id -> (its key of a page -> latest page with it)
        self.maps: dict[int, dict[str, _Page]] = {}


Event = tuple[str, RuleState]  # ("accepted" | "revoked" | "rejected", the rule)


class RuleLearner:
    """Every host's learner; ``lookup(host, rewritten key)`` answers ``(class, key)``
    of the page fetched under a rewritten key, or None (a check's slow path)."""

    def __init__(self, config: LearnConfig | None = None, *,
                 lookup: Callable[[str, str], tuple[int, str] | None] | None = None) -> None:
        self.config = config or LearnConfig()
        self.lookup = lookup
        self._hosts: dict[str, _Host] = {}
        self._next_id = 1
        self._changed: set[int] = set()
        self._states: dict[int, RuleState] = {}
        self._checked: set[str] = set()  # rule keys a URL was fetched to check
        self.version = 0  # moves at every acceptance or revocation (rules changed)

    # -- what the crawl asks ----------------------------------------------------------

    def has_rules(self, host: str) -> bool:
        h = self._hosts.get(host)
        return h is not None and bool(h.accepted)

    def hosts_with_rules(self) -> list[str]:
        return [name for name, h in self._hosts.items() if h.accepted]

    def rewrite(self, host: str, key: str) -> tuple[str, tuple[int, ...]]:
        """``key`` under ``host``'s accepted rules and the ids of those that changed it
        (``(key, ())`` when none did)."""
        h = self._hosts.get(host)
        if h is None or not h.accepted:
            return key, ()
        parts = parse_key(key)
        if parts is None:
            return key, ()
        out, applied = apply_rules(h.accepted, parts)
        return (out.key(), applied) if applied else (key, ())

    def judge(self, host: str, rule_ids: Iterable[int], key: str, rule_key: str) -> bool:
        """A URL of ``host`` (``key``) these rules make a duplicate of the page of
        ``rule_key`` (fetched or queued): True to fetch it anyway, as a check, False to
        keep it (counted as saved). Checked: the first URL of each check key no
        evidence covered (``_check_keys``), one of each of the first ``check_first``
        rule keys of a rule, and of ``check_rate`` of the others (by the rule key's
        hash); a rule key is sampled once, whatever the values its URLs drop (a menu
        link under a session id, a page linked with five referral tags, is not
        checked at every sighting)."""
        cfg = self.config
        h = self._hosts[host]
        states = [self._states[r] for r in rule_ids]
        due = False
        parts = parse_key(key)
        if parts is not None:
            self._values(h, parts)
        keys = self._check_keys(h, states, parts, rule_key) if parts is not None else []
        fresh = [(s, k) for s, k in keys if k not in s.covered]
        if fresh:  # covered now: the next URL of these keys is not checked for them
            due = True
            for s, k in fresh:
                self._cover(s, k)
        elif rule_key not in self._checked:  # the sample: by rule key, whatever the values
            due = any(s.sent < cfg.check_first for s in states) or (
                cfg.check_rate > 0 and
                zlib.crc32(rule_key.encode()) % 1_000_000 < cfg.check_rate * 1_000_000)
        if due:
            self._checked.add(rule_key)
        for s in states:
            if due:
                s.sent += 1
            else:
                s.suppressed += 1
            self._changed.add(s.id)
        return due

    def _check_keys(self, h: _Host, states: list[RuleState], parts: UrlParts, rule_key: str
                    ) -> list[tuple[RuleState, tuple[str, tuple]]]:
        """Per rule: ``(the rewritten page's path shape, the (name, value) pairs it
        drops, values of many-valued parameters as "*")``."""
        pattern = shape_of(rule_key.lstrip("~"))
        out = []
        for s in states:
            sig: tuple = ()
            if s.rule.kind == "drop_params":
                sig = tuple(sorted((n, v if len(h.values.get(n, ())) <= _FEW else "*")
                                   for n, v in parts.params if n in s.rule.names))
            out.append((s, (pattern, sig)))
        return out

    @staticmethod
    def _values(h: _Host, parts: UrlParts) -> None:
        """Note the values of a key's parameters (up to one more than ``_FEW``)."""
        for n, v in parts.params:
            vals = h.values.get(n)
            if vals is None:
                vals = h.values[n] = set()
            if len(vals) <= _FEW:
                vals.add(v)

    def _cover(self, s: RuleState, key: tuple[str, tuple]) -> None:
        if len(s.covered) < _COVERED:
            s.covered.add(key)

    def proposing(self, host: str) -> bool:
        """Whether ``host`` has open proposals (``speculative`` can say yes at all)."""
        h = self._hosts.get(host)
        return h is not None and bool(h.maps)

    def speculative(self, host: str, key: str) -> bool:
        """Whether an open proposal with support and no counter-example makes ``key``
        one with a page already fetched: fetching it now would likely be a duplicate,
        and later the proposal may be decided (the caller puts it back once)."""
        h = self._hosts.get(host)
        if h is None or not h.maps:
            return False
        parts = parse_key(key)
        if parts is None:
            return False
        rparts, _ = apply_rules(h.accepted, parts)
        for rid, m in h.maps.items():
            if not self._states[rid].pairs:
                continue
            other = m.get(self._states[rid].rule.apply(rparts).key())
            if other is not None and other.key != key:
                return True
        return False

    def rules(self, host: str | None = None) -> list[RuleState]:
        """Every rule (one host's), by id."""
        if host is None:
            return [self._states[i] for i in sorted(self._states)]
        h = self._hosts.get(host)
        return [] if h is None else [h.states[i] for i in sorted(h.states)]

    def rule(self, rid: int) -> RuleState:
        return self._states[rid]

    def recent(self, host: str) -> list[tuple[str, int, str, tuple[int, ...]]]:
        """The host's recent pages as ``(key, seq, rewritten key, rules that rewrote
        it)``, oldest first."""
        h = self._hosts.get(host)
        return [] if h is None else [(p.key, p.seq, p.rkey, p.applied) for p in h.history]

    def changed(self) -> list[RuleState]:
        """Rules whose state or evidence changed since the last call (an expired
        proposal once, then it is gone)."""
        out = [self._states[i] for i in sorted(self._changed)]
        self._changed.clear()
        for s in out:
            if s.state == EXPIRED:
                del self._states[s.id]
        return out

    # -- learning -------------------------------------------------------------------

    def observe(self, host: str, key: str, cls: int, seq: int, *, now: float = 0.0,
                check: bool = False, first: str | None = None) -> tuple[list[Event], bool]:
        """A fetched page of ``host``: its key, content class and seq, in commit order.
        ``check``: it was fetched to check a rule; ``first``: the key of the first
        page of its content (None: it is that page). Returns what changed, and
        whether the page is a duplicate that a URL rule explains (its key and an
        earlier page's of the same content are one under an accepted rule, or differ
        in a way a live proposal covers): the learner's business, not a trap's."""
        parts = parse_key(key)
        if parts is None:
            return [], False
        h = self._hosts.get(host)
        if h is None:
            h = self._hosts[host] = _Host(host)
        events: list[Event] = []
        if parts.params:
            self._values(h, parts)
        if h.accepted:
            page = self._page(h, key, parts, cls, seq)
            explained = self._check_accepted(h, page, check, now, events)
            if events:  # rules were revoked: the page's own key changed
                page = self._page(h, key, parts, cls, seq)
        else:  # no rule: its key as it is, and nothing to check
            page = _Page(key, parts, cls, seq, key, ())
            explained = False
        # a page of a new content, when no first page is named, has no pair to propose
        if first is not None or cls in h.by_class:
            explained = self._propose(h, page, now, events, first) or explained
        if h.maps:
            for rid in list(h.maps):
                self._evidence(h, rid, page, now, events)
        self._remember(h, page)
        if events and any(kind == ACCEPTED for kind, _ in events):
            self._rebuild(h)
        return events, explained

    def restore(self, rows: Iterable[tuple[int, str, dict[str, Any], str, dict[str, Any]]]
                ) -> None:
        """The rules as stored (``RuleState.row``), before ``replay``."""
        for row in rows:
            s = RuleState.from_row(*row)
            self._next_id = max(self._next_id, s.id + 1)
            if s.state == EXPIRED:
                continue
            h = self._hosts.get(s.host)
            if h is None:
                h = self._hosts[s.host] = _Host(s.host)
            h.states[s.id] = s
            h.by_rule[s.rule] = s.id
            self._states[s.id] = s
            if s.state == ACCEPTED:
                h.accepted.append((s.id, s.rule))
            elif s.state == CANDIDATE:
                h.maps[s.id] = {}
        for h in self._hosts.values():
            h.accepted.sort(key=lambda r: (r[1].rank(), r[0]))
        self.version += 1

    def replay(self, host: str, key: str, cls: int, seq: int) -> None:
        """A page the learner saw before a restart (in commit order, the host's last
        ``history`` pages): into the history and the maps, counting nothing."""
        parts = parse_key(key)
        if parts is None:
            return
        h = self._hosts.get(host)
        if h is None:
            h = self._hosts[host] = _Host(host)
        page = self._page(h, key, parts, cls, seq)
        for rid, m in h.maps.items():
            k = self._rule_key(h, rid, page)
            if k is not None:
                m[k] = page
        self._remember(h, page)

    # -- internals --------------------------------------------------------------------

    def _page(self, h: _Host, key: str, parts: UrlParts, cls: int, seq: int) -> _Page:
        rparts, applied = apply_rules(h.accepted, parts)
        return _Page(key, rparts, cls, seq, rparts.key() if applied else key, applied)

    def _rule_key(self, h: _Host, rid: int, page: _Page) -> str | None:
        """A page's key under an open proposal (on top of the accepted rules)."""
        rule = h.states[rid].rule
        return rule.apply(page.parts).key()

    def _remember(self, h: _Host, page: _Page) -> None:
        cfg = self.config
        h.history.append(page)
        cls_pages = h.by_class.get(page.cls)
        if cls_pages is None:
            h.by_class[page.cls] = [page]
        else:
            cls_pages.append(page)
            if len(cls_pages) > cfg.per_class:
                del cls_pages[0]
        h.seen_rkeys[page.rkey] = page
        if len(h.history) > cfg.history:
            self._forget(h, h.history.popleft())

    def _forget(self, h: _Host, old: _Page) -> None:
        if h.seen_rkeys.get(old.rkey) is old:
            del h.seen_rkeys[old.rkey]
        cls_pages = h.by_class.get(old.cls)
        if cls_pages is not None:
            if old in cls_pages:
                cls_pages.remove(old)
            if not cls_pages:
                del h.by_class[old.cls]
        for rid, m in h.maps.items():
            k = self._rule_key(h, rid, old)
            if k is not None and m.get(k) is old:
                del m[k]

    def _check_accepted(self, h: _Host, page: _Page, check: bool, now: float,
                        events: list[Event]) -> bool:
        """Compare a page with the one its rewritten key had: True if the two are the
        same content (an accepted rule explains the page)."""
        if not page.applied and not h.accepted:
            return False
        other = h.seen_rkeys.get(page.rkey)
        partner: tuple[int, str] | None
        if other is not None and other.key != page.key:
            partner = (other.cls, other.key)
            other_applied = other.applied
        elif check and page.applied and self.lookup is not None:
            partner = self.lookup(h.name, page.rkey)
            other_applied = ()
            if partner is not None and partner[1] == page.key:
                partner = None
        else:
            partner = None
        if partner is None:
            return False
        involved = sorted(set(page.applied) | set(other_applied))
        if not involved:
            return False
        if partner[0] == page.cls:
            if check:
                for rid in page.applied:
                    self._states[rid].checks += 1
                    self._changed.add(rid)
            return True
        # other content under one rewritten key: the rules that made the keys one go
        blamed = self._blamed(h, page.key, partner[1]) or involved
        for rid in blamed:
            s = self._states[rid]
            if s.state != ACCEPTED:
                continue
            s.state = REVOKED
            s.decided = now
            s.against += 1
            s.counter = [partner[1], page.key]
            s.reason = "a check found other content under its rewritten key"
            self._changed.add(rid)
            events.append((REVOKED, s))
        h.accepted = [(i, r) for i, r in h.accepted if self._states[i].state == ACCEPTED]
        self.version += 1
        self._rebuild(h)
        return False

    def _blamed(self, h: _Host, a: str, b: str) -> list[int]:
        """The accepted rules to revoke so that ``a`` and ``b`` are not one key: the
        newest of the rules without which they would be two (the one with the least
        time behind it: a rule that held for long is not revoked for a newer one's
        mistake); if no rule alone does it (a parameter dropped by two rules), the
        newest ones until the keys are two."""
        pa, pb = parse_key(a), parse_key(b)
        if pa is None or pb is None:
            return []
        rules = list(h.accepted)
        out: list[int] = []

        def one(rs: list[tuple[int, Rule]]) -> bool:
            return apply_rules(rs, pa)[0].key() == apply_rules(rs, pb)[0].key()

        order = sorted((x for x in rules if x[1].apply(pa) is not pa or
                        x[1].apply(pb) is not pb),
                       key=lambda x: (-self._states[x[0]].decided, -x[0]))
        # a rule without which the keys are two: the newest such one
        for rid, _ in order:
            if not one([x for x in rules if x[0] != rid]):
                return [rid]
        for rid, _ in order:  # none alone: the newest ones until the keys are two
            if not one(rules):
                break
            out.append(rid)
            rules = [x for x in rules if x[0] != rid]
        return out

    def _propose(self, h: _Host, page: _Page, now: float, events: list[Event],
                 first: str | None) -> bool:
        """Open the rules the page and the recent pages of its content (and the first
        one, ``first``, which the history may have forgotten) propose; True if one
        of those pairs is one key under the rules or one of its proposals is open or
        accepted."""
        others = list(h.by_class.get(page.cls, ()))
        if first is not None and first != page.key and \
                not any(o.key == first for o in others):
            parts = parse_key(first)
            if parts is not None:
                others.append(self._page(h, first, parts, page.cls, -1))
        explained = False
        for other in others:
            if other.rkey == page.rkey:
                explained = True  # the same URL under the rules (fetched again)
                continue
            rules = propose(other.parts, page.parts)
            if not rules:  # several differences at once: evidence for each
                explained = self._jointly(h, other, page, now, events) or explained
                continue
            for rule in rules:
                rid = h.by_rule.get(rule)
                if rid is None:
                    self._open(h, rule, now, events)
                    rid = h.by_rule.get(rule)
                if rid is not None and h.states[rid].state in (CANDIDATE, ACCEPTED):
                    explained = True
        return explained

    def _open(self, h: _Host, rule: Rule, now: float, events: list[Event]) -> None:
        if len(h.maps) >= self.config.max_candidates:  # the weakest open one makes room
            weakest = min(h.maps, key=lambda i: (len(h.states[i].classes), h.states[i].pairs, i))
            s = h.states.pop(weakest)
            del h.maps[weakest]
            del h.by_rule[s.rule]
            s.state = EXPIRED
            self._changed.add(weakest)
        rid = self._next_id
        self._next_id += 1
        s = RuleState(rid, h.name, rule, proposed=now)
        h.states[rid] = s
        h.by_rule[rule] = rid
        self._states[rid] = s
        self._changed.add(rid)
        m: dict[str, _Page] = {}
        h.maps[rid] = m
        for old in h.history:  # its evidence so far: the host's recent pages
            self._evidence(h, rid, old, now, events)

    def _evidence(self, h: _Host, rid: int, page: _Page, now: float,
                  events: list[Event]) -> None:
        m = h.maps.get(rid)
        if m is None:
            return
        k = self._rule_key(h, rid, page)
        if k is None:
            return
        other = m.get(k)
        m[k] = page
        if other is None or other.rkey == page.rkey:
            return
        s = h.states[rid]
        self._changed.add(rid)
        if other.cls == page.cls:
            self._support(h, s, other, page, k, now, events)
            return
        s.against += 1
        s.state = REJECTED
        s.decided = now
        s.counter = [other.key, page.key]
        s.reason = "two URLs it makes one have different content"
        del h.maps[rid]
        events.append((REJECTED, s))

    def _support(self, h: _Host, s: RuleState, other: _Page, page: _Page, k: str,
                 now: float, events: list[Event]) -> None:
        """A pair of pages with the same content for the open rule ``s`` (``k``: their
        key under it); accepted once it has enough."""
        rid = s.id
        self._changed.add(rid)
        s.pairs += 1
        s.classes.add(page.cls)
        for p in (other, page):  # where and how it held: no check needed there
            for _, ck in self._check_keys(h, [s], p.parts, k):
                self._cover(s, ck)
        if len(s.examples) < _EXAMPLES:
            s.examples.append([other.key, page.key])
        cfg = self.config
        if s.pairs >= cfg.min_pairs and len(s.classes) >= cfg.min_contents:
            s.state = ACCEPTED
            s.decided = now
            s.reason = (f"{s.pairs} pairs of URLs with the same content, "
                        f"{len(s.classes)} contents, no counter-example")
            del h.maps[rid]
            h.accepted.append((rid, s.rule))
            h.accepted.sort(key=lambda r: (r[1].rank(), r[0]))
            self.version += 1
            events.append((ACCEPTED, s))

    def _jointly(self, h: _Host, other: _Page, page: _Page, now: float,
                 events: list[Event]) -> bool:
        """Two pages of one content whose keys differ in several ways (``decompose``):
        the pair supports each open rule that explains one of the differences (a
        counter-example still comes only from a pair that one rule alone makes one:
        ``_evidence``). True if every difference has a live rule."""
        groups = decompose(other.parts, page.parts)
        explained = bool(groups)
        for group in groups:
            live = False
            for rule in group:
                rid = h.by_rule.get(rule)
                if rid is None:
                    self._open(h, rule, now, events)
                    rid = h.by_rule.get(rule)
                if rid is None:
                    continue
                st = h.states[rid]
                if st.state == CANDIDATE:
                    self._support(h, st, other, page, st.rule.apply(page.parts).key(), now,
                                  events)
                live = live or st.state in (CANDIDATE, ACCEPTED)
            explained = explained and live
        return explained

    def _rebuild(self, h: _Host) -> None:
        """The history's rewritten keys and the open proposals' maps under the host's
        rules as they now are (after an acceptance or a revocation)."""
        pages = list(h.history)
        h.seen_rkeys.clear()
        for p in pages:
            rparts, applied = apply_rules(h.accepted, parse_key(p.key))  # type: ignore[arg-type]
            p.parts, p.applied = rparts, applied
            p.rkey = rparts.key() if applied else p.key
            h.seen_rkeys[p.rkey] = p
        for rid in list(h.maps):
            m = h.maps[rid] = {}
            for p in pages:
                k = self._rule_key(h, rid, p)
                if k is not None:
                    m[k] = p
