"""RecentKeys: a bounded set whose batch methods answer like its one-key ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.recent import RecentKeys

pytestmark = pytest.mark.usefixtures("lookup_impl")  # compiled loop and Python alike


def test_first_unknown_keeps_first_values_in_order_and_counts_held_pairs():
    r = RecentKeys(100)
    r.update(["a", "b"])
    pairs = [("1", "c"), ("2", "a"), ("3", "c"), ("4", "d"), ("5", "b"), ("6", "a")]
    first, hits = r.first_unknown(pairs)
    assert list(first.items()) == [("c", "1"), ("d", "4")]
    assert hits == 3  # a, b, a: every held pair counts


def test_first_unknown_promotes_old_keys_so_they_survive_the_next_swap():
    r = RecentKeys(4)  # generations of 2
    r.update(["a", "b"])  # full: becomes the old generation
    assert len(r) == 2
    first, hits = r.first_unknown([("x", "a"), ("y", "a")])
    assert first == {} and hits == 2
    r.update(["c", "d"])  # a was promoted: young {a, c, d} swaps; b is dropped
    assert "a" in r and "b" not in r


@settings(max_examples=200, deadline=None)
@given(size=st.integers(0, 8),
       batches=st.lists(st.tuples(st.booleans(), st.lists(
           st.one_of(st.sampled_from("abcdefghij"), st.none()), max_size=8)), max_size=20))
def test_batch_methods_answer_like_one_key_at_a_time(size, batches):
    """first_unknown is ``key in r`` pair by pair (promotions and swaps midway
    included); a None (a rejected link) is skipped."""
    batch, single = RecentKeys(size), RecentKeys(size)
    for is_update, keys in batches:
        if is_update:
            batch.update([k for k in keys if k is not None])
            single.update([k for k in keys if k is not None])
            continue
        pairs = [None if k is None else (str(i), k) for i, k in enumerate(keys)]
        first, hits = batch.first_unknown(pairs)
        want: dict[str, str] = {}
        want_hits = 0
        for v, k in (p for p in pairs if p is not None):
            if k in single:
                want_hits += 1
            elif k not in want:
                want[k] = v
        assert (list(first.items()), hits) == (list(want.items()), want_hits)


def test_size_zero_holds_nothing():
    r = RecentKeys(0)
    r.update(["a"])
    assert r.first_unknown([("1", "a")]) == ({"a": "1"}, 0)


def test_update_holds_the_batch():
    r = RecentKeys(20)
    r.update("abcdef")
    assert len(r) == 6
    assert r.first_unknown([(k, k) for k in "abcdefz"]) == ({"z": "z"}, 6)


def test_first_unknown_refuses_what_is_not_a_pair():
    with pytest.raises((TypeError, ValueError)):
        RecentKeys(10).first_unknown([("1", "a"), ("2",)])
