"""The layers of a set of Bloom filters of identical geometry, and their batch logic.

Keys are reduced once to a 128-bit MurmurHash3 fingerprint (see
:mod:`dedup.url.fingerprint`); one layer's bits and the testing and setting of a
batch's k bits live in :mod:`dedup.filter.arena`. This module decides which keys go to
which layer: lookups ask each layer in turn about the keys not found yet,
insertions skip keys already present or repeated in the batch and set the rest
in each row's newest layer.

Growth follows the scalable Bloom filter of Almeida et al. (RedisBloom's
"expansion"): when the newest layer has taken ``capacity * growth**i`` new keys,
a layer with ``growth`` times the capacity and a tighter error rate is added
(sizes: :func:`dedup.filter.geometry.layer_geometry`). Every layer hashes with its own
salt mixed into ``h1``, so their false positives are independent.

A :class:`LayerStack` holds the arenas of ``rows`` filters; a plain
BloomFilter owns a one-row stack, a ShardedBloom one stack for all its shards,
so a batch spread over 64 shards is still one pass, not 64 small ones.

Threading: exactly one thread may write a stack; others may read it (a
snapshot thread), and may miss bits being set meanwhile — the ledger's
high-water mark covers those.
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

import numpy as np

from dedup.filter.arena import Arena, Memo, probe, set_bits, test
from dedup.filter.geometry import MAX_LAYERS, Geometry, layer_geometry
from dedup.native import compiled as _compiled

log = logging.getLogger("dedup.filter.bloom")

CHUNK = 8192              # keys per pass: keeps numpy's (k, n) temporaries in L2

_U64 = np.dtype(np.uint64)


def estimate_count(m: int, k: int, set_bits: int) -> float:
    """Swamidass–Baldi estimate of the keys in a layer: ``-m/k ln(1 - X/m)``."""
    x = min(set_bits, m - 1)  # a full layer would be infinite; cap it
    return -m / k * math.log1p(-x / m)


def _first_new(h: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Indexes of the keys of ``h`` not ``present``, each fingerprint at its first
    occurrence only: a batch's definitely-new keys."""
    k = _compiled.kernel
    if k is not None:
        out = np.empty(len(h), dtype=np.intp)
        return out[:k.first_new(np.ascontiguousarray(h), present, out)]
    return _first_occurrences(h[:, 0], h[:, 1], np.flatnonzero(~present))


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
    """A batch probed by :meth:`LayerStack.probe`: the answers, and what
    :meth:`LayerStack.add_probed` needs to set some of its keys right after."""

    h: np.ndarray
    rows: np.ndarray | None
    found: np.ndarray  # may be in the filter (every bit of some layer set)
    memo: Memo | None  # numpy's layer-0 positions, reused to set bits


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
        # (words, row_words, m, k, salt) of each arena, as the compiled probes take them
        # (stack_maybe; SeenCore.view, which keeps their buffers while this tuple is the same):
        # a new tuple when an arena is added, and only then
        self.probe_layers = self._probe_layers()
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
            self.probe_layers = self._probe_layers()
        return self.arenas[j]

    def _probe_layers(self) -> tuple[tuple[np.ndarray, int, int, int, int], ...]:
        return tuple((a.flat, a.words.shape[1], a.m, a.k, a.salt) for a in self.arenas)

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

    def contains(self, h: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """For each key of ``h`` (row ``rows[i]``, or row 0 if None): in any layer?"""
        out = np.empty(len(h), dtype=bool)
        for a in range(0, len(h), CHUNK):
            b = min(a + CHUNK, len(h))
            out[a:b] = self._contains_chunk(h[a:b], None if rows is None else rows[a:b])
        return out

    def _contains_chunk(self, h: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        found = test(self.arenas[0], h, rows)
        for j in range(1, len(self.arenas)):
            # later layers only for keys not found yet, in rows that have layer j
            ask = ~found if rows is None else ~found & (self.nlayers[rows] > j)
            idx = np.flatnonzero(ask)
            if idx.size:
                found[idx[test(self.arenas[j], h, rows, idx)]] = True
        return found

    def probe(self, h: np.ndarray, rows: np.ndarray | None) -> Probed:
        """:meth:`contains` for a page-sized batch that is then partly added: the
        seen-test asks about a page's keys, confirms the maybes, and inserts the new
        ones, and numpy probing those twice cost as much as everything else the
        filter did."""
        if len(self.arenas) > 1 or len(h) > CHUNK:
            return Probed(h, rows, self.contains(h, rows), None)
        found, memo = probe(self.arenas[0], h, rows)
        return Probed(h, rows, found, memo)

    def add_probed(self, p: Probed, idx: np.ndarray) -> None:
        """Insert keys ``idx`` of a batch probed just before (nothing added since).

        Keys the probe found are skipped, as :meth:`add` would; ``idx`` must not name
        one fingerprint twice (the seen-test's keys are distinct)."""
        cols = idx[~p.found[idx]]
        if not cols.size:
            return
        arena = self.arenas[0]
        # one layer (arenas only ever grow, so the probe saw one too) and no row can
        # fill up (the fullest row takes them all)
        if len(self.arenas) == 1 and int(arena.counts.max()) + cols.size <= arena.capacity:
            set_bits(arena, p.h, p.rows, cols, p.memo)
            if p.rows is None:
                arena.counts[0] += cols.size
            else:
                np.add.at(arena.counts, p.rows[cols], 1)
            return
        # a row fills up (or the filter has grown layers): the general path
        self.add(p.h[cols], None if p.rows is None else p.rows[cols])

    def add(self, h: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """Insert keys; True where a key was definitely new (its first occurrence)."""
        out = np.empty(len(h), dtype=bool)
        for a in range(0, len(h), CHUNK):
            b = min(a + CHUNK, len(h))
            out[a:b] = self._add_chunk(h[a:b], None if rows is None else rows[a:b])
        return out

    def _add_chunk(self, h: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        n = len(h)
        probes = [probe(arena, h, rows) for arena in self.arenas]
        present = probes[0][0]
        for found, _ in probes[1:]:
            present |= found
        new_idx = _first_new(h, present)
        new = np.zeros(n, dtype=bool)
        new[new_idx] = True
        if not new_idx.size:
            return new

        if rows is None:  # one filter: no per-row bookkeeping
            j = int(self.nlayers[0]) - 1
            arena = self.arenas[j]
            if new_idx.size > arena.capacity - arena.counts[0]:
                self._add_spilling(0, h[new_idx])
            else:
                set_bits(arena, h, None, new_idx, probes[j][1])
                arena.counts[0] += new_idx.size
            return new

        key_rows = rows[new_idx]
        over = np.bincount(key_rows, minlength=self.rows) > self._room()
        if over.any():  # some row's newest layer fills up: those rows go key by key
            spill = over[key_rows]
            for row in np.flatnonzero(over):
                self._add_spilling(int(row), h[new_idx[spill & (key_rows == row)]])
            new_idx, key_rows = new_idx[~spill], key_rows[~spill]
        top = self.nlayers[key_rows] - 1
        for j, (_, memo) in enumerate(probes):
            cols = new_idx if len(probes) == 1 else new_idx[top == j]
            if cols.size:
                set_bits(self.arenas[j], h, rows, cols, memo)
                self.arenas[j].counts += np.bincount(rows[cols], minlength=self.rows)
        return new

    def _add_spilling(self, row: int, h: np.ndarray) -> None:
        """Insert keys known to be new into ``row``, growing it whenever a layer fills."""
        a = 0
        while a < len(h):
            j = int(self.nlayers[row]) - 1
            arena = self.arenas[j]
            room = arena.capacity - int(arena.counts[row])
            if room <= 0 and self.grow(row):
                continue
            b = len(h) if room <= 0 else min(len(h), a + room)  # can't grow: overfill
            set_bits(arena, h[a:b], np.full(b - a, row, dtype=np.intp))
            arena.counts[row] += b - a
            a = b

    def maybe_in_rows(self, fps: bytes | bytearray) -> list[int]:
        """Indexes of the 16-byte fingerprints in ``fps`` that may be held, each in
        row :func:`~dedup.url.fingerprint.shard_of` its h1 (``rows`` of them): the
        seen-test's probe of a page's dozen keys as one compiled call, where numpy
        paid a fixed cost per step (rows, each layer) and Python ~2 µs a key."""
        kernel = _compiled.kernel
        if kernel is not None:
            return kernel.stack_maybe(fps, self.rows, self.probe_layers, self.nlayers)
        h = np.frombuffer(fps, dtype="<u8").reshape(-1, 2)
        rows = ((h[:, 0] >> np.uint64(32)) * np.uint64(self.rows)) >> np.uint64(32)
        return np.flatnonzero(self.contains(h, rows.astype(np.intp))).tolist()

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
