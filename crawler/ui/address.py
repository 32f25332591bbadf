"""Where the dashboard listens: ``--ui [HOST:]PORT`` parsed and bound, loopback unless
``--ui-public``. Apart from ``crawler.ui.live`` so that a command without ``--ui``
never imports aiohttp.web."""

from __future__ import annotations

import socket

from crawler.config.ipliteral import ip_literal
from crawler.core.state.state import CrawlError

__all__ = ["UiAddressError", "bind_ui", "parse_ui_address", "ui_url"]


class UiAddressError(ValueError):
    """A ``--ui`` value that is malformed or not allowed (a usage error)."""


def parse_ui_address(text: str, *, public: bool = False) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[IPV6]:PORT`` -> (host, port); loopback by default.

    A host that is not loopback (``localhost``, 127.0.0.0/8, ::1) is refused
    unless ``public``: the dashboard would show the crawl to the network.
    """
    text = text.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise UiAddressError(f"--ui {text!r}: expected PORT or HOST:PORT") from None
    if not 0 <= port <= 65535:
        raise UiAddressError(f"--ui {text!r}: port must be 0..65535")
    if not host:
        raise UiAddressError(f"--ui {text!r}: empty host")
    if not public and not _is_loopback(host):
        raise UiAddressError(
            f"--ui {text}: {host} is not a loopback address, and the dashboard shows the "
            "crawl's URLs, hosts and errors to anyone who can reach it; add --ui-public "
            "to serve it there anyway (it is read-only)")
    return host, port


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    addr = ip_literal(host)
    return addr is not None and addr.is_loopback


def bind_ui(host: str, port: int) -> socket.socket:
    """A listening socket for the dashboard, bound before the crawl starts, so a port
    in use is a clear error that leaves nothing behind."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CrawlError(f"--ui {host}:{port}: cannot resolve {host}: {exc.strerror}") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise CrawlError(f"cannot serve the dashboard on {host}:{port}: "
                         f"{exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def ui_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    if ":" in host:
        host = f"[{host}]"
    elif host == "0.0.0.0":
        host = "127.0.0.1"
    return f"http://{host}:{port}/"
