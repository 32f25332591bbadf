"""Crash-safe file replacement: a file is either its old self or its new self.

Write to a temporary file in the same folder, flush, fsync, rename over the
target, fsync the folder. A crash at any point leaves the previous file intact;
an error removes the temporary file; an OS error names the file (``FileError``).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from dedup.base.errors import naming


def atomic_write(path: str | os.PathLike[str], body: Callable[[IO[bytes]], Any]) -> None:
    """Call ``body(file)`` on a temporary binary file next to ``path``, then make it
    ``path`` durably. On any error the temporary file is removed and ``path`` is
    untouched."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with naming("writing", path):
            with open(tmp, "xb") as f:
                body(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data``, crash-safely (see :func:`atomic_write`)."""
    atomic_write(path, lambda f: f.write(data))


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename or a new entry in ``directory`` durable."""
    with naming("syncing the directory", directory):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
