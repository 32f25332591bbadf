"""Exit statuses of ``bloomcrawl``: what a script or a supervisor can read off one.

Why a status of its own for "finished with failures": a crawl whose every fetch
failed used to end with 0, like a perfect one. Failures that are answers (a
404, a page too large) are part of a finished crawl; URLs *given up* (no answer
after every retry round) and URLs refused as private addresses (a resume with
--allow-private fetches them) are not, so they make it 3.

    0    finished (or reached --max-pages), nothing given up
    1    error: the crawl could not start or was aborted (I/O error, bad state dir)
    2    usage or configuration error (bad flag, bad --config value)
    3    finished, but some URLs were given up, or refused as private addresses
         (see ``bloomcrawl stats``)
    130  stopped by SIGINT (Ctrl-C) after a graceful stop; resumable (143: SIGTERM)
    141  stdout's reader went away (``stats DIR | head``): stopped quietly, as SIGPIPE would
"""

from __future__ import annotations

import signal
from typing import Any

__all__ = ["ERROR", "GAVE_UP", "OK", "USAGE", "exit_status", "normal_exit"]

OK = 0
ERROR = 1
USAGE = 2
GAVE_UP = 3


def exit_status(summary: dict[str, Any]) -> int:
    """The exit status of a crawl that ended with ``summary`` (``Engine.run``'s)."""
    outcome = str(summary.get("outcome", ""))
    if outcome.startswith("stopped"):
        name = outcome.rpartition(" ")[2]
        try:
            return 128 + signal.Signals[name].value
        except KeyError:  # stopped by a fleet-wide request: Ctrl-C reached another process
            return 128 + signal.SIGINT.value
    return GAVE_UP if summary.get("given_up", summary.get("failed")) or summary.get("refused") \
        else OK


def normal_exit(rc: int) -> bool:
    """A worker that ended like this did its job (a supervisor need not step in)."""
    return rc in (OK, GAVE_UP) or rc in (128 + signal.SIGINT.value, 128 + signal.SIGTERM.value)
