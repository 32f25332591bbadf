"""What a benchmark process reads about itself from /proc, and its files' footprint.

Linux only (``/proc/self/status``, ``/proc/self/io``, ``posix_fadvise``): the
scale benchmark's figures are per process, so each implementation runs in its own.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def proc_status() -> dict[str, float]:
    """VmRSS, VmHWM (peak), RssAnon and RssFile of this process, in MB.

    RssFile counts the run files' pages mapped from the page cache (clean, shared,
    reclaimable); RssAnon is what the process itself holds."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:", "RssAnon:", "RssFile:")):
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0]) / 1024
    return out


def proc_io() -> dict[str, int]:
    """This process's own storage I/O counters (``read_bytes``, ``write_bytes``, ...).

    ``write_bytes`` is charged to the process whose write dirtied the page, so
    SQLite's in-process checkpoints count and other processes' writes do not."""
    out = {}
    for line in Path("/proc/self/io").read_text().splitlines():
        key, value = line.split(":", 1)
        out[key] = int(value)
    return out


def du(files: list[Path]) -> int:
    """Bytes allocated on disk (``du``: blocks, not apparent size)."""
    total = 0
    for p in files:
        with contextlib.suppress(FileNotFoundError):  # a WAL or temp file removed meanwhile
            total += p.stat().st_blocks * 512
    return total


def drop_cache(files: list[Path]) -> None:
    """Evict the files' clean pages from the page cache (a cold cache for the next reads)."""
    for p in files:
        try:
            fd = os.open(p, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
