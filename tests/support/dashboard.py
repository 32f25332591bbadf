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
                       timeout: float = 60.0) -> dict:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        doc = await stats(http, url)
        if "totals" in doc and cond(doc):
            return doc
        if loop.time() >= deadline:
            raise AssertionError(f"timed out waiting for {what}: {json.dumps(doc)[:2000]}")
        await asyncio.sleep(0.2)


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
