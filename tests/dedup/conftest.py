"""Fixtures of the dedup tests."""

from __future__ import annotations

import os

import pytest

from dedup.native import compiled


def require_kernel() -> None:
    """Skip a test of the compiled kernels where they did not build; CI
    (``BLOOMCRAWL_REQUIRE_KERNEL=1``) fails instead, so a broken build is seen."""
    missing = [name for name, mod in (("dedup.native._kernel", compiled.kernel),
                                      ("dedup.native._lookup", compiled.lookup),
                                      ("dedup.native._canon", compiled.canon),
                                      ("dedup.native._rowcrc", compiled.rowcrc),
                                      ("dedup.native._simhash", compiled.simhash))
               if mod is None]
    if not missing:
        return
    msg = f"the compiled kernel {', '.join(missing)} is not built"
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


@pytest.fixture(params=["compiled", "python"])
def lookup_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once with the compiled lookup loops (``dedup.native._lookup``) and once
    with the Python code they replace: both must give the same answers."""
    if request.param == "python":
        monkeypatch.setattr(compiled, "lookup", None)
    else:
        require_kernel()
    return request.param


@pytest.fixture(params=["compiled", "python"])
def store_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a seen-store test (UrlSeen, the ledger, resize, migrate, repair) once on the
    compiled kernels and once on the numpy/Python code that replaces both of them.

    The store's modules look ``compiled.kernel`` and ``compiled.lookup`` up at each call, so
    setting them to None switches the whole store in this process; the environment
    variable (``BLOOMCRAWL_NO_KERNEL=1``, what ``dedup.native.compiled`` reads at import)
    switches any child process a test starts, so a kill -9 child runs the same code."""
    if request.param == "python":
        monkeypatch.setattr(compiled, "kernel", None)
        monkeypatch.setattr(compiled, "lookup", None)
        monkeypatch.setattr(compiled, "canon", None)
        monkeypatch.setattr(compiled, "rowcrc", None)
        monkeypatch.setenv("BLOOMCRAWL_NO_KERNEL", "1")
    else:
        require_kernel()
        monkeypatch.delenv("BLOOMCRAWL_NO_KERNEL", raising=False)
    return request.param
