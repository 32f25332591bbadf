"""Redis URLs that may carry a password: shown and stored only without it."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

_PASSWORD_PARAM = re.compile(r"(?i)([?&]password=)[^&#]*")


def redact(url: str) -> str:
    """``url`` with any password (in the userinfo or a ``password=`` query) replaced by ***."""
    scheme, sep, rest = url.partition("://")
    if sep:
        end = len(rest)
        for c in "/?#":
            pos = rest.find(c)
            if pos != -1:
                end = min(end, pos)
        authority, tail = rest[:end], rest[end:]
        if "@" in authority:
            userinfo, _, hostport = authority.rpartition("@")
            user, colon, _ = userinfo.partition(":")
            # redis://secret@host is a bare password to redis-py: hide it too.
            authority = f"{user}:***@{hostport}" if colon else f"***@{hostport}"
        url = f"{scheme}://{authority}{tail}"
    return _PASSWORD_PARAM.sub(r"\1***", url)


def has_password(url: str) -> bool:
    """Does ``url`` carry a password (userinfo or ``password=``)? Such a URL is never stored."""
    return password_of(url) is not None


def password_of(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    secrets = [v for k, v in parse_qsl(parts.query) if k.lower() == "password"]
    if parts.password:
        secrets.append(parts.password)
    elif parts.username and "@" in parts.netloc:
        secrets.append(parts.username)
    return secrets[0] if secrets else None

