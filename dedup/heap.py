"""Large temporaries go back to the operating system when they are freed.

The fingerprint index makes arrays of tens of MB a few times a second (a
buffer fold, a flush, a merge step) and frees them at once. glibc's malloc
serves allocations above its *mmap threshold* with their own mapping, returned
on free; but the threshold is dynamic: freeing such a mapping raises it to that
size (up to 32 MB), after which arrays of that size come from the heap, whose
freed middle is not returned. In a long crawl the process then keeps the
largest temporaries it ever made, however briefly it needed them: measured on
the scale stream at 2.6M URLs, anonymous RSS 178 MB with the dynamic threshold
against 131 MB with it fixed at 128 KiB (``bench/README.md``).

Setting the threshold explicitly turns the dynamic adjustment off. The process
environment's ``MALLOC_MMAP_THRESHOLD_`` wins (it is the user's choice), and
other C libraries (musl, macOS) are left alone.
"""

from __future__ import annotations

import ctypes
import os
import platform

MMAP_THRESHOLD = 128 * 1024  # glibc's initial value
_M_MMAP_THRESHOLD = -3  # mallopt parameter number (malloc.h)
_done = False


def return_large_frees(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes once per process; True if
    it is set (now or before), False where it does not apply."""
    global _done
    if _done:
        return True
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    _done = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    return _done
