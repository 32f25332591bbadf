"""The compiled kernels, or None where they did not build.

``kernel`` (``dedup/_kernel.c``): the Bloom filter's hot loops, used by
:mod:`dedup.arena`, :mod:`dedup.layers` and :mod:`dedup.fingerprint`.
``lookup`` (``dedup/_lookup.c``): the exact lookup's, used by :mod:`dedup.confirmed`,
:mod:`dedup.sortedkeys` and :mod:`dedup.fptable`. Both are optional because they are only speed: the
Python code they replace runs without them, with the same answers.
``BLOOMCRAWL_NO_KERNEL=1`` runs without either (to compare, or rule them out).
"""

from __future__ import annotations

import os
from types import ModuleType

kernel: ModuleType | None = None
lookup: ModuleType | None = None
if not os.environ.get("BLOOMCRAWL_NO_KERNEL"):
    try:
        from dedup import _kernel as kernel
    except ImportError:  # built without a C compiler: the numpy code runs
        kernel = None
    try:
        from dedup import _lookup as lookup
    except ImportError:
        lookup = None

__all__ = ["kernel", "lookup"]
