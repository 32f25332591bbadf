"""A fleet run in tests: worker processes on a real Redis crawl a site the test serves,
are waited for (and stopped if they hang, showing what each said), and what they
crawled is checked to be exact, each page by the worker that owns its host.

Why child processes (``python -m crawler``), never in-process workers: kill -9, a
supervisor's restarts and a worker's exit status are only real in a process. Why
``finish`` rather than ``communicate``: a ``fleet`` runs its workers in their own
sessions, so killing it alone on a timeout would leave them crawling into the next
test; ``finish`` stops them and shows their stderr.

The assertions here are rewritten by pytest (registered in tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from crawler.config.settings import Settings
from crawler.core.outputs.output import read_pages
from crawler.demo.serve import RunningSite, serve_site
from crawler.demo.site import SiteSpec
from crawler.wire.monitor import FleetMonitor
from crawler.wire.owner import owner_of
from dedup import UrlSeen
from dedup.store.seen import host_of
from tests.support.helpers import (
    REPO,
    config_toml,
    fast_settings,
    start_cli,
    until,
    write_seeds,
)

CRAWL_ID = "test-fleet"
SLOW_SPEC = SiteSpec(hosts=8, pages=45, seed=32, delay=0.03)

# A graceful stop refetches nothing only if every page under way finishes within
# crawl.stop_grace (the rest are cut short, said on stderr, and fetched again on resume):
# a box loaded enough to stall a page for 10 s (the default) must not look like a lost page.
STOP_GRACE = 60.0


def worker_settings() -> Settings:
    """Fast settings for fleet workers: small snapshots often, short Redis polls."""
    return fast_settings(crawl={"concurrency": 6, "stop_grace": STOP_GRACE},
                         politeness={"per_host": 2, "delay": 0.0},
                         snapshot={"interval": 0.3, "every_new_urls": 50},
                         distributed={"poll_interval": 0.05, "receive_block": 0.2,
                                      "retry_for": 30.0})


@contextlib.asynccontextmanager
async def owned_site(spec: SiteSpec, workers: int) -> AsyncIterator[RunningSite]:
    """Serve ``spec`` on ports such that every worker owns at least one host."""
    for _ in range(50):
        async with serve_site(spec) as running:
            if {owner_of(host_of(o + "/"), workers) for o in running.origins} == \
                    set(range(workers)):
                yield running
                return
    raise RuntimeError("no port assignment gives every worker a host")


def fleet_files(tmp_path: Path, seeds: list[str], settings: Settings | None = None
                ) -> tuple[Path, Path]:
    """``tmp_path/seeds.txt`` and ``tmp_path/worker.toml`` (``settings``, default
    ``worker_settings()``): what a fleet is started with."""
    config = tmp_path / "worker.toml"
    config.write_text(config_toml(settings or worker_settings()))
    return write_seeds(tmp_path / "seeds.txt", seeds), config


async def start_fleet(seeds: Path, root: Path, workers: int, config: Path, *extra: str,
                      env: dict[str, str | None] | None = None, cwd: Path = REPO
                      ) -> asyncio.subprocess.Process:
    """``bloomcrawl fleet SEEDS --state ROOT --workers W --config CONFIG EXTRA...``."""
    return await start_cli("fleet", str(seeds), "--state", str(root), "--workers",
                           str(workers), "--config", str(config), *extra, env=env, cwd=cwd)


@dataclass
class Fleet:
    """W workers started one by one (``crawl --redis``) on a Redis the test runs."""

    root: Path
    seeds: Path
    config: Path
    url: str
    workers: int

    def dir(self, i: int) -> Path:
        return self.root / "fleet" / f"worker-{i}"

    @property
    def dirs(self) -> list[Path]:
        return [self.dir(i) for i in range(self.workers)]

    async def joined(self) -> None:
        """Wait until every worker has joined (its state dir is made after): on a loaded
        machine one worker can serve the pages a test waits for before another has started,
        and a worker stopped before it joined has nothing to resume."""
        await until(lambda: all(d.exists() for d in self.dirs), timeout=60,
                    what="every worker to join")

    async def start(self, i: int, *extra: str, env: dict[str, str | None] | None = None
                    ) -> asyncio.subprocess.Process:
        return await start_cli(
            "crawl", str(self.seeds), "--state", str(self.dir(i)), "--redis", self.url,
            "--workers", str(self.workers), "--worker-id", str(i), "--crawl-id", CRAWL_ID,
            "--config", str(self.config), "--quiet", *extra, env=env)

    async def resume(self, i: int, env: dict[str, str | None] | None = None
                     ) -> asyncio.subprocess.Process:
        return await start_cli("resume", str(self.dir(i)), "--redis", self.url, "--quiet",
                               env=env)


def make_fleet(tmp_path: Path, running: RunningSite, url: str, workers: int) -> Fleet:
    seeds, config = fleet_files(tmp_path, running.seeds)
    return Fleet(tmp_path, seeds, config, url, workers)


def fleet_worker_dirs(root: Path) -> list[Path]:
    """The worker dirs of fleet dir ``root`` (as many as its fleet.json says)."""
    n = json.loads((root / "fleet.json").read_text())["workers"]
    return [root / f"worker-{i}" for i in range(n)]


# -- waiting for the children --------------------------------------------------------------


async def finish(procs: list[asyncio.subprocess.Process], timeout: float = 180.0, *,
                 heard: list[list[bytes]] | None = None) -> list[tuple[int, str]]:
    """Each child's status and stderr once all have exited. On timeout they are stopped
    (a second SIGINT makes a ``fleet`` stop its workers at once, then SIGKILL), so that
    a test that fails leaves no worker crawling into the next one, and the failure
    shows what each had said. ``heard``: one empty list per child, which receives
    its stderr as it comes (for a test that waits until a child has said something)."""
    errs: list[list[bytes]] = heard if heard is not None else [[] for _ in procs]

    async def one(p: asyncio.subprocess.Process, err: list[bytes]) -> None:
        assert p.stdout is not None and p.stderr is not None
        async def read(stream: asyncio.StreamReader, into: list[bytes]) -> None:
            while chunk := await stream.read(65536):
                into.append(chunk)
        await asyncio.gather(read(p.stdout, []), read(p.stderr, err), p.wait())

    readers = [asyncio.create_task(one(p, e)) for p, e in zip(procs, errs, strict=True)]
    done, pending = await asyncio.wait(readers, timeout=timeout)
    if pending:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGINT)
        _, still = await asyncio.wait(pending, timeout=10)
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
        if still:
            await asyncio.wait(still, timeout=10)
        late = {readers.index(t) for t in pending}
        said = "\n".join(f"-- child {i} ({'ran on' if i in late else 'exited'}):\n"
                         + b"".join(e).decode(errors="replace")[-2000:]
                         for i, e in enumerate(errs))
        raise AssertionError(f"still running after {timeout:g} s:\n{said}")
    for t in done:
        t.result()
    return [(p.returncode or 0, b"".join(e).decode()) for p, e in zip(procs, errs, strict=True)]


async def ctrl_c(proc: asyncio.subprocess.Process) -> str:
    """Stop a running ``fleet`` (or worker) as Ctrl-C does; its stderr. It must exit
    as stopped by SIGINT (resumable), within what a graceful stop may take."""
    assert proc.returncode is None
    proc.send_signal(signal.SIGINT)
    ((rc, err),) = await finish([proc], timeout=STOP_GRACE + 60)
    assert rc == 128 + signal.SIGINT, err
    return err


async def stderr_until(proc: asyncio.subprocess.Process, text: str, *,
                       seen: list[str] | None = None, timeout: float = 60.0) -> str:
    """A running child's stderr read up to the line containing ``text`` (the text read,
    its lines also added to ``seen``): to wait for what a child logs, where ``finish``
    later reads the rest."""
    assert proc.stderr is not None
    lines = [] if seen is None else seen
    first = len(lines)
    async with asyncio.timeout(timeout):
        while True:
            line = (await proc.stderr.readline()).decode()
            assert line, f"the child ended without logging {text!r}: {''.join(lines)}"
            lines.append(line)
            if text in line:
                return "".join(lines[first:])


async def served_at_least(running: RunningSite, n: int, timeout: float = 120.0) -> None:
    """Wait until the site has served ``n`` pages (the fleet is under way)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while sum(running.total_pages().values()) < n:
        assert loop.time() < deadline, "the fleet made no progress"
        await asyncio.sleep(0.005)


def worker_pid(parent: int, worker_id: int) -> int | None:
    """The pid of the child of ``parent`` (a ``fleet``) running as worker ``worker_id``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"--worker-id" in argv and \
                argv[argv.index(b"--worker-id") + 1] == str(worker_id).encode():
            return int(entry.name)
        if ppid == parent and b"resume" in argv and \
                any(a.endswith(f"worker-{worker_id}".encode()) for a in argv):
            return int(entry.name)
    return None


async def kill_worker(proc: asyncio.subprocess.Process, worker_id: int) -> None:
    """kill -9 worker ``worker_id`` of the ``fleet`` ``proc`` (once it runs)."""
    async with asyncio.timeout(30):
        while (pid := worker_pid(proc.pid, worker_id)) is None:
            await asyncio.sleep(0.02)
    os.kill(pid, signal.SIGKILL)


async def fleet_status(url: str, workers: int) -> dict[str, int]:
    """The fleet's counters in Redis (``FleetMonitor.fleet_status``)."""
    monitor = FleetMonitor(url, crawl_id=CRAWL_ID, workers=workers)
    await monitor.connect()
    try:
        return await monitor.fleet_status()
    finally:
        await monitor.close()


# -- what they crawled -----------------------------------------------------------------------


def check_exact(dirs: list[Path], running: RunningSite, *, max_refetches: int = 0) -> Counter:
    """The union of the workers' output is the reachable set; each page by its owner."""
    workers = len(dirs)
    want = running.site.reachable()
    keys: Counter[str] = Counter()
    for i, d in enumerate(dirs):
        with UrlSeen(d, readonly=True) as seen:
            assert seen.ledger.counts()["queued"] == 0, d
            for row in seen.ledger.rows():  # its ledger holds its own hosts only
                # (a done row's text may be compacted away: no host to judge it by)
                assert row[2] is None or owner_of(row[2], workers) == i, row[1]
            for r in read_pages(d / "pages.jsonl"):
                assert owner_of(host_of(r["url"]), workers) == i, r["url"]
                keys[seen.canonicalizer.resolve(r["url"])[1]] += 1
    assert set(keys) == want.fetched | want.robots_blocked  # nothing lost, nothing extra
    assert sum(n - 1 for n in keys.values()) <= max_refetches
    server = running.total_pages()
    assert set(server) == set(want.fetched)
    assert sum(n - 1 for n in server.values()) <= max_refetches, server.most_common(3)
    return keys
