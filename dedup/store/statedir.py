"""The layout of a state directory, its write lock, and the test for "is this one?".

A state directory holds one crawl's (or one fleet worker's) URL-seen state::

    DIR/ledger.sqlite               the journal: every admitted URL (the truth, and the
                                    durable frontier), format 2
    DIR/ledger.index/               the exact seen-set: sorted runs + MANIFEST (dedup.index.fpindex)
    DIR/shards/shard-NNNNN.bloom    one snapshot per filter shard
    DIR/lock                        flock()ed while a process writes the directory

Every module names these paths through here, so the layout is written down once.
"""

from __future__ import annotations

import fcntl
import os
from os import PathLike
from pathlib import Path

from dedup.base.errors import StateLocked

LEDGER_FILE = "ledger.sqlite"
SHARDS_DIR = "shards"
LOCK_FILE = "lock"

PathArg = str | PathLike[str]

__all__ = ["LEDGER_FILE", "LOCK_FILE", "SHARDS_DIR", "StateLocked", "in_use", "is_state_dir",
           "ledger_path", "lock", "require_state_dir", "shards_dir"]


def ledger_path(state_dir: PathArg) -> Path:
    return Path(state_dir) / LEDGER_FILE


def shards_dir(state_dir: PathArg) -> Path:
    return Path(state_dir) / SHARDS_DIR


def is_state_dir(path: PathArg) -> bool:
    """A state directory is one with a ledger: the ledger is the record of truth, and
    shard files alone (a ``shards`` folder) can always be rebuilt from it."""
    return ledger_path(path).is_file()


def require_state_dir(path: PathArg) -> Path:
    """``path`` as a Path, or FileNotFoundError naming what is missing."""
    if not is_state_dir(path):
        raise FileNotFoundError(f"{path}: not a bloomcrawl state directory (no {LEDGER_FILE})")
    return Path(path)


def lock(state_dir: PathArg) -> int:
    """Take the directory's exclusive write lock without waiting; returns the fd that
    holds it (closing it releases the lock, as does the process dying).

    ``flock`` rather than a PID file: the kernel drops it when its holder dies,
    so a crashed crawl never leaves a stale lock to clean up."""
    fd = os.open(Path(state_dir) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StateLocked(f"{state_dir}: in use by another bloomcrawl process") from None
    return fd


def in_use(state_dir: PathArg) -> bool:
    """Whether another process holds the directory's write lock right now."""
    if not (Path(state_dir) / LOCK_FILE).exists():
        return False
    try:
        fd = lock(state_dir)
    except StateLocked:
        return True
    os.close(fd)
    return False
