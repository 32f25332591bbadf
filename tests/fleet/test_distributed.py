"""Fleet crawling end to end: worker processes, a real redis-server, a generated site.

Workers run as child processes (``python -m crawler crawl --redis ...``) so that
kill -9 is real; the site is served by this test's event loop and counts every
request, so "fetched once" is checked at the server, not only in the output.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from crawler.admin.report import state_stats
from crawler.cli.main import main
from crawler.config.scope import Scope
from crawler.core.outputs.output import read_pages
from crawler.core.schedule.sitemaps import SITEMAPS_FILE, SitemapCounts
from crawler.core.state.state import FLEET_KEY, create_crawl
from crawler.demo.serve import RunningSite
from crawler.demo.site import SiteSpec
from crawler.fleet.identity import derive_crawl_id, fleet_geometry, settings_geometry, worker_meta
from crawler.wire.outbox import Outbox
from crawler.wire.owner import owner_of
from crawler.wire.transport import RedisTransport
from dedup import Ledger, State, UrlSeen
from dedup.filter.bloom import read_snapshot
from dedup.filter.shards import ShardedBloom
from dedup.filter.snapshot import read_header
from dedup.store.seen import host_of
from tests.support.fleetrun import (
    CRAWL_ID,
    SLOW_SPEC,
    STOP_GRACE,
    Fleet,
    check_exact,
    ctrl_c,
    finish,
    fleet_files,
    fleet_status,
    fleet_worker_dirs,
    make_fleet,
    owned_site,
    served_at_least,
    start_fleet,
    stderr_until,
    worker_settings,
)
from tests.support.helpers import config_toml, fast_settings, run_cli, start_cli, write_seeds
from tests.support.redisserver import RedisServer, free_port, require_redis_binary

pytestmark = pytest.mark.redis

SPEC = SiteSpec(hosts=8, pages=45, seed=31)


def fleet_records(dirs: list[Path]) -> list[tuple[int, dict]]:
    return [(i, r) for i, d in enumerate(dirs) for r in read_pages(d / "pages.jsonl")]


# -- one finished 3-worker crawl, checked from several sides ----------------------------------


@dataclass
class Crawled:
    fleet: Fleet
    running: RunningSite
    robots: Counter
    status: dict[str, int]
    stderr: list[str]


@pytest.fixture(scope="module")
def crawled3(tmp_path_factory: pytest.TempPathFactory) -> Crawled:
    """3 workers crawl an 8-host site to the end (once for the module's tests)."""
    require_redis_binary()
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    tmp = tmp_path_factory.mktemp("fleet3")

    async def crawl() -> Crawled:
        async with owned_site(SPEC, 3) as running:
            fleet = make_fleet(tmp, running, server.url, 3)
            results = await finish([await fleet.start(i) for i in range(3)])
            assert all(rc == 0 for rc, _ in results), results
            robots = Counter({o: log.counts["/robots.txt"]
                              for o, log in zip(running.origins, running.logs, strict=True)})
            status = await fleet_status(server.url, 3)
            return Crawled(fleet, running, robots, status, [err for _, err in results])

    try:
        return asyncio.run(crawl())
    finally:
        server.stop(force=True)


@pytest.mark.slow
def test_three_workers_fetch_the_reachable_set_once_each_page_by_its_owner(crawled3):
    check_exact(crawled3.fleet.dirs, crawled3.running)
    assert all(n == 1 for n in crawled3.robots.values())  # robots.txt: by the owner, once
    assert crawled3.stderr == ["", "", ""]  # --quiet, and no warning
    status = crawled3.status
    assert status["done"] == 1 and status["backlog"] == 0
    assert status["forwarded"] == status["acked"] > 0


@pytest.mark.slow
def test_each_link_is_forwarded_once_per_sender(crawled3):
    """A link to another owner's host goes out once per sender, however many pages hold it."""
    running = crawled3.running
    index = {host_of(o + "/"): h for h, o in enumerate(running.origins)}
    occurrences = 0
    per_sender: dict[int, set[str]] = {}
    for i, r in fleet_records(crawled3.fleet.dirs):
        if r["status"] != 200 or not (r["content_type"] or "").startswith("text/html"):
            continue
        page = running.site.links(index[host_of(r["url"])], urlsplit(r["url"]).path)
        remote = [key for _, key in page if key is not None and host_of(key) in index
                  and owner_of(host_of(key), 3) != i]
        occurrences += len(remote)
        per_sender.setdefault(i, set()).update(remote)
    distinct = sum(len(keys) for keys in per_sender.values())
    assert crawled3.status["forwarded"] == distinct
    assert distinct < occurrences  # links repeat across pages: the repeats were not sent


@pytest.mark.slow
def test_merge_of_the_workers_dirs_is_the_filter_of_every_admitted_url(crawled3, tmp_path,
                                                                      capsys):
    fleet, running = crawled3.fleet, crawled3.running
    out = tmp_path / "merged"
    assert main(["merge", "-o", str(out), *map(str, fleet.dirs)]) == 0
    capsys.readouterr()
    want = running.site.reachable()
    g = fast_settings().dedup
    with UrlSeen(tmp_path / "reference", crawl_id=CRAWL_ID, capacity=g.capacity,
                 error_rate=g.error_rate, shards=g.shards, seed=g.seed, growth=g.growth) as ref:
        keys = sorted(want.fetched | want.robots_blocked)
        assert len(ref.admit_pages([([(k, k) for k in keys], 0)])[0]) == len(keys)
        ref.snapshot()
    for i in range(g.shards):
        merged, header = read_snapshot(ShardedBloom.shard_path(out, i))
        expected, _ = read_snapshot(ref.shard_path(i))
        assert merged == expected, f"shard {i}"
        assert header.crawl_id == CRAWL_ID

    # the fleet's seen-set can be inspected although it has no ledger
    assert main(["stats", "--json", str(out)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["crawl_id"] == CRAWL_ID and stats["shards"] == g.shards
    # an OR of filters cannot know how many keys its inputs shared: the stored count
    # of a merged shard is the union estimate from its bits (exact only by luck)
    assert abs(stats["count"] - len(keys)) <= 0.02 * len(keys)
    assert abs(stats["estimated_count"] - len(keys)) <= 0.05 * len(keys)
    assert main(["stats", str(out)]) == 0
    assert "no ledger" in capsys.readouterr().out

    full = tmp_path / "union"  # --state: a whole state dir (filters OR'ed, ledgers joined)
    assert main(["merge", "--state", "-o", str(full), *map(str, fleet.dirs)]) == 0
    assert "0 present in several inputs" in capsys.readouterr().out
    with UrlSeen(full, readonly=True) as seen:
        assert seen.ledger.meta_get(FLEET_KEY) is None
        assert len(seen.ledger) == len(keys)
        assert all(seen.check(k)[0] for k in keys)
    assert len(read_pages(full / "pages.jsonl")) == len(keys)


@pytest.mark.slow
def test_merge_state_and_the_reports_count_the_fleets_links_pages_and_hosts(crawled3, tmp_path,
                                                                            capsys):
    """Issue 37: the union of a fleet's workers carries their dedup counters, page counts
    and per-host counts (each from its own worker), and the union's report and the
    fleet's count every host crawled."""
    dirs = crawled3.fleet.dirs
    per = [state_stats(d) for d in dirs]
    records = [r for d in dirs for r in read_pages(d / "pages.jsonl")]
    full = tmp_path / "union"
    assert main(["merge", "--state", "-o", str(full), *map(str, dirs)]) == 0
    links, new, repeats = (sum(w[k] for w in per) for k in ("links", "new", "repeats"))
    assert capsys.readouterr().out.strip().endswith(
        f"0 present in several inputs), {len(records)} pages.jsonl records on {SPEC.hosts} "
        f"host(s); dedup (whole crawl, every input): {links} links checked: {new} new, "
        f"{repeats} repeats")
    union = state_stats(full)
    for key in ("links", "new", "repeats", "confirm_cache_hits", "fetched",
                "fetched_with_errors", "failed", "skipped"):
        assert union[key] == sum(w[key] for w in per), key
    counts: Counter[str] = Counter()
    for d in dirs:
        counts.update(json.loads((d / "host_counts.json").read_text()))
    assert json.loads((full / "host_counts.json").read_text()) == dict(counts)
    for what in (full, crawled3.fleet.root / "fleet"):
        out = tmp_path / f"{what.name}.html"
        assert main(["report", str(what), "-o", str(out)]) == 0
        html = out.read_text()
        tag = '<script type="application/json" id="data">'
        start = html.index(tag) + len(tag)
        doc = json.loads(html[start:html.index("</script>", start)])
        assert doc["totals"]["hosts_crawled"] == SPEC.hosts, what
        assert doc["dedup"]["links"] == links, what


def test_merge_state_sums_the_workers_sitemap_counts_and_unites_their_queued_sitemaps(
        tmp_path, capsys):
    """What each worker's sitemap fetches came to (kept in its ledger's meta, as its
    group commits count them) adds up in the union and in `stats FLEETDIR`, and a
    sitemap a worker had queued is still known as one in the union (sitemaps.json)."""
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/", "http://127.0.0.2:9/"])
    dirs = [tmp_path / f"worker-{i}" for i in range(2)]
    queued = [{"http://127.0.0.1:9/sitemap.xml": 0}, {"http://127.0.0.2:9/s.xml.gz": 1}]
    for i, d in enumerate(dirs):
        seen, _, _ = create_crawl(d, worker_settings(), seeds, crawl_id="c3",
                                  meta=worker_meta("c3", 2, i, "redis://127.0.0.1:9/0"))
        SitemapCounts(seen).add([(State.FETCHED, None, 40 + i, 30 + i),
                                 (State.FETCHED, "http 404", 0, 0)] * (i + 1))
        seen.commit()
        seen.close()
        (d / SITEMAPS_FILE).write_text(json.dumps(queued[i]))
    full = tmp_path / "union"
    assert main(["merge", "--state", "-o", str(full), *map(str, dirs)]) == 0
    capsys.readouterr()
    assert state_stats(full)["sitemaps"] == {"fetched": 6, "with_errors": 3, "failed": 0,
                                             "skipped": 0, "urls": 40 + 2 * 41,
                                             "new": 30 + 2 * 31}
    assert json.loads((full / SITEMAPS_FILE).read_text()) == queued[0] | queued[1]
    assert main(["stats", str(tmp_path)]) == 0  # the fleet dir: its workers' sums too
    assert "  sitemaps (whole crawl): 6 fetched (3 with errors), 0 failed, 0 disallowed by " \
        "robots.txt: " \
        "122 URLs listed, 92 of them new\n" in capsys.readouterr().out


def test_merge_brings_shards_that_lag_their_ledger_up_to_date_first(tmp_path, capsys):
    """A worker killed between snapshots: its ledger has URLs its shard files lack."""
    for name in ("a", "b"):
        with UrlSeen(tmp_path / name, crawl_id="c", capacity=1000, shards=2) as seen:
            seen.admit([f"http://{name}.test/old"])
            seen.snapshot()
            seen.admit([f"http://{name}.test/new"])  # committed, never snapshotted
    assert main(["merge", "-o", str(tmp_path / "out"), str(tmp_path / "a"),
                 str(tmp_path / "b")]) == 0
    capsys.readouterr()
    merged = ShardedBloom.load(tmp_path / "out")
    assert all(f"http://{n}.test/{k}" in merged for n in "ab" for k in ("old", "new"))


# -- crashes, stops, lost connections ----------------------------------------------------------


@pytest.mark.slow
async def test_kill9_of_one_worker_then_resume_loses_nothing(tmp_path, redis_server):
    async with owned_site(SLOW_SPEC, 3) as running:
        fleet = make_fleet(tmp_path, running, redis_server.url, 3)
        procs = [await fleet.start(i) for i in range(3)]
        await served_at_least(running, 120)
        await fleet.joined()
        assert procs[1].returncode is None
        procs[1].kill()
        await procs[1].wait()
        procs[1] = await fleet.resume(1)
        results = await finish(procs)
        assert all(rc == 0 for rc, _ in results), results
        check_exact(fleet.dirs, running, max_refetches=6)  # at most worker 1's concurrency


@pytest.mark.slow
async def test_a_signal_to_one_worker_stops_the_fleet_each_snapshots_then_3_become_6(
        tmp_path, redis_server):
    async with owned_site(SLOW_SPEC, 3) as running:
        fleet = make_fleet(tmp_path, running, redis_server.url, 3)
        procs = [await fleet.start(i) for i in range(3)]
        await served_at_least(running, 100)
        await fleet.joined()
        procs[0].send_signal(signal.SIGINT)
        results = await finish(procs, timeout=STOP_GRACE + 60)
        assert [rc for rc, _ in results] == [130, 130, 130], results  # interrupted
        assert "SIGINT: stopping" in results[0][1]
        assert all("stop requested by the fleet" in err for _, err in results[1:])
        queued = 0
        for d in fleet.dirs:
            with Ledger(d / "ledger.sqlite", readonly=True) as ledger:
                hwm = ledger.last_seq()
                queued += ledger.counts()["queued"]
            marks = {read_header(f).hwm for f in (d / "shards").glob("shard-*.bloom")}
            assert marks == {hwm}, d  # every shard written at the end, covering the ledger
        assert queued > 0  # it really stopped early
        # continue as a fleet of 6: its Redis (given, not local) is resharded too
        six = tmp_path / "six"
        done = await run_cli("resize", "--from-state", str(fleet.root / "fleet"), "--to", "6",
                             "-o", str(six))
        assert done.rc == 0, done.stderr
        assert "un-acknowledged link(s) in Redis at redis://127.0.0.1:" in done.stdout
        # the stored URL, no --redis
        done = await run_cli("resume", str(six), "--quiet", timeout=180)
        assert done.rc == 0, done.stderr
        check_exact([six / f"worker-{i}" for i in range(6)], running, max_refetches=0)


@pytest.mark.slow
async def test_a_stop_cut_short_by_stop_grace_says_so_and_refetches_only_those_pages(
        tmp_path, redis_server):
    """The one way a graceful stop refetches: a page still under way after stop_grace
    (here: waiting to forward its links to a Redis that stalls) is cut short, said."""
    async with owned_site(SLOW_SPEC, 2) as running:
        fleet = make_fleet(tmp_path, running, redis_server.url, 2)
        fleet.config.write_text(config_toml(worker_settings().with_values(
            crawl={"stop_grace": 1.0})))
        procs = [await fleet.start(i) for i in range(2)]
        await served_at_least(running, 60)
        await fleet.joined()
        redis = redis_server.proc
        assert redis is not None
        redis.send_signal(signal.SIGSTOP)  # pages with links for the other worker wait
        try:
            await asyncio.sleep(0.5)
            for p in procs:
                p.send_signal(signal.SIGINT)
            await asyncio.sleep(3.0)  # past the grace
        finally:
            redis.send_signal(signal.SIGCONT)
        results = await finish(procs)
        assert [rc for rc, _ in results] == [130, 130], results
        cut = [re.findall(r"(\d+) page\(s\) still under way after 1 s \(crawl.stop_grace\): "
                          r"cut short", err) for _, err in results]
        assert any(cut), results
        results = await finish([await fleet.resume(i) for i in range(2)])
        assert all(rc == 0 for rc, _ in results), results
        said = sum(int(n) for found in cut for n in found)
        check_exact(fleet.dirs, running, max_refetches=said)
        # those waiting on Redis were served before they were cut short: fetched again
        assert sum(n - 1 for n in running.total_pages().values()) > 0


@pytest.mark.slow
async def test_redis_restart_mid_crawl_loses_nothing(tmp_path, redis_factory):
    server = redis_factory(persistent=True)
    async with owned_site(SLOW_SPEC, 3) as running:
        fleet = make_fleet(tmp_path, running, server.url, 3)
        procs = [await fleet.start(i) for i in range(3)]
        await served_at_least(running, 100)
        # a worker that starts slowly (a loaded machine) must meet the outage mid-crawl
        await fleet.joined()
        await asyncio.to_thread(server.stop)  # clean shutdown: the AOF keeps the streams
        # Redis comes back once every worker has met the outage (and said so)
        early = await asyncio.wait_for(
            asyncio.gather(*(stderr_until(p, "connection lost") for p in procs)), 30)
        await asyncio.to_thread(server.start)
        results = [(rc, before + err) for before, (rc, err) in zip(early, await finish(procs),
                                                                     strict=True)]
        assert all(rc == 0 for rc, _ in results), results
        assert all("connection lost" in err for _, err in results), results
        check_exact(fleet.dirs, running, max_refetches=0)


# -- the fleet command, resize -----------------------------------------------------------------


def outboxes(root: Path) -> Counter[str | None]:
    """Links in the workers' outboxes, by the epoch each outbox was last held under."""
    out: Counter[str | None] = Counter()
    for d in fleet_worker_dirs(root):
        box = Outbox(d)
        if box.items:
            out[box.epoch()] += box.items
        box.close()
    return out


@pytest.mark.slow
async def test_fleet_ctrl_c_resize_4_to_2_to_4_and_resume_refetch_nothing(tmp_path):
    require_redis_binary()
    async with owned_site(SLOW_SPEC, 4) as running:
        seeds, config = fleet_files(tmp_path, running.seeds)
        f4, f2, f4b = tmp_path / "f4", tmp_path / "f2", tmp_path / "f4b"
        total = len(running.site.reachable().fetched)

        async def run_until_ctrl_c(proc: asyncio.subprocess.Process, n: int) -> str:
            await served_at_least(running, n)
            return await ctrl_c(proc)

        err = await run_until_ctrl_c(await start_fleet(seeds, f4, 4, config), 80)
        assert "SIGINT: stopping 4 workers" in err and "continue with: bloomcrawl resume" in err
        assert (f4 / "redis").is_dir()  # its own local Redis, kept for resume
        done = await run_cli("resize", "--from-state", str(f4), "--to", "2", "-o", str(f2))
        assert done.rc == 0, done.stderr
        # what the 4 forwarded goes with the 2 (with the fleet's epoch: nothing re-sent)
        before, after = outboxes(f4), outboxes(f2)
        assert sum(before.values()) and sum(after.values()) == sum(before.values())
        assert len(before) == 1 and set(after) == set(before)
        await run_until_ctrl_c(await start_cli("resume", str(f2)), total // 2)
        done = await run_cli("resize", "--from-state", str(f2), "--to", "4", "-o", str(f4b))
        assert done.rc == 0, done.stderr
        assert sum(running.total_pages().values()) < total  # work was left for the end
        done = await run_cli("resume", str(f4b), "--quiet", timeout=180)
        assert done.rc == 0, done.stderr
        assert done.stderr == ""
        check_exact(fleet_worker_dirs(f4b), running, max_refetches=0)
        for i, d in enumerate(fleet_worker_dirs(f4b)):
            with Ledger(d / "ledger.sqlite", readonly=True) as ledger:
                meta = ledger.meta_get(FLEET_KEY)
            assert (meta["worker_id"], meta["workers"]) == (i, 4)
            # the pages' counts moved with the pages (resize recounts them)
            stats = state_stats(d)
            assert stats["fetched"] + stats["failed"] + stats["skipped"] == len(
                read_pages(d / "pages.jsonl"))


# -- clear errors ------------------------------------------------------------------------------


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("bloomcrawl: error: ")
    return lines[0]


def crawl_argv(tmp_path: Path, url: str, workers: int, worker_id: int, *extra: str) -> list[str]:
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/", "http://127.0.0.2:9/"])
    config = tmp_path / "c.toml"
    config.write_text(config_toml(worker_settings()))
    return ["crawl", str(seeds), "--state", str(tmp_path / f"w{worker_id}"), "--redis", url,
            "--workers", str(workers), "--worker-id", str(worker_id), "--config", str(config),
            "--quiet", *extra]


async def register(url: str, workers: int, geometry: dict, crawl_id: str) -> None:
    t = RedisTransport(url, crawl_id=crawl_id, workers=workers, worker_id=0, geometry=geometry)
    await t.connect()
    await t.close()


def test_unreachable_redis_is_one_line_without_the_password(tmp_path, capsys):
    argv = crawl_argv(tmp_path, f"redis://:hunter2@127.0.0.1:{free_port()}/0", 2, 0)
    assert main(argv) == 1
    err = capsys.readouterr().err
    line = one_error_line(err)
    assert "cannot reach Redis at redis://:***@127.0.0.1:" in line and "hunter2" not in err
    assert not (tmp_path / "w0").exists()  # refused before anything was written


def test_wrong_worker_count_is_one_line(tmp_path, capsys, redis_server):
    argv = crawl_argv(tmp_path, redis_server.url, 2, 0)
    crawl_id = derive_crawl_id(argv[1], 2)  # the id a worker derives for these seeds and W
    asyncio.run(register(redis_server.url, 3, {}, crawl_id))
    assert main(argv) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "has 3 workers; this worker was started with --workers 2" in line
    assert not (tmp_path / "w0").exists()


@pytest.mark.parametrize(("field", "change"), [
    ("capacity", {"dedup": {"capacity": 200_000}}),
    ("canon_sort_query", {"canonical": {"sort_query": False}}),
    ("scope", {"crawl": {"allow_domains": ["example.org"]}}),
])
def test_a_worker_of_another_geometry_is_refused_naming_the_field(tmp_path, capsys,
                                                                redis_server, field, change):
    argv = crawl_argv(tmp_path, redis_server.url, 2, 1, "--crawl-id", "geo")
    settings = worker_settings()
    scope = Scope.for_seeds(["http://127.0.0.1:9/", "http://127.0.0.2:9/"])
    fleet = fleet_geometry(settings_geometry(settings), settings.canonical.rules(), scope)
    asyncio.run(register(redis_server.url, 2, fleet, "geo"))
    odd = tmp_path / "odd.toml"
    odd.write_text(config_toml(settings.with_values(**change)))
    argv[argv.index("--config") + 1] = str(odd)
    assert main(argv) == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"geometry field '{field}' differs" in line


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--workers", "2", "--worker-id", "0"], "needs --redis URL"),
    (["--redis", "redis://127.0.0.1:1/0"], "needs --workers W and --worker-id I"),
    (["--redis", "redis://127.0.0.1:1/0", "--workers", "2", "--worker-id", "2"],
     "--worker-id must be below --workers 2"),
    (["--crawl-id", "x"], "--crawl-id is for fleet workers"),
    (["--redis", "r", "--workers", "2", "--worker-id", "0", "--crawl-id", "a b"], "crawl id"),
])
def test_fleet_usage_errors_exit_2(tmp_path, capsys, monkeypatch, argv, fragment):
    monkeypatch.delenv("BLOOMCRAWL_REDIS_URL", raising=False)
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/"])
    assert main(["crawl", str(seeds), "--state", str(tmp_path / "s"), *argv]) == 2
    assert fragment in one_error_line(capsys.readouterr().err)


def test_resuming_a_worker_whose_redis_had_a_password_needs_it_again(tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.delenv("BLOOMCRAWL_REDIS_URL", raising=False)
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/"])
    meta = worker_meta("c1", 2, 0, "redis://:s3cret@127.0.0.1:6390/0")
    assert meta["redis"] == "redis://:***@127.0.0.1:6390/0" and meta["redis_auth"]
    seen, _, _ = create_crawl(tmp_path / "w0", worker_settings(), seeds, crawl_id="c1",
                              meta=meta)
    seen.close()
    assert main(["resume", str(tmp_path / "w0")]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "had a password, which is not stored; give it with --redis URL" in line
    assert "s3cret" not in line


def test_resize_refuses_a_running_fleet_and_ratios_other_than_half_or_double(tmp_path, capsys):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/", "http://127.0.0.2:9/"])
    fleet = tmp_path / "fleet"
    for i in range(2):  # Redis is unreachable: refusing must come before touching it
        meta = worker_meta("c2", 2, i, f"redis://127.0.0.1:{free_port()}/0")
        seen, _, _ = create_crawl(fleet / f"worker-{i}", worker_settings(), seeds,
                                  crawl_id="c2", meta=meta)
        seen.close()
    assert main(["resize", "--from-state", str(fleet), "--to", "3", "-o",
                 str(tmp_path / "x")]) == 1
    assert "can only halve" in one_error_line(capsys.readouterr().err)
    with UrlSeen(fleet / "worker-1", create=False):  # a worker is running
        assert main(["resize", "--from-state", str(fleet), "--to", "1", "-o",
                     str(tmp_path / "one")]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "worker-1 is in use by a running worker; stop the fleet" in line
    assert not (tmp_path / "one").exists()
