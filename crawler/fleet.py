"""A fleet of crawl workers: their identity, a local supervisor, and resizing.

A fleet is W worker processes sharing one crawl id and one Redis; worker ``I``
owns the hosts with ``owner_of(host, W) == I`` (``crawler.owner``) and keeps its
own state directory. This module holds what sits *around* the engine:

- the identity a worker stores in its ledger (``FLEET_KEY`` meta: crawl id, W,
  I, the Redis URL without its password) and the fields every worker of a fleet
  must agree on (``fleet_geometry``: filter geometry, canonicalization rules,
  scope), which Redis checks when a worker joins;
- ``bloomcrawl fleet``: a supervisor that starts W ``crawl``/``resume`` child
  processes in ``DIR/worker-I`` (and a local, persistent ``redis-server`` when
  no ``--redis`` is given), shows one combined progress line, and passes a
  Ctrl-C on to every worker;
- ``bloomcrawl resize``: a fleet dir of W workers into one of W/2 or 2W —
  state dirs (``dedup.resize``), pages.jsonl files, per-host counts, identities,
  and the un-acknowledged links in Redis (``transport.reshard``).

Fleet directory layout (``fleet`` and ``resize`` write it; ``resume DIR`` reads it)::

    DIR/fleet.json     {"crawl_id", "workers", "redis": "local" | URL without password,
                        "redis_auth": bool}
    DIR/worker-I/      worker I's state directory
    DIR/redis/         the local redis-server's append-only files (when "local")

Why a persistent local Redis: a stopped fleet still has links in its streams
(forwarded but not yet committed by their owner); they must survive until
``resume``. The AOF is fsynced every second and flushed on the clean shutdown
the supervisor always does; losing Redis data is detected by the workers
(``TransportError``), never silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.engine import FLEET_KEY, HOST_COUNTS_FILE, TOTALS_KEY
from crawler.output import PAGES_FILE, read_json, write_json_atomic
from crawler.owner import owner_function, owner_of
from crawler.scope import Scope, authority_of
from crawler.settings import Settings
from dedup import CanonRules, Ledger
from dedup.atomic import atomic_write_bytes
from dedup.geometry import Geometry
from dedup.statedir import in_use, is_state_dir, ledger_path

if TYPE_CHECKING:  # the Redis client is imported only by commands that use it
    from crawler.transport import RedisTransport

__all__ = ["FLEET_FILE", "LOCAL", "REDIS_ENV", "FleetDir", "FleetError", "LocalRedis",
           "derive_crawl_id", "fleet_geometry", "free_port", "ping", "read_fleet_dir",
           "redis_binary", "resize_fleet", "settings_geometry", "stored_redis", "supervise",
           "transport_for", "worker_dir", "worker_meta", "write_fleet_file"]

FLEET_FILE = "fleet.json"
LOCAL = "local"
REDIS_ENV = "BLOOMCRAWL_REDIS_URL"  # how the supervisor hands a URL (maybe with a password)


class FleetError(RuntimeError):
    """A fleet cannot be started, resumed or resized; the message is one line."""


# -- identity ----------------------------------------------------------------------------


def worker_dir(root: str | Path, i: int) -> Path:
    return Path(root) / f"worker-{i}"


def derive_crawl_id(seeds_file: str | Path, workers: int) -> str:
    """The fleet id of ``crawl --redis`` without ``--crawl-id``: the same on every worker
    started with the same seeds file (content, not name) and worker count."""
    try:
        data = Path(seeds_file).read_bytes()
    except OSError:
        data = b""  # read_seeds reports the problem
    digest = hashlib.sha256(data + b"\0workers=%d" % workers).hexdigest()
    return f"seeds-{digest[:20]}"


def fleet_geometry(geometry: dict[str, Any], rules: CanonRules, scope: Scope) -> dict[str, Any]:
    """What every worker of a fleet must share, flat so a mismatch names its field.

    The filter geometry (so the fleet's seen-set is the OR of the filters), the
    canonicalization rules (so a URL has one key everywhere) and the scope (so
    the sender's "in scope" is the owner's).
    """
    scope_json = json.dumps(scope.to_dict(), sort_keys=True).encode()
    return {**geometry, "canon_sort_query": rules.sort_query,
            "canon_strip_params": list(rules.strip_params),
            "canon_max_length": rules.max_length,
            "scope": hashlib.sha256(scope_json).hexdigest()[:16]}


def settings_geometry(settings: Settings) -> dict[str, Any]:
    """The filter geometry a new state dir will record (``UrlSeen`` does the same)."""
    d = settings.dedup
    return Geometry(capacity=d.capacity, error_rate=d.error_rate, shards=d.shards,
                    seed=d.seed, growth=d.growth).to_dict()


def worker_meta(crawl_id: str, workers: int, worker_id: int, redis_url: str) -> dict[str, Any]:
    """A worker's identity as stored in its ledger: the URL is kept only without a password."""
    from crawler.transport import has_password, redact

    return {"crawl_id": crawl_id, "workers": workers, "worker_id": worker_id,
            "redis": redact(redis_url), "redis_auth": has_password(redis_url)}


def stored_redis(meta: dict[str, Any], where: str) -> str:
    """The Redis URL a stopped worker (or fleet) can resume with, or a FleetError saying
    that it must be given again (it had a password, which is never stored)."""
    if meta.get("redis_auth"):
        raise FleetError(f"{where}: its Redis URL ({meta.get('redis')}) had a password, "
                         f"which is not stored; give it with --redis URL (or ${REDIS_ENV})")
    url = meta.get("redis")
    if not url or url == LOCAL:
        raise FleetError(f"{where}: no Redis URL recorded; give one with --redis URL")
    return str(url)


def transport_for(url: str, meta: dict[str, Any], settings: Settings,
                  geometry: dict[str, Any]) -> RedisTransport:
    from crawler.transport import RedisTransport

    d = settings.distributed
    return RedisTransport(url, crawl_id=meta["crawl_id"], workers=int(meta["workers"]),
                          worker_id=int(meta["worker_id"]), geometry=geometry,
                          batch=d.forward_batch, read_count=d.receive_count,
                          claim_idle_ms=max(1, round(d.claim_idle * 1000)),
                          retry_for=d.retry_for)


# -- fleet directories ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FleetDir:
    root: Path
    crawl_id: str
    workers: int
    redis: str  # LOCAL or a URL without password
    redis_auth: bool

    def worker(self, i: int) -> Path:
        return worker_dir(self.root, i)


def write_fleet_file(root: Path, crawl_id: str, workers: int, redis: str) -> None:
    """``fleet.json``, atomically (temp file, fsync, rename)."""
    from crawler.transport import has_password, redact

    data = {"crawl_id": crawl_id, "workers": workers,
            "redis": redis if redis == LOCAL else redact(redis),
            "redis_auth": redis != LOCAL and has_password(redis)}
    text = json.dumps(data, sort_keys=True) + "\n"
    atomic_write_bytes(root / FLEET_FILE, text.encode())


def read_fleet_dir(root: str | Path) -> FleetDir:
    """A fleet directory: ``fleet.json`` if present, else its ``worker-I`` state dirs,
    whose recorded identities must agree (one crawl id, ids 0..W-1, W each)."""
    root = Path(root)
    if not root.is_dir():
        raise FleetError(f"fleet directory {root}: not found")
    dirs = sorted((p for p in root.glob("worker-*") if is_state_dir(p)),
                  key=lambda p: _worker_index(p))
    if not dirs:
        raise FleetError(f"{root} is not a fleet directory (no worker-I state directories)")
    metas = []
    for i, d in enumerate(dirs):
        if _worker_index(d) != i:
            raise FleetError(f"{root}: worker-{i} is missing (found {d.name})")
        with Ledger(ledger_path(d), readonly=True) as ledger:
            meta = ledger.meta_get(FLEET_KEY)
        if meta is None:
            raise FleetError(f"{d} is not a fleet worker's state (it was crawled without "
                             "--redis)")
        metas.append(meta)
    w = len(dirs)
    for i, meta in enumerate(metas):
        if (meta["worker_id"], meta["workers"], meta["crawl_id"]) != (i, w, metas[0]["crawl_id"]):
            raise FleetError(f"{dirs[i]}: records worker {meta['worker_id']} of "
                             f"{meta['workers']} in crawl {meta['crawl_id']}, but it is "
                             f"{dirs[i].name} of {w} in crawl {metas[0]['crawl_id']}")
    redis, auth = str(metas[0]["redis"]), bool(metas[0].get("redis_auth"))
    fleet_file = root / FLEET_FILE
    if fleet_file.is_file():
        data = json.loads(fleet_file.read_text(encoding="utf-8"))
        if (data["crawl_id"], data["workers"]) != (metas[0]["crawl_id"], w):
            raise FleetError(f"{fleet_file}: says crawl {data['crawl_id']} with "
                             f"{data['workers']} workers, but the directory holds {w} "
                             f"workers of crawl {metas[0]['crawl_id']}")
        redis, auth = str(data["redis"]), bool(data.get("redis_auth"))
    return FleetDir(root, str(metas[0]["crawl_id"]), w, redis, auth)


def _worker_index(path: Path) -> int:
    try:
        return int(path.name.split("-", 1)[1])
    except ValueError:
        return -1


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


# -- the supervisor ----------------------------------------------------------------------------


def _si(n: float) -> str:
    for unit in ("", "k", "M"):
        if abs(n) < 1000:
            return f"{n:.0f}{unit}" if not unit else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}G"


def format_fleet(stats: dict[int, dict[str, Any]], status: dict[str, int], workers: int,
                 running: int) -> str:
    """The combined progress line: the workers' last published figures, summed."""
    def total(key: str) -> float:
        return sum(s.get(key, 0) or 0 for s in stats.values())
    return (f"fleet {running}/{workers} running | {total('rate'):6.1f} pages/s | fetched "
            f"{_si(total('fetched'))} queued {_si(total('queued'))} errors "
            f"{_si(total('errors'))} | forwarded {_si(status.get('forwarded', 0))} backlog "
            f"{status.get('backlog', 0)} | idle {status.get('idle', 0)}/{workers}")


class _Line:
    """A status line on stderr: redrawn in place on a TTY, one line per interval otherwise."""

    def __init__(self, enabled: bool, interval: float, plain_interval: float) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.interval = interval if self.tty else plain_interval
        self._width = 0
        self._last = 0.0

    def show(self, text: str) -> None:
        now = time.monotonic()
        if not self.enabled or now - self._last < self.interval * 0.95:
            return
        self._last = now
        if self.tty:
            sys.stderr.write("\r" + text + " " * max(0, self._width - len(text)))
            self._width = len(text)
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def message(self, text: str) -> None:
        if self.tty and self._width:
            sys.stderr.write("\r" + " " * self._width + "\r")
            self._width = 0
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


async def supervise(children: Sequence[Sequence[str]], *, redis_url: str, crawl_id: str,
                    state: Path, settings: Settings, quiet: bool) -> int:
    """Run W worker processes (``python -m crawler ARGS``) to their end; 0 if all exit 0.

    Workers run in their own sessions, so a terminal's Ctrl-C reaches only this
    process, which passes exactly one SIGINT on to each worker and asks the
    fleet to stop through Redis; a second Ctrl-C is passed on too (workers
    exit at once, resumable). A worker that fails stops the others.

    Workers start with SIGINT ignored until their engine handles it, so a stop
    that comes while one is still starting cannot cut its state dir's creation
    short; the stop request is repeated every second until all have exited,
    because a worker ignores stop requests made before it joined (those are
    for the previous run of a resumed fleet).
    """
    from crawler.transport import FleetMonitor

    w = len(children)
    line = _Line(not quiet, settings.output.progress_interval,
                 settings.output.plain_progress_interval)
    monitor = FleetMonitor(redis_url, crawl_id=crawl_id, workers=w)
    await monitor.connect()
    env = dict(os.environ)
    env[REDIS_ENV] = redis_url  # never on a command line (ps would show a password)
    procs: list[asyncio.subprocess.Process] = []
    relays: list[asyncio.Task[None]] = []
    loop = asyncio.get_running_loop()
    signals_seen = 0
    started = time.monotonic()

    async def relay(i: int, stream: asyncio.StreamReader) -> None:
        async for raw in stream:
            line.message(f"[worker {i}] {raw.decode(errors='replace').rstrip()}")

    async def ask_stop() -> None:
        with contextlib.suppress(Exception):
            await monitor.request_stop()

    stop_tasks: list[asyncio.Task[None]] = []
    stopping = False

    def on_signal(signum: int) -> None:
        nonlocal signals_seen, stopping
        signals_seen += 1
        name = signal.Signals(signum).name
        if signals_seen == 1:
            line.message(f"bloomcrawl fleet: {name}: stopping {w} workers — send it again "
                         "to make them exit at once")
            stopping = True
            stop_tasks.append(loop.create_task(ask_stop()))
        for p in procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGINT)  # a worker handles SIGINT and SIGTERM alike

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    failed: dict[int, int] = {}
    try:
        for i, args in enumerate(children):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "crawler", *args, env=env,
                stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                start_new_session=True, preexec_fn=_ignore_sigint)
            procs.append(proc)
            assert proc.stderr is not None
            relays.append(asyncio.create_task(relay(i, proc.stderr)))
        waits = {asyncio.create_task(p.wait()): i for i, p in enumerate(procs)}
        pending = set(waits)
        while pending:
            timeout = line.interval if line.enabled else None
            if stopping:
                timeout = min(timeout or 1.0, 1.0)
                stop_tasks.append(loop.create_task(ask_stop()))
            done, pending = await asyncio.wait(pending, timeout=timeout,
                                               return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                i = waits[task]
                rc = task.result()
                if rc != 0:
                    failed[i] = rc
                    if len(failed) == 1 and pending:
                        line.message(f"bloomcrawl fleet: worker {i} exited with status {rc}; "
                                     "stopping the others")
                        stopping = True
            if pending and line.enabled and not done:  # not when one just exited (stale)
                with contextlib.suppress(Exception):
                    stats = await monitor.fleet_stats()
                    status = await monitor.fleet_status()
                    line.show(format_fleet(stats, status, w, len(pending)))
        await asyncio.gather(*relays, return_exceptions=True)
        if stop_tasks:
            await asyncio.wait(stop_tasks, timeout=5)
        if not quiet:
            with contextlib.suppress(Exception):
                stats = await monitor.fleet_stats()
                line.message(_summary(stats, w, time.monotonic() - started, state))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        for p in procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                await p.wait()
        await monitor.close()
    if failed:
        i, rc = min(failed.items())
        raise FleetError(f"worker {i} exited with status {rc}"
                         + (f" ({len(failed)} workers failed)" if len(failed) > 1 else ""))
    return 0


def _ignore_sigint() -> None:
    """In a worker before exec: SIGINT stays ignored until the engine installs its handler."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _summary(stats: dict[int, dict[str, Any]], workers: int, elapsed: float,
             state: Path) -> str:
    outcomes = sorted({str(s.get("outcome", "?")) for s in stats.values()}) or ["?"]
    pages = sum(int(s.get("session_pages", 0)) for s in stats.values())
    fetched = sum(int(s.get("fetched", 0)) for s in stats.values())
    queued = sum(int(s.get("queued", 0)) for s in stats.values())
    forwarded = sum(int(s.get("forwarded", 0)) for s in stats.values())
    text = (f"bloomcrawl fleet: {', '.join(outcomes)} after {elapsed:.1f} s: {pages} pages "
            f"this run by {workers} workers ({pages / elapsed if elapsed else 0:.1f} pages/s), "
            f"{fetched} fetched in all, {forwarded} links forwarded, {queued} still queued")
    if queued or outcomes != ["finished"]:
        text += f"\n  state:  {state}  (continue with: bloomcrawl resume {state})"
    return text


# -- resize ------------------------------------------------------------------------------------


def _pages_lines(path: Path) -> list[bytes]:
    """Complete lines of a pages.jsonl (a torn last line is dropped: that page is refetched)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    return [ln + b"\n" for ln in lines[:-1]]


def resize_fleet(src: FleetDir, to: int, out: Path, *, redis_url: str | None,
                 progress: Callable[[str], None] = lambda _m: None) -> list[Path]:
    """Resize a stopped fleet's directory into ``out`` (W -> W/2 or W -> 2W).

    Order, so that a failure is safe to repeat: everything cheap is checked;
    then Redis is resharded (idempotent: it only re-routes entries by owner); then
    ``dedup.resize.resize`` builds ``out`` atomically; then the pages.jsonl
    files, per-host counts and identities of the new workers are written, and
    ``fleet.json`` last. A local Redis is resharded in a copy of its data
    (``out/redis``), so the source fleet stays whole and resumable.
    """
    from crawler.transport import has_password, redact, reshard
    from dedup.resize import check_compatible, resize

    w = src.workers
    if not (to * 2 == w or to == w * 2):
        raise FleetError(f"can only halve (W -> W/2, W even) or double (W -> 2W) a fleet, "
                         f"not go from {w} to {to} workers; resize in several steps")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FleetError(f"{out}: already exists and is not empty")
    dirs = [src.worker(i) for i in range(w)]
    check_compatible(dirs)
    for d in dirs:  # before Redis is touched: resharding under a running fleet breaks it
        _refuse_if_running(d)
    local_copy: Path | None = None
    if src.redis == LOCAL:
        if redis_url is not None:
            raise FleetError(f"{src.root} runs its own local Redis (in {src.root / 'redis'}); "
                             "resize it without --redis")
        local_copy = out.parent / f".{out.name}.redis-{os.getpid()}"
        shutil.rmtree(local_copy, ignore_errors=True)
        if (src.root / "redis").is_dir():
            shutil.copytree(src.root / "redis", local_copy,
                            ignore=shutil.ignore_patterns("redis.log"))
        server = LocalRedis(local_copy).start()
        try:
            moved = asyncio.run(reshard(server.url, src.crawl_id, to))
        except BaseException:
            shutil.rmtree(local_copy, ignore_errors=True)
            raise
        finally:
            server.stop()
        progress(f"re-routed {moved} un-acknowledged link(s) in the local Redis copy")
    else:
        url = redis_url or stored_redis({"redis": src.redis, "redis_auth": src.redis_auth},
                                        str(src.root))
        moved = asyncio.run(reshard(url, src.crawl_id, to))
        progress(f"re-routed {moved} un-acknowledged link(s) in Redis at {redact(url)} "
                 f"for {to} workers")
    try:
        results = resize(dirs, to, out, owner_function)
    except BaseException:
        if local_copy is not None:
            shutil.rmtree(local_copy, ignore_errors=True)
        raise
    _carry_outputs(dirs, out, w, to)
    for i in range(to):
        with Ledger(ledger_path(worker_dir(out, i))) as ledger:
            meta = dict(ledger.meta_get(FLEET_KEY))
            meta.update(workers=to, worker_id=i)
            if redis_url is not None and src.redis != LOCAL:
                meta.update(redis=redact(redis_url), redis_auth=has_password(redis_url))
            ledger.meta_set(FLEET_KEY, meta)
            if to * 2 == w:  # merged: the counters of both halves
                a = _totals(dirs[i])
                b = _totals(dirs[i + to])
                ledger.meta_set(TOTALS_KEY, {k: a.get(k, 0) + b.get(k, 0)
                                             for k in set(a) | set(b)})
    if local_copy is not None:
        os.replace(local_copy, out / "redis")
        redis_field = LOCAL
    else:
        redis_field = redis_url or src.redis
    write_fleet_file(out, src.crawl_id, to, redis_field)
    return [r.path for r in results]


def _refuse_if_running(state_dir: Path) -> None:
    """A worker holds its state dir's lock (``dedup.seen``) while it runs."""
    if in_use(state_dir):
        raise FleetError(f"{state_dir} is in use by a running worker; stop the fleet "
                         "before resizing it")


def _totals(state_dir: Path) -> dict[str, int]:
    with Ledger(ledger_path(state_dir), readonly=True) as ledger:
        return dict(ledger.meta_get(TOTALS_KEY) or {})


def _carry_outputs(dirs: list[Path], out: Path, w: int, to: int) -> None:
    """pages.jsonl and host_counts.json follow their hosts to the new owners."""
    if to * 2 == w:
        for i in range(to):
            pages = b"".join(ln for j in (i, i + to) for ln in _pages_lines(dirs[j] / PAGES_FILE))
            atomic_write_bytes(worker_dir(out, i) / PAGES_FILE, pages)
            counts: dict[str, int] = {}
            for j in (i, i + to):
                for host, n in read_json(dirs[j] / HOST_COUNTS_FILE, {}).items():
                    counts[host] = counts.get(host, 0) + n
            write_json_atomic(worker_dir(out, i) / HOST_COUNTS_FILE, counts)
        return
    for i, d in enumerate(dirs):
        parts: dict[int, list[bytes]] = {i: [], i + w: []}
        for ln in _pages_lines(d / PAGES_FILE):
            url = json.loads(ln)["url"]
            part = parts.get(owner_of(authority_of(url), to))
            if part is None:
                raise FleetError(f"{d / PAGES_FILE}: {url} was fetched by worker {i}, which "
                                 f"does not own its host among {w} workers")
            part.append(ln)
        split_counts: dict[int, dict[str, int]] = {i: {}, i + w: {}}
        for host, n in read_json(d / HOST_COUNTS_FILE, {}).items():
            split_counts[owner_of(host, to)][host] = n
        for k in (i, i + w):
            atomic_write_bytes(worker_dir(out, k) / PAGES_FILE, b"".join(parts[k]))
            write_json_atomic(worker_dir(out, k) / HOST_COUNTS_FILE, split_counts[k])
