"""The errors dedup raises for bad files and mismatched filters, in one place so that
every module (and the crawler) can catch them without importing the module that
happens to raise them."""

from __future__ import annotations


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
