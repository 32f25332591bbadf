"""resize keeps the fleet's figures: what ``stats FLEETDIR`` sums over the workers is
the same before and after a split or a merge, and each worker's sitemap counts match
the sitemap files its ledger holds (``stats`` takes those out of its pages)."""

from __future__ import annotations

import json
from pathlib import Path

from crawler.admin.report import fleet_stats
from crawler.cli.main import main
from crawler.core.schedule.sitemaps import SITEMAPS_FILE, SitemapCounts
from crawler.core.state.crawlstate import CrawlState
from crawler.core.state.pagecounts import recount
from crawler.core.state.state import create_crawl
from crawler.fleet.identity import read_fleet_dir, worker_meta, write_fleet_file
from crawler.wire.owner import owner_of
from dedup import State
from tests.support.fleetrun import worker_settings
from tests.support.helpers import write_seeds

CRAWL = "resize-counts"
FIGURES = ("links", "new", "repeats", "fetched", "failed", "skipped", "queued")


def two_hosts_apart() -> tuple[str, str]:
    """Two loopback hosts that a fleet of 2 gives to different workers."""
    hosts = [f"127.0.0.{i}:9" for i in range(1, 40)]
    a = hosts[0]
    b = next(h for h in hosts if owner_of(h, 2) != owner_of(a, 2))
    return a, b


def one_worker_fleet(root: Path, tmp_path: Path, redis_url: str) -> dict[str, str]:
    """A stopped fleet of 1 over two hosts: each host's sitemap fetched (one of them
    with an error), counted as the group commit counts them; returns the sitemaps."""
    a, b = two_hosts_apart()
    seeds = write_seeds(tmp_path / "seeds.txt", [f"http://{a}/", f"http://{b}/"])
    d = root / "worker-0"
    seen, _, _ = create_crawl(d, worker_settings(), seeds, crawl_id=CRAWL,
                              meta=worker_meta(CRAWL, 1, 0, redis_url))
    maps = {f"http://{a}/sitemap.xml": 0, f"http://{b}/sitemap.xml": 0}
    for new in seen.admit(list(maps)):
        seen.ledger.mark(new.seq, State.FETCHED, status=200)
    state = CrawlState(seen.records)
    recount(state, [])  # no page committed yet
    state.set_totals({"links": 30, "new": 20, "repeats": 10})  # what its runs checked
    # what learning saved, by host, and a trap budget closed on each host
    state.set_learn_counts({"suppressed": 9, "budget": 4, "aliases": 2,
                            "hosts": {a: [6, 1], b: [3, 3]}})
    state.set_learn_budgets({f"{a} /cal/*": [5, 1, 40], f"{b} /f/*": [7, 2, 80]})
    SitemapCounts(state).add(
        [(State.FETCHED, None, 7, 5), (State.FETCHED, "http 404", 0, 0)])
    seen.commit()
    seen.close()
    (d / SITEMAPS_FILE).write_text(json.dumps(maps))
    write_fleet_file(root, CRAWL, 1, redis_url)
    return maps


def figures(root: Path) -> dict:
    fleet = read_fleet_dir(root)
    st = fleet_stats(root, CRAWL, [fleet.worker(i) for i in range(fleet.workers)])
    t = st["totals"]
    learn = {k: t["learn"][k] for k in ("saved_by_rules", "saved_by_budgets", "skipped")}
    learn["by_host"] = sorted((h["host"], h["saved_by_rules"], h["saved_by_budgets"])
                              for h in t["learn"]["by_host"])
    learn["budgets"] = sorted(tuple(b.values()) for b in t["learn"]["budgets"])
    return {"sitemaps": t.get("sitemaps"), "learn": learn, **{k: t.get(k) for k in FIGURES}}


def sitemap_rows_fetched(d: Path) -> int:
    with CrawlState.stopped(d) as state:
        return state.sitemap_counts().get("fetched", 0)


def test_a_split_and_a_merge_keep_the_fleets_figures(tmp_path, redis_server):
    f1, f2, back = tmp_path / "f1", tmp_path / "f2", tmp_path / "back"
    maps = one_worker_fleet(f1, tmp_path, redis_server.url)
    before = figures(f1)
    assert before["sitemaps"]["fetched"] == 2 and before["links"] == 30
    assert before["fetched"] == 0  # the sitemap files are not pages
    assert before["learn"]["saved_by_rules"] == 9 and len(before["learn"]["budgets"]) == 2
    assert main(["resize", "--from-state", str(f1), "--to", "2", "-o", str(f2)]) == 0
    assert figures(f2) == before
    # each worker counts the sitemap files its own ledger holds (its pages are the rest)
    for i in range(2):
        d = f2 / f"worker-{i}"
        mine = json.loads((d / SITEMAPS_FILE).read_text())
        assert sitemap_rows_fetched(d) == len(mine) == 1, mine
    assert set().union(*(json.loads((f2 / f"worker-{i}" / SITEMAPS_FILE).read_text())
                         for i in range(2))) == set(maps)
    assert main(["resize", "--from-state", str(f2), "--to", "1", "-o", str(back)]) == 0
    assert figures(back) == before
