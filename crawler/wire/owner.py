"""Which worker owns a host: the one place a host's URLs are deduplicated and fetched.

``owner_of(host, W) = murmur3_x86_32(host.lower().encode("utf-8"), seed=0) mod W``

The hash is MurmurHash3 x86 32-bit (``mmh3.hash(..., seed=0, signed=False)``),
never Python's ``hash()``, which is salted per process: every worker on every
machine, and every later version of this program, must agree on the owner or a
host would be crawled twice (or never). The tests pin a few values so a change
of the function is caught.

``host`` is the authority as in ``NewUrl.host``: ``"host"`` or ``"host:port"``,
so two servers on one IP but different ports are different hosts (each with its
own politeness budget), as they are for the frontier.

Modulo keeps resizing local: ``x mod (W/2) == (x mod W) mod (W/2)``, so halving
the fleet sends the hosts of workers ``i`` and ``i + W/2`` to worker ``i``, and
doubling it sends each host of worker ``i`` to ``i`` or ``i + W``. That is what
lets a resize merge or split state dirs pairwise (dedup.admin.resizing).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, partial

import mmh3


@lru_cache(maxsize=1 << 16)
def _host_hash(host: str) -> int:
    # encoded here: mmh3 5.3 crashes the process on a str with a lone surrogate; routing
    # must answer for any str, so such a host hashes as its surrogatepass bytes
    return mmh3.hash(host.lower().encode("utf-8", "surrogatepass"), seed=0, signed=False)


def owner_of(host: str, workers: int) -> int:
    """Index (``0 <= i < workers``) of the worker that owns ``host``."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers!r}")
    return _host_hash(host) % workers


def owner_function(workers: int) -> Callable[[str], int]:
    """``owner_of`` bound to a fleet size: the ``host -> worker`` map a resize needs."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers!r}")
    return partial(owner_of, workers=workers)
