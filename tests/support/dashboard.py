"""Driving a crawl's dashboard from a test: its URL (read off the crawl's stderr), its
JSON polled until a condition holds, and the crawl stopped."""

from __future__ import annotations

import asyncio
import json
import re
import signal

import aiohttp

# a crawl of this site at 0.1 s between fetches per host runs for ~10 s or more
SLOW = ["--delay", "0.1", "--per-host", "1", "--allow-private", "--no-sitemaps"]


async def dashboard_url(proc: asyncio.subprocess.Process) -> str:
    assert proc.stderr is not None
    async with asyncio.timeout(60):
        while True:
            line = (await proc.stderr.readline()).decode()
            if not line:
                raise AssertionError("the crawl exited before serving its dashboard")
            m = re.search(r"dashboard at (http://\S+/)", line)
            if m:
                return m.group(1)


async def stats(http: aiohttp.ClientSession, url: str) -> dict:
    async with http.get(url + "api/stats") as r:
        assert r.status == 200
        return await r.json()


async def until_stats(http: aiohttp.ClientSession, url: str, cond, what: str,
                       timeout: float = 60.0,
                       proc: asyncio.subprocess.Process | None = None) -> dict:
    """Poll until ``cond`` holds; if the dashboard goes away, say why from ``proc``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            doc = await stats(http, url)
        except aiohttp.ClientConnectionError as e:
            if proc is None:
                raise
            err = await stop(proc)
            raise AssertionError(f"the dashboard went away waiting for {what} "
                                 f"(exit {proc.returncode}); stderr:\n{err[-4000:]}") from e
        if "totals" in doc and cond(doc):
            return doc
        if loop.time() >= deadline:
            raise AssertionError(f"timed out waiting for {what}: {json.dumps(doc)[:2000]}")
        await asyncio.sleep(0.2)


async def stop(proc: asyncio.subprocess.Process) -> str:
    """SIGINT, then wait (kill after 60 s); the rest of its stderr."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        _, err = await proc.communicate()
    return (err or b"").decode(errors="replace")
