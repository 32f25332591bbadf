"""Headless Chromium driven over the DevTools protocol (an aiohttp websocket): load a
page, read its rendered DOM, and list every request it made.

Why the protocol and not ``--dump-dom``: the test waits for the charts by polling
the live DOM (no fixed sleep, no virtual time), and the Network events name every
request the page sent, so "nothing left the machine" is checked, not assumed.
The browser tests skip when chromium is missing, except with
``BLOOMCRAWL_REQUIRE_CHROMIUM=1`` (CI: .ci/run installs it), where they fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

# Without the background-networking flags Chromium reaches out to Google services.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync",
                  "--disable-default-apps", "--disable-extensions", "--mute-audio",
                  "--hide-scrollbars"]


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def require_chromium() -> str:
    binary = chromium_binary()
    if binary is None:
        msg = "chromium is not installed (apt-get install chromium)"
        if os.environ.get("BLOOMCRAWL_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"{msg}; BLOOMCRAWL_REQUIRE_CHROMIUM=1 requires it", pytrace=False)
        pytest.skip(msg)
    return binary


class Page:
    """One tab, over its DevTools websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.requests: list[str] = []  # every URL the page asked for (Network events)
        self.console_errors: list[str] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            m = json.loads(msg.data)
            if "id" in m:
                fut = self._waiting.pop(m["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(m)
            elif m.get("method") == "Network.requestWillBeSent":
                self.requests.append(m["params"]["request"]["url"])
            elif m.get("method") == "Runtime.exceptionThrown":
                self.console_errors.append(json.dumps(m["params"]["exceptionDetails"])[:500])

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        i = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[i] = fut
        await self.ws.send_str(json.dumps({"id": i, "method": method, "params": params}))
        m = await asyncio.wait_for(fut, 30)
        if "error" in m:
            raise RuntimeError(f"{method}: {m['error']}")
        return m.get("result", {})

    async def open(self, url: str) -> None:
        await self.call("Network.enable")
        await self.call("Runtime.enable")
        await self.call("Page.enable")
        await self.call("Page.navigate", url=url)

    async def eval(self, expression: str) -> Any:
        r = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Page]:
    """Headless Chromium (its own fresh profile) with one blank tab, for a block."""
    binary = require_chromium()
    with tempfile.TemporaryDirectory(prefix="bloomcrawl-chromium-") as profile:
        proc = await asyncio.create_subprocess_exec(
            binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
            "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
            "about:blank", stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        assert proc.stderr is not None
        drain: asyncio.Task[None] | None = None
        try:
            port = None
            async with asyncio.timeout(60):
                while port is None:
                    line = await proc.stderr.readline()
                    if not line:
                        raise RuntimeError("chromium exited before its DevTools port opened")
                    m = re.search(rb"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
                    if m:
                        port = int(m.group(1))

            async def _drain() -> None:
                assert proc.stderr is not None
                while await proc.stderr.read(65536):
                    pass
            drain = asyncio.create_task(_drain())
            async with aiohttp.ClientSession() as http:
                async with asyncio.timeout(30):
                    while True:
                        async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
                            targets = await r.json()
                        pages = [t for t in targets if t.get("type") == "page"]
                        if pages:
                            break
                        await asyncio.sleep(0.05)
                async with http.ws_connect(pages[0]["webSocketDebuggerUrl"],
                                           max_msg_size=0) as ws:
                    page = Page(ws)
                    try:
                        yield page
                    finally:
                        await page.close()
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            if drain is not None:
                drain.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await drain


async def wait_for(page: Page, expression: str, *, timeout: float = 30.0) -> Any:
    """Poll ``expression`` in the page until it is truthy; returns its value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await page.eval(expression)
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {expression}")
        await asyncio.sleep(0.1)


# What the charts drew, read off the rendered DOM: points of each line, bars of each
# bar chart (with their data attributes), as JSON.
CHARTS_JS = """JSON.stringify(Object.fromEntries([...document.querySelectorAll('svg[data-chart]')]
  .map(s => [s.dataset.chart, {
     points: [...s.querySelectorAll('path[data-points]')].map(p => +p.dataset.points),
     bars: [...s.querySelectorAll('rect[data-value]')]
             .map(r => [r.dataset.label, +r.dataset.value]),
     ticks: s.querySelectorAll('text').length}])))"""


def charts_when(condition: str) -> str:
    """An expression: what the charts drew (``CHARTS_JS``, as ``c``) as JSON once
    ``condition`` holds of it, else '' (for ``wait_for``)."""
    return (f"(() => {{ const c = JSON.parse({CHARTS_JS}); "
            f"return ({condition}) ? JSON.stringify(c) : ''; }})()")
