"""``bloomcrawl fleet --ui``: one dashboard, served by the supervisor, shows every
worker and the totals; ``bloomcrawl report FLEETDIR`` reports every worker."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import aiohttp

from crawler.admin.report import state_stats
from crawler.demo.site import SiteSpec
from crawler.ui.live import FleetProbe, serving
from crawler.wire.monitor import FleetMonitor
from tests.support.browser import chromium, wait_for
from tests.support.dashboard import SLOW, dashboard_url, stats, stop, until_stats
from tests.support.fleetrun import finish, fleet_files, owned_site, start_fleet, worker_settings
from tests.support.helpers import run_cli, start_cli, write_seeds
from tests.support.redisserver import require_redis_binary


async def test_fleet_dashboard_shows_every_worker_and_totals(tmp_path: Path) -> None:
    require_redis_binary()  # the fleet starts its own redis-server
    # ports where each worker owns a host: on others, 1 in 32 runs gave one worker all six
    async with owned_site(SiteSpec(hosts=6, pages=150, seed=5), 2) as running:
        seeds = write_seeds(tmp_path / "seeds.txt", running.seeds)
        fleet = tmp_path / "fleet"
        proc = await start_cli("fleet", str(seeds), "--state", str(fleet), "--workers", "2",
                               "--ui", "127.0.0.1:0", *SLOW)
        try:
            url = await dashboard_url(proc)
            async with aiohttp.ClientSession() as http:
                doc = await until_stats(
                    http, url, lambda d: len(d["workers"]) == 2
                    and all(w["fetched"] > 0 for w in d["workers"])
                    and d["totals"]["fetched"] > 0 and sum(d["status_codes"].values()) > 0,
                    "both workers' figures", proc=proc)
            assert [w["worker"] for w in doc["workers"]] == [0, 1]
            # totals are the workers' sums (each published its own figures)
            assert doc["totals"]["fetched"] >= max(w["fetched"] for w in doc["workers"])
            assert doc["storage"]["ledger_bytes"] > 0 and doc["top_hosts"]
            async with chromium() as browser:
                await browser.open(url)
                rows = await wait_for(browser, "(() => { const t = document.querySelector("
                                      "'#workers table'); return t && t.rows.length - 1; })()")
                assert rows == 3  # worker 0, worker 1, all
                points = await wait_for(browser, "(() => { const p = document.querySelector("
                                        "'svg[data-chart=pages_per_s] path[data-points]');"
                                        " return p && +p.dataset.points >= 2 && "
                                        "+p.dataset.points; })()")
                assert points >= 2
                assert all(u.startswith(url.rstrip("/")) for u in browser.requests)
            assert proc.returncode is None
        finally:
            await stop(proc)
        out = tmp_path / "fleet.html"
        r = await run_cli("report", str(fleet), "-o", str(out))
        assert r.rc == 0, r.stderr
        assert "2 workers" in r.stderr
    html = out.read_text()
    tag = '<script type="application/json" id="data">'
    start = html.index(tag) + len(tag)
    doc = json.loads(html[start:html.index("</script>", start)])
    assert doc["mode"] == "report" and len(doc["workers"]) == 2
    assert doc["totals"]["fetched"] == sum(w["fetched"] for w in doc["workers"]) > 0


async def test_fleet_dashboard_is_running_while_it_runs_with_the_workers_live_figures(
        tmp_path: Path, redis_server) -> None:
    """Issue 36, item 7: while the fleet runs, /api/stats says "running" for it and each
    worker, with the workers' live dedup and filter figures (as one process's
    dashboard); once it ended, the same probe reads "finished" and the figures each
    worker recorded in its state dir."""
    spec = SiteSpec(hosts=4, pages=60, seed=9, delay=0.02)
    async with owned_site(spec, 2) as running:
        seeds, config = fleet_files(tmp_path, running.seeds, worker_settings().with_values(
            politeness={"per_host": 1, "delay": 0.05}, output={"progress_interval": 0.2}))
        fleet = tmp_path / "fleet"
        proc = await start_fleet(seeds, fleet, 2, config, "--redis", redis_server.url,
                                 "--crawl-id", "live-ui", "--ui", "127.0.0.1:0")
        url = await dashboard_url(proc)
        async with aiohttp.ClientSession() as http:
            doc = await until_stats(
                http, url, lambda d: all(w["fetched"] > 0 for w in d["workers"])
                and d["dedup"]["links"] > 0, "both workers' live figures", proc=proc)
        assert proc.returncode is None and doc["totals"]["queued"] > 0
        assert doc["outcome"] == "running"
        assert [w["outcome"] for w in doc["workers"]] == ["running", "running"]
        assert doc["dedup"]["new"] > 0 and doc["dedup"]["confirm_cache_hit_rate"] is not None
        assert doc["filter"]["fill"] is not None and doc["filter"]["expected_fpr"] is not None
        assert all(w["fill"] is not None for w in doc["workers"])
        ((rc, err),) = await finish([proc])
        assert rc == 0, err

    monitor = FleetMonitor(redis_server.url, crawl_id="live-ui", workers=2)
    await monitor.connect()
    try:
        async with serving(FleetProbe(monitor.fleet_stats, fleet, 2),
                           socket.create_server(("127.0.0.1", 0))) as dash, \
                aiohttp.ClientSession() as http:
            end = await stats(http, dash.url)
    finally:
        await monitor.close()
    assert end["outcome"] == "finished"
    assert [w["outcome"] for w in end["workers"]] == ["finished", "finished"]
    workers = [state_stats(fleet / f"worker-{i}") for i in range(2)]
    for key in ("links", "new", "repeats", "confirm_cache_hits", "ledger_queries"):
        assert end["dedup"][key] == sum(w[key] for w in workers), key
    assert end["totals"]["fetched"] == sum(w["fetched"] for w in workers)
