"""A scalable Bloom filter whose batch operations are numpy over the bit buffer.

Keys are reduced once to a 128-bit MurmurHash3 fingerprint (see
:mod:`dedup.fingerprint`); its halves give the k bit positions by
Kirsch–Mitzenmacher double hashing, ``(h1 + i*h2) mod m`` in uint64 wraparound
arithmetic, computed for a whole batch as a ``(k, n)`` array. Lookups gather
the k words of every key at once; insertions set bits with fancy ``|=`` and
then re-set the few bits lost where two positions of a batch share a word
(``words[idx] |= mask`` alone keeps only the last write per word; see
``_set_bits``).

Growth follows the scalable Bloom filter of Almeida et al. (RedisBloom's
"expansion"): when the newest layer has taken ``capacity * growth**i`` new keys,
a layer with ``growth`` times the capacity and a tighter error rate is added.
Layer ``i`` gets ``p * (1 - r) * r**i`` with ``r = 0.2``, so the compound false
positive rate stays under ``p`` at any size. Every layer hashes with its own salt
mixed into ``h1``, so their false positives are independent.

Storage: a layer's bits for a set of filters of identical geometry live in one
2-D uint64 array (one row per filter, zero-initialised by ``calloc`` so untouched
rows cost no memory), exposed per filter as a zero-copy little-endian
``bitarray``. A plain :class:`BloomFilter` owns a one-row stack; a
:class:`~dedup.shards.ShardedBloom` owns one stack for all its shards, so a batch
spread over 64 shards is still one vectorized pass, not 64 small ones.

Threading: exactly one thread may write a filter; others may read it (a
snapshot thread), and may miss bits being set meanwhile — the ledger's
high-water mark covers those.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from os import PathLike
from typing import Any

import numpy as np
from bitarray import bitarray

from dedup.fingerprint import HASH_ALGO, fingerprint, fingerprint_many, halves

log = logging.getLogger("dedup.bloom")

TIGHTENING = 0.2          # error-rate ratio between consecutive layers
WARN_FILL = 0.8           # warn once past this share of the planned capacity
MAX_LAYERS = 64
MAX_K = 64
MAX_M = 2**40             # bits in one layer of one filter (128 GiB)
MAX_CAPACITY = 2**48
MAX_GROWTH = 1024
MAX_SEED = 2**32 - 1      # mmh3 seeds are uint32
CHUNK = 8192              # keys per vectorized pass: keeps the (k, n) temporaries in L2
SMALL = 4                 # batches this small go key by key (numpy call overhead dominates)

_M64 = 2**64 - 1
_LN2 = math.log(2)
_GOLDEN = 0x9E3779B97F4A7C15
_STEPS = np.arange(MAX_K, dtype=np.uint64)[:, None]
_ONE = np.uint64(1)
_SIX = np.uint64(6)
_LOW6 = np.uint64(63)
_U64 = np.dtype(np.uint64)


@dataclass(frozen=True, slots=True)
class LayerGeometry:
    """Size of layer ``index`` of a filter: it holds ``capacity`` keys at ``error_rate``."""

    index: int
    capacity: int
    error_rate: float
    m: int
    k: int


def layer_geometry(capacity: int, error_rate: float, growth: int, index: int) -> LayerGeometry:
    """Geometry of layer ``index``: ``m = ceil(-n ln p / ln2^2)`` rounded up to whole uint64
    words, ``k = round(m/n ln 2)`` clamped to 1..64. Raises ValueError past ``MAX_M`` bits."""
    n = capacity * growth**index
    p = error_rate * (1 - TIGHTENING) * TIGHTENING**index
    bits = math.ceil(-n * math.log(p) / _LN2**2) if p > 0 else math.inf
    if not bits <= MAX_M:
        raise ValueError(f"layer {index} of a filter for {capacity} keys at error rate "
                         f"{error_rate} would need more than 2**40 bits")
    m = max(64, -(-bits // 64) * 64)
    k = min(MAX_K, max(1, round(m / n * _LN2)))
    return LayerGeometry(index, n, p, m, k)


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def validate_geometry(capacity: Any, error_rate: Any, seed: Any, growth: Any) -> None:
    """Raise ValueError unless the parameters describe a filter this module can build."""
    if not (_is_int(capacity) and 1 <= capacity <= MAX_CAPACITY):
        raise ValueError(f"capacity must be an integer in 1..2**48, not {capacity!r}")
    if not (isinstance(error_rate, numbers.Real) and 0 < error_rate < 1):
        raise ValueError(f"error_rate must be between 0 and 1, not {error_rate!r}")
    if not (_is_int(seed) and 0 <= seed <= MAX_SEED):
        raise ValueError(f"seed must be an integer in 0..2**32-1, not {seed!r}")
    if not (_is_int(growth) and 1 <= growth <= MAX_GROWTH):
        raise ValueError(f"growth must be an integer in 1..1024, not {growth!r}")
    layer_geometry(int(capacity), float(error_rate), int(growth), 0)


def estimate_count(m: int, k: int, set_bits: int) -> float:
    """Swamidass–Baldi estimate of the keys in a layer: ``-m/k ln(1 - X/m)``."""
    x = min(set_bits, m - 1)  # a full layer would be infinite; cap it
    return -m / k * math.log1p(-x / m)


class _Arena:
    """Layer ``index`` of ``rows`` filters of identical geometry: one row of words each."""

    __slots__ = ("bits", "capacity", "counts", "flat", "index", "k", "m", "m64", "salt",
                 "salt64", "words")

    def __init__(self, geo: LayerGeometry, rows: int) -> None:
        self.index, self.capacity, self.m, self.k = geo.index, geo.capacity, geo.m, geo.k
        self.m64 = np.uint64(geo.m)
        self.salt = (geo.index * _GOLDEN) & _M64  # 0 for layer 0: plain Kirsch–Mitzenmacher
        self.salt64 = np.uint64(self.salt)
        self.words = np.zeros((rows, geo.m // 64), dtype=np.uint64)
        self.flat = self.words.reshape(-1)
        self.bits = bitarray(buffer=self.words, endian="little")  # all rows, for single bits
        self.counts = np.zeros(rows, dtype=np.int64)  # exact definitely-new adds per row

    def row_bits(self, row: int) -> bitarray:
        """Zero-copy bitarray of one filter's bits in this layer."""
        return bitarray(buffer=self.words[row], endian="little")

    def positions(self, h1: int, h2: int) -> list[int]:
        """The k bit positions of one key (pure-Python twin of :func:`_probe`)."""
        x = (h1 + self.salt) & _M64
        m = self.m
        return [((x + i * h2) & _M64) % m for i in range(self.k)]


def _probe(arena: _Arena, h1: np.ndarray, h2: np.ndarray,
           base: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bit positions of n keys in one layer, as ``(word index, bit index, bit value)``
    arrays of shape ``(k, n)``; ``base`` offsets each key to its row in the arena."""
    pos = _STEPS[:arena.k] * h2  # uint64 arrays wrap silently: the wraparound we want
    pos += h1 + arena.salt64 if arena.salt else h1
    q = pos // arena.m64  # pos %= m, but floor_divide by a scalar is ~2x faster (libdivide)
    q *= arena.m64
    pos -= q
    bit = pos & _LOW6
    pos >>= _SIX
    if base is not None:
        pos += base
    widx = pos.view(np.intp)  # < 2**58, so the same values
    got = arena.flat[widx]
    got >>= bit
    got &= _ONE
    return widx, bit, got


def _set_bits(arena: _Arena, probe: tuple[np.ndarray, np.ndarray, np.ndarray],
              cols: np.ndarray | None, n: int) -> None:
    """Set the bits of the probed keys ``cols`` (all n if None).

    ``flat[idx] |= mask`` alone loses bits: when positions share a word, only the
    last write of that word survives. ``np.bitwise_or.at`` is exact but has no
    fast path (~18 ns per element). So: write with fancy indexing, then rewrite
    just the positions whose bit did not stick, until none is missing. Every
    pass makes at least one write per distinct word stick and earlier passes'
    bits are never overwritten, so it ends after at most (largest number of
    positions sharing one word) passes — nearly always one or two.
    Bits already set are rewritten rather than filtered out: that is cheaper."""
    widx, bit, _ = probe
    if cols is not None and cols.size < n:
        widx, bit = np.take(widx, cols, axis=1), np.take(bit, cols, axis=1)
    mask = np.left_shift(_ONE, bit, out=bit).reshape(-1)  # the bit indices are not reused
    widx = widx.reshape(-1)
    flat = arena.flat
    while widx.size:
        flat[widx] |= mask
        lost = (flat[widx] & mask) == 0
        widx, mask = widx[lost], mask[lost]


def _first_occurrences(h1: np.ndarray, h2: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The entries of ``idx`` whose fingerprint did not occur earlier in ``idx``."""
    if idx.size < 2:
        return idx
    a = h1[idx]
    s = np.sort(a)
    if not (s[1:] == s[:-1]).any():
        return idx
    pairs = np.empty(idx.size, dtype=[("h1", _U64), ("h2", _U64)])
    pairs["h1"] = a
    pairs["h2"] = h2[idx]
    _, first = np.unique(pairs, return_index=True)  # stable: index of the first occurrence
    first.sort()
    return idx[first]


def _as_hashes(h: np.ndarray) -> np.ndarray:
    h = np.asarray(h)
    if h.ndim != 2 or h.shape[1] != 2:
        raise ValueError(f"expected an (n, 2) array of fingerprint halves, got shape {h.shape}")
    return h if h.dtype == _U64 else h.astype(_U64)


class _Stack:
    """The layers of ``rows`` filters sharing capacity, error rate, seed and growth.

    Row r's filter has ``nlayers[r]`` layers; arena j exists once any row needs
    it. All batch logic lives here so a single filter (one row) and a sharded
    filter (one row per shard, ``rows`` chosen per key) run the same code.
    """

    def __init__(self, rows: int, capacity: int, error_rate: float, seed: int,
                 growth: int) -> None:
        validate_geometry(capacity, error_rate, seed, growth)
        self.rows = rows
        self.capacity = int(capacity)
        self.error_rate = float(error_rate)
        self.seed = int(seed)
        self.growth = int(growth)
        self.arenas = [_Arena(layer_geometry(self.capacity, self.error_rate, self.growth, 0),
                              rows)]
        self.nlayers = np.ones(rows, dtype=np.intp)
        self._full_logged = False

    # -- layers ------------------------------------------------------------------

    def arena(self, j: int) -> _Arena | None:
        """Arena j, allocated on first use; None if no such layer can exist."""
        while len(self.arenas) <= j:
            nxt = len(self.arenas)
            try:
                if nxt >= MAX_LAYERS:
                    raise ValueError(f"more than {MAX_LAYERS} layers")
                geo = layer_geometry(self.capacity, self.error_rate, self.growth, nxt)
            except ValueError as exc:
                if not self._full_logged:
                    self._full_logged = True
                    log.error("Bloom filter cannot grow (%s); its newest layer keeps filling "
                              "and its false-positive rate will rise", exc)
                return None
            self.arenas.append(_Arena(geo, self.rows))
        return self.arenas[j]

    def grow(self, row: int) -> bool:
        """Give ``row`` one more (empty) layer; False when it cannot grow."""
        j = int(self.nlayers[row])
        a = self.arena(j)
        if a is None:
            return False
        a.words[row] = 0
        a.counts[row] = 0
        self.nlayers[row] = j + 1
        return True

    def _room(self) -> np.ndarray:
        """Keys each row's newest layer takes before the row grows."""
        top = self.nlayers - 1
        room = np.empty(self.rows, dtype=np.int64)
        for j, a in enumerate(self.arenas):
            on = top == j
            room[on] = a.capacity - a.counts[on]
        return room

    # -- batch operations ----------------------------------------------------------

    def _bases(self, rows: np.ndarray | None) -> list[np.ndarray | None]:
        if rows is None:
            return [None] * len(self.arenas)
        r = rows.astype(_U64)
        return [r * np.uint64(a.words.shape[1]) for a in self.arenas]

    def contains(self, h: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """For each key of ``h`` (row ``rows[i]``, or row 0 if None): in any layer?"""
        out = np.empty(len(h), dtype=bool)
        for a in range(0, len(h), CHUNK):
            b = min(a + CHUNK, len(h))
            out[a:b] = self._contains_chunk(h[a:b, 0], h[a:b, 1],
                                            None if rows is None else rows[a:b])
        return out

    def _contains_chunk(self, h1: np.ndarray, h2: np.ndarray,
                        rows: np.ndarray | None) -> np.ndarray:
        bases = self._bases(rows)
        _, _, got = _probe(self.arenas[0], h1, h2, bases[0])
        found = got.all(axis=0)
        for j in range(1, len(self.arenas)):
            # later layers only for keys not found yet, in rows that have layer j
            ask = ~found if rows is None else ~found & (self.nlayers[rows] > j)
            idx = np.flatnonzero(ask)
            if idx.size:
                base = bases[j]
                _, _, got = _probe(self.arenas[j], h1[idx], h2[idx],
                                   None if base is None else base[idx])
                found[idx[got.all(axis=0)]] = True
        return found

    def add(self, h: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """Insert keys; True where a key was definitely new (its first occurrence)."""
        out = np.empty(len(h), dtype=bool)
        for a in range(0, len(h), CHUNK):
            b = min(a + CHUNK, len(h))
            out[a:b] = self._add_chunk(np.ascontiguousarray(h[a:b, 0]),
                                       np.ascontiguousarray(h[a:b, 1]),
                                       None if rows is None else rows[a:b])
        return out

    def _add_chunk(self, h1: np.ndarray, h2: np.ndarray,
                   rows: np.ndarray | None) -> np.ndarray:
        n = len(h1)
        probes = [_probe(arena, h1, h2, base)
                  for arena, base in zip(self.arenas, self._bases(rows), strict=True)]
        present = probes[0][2].all(axis=0)
        for _, _, got in probes[1:]:
            present |= got.all(axis=0)
        new_idx = _first_occurrences(h1, h2, np.flatnonzero(~present))
        new = np.zeros(n, dtype=bool)
        new[new_idx] = True
        if not new_idx.size:
            return new

        if rows is None:  # one filter: no per-row bookkeeping
            j = int(self.nlayers[0]) - 1
            arena = self.arenas[j]
            if new_idx.size > arena.capacity - arena.counts[0]:
                self._add_spilling(0, h1[new_idx], h2[new_idx])
            else:
                _set_bits(arena, probes[j], new_idx, n)
                arena.counts[0] += new_idx.size
            return new

        key_rows = rows[new_idx]
        over = np.bincount(key_rows, minlength=self.rows) > self._room()
        if over.any():  # some row's newest layer fills up: those rows go key by key
            spill = over[key_rows]
            for row in np.flatnonzero(over):
                sel = new_idx[spill & (key_rows == row)]
                self._add_spilling(int(row), h1[sel], h2[sel])
            new_idx, key_rows = new_idx[~spill], key_rows[~spill]
        top = self.nlayers[key_rows] - 1
        for j, probe in enumerate(probes):
            cols = new_idx if len(probes) == 1 else new_idx[top == j]
            if cols.size:
                _set_bits(self.arenas[j], probe, cols, n)
                self.arenas[j].counts += np.bincount(rows[cols], minlength=self.rows)
        return new

    def _add_spilling(self, row: int, h1: np.ndarray, h2: np.ndarray) -> None:
        """Insert keys known to be new into ``row``, growing it whenever a layer fills."""
        a = 0
        while a < len(h1):
            j = int(self.nlayers[row]) - 1
            arena = self.arenas[j]
            room = arena.capacity - int(arena.counts[row])
            if room <= 0 and self.grow(row):
                continue
            b = len(h1) if room <= 0 else min(len(h1), a + room)  # can't grow: overfill
            base = np.full(b - a, row * arena.words.shape[1], dtype=_U64)
            _set_bits(arena, _probe(arena, h1[a:b], h2[a:b], base), None, b - a)
            arena.counts[row] += b - a
            a = b

    # -- one key at a time (no numpy call overhead) ------------------------------------

    def contains_one(self, h1: int, h2: int, row: int) -> bool:
        for j in range(int(self.nlayers[row])):
            arena = self.arenas[j]
            base, bits = row * arena.m, arena.bits
            if all(bits[base + p] for p in arena.positions(h1, h2)):
                return True
        return False

    def add_one(self, h1: int, h2: int, row: int) -> bool:
        if self.contains_one(h1, h2, row):
            return False
        arena = self.arenas[int(self.nlayers[row]) - 1]
        if arena.counts[row] >= arena.capacity and self.grow(row):
            arena = self.arenas[int(self.nlayers[row]) - 1]
        base, bits = row * arena.m, arena.bits
        for p in arena.positions(h1, h2):
            bits[base + p] = 1
        arena.counts[row] += 1
        return True


def _chunks(keys: Iterable[str | bytes], size: int) -> Iterator[Sequence[str | bytes]]:
    if isinstance(keys, list | tuple):
        for a in range(0, len(keys), size):
            yield keys[a:a + size]
        return
    it = iter(keys)
    while batch := list(islice(it, size)):
        yield batch


class _StackFilter:
    """What a BloomFilter and a ShardedBloom (whose shards share one _Stack) have in
    common: the geometry read off their storage, and the batch API built on each
    class's own ``_add``, ``_contains`` and ``_check_capacity``."""

    _stack: _Stack

    def _add(self, h: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _contains(self, h: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _check_capacity(self) -> None:
        raise NotImplementedError

    def add_many(self, keys: Iterable[str | bytes]) -> np.ndarray:
        """Insert a batch; True where a key was definitely new. A key repeated in the
        batch is new only at its first occurrence."""
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


class BloomFilter(_StackFilter):
    """A Bloom filter over string/bytes keys with vectorized batch operations.

    ``add_many``/``contains_many`` hash a whole batch (one MurmurHash3 per key) and
    test or set all its bits in a few numpy passes; ``add_hashes``/``contains_hashes``
    take precomputed fingerprint halves. Past its planned capacity it grows by
    layers instead of degrading.
    """

    def __init__(self, capacity: int, error_rate: float = 0.01, *, seed: int = 0,
                 growth: int = 2) -> None:
        self._stack = _Stack(1, capacity, error_rate, seed, growth)
        self._row = 0
        self._warn = True

    @classmethod
    def _view(cls, stack: _Stack, row: int) -> BloomFilter:
        """The filter stored in row ``row`` of ``stack`` (a shard of a ShardedBloom)."""
        bf = cls.__new__(cls)
        bf._stack, bf._row, bf._warn = stack, row, False
        return bf

    @classmethod
    def _empty(cls, capacity: int, error_rate: float, seed: int, growth: int,
               layers: int) -> BloomFilter:
        """A filter with ``layers`` empty layers (for loading a snapshot into)."""
        bf = cls(capacity, error_rate, seed=seed, growth=growth)
        for _ in range(layers - 1):
            if not bf._stack.grow(0):
                raise ValueError(f"a filter of this geometry cannot have {layers} layers")
        return bf

    # -- geometry --------------------------------------------------------------------

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

    def _geometry(self) -> dict[str, Any]:
        return {"hash_algo": HASH_ALGO, "seed": self.seed, "m": self.m, "k": self.k,
                "capacity": self.capacity, "error_rate": self.error_rate,
                "growth": self.growth}

    def _layer_words(self, j: int) -> np.ndarray:
        """Layer j's words (a zero-copy, writable view)."""
        return self._stack.arenas[j].words[self._row]

    def _layer_bits(self, j: int) -> bitarray:
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

    def _fills(self) -> list[tuple[int, int, int]]:
        """``(set bits, m, k)`` per layer."""
        return [(self._layer_bits(j).count(), a.m, a.k)
                for j, a in enumerate(self._stack.arenas[:self.layers])]

    def __len__(self) -> int:
        return round(sum(estimate_count(m, k, x) for x, m, k in self._fills()))

    def info(self) -> dict[str, Any]:
        """Geometry and health: fill ratio, estimated count and current false-positive rate."""
        fills = self._fills()
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
        check_geometry(self._geometry(), other._geometry())
        for j in range(other.layers):
            if j >= self.layers and not self._stack.grow(self._row):
                raise ValueError("cannot add a layer to merge into")
            mine, theirs = self._layer_words(j), other._layer_words(j)
            np.bitwise_or(mine, theirs, out=mine)
            arena = self._stack.arenas[j]
            union = estimate_count(arena.m, arena.k, self._layer_bits(j).count())
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
        return (self._geometry() == other._geometry() and self.layers == other.layers
                and all(np.array_equal(self._layer_words(j), other._layer_words(j))
                        for j in range(self.layers)))

    __hash__ = None  # type: ignore[assignment]  # mutable

    def copy(self) -> BloomFilter:
        out = BloomFilter._empty(self.capacity, self.error_rate, self.seed, self.growth,
                                 self.layers)
        for j in range(self.layers):
            out._layer_words(j)[:] = self._layer_words(j)
            out._set_layer_count(j, self._layer_count(j))
        out._warn = self._warn
        return out

    def __repr__(self) -> str:
        return (f"BloomFilter(capacity={self.capacity}, error_rate={self.error_rate}, "
                f"seed={self.seed}, growth={self.growth}, layers={self.layers}, "
                f"count={self.count})")

    # -- persistence -------------------------------------------------------------------

    def save(self, path: str | PathLike[str]) -> None:
        """Write a snapshot file (shard 0 of 1), atomically."""
        from dedup.snapshot import write_snapshot  # snapshot imports this module

        write_snapshot(path, self)

    @classmethod
    def load(cls, path: str | PathLike[str]) -> BloomFilter:
        from dedup.snapshot import read_snapshot  # snapshot imports this module

        return read_snapshot(path)[0]


def check_geometry(a: dict[str, Any], b: dict[str, Any], where: str = "") -> None:
    """Raise GeometryMismatch naming the first field on which ``a`` and ``b`` differ."""
    for field, value in a.items():
        if b.get(field) != value:
            from dedup.snapshot import GeometryMismatch  # snapshot imports this module

            raise GeometryMismatch(f"{where}{field} differs: {value} != {b.get(field)}")


def _split(fp: bytes) -> tuple[int, int]:
    return int.from_bytes(fp[:8], "little"), int.from_bytes(fp[8:], "little")
