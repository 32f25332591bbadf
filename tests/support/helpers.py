"""Helpers shared by the crawler and fleet tests: fast crawl settings, config files,
seed files, and the ``bloomcrawl`` command line run as a child process."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from crawler.config.settings import Settings

REPO = Path(__file__).resolve().parent.parent.parent


# -- waiting for an event ------------------------------------------------------------------

async def until(condition, *, timeout: float = 10.0, what: str = "condition") -> None:
    """Wait until ``condition()`` is true (checked every few ms), or fail after ``timeout``.

    For "it has not happened" claims: wait for the event that settles the question
    (a handler finished, an error was logged), then assert, instead of asserting
    "not yet" after a fixed sleep, which passes whenever the code is merely slow.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.005)


async def until_async(condition, *, timeout: float = 10.0, what: str = "condition") -> None:
    """``until`` for a condition that must await (a Redis query, a receive)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await condition():
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.005)


# -- crawl settings for tests -------------------------------------------------------------

def fast_settings(**sections: dict) -> Settings:
    """Settings for crawling 127.0.0.1 quickly: no delay, small filter, short timeouts."""
    base: dict[str, dict] = {
        # sitemaps off: a test's request log holds only what its site links to
        # (tests/crawler/core/schedule/test_sitemaps.py turns them on)
        "crawl": {"concurrency": 16, "max_retries": 1, "retry_delay": 0.1, "sitemaps": False},
        "politeness": {"delay": 0.0, "per_host": 4},
        "fetch": {"allow_private": True, "connect_timeout": 2.0, "read_timeout": 5.0,
                  "total_timeout": 10.0, "backoff_base": 0.05},
        "dedup": {"capacity": 100_000, "shards": 4},
        "snapshot": {"interval": 0.5, "every_new_urls": 200},
    }
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    return Settings().with_values(**base)


def config_toml(settings: Settings) -> str:
    """A config file that reproduces ``settings`` (for subprocess crawls)."""
    lines = []
    for section, values in settings.to_dict().items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            lines.append(f"{key} = {_toml(value)}")
    return "\n".join(lines) + "\n"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def write_seeds(path: Path, urls: list[str]) -> Path:
    path.write_text("".join(u + "\n" for u in urls))
    return path


# -- the command line in a subprocess -------------------------------------------------------

@dataclass
class CliResult:
    rc: int
    stdout: str
    stderr: str


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("BLOOMCRAWL_DEBUG", None)
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        env.pop(name, None)  # crawls honour them; a test sets what it means to
        env.pop(name.upper(), None)
    return env


async def start_cli(*args: str, env: dict[str, str | None] | None = None,
                    cwd: Path = REPO) -> asyncio.subprocess.Process:
    """``python -m crawler ARGS`` as a child process (stdout/stderr piped) in ``cwd``;
    ``env`` sets (or, with None, removes) variables of its environment."""
    child = cli_env()
    for name, value in (env or {}).items():
        if value is None:
            child.pop(name, None)
        else:
            child[name] = value
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", *args, cwd=cwd, env=child,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def run_cli(*args: str, timeout: float = 60.0,
                  env: dict[str, str | None] | None = None, cwd: Path = REPO) -> CliResult:
    """Run the CLI to completion without blocking the event loop (servers keep serving)."""
    proc = await start_cli(*args, env=env, cwd=cwd)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return CliResult(proc.returncode or 0, out.decode(), err.decode())
