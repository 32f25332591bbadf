"""The shared fixtures, as plugins: real local servers (the generated site, redis-server).

Everything talks to aiohttp.web servers on 127.0.0.1 and to a real redis-server
started by the tests; no HTTP mocks. Helpers live in ``tests/support/``.
"""

import os

import pytest
from hypothesis import settings

# CI (.ci/run sets HYPOTHESIS_PROFILE=ci) draws the same examples every run, so its
# verdict is reproducible; a developer's runs draw new ones each time, to find more.
settings.register_profile("ci", derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# helpers whose assertions are the tests' own: shown with their values when they fail
pytest.register_assert_rewrite("tests.support.fleetrun")

pytest_plugins = ["tests.support.fixtures", "tests.support.redisserver"]
