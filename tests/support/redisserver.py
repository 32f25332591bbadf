"""A real ``redis-server`` for tests, on a free 127.0.0.1 port in a temp dir.

Use from a test module with ``pytest_plugins = ["tests.support.redisserver"]`` (or from
the root conftest). Fixtures:

- ``redis_server``: a running, non-persistent server (``RedisServer``); its
  ``.url`` is ``redis://127.0.0.1:PORT/0``.
- ``redis_factory``: ``redis_factory(persistent=False, password=None)`` starts
  more servers (all stopped at teardown). ``persistent=True`` turns on an
  append-only file with fsync on every write, so ``stop()`` + ``start()`` on the
  same port and dir comes back with the data (the reconnect tests).

Without a ``redis-server`` binary the tests are skipped, unless
``BLOOMCRAWL_REQUIRE_REDIS=1`` (CI), where they fail with a clear message.

PYTEST_DONT_REWRITE (no asserts here; test modules import it before pytest
registers it as a plugin, which would otherwise warn).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crawler.fleet.localredis import free_port, ping, redis_binary

START_TIMEOUT = 10.0


class RedisServer:
    """One redis-server process; ``stop()``/``start()`` keep the port and dir."""

    def __init__(self, workdir: Path, *, persistent: bool = False,
                 password: str | None = None, binary: str | None = None) -> None:
        self.binary = binary or redis_binary()
        if self.binary is None:
            raise FileNotFoundError("redis-server not found")
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.persistent = persistent
        self.password = password
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._started = False  # once started, a restart must come back on the same port

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password is not None else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def _args(self) -> list[str]:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--dir", str(self.dir), "--daemonize", "no",
                "--logfile", str(self.dir / "redis.log"), "--protected-mode", "no"]
        if self.persistent:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        if self.password is not None:
            args += ["--requirepass", self.password]
        return args

    def start(self) -> RedisServer:
        """Start (or restart on the same port); returns once PING answers."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        for _attempt in range(5):
            if not self.port:
                self.port = free_port()
            self.proc = subprocess.Popen(self._args(), stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline and self.proc.poll() is None:
                if ping(self.port, self.password):
                    self._started = True
                    return self
                time.sleep(0.02)
            self.stop(force=True)
            if self._started:
                break
            self.port = 0  # lost the race for the free port: pick another
        log = (self.dir / "redis.log")
        tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
        raise RuntimeError(f"redis-server did not start on 127.0.0.1:{self.port}: {tail}")

    def stop(self, *, force: bool = False) -> None:
        """SIGTERM (a clean shutdown: the AOF is flushed) or SIGKILL; waits for exit."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if force else signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> RedisServer:
        self.stop()
        return self.start()


def require_redis_binary() -> str:
    binary = redis_binary()
    if binary is None:
        msg = "redis-server is not installed (apt-get install redis-server)"
        if os.environ.get("BLOOMCRAWL_REQUIRE_REDIS") == "1":
            pytest.fail(f"{msg}; BLOOMCRAWL_REQUIRE_REDIS=1 requires it", pytrace=False)
        pytest.skip(msg)
    return binary


@pytest.fixture
def redis_factory(tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[Callable[..., RedisServer]]:
    binary = require_redis_binary()
    servers: list[RedisServer] = []

    def make(*, persistent: bool = False, password: str | None = None) -> RedisServer:
        server = RedisServer(tmp_path_factory.mktemp("redis"), persistent=persistent,
                             password=password, binary=binary)
        servers.append(server)
        return server.start()

    try:
        yield make
    finally:
        for server in servers:
            server.stop(force=True)


@pytest.fixture
def redis_server(redis_factory: Callable[..., RedisServer]) -> RedisServer:
    return redis_factory()
