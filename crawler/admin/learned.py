"""What a crawl learned, read from its state dir (read-only, safe beside a running
crawl): the rules with their evidence (``bloomcrawl rules``), and for one URL the
whole story of the crawl's decisions about it (``bloomcrawl explain``).

Why here and not in the crawl: both only read the ledger's tables (``prints``,
``rules``, ``held``, outcomes, notes, contents) and the frozen scope, the way
``stats`` reads the counters; the crawl that wrote them need not run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crawler.config.scope import Scope
from crawler.core.schedule.learning import RULE_KEY, learning_figures
from crawler.core.state.crawlstate import CrawlState
from crawler.core.state.state import require_state_dir
from dedup import (
    HELD_KINDS,
    Rule,
    UrlSeen,
    apply_rules,
    host_of,
    parse_key,
    pattern_of,
    rule_from_spec,
)

__all__ = ["explain", "learned_rules", "learning_summary"]

_KIND_NAMES = {v: k for k, v in HELD_KINDS.items()}


def _rule_view(r: Any) -> dict[str, Any]:
    rule = rule_from_spec(r.rule)
    ev = r.evidence
    return {"id": r.id, "host": r.host, "state": r.state, "rule": r.rule,
            "description": rule.describe(), "pairs": ev.get("pairs", 0),
            "contents": ev.get("nclasses", len(ev.get("classes", ()))),
            "against": ev.get("against", 0), "suppressed": ev.get("suppressed", 0),
            "checks_sent": ev.get("sent", 0), "checks_passed": ev.get("checks", 0),
            "examples": ev.get("examples", []), "counter_example": ev.get("counter"),
            "reason": ev.get("reason", ""), "proposed_at": ev.get("proposed", 0.0),
            "decided_at": ev.get("decided", 0.0)}


def learned_rules(state_dir: str | Path, *, every: bool = False) -> dict[str, Any]:
    """The crawl's rules (accepted and revoked; ``every``: open, rejected and expired
    proposals too) with their evidence, the closed trap budgets, and the counts of
    what learning kept from being fetched."""
    d = require_state_dir(state_dir)
    with CrawlState.stopped(d) as state:
        rows = state.learned_rules()
        budgets = state.learn_budgets()
        counts = state.learn_counts()
        learn = _learns(state)
    shown = [_rule_view(r) for r in rows
             if every or r.state in ("accepted", "revoked")]
    closed = [{"host": name.partition(" ")[0], "pattern": name.partition(" ")[2],
               "held": v[0], "probes": v[1]} for name, v in sorted(budgets.items())]
    return {"state_dir": str(d), "learning": bool(learn), "rules": shown,
            "budgets": closed, "skipped": counts}


def _learns(state: CrawlState) -> bool:
    """Whether the crawl was started with learning on (its frozen settings)."""
    return bool(((state.settings() or {}).get("learn") or {}).get("enabled", False))


def learning_summary(state: CrawlState) -> dict[str, Any] | None:
    """``learning_figures`` of an open state dir (None for a crawl without learning)."""
    if not _learns(state):
        return None
    rules = [{"id": r.id, "host": r.host, "state": r.state,
              "description": rule_from_spec(r.rule).describe(),
              "suppressed": r.evidence.get("suppressed", 0), "checks": r.evidence.get("sent", 0)}
             for r in state.learned_rules() if r.state != "candidate"]
    budgets = [{"host": name.partition(" ")[0], "pattern": name.partition(" ")[2],
                "held": v[0], "probes": v[1]}
               for name, v in sorted(state.learn_budgets().items())]
    return learning_figures(rules, budgets, state.learn_counts())


def _ledger_view(row: dict[str, Any] | None, state: CrawlState) -> dict[str, Any] | None:
    if row is None:
        return None
    seq = row["seq"]
    out = {"seq": seq, "state": row["state"], "depth": row["depth"], "status": row["status"],
           "error": row["error"], "marked_at": row["updated_at"],
           "found_on": state.referrer_of(seq)}
    held = state.held_of(seq)
    if held is not None:
        out["held"] = {"kind": _KIND_NAMES.get(held.kind, str(held.kind)), "why": held.why,
                       "url": held.url}
    p = state.print_of(seq)
    if p is not None:
        near = state.print_of(p.near) if p.near is not None else None
        first = state.first_capture(p.digest) if p.digest else None
        out["content"] = {"payload_digest": p.digest, "simhash": p.simhash,
                          "near_duplicate_of": near.url if near is not None else None,
                          "duplicate_of": first[0] if first and first[0] != p.url else None,
                          "brought_new_content": p.novel == 1}
    return out


def _why(raw: dict[str, Any] | None, ruled: dict[str, Any] | None, in_scope: bool,
         admitted: bool) -> str:
    if not in_scope:
        return "out of the crawl's scope: never admitted"
    if raw is not None and raw["state"] == "fetched":
        return "fetched"
    if ruled is not None and (ruled["state"] == "fetched" or
                              ruled.get("held", {}).get("kind") == "alias"):
        held = ruled.get("held", {}).get("url")
        return f"a duplicate under learned rules of {held}, fetched"
    rows = [r for r in (ruled, raw) if r is not None]
    if any(r["state"] == "failed" for r in rows):
        return "failed (no usable answer): " + next(r["error"] or "" for r in rows
                                                    if r["state"] == "failed")
    for r in rows:
        if r["state"] == "skipped":
            return "not fetched: " + (r["error"] or "skipped")
    if any(r["state"] == "queued" for r in rows):
        return "queued: not fetched yet"
    return "never found on a fetched page" if not admitted else "admitted"


def explain(state_dir: str | Path, url: str) -> dict[str, Any]:
    """Everything the crawl decided about ``url``: its canonical form and key, its
    host's rules that rewrite it and the rule key they make, the ledger's answer for
    the key and the rule key (seen or not, depth, the page it was found on, its
    state, status and error, why it was not fetched: scope, cap, robots.txt, a rule,
    a budget), its content's duplicate_of and near_duplicate_of, and the trap budget
    of its URL pattern. Raises ``dedup.UrlRejected`` for a URL the crawl could not
    take."""
    d = require_state_dir(state_dir)
    with UrlSeen(d, readonly=True) as seen:  # its canonicalizer: the crawl's rules
        state = CrawlState(seen.records)
        fetch_url, key = seen.canonicalizer.resolve(url)
        host = host_of(fetch_url)
        scope = Scope.from_dict(state.scope() or {})
        url_ok = scope.url_filter()
        in_scope = scope.allows_host(host) and (url_ok is None or url_ok(key))
        rows = [r for r in state.learned_rules(host) if r.state == "accepted"]
        rules: list[tuple[int, Rule]] = sorted(
            ((r.id, rule_from_spec(r.rule)) for r in rows),
            key=lambda x: (x[1].rank(), x[0]))
        parts = parse_key(key)
        applied: tuple[int, ...] = ()
        rule_key = None
        rewritten = key
        if parts is not None and rules:
            out_parts, applied = apply_rules(rules, parts)
            if applied:
                rewritten = out_parts.key()
                rule_key = RULE_KEY + rewritten
        raw = _ledger_view(state.lookup_key(key), state)
        ruled = _ledger_view(state.lookup_key(rule_key), state) if rule_key else None
        budgets = state.learn_budgets()
        pattern = pattern_of(rewritten)
        closed = {name.partition(" ")[2]: v for name, v in budgets.items()
                  if name.partition(" ")[0] == host}
    by_id = {r.id: r for r in rows}
    budget = None
    for p in (pattern, "*"):
        if p in closed:
            budget = {"pattern": p, "closed": True, "held": closed[p][0],
                      "probes": closed[p][1]}
    return {
        "url": url, "canonical": fetch_url, "key": key, "host": host, "in_scope": in_scope,
        "rules_applied": [{"id": i, "description": rule_from_spec(by_id[i].rule).describe()}
                          for i in applied],
        "rule_key": rule_key, "seen": raw is not None or ruled is not None,
        "ledger": raw, "ledger_under_rule_key": ruled,
        "pattern": pattern, "budget": budget,
        "outcome": _why(raw, ruled, in_scope, raw is not None or ruled is not None),
    }

