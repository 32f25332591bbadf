"""A fleet's own redis-server (``crawler.fleet.localredis``): started in a relative
directory as in an absolute one, and when it cannot start, the error is what that
redis-server said, never an older run's log (issue 36, item 6). Real redis-server."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.demo.site import SiteSpec
from crawler.fleet.identity import FleetError
from crawler.fleet.localredis import LocalRedis, ping
from tests.support.fleetrun import check_exact, fleet_files, owned_site, start_fleet
from tests.support.helpers import run_cli
from tests.support.redisserver import require_redis_binary

pytestmark = pytest.mark.redis

LOG_FILE = "redis.log"  # in the data dir (crawler.fleet.launch: DIR/redis/redis.log)


@pytest.fixture(autouse=True)
def _redis_binary() -> None:
    require_redis_binary()


def test_a_relative_data_dir_starts_and_starts_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # the second start finds the first one's log and data
        server = LocalRedis(Path("f1/redis")).start()
        try:
            assert ping(server.port)
            assert server.dir == tmp_path / "f1" / "redis"
        finally:
            server.stop()
    assert (tmp_path / "f1" / "redis" / LOG_FILE).read_text().count("Ready to accept") == 2


def test_a_failed_start_says_what_redis_said_on_its_stderr(tmp_path):
    """A log file it cannot open: redis-server says so on stderr, before any log."""
    (tmp_path / "r" / LOG_FILE).mkdir(parents=True)
    with pytest.raises(FleetError) as e:
        LocalRedis(tmp_path / "r").start()
    assert str(e.value).startswith(f"could not start redis-server in {tmp_path / 'r'}: ")
    assert "Can't open the log file" in str(e.value)


def test_a_failed_start_says_what_redis_logged_this_time_not_before(tmp_path):
    """A damaged append-only file: the reason is in the lines this start logged; the
    log's older lines (a run that went well) are not shown."""
    d = tmp_path / "r"
    LocalRedis(d).start().stop()
    old = (d / LOG_FILE).read_text()
    assert "Ready to accept connections" in old
    (manifest,) = (d / "appendonlydir").glob("*.manifest")
    manifest.write_text("not a manifest\n")
    with pytest.raises(FleetError) as e:
        LocalRedis(d).start()
    text = str(e.value)
    assert "Invalid AOF manifest file format" in text and "not a manifest" in text
    assert "Ready to accept" not in text and "bye" not in text
    assert len(text.splitlines()) == 1


async def test_fleet_and_resume_with_a_relative_state_dir(tmp_path):
    """``fleet --state f1`` and ``resume f1`` from the directory holding f1 (the
    README's own example): the fleet's redis-server starts both times."""
    async with owned_site(SiteSpec(hosts=4, pages=25, seed=3), 2) as running:
        seeds, config = fleet_files(tmp_path, running.seeds)
        proc = await start_fleet(seeds, Path("f1"), 2, config, cwd=tmp_path)
        _, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        assert "bloomcrawl fleet: finished" in err.decode()
        dirs = [tmp_path / "f1" / f"worker-{i}" for i in range(2)]
        check_exact(dirs, running)
        served = sum(running.total_pages().values())
        again = await run_cli("resume", "f1", cwd=tmp_path)
        assert again.rc == 0, again.stderr
        assert "bloomcrawl fleet: finished" in again.stderr and "0 pages this run" in \
            again.stderr
        assert sum(running.total_pages().values()) == served  # nothing fetched again
