"""The compiled modules, or None where they did not build: ``compiled.kernel``,
``compiled.lookup``, ``compiled.canon``, ``compiled.rowcrc`` and ``compiled.simhash`` at
the call sites.

``kernel`` (``dedup/native/_kernel.c``): the Bloom filter's hot loops and the
hashing, used by :mod:`dedup.filter.arena`, :mod:`dedup.filter.layers` and
:mod:`dedup.url.fingerprint`. ``lookup`` (``dedup/native/_lookup.c``): the exact
lookup's, used by :mod:`dedup.index.sortedkeys`, :mod:`dedup.index.fptable` and
:mod:`dedup.index.fpindex` (``IndexParts``). ``canon`` (``dedup/native/_canon.c``): the
common case of :class:`dedup.url.canonical.Canonicalizer` (ordinary http(s) links), the
rest left to its Python path, and the seen-test core ``SeenCore``
(``dedup/native/_seencore.h``; :mod:`dedup.store.seencore` is its Python twin). ``rowcrc``
(``dedup/native/_rowcrc.c``): the row checksum pass of
:meth:`dedup.journal.journal.Journal.verify`, the rows it cannot confirm left to its
Python loop, and the checksums of a batch of rows written
(:func:`dedup.journal.format.with_crcs`). ``simhash`` (``dedup/native/_simhash.c``): a
page's near-duplicate fingerprint, :func:`dedup.learn.simhash.text_print`, and the
near-duplicate lookup's tables (:class:`dedup.learn.nearindex.NearIndex`). All are
optional because they are only speed: the Python code they replace runs without them,
with the same answers. ``BLOOMCRAWL_NO_KERNEL=1`` runs without any of them (to
compare, or rule them out).
"""

from __future__ import annotations

import os
from types import ModuleType

kernel: ModuleType | None = None
lookup: ModuleType | None = None
canon: ModuleType | None = None
rowcrc: ModuleType | None = None
simhash: ModuleType | None = None
if not os.environ.get("BLOOMCRAWL_NO_KERNEL"):
    try:
        from dedup.native import _kernel as kernel
    except ImportError:  # built without a C compiler: the numpy code runs
        kernel = None
    try:
        from dedup.native import _lookup as lookup
    except ImportError:
        lookup = None
    try:
        from dedup.native import _canon as canon
    except ImportError:
        canon = None
    try:
        from dedup.native import _rowcrc as rowcrc
    except ImportError:  # also: built without SQLite's or zlib's headers
        rowcrc = None
    try:
        from dedup.native import _simhash as simhash
    except ImportError:
        simhash = None

__all__ = ["canon", "kernel", "lookup", "rowcrc", "simhash"]
