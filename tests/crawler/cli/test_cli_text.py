"""The command line's own text (issue 11, items 18, 20-22): --version, help for every
option with its default, descriptions, messages about the wrong kind of path, and a
status line that fits a terminal of 80 columns."""

from __future__ import annotations

import argparse
import io
import re
from importlib.metadata import version

import pytest

from crawler.cli.args import CRAWL_OPTIONS
from crawler.cli.main import build_parser, main
from crawler.core.run.progress import Progress, format_status


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse offers no public walk of its tree
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0 and not isinstance(action, argparse._VersionAction)


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"bloomcrawl {version('bloomcrawl')}"


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """A parser's options by their long flag (``--help`` left out)."""
    return {a.option_strings[-1]: a for a in parser._actions
            if a.option_strings and not isinstance(a, argparse._HelpAction)}


def _shown_default(action: argparse.Action) -> str | None:
    """What ``(default: ...)`` in an option's help says, or None."""
    found = re.findall(r"default: ([^;()]*(?:\([^()]*\))?[^;()]*)", action.help or "")
    return found[-1].strip() if found else None


def test_every_option_has_help_and_says_its_default_and_every_command_a_description():
    problems = []
    for name, sub in _subparsers(build_parser()).items():
        if not sub.description:
            problems.append(f"{name}: no description")
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flag = "/".join(action.option_strings) or action.dest
            if not action.help:
                problems.append(f"{name} {flag}: no help")
            elif action.option_strings and not action.required \
                    and "default" not in action.help:
                problems.append(f"{name} {flag}: help does not say its default")
            elif action.option_strings and action.default not in (None, False, [], "==SUPPRESS==") \
                    and str(action.default) not in action.help:
                problems.append(f"{name} {flag}: help does not show its default "
                                f"{action.default!r}")
    assert problems == []


def test_a_crawl_option_shows_the_same_default_in_every_command_that_takes_it():
    """``resume`` and ``fleet`` take (or refuse, naming them) crawl options: their help
    shows the value a new crawl gets, as ``crawl --help`` does (``resume --help`` said
    "its value then" for --warc-max-size and --user-agent: no value at all)."""
    commands = _subparsers(build_parser())
    crawl = {flag: _shown_default(a) for flag, a in _options(commands["crawl"]).items()
             if flag in dict(CRAWL_OPTIONS)}
    problems = []
    for name, sub in commands.items():
        if name == "crawl":
            continue
        for flag, action in _options(sub).items():
            default = crawl.get(flag)
            if default is not None and default not in re.sub(r"\s+", " ", action.help or ""):
                problems.append(f"{name} {flag}: {action.help!r} does not show {default!r}")
    assert problems == []
    assert crawl["--warc-max-size"] == "1000000000"
    assert "bloomcrawl/0.1" in crawl["--user-agent"]


def test_the_warc_option_reads_as_words(capsys):
    assert main(["crawl", "--help"]) == 0
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    warc = out[out.index("--warc FILE "):out.index("--warc-max-size BYTES ")]
    assert "-less-" not in warc and "[.gz]" not in warc
    assert "crawl-00000.warc.gz" in warc  # an example of the names it writes


def test_help_shows_the_defaults_of_the_crawl_options(capsys):
    assert main(["crawl", "--help"]) == 0
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "(default: 20)" in out  # --max-depth
    assert "(default: 32)" in out  # --concurrency


# -- the wrong kind of path --------------------------------------------------------------------


@pytest.mark.parametrize("command", ["stats", "resume", "check", "forget", "rebuild"])
def test_a_regular_file_is_not_a_state_directory(tmp_path, capsys, command):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    argv = [command, str(f)] + (["http://a.test/"] if command in ("check", "forget") else [])
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"{f} is a file, not a bloomcrawl state directory" in err
    assert "not found" not in err


def test_stats_of_a_fleet_directory_without_worker_states_is_one_line(tmp_path, capsys):
    """(``stats`` of a real fleet: tests/fleet/test_fleet_limits.py.)"""
    root = tmp_path / "fleet"
    for i in range(2):
        (root / f"worker-{i}").mkdir(parents=True)
    (root / "fleet.json").write_text('{"crawl_id": "x", "workers": 2, "redis": "local"}')
    assert main(["stats", str(root)]) == 1
    err = capsys.readouterr().err
    assert err == f"bloomcrawl: error: {root} is not a fleet directory (no worker-I state " \
        "directories)\n"


# -- the status line ---------------------------------------------------------------------------


BIG = {"rate": 12345.6, "fetched": 987_654_321, "queued": 123_456_789_012, "in_flight": 256,
       "hosts": 98_765_432, "errors": 45_678_901, "failed": 45_678_901, "new": 987_654_321_098,
       "repeats": 987_654_321_098, "false_positives": 12_345_678, "fill": 0.999}


@pytest.mark.parametrize("tty", [True, False])
def test_the_status_line_fits_80_columns(tty):
    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    stream = Stream()
    progress = Progress(stream, interval=0.0, plain_interval=0.0)
    progress.update(BIG, now=1.0)
    progress.update({**BIG, "rate": 0.0, "fill": 0.00001}, now=2.0)
    lines = [ln for ln in re.split(r"[\r\n]", stream.getvalue()) if ln.strip()]
    assert lines and all(len(ln) <= 80 for ln in lines), [len(ln) for ln in lines]
    assert len(format_status(BIG)) <= 80


def test_the_fleet_status_line_fits_80_columns():
    from crawler.fleet.supervisor import format_fleet

    line = format_fleet({i: BIG for i in range(999)}, {"idle": 999, "forwarded": 10**12}, 999,
                        999)
    assert len(line) <= 80, line


@pytest.mark.parametrize("argv, codes", [
    (["check", "STATE", *[f"http://h.test/{i}" for i in range(2000)]], {141}),
    (["--help"], {0, 141}),  # argparse itself ignores a failed write of the help
])
def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path, argv, codes):
    """``bloomcrawl ... | head``: no 'error: Broken pipe', no traceback; 141 as if
    killed by SIGPIPE."""
    import subprocess
    import sys

    from dedup import UrlSeen
    from tests.support.helpers import cli_env

    with UrlSeen(tmp_path / "state", capacity=1000, shards=2):
        pass
    argv = [str(tmp_path / "state") if a == "STATE" else a for a in argv]
    proc = subprocess.Popen([sys.executable, "-m", "crawler", *argv], env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line
    _, err = proc.communicate(timeout=60)
    assert err.decode() == ""
    assert proc.returncode in codes  # 141 = 128 + SIGPIPE
