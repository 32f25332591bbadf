"""Creating a crawl's state directory atomically, after checking everything it needs.

Why: a start that fails (a bad config, too little memory, an unwritable WARC
path, a kill -9 in its first milliseconds) must not leave a directory that
neither ``crawl`` (it "already holds a crawl") nor ``resume`` (it has "no crawl
configuration") accepts. So every check runs before anything is created, and
the directory is built under a temporary name beside it and renamed into place
only once it holds a complete, committed crawl: it either does not exist (or is
still the empty directory it was) or it is a crawl ``resume`` accepts.
Leftover temporary directories of dead processes are removed by the next start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from crawler.config.settings import ConfigError, Settings
from crawler.core.outputs.warc import first_warc
from dedup import FileError, fsync_dir, layer_geometry

__all__ = ["building", "check_resources", "memory_needed", "physical_memory"]

_BUILDING = ".creating-"


def physical_memory() -> int:
    """Bytes of RAM on this machine (0 when the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0


def memory_needed(settings: Settings) -> int:
    """Bytes the Bloom filter of a new crawl allocates at once (its first layer)."""
    d = settings.dedup
    try:
        return layer_geometry(d.capacity, d.error_rate, d.growth, 0).m // 8
    except ValueError as exc:
        raise ConfigError(f"dedup.capacity: {exc}") from None


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be created or appended to (None: it can), creating nothing."""
    if path.exists():
        if path.is_dir():
            return "it is a directory"
        return None if os.access(path, os.W_OK) else "permission denied"
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a directory"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"{parent} is not writable"


def check_resources(settings: Settings, state_dir: Path,
                    error: Callable[[str], Exception]) -> None:
    """Refuse, before anything is created, a crawl this machine cannot hold or write:
    the filter's memory against the RAM and the WARC path (ConfigError), the state
    directory (``error``)."""
    need, have = memory_needed(settings), physical_memory()
    if have and need > have:
        d = settings.dedup
        raise ConfigError(f"dedup.capacity {d.capacity:_} at error rate {d.error_rate} needs "
                          f"{_gib(need)} of memory for the Bloom filter, more than this "
                          f"machine's {_gib(have)}; lower dedup.capacity (the filter grows "
                          "past it when the crawl does)")
    if settings.output.warc and (why := _unwritable(first_warc(settings.output.warc))):
        raise ConfigError(f"cannot write the WARC file (--warc) {settings.output.warc}: {why}")
    if why := _unwritable(state_dir / "ledger"):
        raise error(f"cannot write state directory {state_dir}: {why}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(state_dir: Path) -> None:
    for old in state_dir.parent.glob(f".{state_dir.name}{_BUILDING}*"):
        pid = old.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)


def _make_parents(path: Path) -> list[Path]:
    """Create ``path``'s missing directories; returns them, deepest first."""
    made: list[Path] = []
    p = path
    while not p.exists():
        made.append(p)
        p = p.parent
    for d in reversed(made):
        d.mkdir()
    return made


@contextlib.contextmanager
def building(state_dir: Path, error: Callable[[str], Exception]) -> Iterator[Path]:
    """A temporary directory beside ``state_dir`` to build it in; renamed into place when
    the block ends without error, removed (with any parent it made) when it fails."""
    made: list[Path] = []
    tmp = state_dir.parent / f".{state_dir.name}{_BUILDING}{os.getpid()}"
    try:
        made = _make_parents(state_dir.parent)
        _remove_stale(state_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as exc:
        _undo(tmp, made)
        raise error(f"cannot create state directory {state_dir}: {_why(exc)}") from None
    try:
        yield tmp
        os.rename(tmp, state_dir)  # replaces an empty directory of that name, atomically
        fsync_dir(state_dir.parent)
    except OSError as exc:
        _undo(tmp, made)
        raise error(f"cannot create state directory {state_dir}: {_why(exc)}") from None
    except BaseException:
        _undo(tmp, made)
        raise


def _why(exc: OSError) -> str:
    """What failed: the step and the file when the error names them (``FileError``)."""
    return str(exc) if isinstance(exc, FileError) else str(exc.strerror or exc)


def _undo(tmp: Path, made: list[Path]) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    for d in made:
        with contextlib.suppress(OSError):
            d.rmdir()
