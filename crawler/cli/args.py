"""What every command shares: the parser, argument types, one-line errors, and the
crawl options, defined once here for ``crawl`` and ``fleet`` (which hands them on
to its workers as flags) and turned into ``Settings`` in one function."""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from crawler.config.requestopts import check_proxy_url, parse_header_line
from crawler.config.scope import check_pattern, normalize_domain
from crawler.config.settings import Settings, did_you_mean
from crawler.core.run.progress import write_text
from dedup import CRAWL_ID_BYTES

__all__ = [
    "PROG",
    "Parser",
    "UsageError",
    "add_crawl_options",
    "add_hook_options",
    "add_quiet_option",
    "add_seeded_command",
    "crawl_id",
    "crawl_options",
    "crawl_settings",
    "describe",
    "err",
    "int_at_least",
    "note",
    "resume_flags",
    "resume_help",
    "warn",
    "worker_flags",
]

PROG = "bloomcrawl"


class UsageError(Exception):
    """Bad command-line arguments (exit status 2)."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        """argparse's, with the nearest known flag named for an unknown one
        ("--concurency: did you mean '--concurrency'?")."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._command(getattr(parsed, "command", None))
            flags = [o for a in command._actions for o in a.option_strings]
            hints = [f"{x}: {hint}" for x in extras if x.startswith("--")
                     if (hint := did_you_mean(x.partition("=")[0], flags))]
            command.error(f"unrecognized arguments: {' '.join(extras)}"
                          + "".join(f"; {h}" for h in hints))
        return parsed

    def _command(self, name: str | None) -> argparse.ArgumentParser:
        """The parser of subcommand ``name`` (this one if none)."""
        for action in self._actions:  # argparse offers no public walk of its tree
            if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                return action.choices[name]  # type: ignore[no-any-return]
        return self


def describe(command: Callable[..., int]) -> str:
    """A command's ``--help`` description is its function's docstring: the text a user
    reads is next to the code it describes, and written once."""
    return inspect.cleandoc(command.__doc__ or "")


def add_seeded_command(sub: Any, name: str, help: str, command: Callable[..., int],
                       state_help: str) -> argparse.ArgumentParser:
    """A command that starts from a seeds file into a new state directory (``crawl``,
    ``fleet``): its parser, with those two arguments."""
    p = sub.add_parser(name, help=help, description=describe(command))
    p.add_argument("seeds", metavar="SEEDS_FILE", help="one URL per line")
    p.add_argument("--state", required=True, metavar="DIR", help=state_help)
    return p


def err(message: str) -> None:
    write_text(sys.stderr, f"{PROG}: error: {message}\n")


def note(message: str) -> None:
    """A line for the user that is neither an error nor a warning."""
    write_text(sys.stderr, f"{PROG}: {message}\n")


def warn(message: str) -> None:
    write_text(sys.stderr, f"{PROG}: warning: {message}\n")


# -- argument types ------------------------------------------------------------------------


def int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}: {text!r}")
        return value
    return parse


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0: {text!r}")
    return value


def domain(text: str) -> str:
    try:
        return normalize_domain(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def pattern(text: str) -> str:
    try:
        return check_pattern(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def header(text: str) -> str:
    try:
        name, value = parse_header_line(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return f"{name}: {value}"


def user_agent(text: str) -> str:
    if not text.strip() or any(c in text for c in "\r\n\0"):
        raise argparse.ArgumentTypeError(f"not a one-line user agent: {text!r}")
    return text.strip()


def proxy(text: str) -> str:
    try:
        check_proxy_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def crawl_id(text: str) -> str:
    if not text or any(c in text for c in "{} \t\r\n\0") or \
            len(text.encode()) > CRAWL_ID_BYTES:
        raise argparse.ArgumentTypeError(f"a crawl id is 1..{CRAWL_ID_BYTES} bytes without "
                                         f"spaces or braces: {text!r}")
    return text


# -- the crawl options ---------------------------------------------------------------------

# (flag, argparse keywords); ``worker_flags`` hands each on to a fleet's workers.
_D = Settings()  # the built-in defaults (config/default.toml), shown in --help

CRAWL_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--config", dict(metavar="FILE", help="TOML file overlaying the built-in settings "
                      "(config/default.toml documents every key; default: none)")),
    ("--max-pages", dict(type=int_at_least(0), metavar="N",
                         help="stop after N fetched pages (0: no limit; default: "
                         f"{_D.crawl.max_pages})")),
    ("--max-depth", dict(type=int_at_least(0), metavar="D",
                         help="do not follow links (or redirects) deeper than D hops from a "
                         f"seed (default: {_D.crawl.max_depth})")),
    ("--allow-domain", dict(type=domain, action="append", default=[], metavar="D",
                            help="also crawl domain D and its subdomains on any port "
                            "(repeatable; default: only the seeds' hosts)")),
    ("--include", dict(type=pattern, action="append", default=[], metavar="REGEX",
                       help="crawl only URLs whose canonical form contains a match of some "
                       "REGEX (repeatable; default: every URL of the hosts in scope)")),
    ("--exclude", dict(type=pattern, action="append", default=[], metavar="REGEX",
                       help="never crawl URLs whose canonical form contains a match of REGEX "
                       "(repeatable; beats --include; default: none)")),
    ("--sitemaps", dict(action="store_true",
                        help="also queue the URLs the seed hosts' sitemaps list (robots.txt "
                        "Sitemap: lines, else /sitemap.xml); a sitemap fetch goes to the WARC "
                        "and the stats, not to pages.jsonl (default: off, [crawl] sitemaps)")),
    ("--no-sitemaps", dict(action="store_true",
                           help="do not read sitemaps, even if --config turns them on "
                           "(default: off)")),
    ("--no-learn", dict(action="store_true",
                        help="do not learn which URLs of a host hold the same content: no "
                        "content fingerprints (near_duplicate_of), no learned URL rules, no "
                        "trap budgets (default: learn; README, 'Learned rules and trap "
                        "budgets')")),
    ("--concurrency", dict(type=int_at_least(1), metavar="N",
                           help=f"fetches in flight at once (default: {_D.crawl.concurrency})")),
    ("--per-host", dict(type=int_at_least(1), metavar="N",
                        help="fetches in flight at once per host (default: "
                        f"{_D.politeness.per_host})")),
    ("--delay", dict(type=seconds, metavar="S",
                     help="minimum seconds between fetch starts per host (default: "
                     f"{_D.politeness.delay:g})")),
    ("--allow-private", dict(action="store_true",
                             help="also fetch private, loopback and link-local addresses "
                             "(127.0.0.1, localhost, 10.x, 192.168.x: a local test site needs "
                             "it; default: refused, recorded as failed)")),
    ("--user-agent", dict(type=user_agent, metavar="UA",
                          help="the User-Agent header; robots.txt groups are matched against "
                          "its product token, the part before the first '/' or space (after "
                          "'compatible;' in a Mozilla/5.0 (compatible; ...) form) "
                          f"(default: {_D.fetch.user_agent!r})")),
    ("--header", dict(type=header, action="append", default=[], metavar="'NAME: VALUE'",
                      help="an extra request header (repeatable; default: none)")),
    ("--cookies", dict(action="store_true",
                       help="keep the cookies servers set and send them back, per host, "
                       "for this run (default: no cookies)")),
    ("--proxy", dict(type=proxy, metavar="URL",
                     help="send requests through the proxy http://HOST:PORT (default: "
                     "$HTTP_PROXY / $HTTPS_PROXY; $NO_PROXY hosts go direct either way)")),
    ("--max-bytes", dict(type=int_at_least(1), metavar="BYTES",
                         help="the most bytes of a response body read; a page past it is "
                         "recorded 'too large (>BYTES bytes)' and counted as failed "
                         f"(default: {_D.fetch.max_bytes})")),
    ("--parse-limit", dict(type=int_at_least(1), metavar="BYTES",
                           help="links are taken from the first BYTES of a page; the whole "
                           "body still goes to the WARC and the digest "
                           f"(default: {_D.fetch.parse_limit})")),
    ("--warc", dict(metavar="FILE", help="also write every fetch (request, response and "
                    "revisit records) to numbered WARC files named after FILE: "
                    "out/crawl.warc.gz writes out/crawl-00000.warc.gz, "
                    "out/crawl-00001.warc.gz and so on, gzipped when FILE ends in .gz "
                    "(default: none)")),
    ("--warc-max-size", dict(type=int_at_least(0), metavar="BYTES",
                             help="start a new WARC file before one would pass this size "
                             f"(0: one file; default: {_D.output.warc_max_size})")),
    ("--warc-content-type", dict(metavar="REGEX",
                                 help="archive only 2xx responses whose media type matches "
                                 "(default: all)")),
]
_VALUE_FLAGS = ("--max-pages", "--max-depth", "--concurrency", "--per-host", "--delay",
                "--user-agent", "--proxy", "--max-bytes", "--parse-limit")
_LIST_FLAGS = ("--allow-domain", "--include", "--exclude", "--header")
# what `resume` may change (stored as the new values), and where each lives in Settings
RESUME_FLAGS = {"--max-pages": ("crawl", "max_pages"), "--max-depth": ("crawl", "max_depth"),
                "--concurrency": ("crawl", "concurrency"),
                "--per-host": ("politeness", "per_host"), "--delay": ("politeness", "delay"),
                "--proxy": ("fetch", "proxy"), "--max-bytes": ("fetch", "max_bytes"),
                "--parse-limit": ("fetch", "parse_limit"),
                # widens only (a flag): the URLs refused before are fetched
                # (crawler.core.state.reopen)
                "--allow-private": ("fetch", "allow_private")}
# crawl flags `resume` refuses with a message instead of "unrecognized arguments"
FROZEN_FLAGS = ("--allow-domain", "--include", "--exclude", "--sitemaps", "--no-sitemaps",
                "--no-learn", "--warc",
                "--warc-max-size", "--warc-content-type", "--config", "--state",
                "--user-agent", "--header", "--cookies")
_REQUEST_WHY = "a crawl's requests are the same throughout, and robots.txt is read for its agent"
FROZEN_WHY = {"--user-agent": _REQUEST_WHY, "--header": _REQUEST_WHY, "--cookies": _REQUEST_WHY}


def add_quiet_option(p: argparse.ArgumentParser) -> None:
    """``--quiet`` (``crawl``, ``resume``, ``fleet``)."""
    p.add_argument("--quiet", action="store_true",
                   help="no status line, no summary (default: both, on stderr)")


def add_crawl_options(p: argparse.ArgumentParser) -> None:
    for flag, kwargs in CRAWL_OPTIONS:
        p.add_argument(flag, **kwargs)


def add_resume_options(p: Any) -> None:
    """The crawl options ``resume`` accepts: limits and politeness (see RESUME_FLAGS)."""
    for flag, kwargs in CRAWL_OPTIONS:
        if flag in RESUME_FLAGS:
            given = {"default": None} if kwargs.get("action") == "store_true" else {}
            p.add_argument(flag, **{**kwargs, **given, "help": resume_help(kwargs["help"])})


def resume_help(text: str) -> str:
    """A crawl option's help as ``resume`` shows it: by default the crawl keeps its value,
    and the value a new crawl gets is shown beside it ("default: the crawl's value; for a
    new crawl: 20")."""
    head, sep, tail = text.rpartition("default: ")
    if not sep:
        return text + " (default: the crawl's value)"
    return f"{head}default: the crawl's value; for a new crawl: {tail}"


def resume_changes(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The settings sections ``resume``'s flags change: {section: {key: value}}."""
    out: dict[str, dict[str, Any]] = {}
    for flag, (section, key) in RESUME_FLAGS.items():
        value = getattr(args, _dest(flag))
        if value is not None:
            out.setdefault(section, {})[key] = value
    return out


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def crawl_options(args: argparse.Namespace) -> dict[str, Any]:
    """The crawl options as ``crawler.Crawler`` takes them (the same names)."""
    from crawler.core.run.crawl import CRAWL_OPTIONS as CRAWL_OPTION_NAMES

    return {name: getattr(args, name) for name in CRAWL_OPTION_NAMES}


def crawl_settings(args: argparse.Namespace) -> Settings:
    """Defaults < --config < flags (``crawler.core.run.crawl.settings_from_options``)."""
    from crawler.core.run.crawl import settings_from_options

    return settings_from_options(crawl_options(args))


def add_hook_options(p: argparse.ArgumentParser, *, resume: bool,
                     items: str = "DIR/items.jsonl") -> None:
    """``--handler``, ``--follow`` and ``--on-error`` (``crawl``, ``fleet``, ``resume``);
    ``items``: where the items go."""
    started = " (default: the one the crawl was started with, if any)"
    g = p.add_argument_group(
        "page handler", "Python code run on every page with a response, as with "
        "crawler.Crawler (README: 'Crawling from Python'); MODULE is imported from the "
        "current directory or the Python path")
    g.add_argument("--handler", metavar="MODULE:FUNCTION",
                   help="handler(page) returns the page's items (dicts, or None), written "
                   f"to {items} with the page" + (started if resume else
                                                         " (default: none)"))
    g.add_argument("--follow", metavar="MODULE:FUNCTION",
                   help="follow(page) returns the URLs to enqueue" + (
                       started if resume else " (default: all of the page's in-scope links)"))
    g.add_argument("--on-error", choices=("continue", "stop"), default=None,
                   help="when the handler raises: record its traceback in pages.jsonl "
                   "(handler_error) and go on, or stop the crawl (exit status 1, resumable: "
                   "that page is handled again) (default: " + (
                       "the crawl's, else continue)" if resume else "continue)"))


def worker_flags(args: argparse.Namespace, i: int) -> list[str]:
    """The crawl options of ``fleet`` as worker ``i``'s command-line flags."""
    out: list[str] = []
    if args.config:
        out += ["--config", str(Path(args.config).resolve())]
    if args.warc:  # one WARC prefix per worker: writers must not share a file
        w = Path(args.warc).resolve()
        suffix = "".join(w.suffixes)
        out += ["--warc", str(w.with_name(f"{w.name[:len(w.name) - len(suffix)]}-worker-{i}"
                                          f"{suffix}"))]
        if args.warc_max_size is not None:
            out += ["--warc-max-size", str(args.warc_max_size)]
        if args.warc_content_type is not None:
            out += ["--warc-content-type", args.warc_content_type]
    for flag in _VALUE_FLAGS:
        value = getattr(args, _dest(flag))
        if value is not None:
            out += [flag, str(value)]
    for flag in _LIST_FLAGS:
        for value in getattr(args, _dest(flag)):
            out += [flag, value]
    for flag in ("--allow-private", "--cookies", "--sitemaps", "--no-sitemaps", "--no-learn"):
        if getattr(args, _dest(flag)):
            out.append(flag)
    return out + _hook_flags(args)


def _hook_flags(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    for flag in ("--handler", "--follow", "--on-error"):  # each worker runs the same code
        value = getattr(args, _dest(flag), None)
        if value is not None:
            out += [flag, value]
    return out


def resume_flags(args: argparse.Namespace) -> list[str]:
    """The limits and hooks ``resume FLEETDIR`` was given, as each worker's ``resume``
    flags (a fleet's limits are per worker, as ``fleet``'s)."""
    out: list[str] = []
    for flag in RESUME_FLAGS:
        value = getattr(args, _dest(flag))
        if value is True:  # a flag: --allow-private
            out.append(flag)
        elif value is not None:
            out += [flag, str(value)]
    return out + _hook_flags(args)
