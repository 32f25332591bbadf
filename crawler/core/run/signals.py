"""SIGINT/SIGTERM for a crawl: the first stops it gracefully, the second exits at once.

Why exiting at once is safe: the ledger is the record of truth, and every URL
taken but not yet marked stays QUEUED, so it is fetched again on resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Iterator

__all__ = ["stop_on_signals"]


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[str], None], stopping: Callable[[], bool],
                    message: Callable[[str], None], *, grace: float,
                    install: bool = True) -> Iterator[None]:
    """While inside: SIGINT/SIGTERM calls ``stop(name)``, or exits (128+n) if ``stopping()``.

    ``install=False`` installs nothing (an engine run inside a test or a library).
    """
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM) if install else ()

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if not stopping():
            message(f"bloomcrawl: {name}: stopping — finishing in-flight fetches (up to "
                    f"{grace:g} s); send it again to exit at once")
            stop(name)
            return
        with contextlib.suppress(Exception):
            message(f"bloomcrawl: {name} again: exiting now (resumable)")
        os._exit(128 + signum)

    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        yield
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
