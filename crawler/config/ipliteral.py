"""Whether a host is an IP address written out (an IP literal), and which one.

Why one function: the scope (an ``--allow-domain`` given as an address is not a
domain name), the private-address guard (a literal is never handed to a
resolver, so it is judged on its own), the fetch (a proxied target named by a
literal needs no lookup) and the lean client (a literal is connected to as it is)
must agree on what counts as a literal. It sits in ``crawler.config``, the lowest
layer, because the scope is there and the others are above it.
"""

from __future__ import annotations

import functools
import ipaddress

__all__ = ["IPAddress", "ip_literal"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.lru_cache(maxsize=4096)
def ip_literal(host: str) -> IPAddress | None:
    """The address ``host`` spells when it is an IP literal, else None.

    Accepts ``10.0.0.1``, ``::1`` and the bracketed ``[::1]`` of a URL's authority,
    an IPv6 zone (``fe80::1%eth0``) included; everything else (names, ports,
    ``0x7f.1``, ``1.2.3``, a leading zero) is not one: a resolver decides those.
    Called on every fetch, twice for a literal (the URL, the guard): the answers
    are cached per host, and a name is kept off the exception path."""
    if host[:1] == "[" and host[-1:] == "]":
        host = host[1:-1]
    elif ":" not in host and not host[-1:].isdigit():
        return None  # a name ("example.com"): a dotted IPv4 address ends in a digit
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None
