"""Fixtures of the dedup tests."""

from __future__ import annotations

import os

import pytest

from dedup import kernel as compiled


def require_kernel() -> None:
    """Skip a test of the compiled kernel where it did not build; CI
    (``BLOOMCRAWL_REQUIRE_KERNEL=1``) fails instead, so a broken build is seen."""
    if compiled.kernel is not None:
        return
    msg = "the compiled kernel dedup._kernel is not built"
    if os.environ.get("BLOOMCRAWL_REQUIRE_KERNEL") == "1":
        pytest.fail(f"{msg}; BLOOMCRAWL_REQUIRE_KERNEL=1 requires it", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(params=["compiled", "numpy"])
def bit_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once with the compiled kernel and once with the numpy fallback:
    both must give the same bits and answers."""
    if request.param == "numpy":
        monkeypatch.setattr(compiled, "kernel", None)
    else:
        require_kernel()
    return request.param
