"""Random write failures (issue 36, item 9), injected into real crawls with libfiu
(``fiu-run -x -c "enable_random name=posix/io/rw/write,probability=P"``: every
``write()`` of the process may fail, with a random errno).

On uvloop such a crawl died by SIGABRT with no message (libuv aborts when the
eventfd write that wakes its loop from a thread fails); on asyncio it stopped
with "Invalid argument", naming no file. Now, on either loop, it ends with exit
status 0 (no write failed) or 1 and ONE line naming the step and the file, and a
resume without faults finishes the crawl exactly: every reachable URL one line,
every response one WARC record, the pages' links_new adding up to the admitted URLs.

Faults from the process's start, and faults turned on (``fiu-ctrl``) once the crawl
is under way. On uvloop only the latter: libuv writes once to a pipe of its own
when the process creates its first loop (``uv__signal_global_reinit``) and aborts
if that write fails; no loop of uvloop's can be made without it (1 crawl in 50 at
a failure rate of 0.02 died so, before anything was written).
"""

from __future__ import annotations

import asyncio
import errno
import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from crawler.core.outputs.output import PageLog
from crawler.core.run.crawl import Crawler
from crawler.demo.site import SiteSpec
from dedup import UrlSeen, is_state_dir
from tests.support.helpers import (
    REPO,
    cli_env,
    config_toml,
    fast_settings,
    run_cli,
    until,
    write_seeds,
)

FIU_RUN, FIU_CTRL = shutil.which("fiu-run"), shutil.which("fiu-ctrl")
needs_fiu = pytest.mark.skipif(
    FIU_RUN is None or FIU_CTRL is None, reason="fiu-run and fiu-ctrl (libfiu; Debian's "
    "fiu-utils) are not installed: the write-failure crawls cannot run")

_spec = importlib.util.spec_from_file_location("reliability_checks",
                                               REPO / "bench" / "reliability_checks.py")
checks = importlib.util.module_from_spec(_spec)
sys.modules["reliability_checks"] = checks
_spec.loader.exec_module(checks)

SPEC = SiteSpec(hosts=2, pages=120, seed=41, delay=0.02)  # a crawl of a second or two
UVLOOP = pytest.mark.skipif(importlib.util.find_spec("uvloop") is None,
                            reason="uvloop is not installed")
FAULTS = "enable_random name=posix/io/rw/write,probability={}"


async def _faulty_crawl(tmp_path: Path, seeds: Path, config: Path, loop: str,
                        probability: float, running, *, from_start: bool) -> tuple[int, str]:
    """The crawl under fiu-run: faults from its start, or turned on once the site has
    served 10 pages."""
    state, warc = tmp_path / "s", tmp_path / "warc" / "crawl.warc.gz"
    control = tmp_path / "fiu-ctrl"
    start = ["-c", FAULTS.format(probability)] if from_start else ["-f", str(control)]
    proc = await asyncio.create_subprocess_exec(
        FIU_RUN, "-x", *start,
        sys.executable, "-m", "crawler", "crawl", str(seeds), "--state", str(state),
        "--config", str(config), "--warc", str(warc), "--loop", loop, "--quiet",
        cwd=REPO, env=cli_env(), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    done = asyncio.ensure_future(proc.communicate())
    if not from_start:  # fiu-run execs the crawl: the same pid
        await until(lambda: sum(running.total_pages().values()) >= 10 or done.done(),
                    timeout=60, what="the crawl under way")
        ctl = await asyncio.create_subprocess_exec(
            FIU_CTRL, "-f", str(control), "-c", FAULTS.format(probability), str(proc.pid))
        await asyncio.wait_for(ctl.wait(), 30)
    _, err = await asyncio.wait_for(done, 120)
    return proc.returncode, err.decode(errors="replace")


@needs_fiu
@pytest.mark.parametrize(("loop", "from_start"), [
    ("asyncio", True), ("asyncio", False), pytest.param("uvloop", False, marks=UVLOOP)])
@pytest.mark.parametrize("probability", [0.02, 0.005])
async def test_a_failing_write_stops_the_crawl_with_one_named_line_and_resume_is_exact(
        tmp_path, site, loop, from_start, probability):
    async with site(SPEC) as running:
        seeds = write_seeds(tmp_path / "seeds.txt", running.seeds)
        config = tmp_path / "crawl.toml"
        # retries as by default: on uvloop a failed socket write fails that request
        # (retried), and the round an abort cut short counts as a try (retry.py)
        config.write_text(config_toml(fast_settings(crawl={"max_retries": 5})))
        rc, err = await _faulty_crawl(tmp_path, seeds, config, loop, probability, running,
                                      from_start=from_start)
        assert rc in (0, 1), f"exit status {rc} (-6: SIGABRT); stderr: {err!r}"
        if rc == 0:
            assert err == ""
        else:  # one line, naming the step and a file of this crawl
            assert re.fullmatch(r"bloomcrawl: error: .+\n", err), err
            assert str(tmp_path) in err, err
        state = tmp_path / "s"
        if is_state_dir(state):  # without faults now
            again = await run_cli("resume", str(state), "--quiet")
        else:  # it failed while creating the state dir, which it left as it was
            assert not state.exists() or not any(state.iterdir())
            again = await run_cli("crawl", str(seeds), "--state", str(state), "--config",
                                  str(config), "--warc", str(tmp_path / "warc" / "crawl.warc.gz"),
                                  "--quiet")
        assert again.rc == 0, again.stderr
        want = running.site.reachable()
    pages = checks.check_pages(state / "pages.jsonl")
    assert pages.torn_lines == 0
    assert set(pages.urls) == {checks.canonicalize(u) for u in want.fetched | want.robots_blocked}
    assert checks.duplicates(pages.urls) == 0
    with UrlSeen(state, readonly=True) as seen:
        admitted = len(seen)
    assert pages.links_new + len(running.seeds) == admitted  # nothing counted twice or lost
    warc = checks.check_warc(tmp_path / "warc")
    assert (warc.torn, checks.duplicates(warc.targets), warc.unpaired) == (0, 0, 0)
    assert warc.missing(pages.answered) == []


async def test_a_crawl_a_failed_write_stops_commits_nothing_of_the_group_it_was_in(
        tmp_path, site, monkeypatch):
    """The group commit admits a group's links in the ledger's open transaction, then
    writes its pages.jsonl lines: when that write fails, closing the state dir
    committed the links without their pages, so the resume refetched those pages and
    found their links "seen" (links_new no longer added up to the admitted URLs). Now
    what a failed crawl had not committed is discarded, as a kill -9 would."""
    settings = fast_settings(crawl={"concurrency": 4})
    async with site(SPEC) as running:
        groups = 0
        append = PageLog.append

        async def fifth_fails(self: PageLog, records: list) -> None:
            nonlocal groups
            groups += 1
            if groups == 5:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            await append(self, records)

        state = tmp_path / "s"
        with monkeypatch.context() as m:
            m.setattr(PageLog, "append", fifth_fails)
            with pytest.raises(OSError, match="Input/output error"):
                await Crawler(running.seeds, state=state, config=settings.to_dict()).run()
        await Crawler(state=state).run()
        want = running.site.reachable()
    pages = checks.check_pages(state / "pages.jsonl")
    assert set(pages.urls) == {checks.canonicalize(u) for u in want.fetched | want.robots_blocked}
    assert checks.duplicates(pages.urls) == 0
    with UrlSeen(state, readonly=True) as seen:
        assert pages.links_new + len(running.seeds) == len(seen)


def test_a_line_for_stderr_is_written_once_though_a_write_fails(tmp_path, monkeypatch):
    """stderr's text layer may write straight to the file (unbuffered), where a failed
    write was lost with the one line saying what went wrong (exit 1, empty stderr, 1 in
    7 crawls at a write failure rate of 0.3): now the line goes to the descriptor
    again, and once."""
    from types import SimpleNamespace

    from crawler.core.run import progress

    calls = []

    def flaky(fd: int, data: bytes) -> int:
        calls.append(bytes(data))
        if len(calls) in (1, 2):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return os.write(fd, data[:4])  # and a short write

    path = tmp_path / "stderr"
    with open(path, "w", buffering=1) as stream:
        stream.write("earlier\n")
        monkeypatch.setattr(progress, "os", SimpleNamespace(write=flaky))
        assert progress.write_text(stream, "bloomcrawl: error: disk full\n")
        monkeypatch.undo()
    assert path.read_text() == "earlier\nbloomcrawl: error: disk full\n"
    assert len(calls) > 3  # failed twice, then written in short pieces
