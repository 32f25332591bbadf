"""A Bloom filter split into S shards by fingerprint, the unit of snapshot and merge.

Shard i holds the keys whose :func:`~dedup.url.fingerprint.shard_of` is i. Each shard
is a full :class:`~dedup.filter.bloom.BloomFilter` (sized by :func:`shard_capacity`:
its share of the capacity plus headroom) that can be saved, loaded, merged or
rebuilt on its own, so a 1 GB filter is snapshotted one small shard at a time.
The shards' bits share one 2-D array per layer, so a batch op over all shards is
still a single vectorized pass.
"""

from __future__ import annotations

import math
import operator
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from dedup.base.errors import SnapshotError
from dedup.filter.bloom import (
    SMALL,
    WARN_FILL,
    BloomFilter,
    StackedFilter,
    log,
    read_snapshot,
    write_snapshot,
)
from dedup.filter.geometry import MAX_SHARDS, Geometry, require_same
from dedup.filter.layers import LayerStack, estimate_count
from dedup.filter.snapshot import SnapshotHeader, read_header
from dedup.url.fingerprint import fingerprint, shard_of

__all__ = ["MAX_SHARDS", "ShardedBloom", "merge_files", "planned_capacity", "shard_capacity"]

HEADROOM_SIGMAS = 4


def shard_capacity(capacity: int, shards: int) -> int:
    """Keys each of ``shards`` shards is sized for: its share of ``capacity`` plus
    four standard deviations.

    Keys fall into shards binomially (σ ≈ √(capacity/S)). Sized at exactly its
    share, about half the shards pass it before the filter holds ``capacity``
    keys, and each grows a second layer twice its size: measured 2.30 bytes/key
    at 10M keys in 64 shards instead of 1.26. Four σ cost +1% of memory at that
    size (+3% at 1M keys) and make a second layer at planned capacity rare
    (about 0.2% for 64 shards).
    """
    if shards == 1:
        return capacity
    share = capacity / shards
    return math.ceil(share + HEADROOM_SIGMAS * math.sqrt(share))


def planned_capacity(shard_cap: int, shards: int) -> int:
    """The largest capacity whose shards are sized ``shard_cap`` (the inverse of
    :func:`shard_capacity`): the planned capacity of a filter known only from its
    shard files, which record the shard's size (a repair whose ledger lost its
    metadata reads it there)."""
    if shards == 1:
        return shard_cap
    z = HEADROOM_SIGMAS
    root = (-z + math.sqrt(z * z + 4 * shard_cap)) / 2  # share + z·√share = shard_cap
    c = max(1, int(shards * root * root))
    while shard_capacity(c + 1, shards) <= shard_cap:
        c += 1
    while c > 1 and shard_capacity(c, shards) > shard_cap:
        c -= 1
    return c


_SHARD_FILE = re.compile(r"shard-(\d{5,})\.bloom")


class _ShardList(list[BloomFilter]):
    """``ShardedBloom.shards``: assigning ``shards[i] = bf`` copies bf's bits into the
    shared storage (and makes bf that shard); the length is fixed."""

    def __init__(self, owner: ShardedBloom, items: Iterable[BloomFilter]) -> None:
        super().__init__(items)
        self._owner = owner

    def __setitem__(self, i: Any, bf: Any) -> None:
        if isinstance(i, slice):
            raise TypeError("shards can only be replaced one at a time")
        i = range(len(self))[operator.index(i)]  # normalises negatives, raises IndexError
        super().__setitem__(i, self._owner._adopt(i, bf))

    def _fixed(self, *args: object, **kwargs: object) -> Any:
        raise TypeError("shards cannot be added, removed or reordered")

    append = extend = insert = pop = remove = clear = sort = reverse = _fixed
    __delitem__ = __iadd__ = __imul__ = _fixed


class ShardedBloom(StackedFilter):
    """S Bloom filters of identical geometry behind the surface of one."""

    def __init__(self, shards: int = 64, capacity: int = 10_000_000, error_rate: float = 0.01,
                 *, seed: int = 0, growth: int = 2) -> None:
        self._build(Geometry(capacity=capacity, error_rate=error_rate, shards=shards, seed=seed,
                             growth=growth), shard_capacity(capacity, shards))

    def _build(self, geometry: Geometry, shard_cap: int) -> None:
        self.geometry = geometry
        self.nshards = geometry.shards
        self.capacity = geometry.capacity
        self.shard_capacity = shard_cap
        self._stack = LayerStack(self.nshards, replace(geometry, capacity=shard_cap, shards=1))
        self.shards: list[BloomFilter] = _ShardList(
            self, (BloomFilter.view(self._stack, i) for i in range(self.nshards)))
        self._warn = True

    @property
    def stack(self) -> LayerStack:
        """The shards' layers (one row a shard), for a compiled probe that reads them."""
        return self._stack

    @property
    def layers(self) -> int:
        """Layers of the most grown shard."""
        return int(self._stack.nlayers.max())

    @property
    def count(self) -> int:
        return sum(int(a.counts.sum()) for a in self._stack.arenas)

    def shape(self) -> dict[str, Any]:
        """What a sharded filter must share with this one to be ORed into it."""
        return {"shards": self.nshards, **self.shards[0].shape()}

    @staticmethod
    def shard_path(directory: str | PathLike[str], i: int) -> Path:
        return Path(directory) / f"shard-{i:05d}.bloom"

    def _adopt(self, i: int, bf: BloomFilter) -> BloomFilter:
        """Make ``bf``'s content shard i. A standalone filter becomes the shard itself
        (its bits move into the shared storage); a shard of another ShardedBloom is copied."""
        if not isinstance(bf, BloomFilter):
            raise TypeError(f"a shard must be a BloomFilter, not {type(bf).__name__}")
        require_same(self.shards[0].shape(), bf.shape(), f"shard {i}: ")
        return bf.move_into(self._stack, i)

    # -- keys --------------------------------------------------------------------------

    def _row_of(self, fp: bytes) -> tuple[int, int, int]:
        h1, h2 = int.from_bytes(fp[:8], "little"), int.from_bytes(fp[8:], "little")
        return h1, h2, ((h1 >> 32) * self.nshards) >> 32

    def add(self, key: str | bytes) -> bool:
        h1, h2, row = self._row_of(fingerprint(key, self.seed))
        new = self._stack.add_one(h1, h2, row)
        self._check_capacity()
        return new

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str | bytes):
            return False
        h1, h2, row = self._row_of(fingerprint(key, self.seed))
        return self._stack.contains_one(h1, h2, row)

    def maybe_fingerprints(self, fps: bytes | bytearray) -> list[int]:
        """Indexes of the fingerprints (16 bytes each, the ``seed``'s, concatenated)
        that may be in the filter, ascending: one call for a page's keys."""
        return self._stack.maybe_in_rows(fps)

    def _add(self, h: np.ndarray) -> np.ndarray:
        stack, s = self._stack, self.nshards
        if len(h) <= SMALL:
            return np.array([stack.add_one(a, b, ((a >> 32) * s) >> 32) for a, b in h.tolist()],
                            dtype=bool)
        return stack.add(h, shard_of(h[:, 0], s))

    def _rows_of(self, h: np.ndarray) -> np.ndarray | None:
        return shard_of(h[:, 0], self.nshards)

    def _contains(self, h: np.ndarray) -> np.ndarray:
        stack, s = self._stack, self.nshards
        if len(h) <= SMALL:
            return np.array([stack.contains_one(a, b, ((a >> 32) * s) >> 32)
                             for a, b in h.tolist()], dtype=bool)
        return stack.contains(h, shard_of(h[:, 0], s))

    def _check_capacity(self) -> None:
        if self._warn and self.count >= WARN_FILL * self.capacity:
            self._warn = False
            log.warning("sharded Bloom filter past %d%% of its planned capacity (%d of %d "
                        "keys); its shards will grow by layers", round(WARN_FILL * 100),
                        self.count, self.capacity)

    # -- health --------------------------------------------------------------------------

    def __len__(self) -> int:
        return round(sum(estimate_count(m, k, x) for bf in self.shards for x, m, k in bf.fills()))

    def info(self) -> dict[str, Any]:
        """Totals over all shards, plus the emptiest and fullest shard's fill ratio."""
        per = [bf.fills() for bf in self.shards]
        bits = sum(m for fills in per for _, m, _ in fills)
        fill = [sum(x for x, _, _ in f) / sum(m for _, m, _ in f) for f in per]
        return {
            "m": self.m, "k": self.k, "bits": bits, "bytes": bits // 8,
            "fill": sum(x for fills in per for x, _, _ in fills) / bits,
            "fill_min": min(fill), "fill_max": max(fill),
            "estimated_count": round(sum(estimate_count(m, k, x)
                                         for fills in per for x, m, k in fills)),
            # a random absent key lands in a random shard
            "expected_fpr": sum(min(1.0, sum((x / m) ** k for x, m, k in f))
                                for f in per) / self.nshards,
            "capacity": self.capacity, "shard_capacity": self.shard_capacity,
            "error_rate": self.error_rate, "layers": self.layers, "growth": self.growth,
            "seed": self.seed, "count": self.count, "shards": self.nshards,
        }

    # -- merging and comparing -----------------------------------------------------------

    def __ior__(self, other: ShardedBloom) -> ShardedBloom:
        if not isinstance(other, ShardedBloom):
            return NotImplemented
        require_same(self.shape(), other.shape())
        for mine, theirs in zip(self.shards, other.shards, strict=True):
            mine |= theirs
        return self

    def __or__(self, other: ShardedBloom) -> ShardedBloom:
        if not isinstance(other, ShardedBloom):
            return NotImplemented
        out = self.copy()
        out |= other
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShardedBloom):
            return NotImplemented
        return (self.shape() == other.shape()
                and all(a == b for a, b in zip(self.shards, other.shards, strict=True)))

    __hash__ = None  # type: ignore[assignment]  # mutable

    @classmethod
    def _sized(cls, shards: int, shard_cap: int, error_rate: float, seed: int,
               growth: int) -> ShardedBloom:
        """An empty filter whose shards hold ``shard_cap`` keys each (as its files say)."""
        out = cls.__new__(cls)
        out._build(Geometry(capacity=planned_capacity(shard_cap, shards), error_rate=error_rate,
                            shards=shards, seed=seed, growth=growth), shard_cap)
        return out

    def copy(self) -> ShardedBloom:
        out = ShardedBloom._sized(self.nshards, self.shard_capacity, self.error_rate,
                                  self.seed, self.growth)
        out.capacity, out.geometry = self.capacity, self.geometry
        for j, arena in enumerate(self._stack.arenas):
            if out._stack.arena(j) is None:
                raise ValueError("cannot copy: layer limit")
            out._stack.arenas[j].words[:] = arena.words
            out._stack.arenas[j].counts[:] = arena.counts
        out._stack.nlayers[:] = self._stack.nlayers
        out._warn = self._warn
        return out

    def __repr__(self) -> str:
        return (f"ShardedBloom(shards={self.nshards}, capacity={self.capacity}, "
                f"error_rate={self.error_rate}, seed={self.seed}, growth={self.growth}, "
                f"count={self.count})")

    # -- persistence ---------------------------------------------------------------------

    def save(self, directory: str | PathLike[str], *, hwm: int = 0, crawl_id: str = "") -> None:
        """Write one snapshot file per shard, each atomically."""
        Path(directory).mkdir(parents=True, exist_ok=True)
        for i, bf in enumerate(self.shards):
            write_snapshot(self.shard_path(directory, i), bf, shard_index=i,
                           shard_count=self.nshards, hwm=hwm, crawl_id=crawl_id)

    @classmethod
    def load(cls, directory: str | PathLike[str], *,
             crawl_id: str | None = None) -> ShardedBloom:
        """Load a directory written by :meth:`save`. Every shard file must be present and
        agree with shard 0 on shard count, geometry and crawl id; with ``crawl_id``,
        files of another crawl are refused."""
        directory = Path(directory)
        first = cls.shard_path(directory, 0)
        if not first.exists():
            raise SnapshotError(f"{directory}: no {first.name}")
        head = read_header(first)
        found = sorted(p.name for p in directory.iterdir() if _SHARD_FILE.fullmatch(p.name))
        expected = [cls.shard_path(directory, i).name for i in range(head.shard_count)]
        if found != expected:
            extra = sorted(set(found) - set(expected))
            missing = sorted(set(expected) - set(found))
            raise SnapshotError(f"{directory}: {first.name} says {head.shard_count} shards, "
                                f"but missing {missing[:5]} extra {extra[:5]}")
        out = cls._sized(head.shard_count, head.capacity, head.error_rate, head.seed,
                         head.growth)
        want = {**head.shape(), "crawl_id": head.crawl_id}
        for i in range(head.shard_count):
            path = cls.shard_path(directory, i)
            bf, h = read_snapshot(path, crawl_id=crawl_id)
            require_same(want, {**h.shape(), "shard_index": head.shard_index,
                                "crawl_id": h.crawl_id}, f"{path.name}: ")
            if h.shard_index != i:
                raise SnapshotError(f"{path.name}: holds shard {h.shard_index}, not {i}")
            out.shards[i] = bf
        return out


def merge_files(out: str | PathLike[str], inputs: Sequence[str | PathLike[str]], *,
                crawl_id: str | None = None) -> SnapshotHeader:
    """OR shard files of identical geometry into ``out`` (written atomically; ``out`` may
    be one of the inputs). The result equals the filter of the union of the inputs, bit
    for bit; its high-water mark is the inputs' maximum. Its crawl id is ``crawl_id``, or
    the inputs' if they all agree, else empty."""
    if not inputs:
        raise ValueError("merge_files needs at least one input")
    headers = [read_header(p) for p in inputs]  # refuse before reading any bits
    for p, h in zip(inputs[1:], headers[1:], strict=True):
        require_same(headers[0].shape(), h.shape(), f"{os.fspath(p)}: ")
    merged, _ = read_snapshot(inputs[0])
    for p in inputs[1:]:
        merged |= read_snapshot(p)[0]
    if crawl_id is None:
        ids = {h.crawl_id for h in headers}
        crawl_id = ids.pop() if len(ids) == 1 else ""
    return write_snapshot(out, merged, shard_index=headers[0].shard_index,
                          shard_count=headers[0].shard_count,
                          hwm=max(h.hwm for h in headers), crawl_id=crawl_id)
