"""``bloomcrawl fleet --ui``: one dashboard, served by the supervisor, shows every
worker and the totals; ``bloomcrawl report FLEETDIR`` reports every worker."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from crawler.demo.site import SiteSpec
from tests.support.browser import chromium, wait_for
from tests.support.dashboard import SLOW, dashboard_url, stop, until_stats
from tests.support.helpers import run_cli, start_cli, write_seeds
from tests.support.redisserver import require_redis_binary


async def test_fleet_dashboard_shows_every_worker_and_totals(tmp_path: Path, site) -> None:
    require_redis_binary()  # the fleet starts its own redis-server
    async with site(SiteSpec(hosts=6, pages=150, seed=5)) as running:
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
