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
    records = read_pages(tmp_path / name / "pages.jsonl")
    urls = Counter(r["url"] for r in records)
    assert [u for u, n in urls.items() if n > 1] == []  # each URL fetched once at most
    return {"summary": summary, "rules": rules, "fetches": running.fetches() - sum(
        log.robots for log in running.logs), "found": running.found() & running.truth,
        "records": records}


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
    # the months with events, dry months for the window and its grace, a few probes
    assert len(months) < 150


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
        first = await crawl(tmp_path, running, max_pages=160)
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


async def test_rules_and_explain_say_what_was_learned_and_why_a_url_was_not_fetched(tmp_path):
    from tests.support.helpers import run_cli

    site = build(seed=13, hosts=[{"sid_query", "calendar", "noise"}], pages=120)
    async with site.serve() as running:
        on = await crawl(tmp_path, running)
    state = str(tmp_path / "state")
    done = await run_cli("rules", state)
    assert done.rc == 0, done.stderr
    assert "query parameter sid ignored" in done.stdout
    assert "kept " in done.stdout and "trap budgets closed" in done.stdout
    data = json.loads((await run_cli("rules", state, "--json")).stdout)
    sid = next(r for r in data["rules"] if r["rule"] == {"kind": "drop_params",
                                                          "names": ["sid"]})
    assert sid["state"] == "accepted" and sid["pairs"] >= 4 and sid["against"] == 0
    assert sid["suppressed"] > 0 and data["skipped"]["suppressed"] >= sid["suppressed"]
    assert data["budgets"] and data["budgets"][0]["pattern"] == "/calendar/*/*"
    every = json.loads((await run_cli("rules", state, "--json", "--all")).stdout)
    assert len(every["rules"]) > len(data["rules"])  # proposals rejected or still open
    with UrlSeen(state, readonly=True) as seen:
        held = {h.kind: h for h in seen.held()}
    # a URL a rule kept: not fetched, a duplicate under the rule; its rule key fetched
    kept = held[0].url
    e = json.loads((await run_cli("explain", state, kept, "--json")).stdout)
    assert e["rules_applied"][0]["description"] == "query parameter sid ignored"
    assert e["ledger"]["state"] == "skipped" and "learned rule" in e["ledger"]["error"]
    assert e["ledger"]["found_on"] and e["seen"]
    assert e["outcome"].startswith("a duplicate under learned rules of http")
    assert e["ledger_under_rule_key"] is not None
    # a month a budget held
    month = held[3].url
    e = json.loads((await run_cli("explain", state, month, "--json")).stdout)
    assert e["outcome"].startswith("not fetched: budget: /calendar/*/*")
    assert e["budget"]["closed"] and e["pattern"] == "/calendar/*/*"
    text = (await run_cli("explain", state, month)).stdout
    assert "budget closed" in text and "outcome: not fetched: budget" in text
    # a page fetched, and one never seen, and one out of scope
    page = next(r["url"] for r in on["records"] if r["status"] == 200)
    assert json.loads((await run_cli("explain", state, page, "--json")).stdout)[
        "outcome"] == "fetched"
    e = json.loads((await run_cli("explain", state, running.seeds[0] + "nowhere",
                                  "--json")).stdout)
    assert not e["seen"] and e["outcome"] == "never found on a fetched page"
    e = json.loads((await run_cli("explain", state, "http://elsewhere.test/", "--json")).stdout)
    assert not e["in_scope"] and e["outcome"].startswith("out of the crawl's scope")
    bad = await run_cli("explain", state, "mailto:x@y")
    assert bad.rc == 1 and "rejected" in bad.stdout


async def test_summary_stats_and_report_show_fetches_saved_per_host_and_per_rule(tmp_path):
    import re

    from crawler.core.run.progress import format_summary
    from tests.support.helpers import run_cli

    site = build(seed=14, hosts=[{"sid_query", "noise"}, {"calendar", "noise"}], pages=120)
    async with site.serve() as running:
        on = await crawl(tmp_path, running)
    text = format_summary(on["summary"])
    assert re.search(r"learn \(whole crawl\): \d+ URL rule\(s\) on 1 host\(s\): \d+ duplicate",
                     text), text
    assert "no new content, stopped:" in text and "/calendar/*/*" in text
    state = str(tmp_path / "state")
    stats = json.loads((await run_cli("stats", state, "--json")).stdout)
    learn = stats["learn"]
    sid_host = running.origins[0].split("//")[1]
    assert learn["by_host"][0]["host"] == sid_host
    assert learn["by_host"][0]["saved_by_rules"] == learn["saved_by_rules"] > 0
    assert learn["by_rule"][0]["description"] == "query parameter sid ignored"
    assert [b["pattern"] for b in learn["budgets"]] == ["/calendar/*/*"]
    assert "learn (whole crawl):" in (await run_cli("stats", state)).stdout
    out = tmp_path / "report.html"
    assert (await run_cli("report", state, "-o", str(out))).rc == 0
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>',
                     out.read_text(), re.S)
    assert data is not None
    doc = json.loads(data.group(1))
    assert doc["learning"]["by_host"] == learn["by_host"]
    assert doc["learning"]["by_rule"] == learn["by_rule"]


async def test_no_learn_is_frozen_with_the_crawl(tmp_path):
    from tests.support.helpers import config_toml, run_cli

    site = build(seed=15, hosts=[{"sid_query", "noise"}], pages=60)
    async with site.serve() as running:
        seeds = write_seeds(tmp_path / "seeds.txt", running.seeds)
        config = tmp_path / "c.toml"
        config.write_text(config_toml(fast_settings(crawl={"max_pages": 40})))
        state = tmp_path / "state"
        done = await run_cli("crawl", str(seeds), "--state", str(state), "--config",
                             str(config), "--no-learn", "--quiet")
        assert done.rc == 0, done.stderr
        refused = await run_cli("resume", str(state), "--no-learn")
        assert refused.rc == 2 and "--no-learn" in refused.stderr
    with UrlSeen(state, readonly=True) as seen:
        assert list(seen.prints()) == [] and seen.learned_rules() == []
        assert seen.meta_get("config")["learn"]["enabled"] is False
    assert "learn" not in json.loads((await run_cli("stats", str(state), "--json")).stdout)
    rules = await run_cli("rules", str(state))
    assert "learning is off for this crawl" in rules.stdout


async def test_pages_of_links_alone_are_new_content_to_a_trap_budget(tmp_path):
    """Pages whose only text is a few link words ("more", "up") differ by their links:
    too few words to judge by shingles, each is new content by its new payload, so no
    trap budget closes on them and every page of the tree is fetched (a budget held
    the last pages of such a tree: their text brought no new shingle)."""
    from aiohttp import web

    from tests.support.faultserver import serve

    n = 400

    async def page(request: web.Request) -> web.Response:
        i = int(request.match_info["i"])
        body = "".join(f'<a href="/p/{j}">more</a>' for j in (2 * i + 1, 2 * i + 2) if j < n)
        if i:  # a leaf differs from the others by this link alone
            body += f'<a href="/p/{(i - 1) // 2}#from-{i}">up</a>'
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/p/{i}", page)
    async with serve(app) as base:
        seeds = write_seeds(tmp_path / "seeds.txt", [base + "/p/0"])
        settings = fast_settings(crawl={"max_depth": 40})
        seen, scope, _ = create_crawl(tmp_path / "state", settings, seeds)
        try:
            summary = await Engine(seen, settings, scope).run()
        finally:
            seen.close()
    fetched = {r["url"] for r in read_pages(tmp_path / "state" / "pages.jsonl")}
    assert fetched == {f"{base}/p/{i}" for i in range(n)}
    assert summary["learn"]["budgets"] == []
