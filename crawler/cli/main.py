"""The ``bloomcrawl`` entry point: the parser of every command, and how errors end.

Errors the user can fix (bad arguments, bad files, a directory in use) are one
``bloomcrawl: error: ...`` line on stderr and exit status 2 for usage and
configuration, 1 otherwise — never a traceback (``BLOOMCRAWL_DEBUG=1`` prints it
too). Every exit status is listed in ``crawler.config.exits`` and the README.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sqlite3
import sys
import traceback
from collections.abc import Sequence

from crawler.cli.args import PROG, Parser, UsageError, err
from crawler.cli.collector import paused_gc
from crawler.config.exits import ERROR, USAGE

__all__ = ["COMMANDS", "build_parser", "main"]

# Each command, in --help's order, and the module whose ``add_COMMAND`` registers it
# (and sets its ``func``). A run imports its command's module only: ``stats`` loads
# no crawl loop and no HTTP client; --help, or no known command, imports them all.
COMMANDS: dict[str, str] = {
    "crawl": "crawler.cli.crawl", "resume": "crawler.cli.crawl", "fleet": "crawler.cli.fleet",
    "stats": "crawler.cli.inspect", "check": "crawler.cli.inspect",
    "forget": "crawler.cli.inspect", "merge": "crawler.cli.merge",
    "resize": "crawler.cli.merge", "rebuild": "crawler.cli.inspect",
    "repair": "crawler.cli.inspect", "migrate": "crawler.cli.inspect",
    "report": "crawler.cli.report", "rules": "crawler.cli.learned",
    "explain": "crawler.cli.learned",
}


class _Version(argparse._VersionAction):
    """``--version``, its package metadata read when asked (importlib.metadata is slow
    to import for a command that does not show it)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kw: object) -> None:
        from importlib.metadata import version

        self.version = f"{PROG} {version('bloomcrawl')}"
        super().__call__(parser, *args, **kw)  # type: ignore[arg-type]


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; of the command ``argv`` starts with, if it does (a
    parse of ``argv`` reads no other command's parser, so the result is the same)."""
    parser = Parser(prog=PROG, description="A crawler whose URL-seen test is a persistent, "
                    "sharded Bloom filter confirmed by an exact SQLite ledger.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    only = argv[0] if argv and argv[0] in COMMANDS else None
    for name in COMMANDS if only is None else (only,):
        getattr(importlib.import_module(COMMANDS[name]), f"add_{name}")(sub)
    return parser


def _describe(exc: BaseException, state: str | None = None) -> str:
    """One line for an error; ``state``: the command's state directory, whose ledger an
    SQLite error is about ("disk I/O error" alone names no file)."""
    if isinstance(exc, _loaded("dedup.base.errors", "FileError")):
        return str(exc)  # names the step and the file
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename is not None else ""
        return f"{where}: {exc.strerror}" if where else exc.strerror
    text = str(exc) or type(exc).__name__
    if isinstance(exc, sqlite3.Error) and state and "ledger" not in text:
        return f"{os.path.join(state, 'ledger.sqlite')}: {text}"
    return text


# SQLite errors that say the machine is in the way, not that the ledger is damaged
_NOT_DAMAGE = ("locked", "disk i/o error", "full", "unable to open", "readonly", "interrupted")


def _loaded(module: str, name: str) -> tuple[type[BaseException], ...]:
    """``module.name`` if ``module`` was imported, else nothing: an exception of a type
    whose module this run never loaded cannot have been raised."""
    m = sys.modules.get(module)
    return () if m is None else (getattr(m, name),)


def _is_damage(exc: BaseException) -> bool:
    """A damaged ledger: malformed pages, or garbage where text should be."""
    if isinstance(exc, _loaded("dedup.base.errors", "LedgerDamaged")):
        return True
    return isinstance(exc, sqlite3.DatabaseError) and not any(
        word in str(exc).lower() for word in _NOT_DAMAGE)


# the error types shown as one line (beside sqlite3.Error, OSError and ValueError)
_USER_ERRORS = (("crawler.core.state.state", "CrawlError"),
                ("crawler.config.scope", "SeedError"), ("crawler.config.settings", "ConfigError"),
                ("dedup.base.errors", "SnapshotError"), ("dedup.base.errors", "StateLocked"),
                ("crawler.fleet.identity", "FleetError"),
                ("crawler.wire.monitor", "TransportError"))


def _user_errors() -> tuple[type[BaseException], ...]:
    """The error types shown as one line, of the modules this run imported."""
    return (sqlite3.Error, OSError, ValueError,
            *(t for module, name in _USER_ERRORS for t in _loaded(module, name)))


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
    if argv is None:
        argv = sys.argv[1:]
    with paused_gc():  # the command's imports
        parser = build_parser(argv)
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
    except UsageError as exc:
        err(str(exc))
        return USAGE
    except BrokenPipeError:
        return _reader_gone()
    except Exception as exc:
        if isinstance(exc, _loaded("crawler.config.settings", "ConfigError")):
            err(str(exc))
            return USAGE
        if not isinstance(exc, _user_errors()):
            raise
        if os.environ.get("BLOOMCRAWL_DEBUG"):
            traceback.print_exc()
        state = getattr(args, "dir", None) or getattr(args, "state", None)
        state = state if isinstance(state, str) else None  # merge's --state is a flag
        err(_describe(exc, state))
        where = state or "DIR"
        if isinstance(exc, _loaded("dedup.base.errors", "IndexDamaged")):
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
