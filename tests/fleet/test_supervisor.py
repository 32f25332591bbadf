"""The ``fleet`` supervisor when a worker dies, and a lone worker waiting for its
fleet (issue 11, item 17): real worker processes, a real redis-server."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.fleet.test_distributed import (
    SLOW_SPEC,
    check_exact,
    fleet_worker_dirs,
    make_fleet,
    owned_site,
    served_at_least,
    worker_settings,
)
from tests.support.helpers import config_toml, run_cli, start_cli, until, write_seeds
from tests.support.redisserver import require_redis_binary

pytestmark = pytest.mark.redis


def worker_pid(parent: int, worker_id: int) -> int | None:
    """The pid of the child of ``parent`` running as fleet worker ``worker_id``."""
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


async def read_until(stream: asyncio.StreamReader, text: str, seen: list[str],
                     timeout: float = 60.0) -> None:
    """Read lines (kept in ``seen``) until one contains ``text``."""
    async with asyncio.timeout(timeout):
        while True:
            raw = await stream.readline()
            assert raw, f"ended without {text!r}: {''.join(seen)}"
            seen.append(raw.decode())
            if text in seen[-1]:
                return


async def kill_worker(proc: asyncio.subprocess.Process, worker_id: int) -> None:
    async with asyncio.timeout(30):
        while (pid := worker_pid(proc.pid, worker_id)) is None:
            await asyncio.sleep(0.02)
    os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
async def test_a_killed_worker_is_resumed_bounded_then_the_fleet_stops_resumable(tmp_path):
    require_redis_binary()
    async with owned_site(SLOW_SPEC, 3) as running:
        seeds = write_seeds(tmp_path / "seeds.txt", running.seeds)
        config = tmp_path / "fleet.toml"
        config.write_text(config_toml(worker_settings().with_values(
            distributed={"max_restarts": 1})))
        root = tmp_path / "f"
        proc = await start_cli("fleet", str(seeds), "--state", str(root), "--workers", "3",
                               "--config", str(config))
        assert proc.stderr is not None
        err: list[str] = []
        await served_at_least(running, 40)
        pages = root / "worker-1" / "pages.jsonl"  # it has started crawling, not only starting
        await until(lambda: pages.exists() and pages.stat().st_size > 0, timeout=60,
                    what="worker 1 to record pages")
        await kill_worker(proc, 1)
        await read_until(proc.stderr, "resuming it (restart 1 of 1)", err)
        served = sum(running.total_pages().values())
        await served_at_least(running, served + 10)  # the fleet goes on
        await kill_worker(proc, 1)  # the resumed one
        await read_until(proc.stderr, "stopping the others", err)
        _, rest = await asyncio.wait_for(proc.communicate(), 60)
        text = "".join(err) + rest.decode()
        assert proc.returncode == 1, text
        assert f"continue with: bloomcrawl resume {root}" in text
        assert sum(running.total_pages().values()) < len(running.site.reachable().fetched)
        done = await run_cli("resume", str(root), "--quiet")
        assert done.rc == 0, done.stderr
        check_exact(fleet_worker_dirs(root), running, max_refetches=2 * 6)


async def test_a_lone_worker_says_it_waits_for_its_fleet(tmp_path, redis_server):
    async with owned_site(SLOW_SPEC, 2) as running:
        fleet = make_fleet(tmp_path, running, redis_server.url, 2)
        proc = await fleet.start(0)  # worker 1 never comes
        assert proc.stderr is not None
        err: list[str] = []
        await read_until(proc.stderr, "waiting for the fleet", err)
        assert "1 of 2 workers idle" in err[-1] and "bloomcrawl resume" in err[-1]
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 130
