"""The shared fixtures, as plugins: real local servers (the generated site, redis-server).

Everything talks to aiohttp.web servers on 127.0.0.1 and to a real redis-server
started by the tests; no HTTP mocks. Helpers live in ``tests/support/``.
"""

pytest_plugins = ["tests.support.fixtures", "tests.support.redisserver"]
