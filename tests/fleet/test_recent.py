"""RecentKeys: a bounded set with two generations (the fleet relay's cache)."""

from __future__ import annotations

from crawler.wire.recent import RecentKeys


def test_keys_in_steady_use_survive_a_swap():
    r = RecentKeys(4)  # generations of 2
    r.add("a")
    r.add("b")  # full: becomes the old generation
    assert len(r) == 2
    assert "a" in r  # moved back to the young generation
    r.add("c")  # young {a, c} swaps: b is dropped
    assert "a" in r and "c" in r and "b" not in r


def test_size_zero_holds_nothing_and_size_one_holds_one():
    r = RecentKeys(0)
    r.add("a")
    assert "a" not in r and len(r) == 0
    one = RecentKeys(1)
    one.add("a")
    assert "a" in one
    one.add("b")
    assert "b" in one
