"""``crawler.config.ipliteral.ip_literal``: the one test of "is this host an IP address
written out" that the scope, the private-address guard, the fetch and the lean
client share."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest

import crawler
from crawler.config.ipliteral import ip_literal


@pytest.mark.parametrize(("host", "address"), [
    ("127.0.0.1", "127.0.0.1"), ("8.8.8.8", "8.8.8.8"), ("0.0.0.0", "0.0.0.0"),
    ("::1", "::1"), ("[::1]", "::1"), ("[2001:db8::1]", "2001:db8::1"),
    ("::ffff:127.0.0.1", "::ffff:7f00:1"), ("fe80::1%eth0", "fe80::1%eth0"),
    ("[fe80::1%eth0]", "fe80::1%eth0"), ("FE80::A", "fe80::a"),
])  # fmt: skip
def test_an_ip_literal_is_the_address_it_spells(host: str, address: str) -> None:
    assert ip_literal(host) == ipaddress.ip_address(address)


@pytest.mark.parametrize("host", [
    "example.com", "localhost", "host1", "1.example", "xn--bcher-kva.example", "",
    "127.0.0.1:80", "[127.0.0.1]:80", "1.2.3", "1.2.3.4.", "01.2.3.4", "256.1.1.1",
    "0x7f.0.0.1", "2130706433", "[::1", "::1]", "[]", "[example.com]", ":::", "1.2.3.4 ",
])  # fmt: skip
def test_anything_else_is_left_to_a_resolver(host: str) -> None:
    assert ip_literal(host) is None


def test_no_other_crawler_module_parses_an_address() -> None:
    """The scope, the guard, the fetch, the lean client and the CLI's loop all ask
    ``ip_literal``: no second parser of IP literals to disagree with it (the loop's
    "needs no name lookup" test had its own until issue 38)."""
    root = Path(crawler.__file__).parent
    own = root / "config" / "ipliteral.py"
    parsers = [str(p.relative_to(root)) for p in sorted(root.rglob("*.py"))
               if p != own and re.search(r"ip_address\(|IPv[46]Address\(", p.read_text())]
    # the guard judges addresses (resolved or literal), it does not parse hosts
    assert parsers == ["net/netguard.py"]
