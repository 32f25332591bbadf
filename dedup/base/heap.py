"""Give the memory of large freed temporaries back to the operating system.

The fingerprint index makes arrays of tens of MB now and then (a buffer fold,
a flush, a merge step) and frees them at once. glibc's malloc serves a block
above its *mmap threshold* with a mapping of its own, returned on free; but
the threshold is dynamic: freeing such a block raises it to that size (up to
32 MB), after which blocks of that size come from the heap, whose freed pages
stay in the process. So a long crawl keeps the largest temporaries it ever
made, however briefly it needed them. ``malloc_trim`` after those operations
returns every whole free page of every arena (measured on the scale stream:
``bench/README.md``, "Peak memory").

Not done by fixing the threshold (``mallopt``): that made every block above
128 KiB a fresh mapping, and the crawl's per-page allocations paid for it
(~8% CPU per page in ``crawl_bench.py``). Other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Callable

_trim: Callable[[int], int] | None = None
if platform.libc_ver()[0] == "glibc":
    try:
        _trim = ctypes.CDLL(None).malloc_trim
        _trim.argtypes = (ctypes.c_size_t,)
    except (OSError, AttributeError):
        _trim = None


def give_back() -> bool:
    """Return the free pages of the C heap to the OS; True if any were."""
    return bool(_trim(0)) if _trim is not None else False
