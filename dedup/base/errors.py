"""The errors dedup raises for bad files and mismatched filters, in one place so that
every module (and the crawler) can catch them without importing the module that
happens to raise them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


class SnapshotError(ValueError):
    """A snapshot file is missing, damaged, or does not fit; the message names the file."""


class GeometryMismatch(SnapshotError):
    """Two filters (or files, or state dirs) cannot be merged; the message names the
    differing field."""


class StateLocked(RuntimeError):
    """Another process is writing this state directory."""


class StateFormatError(ValueError):
    """A state file is of a format this code does not read (e.g. a format-1 ledger):
    the message names the format and the way forward (``bloomcrawl migrate``)."""


class LedgerDamaged(ValueError):
    """The ledger (or its write-ahead log) is damaged: the message names the file and
    the way forward (``bloomcrawl repair DIR``)."""


class IndexDamaged(ValueError):
    """A file of the fingerprint index (a run or its MANIFEST) is damaged or missing:
    the message names the file and what is wrong. The index is derived from the
    journal, so rebuilding it from the journal (``bloomcrawl rebuild DIR``) loses
    nothing; the ledger itself is not involved."""


class FileError(OSError):
    """An OS error of a file operation, naming the operation and the file: "appending to
    DIR/pages.jsonl: No space left on device". Why: an errno alone ("Invalid argument",
    "Input/output error") does not tell a user which of a crawl's many files, or which
    step, failed. Keeps the cause's errno (it is still an ``OSError`` of that kind)."""

    def __init__(self, doing: str, path: str | os.PathLike[str], cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), os.fspath(path))
        self.doing = doing

    def __str__(self) -> str:
        return f"{self.doing} {self.filename}: {self.strerror}"


@contextlib.contextmanager
def naming(doing: str, path: str | os.PathLike[str]) -> Iterator[None]:
    """An ``OSError`` inside becomes a :class:`FileError` saying ``doing`` ``path``
    (the innermost one is kept: it names the most exact step)."""
    try:
        yield
    except (FileError, InterruptedError, BlockingIOError):
        raise  # named already; or a signal to its caller (an abandoned write), no failure
    except OSError as exc:
        raise FileError(doing, path, exc) from exc
