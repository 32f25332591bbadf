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
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from crawler.fleet.identity import FleetError

LOG_FILE = "redis.log"
_SAID_MAX = 400  # characters of redis-server's own words in an error message
# a line of its log: "12345:M 28 Nov 2026 19:46:46.440 # Server initialized"
_LOG_LINE = re.compile(r"^\d+:[A-Z] \d+ \w+ \d+ [\d:.]+ ([.\-*#]) (.*)$")

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
        # absolute: redis-server changes into --dir before it opens --logfile
        self.dir = Path(data_dir).absolute()
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> LocalRedis:
        """Start it; returns once PING answers. A port another process took first is
        tried again on another; any other failure raises FleetError with what
        redis-server said on this attempt (its stderr, or the lines it added to its
        log), never an older run's log."""
        self.dir.mkdir(parents=True, exist_ok=True)
        log = self.dir / LOG_FILE
        said = ""
        for _attempt in range(5):
            self.port = free_port()
            logged_from = _size(log)
            with tempfile.TemporaryFile(dir=self.dir) as early:  # before its log is open
                self.proc = subprocess.Popen(
                    [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                     "--dir", str(self.dir), "--save", "", "--appendonly", "yes",
                     "--appendfsync", "everysec", "--daemonize", "no",
                     "--logfile", str(log)],
                    stdout=early, stderr=early, start_new_session=True)
                deadline = time.monotonic() + self.START_TIMEOUT
                while time.monotonic() < deadline and self.proc.poll() is None:
                    if ping(self.port):
                        return self
                    time.sleep(0.02)
                running = self.proc.poll() is None
                self.stop()
                early.seek(0)
                said = _said(early.read(), _read_from(log, logged_from))
            if running:
                said = (f"it did not answer on 127.0.0.1:{self.port} within "
                        f"{self.START_TIMEOUT:g} s" + (f" ({said})" if said else ""))
                break
            if "already in use" not in said:  # not a port another process took first
                break
        raise FleetError(f"could not start redis-server in {self.dir}"
                         + (f": {said}" if said else " (it said nothing)"))

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


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> bytes:
    """What was appended to ``path`` after ``offset`` (b"" if it is gone or shorter)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read()
    except OSError:
        return b""


def _said(early: bytes, logged: bytes) -> str:
    """What a redis-server that failed said, in one line: its stderr (a bad option, a
    log file it could not open) and its last warnings logged (a port in use, a damaged
    append-only file), without their ``PID:ROLE DATE TIME #`` prefix."""
    parts = [ln.strip(" *") for ln in early.decode(errors="replace").splitlines()
             if ln.strip(" *")]
    lines = [m.groups() if (m := _LOG_LINE.match(ln)) else ("#", ln.strip())
             for ln in logged.decode(errors="replace").splitlines() if ln.strip()]
    warnings = [text for level, text in lines if level == "#"] or [t for _, t in lines]
    parts += warnings[-2:]
    said = "; ".join(parts)
    return said if len(said) <= _SAID_MAX else "..." + said[-_SAID_MAX:]
