"""The bits of a set of Bloom filters of identical geometry, and the vectorized probes.

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
a layer with ``growth`` times the capacity and a tighter error rate is added
(sizes: :func:`dedup.geometry.layer_geometry`). Every layer hashes with its own
salt mixed into ``h1``, so their false positives are independent.

Storage: a layer's bits for a set of filters of identical geometry live in one
2-D uint64 array (an :class:`Arena`: one row per filter, zero-initialised by
``calloc`` so untouched rows cost no memory). A :class:`LayerStack` holds the
arenas of ``rows`` filters; a plain BloomFilter owns a one-row stack, a
ShardedBloom one stack for all its shards, so a batch spread over 64 shards is
still one vectorized pass, not 64 small ones.

Threading: exactly one thread may write a stack; others may read it (a
snapshot thread), and may miss bits being set meanwhile — the ledger's
high-water mark covers those.
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

import numpy as np
from bitarray import bitarray

from dedup.geometry import MAX_K, MAX_LAYERS, Geometry, LayerGeometry, layer_geometry

log = logging.getLogger("dedup.bloom")

CHUNK = 8192              # keys per vectorized pass: keeps the (k, n) temporaries in L2
_SMALL_SET = 512          # bit positions up to which np.bitwise_or.at sets them (~20 ns each)

_M64 = 2**64 - 1
_GOLDEN = 0x9E3779B97F4A7C15
_STEPS = np.arange(MAX_K, dtype=np.uint64)[:, None]
_ONE = np.uint64(1)
_SIX = np.uint64(6)
_LOW6 = np.uint64(63)
_U64 = np.dtype(np.uint64)


def estimate_count(m: int, k: int, set_bits: int) -> float:
    """Swamidass–Baldi estimate of the keys in a layer: ``-m/k ln(1 - X/m)``."""
    x = min(set_bits, m - 1)  # a full layer would be infinite; cap it
    return -m / k * math.log1p(-x / m)


class Arena:
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


def _probe(arena: Arena, h1: np.ndarray, h2: np.ndarray,
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


def _set_bits(arena: Arena, probe: tuple[np.ndarray, np.ndarray, np.ndarray],
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
    if widx.size <= _SMALL_SET:  # a page's keys: one exact call beats the passes' calls
        np.bitwise_or.at(flat, widx, mask)
        return
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


class Probed(NamedTuple):
    """A batch probed by :meth:`LayerStack.probe`: the answers, and the bit positions
    that :meth:`LayerStack.add_probed` sets without probing again."""

    h1: np.ndarray
    h2: np.ndarray
    rows: np.ndarray | None
    found: np.ndarray  # may be in the filter (every bit of some layer set)
    bits: tuple[np.ndarray, np.ndarray, np.ndarray] | None  # layer 0's probe; None: >1 layer


class LayerStack:
    """The layers of ``rows`` filters sharing capacity, error rate, seed and growth.

    Row r's filter has ``nlayers[r]`` layers; arena j exists once any row needs
    it. All batch logic lives here so a single filter (one row) and a sharded
    filter (one row per shard, ``rows`` chosen per key) run the same code.
    """

    def __init__(self, rows: int, geometry: Geometry) -> None:
        """``rows`` filters, each of ``geometry.capacity`` keys (its shard count aside)."""
        self.rows = rows
        self.geometry = geometry
        self.capacity = int(geometry.capacity)
        self.error_rate = float(geometry.error_rate)
        self.seed = int(geometry.seed)
        self.growth = int(geometry.growth)
        self.arenas = [Arena(layer_geometry(self.capacity, self.error_rate, self.growth, 0),
                             rows)]
        self.nlayers = np.ones(rows, dtype=np.intp)
        self._full_logged = False

    # -- layers ------------------------------------------------------------------

    def arena(self, j: int) -> Arena | None:
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
            self.arenas.append(Arena(geo, self.rows))
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

    def probe(self, h: np.ndarray, rows: np.ndarray | None) -> Probed:
        """:meth:`contains` for a page-sized batch that is then partly added: the
        seen-test asks about a page's keys, confirms the maybes, and inserts the new
        ones, and probing those twice cost as much as everything else the filter did."""
        h1, h2 = h[:, 0], h[:, 1]
        if len(self.arenas) > 1 or len(h1) > CHUNK:
            return Probed(h1, h2, rows, self.contains(h, rows), None)
        arena = self.arenas[0]
        base = None if rows is None else rows.astype(_U64) * np.uint64(arena.words.shape[1])
        bits = _probe(arena, h1, h2, base)
        return Probed(h1, h2, rows, bits[2].all(axis=0), bits)

    def add_probed(self, p: Probed, idx: np.ndarray) -> None:
        """Insert keys ``idx`` of a batch probed just before (nothing added since).

        Keys the probe found are skipped, as :meth:`add` would; ``idx`` must not name
        one fingerprint twice (the seen-test's keys are distinct)."""
        cols = idx[~p.found[idx]]
        if not cols.size:
            return
        arena = self.arenas[0]
        # no row can fill up (the fullest row takes them all) and no layer was added
        if (p.bits is not None and len(self.arenas) == 1
                and int(arena.counts.max()) + cols.size <= arena.capacity):
            _set_bits(arena, p.bits, cols, len(p.h1))
            if p.rows is None:
                arena.counts[0] += cols.size
            else:
                np.add.at(arena.counts, p.rows[cols], 1)
            return
        # a row fills up (or the filter has grown layers): the general path
        self.add(np.stack([p.h1[cols], p.h2[cols]], axis=1),
                 None if p.rows is None else p.rows[cols])

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
