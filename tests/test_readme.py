"""The README's commands against the command line's own --help (issue 37): every
``bloomcrawl ...`` / ``python -m crawler ...`` command in README.md, in code blocks
and inline code, names a command that exists and only flags that command's --help
lists; a flag mentioned on its own (``--allow-private`` in inline code) is one some command's
--help lists. So a renamed or removed flag or command fails CI until the README
follows.

Nothing here knows the README's layout: any Markdown with fenced blocks and inline
code is read the same way (the README is restructured from time to time).
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

from crawler.cli.main import COMMANDS, main

README = Path(__file__).resolve().parent.parent / "README.md"

_FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
_INLINE = re.compile(r"(`+)(.+?)\1", re.S)
# a command: its program, then the rest of the line (the first word is the command)
_PROGRAM = re.compile(r"(?:^|[\s(;&|$`/])(?:bloomcrawl|python3? -m crawler)[ \t]+(\S.*)")
# a flag: a word that starts with - or --, after a space, a bracket or the start
_FLAG = re.compile(r"(?:^|(?<=[\s\[|(]))(--?[A-Za-z][A-Za-z0-9-]*)")
# the end of one shell command: a comment, a pipe, ;, && or ||
_END = re.compile(r"\s#|\s\|\|?\s|\s&&\s|;")
# an option line of argparse's --help: "  -o OUT, --output OUT  ..." or "  --state  ..."
_OPTION = re.compile(r"^ {2}(-[A-Za-z0-9-]+)(?: [^,\s]+)?(?:, (--[A-Za-z0-9-]+))?", re.M)


@cache
def help_flags(command: str | None) -> frozenset[str]:
    """The flags ``bloomcrawl [COMMAND] --help`` lists, as printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([command, "--help"] if command else ["--help"]) == 0
    return frozenset(f for pair in _OPTION.findall(out.getvalue()) for f in pair if f)


def all_flags() -> frozenset[str]:
    return frozenset().union(*(help_flags(c) for c in (None, *COMMANDS)))


def code(markdown: str) -> list[tuple[int, str, bool]]:
    """``(line number, text, in a block)`` of every fenced block line and inline span,
    in the order of the document."""
    out = []
    blocks = []
    for m in _FENCE.finditer(markdown):
        first = markdown.count("\n", 0, m.start(2)) + 1
        blocks.append((m.start(), m.end()))
        out += [(first + i, line, True) for i, line in enumerate(m.group(2).split("\n"))]
    prose, last = [], 0
    for start, end in blocks:
        prose.append((last, markdown[last:start]))
        last = end
    prose.append((last, markdown[last:]))
    for offset, text in prose:
        out += [(markdown.count("\n", 0, offset + m.start()) + 1,
                 " ".join(m.group(2).split()), False)  # one line, however wrapped
                for m in _INLINE.finditer(text)]
    return sorted(out, key=lambda item: item[0])


def commands(markdown: str) -> Iterator[tuple[int, str | None, list[str], str]]:
    """``(line, command or None for the program itself, flags, text)`` of every command
    in ``markdown``; a block's command goes on over indented lines (a usage synopsis)
    and lines after a trailing backslash. A flag on its own in inline code (``--warc
    FILE``) is ``(line, "*", [flag], text)``: some command must take it."""
    current: tuple[int, str | None] | None = None
    carry = False
    for lineno, text, block in code(markdown):
        found = list(_PROGRAM.finditer(text))
        words = text.split()
        if not found and not block and len(words) > 1 and words[0] in COMMANDS:
            found = list(_PROGRAM.finditer("bloomcrawl " + text))  # `stats --json`
        if found:
            current = None
            for m in found:
                rest = _END.split(" " + m.group(1), maxsplit=1)[0]
                word = rest.split()[0] if rest.split() else ""
                if re.fullmatch(r"[a-z][a-z-]*", word):
                    current = (lineno, word)
                elif word.startswith("-") or re.fullmatch(r"[A-Z_]+", word):
                    current = (lineno, None)  # the program's own flags, or COMMAND
                else:
                    current = None  # output ("bloomcrawl: error: ..."), not a command
                    continue
                yield lineno, current[1], _FLAG.findall(rest), text
            carry = text.rstrip().endswith("\\")
        elif block and current is not None and (carry or text[:1].isspace()) and \
                not text.lstrip().startswith("#"):
            yield lineno, current[1], _FLAG.findall(_END.split(" " + text, maxsplit=1)[0]), text
            carry = text.rstrip().endswith("\\")
        elif not block and text.startswith("--"):
            yield lineno, "*", _FLAG.findall(text)[:1], text
        elif block:
            current, carry = None, False


def problems(markdown: str, flags_of: Callable[[str | None], frozenset[str]] = help_flags,
             every_flag: Callable[[], frozenset[str]] = all_flags) -> list[str]:
    """What the README says that the command line does not have."""
    out = []
    for lineno, command, flags, text in commands(markdown):
        if command not in (None, "*") and command not in COMMANDS:
            out.append(f"README.md:{lineno}: no command {command!r}: {text.strip()}")
            continue
        known = every_flag() if command == "*" else flags_of(command) | flags_of(None)
        for flag in flags:
            if flag not in known:
                where = "any command's" if command == "*" else f"'{command or ''}'".replace(
                    "''", "the program's")
                out.append(f"README.md:{lineno}: {flag} is not in {where} --help: "
                           f"{text.strip()}")
    return out


def test_every_command_and_flag_of_the_readme_is_in_the_help():
    text = README.read_text()
    found = list(commands(text))
    assert len(found) > 20  # the README's commands were found at all
    assert problems(text) == []


@pytest.mark.parametrize("old, new", [
    ("--allow-private", "--allow-privat"),  # a flag renamed in the README
    ("bloomcrawl stats", "bloomcrawl status"),  # a command renamed
])
def test_a_renamed_flag_or_command_fails(old, new):
    text = README.read_text()
    assert old in text
    assert problems(text.replace(old, new))


def test_a_flag_the_command_line_renamed_fails_where_the_readme_uses_it():
    """The other way round: the README unchanged, the flag gone from --help."""
    def renamed(command: str | None) -> frozenset[str]:
        return help_flags(command) - {"--max-pages"}

    def every() -> frozenset[str]:
        return all_flags() - {"--max-pages"}

    found = problems(README.read_text(), renamed, every)
    assert found and all("--max-pages" in p for p in found)


def test_what_counts_as_a_command_and_a_flag():
    markdown = """
Run `bloomcrawl crawl seeds.txt --state s --delay 0` or `--warc FILE`; `[crawl] delay`.

```
bloomcrawl crawl SEEDS --state DIR [--max-pages N]
                 [--allow-private]   # a comment --not-a-flag
bloomcrawl stats DIR --json | head -n 3
bloomcrawl: error: --this is output
python -m crawler resume s --quiet && ls --all
pip install --upgrade bloomcrawl
```
"""
    got = [(c, f) for _, c, f, _ in commands(markdown)]
    assert got == [("crawl", ["--state", "--delay"]), ("*", ["--warc"]),
                   ("crawl", ["--state", "--max-pages"]), ("crawl", ["--allow-private"]),
                   ("stats", ["--json"]), ("resume", ["--quiet"])]
    assert problems(markdown) == []
    assert problems(markdown.replace("--json", "--jason")) == [
        "README.md:7: --jason is not in 'stats' --help: bloomcrawl stats DIR --jason | head "
        "-n 3"]
