"""Exit statuses (``crawler.config.exits``, README table) and the abort paths that end a
crawl with an error: each status from a real ``bloomcrawl`` process."""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap

import pytest

import crawler.core.run.engine
from crawler.config.exits import exit_status
from crawler.core.outputs.output import read_pages
from crawler.core.run.engine import Engine
from crawler.core.state.state import create_crawl, open_crawl
from tests.crawler.test_resume import final_check, run_until, setup_crawl
from tests.support.faultserver import fault_server
from tests.support.helpers import REPO, cli_env, config_toml, fast_settings, run_cli, write_seeds


def test_exit_status_of_a_summary() -> None:
    assert exit_status({"outcome": "finished", "failed": 0}) == 0
    assert exit_status({"outcome": "max pages reached", "failed": 0}) == 0
    assert exit_status({"outcome": "finished", "failed": 2}) == 3
    assert exit_status({"outcome": "stopped by SIGINT", "failed": 2}) == 130
    assert exit_status({"outcome": "stopped by SIGTERM", "failed": 0}) == 143
    assert exit_status({"outcome": "stopped by fleet request", "failed": 0}) == 130


async def test_a_crawl_that_gave_urls_up_exits_3_and_says_how_many(tmp_path, small_site):
    config = tmp_path / "c.toml"
    config.write_text(config_toml(fast_settings(
        crawl={"max_retries": 1, "retry_delay": 0.05},
        fetch={"retries": 0, "read_timeout": 0.3, "total_timeout": 0.3})))
    async with fault_server() as srv:
        seeds = write_seeds(tmp_path / "seeds.txt", [*small_site.seeds, srv.url("/hang")])
        done = await run_cli("crawl", str(seeds), "--state", str(tmp_path / "s"),
                             "--config", str(config))
        assert done.rc == 3, done.stderr
        assert "1 failed (1 timeout), 1 given up (retries spent" in done.stderr
        assert f"{srv.base.split('//')[1]}: 1 failed: timeout" in done.stderr
        # every fetch failed: 3 as well, never 0
        seeds = write_seeds(tmp_path / "bad.txt", [srv.url("/hang"), srv.url("/status/503")])
        done = await run_cli("crawl", str(seeds), "--state", str(tmp_path / "t"),
                             "--config", str(config), "--quiet")
        assert done.rc == 3, done.stderr
    stats = await run_cli("stats", str(tmp_path / "t"))
    # the 503 is an answer (fetched, with an error), the hang none; both were given up
    assert stats.rc == 0 and "1 fetched (responses received, 1 with errors" in stats.stdout
    assert "1 failed (1 timeout), 2 given up (retries spent" in stats.stdout


async def test_a_finished_crawl_exits_0_and_a_ctrl_c_130(tmp_path, site):
    from tests.crawler.test_resume import SPEC
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", "crawl", str(seeds), "--state", str(state),
            "--config", str(config), "--quiet", cwd=REPO, env=cli_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        await run_until(proc, running, 30)
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 130, err
        done = await run_cli("resume", str(state), "--quiet")
        assert done.rc == 0, done.stderr
    final_check(tmp_path, running, max_refetches=0)


# -- abort paths: a disk error in the group commit, an exception in a worker -----------------

_DISK_FULL = textwrap.dedent("""
    import errno, sys
    import crawler.core.outputs.output as output
    real = output.PageLog.append
    calls = [0]
    async def append(self, records):
        calls[0] += 1
        if calls[0] >= 4:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        await real(self, records)
    output.PageLog.append = append
    from crawler.cli.main import main
    sys.exit(main(sys.argv[1:]))
""")


async def test_a_disk_error_in_the_group_commit_exits_1_and_the_state_resumes(tmp_path, site):
    from tests.crawler.test_resume import SPEC
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _DISK_FULL, "crawl", str(seeds), "--state", str(state),
            "--config", str(config), "--quiet", cwd=REPO, env=cli_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        text = err.decode()
        assert proc.returncode == 1, text
        assert text.strip().splitlines()[-1] == \
            f"bloomcrawl: error: {state / 'pages.jsonl'}: No space left on device"
        assert "Traceback" not in text
        before = len(read_pages(state / "pages.jsonl"))
        done = await run_cli("resume", str(state), "--quiet")
        assert done.rc == 0, done.stderr
        assert len(read_pages(state / "pages.jsonl")) > before
    # the pages whose lines were not written were not marked either: fetched again
    final_check(tmp_path, running, max_refetches=8 * 2)


async def test_an_exception_in_a_worker_aborts_the_crawl_and_the_state_resumes(
        tmp_path, site, monkeypatch):
    from tests.crawler.test_resume import SPEC
    real = crawler.core.run.engine.extract_page
    calls = []

    def broken(body, url, **kw):
        calls.append(url)
        if len(calls) == 5:
            raise RuntimeError("parser bug")
        return real(body, url, **kw)

    async with site(SPEC) as running:
        seeds, _, state = setup_crawl(tmp_path, running)
        settings = fast_settings(crawl={"concurrency": 4})
        seen, scope, _ = create_crawl(state, settings, seeds)
        monkeypatch.setattr(crawler.core.run.engine, "extract_page", broken)
        try:
            with pytest.raises(RuntimeError, match="parser bug"):
                await Engine(seen, settings, scope).run()
            assert seen.ledger.counts()["queued"] > 0
        finally:
            seen.close()
        monkeypatch.setattr(crawler.core.run.engine, "extract_page", real)
        seen, settings, scope = open_crawl(state)
        try:
            summary = await Engine(seen, settings, scope).run()
        finally:
            seen.close()
        assert summary["outcome"] == "finished"
    final_check(tmp_path, running, max_refetches=4)
