"""Pages fetched are responses received; failures are counted by cause and by host
(issue 24), in the end-of-crawl summary and in ``bloomcrawl stats``, exactly
across kill -9 and resume."""

from __future__ import annotations

import json
import random
import re
import socket
from collections import Counter

import pytest

from crawler.admin.report import state_stats
from crawler.core.outputs.output import read_pages
from crawler.core.run.progress import format_stats, format_summary
from crawler.core.state.crawlstate import CrawlState
from crawler.core.state.pagecounts import MAX_HOSTS, OTHER_HOSTS, UNKNOWN_HOST, PageCounts
from crawler.net.outcome import failure_cause
from dedup import State, UrlSeen, host_of
from tests.crawler.core.run.test_engine import crawl
from tests.crawler.core.state.test_resume import SPEC, run_until, setup_crawl
from tests.support.faultserver import fault_server
from tests.support.helpers import config_toml, fast_settings, run_cli, write_seeds
from tests.support.killloop import kill_at


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _stats_json(state) -> dict:
    done = await run_cli("stats", str(state), "--json")
    assert done.rc == 0, done.stderr
    return json.loads(done.stdout)


async def test_a_crawl_of_a_port_nothing_listens_on_fetched_nothing(tmp_path):
    port = _closed_port()
    host = f"127.0.0.1:{port}"
    _, _, _, summary = await crawl(tmp_path, [f"http://{host}/", f"http://{host}/a"],
                                   fast_settings())
    assert (summary["fetched"], summary["failed"]) == (0, 2)
    assert summary["failed_causes"] == {"connection refused": 2}
    assert summary["failed_hosts"] == {host: {"connection refused": 2}}
    text = format_summary(summary)
    assert "0 fetched" in text and "2 failed (2 connection refused)" in text
    assert f"{host}: 2 failed: connection refused" in text
    stats = await _stats_json(tmp_path / "state")
    assert (stats["fetched"], stats["failed"], stats["given_up"]) == (0, 2, 2)
    assert stats["failed_hosts"] == {host: {"connection refused": 2}}
    assert f"{host}: 2 failed: connection refused" in format_stats(state_stats(
        tmp_path / "state"))


async def test_a_server_that_resets_every_connection_fetched_nothing(tmp_path):
    settings = fast_settings(fetch={"retries": 0})
    async with fault_server() as srv:
        _, _, _, summary = await crawl(
            tmp_path, [srv.url("/reset?k=1"), srv.url("/reset?k=2")], settings)
        host = host_of(srv.base + "/")
    assert (summary["fetched"], summary["failed"]) == (0, 2)
    assert summary["failed_hosts"] == {host: {"connection reset": 2}}
    assert f"{host}: 2 failed: connection reset" in format_summary(summary)
    stats = await _stats_json(tmp_path / "state")
    assert (stats["fetched"], stats["failed"]) == (0, 2)
    assert stats["failed_causes"] == {"connection reset": 2}


async def test_404_answers_are_fetched_with_errors_not_failed(tmp_path):
    async with fault_server() as srv:
        _, _, _, summary = await crawl(
            tmp_path, [srv.url("/status/404"), srv.url("/status/410")], fast_settings())
    assert (summary["fetched"], summary["fetched_with_errors"], summary["failed"]) == (2, 2, 0)
    assert summary["failed_hosts"] == {}
    text = format_summary(summary)
    assert "2 fetched (responses received, 2 with errors" in text and "0 failed" in text
    # learning ran and found nothing to say: no line of zeros
    assert summary["learn"]["rules"] == 0 and "learn (whole crawl)" not in text
    stats = await _stats_json(tmp_path / "state")
    assert (stats["fetched"], stats["fetched_with_errors"], stats["failed"]) == (2, 2, 0)


async def test_a_mixed_crawl_counts_responses_as_fetched_and_the_rest_by_cause(tmp_path):
    port = _closed_port()
    settings = fast_settings(crawl={"max_retries": 1, "retry_delay": 0.05},
                             fetch={"retries": 0, "read_timeout": 0.3, "total_timeout": 0.3,
                                    "max_bytes": 100_000})
    async with fault_server() as srv:
        urls = [srv.url("/html?links=0"), srv.url("/status/404"), srv.url("/flaky?key=b&fail=9"),
                srv.url("/hang"), srv.url("/big?mb=2"), f"http://127.0.0.1:{port}/"]
        _, _, counts, summary = await crawl(tmp_path, urls, settings)
        host = host_of(srv.base + "/")
    # responses: the page, the 404 and the 500 given up; none: a timeout, a refused
    # connection, and a body over the size limit
    assert (summary["fetched"], summary["fetched_with_errors"]) == (3, 2)
    assert summary["failed"] == 3
    assert summary["failed_causes"] == {"timeout": 1, "too large": 1,
                                        "connection refused": 1}
    assert summary["failed_hosts"] == {host: {"timeout": 1, "too large": 1},
                                       f"127.0.0.1:{port}": {"connection refused": 1}}
    assert summary["given_up"] == counts["failed"] == 3  # 500, timeout, refused: exit 3
    stats = state_stats(tmp_path / "state")
    for key in ("fetched", "fetched_with_errors", "failed", "failed_causes",
                "failed_hosts", "given_up"):
        assert stats[key] == summary[key], key
    assert f"{host}: 2 failed: 1 timeout, 1 too large" in format_stats(stats)


def _counts_from_pages(records: list[dict]) -> tuple[int, int, dict[str, dict[str, int]]]:
    """(fetched, failed, {host: {cause: n}}) from pages.jsonl, one line per done page."""
    fetched = failed = 0
    hosts: dict[str, Counter[str]] = {}
    for r in records:
        if r["error"] == "robots.txt" and r["status"] is None:
            continue  # skipped: disallowed
        cause = failure_cause(r["status"], r["error"])
        if cause is None:
            fetched += 1
        else:
            failed += 1
            hosts.setdefault(host_of(r["url"]), Counter())[cause] += 1
    return fetched, failed, {h: dict(c) for h, c in hosts.items()}


@pytest.mark.slow
async def test_counts_are_exact_after_kill9_and_resume(tmp_path, site):
    rng = random.Random(24)
    port = _closed_port()
    down = [f"http://127.0.0.1:{port}/{i}" for i in range(6)]
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        missing = [s.rstrip("/") + f"/no-such-page-{i}" for i, s in
                   enumerate(running.seeds * 2)]
        write_seeds(seeds, [*running.seeds, *missing, *down])
        total = len(running.site.reachable().fetched)
        args = ["crawl", str(seeds), "--state", str(state), "--config", str(config), "--quiet"]
        kills, args = await kill_at(args, state, sorted(rng.sample(range(10, total - 40), 4)),
                                    lambda proc, n: run_until(proc, running, n))
        assert kills >= 3
        done = await run_cli(*args)
        assert done.rc == 3, done.stderr  # the closed port's URLs were given up
    records = read_pages(state / "pages.jsonl")
    assert len({r["url"] for r in records}) == len(records)
    fetched, failed, hosts = _counts_from_pages(records)
    assert hosts[f"127.0.0.1:{port}"] == {"connection refused": len(down)}
    stats = await _stats_json(state)
    assert (stats["fetched"], stats["failed"], stats["failed_hosts"]) == (
        fetched, failed, hosts)
    assert stats["fetched_with_errors"] == sum(
        1 for r in records if r["error"] is not None and r["status"] is not None)
    assert stats["fetched"] + stats["failed"] + stats["skipped"] == len(records)


async def test_a_crawl_state_from_before_the_counts_is_counted_from_its_ledger(tmp_path):
    port = _closed_port()
    async with fault_server() as srv:
        await crawl(tmp_path, [srv.url("/status/404"), f"http://127.0.0.1:{port}/"],
                    fast_settings())
    with UrlSeen(tmp_path / "state") as seen:  # as an earlier version left it
        seen.ledger.journal._db.execute("DELETE FROM meta WHERE key = 'page_counts'")
        seen.ledger.journal._db.commit()
    stats = state_stats(tmp_path / "state")
    assert (stats["fetched"], stats["fetched_with_errors"], stats["failed"]) == (1, 1, 1)
    assert stats["failed_hosts"] == {UNKNOWN_HOST: {"connection refused": 1}}


def test_hosts_past_the_limit_are_counted_together_and_nothing_is_lost(tmp_path):
    with UrlSeen(tmp_path / "state") as seen:
        state = CrawlState(seen.records)
        pc = PageCounts(state)
        pc.add((f"http://h{i}.example/", State.FAILED, None, "timeout")
               for i in range(MAX_HOSTS + 10))
        pc.add([("http://h0.example/x", State.FAILED, None, "dns error"),
                ("http://h0.example/y", State.FETCHED, 200, None),
                ("http://h0.example/z", State.SKIPPED, None, "robots.txt")])
        seen.commit()
    with CrawlState.stopped(tmp_path / "state") as state:
        stored = state.page_counts()
        assert PageCounts(state).counts == stored  # read back as written
    assert stored is not None
    assert (stored["fetched"], stored["failed"]) == (1, MAX_HOSTS + 11)
    assert len(stored["hosts"]) == MAX_HOSTS + 1
    assert stored["hosts"][OTHER_HOSTS] == {"timeout": 10}
    assert stored["hosts"]["h0.example"] == {"timeout": 1, "dns error": 1}


def _line(text: str, start: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith(start)]
    assert len(lines) == 1, (start, text)
    return lines[0]


def _number(line: str, after: str) -> int:
    return int(re.search(rf"{re.escape(after)}(\d+)", line)[1])


async def test_a_resumes_summary_says_which_figures_count_this_run_and_which_the_crawl(
        tmp_path, small_site):
    """A resume printed '1645 fetched' (every run) beside '15184 links checked' (this run)
    with nothing saying which was which: each line now says what it counts, and the
    whole crawl's dedup figures are the two runs' added up."""
    seeds = write_seeds(tmp_path / "seeds.txt", small_site.seeds)
    config = tmp_path / "c.toml"
    config.write_text(config_toml(fast_settings()))
    state = str(tmp_path / "s")
    first = await run_cli("crawl", str(seeds), "--state", state, "--config", str(config),
                          "--max-pages", "20")
    assert first.rc == 0, first.stderr
    second = await run_cli("resume", state, "--max-pages", "0")
    assert second.rc == 0, second.stderr
    records = read_pages(tmp_path / "s" / "pages.jsonl")
    links = []
    for res in (first, second):
        pages = _line(res.stderr, "  pages (whole crawl): ")
        this_run = _line(res.stderr, "  dedup (this run): ")
        links.append(_number(this_run, "dedup (this run): "))
        _line(res.stderr, "  filter (whole crawl): ")
    taken = sum(1 for r in records if r["error"] != "robots.txt")  # every run's pages
    assert _number(pages, "crawl): ") + _number(pages, "), ") == taken  # fetched + failed
    whole = _line(second.stderr, "  dedup (whole crawl): ")
    assert _number(whole, "dedup (whole crawl): ") == sum(links) > links[1]
    stats = await run_cli("stats", state)
    assert _line(stats.stdout, "  dedup (whole crawl): ").startswith(whole + ",")
    assert _line(stats.stdout, "  pages (whole crawl): ").startswith(pages.split(" still")[0])
