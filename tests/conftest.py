"""The shared fixtures, as plugins: real local servers (the generated site, redis-server).

Everything talks to aiohttp.web servers on 127.0.0.1 and to a real redis-server
started by the tests; no HTTP mocks. Helpers live in ``tests/support/``.
"""

import pytest

# helpers whose assertions are the tests' own: shown with their values when they fail
pytest.register_assert_rewrite("tests.support.fleetrun")

pytest_plugins = ["tests.support.fixtures", "tests.support.redisserver"]
