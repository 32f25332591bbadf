"""``bloomcrawl fleet``: W worker processes, one combined progress line, one stop.

A supervisor that starts W ``crawl``/``resume`` child
  processes in ``DIR/worker-I`` (and a local, persistent ``redis-server`` when
  no ``--redis`` is given), shows one combined progress line, and passes a
  Ctrl-C on to every worker;
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.settings import Settings

if TYPE_CHECKING:  # the Redis client is imported only by commands that use it
    pass

from crawler.fleet.identity import REDIS_ENV, FleetError
from crawler.progress import Progress, si

# -- the supervisor ----------------------------------------------------------------------------


def format_fleet(stats: dict[int, dict[str, Any]], status: dict[str, int], workers: int,
                 running: int) -> str:
    """The combined progress line: the workers' last published figures, summed."""
    def total(key: str) -> float:
        return sum(s.get(key, 0) or 0 for s in stats.values())
    return (f"fleet {running}/{workers} running | {total('rate'):6.1f} pages/s | fetched "
            f"{si(total('fetched'))} queued {si(total('queued'))} errors "
            f"{si(total('errors'))} | forwarded {si(status.get('forwarded', 0))} backlog "
            f"{status.get('backlog', 0)} | idle {status.get('idle', 0)}/{workers}")


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
    from crawler.fleet.monitor import FleetMonitor

    w = len(children)
    line = Progress(interval=settings.output.progress_interval,
                    plain_interval=settings.output.plain_progress_interval, enabled=not quiet)
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


