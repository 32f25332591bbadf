"""Kill -9 a crawl at chosen moments, resuming it after each: the loop the crash tests
share (each says what a moment is: pages served, a request logged, an output growing)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from tests.support.helpers import start_cli

Reached = Callable[[asyncio.subprocess.Process, int], Awaitable[None]]


async def kill_at(args: list[str], state: Path, moments: Iterable[int], reached: Reached
                  ) -> tuple[int, list[str]]:
    """Start ``args`` (``crawl ...``), wait until ``reached(proc, moment)`` returns, kill
    the process with SIGKILL if it still runs, and go on with ``resume STATE --quiet``,
    once a moment. Returns the kills that landed and the command that finishes the
    crawl (``resume``, or ``args`` when there was no moment)."""
    kills = 0
    for moment in moments:
        proc = await start_cli(*args)
        await reached(proc, moment)
        if proc.returncode is None:
            proc.kill()
            kills += 1
        await proc.wait()
        args = ["resume", str(state), "--quiet"]
    return kills, args
