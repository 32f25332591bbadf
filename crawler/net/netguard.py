"""Keep the crawler out of private networks (SSRF guard).

Why at connect time: checking a URL's hostname before fetching is not enough,
because DNS decides where a name points and can change its answer between the
check and the connect (rebinding), or point a public-looking name at 127.0.0.1
or 169.254.169.254. So the guard sits inside aiohttp's connector: every
address a name resolves to passes `is_public_address` before aiohttp may
connect to it, and literal-IP hosts (which aiohttp never hands to a resolver)
are checked by `check_literal_host` on every hop.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from crawler.config.ipliteral import IPAddress, ip_literal
from crawler.net.refused import refusal

__all__ = [
    "GuardedResolver",
    "PrivateAddressError",
    "check_literal_host",
    "is_public_address",
]

_SHARED_V4 = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # well-known NAT64 prefix embeds an IPv4


def _embedded_v4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address tunnels to, if any (mapped, 6to4, NAT64)."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def is_public_address(ip: str | IPAddress) -> bool:
    """True only for a globally routable unicast address; anything unparsable is refused."""
    try:
        addr = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:  # ::ffff:a.b.c.d *is* a.b.c.d on a dual-stack socket
            return is_public_address(addr.ipv4_mapped)
        inner = _embedded_v4(addr)
        if inner is not None and not is_public_address(inner):
            return False
    if (
        addr.is_private
        or addr.is_loopback
        or addr.is_link_local
        or addr.is_multicast
        or addr.is_reserved
        or addr.is_unspecified
        or not addr.is_global
    ):
        return False
    return not (isinstance(addr, ipaddress.IPv4Address) and addr in _SHARED_V4)


class PrivateAddressError(OSError):
    """A target resolved only to addresses the crawler must not connect to."""


def check_literal_host(host: str) -> str | None:
    """Refusal reason when `host` is a literal non-public IP address, else None.

    Names are left to `GuardedResolver`; this covers what aiohttp never resolves.
    """
    addr = ip_literal(host)
    if addr is not None and not is_public_address(addr):
        return refusal(addr)
    return None


class GuardedResolver(AbstractResolver):
    """Wraps a resolver and drops every non-public address it returns.

    When nothing public is left the lookup fails with PrivateAddressError, which
    aiohttp reports as a connector error before any socket is opened.
    """

    def __init__(self, inner: AbstractResolver | None = None, *,
                 allow: Iterable[tuple[str, int | None]] = ()) -> None:
        """``allow``: ``(host, port)`` endpoints passed unguarded, the proxies the user
        configured (a proxy on loopback is the user's choice, not an SSRF target)."""
        self._inner = inner if inner is not None else DefaultResolver()
        self._allow = frozenset(allow)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        if self._allow and (host.lower(), port) in self._allow:
            return results
        public = [r for r in results if is_public_address(r["host"].split("%", 1)[0])]
        if not public:
            first = results[0]["host"] if results else host
            raise PrivateAddressError(refusal(first))
        return public

    async def close(self) -> None:
        await self._inner.close()
