"""Near-duplicate lookup: the first fingerprint of a group within ``k`` bits.

Why blocks (Manku, Jain, Das Sarma, WWW 2007, "permuted tables"): two 64-bit
fingerprints at most ``k`` bits apart agree exactly on at least one of ``k + 1``
disjoint blocks of bits (pigeonhole). So each fingerprint is filed under each of
its ``k + 1`` blocks, and a lookup reads the ``k + 1`` buckets of its own blocks
and compares only those: sublinear in the pages kept, where a scan would compare
with every page of the host.

Why only first holders are kept: a page within ``k`` bits of a kept one is its
near-duplicate, and is not filed itself. Buckets then grow with a host's distinct
content, not with its copies (a calendar's thousand near-identical months would
otherwise make one bucket of a thousand that every later month reads). The cost
is that "near" is not transitive: a page ``k + 1`` bits from the first holder but
within ``k`` of a copy is a new first holder, which is the safe side (a page
judged new is fetched and kept; one judged a copy may lose its rules' evidence).

Per group (a host): one table per block, dicts of block value -> positions; or,
where the kernel built, a compiled ``NearTable`` (``dedup/native/_simhash.c``: the
same blocks and answers, a fifth of the time: once a page at the group commit),
the ids kept here by position.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from dedup.native import compiled

__all__ = ["NearIndex"]


class _Compiled:
    """A group in a compiled ``NearTable`` (positions) and its ids by position."""

    __slots__ = ("ids", "table")

    def __init__(self, table: Any) -> None:
        self.table = table
        self.ids: list[object] = []


class _Group:
    __slots__ = ("ids", "prints", "tables")

    def __init__(self, blocks: int) -> None:
        self.prints: list[int] = []
        self.ids: list[object] = []
        self.tables: list[dict[int, list[int] | int]] = [{} for _ in range(blocks)]


class NearIndex:
    """First holders of 64-bit fingerprints per group, found within ``k`` bits.

    ``find(group, fp)`` answers the id filed first among those within ``k`` bits;
    ``add(group, fp, id)`` files a first holder (the caller adds only what ``find``
    did not place). Ids are whatever the caller keeps (a page's seq and URL).
    """

    def __init__(self, k: int = 3) -> None:
        if not 0 <= k <= 15:
            raise ValueError(f"near-duplicate distance must be 0 to 15 bits, not {k!r}")
        self.k = k
        blocks = k + 1
        # block i is bits [edges[i], edges[i+1]): widths differ by at most one bit
        self._edges = [64 * i // blocks for i in range(blocks + 1)]
        self._masks = [((1 << (self._edges[i + 1] - self._edges[i])) - 1, self._edges[i])
                       for i in range(blocks)]
        self._groups: dict[Hashable, _Group] = {}
        self.size = 0
        kernel = compiled.simhash  # at construction: the tests switch it off
        self._table = getattr(kernel, "NearTable", None)
        # group -> its compiled table and ids (with the kernel; _groups without)
        self._compiled: dict[Hashable, _Compiled] = {}

    def _compiled_group(self, group: Hashable) -> _Compiled:
        g = self._compiled.get(group)
        if g is None:
            g = self._compiled[group] = _Compiled(self._table(self.k))  # type: ignore[misc]
        return g

    def _blocks(self, fp: int) -> list[int]:
        return [(fp >> shift) & mask for mask, shift in self._masks]

    def find(self, group: Hashable, fp: int, blocks: list[int] | None = None) -> object | None:
        """The id of the first holder within ``k`` bits of ``fp`` in ``group``, or None."""
        if self._table is not None:
            c = self._compiled.get(group)
            pos = -1 if c is None else c.table.find(fp)
            return None if pos < 0 else c.ids[pos]  # type: ignore[union-attr]
        g = self._groups.get(group)
        if g is None:
            return None
        prints = g.prints
        k = self.k
        best = -1
        for table, block in zip(g.tables, blocks or self._blocks(fp), strict=True):
            hit = table.get(block)
            if hit is None:
                continue
            for pos in (hit,) if hit.__class__ is int else hit:
                if (best < 0 or pos < best) and (prints[pos] ^ fp).bit_count() <= k:
                    best = pos
        return g.ids[best] if best >= 0 else None

    def add(self, group: Hashable, fp: int, ident: object,
            blocks: list[int] | None = None) -> None:
        """File ``fp`` as a first holder of ``group`` (after every earlier one)."""
        if self._table is not None:
            c = self._compiled_group(group)
            c.table.add(fp)
            c.ids.append(ident)
            self.size += 1
            return
        g = self._groups.get(group)
        if g is None:
            g = self._groups[group] = _Group(len(self._masks))
        pos = len(g.prints)
        g.prints.append(fp)
        g.ids.append(ident)
        for table, block in zip(g.tables, blocks or self._blocks(fp), strict=True):
            hit = table.get(block)
            if hit is None:
                table[block] = pos  # most buckets hold one: no list
            elif hit.__class__ is int:
                table[block] = [hit, pos]
            else:
                hit.append(pos)
        self.size += 1

    def find_or_add(self, group: Hashable, fp: int, ident: object) -> object | None:
        """``find``; when nothing is within ``k`` bits, ``add`` and return None.
        (Once a page at the group commit: ``find`` and ``add`` in one loop over
        the blocks, each bucket read once.)"""
        if self._table is not None:
            c = self._compiled.get(group) or self._compiled_group(group)
            pos = c.table.find_or_add(fp)
            if pos >= 0:
                return c.ids[pos]
            c.ids.append(ident)
            self.size += 1
            return None
        g = self._groups.get(group)
        if g is None:
            g = self._groups[group] = _Group(len(self._masks))
        prints = g.prints
        pos = len(prints)
        k = self.k
        best = -1
        buckets = []
        for table, (mask, shift) in zip(g.tables, self._masks, strict=True):
            block = (fp >> shift) & mask
            hit = table.get(block)
            buckets.append((table, block, hit))
            if hit is None:
                continue
            if hit.__class__ is int:
                if (best < 0 or hit < best) and (prints[hit] ^ fp).bit_count() <= k:
                    best = hit
                continue
            for p in hit:
                if (best < 0 or p < best) and (prints[p] ^ fp).bit_count() <= k:
                    best = p
        if best >= 0:
            return g.ids[best]
        prints.append(fp)
        g.ids.append(ident)
        for table, block, hit in buckets:
            if hit is None:
                table[block] = pos
            elif hit.__class__ is int:
                table[block] = [hit, pos]
            else:
                hit.append(pos)
        self.size += 1
        return None

    def __len__(self) -> int:
        return self.size
