"""One Bloom layer of a set of filters: its words, and testing or setting the k
bits of a batch of keys in it.

Storage: the layer of ``rows`` filters of identical geometry is one 2-D uint64
array (one row per filter, zero-initialised by ``calloc`` so untouched rows
cost no memory).

Key i's positions in a layer are Kirsch–Mitzenmacher double hashing,
``(h1 + salt + j*h2) mod m`` for ``j < k``, in uint64 wraparound arithmetic,
inside row ``rows[i]`` of the layer's arena (row 0 if ``rows`` is None).

Two implementations give the same bits. The compiled kernel
(``dedup/native/_kernel.c``) walks the keys one by one with each key's positions in
registers: no temporaries, no fixed cost per numpy call, the memory traffic of
the bits themselves. The numpy code is the fallback where the kernel did not
build: it computes a batch's positions as ``(k, n)`` arrays, gathers the k
words of every key at once, and sets bits with fancy ``|=`` plus a repair pass
(see :func:`_set_bits`). Its positions can be kept from a test for the set that
follows (a :data:`Memo`), which the kernel does not need.
"""

from __future__ import annotations

import numpy as np
from bitarray import bitarray

from dedup.filter.geometry import MAX_K, LayerGeometry
from dedup.native import compiled as _compiled

__all__ = ["Arena", "Memo", "probe", "set_bits", "test"]

_M64 = 2**64 - 1
_GOLDEN = 0x9E3779B97F4A7C15

_SMALL_SET = 512          # bit positions up to which np.bitwise_or.at sets them (~20 ns each)
_STEPS = np.arange(MAX_K, dtype=np.uint64)[:, None]
_ONE = np.uint64(1)
_SIX = np.uint64(6)
_LOW6 = np.uint64(63)
_U64 = np.dtype(np.uint64)

Memo = tuple[np.ndarray, np.ndarray, np.ndarray]  # numpy's (word index, bit index, bit value)


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
        """The k bit positions of one key (pure-Python twin of the batch code)."""
        x = (h1 + self.salt) & _M64
        m = self.m
        return [((x + i * h2) & _M64) % m for i in range(self.k)]


def test(arena: Arena, h: np.ndarray, rows: np.ndarray | None,
         sel: np.ndarray | None = None) -> np.ndarray:
    """For keys ``sel`` of ``h`` (all if None): is every bit of theirs set?"""
    return probe(arena, h, rows, sel)[0]


def probe(arena: Arena, h: np.ndarray, rows: np.ndarray | None,
          sel: np.ndarray | None = None) -> tuple[np.ndarray, Memo | None]:
    """:func:`test`, plus what :func:`set_bits` may reuse for the same keys
    (None with the kernel, which recomputes positions faster than numpy reuses them)."""
    k = _compiled.kernel
    if k is not None:
        out = np.empty(len(h) if sel is None else len(sel), dtype=bool)
        k.layer_test(arena.flat, _c(h), _c(rows), _c(sel), arena.words.shape[1], arena.m,
                     arena.k, arena.salt, out)
        return out, None
    if sel is not None:
        h = h[sel]
        rows = None if rows is None else rows[sel]
    memo = _positions(arena, h[:, 0], h[:, 1], _base(arena, rows))
    return memo[2].all(axis=0), memo


def set_bits(arena: Arena, h: np.ndarray, rows: np.ndarray | None,
             cols: np.ndarray | None = None, memo: Memo | None = None) -> None:
    """Set every bit of keys ``cols`` of ``h`` (all if None). ``memo``: :func:`probe`'s
    of all of ``h``, for numpy to reuse."""
    k = _compiled.kernel
    if k is not None:
        k.layer_set(arena.flat, _c(h), _c(rows), _c(cols), arena.words.shape[1], arena.m,
                    arena.k, arena.salt)
        return
    if memo is None:
        if cols is not None:
            h = h[cols]
            rows = None if rows is None else rows[cols]
        memo, cols = _positions(arena, h[:, 0], h[:, 1], _base(arena, rows)), None
    _set_bits(arena.flat, memo, cols)


def _c(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.ascontiguousarray(a)


def _base(arena: Arena, rows: np.ndarray | None) -> np.ndarray | None:
    return None if rows is None else rows.astype(_U64) * np.uint64(arena.words.shape[1])


def _positions(arena: Arena, h1: np.ndarray, h2: np.ndarray,
               base: np.ndarray | None) -> Memo:
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


def _set_bits(flat: np.ndarray, memo: Memo, cols: np.ndarray | None) -> None:
    """Set the bits of the probed keys ``cols`` (all of them if None).

    ``flat[idx] |= mask`` alone loses bits: when positions share a word, only the
    last write of that word survives. ``np.bitwise_or.at`` is exact but has no
    fast path (~18 ns per element). So: write with fancy indexing, then rewrite
    just the positions whose bit did not stick, until none is missing. Every
    pass makes at least one write per distinct word stick and earlier passes'
    bits are never overwritten, so it ends after at most (largest number of
    positions sharing one word) passes — nearly always one or two.
    Bits already set are rewritten rather than filtered out: that is cheaper."""
    widx, bit, _ = memo
    if cols is not None and cols.size < widx.shape[1]:
        widx, bit = np.take(widx, cols, axis=1), np.take(bit, cols, axis=1)
    mask = np.left_shift(_ONE, bit).reshape(-1)
    widx = widx.reshape(-1)
    if widx.size <= _SMALL_SET:  # a page's keys: one exact call beats the passes' calls
        np.bitwise_or.at(flat, widx, mask)
        return
    while widx.size:
        flat[widx] |= mask
        lost = (flat[widx] & mask) == 0
        widx, mask = widx[lost], mask[lost]
