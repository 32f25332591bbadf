"""uvloop as ``crawler.cli.safeloop`` runs it: wake-ups from threads and signals, name
lookups and connections never go through libuv's eventfd write, whose failure aborts
the process (tests/crawler/core/outputs/test_write_faults.py injects such failures into crawls)."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import threading

import pytest

pytest.importorskip("uvloop")

from aiohttp import web

from crawler.cli import safeloop
from crawler.cli.loop import run
from tests.support.faultserver import serve


def on_safeloop(coro):
    return run(coro, "uvloop")


def test_calls_from_threads_run_in_the_loop_in_order():
    async def main() -> tuple[list[int], set[int], int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, safeloop.Loop)
        got: list[int] = []
        threads: set[int] = set()
        done = asyncio.Event()

        def note(i: int) -> None:
            got.append(i)
            threads.add(threading.get_ident())
            if i == 999:
                done.set()

        def send() -> None:
            for i in range(1000):
                loop.call_soon_threadsafe(note, i)

        await asyncio.to_thread(send)
        cancelled = loop.call_soon_threadsafe(got.append, -1)
        cancelled.cancel()  # before the loop took it: never run
        await asyncio.wait_for(done.wait(), 10)
        await asyncio.sleep(safeloop.POLL * 2)
        return got, threads, threading.get_ident()

    got, threads, me = on_safeloop(main())
    assert got == list(range(1000)) and threads == {me}


def test_a_wake_up_whose_write_fails_still_runs_its_call(monkeypatch):
    """The write that wakes the loop fails (an injected fault): the call runs at the
    loop's next poll instead of never, and nothing aborts."""
    tries: list[int] = []

    def failing_send(self: socket.socket, data: bytes, *args: object) -> int:
        tries.append(len(data))
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    async def main() -> float:
        loop = asyncio.get_running_loop()
        ran = asyncio.Event()
        monkeypatch.setattr(socket.socket, "send", failing_send)
        start = loop.time()
        threading.Thread(target=loop.call_soon_threadsafe, args=(ran.set,)).start()
        await asyncio.wait_for(ran.wait(), 10)
        return loop.time() - start

    took = on_safeloop(main())
    assert tries and took < 10


def test_names_resolve_and_connect_without_libuv_and_addresses_at_once():
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)
        assert any(info[4][0] in ("127.0.0.1", "::1") for info in infos)
        assert (await loop.getaddrinfo("127.0.0.1", "80", type=socket.SOCK_STREAM))[0][4] == \
            ("127.0.0.1", 80)
        app = web.Application()
        app.router.add_get("/", handler)
        out = []
        async with serve(app) as base:
            port = int(base.rsplit(":", 1)[1])
            for host in ("localhost", "127.0.0.1"):
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                out.append(await reader.read())
                writer.close()
                await writer.wait_closed()
        with pytest.raises(OSError):  # nothing listens there
            await asyncio.open_connection("127.0.0.1", 9)
        return out

    for answer in on_safeloop(main()):
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello")


def test_signal_handlers_run_in_the_loop_and_are_restored():
    before = signal.getsignal(signal.SIGUSR1)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        got = asyncio.Queue()
        loop.add_signal_handler(signal.SIGUSR1, got.put_nowait, "usr1")
        os.kill(os.getpid(), signal.SIGUSR1)
        assert await asyncio.wait_for(got.get(), 10) == "usr1"
        assert loop.remove_signal_handler(signal.SIGUSR1)
        return 0

    on_safeloop(main())
    assert signal.getsignal(signal.SIGUSR1) == before
