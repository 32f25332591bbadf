"""``bloomcrawl fleet``: W worker processes, one combined progress line, one stop.

A supervisor that starts W ``crawl``/``resume`` child processes in
``DIR/worker-I`` (the local ``redis-server`` is ``crawler.fleet.launch``'s),
shows one combined progress line, and passes a Ctrl-C on to every worker.

Why it restarts a dead worker: the fleet cannot finish without every owner
(links for a dead worker's hosts wait in its stream), so one kill -9 or crash
used to stop the whole fleet. A worker that exits with anything but a normal
status (``crawler.config.exits.normal_exit``) is resumed in its own state dir — its
ledger and its un-acked stream entries lose nothing — at most
``distributed.max_restarts`` times, with a growing pause; then the fleet stops
with that worker's status, resumable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crawler.config.exits import GAVE_UP, normal_exit
from crawler.config.settings import Settings
from crawler.core.run.progress import LIMIT_REACHED, Progress, refused_lines, si
from crawler.fleet.identity import REDIS_ENV, FleetError, worker_dir
from dedup import is_state_dir

# -- the supervisor ----------------------------------------------------------------------------


def format_fleet(stats: dict[int, dict[str, Any]], status: dict[str, int], workers: int,
                 running: int) -> str:
    """The combined progress line (at most 80 columns): the workers' last published
    figures, summed."""
    def total(key: str) -> float:
        return sum(s.get(key, 0) or 0 for s in stats.values())
    rate = total("rate")
    rate_text = f"{rate:5.1f}" if rate < 1000 else f"{si(rate):>5}"
    return (f"{running}/{workers} up {status.get('idle', 0)} idle | {rate_text}/s | fetched "
            f"{si(total('fetched'))} failed {si(total('errors'))} queued "
            f"{si(total('queued'))}")


async def supervise(children: Sequence[Sequence[str]], *, redis_url: str, crawl_id: str,
                    state: Path, settings: Settings, quiet: bool,
                    ui: socket.socket | None = None) -> int:
    """Run W worker processes (``python -m crawler ARGS``) to their end; returns the
    fleet's exit status (``crawler.config.exits``: 3 if a worker gave URLs up, 130 after a stop).

    Workers run in their own sessions, so a terminal's Ctrl-C reaches only this
    process, which passes exactly one SIGINT on to each worker and asks the
    fleet to stop through Redis; a second Ctrl-C is passed on too (workers
    exit at once, resumable). A worker that dies is resumed (bounded, see above).

    Workers start with SIGINT ignored until their engine handles it, so a stop
    that comes while one is still starting cannot cut its state dir's creation
    short; the stop request is repeated every second until all have exited,
    because a worker ignores stop requests made before it joined (those are
    for the previous run of a resumed fleet).
    """
    from crawler.wire.monitor import FleetMonitor
    from crawler.wire.relay import SUPERVISED_ENV

    w = len(children)
    line = Progress(interval=settings.output.progress_interval,
                    plain_interval=settings.output.plain_progress_interval, enabled=not quiet)
    # retried as long as a worker would: a stop request to a Redis that is gone for
    # good must not hold the fleet's exit
    monitor = FleetMonitor(redis_url, crawl_id=crawl_id, workers=w,
                           retry_for=settings.distributed.retry_for)
    await monitor.connect()
    await monitor.clear_stats()  # the last run's figures are not this run's
    dashboard = contextlib.AsyncExitStack()
    env = dict(os.environ)
    env[REDIS_ENV] = redis_url  # never on a command line (ps would show a password)
    env[SUPERVISED_ENV] = str(os.getpid())  # a worker waiting for the fleet says so plainly
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
    max_restarts = settings.distributed.max_restarts

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
    codes: dict[int, int] = {}
    restarts = [0] * w
    waits: dict[asyncio.Task[int], int] = {}

    async def spawn(i: int, args: Sequence[str]) -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", *args, env=env,
            stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, preexec_fn=_ignore_sigint)
        if i < len(procs):
            procs[i] = proc
        else:
            procs.append(proc)
        assert proc.stderr is not None
        relays.append(asyncio.create_task(relay(i, proc.stderr)))
        waits[asyncio.create_task(proc.wait())] = i

    try:
        if ui is not None:  # the fleet's one dashboard: every worker's figures, and totals
            from crawler.ui.live import FleetProbe, serving

            await dashboard.enter_async_context(serving(
                FleetProbe(monitor.fleet_stats, state, w), ui,
                say=lambda text: line.message(f"bloomcrawl fleet: {text}")))
        for i, args in enumerate(children):
            await spawn(i, args)
        pending = set(waits)
        while pending:
            timeout = line.interval if line.enabled else None
            if stopping:
                timeout = min(timeout or 1.0, 1.0)
                stop_tasks.append(loop.create_task(ask_stop()))
            done, pending = await asyncio.wait(pending, timeout=timeout,
                                               return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                i = waits.pop(task)
                rc = codes[i] = task.result()
                if normal_exit(rc) or stopping:
                    continue
                if restarts[i] < max_restarts:
                    restarts[i] += 1
                    line.message(f"bloomcrawl fleet: worker {i} exited with status {rc}; "
                                 f"resuming it (restart {restarts[i]} of {max_restarts})")
                    await asyncio.sleep(min(5.0, 0.5 * 2 ** (restarts[i] - 1)))
                    await spawn(i, _restart_args(state, i, children[i]))
                    pending |= {t for t, j in waits.items() if j == i}
                    continue
                failed[i] = rc
                if len(failed) == 1 and pending:
                    line.message(f"bloomcrawl fleet: worker {i} exited with status {rc} "
                                 f"{restarts[i] + 1} times; stopping the others")
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
                line.message(fleet_summary(stats, w, time.monotonic() - started, state))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        for p in procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                await p.wait()
        await dashboard.aclose()
        await monitor.close()
    if failed:
        i, rc = min(failed.items())
        raise FleetError(f"worker {i} exited with status {rc}"
                         + (f" ({len(failed)} workers failed)" if len(failed) > 1 else "")
                         + f"; continue with: bloomcrawl resume {state}")
    if signals_seen:
        return 128 + signal.SIGINT.value
    return GAVE_UP if GAVE_UP in codes.values() else 0


def _restart_args(state: Path, i: int, first: Sequence[str]) -> list[str]:
    """How worker ``i`` is started again: ``resume`` once its state dir holds a crawl."""
    d = worker_dir(state, i)
    if is_state_dir(d):
        return ["resume", str(d), "--quiet"]
    return list(first)


def _ignore_sigint() -> None:
    """In a worker before exec: SIGINT stays ignored until the engine installs its handler."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def fleet_summary(stats: dict[int, dict[str, Any]], workers: int, elapsed: float,
                  state: Path) -> str:
    """The fleet's end-of-run report: its totals, then a line per worker (a fleet splits
    its work by host, so the split is part of the answer)."""
    outcomes = sorted({str(s.get("outcome", "?")) for s in stats.values()}) or ["?"]

    def total(key: str) -> int:
        return sum(int(s.get(key) or 0) for s in stats.values())
    pages = total("session_pages")
    lines = [f"bloomcrawl fleet: {', '.join(outcomes)} after {elapsed:.1f} s: {pages} pages "
             f"this run by {workers} workers ({pages / elapsed if elapsed else 0:.1f} "
             f"pages/s), {total('fetched')} fetched in all, {total('forwarded')} links "
             f"forwarded, {total('queued')} still queued"]
    for i in range(workers):
        s = stats.get(i)
        if s is None:
            lines.append(f"  worker {i}: no figures (it published none this run)")
            continue
        share = int(s.get("session_pages") or 0) / pages if pages else 0.0
        lines.append(
            f"  worker {i}: {int(s.get('session_pages') or 0)} pages this run "
            f"({100 * share:.0f}%), {int(s.get('fetched') or 0)} fetched in all, "
            f"{int(s.get('queued') or 0)} still queued, {int(s.get('forwarded') or 0)} links "
            f"forwarded, {int(s.get('received') or 0)} received"
            + (f" ({s.get('outcome')})" if len(outcomes) > 1 else ""))
    lines += ["  " + line for line in refused_lines({"refused": total("refused"),
                                                     "state_dir": str(state)})]
    if any(str(s.get("outcome")) == LIMIT_REACHED for s in stats.values()):
        lines.append(f"  state:  {state}  (a worker reached its page limit; continue with a "
                     f"higher one: bloomcrawl resume {state} --max-pages N, N per worker)")
    elif total("queued") or outcomes != ["finished"]:
        lines.append(f"  state:  {state}  (continue with: bloomcrawl resume {state})")
    return "\n".join(lines)


