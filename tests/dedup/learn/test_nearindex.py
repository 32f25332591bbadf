"""The near-duplicate index answers as a scan of every kept fingerprint would, with the
compiled table (``NearTable`` in dedup/native/_simhash.c) and with the Python one."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.learn.nearindex import NearIndex
from dedup.native import compiled
from tests.dedup.conftest import require_kernel


@pytest.fixture(autouse=True, params=["compiled", "python"])
def near_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test once with the compiled table and once with the Python dicts (an index
    picks its kind when it is made)."""
    if request.param == "python":
        monkeypatch.setattr(compiled, "simhash", None)
    else:
        require_kernel()
    return request.param


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


def test_a_filed_print_near_an_earlier_one_is_kept_behind_it():
    """``add`` files what it is given (a restart's first holders, in commit order), near
    an earlier one or not; a lookup answers the earliest within ``k`` bits."""
    index = NearIndex(3)
    index.add("h", 0, "first")
    index.add("h", 0b1, "second")  # one bit away: filed anyway, after the first
    assert index.find("h", 0b11) == "first"
    assert index.find_or_add("h", 0b1 | 0b111 << 40, "x") == "second"  # only it within 3
    assert len(index) == 2


def test_many_prints_of_one_host_grow_the_tables():
    """Tens of thousands of fingerprints in one group (the compiled tables and arrays
    grow many times): each found again exactly, one bit away, and a far one not."""
    rng = random.Random(5)
    index = NearIndex(3)
    fps = [rng.getrandbits(64) for _ in range(40_000)]
    for i, fp in enumerate(fps):
        index.add("h", fp, i)
    for i in range(0, 40_000, 97):
        fp = fps[i]
        got = index.find("h", fp ^ 1 << rng.randrange(64))
        assert got is not None and (fps[got] ^ fp).bit_count() <= 4  # type: ignore[index]
        assert index.find("h", fp) == min(j for j, other in enumerate(fps)
                                          if (other ^ fp).bit_count() <= 3)
    assert len(index) == 40_000
