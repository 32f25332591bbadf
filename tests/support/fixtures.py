"""Fixtures serving the generated site on 127.0.0.1 (no HTTP mocks)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

import pytest

from crawler.demo.serve import RunningSite, serve_site
from crawler.demo.site import SiteSpec

# -- servers ---------------------------------------------------------------------------------

@pytest.fixture
def site() -> Callable[..., AbstractAsyncContextManager[RunningSite]]:
    """``async with site(SiteSpec(...)) as running:`` serves a generated site."""
    return serve_site


@pytest.fixture
async def small_site() -> AsyncIterator[RunningSite]:
    async with serve_site(SiteSpec(hosts=3, pages=60, seed=7)) as running:
        yield running
