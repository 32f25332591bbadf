"""A scalable Bloom filter over string/bytes keys, with vectorized batch operations.

The bits and the probing live in :mod:`dedup.filter.layers`; this module is the
filter's surface: keys in, answers out, health, merging, and saving itself to a
snapshot file through the codec in :mod:`dedup.filter.snapshot` (which knows nothing
of filters: it reads and writes a header and raw layer bytes).

Growth: layer ``i`` gets error rate ``p * (1 - r) * r**i`` with ``r = 0.2``, so
the compound false positive rate stays under ``p`` at any size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from os import PathLike
from typing import Any

import numpy as np
from bitarray import bitarray

from dedup.filter.geometry import Geometry, require_same
from dedup.filter.layers import CHUNK, LayerStack, Probed, estimate_count
from dedup.filter.snapshot import SnapshotHeader, read_file, write_file
from dedup.url.fingerprint import fingerprint, fingerprint_many, halves

log = logging.getLogger("dedup.filter.bloom")

WARN_FILL = 0.8           # warn once past this share of the planned capacity
SMALL = 4                 # batches this small go key by key (numpy call overhead dominates)

_U64 = np.dtype(np.uint64)
PathArg = str | PathLike[str]


def _as_hashes(h: np.ndarray) -> np.ndarray:
    h = np.asarray(h)
    if h.ndim != 2 or h.shape[1] != 2:
        raise ValueError(f"expected an (n, 2) array of fingerprint halves, got shape {h.shape}")
    return h if h.dtype == _U64 else h.astype(_U64)


def _chunks(keys: Iterable[str | bytes], size: int) -> Iterator[Sequence[str | bytes]]:
    if isinstance(keys, list | tuple):
        for a in range(0, len(keys), size):
            yield keys[a:a + size]
        return
    it = iter(keys)
    while batch := list(islice(it, size)):
        yield batch


class StackedFilter:
    """What a BloomFilter and a ShardedBloom (whose shards share one _Stack) have in
    common: the geometry read off their storage, and the batch API built on each
    class's own ``_add``, ``_contains`` and ``_check_capacity``."""

    _stack: LayerStack

    def _add(self, h: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _contains(self, h: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _check_capacity(self) -> None:
        raise NotImplementedError

    def add_many(self, keys: Iterable[str | bytes]) -> np.ndarray:
        """Insert a batch; True where a key was definitely new: not in the filter as
        it was before the call, at its first occurrence in the batch. The bits set are
        those one :meth:`add` a key sets; the answers differ only where the batch's
        earlier keys happen to set all of a later key's bits (a false positive of the
        batch's own keys): one ``add`` at a time answers "maybe seen" there, the batch
        "new", as it asks the filter once for all its keys."""
        parts = [self._add(halves(fingerprint_many(c, self.seed))) for c in _chunks(keys, CHUNK)]
        self._check_capacity()
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)

    def contains_many(self, keys: Iterable[str | bytes]) -> np.ndarray:
        """For each key: True if it may be in the filter, False if definitely not."""
        parts = [self._contains(halves(fingerprint_many(c, self.seed)))
                 for c in _chunks(keys, CHUNK)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)

    def add_hashes(self, h: np.ndarray) -> np.ndarray:
        """:meth:`add_many` for an ``(n, 2)`` uint64 array from :func:`halves` (no rehash)."""
        out = self._add(_as_hashes(h))
        self._check_capacity()
        return out

    def contains_hashes(self, h: np.ndarray) -> np.ndarray:
        """:meth:`contains_many` for an ``(n, 2)`` uint64 array from :func:`halves`."""
        return self._contains(_as_hashes(h))

    def probe_hashes(self, h: np.ndarray) -> Probed:
        """:meth:`contains_hashes` (its answers are ``.found``) that keeps the bit
        positions, so :meth:`add_probed` inserts some of the keys right after
        without computing them again: a page's keys are asked about, then its new
        ones added."""
        h = _as_hashes(h)
        return self._stack.probe(h, self._rows_of(h))

    def add_probed(self, probed: Probed, idx: np.ndarray) -> None:
        """Insert keys ``idx`` (distinct) of ``probed``; nothing may have been added
        to the filter since it was probed."""
        self._stack.add_probed(probed, np.asarray(idx, dtype=np.intp))
        self._check_capacity()

    def _rows_of(self, h: np.ndarray) -> np.ndarray | None:
        raise NotImplementedError

    @property
    def error_rate(self) -> float:
        return self._stack.error_rate

    @property
    def seed(self) -> int:
        return self._stack.seed

    @property
    def growth(self) -> int:
        return self._stack.growth

    @property
    def m(self) -> int:
        """Bits of layer 0 (of each shard, for a ShardedBloom)."""
        return self._stack.arenas[0].m

    @property
    def k(self) -> int:
        """Hash count of layer 0."""
        return self._stack.arenas[0].k


class BloomFilter(StackedFilter):
    """A Bloom filter over string/bytes keys with vectorized batch operations.

    ``add_many``/``contains_many`` hash a whole batch (one MurmurHash3 per key) and
    test or set all its bits in a few numpy passes; ``add_hashes``/``contains_hashes``
    take precomputed fingerprint halves. Past its planned capacity it grows by
    layers instead of degrading.
    """

    def __init__(self, capacity: int, error_rate: float = 0.01, *, seed: int = 0,
                 growth: int = 2) -> None:
        geometry = Geometry(capacity=capacity, error_rate=error_rate, shards=1, seed=seed,
                            growth=growth)
        self._stack = LayerStack(1, geometry)
        self._row = 0
        self._warn = True

    @classmethod
    def view(cls, stack: LayerStack, row: int) -> BloomFilter:
        """The filter stored in row ``row`` of ``stack`` (a shard of a ShardedBloom)."""
        bf = cls.__new__(cls)
        bf._stack, bf._row, bf._warn = stack, row, False
        return bf

    @classmethod
    def empty(cls, capacity: int, error_rate: float, *, seed: int, growth: int,
              layers: int) -> BloomFilter:
        """A filter with ``layers`` empty layers (to load or copy bits into)."""
        bf = cls(capacity, error_rate, seed=seed, growth=growth)
        for _ in range(layers - 1):
            if not bf._stack.grow(0):
                raise ValueError(f"a filter of this geometry cannot have {layers} layers")
        return bf

    def move_into(self, stack: LayerStack, row: int) -> BloomFilter:
        """Make this filter's content row ``row`` of ``stack`` (of the same geometry).

        A standalone filter becomes that row itself (its bits move into the shared
        storage); a row of another stack is copied and a view of the new row returned."""
        if self._stack is stack and self._row == row:
            return self
        for j in range(self.layers):
            if stack.arena(j) is None:
                raise ValueError(f"shard {row}: cannot hold {self.layers} layers")
        for j, arena in enumerate(stack.arenas):
            if j < self.layers:
                arena.words[row] = self.layer_words(j)
                arena.counts[row] = self._layer_count(j)
            else:  # rows above a filter's layer count stay zero (lookups rely on it)
                arena.words[row] = 0
                arena.counts[row] = 0
        stack.nlayers[row] = self.layers
        if self._stack.rows == 1:
            self._stack, self._row, self._warn = stack, row, False
            return self
        return BloomFilter.view(stack, row)

    # -- geometry and layers -----------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self._stack.capacity

    @property
    def layers(self) -> int:
        return int(self._stack.nlayers[self._row])

    @property
    def count(self) -> int:
        """Exact number of definitely-new adds (estimated for layers filled by merging)."""
        return sum(int(a.counts[self._row]) for a in self._stack.arenas[:self.layers])

    def shape(self) -> dict[str, Any]:
        """What a filter must share with this one to be ORed into it, in the order a
        mismatch is reported (``m`` before ``capacity``: it is the cause users see)."""
        g = self._stack.geometry
        return {"hash": g.hash, "seed": self.seed, "m": self.m, "k": self.k,
                "capacity": self.capacity, "error_rate": self.error_rate,
                "growth": self.growth}

    def layer_words(self, j: int) -> np.ndarray:
        """Layer j's words (a zero-copy, writable view)."""
        return self._stack.arenas[j].words[self._row]

    def layer_bits(self, j: int) -> bitarray:
        """Layer j's bits (a zero-copy little-endian bitarray)."""
        return self._stack.arenas[j].row_bits(self._row)

    def _layer_count(self, j: int) -> int:
        return int(self._stack.arenas[j].counts[self._row])

    def _set_layer_count(self, j: int, count: int) -> None:
        self._stack.arenas[j].counts[self._row] = count

    def layer_table(self) -> tuple[tuple[int, int, int], ...]:
        """``(m, k, count)`` of each layer, oldest first."""
        arenas = self._stack.arenas[:self.layers]
        return tuple((a.m, a.k, int(a.counts[self._row])) for a in arenas)

    # -- keys ------------------------------------------------------------------------

    def add(self, key: str | bytes) -> bool:
        """Insert ``key``; True if it was definitely not in the filter before."""
        h1, h2 = _split(fingerprint(key, self.seed))
        new = self._stack.add_one(h1, h2, self._row)
        self._check_capacity()
        return new

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str | bytes):
            return False
        h1, h2 = _split(fingerprint(key, self.seed))
        return self._stack.contains_one(h1, h2, self._row)

    def _rows(self, n: int) -> np.ndarray | None:
        return None if self._stack.rows == 1 else np.full(n, self._row, dtype=np.intp)

    def _rows_of(self, h: np.ndarray) -> np.ndarray | None:
        return self._rows(len(h))

    def _add(self, h: np.ndarray) -> np.ndarray:
        if len(h) <= SMALL:
            return np.array([self._stack.add_one(a, b, self._row) for a, b in h.tolist()],
                            dtype=bool)
        return self._stack.add(h, self._rows(len(h)))

    def _contains(self, h: np.ndarray) -> np.ndarray:
        if len(h) <= SMALL:
            return np.array([self._stack.contains_one(a, b, self._row) for a, b in h.tolist()],
                            dtype=bool)
        return self._stack.contains(h, self._rows(len(h)))

    def _check_capacity(self) -> None:
        if self._warn and self.count >= WARN_FILL * self.capacity:
            self._warn = False
            log.warning("Bloom filter past %d%% of its planned capacity (%d of %d keys); "
                        "it will grow by layers", round(WARN_FILL * 100), self.count,
                        self.capacity)

    # -- health ----------------------------------------------------------------------

    def fills(self) -> list[tuple[int, int, int]]:
        """``(set bits, m, k)`` per layer."""
        return [(self.layer_bits(j).count(), a.m, a.k)
                for j, a in enumerate(self._stack.arenas[:self.layers])]

    def __len__(self) -> int:
        return round(sum(estimate_count(m, k, x) for x, m, k in self.fills()))

    def info(self) -> dict[str, Any]:
        """Geometry and health: fill ratio, estimated count and current false-positive rate."""
        fills = self.fills()
        bits = sum(m for _, m, _ in fills)
        return {
            "m": self.m, "k": self.k, "bits": bits, "bytes": bits // 8,
            "fill": sum(x for x, _, _ in fills) / bits,
            "estimated_count": round(sum(estimate_count(m, k, x) for x, m, k in fills)),
            "expected_fpr": min(1.0, sum((x / m) ** k for x, m, k in fills)),
            "capacity": self.capacity, "error_rate": self.error_rate, "layers": len(fills),
            "growth": self.growth, "seed": self.seed, "count": self.count,
        }

    # -- merging and comparing ---------------------------------------------------------

    def __ior__(self, other: BloomFilter) -> BloomFilter:
        """OR ``other`` into this filter (same geometry). Layers are ORed pairwise."""
        if not isinstance(other, BloomFilter):
            return NotImplemented
        require_same(self.shape(), other.shape())
        for j in range(other.layers):
            if j >= self.layers and not self._stack.grow(self._row):
                raise ValueError("cannot add a layer to merge into")
            mine, theirs = self.layer_words(j), other.layer_words(j)
            np.bitwise_or(mine, theirs, out=mine)
            arena = self._stack.arenas[j]
            union = estimate_count(arena.m, arena.k, self.layer_bits(j).count())
            self._set_layer_count(j, max(self._layer_count(j), other._layer_count(j),
                                         round(union)))
        return self

    def __or__(self, other: BloomFilter) -> BloomFilter:
        if not isinstance(other, BloomFilter):
            return NotImplemented
        out = self.copy()
        out |= other
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomFilter):
            return NotImplemented
        return (self.shape() == other.shape() and self.layers == other.layers
                and all(np.array_equal(self.layer_words(j), other.layer_words(j))
                        for j in range(self.layers)))

    __hash__ = None  # type: ignore[assignment]  # mutable

    def copy(self) -> BloomFilter:
        out = BloomFilter.empty(self.capacity, self.error_rate, seed=self.seed,
                                growth=self.growth, layers=self.layers)
        for j in range(self.layers):
            out.layer_words(j)[:] = self.layer_words(j)
            out._set_layer_count(j, self._layer_count(j))
        out._warn = self._warn
        return out

    def __repr__(self) -> str:
        return (f"BloomFilter(capacity={self.capacity}, error_rate={self.error_rate}, "
                f"seed={self.seed}, growth={self.growth}, layers={self.layers}, "
                f"count={self.count})")

    # -- persistence -------------------------------------------------------------------

    def save(self, path: PathArg) -> None:
        """Write a snapshot file (shard 0 of 1), atomically."""
        write_snapshot(path, self)

    @classmethod
    def load(cls, path: PathArg) -> BloomFilter:
        return read_snapshot(path)[0]


def write_snapshot(path: PathArg, bf: BloomFilter, *, shard_index: int = 0,
                   shard_count: int = 1, hwm: int = 0, crawl_id: str = "") -> SnapshotHeader:
    """Write ``bf`` to ``path`` atomically (as shard ``shard_index`` of ``shard_count``
    covering the ledger up to ``hwm``) and return the header written."""
    table = bf.layer_table()  # fixes the layer count even if a writer grows the filter now
    return write_file(path, [bf.layer_words(j) for j in range(len(table))],
                      table=table, seed=bf.seed, capacity=bf.capacity,
                      error_rate=bf.error_rate, growth=bf.growth, shard_index=shard_index,
                      shard_count=shard_count, hwm=hwm, crawl_id=crawl_id)


def read_snapshot(path: PathArg, *,
                  crawl_id: str | None = None) -> tuple[BloomFilter, SnapshotHeader]:
    """Load and verify a snapshot. With ``crawl_id``, a file of another crawl is refused.
    The filter is allocated only once the codec has validated the whole header."""
    made: list[BloomFilter] = []

    def buffers(h: SnapshotHeader) -> list[np.ndarray]:
        bf = BloomFilter.empty(h.capacity, h.error_rate, seed=h.seed, growth=h.growth,
                               layers=len(h.layers))
        made.append(bf)
        return [bf.layer_words(j) for j in range(len(h.layers))]

    header = read_file(path, buffers, crawl_id=crawl_id)
    bf = made[0]
    for j, (_, _, count) in enumerate(header.layers):
        bf._set_layer_count(j, count)
    return bf, header


def _split(fp: bytes) -> tuple[int, int]:
    return int.from_bytes(fp[:8], "little"), int.from_bytes(fp[8:], "little")
