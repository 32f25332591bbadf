"""The near-duplicate index answers as a scan of every kept fingerprint would."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.learn.nearindex import NearIndex


def _scan(kept: list[tuple[int, int]], fp: int, k: int) -> int | None:
    for ident, other in kept:
        if (other ^ fp).bit_count() <= k:
            return ident
    return None


def _flip(rng: random.Random, fp: int, bits: int) -> int:
    for b in rng.sample(range(64), bits):
        fp ^= 1 << b
    return fp


@pytest.mark.parametrize("k", [0, 1, 3, 6])
def test_the_first_holder_within_k_bits_as_a_scan_finds_it(k):
    rng = random.Random(k)
    index = NearIndex(k)
    kept: list[tuple[int, int]] = []
    roots = [rng.getrandbits(64) for _ in range(60)]
    for i in range(3000):
        fp = _flip(rng, rng.choice(roots), rng.randint(0, k + 2))
        want = _scan(kept, fp, k)
        got = index.find_or_add("h", fp, i)
        assert got == want
        if want is None:
            kept.append((i, fp))
    assert len(index) == len(kept)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, (1 << 64) - 1), max_size=40), st.integers(0, 5))
def test_any_fingerprints(fps, k):
    index = NearIndex(k)
    kept: list[tuple[int, int]] = []
    for i, fp in enumerate(fps):
        want = _scan(kept, fp, k)
        assert index.find_or_add("h", fp, i) == want
        if want is None:
            kept.append((i, fp))


def test_groups_are_apart_and_the_distance_is_checked():
    index = NearIndex(3)
    index.add("a", 0, "a0")
    assert index.find("b", 0) is None  # another host
    assert index.find("a", 0b111) == "a0"
    assert index.find("a", 0b1111) is None  # four bits: too far
    with pytest.raises(ValueError, match="distance"):
        NearIndex(16)
