"""Which asyncio event loop a crawl runs on: uvloop when it is installed, else asyncio's.
(uvloop as ``crawler.cli.safeloop`` runs it: without the writes whose failure aborts it.)

Why: a crawl is one event loop, CPU-bound at high concurrency, and uvloop's loop
and transports (libuv, in C) spend less CPU a request than asyncio's pure-Python
selector loop (bench/README.md, "Whole crawl vs a bare loop"). It is optional
(``pip install bloomcrawl[fast]``, Linux and macOS); ``--loop asyncio`` turns it off.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from crawler.cli.args import UsageError
from crawler.cli.collector import tuned_gc

__all__ = ["LOOPS", "add_loop_option", "loop_factory", "run"]

T = TypeVar("T")
LOOPS = ("auto", "uvloop", "asyncio")


def add_loop_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--loop", choices=LOOPS, default="auto",
                   help="event loop: uvloop (pip install bloomcrawl[fast]), asyncio's own, "
                   "or auto = uvloop when installed (default: auto)")


def loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """A new-loop function for ``asyncio.Runner`` (None: asyncio's default loop)."""
    if kind == "asyncio":
        return None
    try:
        import uvloop  # noqa: F401 - installed? (safeloop subclasses its loop)
    except ImportError:
        if kind == "uvloop":
            raise UsageError("--loop uvloop: uvloop is not installed "
                             "(pip install 'bloomcrawl[fast]')") from None
        return None
    from crawler.cli.safeloop import new_event_loop

    return new_event_loop


def run(main: Coroutine[Any, Any, T], kind: str = "auto") -> T:
    """``asyncio.run(main)`` on the loop ``kind`` names, with the garbage collector
    tuned for a crawl (``crawler.cli.collector``)."""
    factory = loop_factory(kind)
    with tuned_gc():
        if factory is None:
            return asyncio.run(main)
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)
