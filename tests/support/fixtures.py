"""Fixtures serving the generated site on 127.0.0.1 (no HTTP mocks)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

import pytest

from crawler.demo.serve import RunningSite, serve_site
from crawler.demo.site import SiteSpec

PROXY_ENV = tuple(n for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy")
                  for n in (name, name.upper()))


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Crawls honour HTTP(S)_PROXY: a developer's proxy must not carry test traffic."""
    for name in PROXY_ENV:
        monkeypatch.delenv(name, raising=False)


# -- servers ---------------------------------------------------------------------------------

@pytest.fixture
def site() -> Callable[..., AbstractAsyncContextManager[RunningSite]]:
    """``async with site(SiteSpec(...)) as running:`` serves a generated site."""
    return serve_site


@pytest.fixture
async def small_site() -> AsyncIterator[RunningSite]:
    async with serve_site(SiteSpec(hosts=3, pages=60, seed=7)) as running:
        yield running
