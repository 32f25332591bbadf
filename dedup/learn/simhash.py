"""A page's near-duplicate fingerprint: the 64-bit SimHash of its main text.

Why SimHash (Charikar, STOC 2002; Manku, Jain, Das Sarma, WWW 2007, 8B pages):
two pages whose texts share most of their word shingles get fingerprints a few
bits apart, so "the same content under dynamic noise" (a timestamp, a session
token, a rotating teaser: bytes that make the exact payload digest differ) is
found by a Hamming-distance test on 8 bytes a page, and that test can be
answered without a scan (``dedup.learn.nearindex``). Manku et al. found 64 bits
and a distance of at most 3 right for web pages; ``[learn] near_distance``.

The features are shingles of ``shingle`` consecutive words (``[learn] shingle``,
3): word order counts, so a page is not a near-duplicate of another with the same
vocabulary, and a reordered listing keeps most of its shingles. The exact
definition of a word, of a shingle's hash and of the vote is in
``dedup/native/_simhash.c``; this module computes the same bits in Python where that
kernel did not build (slower: a few hundred microseconds a page), and the tests
compare the two.

``Shingles`` is one host's set of the shingles its pages had (of ``NOVEL_SHINGLE``
words): ``print`` also says how many of a page's shingles are new to the host, what
a trap budget asks (``dedup.learn.novelty``): an empty calendar month or a facet
combination brings a few, a page of content dozens. The compiled set holds 4 bytes a shingle (at
most 3/4 full), up to ``limit`` of them; past that a shingle it does not hold
counts as new (a full set makes pages look newer, never older).
"""

from __future__ import annotations

import re

import mmh3
import numpy as np

from dedup.native import compiled

__all__ = ["MAX_SHINGLE", "NOVEL_SHINGLE", "SHINGLES_LIMIT", "Shingles", "distance",
           "text_print"]

MAX_SHINGLE = 8
_WORD = re.compile(rb"[0-9A-Za-z\x80-\xff]+")
_WORD_BYTES = 64
_MASK = (1 << 64) - 1
_BITS = np.arange(64, dtype=np.uint64)
SHINGLES_LIMIT = 1 << 22  # shingles a host's set holds (16 MiB of table when full)
# words in the shingles a host's set keeps: wider than the fingerprint's three, so that
# pages of a small vocabulary (19 words: 6,859 three-word shingles in all) still bring
# shingles of their own, while a page that differs from another by a word or two (a
# calendar month) brings a handful
NOVEL_SHINGLE = 5


def _rot(x: int, r: int) -> int:
    r &= 63
    return ((x << r) | (x >> (64 - r))) & _MASK if r else x


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK
    return k ^ (k >> 33)


def _shingle(hashes: list[int]) -> int:
    f = 0
    for j, h in enumerate(hashes):
        f ^= _rot(h, 17 * j)
    return _fmix(f ^ len(hashes))


def _features(data: bytes, w: int) -> list[int]:
    words = [mmh3.hash64(t[:_WORD_BYTES].lower(), 0, signed=False)[0]
             for t in _WORD.findall(data)]
    if not words:
        return []
    if len(words) < w:
        return [_shingle(words)]
    return [_shingle(words[i:i + w]) for i in range(len(words) - w + 1)]


def _vote(feats: list[int]) -> int:
    if not feats:
        return 0
    arr = np.array(feats, dtype=np.uint64)
    ones = ((arr[:, None] >> _BITS) & np.uint64(1)).sum(axis=0)
    out = 0
    for b in np.flatnonzero(2 * ones > len(feats)).tolist():
        out |= 1 << b
    return out


def _python_print(data: bytes, w: int) -> tuple[int, int]:
    feats = _features(data, w)
    return _vote(feats), len(feats)


def _data(text: str | bytes, shingle: int) -> bytes:
    if not 1 <= shingle <= MAX_SHINGLE:
        raise ValueError(f"shingle must be 1 to {MAX_SHINGLE} words, not {shingle!r}")
    return text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)


def text_print(text: str | bytes, shingle: int = 3) -> tuple[int, int]:
    """``(fingerprint, shingles)`` of a text (a ``str``, or its UTF-8 bytes): the
    64-bit SimHash of its ``shingle``-word shingles, and how many there were (0: no
    word at all; then the fingerprint is 0 and means nothing)."""
    data = _data(text, shingle)
    kernel = compiled.simhash  # looked up at each call: the tests switch it off
    if kernel is not None:
        return kernel.simhash(data, shingle)
    return _python_print(data, shingle)


class _PythonShingles:
    """The compiled ``Shingles``' answers, with a Python set."""

    def __init__(self, limit: int) -> None:
        self.keys: set[int] = set()
        self.limit = limit

    def print(self, text: str | bytes, w: int, wset: int) -> tuple[int, int, int, int]:
        data = _data(text, w)
        feats = _features(data, w)
        keys = self.keys
        new = 0
        others = _features(data, wset)
        for f in others:
            k = (f >> 32) | 1
            if k not in keys:
                new += 1
                if len(keys) < self.limit:
                    keys.add(k)
        return _vote(feats), len(feats), new, len(others)

    def __len__(self) -> int:
        return len(self.keys)


class Shingles:
    """One host's shingles; ``print`` fingerprints a page's text and counts its
    shingles new to the host (adding them)."""

    __slots__ = ("_set",)

    def __init__(self, limit: int = SHINGLES_LIMIT) -> None:
        kernel = compiled.simhash
        self._set = kernel.Shingles(limit) if kernel is not None else _PythonShingles(limit)

    def print(self, text: str | bytes, shingle: int = 3, novel: int = NOVEL_SHINGLE
              ) -> tuple[int, int, int, int]:
        """``(fingerprint, shingles, new, counted)``: ``text_print``'s, then of the
        text's ``novel``-word shingles how many this set did not hold (now added) and
        how many there were."""
        if not 1 <= shingle <= MAX_SHINGLE:
            raise ValueError(f"shingle must be 1 to {MAX_SHINGLE} words, not {shingle!r}")
        if not 1 <= novel <= MAX_SHINGLE:
            raise ValueError(f"shingle must be 1 to {MAX_SHINGLE} words, not {novel!r}")
        # the text as it is: the kernel reads a str's UTF-8 without a copy
        return self._set.print(text, shingle, novel)  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self._set)


def distance(a: int, b: int) -> int:
    """Bits that differ between two fingerprints (Hamming distance)."""
    return (a ^ b).bit_count()
