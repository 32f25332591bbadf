"""glibc's mmap threshold stays fixed, so large temporaries are returned on free."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")

# After a 16 MB mapping is freed, glibc's dynamic threshold would serve the next
# 1 MB array from the heap; mallinfo2().hblks counts the mapped blocks.
_PROBE = """
import ctypes, sys
import numpy as np
from dedup.heap import return_large_frees

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
print(return_large_frees() if sys.argv[1] == "fix" else None)
big = np.ones(2 << 20)  # 16 MB: mapped
del big
before = libc.mallinfo2().hblks
small = np.ones(1 << 17)  # 1 MB
print(libc.mallinfo2().hblks - before)
"""


def _run(mode: str, **env: str) -> list[str]:
    environment = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    environment.update(env)
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], env=environment,
                         capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.split()


def test_large_arrays_are_mapped_after_a_larger_free() -> None:
    assert _run("leave") == ["None", "0"]  # glibc's dynamic threshold: from the heap
    assert _run("fix") == ["True", "1"]


def test_the_environment_setting_wins() -> None:
    assert _run("fix", MALLOC_MMAP_THRESHOLD_="33554432") == ["False", "0"]
