"""``--ui [HOST:]PORT`` and ``--ui-public``, shared by ``crawl``, ``resume`` and ``fleet``."""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

from crawler.cli.args import UsageError
from crawler.core.run.engine import Watcher
from crawler.ui.address import UiAddressError, bind_ui, parse_ui_address

__all__ = ["add_ui_options", "ui_socket", "ui_watch"]


def add_ui_options(p: Any) -> None:
    p.add_argument("--ui", metavar="[HOST:]PORT",
                   help="serve a live, read-only dashboard (charts, and its JSON at "
                   "/api/stats) on HOST:PORT (PORT 0: any free port; default HOST: "
                   "127.0.0.1; default: no dashboard)")
    p.add_argument("--ui-public", action="store_true",
                   help="allow --ui on an address that is not loopback (default: refused)")


def ui_socket(args: argparse.Namespace) -> socket.socket | None:
    """The dashboard's listening socket, bound now (a port in use or a refused address
    fails before anything is created), or None without ``--ui``."""
    if args.ui is None:
        if args.ui_public:
            raise UsageError("--ui-public goes with --ui [HOST:]PORT")
        return None
    try:
        host, port = parse_ui_address(args.ui, public=args.ui_public)
    except UiAddressError as exc:
        raise UsageError(str(exc)) from None
    return bind_ui(host, port)


def _say(text: str) -> None:
    sys.stderr.write(f"bloomcrawl: {text}\n")
    sys.stderr.flush()


def ui_watch(sock: socket.socket | None) -> Watcher | None:
    """``run_crawl``'s ``watch`` for ``sock`` (None: no dashboard)."""
    if sock is None:
        return None
    from crawler.ui.live import watch_engine  # aiohttp.web: only with --ui

    return watch_engine(sock, say=_say)
