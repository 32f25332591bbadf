"""Learned rules and trap budgets in a crawl, on the duplicate-URL test site
(``tests/support/dupsite.py``): one host per pattern, the ground truth from its
generator. Every distinct content page is found, each duplicate pattern is learned
(or stopped by a budget), no tempting wrong rule is kept, and the crawl fetches less
than without learning and ends by itself on an endless calendar, with no page cap."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crawler.core.outputs.output import read_pages
from crawler.core.run.engine import Engine
from crawler.core.state.state import create_crawl, open_crawl
from dedup import UrlSeen
from tests.support.dupsite import RunningDupSite, build
from tests.support.helpers import fast_settings, write_seeds


async def crawl(tmp_path: Path, running: RunningDupSite, *, learn: bool = True,
                name: str = "state", **crawl_settings: Any) -> dict[str, Any]:
    """One whole crawl in process; what it fetched, found and learned."""
    running.reset()
    seeds = write_seeds(tmp_path / f"{name}-seeds.txt", running.seeds)
    settings = fast_settings(crawl={"max_depth": 40, **crawl_settings},
                             learn={"enabled": learn})
    seen, scope, _ = create_crawl(tmp_path / name, settings, seeds)
    try:
        summary = await Engine(seen, settings, scope).run()
        rules = seen.learned_rules()
    finally:
        seen.close()
    return {"summary": summary, "rules": rules, "fetches": running.fetches() - sum(
        log.robots for log in running.logs), "found": running.found() & running.truth,
        "records": read_pages(tmp_path / name / "pages.jsonl")}


def kinds(rules, state: str = "accepted") -> set[str]:
    return {r.rule["kind"] for r in rules if r.state == state}


def dropped(rules, state: str = "accepted") -> set[str]:
    return {n for r in rules if r.state == state and r.rule["kind"] == "drop_params"
            for n in r.rule["names"]}


# pattern -> what a crawl of a host with it (and noise) must learn: rule kinds, or
# (for parameters) the names dropped
LEARNED = {
    "sid_query": {"params": {"sid"}},
    "sid_path": {"kinds": {"ignore_segment"}},
    "jsessionid": {"kinds": {"path_param"}},
    "ref_param": {"params": {"ref"}},
    "sort_param": {"params": {"sort"}},
    "index_html": {"kinds": {"strip_suffix"}},
    "trailing_slash": {"kinds": {"trailing_slash"}},
    "case_alias": {"kinds": {"lower_case"}},
    "ignored_slug": {"kinds": {"ignore_segment"}},
    "print_view": {"print": True},
}


@pytest.mark.parametrize("pattern", sorted(LEARNED))
async def test_each_duplicate_pattern_is_learned_and_no_content_is_lost(tmp_path, pattern):
    site = build(seed=5, hosts=[{pattern, "noise"}], pages=160)
    async with site.serve() as running:
        on = await crawl(tmp_path, running)
        # without learning, a session id makes the site endless: capped
        off = await crawl(tmp_path, running, learn=False, name="off",
                          max_pages=4 * len(running.truth))
    assert on["found"] == running.truth  # every distinct content page
    assert on["summary"]["outcome"] == "finished"
    if pattern in ("sid_query", "sid_path", "jsessionid"):
        assert off["summary"]["outcome"] == "max pages reached"
    want = LEARNED[pattern]
    rules = on["rules"]
    if "params" in want:
        assert want["params"] <= dropped(rules), [r.rule for r in rules]
    if "kinds" in want:
        assert want["kinds"] <= kinds(rules), [r.rule for r in rules]
    if "print" in want:  # ?print=1 dropped, or /print/ as a segment
        assert "print" in dropped(rules) | {r.rule.get("suffix") for r in rules
                                           if r.state == "accepted"}, [r.rule for r in rules]
    # a few aliases (index.html of directories only) save about what the checks cost
    assert on["fetches"] <= off["fetches"]
    assert not kinds(rules, "revoked")  # no rule that had to be taken back


@pytest.mark.parametrize("pattern", ["lang_param", "page_param", "case_distinct",
                                     "slug_distinct"])
async def test_a_tempting_wrong_rule_is_not_kept(tmp_path, pattern):
    # the tempting patterns beside the ones they resemble, as on the benchmark's hosts
    beside = {"lang_param": {"trailing_slash"}, "page_param": {"default_param"},
              "case_distinct": {"index_html"}, "slug_distinct": {"ignored_slug"}}[pattern]
    site = build(seed=6, hosts=[{pattern, "noise", *beside}], pages=200)
    async with site.serve() as running:
        on = await crawl(tmp_path, running)
    assert on["found"] == running.truth
    rules = on["rules"]
    if pattern == "lang_param":
        assert "lang" not in dropped(rules)
    if pattern == "page_param":
        assert "page" not in dropped(rules)
        assert not any(r.rule.get("names") == ["page"] and r.rule.get("value") != "1"
                       for r in rules if r.state == "accepted")
    if pattern == "case_distinct":
        assert "lower_case" not in kinds(rules)
    if pattern == "slug_distinct":
        assert not any(r.rule["kind"] == "ignore_segment" and r.rule["head"][:1] == ["guides"]
                       for r in rules if r.state == "accepted")


async def test_an_endless_calendar_and_facets_end_by_themselves_without_a_page_cap(tmp_path):
    site = build(seed=7, hosts=[{"calendar", "facets", "noise"}], pages=240)
    async with site.serve() as running:
        on = await crawl(tmp_path, running, max_pages=0)
    assert on["summary"]["outcome"] == "finished"
    assert on["found"] == running.truth
    months = [r for r in on["records"] if "/calendar/" in r["url"]]
    assert len(months) < 60  # a handful of probes past the months with events


async def test_a_relative_link_loop_ends_long_before_the_depth_limit(tmp_path):
    site = build(seed=8, hosts=[{"rel_loop", "noise"}], pages=120)
    async with site.serve() as running:
        on = await crawl(tmp_path, running, max_pages=0)
        off = await crawl(tmp_path, running, learn=False, name="off", max_pages=1000)
    assert on["summary"]["outcome"] == "finished"
    assert on["found"] == running.truth
    loops = [r for r in on["records"] if r["url"].count("/") > 6]  # /help/a/b/c/...
    assert len(loops) < 60
    assert off["summary"]["outcome"] == "max pages reached"  # 40 levels of 3 links each


async def test_pages_jsonl_names_the_first_near_duplicate(tmp_path):
    site = build(seed=9, hosts=[{"print_view", "noise"}], pages=60)
    async with site.serve() as running:
        on = await crawl(tmp_path, running)
        off = await crawl(tmp_path, running, learn=False, name="off")
    first: dict[str, str] = {}
    for r in on["records"]:
        cid = running.content_of(r["url"])
        assert "near_duplicate_of" in r
        if cid is None or r["status"] != 200:
            continue
        if cid not in first:
            first[cid] = r["url"]
            assert r["near_duplicate_of"] is None, r
        else:  # the same content under noise (never byte-identical): near, not exact
            assert r["near_duplicate_of"] == first[cid], r
            assert r["duplicate_of"] is None
    assert len(first) == len(running.truth)
    assert all(r["near_duplicate_of"] is None for r in off["records"])
    with UrlSeen(tmp_path / "off", readonly=True) as seen:
        assert list(seen.prints()) == [] and seen.learned_rules() == []


async def test_rules_budgets_and_prints_survive_a_resume(tmp_path):
    """A crawl stopped by its page cap, resumed: the rules it learned are still there and
    still rewrite links; the near-duplicate index and the learners' memory come back from
    the ledger, and the whole crawl finds everything."""
    site = build(seed=10, hosts=[{"sid_query", "ref_param", "calendar", "noise"}], pages=200)
    async with site.serve() as running:
        first = await crawl(tmp_path, running, max_pages=80)
        assert first["summary"]["outcome"] == "max pages reached"
        before = {r.id: (r.rule, r.state) for r in first["rules"] if r.state == "accepted"}
        assert before
        seen, settings, scope = open_crawl(tmp_path / "state")
        settings = settings.with_values(crawl={"max_pages": 0})
        try:
            await Engine(seen, settings, scope).run()
            after = {r.id: (r.rule, r.state) for r in seen.learned_rules()}
        finally:
            seen.close()
        found = running.found() | first["found"]
    for rid, (rule, _) in before.items():
        assert after[rid][0] == rule  # the same rule, under the same id
    assert found >= running.truth
    records = read_pages(tmp_path / "state" / "pages.jsonl")
    seqs = Counter((r["url"], r["fetched_at"]) for r in records)
    assert max(seqs.values()) == 1
    with UrlSeen(tmp_path / "state", readonly=True) as seen:
        prints = list(seen.prints())
        assert len({p.seq for p in prints}) == len(prints)
        held = list(seen.held())
    assert held  # URLs kept by rules, recorded to be admitted again if one is revoked
    by_url = {r["url"]: r for r in records}
    near = [r for r in records if r["near_duplicate_of"]]
    assert near and all(n["near_duplicate_of"] in by_url for n in near)


async def test_the_engine_status_reports_what_learning_saved(tmp_path):
    site = build(seed=11, hosts=[{"sid_query", "calendar", "noise"}], pages=120)
    async with site.serve() as running:
        on = await crawl(tmp_path, running)
    learn = on["summary"]["learn"]
    assert learn["rules"] >= 1 and learn["saved_by_rules"] > 0
    assert learn["budgets"] and learn["saved_by_budgets"] > 0
    json.dumps(learn)
