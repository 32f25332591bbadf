"""``bloomcrawl rules`` and ``explain``: what a crawl learned about its hosts' URLs, and
what it decided about one URL. Read-only, safe beside a running crawl."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from crawler.admin.learned import explain, learned_rules
from crawler.cli.args import describe
from crawler.fleet.identity import is_fleet_dir
from dedup import UrlRejected

__all__ = ["add_explain", "add_rules", "format_explain", "format_rules"]


def add_rules(sub: Any) -> None:
    p = sub.add_parser("rules", help="the URL rules a crawl learned, with their evidence",
                       description=describe(cmd_rules))
    p.add_argument("dir", metavar="DIR", help="a crawl's state directory (or a fleet's)")
    p.add_argument("--all", action="store_true", dest="every",
                   help="also the open, rejected and expired proposals (default: accepted "
                   "and revoked rules)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (default: lines of text)")
    p.set_defaults(func=cmd_rules)


def _dirs(d: Path) -> list[Path]:
    """A state dir, or each worker's of a fleet dir."""
    if is_fleet_dir(d):
        return sorted(d.glob("worker-*"), key=lambda p: p.name)
    return [d]


def cmd_rules(args: argparse.Namespace) -> int:
    """The URL rewrite rules the crawl learned per host (a fleet: each worker's hosts):
    what each treats as the same content, its evidence (pairs of URLs with the same
    content, how many contents, counter-examples, an example pair), the URLs it kept
    from being fetched and the checks fetched anyway; revoked ones with the
    counter-example that revoked them. Then the closed trap budgets and the URLs
    they hold."""
    reports = [learned_rules(d, every=args.every) for d in _dirs(Path(args.dir))]
    if args.json:
        print(json.dumps(reports[0] if len(reports) == 1 else {"workers": reports},
                         sort_keys=True))
    else:
        print("\n".join(format_rules(r) for r in reports))
    return 0


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + "Z" if t else "-"


def format_rules(r: dict[str, Any]) -> str:
    """The text of ``bloomcrawl rules``."""
    lines = [f"learned rules of {r['state_dir']}"
             + ("" if r["learning"] else " (learning is off for this crawl: --no-learn)")]
    if not r["rules"]:
        lines.append("  no rule")
    host = None
    for v in sorted(r["rules"], key=lambda v: (v["host"], v["id"])):
        if v["host"] != host:
            host = v["host"]
            lines.append(f"  {host}")
        lines.append(f"    #{v['id']} {v['state']:<9} {v['description']}")
        lines.append(f"        evidence: {v['pairs']} pairs with the same content, "
                     f"{v['contents']} contents, {v['against']} counter-examples; "
                     f"{v['state']} {_when(v['decided_at'])}")
        if v["examples"]:
            a, b = v["examples"][0]
            lines.append(f"        e.g. {a}  =  {b}")
        if v["suppressed"] or v["checks_sent"]:
            lines.append(f"        kept {v['suppressed']} URLs from being fetched; "
                         f"{v['checks_sent']} fetched anyway as checks, "
                         f"{v['checks_passed']} found the same content")
        if v["counter_example"]:
            a, b = v["counter_example"]
            lines.append(f"        counter-example: {a}  !=  {b}")
    if r["budgets"]:
        lines.append("  trap budgets closed (fetches stopped bringing new content):")
        for b in r["budgets"]:
            lines.append(f"    {b['host']} {b['pattern']}: {b['held']} URLs held, "
                         f"{b['probes']} probes")
    s = r["skipped"]
    if s:
        lines.append(f"  not fetched: {s.get('suppressed', 0)} duplicates under rules, "
                     f"{s.get('budget', 0)} held by budgets; {s.get('aliases', 0)} rule keys "
                     "of fetched pages recorded")
    return "\n".join(lines)


def add_explain(sub: Any) -> None:
    p = sub.add_parser("explain", help="why a URL was fetched or not",
                       description=describe(cmd_explain))
    p.add_argument("dir", metavar="DIR", help="a crawl's state directory")
    p.add_argument("url", metavar="URL", help="a URL, canonicalized with the crawl's rules")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (default: lines of text)")
    p.set_defaults(func=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    """Everything the crawl decided about a URL: its canonical form and dedup key,
    the learned rules of its host that rewrite it and the rule key they make, seen or
    not (under its key, under the rule key), the page it was found on and its depth,
    fetched or not and why (scope, per-host cap, robots.txt, a learned rule, a trap
    budget), its status, error, duplicate_of and near_duplicate_of. Exit status 1 for
    a URL the crawl could not take (not http(s), too long)."""
    try:
        e = explain(args.dir, args.url)
    except UrlRejected as exc:
        print(f"{args.url}: rejected: {exc}")
        return 1
    print(json.dumps(e, sort_keys=True) if args.json else format_explain(e))
    return 0


def _ledger_lines(name: str, v: dict[str, Any] | None) -> list[str]:
    if v is None:
        return [f"  {name}: not seen"]
    lines = [f"  {name}: seen, seq {v['seq']}, depth {v['depth']}, {v['state']}"
             + (f", status {v['status']}" if v["status"] is not None else "")
             + (f", error {v['error']!r}" if v["error"] else "")]
    if v["found_on"]:
        lines.append(f"    found on {v['found_on']}")
    if v["marked_at"]:
        lines.append(f"    marked {_when(v['marked_at'])}")
    if "held" in v:
        h = v["held"]
        lines.append(f"    held by learning: {h['kind']} ({h['why']})")
    if "content" in v:
        c = v["content"]
        lines.append(f"    content: {c['payload_digest']}, duplicate_of {c['duplicate_of']}, "
                     f"near_duplicate_of {c['near_duplicate_of']}, "
                     + ("new content" if c["brought_new_content"] else "nothing new"))
    return lines


def format_explain(e: dict[str, Any]) -> str:
    """The text of ``bloomcrawl explain``."""
    lines = [e["url"], f"  canonical: {e['canonical']}", f"  key: {e['key']}",
             f"  scope: {'in scope' if e['in_scope'] else 'out of scope'} (host {e['host']})"]
    if e["rules_applied"]:
        lines.append("  learned rules: " + "; ".join(f"#{r['id']} {r['description']}"
                                                    for r in e["rules_applied"]))
        lines.append(f"  rule key: {e['rule_key']}")
    else:
        lines.append("  learned rules: none rewrites it")
    lines += _ledger_lines("under its key", e["ledger"])
    if e["rule_key"]:
        lines += _ledger_lines("under the rule key", e["ledger_under_rule_key"])
    b = e["budget"]
    lines.append(f"  pattern {e['pattern']}: " + (
        f"budget closed ({b['held']} URLs held, {b['probes']} probes)" if b else "budget open"))
    lines.append(f"  outcome: {e['outcome']}")
    return "\n".join(lines)
