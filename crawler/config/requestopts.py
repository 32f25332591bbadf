"""What the user says every request carries, checked as it is read: header lines
(``--header``) and proxy URLs (``--proxy``, ``HTTP(S)_PROXY``).

Why here, in the crawler's lowest layer: a bad value is a usage error found when
the settings are read (exit 2, naming the value), long before a fetcher exists;
the fetcher takes the checked values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from yarl import URL

__all__ = ["check_proxy_url", "parse_header_line"]

# RFC 9110 token characters: what a header name may be made of
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789"
                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def parse_header_line(line: str) -> tuple[str, str]:
    """``(name, value)`` from a ``Name: value`` line given with ``--header``; ValueError
    (naming the line) for anything a server would read as something else: an empty or
    non-token name, a control character in the value (CR/LF would inject headers), or
    User-Agent, which has ``--user-agent`` (robots.txt matching follows it)."""
    name, sep, value = line.partition(":")
    name = name.strip()
    value = value.strip(" \t")
    if not sep or not name or not all(c in _TCHAR for c in name):
        raise ValueError(f"not a header 'Name: value': {line!r}")
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in value):
        raise ValueError(f"control character in the value of header {name}: {line!r}")
    if name.lower() == "user-agent":
        raise ValueError("set the user agent with --user-agent (or [fetch] user_agent), "
                         f"not a header: {line!r}")
    return name, value


def check_proxy_url(text: str) -> URL:
    """A ``--proxy`` value as a URL, or ValueError naming it."""
    from yarl import URL  # here: the commands that never see a proxy need not load it

    try:
        url = None if any(c.isspace() or ord(c) < 32 for c in text) else URL(text)
    except (ValueError, TypeError):
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.raw_host \
            or url.path not in ("", "/") or url.query_string or url.fragment:
        raise ValueError(f"not a proxy URL http(s)://HOST:PORT: {text!r}")
    return url
