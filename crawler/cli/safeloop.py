"""uvloop, without the one write whose failure aborts the process.

Why: libuv wakes its loop from another thread (and from a signal handler) by
writing to an eventfd (``uv_async_send``), and if that write fails it calls
``abort()``: the process dies by SIGABRT with no message and no chance to stop
cleanly. With write failures injected at random (libfiu: ``fiu-run -x -c
"enable_random name=posix/io/rw/write,probability=0.02"``) every uvloop crawl
died so (issue 36, item 9), while asyncio's own loop stopped with an error. A
crawl wakes its loop from threads all the time: every ``asyncio.to_thread`` (an
fsync, a shard snapshot, a WARC record built) ends with
``loop.call_soon_threadsafe``, and uvloop resolves names, and the addresses of
``create_connection``, on libuv's thread pool, whose results come back the same way.

So ``Loop`` routes all of these around libuv: ``call_soon_threadsafe`` queues
the call and writes a byte to a socket pair this module owns, whose write errors are
ignored (a poll every ``POLL`` seconds runs what a failed write did not wake
for); names are resolved by ``socket.getaddrinfo`` in the default executor
(whose result comes back through ``call_soon_threadsafe``), numeric addresses at
once; ``create_connection`` to a host connects a socket itself; signal handlers
are Python's, calling ``call_soon_threadsafe``. Everything else is uvloop's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import signal
import socket
from collections.abc import Callable
from contextvars import Context
from typing import Any

import uvloop

from crawler.config.ipliteral import ip_literal

__all__ = ["POLL", "Loop", "new_event_loop"]

# Seconds between the loop's looks at the queued calls a failed wake-up write did not
# announce: the most such a failure delays them, and the only cost of the poll.
POLL = 0.1
_WAKE_TRIES = 3


def _numeric(host: str | bytes | None) -> bool:
    """An address (or None: any/loopback), which needs no name lookup."""
    if host is None:
        return True
    text = host.decode("ascii", "replace") if isinstance(host, bytes) else host
    return ip_literal(text.partition("%")[0]) is not None


class Loop(uvloop.Loop):  # type: ignore[misc]
    """uvloop whose wake-ups from other threads and signals never write to libuv's
    eventfd (the module docstring says why)."""

    def __init__(self) -> None:
        super().__init__()
        self._calls: collections.deque[tuple[asyncio.Handle, Callable[..., object],
                                             tuple[Any, ...], Context | None]] = \
            collections.deque()
        # a socket pair, as asyncio's own self-pipe: a write after close() fails on the
        # closed socket object instead of landing in a file that reused the number
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._woken = False  # a wake-up byte is on its way: the next call need not send one
        self.add_reader(self._wake_r.fileno(), self._on_wake)
        self._poll: asyncio.TimerHandle | None = self.call_later(POLL, self._on_poll)
        self._signals: dict[int, Any] = {}

    # -- calls from other threads ----------------------------------------------------

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any,
                             context: Context | None = None) -> asyncio.Handle:
        """Like asyncio's: ``callback(*args)`` soon, in the loop's thread. A cancel of
        the handle is honoured until the loop takes the call from the queue."""
        handle = asyncio.Handle(callback, args, self, context)
        self._calls.append((handle, callback, args, context))
        if not self._woken:
            self._woken = True
            self._wake()
        return handle

    def _wake(self) -> None:
        for _ in range(_WAKE_TRIES):
            try:
                self._wake_w.send(b"\0")
                return
            except BlockingIOError:  # the pipe is full: the loop is being woken
                return
            except OSError:  # failed (closed, or an injected fault): the poll runs it
                continue

    def _on_wake(self) -> None:
        with contextlib.suppress(OSError):  # (bytes left over wake it again: harmless)
            self._wake_r.recv(4096)
        self._run_calls()

    def _on_poll(self) -> None:
        self._poll = self.call_later(POLL, self._on_poll)
        self._run_calls()

    def _run_calls(self) -> None:
        # cleared before the queue is read: a call queued after this sends its own byte
        self._woken = False
        calls = self._calls
        while calls:
            handle, callback, args, context = calls.popleft()
            if not handle.cancelled():
                self.call_soon(callback, *args, context=context)

    # -- names and connections -----------------------------------------------------------

    async def getaddrinfo(self, host: Any, port: Any, *, family: int = 0, type: int = 0,
                          proto: int = 0, flags: int = 0) -> list[Any]:
        """``socket.getaddrinfo``: at once for an address, in the default executor for
        a name (never on libuv's thread pool)."""
        if _numeric(host):
            return socket.getaddrinfo(host, port, family, type, proto,
                                      flags | socket.AI_NUMERICHOST)
        return await self.run_in_executor(None, functools.partial(
            socket.getaddrinfo, host, port, family, type, proto, flags))

    async def create_connection(self, protocol_factory: Callable[[], asyncio.Protocol],
                                host: Any = None, port: Any = None, *,
                                sock: socket.socket | None = None, family: int = 0,
                                proto: int = 0, flags: int = 0, **kwargs: Any) -> Any:
        """uvloop's, on a socket connected here when given a host: uvloop would resolve
        even an address on libuv's thread pool. Each address is tried in turn."""
        if host is None or sock is not None or kwargs.get("local_addr") is not None:
            return await super().create_connection(
                protocol_factory, host, port, sock=sock, family=family, proto=proto,
                flags=flags, **kwargs)
        infos = await self.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM,
                                       proto=proto, flags=flags)
        if kwargs.get("ssl") and kwargs.get("server_hostname") is None:
            kwargs["server_hostname"] = host
        errors: list[OSError] = []
        for fam, kind, pro, _, address in infos:
            conn = socket.socket(fam, kind, pro)
            try:
                conn.setblocking(False)
                await self.sock_connect(conn, address)
            except OSError as exc:
                conn.close()
                errors.append(exc)
                continue
            except BaseException:
                conn.close()
                raise
            return await super().create_connection(protocol_factory, sock=conn, **kwargs)
        if len(errors) == 1:
            raise errors[0]
        raise OSError(f"Multiple exceptions: {', '.join(map(str, errors))}" if errors
                      else f"getaddrinfo({host!r}) returned no address")

    # -- signals -------------------------------------------------------------------------

    def add_signal_handler(self, sig: int, callback: Callable[..., object],
                           *args: Any) -> None:
        """``callback(*args)`` in the loop when ``sig`` arrives (main thread only): a
        Python signal handler that calls ``call_soon_threadsafe``."""
        previous = signal.signal(sig, lambda _n, _f: self.call_soon_threadsafe(callback, *args))
        self._signals.setdefault(sig, previous)

    def remove_signal_handler(self, sig: int) -> bool:
        if sig not in self._signals:
            return False
        signal.signal(sig, self._signals.pop(sig))
        return True

    def close(self) -> None:
        for sig in list(self._signals):
            self.remove_signal_handler(sig)
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None
        if self._wake_r.fileno() >= 0:
            self.remove_reader(self._wake_r.fileno())
            self._wake_r.close()
            self._wake_w.close()
        super().close()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new ``Loop`` (``asyncio.Runner``'s loop_factory)."""
    return Loop()
