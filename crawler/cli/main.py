"""The ``bloomcrawl`` entry point: the parser of every command, and how errors end.

Errors the user can fix (bad arguments, bad files, a directory in use) are one
``bloomcrawl: error: ...`` line on stderr and exit status 2 for usage and
configuration, 1 otherwise — never a traceback (``BLOOMCRAWL_DEBUG=1`` prints it
too). Every exit status is listed in ``crawler.config.exits`` and the README.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sqlite3
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from crawler.cli.args import PROG, Parser, UsageError, err
from crawler.cli.crawl import add_crawl, add_resume
from crawler.cli.fleet import add_fleet
from crawler.cli.inspect import (
    add_check,
    add_forget,
    add_migrate,
    add_rebuild,
    add_repair,
    add_stats,
)
from crawler.cli.merge import add_merge, add_resize
from crawler.cli.report import add_report
from crawler.config.exits import ERROR, USAGE
from crawler.config.scope import SeedError
from crawler.config.settings import ConfigError
from crawler.core.state.state import CrawlError
from crawler.fleet.identity import FleetError
from dedup import IndexDamaged, LedgerDamaged, SnapshotError, StateLocked

__all__ = ["COMMANDS", "build_parser", "main"]

# One registration function per command (it sets the command's ``func``).
COMMANDS: list[Callable[[Any], None]] = [
    add_crawl, add_resume, add_fleet, add_stats, add_check, add_forget, add_merge, add_resize,
    add_rebuild, add_repair, add_migrate, add_report,
]


class _Version(argparse._VersionAction):
    """``--version``: the package's version, read from its metadata only when asked
    (importing and scanning it took ~80 ms of CPU, paid by every crawl)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from importlib.metadata import version

        self.version = f"{PROG} {version('bloomcrawl')}"
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="A crawler whose URL-seen test is a persistent, "
                    "sharded Bloom filter confirmed by an exact SQLite ledger.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for register in COMMANDS:
        register(sub)
    return parser


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename is not None else ""
        return f"{where}: {exc.strerror}" if where else exc.strerror
    return str(exc) or type(exc).__name__


# SQLite errors that say the machine is in the way, not that the ledger is damaged
_NOT_DAMAGE = ("locked", "disk i/o error", "full", "unable to open", "readonly", "interrupted")


def _is_damage(exc: BaseException) -> bool:
    """A damaged ledger: malformed pages, or garbage where text should be."""
    if isinstance(exc, LedgerDamaged):
        return True
    return isinstance(exc, sqlite3.DatabaseError) and not any(
        word in str(exc).lower() for word in _NOT_DAMAGE)


_USER_ERRORS = (CrawlError, SeedError, ConfigError, SnapshotError, StateLocked, sqlite3.Error,
                OSError, ValueError, FleetError)


def _user_errors() -> tuple[type[BaseException], ...]:
    """The error types shown as one line; the Redis ones only if Redis was used (imported)."""
    monitor = sys.modules.get("crawler.wire.monitor")
    return _USER_ERRORS + ((monitor.TransportError,) if monitor is not None else ())


def _reader_gone() -> int:
    """stdout's reader went away (``bloomcrawl stats DIR | head``): stop quietly, as
    a command killed by SIGPIPE would, and let nothing flush into the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE.value


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format=f"{PROG}: warning: %(message)s",
                        stream=sys.stderr)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        err(str(exc))
        return USAGE
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except BrokenPipeError:
        return _reader_gone()
    try:
        return int(args.func(args))
    except (UsageError, ConfigError) as exc:
        err(str(exc))
        return USAGE
    except BrokenPipeError:
        return _reader_gone()
    except Exception as exc:
        if not isinstance(exc, _user_errors()):
            raise
        if os.environ.get("BLOOMCRAWL_DEBUG"):
            traceback.print_exc()
        err(_describe(exc))
        where = getattr(args, "dir", None) or getattr(args, "state", None) or "DIR"
        if isinstance(exc, IndexDamaged):
            err(f"the fingerprint index is damaged; it is derived from the ledger's "
                f"journal, so rebuilding it loses nothing: 'bloomcrawl rebuild {where}' "
                "(README: 'Damaged ledger')")
        elif _is_damage(exc):
            err(f"the ledger is damaged: recover what is readable with 'bloomcrawl repair "
                f"{where}' (README: 'Damaged ledger')")
        return ERROR
    except KeyboardInterrupt:
        err("interrupted")
        return 128 + signal.SIGINT.value


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
