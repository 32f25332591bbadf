"""A local, persistent redis-server for a fleet started without ``--redis``.


Why a persistent local Redis: a stopped fleet still has links in its streams
(forwarded but not yet committed by their owner); they must survive until
``resume``. The AOF is fsynced every second and flushed on the clean shutdown
the supervisor always does. A Redis that lost the fleet's data anyway gets a new
fleet epoch, and one that lost its last second of writes counts fewer links sent
by a running worker than it sent: either way the workers re-send their outboxes
(``crawler.wire.transport``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the Redis client is imported only by commands that use it
    pass

from crawler.fleet.identity import FleetError

# -- a local redis-server ----------------------------------------------------------------------


def redis_binary() -> str | None:
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)


def free_port() -> int:
    """A 127.0.0.1 port nothing listens on right now (a start may still lose the race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(port: int, password: str | None = None) -> bool:
    """Whether a redis-server on 127.0.0.1:``port`` answers: AUTH (if any), then PING,
    in RESP without a client library (so it also works before redis-py could connect)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            cmd = b""
            if password is not None:
                pw = password.encode()
                cmd += b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(pw), pw)
            s.sendall(cmd + b"*1\r\n$4\r\nPING\r\n")
            buf = b""
            deadline = time.monotonic() + 0.5
            while b"PONG" not in buf and time.monotonic() < deadline:
                chunk = s.recv(256)
                if not chunk:
                    break
                buf += chunk
            return b"+PONG" in buf
    except OSError:
        return False


class LocalRedis:
    """A ``redis-server`` on a free 127.0.0.1 port, persisting to ``data_dir`` (AOF)."""

    START_TIMEOUT = 10.0

    def __init__(self, data_dir: Path) -> None:
        binary = redis_binary()
        if binary is None:
            raise FleetError("no --redis URL given and redis-server is not installed "
                             "(install it, or point the fleet at a Redis with --redis URL)")
        self.binary = binary
        self.dir = data_dir
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> LocalRedis:
        self.dir.mkdir(parents=True, exist_ok=True)
        for _attempt in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                 "--dir", str(self.dir), "--save", "", "--appendonly", "yes",
                 "--appendfsync", "everysec", "--daemonize", "no",
                 "--logfile", str(self.dir / "redis.log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            deadline = time.monotonic() + self.START_TIMEOUT
            while time.monotonic() < deadline and self.proc.poll() is None:
                if ping(self.port):
                    return self
                time.sleep(0.02)
            self.stop()  # lost the race for the port, or it failed: try another
        log = self.dir / "redis.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        raise FleetError(f"could not start redis-server in {self.dir}"
                         + (f": {tail[0]}" if tail else ""))

    def stop(self) -> None:
        """SIGTERM: a clean shutdown that flushes the append-only file."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None


