"""The compiled kernel (``dedup/_kernel.c``), or None where it did not build.

It is optional because it is only speed: :mod:`dedup.arena`, :mod:`dedup.layers` and
:mod:`dedup.fingerprint` fall back to numpy and mmh3, with the same bits.
``BLOOMCRAWL_NO_KERNEL=1`` runs without it (to compare the two, or rule it out).
"""

from __future__ import annotations

import os
from types import ModuleType

kernel: ModuleType | None = None
if not os.environ.get("BLOOMCRAWL_NO_KERNEL"):
    try:
        from dedup import _kernel as kernel
    except ImportError:  # built without a C compiler: the numpy code runs
        kernel = None

__all__ = ["kernel"]
